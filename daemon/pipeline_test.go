package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"gopkg.in/yaml.v3"

	"github.com/smtd/smtd/config"
)

func digitsPipeline(name, subject string, atoms int) config.Pipeline {
	p := config.DefaultPipeline(config.Image, name)
	p.Input.Subject = subject
	p.Output.Subject = subject + ".codes"
	p.KMeans.Atoms = atoms
	p.Whiten.FreezeAfter = 50000
	p.SMT.Dim = 8
	return p
}

// Bad input never kills the daemon: every kind of bad message is rejected
// before the learner, acknowledged, reported on the errors subject and
// counted, and every good message around it is learned.
func TestBadInputIsRejectedAndReported(t *testing.T) {
	p := digitsPipeline("digits", "mnist.images", 16)
	p.Input.MaxBytes = 4096
	d := startDaemon(t, testConfig(t, p))
	nc := connect(t, d.ClientURL())
	errSub := subscribe(t, nc, "smtd.events.errors")
	outSub := subscribe(t, nc, "mnist.images.codes")
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	good := func() *nats.Msg {
		m := nats.NewMsg("mnist.images")
		m.Header.Set(HeaderShape, "28,28")
		m.Header.Set(HeaderDtype, "uint8")
		m.Data = make([]byte, 784)
		for i := range m.Data {
			m.Data[i] = uint8(i * 13)
		}
		return m
	}
	bad := map[string]func(m *nats.Msg){
		ReasonBadShape:      func(m *nats.Msg) { m.Header.Set(HeaderShape, "27,29") },
		ReasonBadDtype:      func(m *nats.Msg) { m.Header.Set(HeaderDtype, "float64") },
		ReasonTruncated:     func(m *nats.Msg) { m.Data = m.Data[:700] },
		ReasonMissingHeader: func(m *nats.Msg) { m.Header.Del(HeaderShape) },
		ReasonTooLarge:      func(m *nats.Msg) { m.Data = make([]byte, 5000) },
		ReasonBadPNG:        func(m *nats.Msg) { m.Header.Set(HeaderEncoding, "png") },
		ReasonNotFinite: func(m *nats.Msg) {
			m.Header.Set(HeaderDtype, "float32")
			m.Data = float32Bytes(make([]float32, 784)...)
			copy(m.Data[400:], float32Bytes(float32(math.NaN())))
		},
	}
	var published int
	for reason, spoil := range bad {
		for _, m := range []*nats.Msg{good(), good()} {
			if _, err := js.PublishMsg(context.Background(), m); err != nil {
				t.Fatal(err)
			}
			published++
		}
		m := good()
		spoil(m)
		if _, err := js.PublishMsg(context.Background(), m); err != nil {
			t.Fatalf("%s: %v", reason, err)
		}
	}
	wantGood := int64(published)
	waitFor(t, 30*time.Second, "all good messages learned", func() bool {
		st := pipelineStatus(d, "digits")
		return st.Learned == wantGood && st.Rejected == int64(len(bad))
	})
	st := pipelineStatus(d, "digits")
	for reason := range bad {
		if st.ByReason[reason] != 1 {
			t.Errorf("rejected_by_reason[%s] = %d, want 1", reason, st.ByReason[reason])
		}
	}
	seen := map[string]bool{}
	for range bad {
		m, err := errSub.NextMsg(5 * time.Second)
		if err != nil {
			t.Fatalf("error events: %v", err)
		}
		var ev errorEvent
		if err := json.Unmarshal(m.Data, &ev); err != nil {
			t.Fatal(err)
		}
		if ev.Pipeline != "digits" || ev.Subject != "mnist.images" || ev.Seq == 0 || ev.Error == "" {
			t.Errorf("incomplete error event %+v", ev)
		}
		seen[ev.Reason] = true
	}
	for reason := range bad {
		if !seen[reason] {
			t.Errorf("no error event for %s", reason)
		}
	}
	for range published {
		m, err := outSub.NextMsg(5 * time.Second)
		if err != nil {
			t.Fatalf("outputs: %v", err)
		}
		// SMT embeddings of dimension 8, pooled to 10x10 positions.
		if m.Header.Get(HeaderShape) != "800" || len(m.Data) != 4*800 {
			t.Fatalf("output shape %q, %d bytes", m.Header.Get(HeaderShape), len(m.Data))
		}
	}
	// Acknowledged: nothing is left pending on the consumer.
	cons, err := js.Consumer(context.Background(), "SMTD_DIGITS", "smtd-digits")
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "all messages acknowledged", func() bool {
		info, err := cons.Info(context.Background())
		return err == nil && info.NumAckPending == 0 && info.NumPending == 0
	})
}

