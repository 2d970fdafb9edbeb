package daemon

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/smtd/smtd/config"
	"github.com/smtd/smtd/dataset"
)

// tinyWordsPipeline embeds every word seen once, solving after every
// minibatch.
func tinyWordsPipeline() config.Pipeline {
	p := config.DefaultPipeline(config.Text, "words")
	p.SMT.Dim = 2
	p.SMT.SolveEvery = 1
	p.Text.MinCount = 1
	p.Text.Vocabulary = 64
	p.Batch.Size = 4
	return p
}

// The neighbours endpoint quotes at most maxEcho bytes of a word it
// refuses, whatever the size of the request.
func TestNeighboursErrorIsShort(t *testing.T) {
	d := startDaemon(t, testConfig(t, tinyWordsPipeline()))
	nc := connect(t, d.ClientURL())
	for range 4 {
		if err := nc.Publish("smtd.in.words", []byte("the cat sat on the mat")); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, time.Minute, "sentences learned", func() bool { return pipelineStatus(d, "words").Learned == 4 })
	request(t, nc, "smtd.control.checkpoint", nil, nil)

	long := strings.Repeat("a", 100<<10)
	for _, tc := range []struct {
		name, body, code string
	}{
		{"unseen word", long, "404"},
		{"two words", long + " " + long, "400"},
		{"json", `{"word": "` + long + ` b"}`, "400"},
	} {
		m := request(t, nc, "smtd.neighbours.words", []byte(tc.body), nil)
		desc := m.Header.Get("Nats-Service-Error")
		if code := m.Header.Get("Nats-Service-Error-Code"); code != tc.code {
			t.Errorf("%s: code %q (%.100s), want %s", tc.name, code, desc, tc.code)
		}
		if len(desc) > 200 || len(m.Data) > 200 {
			t.Errorf("%s: error of %d bytes, body of %d: %.300s", tc.name, len(desc), len(m.Data), desc)
		}
		if !strings.Contains(desc, `"`+strings.Repeat("a", maxEcho)+`"…`) {
			t.Errorf("%s: error %q does not quote the word's start", tc.name, desc)
		}
	}
}

// Messages of one 100 KB token each neither grow the vocabulary past its
// byte bound nor the checkpoint: by default they are rejected as
// token_too_long; with longer tokens allowed, the rarest words give way
// to stay within text.vocabulary_bytes.
func TestLongTokensStayBounded(t *testing.T) {
	const messages = 200
	for _, tc := range []struct {
		name        string
		tokenBytes  int // text.max_token_bytes; 0: the default
		vocabBytes  int // text.vocabulary_bytes; 0: the default
		wantLearned int64
	}{
		{name: "default rejects", wantLearned: 0},
		{name: "byte bound evicts", tokenBytes: 200 << 10, vocabBytes: 1 << 20, wantLearned: messages},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := tinyWordsPipeline()
			p.Text.Vocabulary = 1000
			p.Text.MaxPairs = 1000
			if tc.tokenBytes > 0 {
				p.Text.MaxTokenBytes, p.Text.VocabularyBytes = tc.tokenBytes, tc.vocabBytes
			}
			cfg := testConfig(t, p)
			d := startDaemon(t, cfg)
			nc := connect(t, d.ClientURL())
			for i := range messages {
				word := strings.Repeat(string(rune('a'+i%26)), 100<<10-8) + fmt.Sprintf("%08d", i)
				if err := nc.Publish("smtd.in.words", []byte(word)); err != nil {
					t.Fatal(err)
				}
			}
			waitFor(t, time.Minute, "messages handled", func() bool {
				st := pipelineStatus(d, "words")
				return st.Learned+st.Rejected == messages
			})
			st := pipelineStatus(d, "words")
			if st.Learned != tc.wantLearned || st.ByReason[ReasonTokenTooLong] != messages-tc.wantLearned {
				t.Fatalf("learned %d, rejected %v; want %d learned", st.Learned, st.ByReason, tc.wantLearned)
			}
			request(t, nc, "smtd.control.checkpoint", nil, nil)
			model := pipelineStatus(d, "words").Model
			bytes, _ := model["vocabulary_bytes"].(int)
			bound := p.Text.VocabularyBytes
			if model["vocabulary_max_bytes"] != bound || bytes > bound {
				t.Errorf("vocabulary of %d bytes, bound %v; want at most %d", bytes, model["vocabulary_max_bytes"], bound)
			}
			if tc.wantLearned > 0 && bytes < bound/2 {
				t.Errorf("vocabulary of %d bytes: the long words were not learned", bytes)
			}
			files, err := filepath.Glob(filepath.Join(d.checkpointDir("words"), "*"))
			if err != nil || len(files) == 0 {
				t.Fatalf("no checkpoint files: %v", err)
			}
			for _, f := range files {
				fi, err := os.Stat(f)
				if err != nil {
					t.Fatal(err)
				}
				// The vocabulary, plus the statistics of 1000 slots and
				// 1000 pairs.
				if limit := int64(bound + 256<<10); fi.Size() > limit {
					t.Errorf("checkpoint %s of %d bytes > %d", filepath.Base(f), fi.Size(), limit)
				}
			}
		})
	}
}

