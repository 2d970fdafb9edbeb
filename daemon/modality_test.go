package daemon

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/smtd/smtd/config"
)

// Video frames and word tokens flow through their default pipelines: each
// message gets an output carrying its stream and frame (video) or tokens
// (text), and the text vocabulary grows.
func TestVideoAndTextPipelines(t *testing.T) {
	frames := config.DefaultPipeline(config.Video, "frames")
	frames.KMeans.Atoms = 32
	words := config.DefaultPipeline(config.Text, "words")
	words.Output.Encoding = config.JSON
	d := startDaemon(t, testConfig(t, frames, words))
	nc := connect(t, d.ClientURL())
	frameOut := subscribe(t, nc, "smtd.out.frames")
	wordOut := subscribe(t, nc, "smtd.out.words")

	nf := replayFile(t, nc, "video-2x48.smtdrec", "")
	nw := replayFile(t, nc, "brown-2000.smtdrec", "")
	waitFor(t, time.Minute, "frames and words learned", func() bool {
		return pipelineStatus(d, "frames").Learned == int64(nf) && pipelineStatus(d, "words").Learned == int64(nw)
	})
	streams := map[string]int{}
	for range nf {
		m, err := frameOut.NextMsg(5 * time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if m.Header.Get(HeaderFrame) == "" || m.Header.Get(HeaderShape) != "4608" { // 12x12 pooled positions x 32
			t.Fatalf("frame output headers %v", m.Header)
		}
		streams[m.Header.Get(HeaderStream)]++
	}
	if len(streams) != 2 {
		t.Errorf("outputs of streams %v, want two streams", streams)
	}
	// The two interleaved cameras of 48 in-order frames make 2·46 triples
	// (t−1, t, t+1) for the temporal SMT.
	model := pipelineStatus(d, "frames").Model
	if model["video_streams"] != 2 || model["video_gaps"] != int64(0) || model["video_frames_late"] != int64(0) {
		t.Errorf("video tracking %v, want 2 streams, no gaps, none late", model)
	}
	if model["smt_steps"] == int64(0) {
		t.Errorf("temporal SMT took no step: %v", model)
	}
	for range 5 {
		m, err := wordOut.NextMsg(5 * time.Second)
		if err != nil {
			t.Fatal(err)
		}
		var o outputJSON
		if err := json.Unmarshal(m.Data, &o); err != nil {
			t.Fatal(err)
		}
		if len(o.Tokens) == 0 || len(o.Vector) != words.SMT.Dim || o.Pipeline != "words" {
			t.Fatalf("text output %+v", o)
		}
	}
	if words := pipelineStatus(d, "words").Model["words"].(int); words < 1000 {
		t.Errorf("vocabulary has %d words after %d sentences", words, nw)
	}
}

// A core NATS pipeline learns from a plain subscription.
func TestCoreTransport(t *testing.T) {
	p := digitsPipeline("digits", "mnist.images", 16)
	p.Input.Transport = config.Core
	d := startDaemon(t, testConfig(t, p))
	nc := connect(t, d.ClientURL())
	msgs := readStream(t, "mnist-raw-100.smtdrec")
	for _, m := range msgs {
		msg := natsMsg("mnist.images", m.Header, m.Data)
		if err := nc.PublishMsg(msg); err != nil {
			t.Fatal(err)
		}
	}
	nc.Flush()
	waitFor(t, 30*time.Second, "core messages learned", func() bool { return pipelineStatus(d, "digits").Learned == int64(len(msgs)) })
}