// Queries never train: embed replies come from a snapshot, name its
// version, and leave the model as it was.
func TestEmbedDoesNotTrain(t *testing.T) {
	d := startDaemon(t, testConfig(t, digitsPipeline("digits", "mnist.images", 16)))
	nc := connect(t, d.ClientURL())
	n := replayFile(t, nc, "mnist-train-1000.smtdrec", "mnist.images")
	waitFor(t, 60*time.Second, "stream learned", func() bool { return pipelineStatus(d, "digits").Learned == int64(n) })
	before := pipelineStatus(d, "digits")

	msgs := readStream(t, "mnist-test-200.smtdrec")
	var first []byte
	for i := range 3 {
		req := nats.NewMsg("smtd.embed.digits")
		req.Header = msgs[0].Header
		req.Data = msgs[0].Data
		rep, err := nc.RequestMsg(req, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if e := rep.Header.Get("Nats-Service-Error"); e != "" {
			t.Fatalf("embed error: %s", e)
		}
		if got := rep.Header.Get(HeaderModelVersion); got != strconv.FormatUint(before.ModelVersion, 10) {
			t.Errorf("reply version %s, want %d", got, before.ModelVersion)
		}
		if i == 0 {
			first = rep.Data
		} else if !bytes.Equal(rep.Data, first) {
			t.Error("the same query gave different embeddings: the model changed")
		}
	}
	after := pipelineStatus(d, "digits")
	if after.ModelVersion != before.ModelVersion || after.Learned != before.Learned {
		t.Errorf("model changed by queries: version %d → %d, learned %d → %d", before.ModelVersion, after.ModelVersion, before.Learned, after.Learned)
	}
	// A bad query is answered with an error, not a crash.
	rep, err := nc.Request("smtd.embed.digits", []byte("junk"), 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Header.Get("Nats-Service-Error-Code") != "400" {
		t.Errorf("bad query: got %v, want a 400 error", rep.Header)
	}
}

// The status never counts a sample the served model has not learned: a
// batch is counted only once its snapshot is published, so a reader that
// waits for Learned to reach n reads the model of the last batch.
func TestStatusCountsOnlyServedLearning(t *testing.T) {
	p := digitsPipeline("digits", "mnist.images", 16)
	d := startDaemon(t, testConfig(t, p))
	nc := connect(t, d.ClientURL())
	n := replayFile(t, nc, "mnist-train-1000.smtdrec", "mnist.images")
	// Polled without pause, to read the status between any two steps of
	// the learner; the deadline, not the number of polls, bounds the wait.
	deadline := time.Now().Add(2 * time.Minute)
	for polls := 0; ; polls++ {
		st := pipelineStatus(d, "digits")
		if most := int64(st.ModelVersion) * int64(p.Batch.Size); st.Learned > most {
			t.Fatalf("poll %d: %d samples learned, but the served model, version %d, holds at most %d", polls, st.Learned, st.ModelVersion, most)
		}
		if st.Learned == int64(n) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("stream not learned after %d polls: %d of %d", polls, st.Learned, n)
		}
	}
}

// Live tuning is all or nothing: live fields change, a change to any other
// field refuses the whole reload and names the field.
func TestReload(t *testing.T) {
	cfg := testConfig(t, digitsPipeline("digits", "mnist.images", 16))
	d := startDaemon(t, cfg)
	nc := connect(t, d.ClientURL())
	events := subscribe(t, nc, "smtd.events.reload")

	next := *cfg
	next.Pipelines = []config.Pipeline{cfg.Pipelines[0]}
	next.Pipelines[0].KMeans.LearningRate = 0.25
	next.Pipelines[0].Output.Encoding = config.JSON
	body, err := yaml.Marshal(&next)
	if err != nil {
		t.Fatal(err)
	}
	var res ReloadResult
	request(t, nc, "smtd.control.reload", body, &res)
	if res.ConfigVersion != 2 || len(res.Applied) != 2 || res.Error != "" {
		t.Fatalf("reload result %+v, want version 2 with 2 applied fields", res)
	}
	if _, err := events.NextMsg(5 * time.Second); err != nil {
		t.Errorf("no reload event: %v", err)
	}
	waitFor(t, 5*time.Second, "the new encoding", func() bool {
		return d.pipelines[0].snap.Load().cfg.Output.Encoding == config.JSON
	})

	next.Pipelines[0].KMeans.LearningRate = 0.5 // live, but in the same reload as:
	next.Pipelines[0].KMeans.Atoms = 32
	next.Pipelines[0].Input.Subject = "other.images"
	body, _ = yaml.Marshal(&next)
	m := request(t, nc, "smtd.control.reload", body, nil)
	if m.Header.Get("Nats-Service-Error-Code") != "400" {
		t.Fatalf("refused reload answered %q", m.Data)
	}
	if err := json.Unmarshal(m.Data, &res); err != nil {
		t.Fatal(err)
	}
	want := []string{"pipelines[0].input.subject", "pipelines[0].kmeans.atoms"}
	if strings.Join(res.Refused, ",") != strings.Join(want, ",") || res.ConfigVersion != 2 {
		t.Errorf("refused reload: %+v, want refused %v at version 2", res, want)
	}
	if got := d.pipelines[0].snap.Load().cfg.KMeans.LearningRate; got != 0.25 {
		t.Errorf("learning rate %v after a refused reload, want 0.25 (nothing applied)", got)
	}
	if _, err := d.Reload(context.Background(), []byte("pipelines: [")); err == nil {
		t.Error("invalid YAML reloaded")
	}
}

// Settings of the command line (Options.Override) win over the file's at
// every reload too: a file without log.format reloads under --log-format
// console, where it was refused as a change of a field fixed at start.
func TestReloadKeepsOverride(t *testing.T) {
	cfg := testConfig(t, digitsPipeline("digits", "mnist.images", 16))
	path := filepath.Join(t.TempDir(), "smtd.yaml")
	write := func(c *config.Config) {
		data, err := yaml.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(cfg)
	override := func(c *config.Config) { c.Log.Format, c.Log.Level = "console", "error" }
	started := *cfg
	d, err := New(&started, Options{ConfigPath: path, Logger: NewLogger(testWriter{t}, "console"), Override: override})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Shutdown(context.Background()) })

	next := *cfg
	next.Pipelines = []config.Pipeline{cfg.Pipelines[0]}
	next.Pipelines[0].KMeans.LearningRate = 0.25
	write(&next)
	res, err := d.Reload(context.Background(), nil)
	if err != nil || res.ConfigVersion != 2 || len(res.Applied) != 1 {
		t.Fatalf("reload from the file: %+v, %v; want version 2, one field applied", res, err)
	}
	if l := d.cfg.Log; l.Format != "console" || l.Level != "error" {
		t.Errorf("log %+v after the reload, want the command line's console and error", l)
	}
}