// A checkpoint written under a larger byte bound is restored within the
// configured one: the rarest words go, their statistics are reset, and
// the embeddings are solved again before they are used.
func TestWordModelRestoresWithinByteBound(t *testing.T) {
	p := wordsPipeline()
	var batch []sample
	for _, m := range readStream(t, "brown-2000.smtdrec")[:500] {
		batch = append(batch, sample{tokens: dataset.Tokenize(string(m.Data))})
	}
	a := newModel(&p, rand.NewPCG(1, 2)).(*textModel)
	if _, err := a.learn(batch); err != nil {
		t.Fatal(err)
	}
	if err := a.flush(); err != nil {
		t.Fatal(err)
	}
	secs, err := a.sections()
	if err != nil {
		t.Fatal(err)
	}
	small := p
	small.Text.VocabularyBytes = a.vocab.Bytes() / 2
	b := newModel(&small, rand.NewPCG(1, 2)).(*textModel)
	if err := b.restore(secs); err != nil {
		t.Fatal(err)
	}
	if b.vocab.Bytes() > small.Text.VocabularyBytes || b.vocab.Len() >= a.vocab.Len() {
		t.Fatalf("restored %d words in %d bytes, bound %d; checkpoint had %d words", b.vocab.Len(), b.vocab.Bytes(), small.Text.VocabularyBytes, a.vocab.Len())
	}
	if b.solved != nil || b.sinceSolve == 0 {
		t.Error("embeddings of evicted words kept")
	}
	for id := range b.vocab.Slots() {
		if b.vocab.Word(id) == "" && b.stats.Count(id) != 0 {
			t.Fatalf("free slot %d keeps a count of %v", id, b.stats.Count(id))
		}
	}
	if _, err := b.learn(batch); err != nil {
		t.Fatal(err)
	}
	if err := b.flush(); err != nil || b.solved == nil {
		t.Fatalf("no solve after restore: %v", err)
	}
}

// A token longer than text.max_token_bytes, after lowercasing, rejects
// its message.
func TestDecodeTokenTooLong(t *testing.T) {
	p := config.DefaultPipeline(config.Text, "words")
	p.Text.MaxTokenBytes = 8
	for _, tc := range []struct {
		text string
		ok   bool
	}{
		{"short words only", true},
		{"exactly abcdefgh", true},
		{"ninechars here", false},
		{"ok " + strings.Repeat("é", 5), false}, // 10 bytes
	} {
		_, err := decode(&p, nil, []byte(tc.text))
		var ie *InputError
		switch {
		case tc.ok && err != nil:
			t.Errorf("%q: %v", tc.text, err)
		case !tc.ok && (!errors.As(err, &ie) || ie.Reason != ReasonTokenTooLong):
			t.Errorf("%q: error %v, want %s", tc.text, err, ReasonTokenTooLong)
		}
	}
}
