package daemon

import (
	"bytes"
	"encoding/json"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/smtd/smtd/config"
	"github.com/smtd/smtd/dataset"
)

// wordsPipeline is the default text pipeline with small embeddings, solved
// only before checkpoints.
func wordsPipeline() config.Pipeline {
	p := config.DefaultPipeline(config.Text, "words")
	p.SMT.Dim = 16
	p.SMT.SolveEvery = 1 << 20
	p.Text.MinCount = 5
	p.Text.Vocabulary = 8000
	return p
}

// Word embeddings learned from a text stream: after 2000 recorded Brown
// sentences and a checkpoint (which solves), the neighbours endpoint
// answers with k distinct embedded words by decreasing cosine and the
// model version, refuses unknown words and bad requests, every message's
// output is the normalised mean of its words' embeddings, and the whole
// vocabulary embedding is published in numbered chunks.
func TestWordEmbeddingsAndNeighbours(t *testing.T) {
	p := wordsPipeline()
	d := startDaemon(t, testConfig(t, p))
	nc := connect(t, d.ClientURL())
	vocabSub := subscribe(t, nc, "smtd.out.words.vocabulary")
	n := replayFile(t, nc, "brown-2000.smtdrec", "")
	waitFor(t, time.Minute, "sentences learned", func() bool { return pipelineStatus(d, "words").Learned == int64(n) })

	var rep NeighboursReply
	m, err := nc.Request("smtd.neighbours.words", []byte("the"), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if m.Header.Get("Nats-Service-Error-Code") != "503" {
		t.Errorf("before any solve: %v %s, want a 503 error", m.Header, m.Data)
	}
	request(t, nc, "smtd.control.checkpoint", nil, nil)

	model := pipelineStatus(d, "words").Model
	if tokens, _ := model["tokens"].(int64); tokens < 10000 {
		t.Errorf("status counts %d tokens after %d sentences", tokens, n)
	}
	embedded, _ := model["words_embedded"].(int)
	if embedded < 100 {
		t.Fatalf("%d words embedded after %d sentences: %v", embedded, n, model)
	}
	var words []string
	for chunks := 1; len(words) < embedded || chunks > 0; chunks-- {
		msg, err := vocabSub.NextMsg(5 * time.Second)
		if err != nil {
			t.Fatalf("vocabulary publication: %d of %d words: %v", len(words), embedded, err)
		}
		var ch vocabularyChunk
		if err := json.Unmarshal(msg.Data, &ch); err != nil {
			t.Fatal(err)
		}
		if ch.Dim != p.SMT.Dim || len(ch.Vectors) != len(ch.Words) || len(ch.Vectors[0]) != p.SMT.Dim {
			t.Fatalf("vocabulary chunk %d of %d: dim %d, %d words, %d vectors", ch.Chunk, ch.Chunks, ch.Dim, len(ch.Words), len(ch.Vectors))
		}
		if ch.Chunk == 0 {
			chunks = ch.Chunks
		}
		words = append(words, ch.Words...)
	}
	if len(words) != embedded {
		t.Errorf("vocabulary publication has %d words, status says %d embedded", len(words), embedded)
	}

	request(t, nc, "smtd.neighbours.words", []byte(`{"word": "The", "k": 5}`), &rep)
	if rep.Word != "the" || len(rep.Neighbours) != 5 || rep.ModelVersion == 0 {
		t.Fatalf("neighbours of the: %+v", rep)
	}
	seen := map[string]bool{"the": true}
	for i, nb := range rep.Neighbours {
		if seen[nb.Word] || !slices.Contains(words, nb.Word) || (i > 0 && nb.Cosine > rep.Neighbours[i-1].Cosine) {
			t.Errorf("neighbour %d of the: %+v in %+v", i, nb, rep.Neighbours)
		}
		seen[nb.Word] = true
	}
	for _, bad := range []string{"zzyzx-unseen", "two words", `{"word": "the", "k": 5000}`, `{"word":`} {
		m, err := nc.Request("smtd.neighbours.words", []byte(bad), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if code := m.Header.Get("Nats-Service-Error-Code"); code != "404" && code != "400" {
			t.Errorf("request %q answered %s without an error", bad, m.Data)
		}
	}

	// The output of a sentence is the normalised mean of its words' (zero
	// when none of its words has an embedding).
	msgs := readStream(t, "brown-2000.smtdrec")
	out := embed(t, nc, "words", msgs[:20])
	unit := 0
	for i := range 20 {
		var ss float64
		for _, x := range out.RawRowView(i) {
			ss += x * x
		}
		if _, c := out.Dims(); c != p.SMT.Dim || (ss != 0 && math.Abs(ss-1) > 1e-5) {
			t.Fatalf("sentence %d: %d numbers, norm² %v", i, c, ss)
		}
		if ss != 0 {
			unit++
		}
	}
	if unit < 15 {
		t.Errorf("%d of 20 sentences have an embedding", unit)
	}
}

// A text model restored from its checkpoint sections is the model that
// wrote them: same embeddings, and the same after learning more.
func TestWordModelRestoresExactly(t *testing.T) {
	p := wordsPipeline()
	p.SMT.SolveEvery = 3
	msgs := readStream(t, "brown-2000.smtdrec")
	batches := func(from, to int) [][]sample {
		var out [][]sample
		for b := from; b < to; b += 100 {
			var batch []sample
			for _, m := range msgs[b:min(b+100, to)] {
				batch = append(batch, sample{tokens: dataset.Tokenize(string(m.Data))})
			}
			out = append(out, batch)
		}
		return out
	}
	src := rand.NewPCG(1, 2)
	a := newModel(&p, src).(*textModel)
	for _, b := range batches(0, 1000) {
		if _, err := a.learn(b); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.flush(); err != nil {
		t.Fatal(err)
	}
	secs, err := a.sections()
	if err != nil {
		t.Fatal(err)
	}
	srcB := *src
	b := newModel(&p, &srcB).(*textModel)
	if err := b.restore(secs); err != nil {
		t.Fatal(err)
	}
	for _, batch := range batches(1000, 2000) {
		oa, err := a.learn(batch)
		if err != nil {
			t.Fatal(err)
		}
		ob, err := b.learn(batch)
		if err != nil {
			t.Fatal(err)
		}
		for i := range oa {
			if !slices.Equal(oa[i].vector, ob[i].vector) {
				t.Fatalf("outputs differ after restore: %v vs %v", oa[i].vector[:4], ob[i].vector[:4])
			}
		}
	}
	sa, _ := a.sections()
	sb, _ := b.sections()
	for i := range sa {
		if !bytes.Equal(sa[i].Data, sb[i].Data) {
			t.Errorf("section %s differs after restore and the same learning", sa[i].Name)
		}
	}
}