// A checkpoint that does not fit the config, or a corrupt one, is refused
// as a whole: the daemon does not start on it.
func TestCheckpointRefused(t *testing.T) {
	cfg := testConfig(t, digitsPipeline("digits", "mnist.images", 16))
	cfg.Checkpoint.ObjectStore = false
	d := startDaemon(t, cfg)
	nc := connect(t, d.ClientURL())
	n := replayFile(t, nc, "mnist-raw-100.smtdrec", "mnist.images")
	waitFor(t, 30*time.Second, "stream learned", func() bool { return pipelineStatus(d, "digits").Learned == int64(n) })
	if err := d.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	files, _ := checkpointFiles(filepath.Join(cfg.DataDir, "checkpoints", "digits"))
	if len(files) == 0 {
		t.Fatal("no checkpoint written at shutdown")
	}
	c, err := ReadCheckpoint(files[len(files)-1])
	if err != nil {
		t.Fatal(err)
	}
	if c.Samples != int64(n) || c.LastSeq != uint64(n) {
		t.Errorf("checkpoint holds %d samples up to seq %d, want %d", c.Samples, c.LastSeq, n)
	}

	bigger := *cfg
	bigger.Pipelines = []config.Pipeline{digitsPipeline("digits", "mnist.images", 32)}
	d2, _ := New(&bigger, Options{Logger: NewLogger(testWriter{t}, "console")})
	err = d2.Start(context.Background())
	if !errors.Is(err, ErrCheckpoint) || !strings.Contains(err.Error(), "kmeans.atoms 16 → 32") {
		t.Errorf("start with another shape: %v, want ErrCheckpoint naming kmeans.atoms", err)
	}

	data, _ := os.ReadFile(files[len(files)-1])
	data[len(data)/2] ^= 0xff
	os.WriteFile(files[len(files)-1], data, 0o644)
	d3, _ := New(cfg, Options{Logger: NewLogger(testWriter{t}, "console")})
	err = d3.Start(context.Background())
	if !errors.Is(err, ErrCheckpoint) || !strings.Contains(err.Error(), "CRC") {
		t.Errorf("start on a corrupt checkpoint: %v, want a CRC error", err)
	}
}

