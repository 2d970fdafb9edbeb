package daemon

import (
	"strings"
	"testing"
	"time"

	"github.com/smtd/smtd/config"
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