// smt.drop 1 makes the SGD keep P orthogonal to the constant, which a
// checkpoint's P may not be: with sgd it is part of the model's shape;
// the closed form is solved again from the statistics, so there it is not.
func TestSMTDropShape(t *testing.T) {
	p := config.DefaultPipeline(config.Image, "images")
	q := p
	q.SMT.Drop = 1
	if got := newModel(&q, rand.NewPCG(1, 1)).(*imageModel).smt.Settings(); !got.DropConstant {
		t.Errorf("smt.drop 1 with sgd: SMT settings %+v, want DropConstant", got)
	}
	if got := shapeChanges(&p, &q); len(got) != 1 || !strings.HasPrefix(got[0], "smt.drop 0 → 1") {
		t.Errorf("shapeChanges = %v, want smt.drop only", got)
	}
	// Before the SGD applied smt.drop, a config with drop 1 learned a P
	// with the constant, in a state without the trailing DropConstant
	// byte: its checkpoint is refused with the setting that resumes it.
	secs, err := newModel(&q, rand.NewPCG(1, 1)).sections()
	if err != nil {
		t.Fatal(err)
	}
	if err := newModel(&q, rand.NewPCG(1, 1)).restore(secs); err != nil {
		t.Errorf("restoring its own state: %v", err)
	}
	for i := range secs {
		if secs[i].Name == "smt" {
			secs[i].Data = secs[i].Data[:len(secs[i].Data)-1]
		}
	}
	if err := newModel(&q, rand.NewPCG(1, 1)).restore(secs); err == nil || !strings.Contains(err.Error(), "set smt.drop: 0 to resume it") {
		t.Errorf("restoring a P learned with the constant under smt.drop 1: %v, want a refusal naming smt.drop: 0", err)
	}
	if err := newModel(&p, rand.NewPCG(1, 1)).restore(secs); err != nil {
		t.Errorf("the same with smt.drop 0: %v", err)
	}
	p.SMT.Solver, q.SMT.Solver = config.SolverClosed, config.SolverClosed
	if got := newModel(&q, rand.NewPCG(1, 1)).(*imageModel).smt.Settings(); got.DropConstant {
		t.Errorf("smt.drop 1 with the closed form: SMT settings %+v, want no DropConstant (the solver drops)", got)
	}
	if got := shapeChanges(&p, &q); len(got) != 0 {
		t.Errorf("closed form: shapeChanges = %v, want none", got)
	}
}

// Outputs published on core NATS reuse one buffer for their payloads:
// each message must still carry its own image's vector. MNIST digits are
// distinct, so no two outputs of a model version may be equal.
func TestCoreOutputsCarryTheirOwnVectors(t *testing.T) {
	p := digitsPipeline("digits", "mnist.images", 16)
	if p.Output.Transport == config.JetStream {
		t.Fatal("the test needs outputs on core NATS")
	}
	d := startDaemon(t, testConfig(t, p))
	nc := connect(t, d.ClientURL())
	outSub := subscribe(t, nc, p.Output.Subject)
	n := replayFile(t, nc, "mnist-train-1000.smtdrec", p.Input.Subject)
	seen := map[string]string{} // payload → source sequence
	for i := range n {
		m, err := outSub.NextMsg(time.Minute)
		if err != nil {
			t.Fatalf("output %d of %d: %v", i+1, n, err)
		}
		if _, _, err := DecodeOutput(m.Header, m.Data); err != nil {
			t.Fatalf("output %d: %v", i+1, err)
		}
		seq := m.Header.Get(HeaderSourceSeq)
		key := m.Header.Get(HeaderModelVersion) + "/" + string(m.Data)
		if other, ok := seen[key]; ok {
			t.Fatalf("the outputs of inputs %s and %s carry the same vector", other, seq)
		}
		seen[key] = seq
	}
}

// BenchmarkSettle is what the learner does after each minibatch besides
// learning it, at K = 4096 on 28x28 MNIST: the stages' checks and the
// copy of the model into the readers' snapshot (check, snapshotInto).
func BenchmarkSettle(b *testing.B) {
	p := config.DefaultPipeline(config.Image, "images")
	p.KMeans.Atoms = 4096
	batch := decodeSamples(b, &p, readStream(b, "mnist-train-1000.smtdrec")[:p.Batch.Size])
	m := newModel(&p, rand.NewPCG(p.Seed, 1)).(*imageModel)
	if _, err := m.learn(batch); err != nil {
		b.Fatal(err)
	}
	snap := m.snapshot()
	for b.Loop() {
		if err := m.check(); err != nil {
			b.Fatal(err)
		}
		snap = m.snapshotInto(snap)
	}
}
