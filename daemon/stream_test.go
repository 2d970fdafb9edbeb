package daemon

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"gopkg.in/yaml.v3"

	"github.com/smtd/smtd/config"
)

// externalConfig is a one-pipeline config on the external server ns, so
// that a test can change the server's streams while no daemon runs.
func externalConfig(t testing.TB, url string, p config.Pipeline) *config.Config {
	cfg := testConfig(t, p)
	cfg.NATS.URL = url
	cfg.Checkpoint.ObjectStore = false
	return cfg
}

// errorEvents collects the events on <prefix>.events.errors by reason.
type errorEvents struct{ sub *nats.Subscription }

func watchErrors(t testing.TB, nc *nats.Conn, prefix string) *errorEvents {
	return &errorEvents{sub: subscribe(t, nc, prefix+".events.errors")}
}

// wait returns the first event of reason within timeout, or fails.
func (e *errorEvents) wait(t testing.TB, reason string, timeout time.Duration) errorEvent {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		m, err := e.sub.NextMsg(time.Until(deadline))
		if err != nil {
			break
		}
		var ev errorEvent
		if json.Unmarshal(m.Data, &ev) == nil && ev.Reason == reason {
			return ev
		}
	}
	t.Fatalf("no %s event within %v", reason, timeout)
	return errorEvent{}
}

// count returns how many events of reason arrived so far.
func (e *errorEvents) count(reason string) int {
	n := 0
	for {
		m, err := e.sub.NextMsg(10 * time.Millisecond)
		if err != nil {
			return n
		}
		var ev errorEvent
		if json.Unmarshal(m.Data, &ev) == nil && ev.Reason == reason {
			n++
		}
	}
}

func jetStream(t testing.TB, nc *nats.Conn) jetstream.JetStream {
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// A stream deleted and recreated under a checkpoint is detected when the
// daemon starts: with input.on_reset restart the model is kept and the new
// stream is read from its first message (nothing is skipped), with an
// event; with refuse the daemon does not start.
func TestStreamResetUnderCheckpoint(t *testing.T) {
	t.Parallel()
	ns := startNATS(t)
	nc := connect(t, ns.ClientURL())
	js := jetStream(t, nc)
	cfg := externalConfig(t, ns.ClientURL(), digitsPipeline("digits", "reset.images", 16))
	d := startDaemon(t, cfg)
	n := replayFile(t, nc, "mnist-raw-100.smtdrec", "reset.images")
	waitFor(t, 30*time.Second, "stream learned", func() bool { return pipelineStatus(d, "digits").Learned == int64(n) })
	if err := d.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := js.DeleteStream(context.Background(), "SMTD_DIGITS"); err != nil {
		t.Fatal(err)
	}

	refuse := *cfg
	refuse.Pipelines = []config.Pipeline{cfg.Pipelines[0]}
	refuse.Pipelines[0].Input.OnReset = config.ResetRefuse
	d2, _ := New(&refuse, Options{Logger: NewLogger(testWriter{t}, "console")})
	if err := d2.Start(context.Background()); err == nil || !strings.Contains(err.Error(), ReasonStreamReset) {
		t.Errorf("start with on_reset refuse on a recreated stream: %v, want a %s error", err, ReasonStreamReset)
	}

	events := watchErrors(t, nc, "smtd")
	d3 := startDaemon(t, cfg)
	ev := events.wait(t, ReasonStreamReset, 10*time.Second)
	if !strings.Contains(ev.Error, "first message") {
		t.Errorf("reset event %q does not say what happens", ev.Error)
	}
	st := pipelineStatus(d3, "digits")
	if st.ModelVersion == 0 || st.LastSeq != 0 {
		t.Errorf("after the reset: model version %d, last seq %d; want the restored model reading from the start", st.ModelVersion, st.LastSeq)
	}
	// The recreated stream starts again at sequence 1: all of it is learned.
	m := replayFile(t, nc, "mnist-raw-100.smtdrec", "reset.images")
	waitFor(t, 30*time.Second, "new stream learned", func() bool { return pipelineStatus(d3, "digits").Learned == int64(n+m) })
}

// A checkpoint of another instance of the stream (one copied from another
// daemon, or planted) that claims to have read past the stream's end is not
// trusted: its model is kept under on_reset restart, but the stream is read
// from its first message, so no message is skipped.
func TestForeignCheckpointSkipsNothing(t *testing.T) {
	t.Parallel()
	ns := startNATS(t)
	nc := connect(t, ns.ClientURL())
	cfg := externalConfig(t, ns.ClientURL(), digitsPipeline("digits", "foreign.images", 16))
	d := startDaemon(t, cfg)
	n := replayFile(t, nc, "mnist-raw-100.smtdrec", "foreign.images")
	waitFor(t, 30*time.Second, "stream learned", func() bool { return pipelineStatus(d, "digits").Learned == int64(n) })
	if err := d.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	// Forge the checkpoint: another stream instance, far ahead.
	c := lastCheckpoint(t, cfg, "digits")
	c.StreamCreated = c.StreamCreated.Add(-time.Hour)
	c.LastSeq = 16000
	for _, f := range must(checkpointFiles(d.checkpointDir("digits"))) {
		os.Remove(f)
	}
	writeCheckpoint(t, cfg, c)

	events := watchErrors(t, nc, "smtd")
	d2 := startDaemon(t, cfg)
	events.wait(t, ReasonStreamReset, 10*time.Second)
	// Messages 1..n are read again and learned: none is skipped.
	waitFor(t, 30*time.Second, "stream learned again", func() bool { return pipelineStatus(d2, "digits").Learned == int64(2*n) })
}

// Messages removed from the stream before they were learned (a purge while
// the daemon was down) are reported, with how many were lost.
func TestPurgeBelowCheckpointIsReported(t *testing.T) {
	t.Parallel()
	ns := startNATS(t)
	nc := connect(t, ns.ClientURL())
	js := jetStream(t, nc)
	cfg := externalConfig(t, ns.ClientURL(), digitsPipeline("digits", "purge.images", 16))
	d := startDaemon(t, cfg)
	n := replayFile(t, nc, "mnist-raw-100.smtdrec", "purge.images")
	waitFor(t, 30*time.Second, "stream learned", func() bool { return pipelineStatus(d, "digits").Learned == int64(n) })
	if err := d.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	m := replayFile(t, nc, "mnist-raw-100.smtdrec", "purge.images")
	s, err := js.Stream(context.Background(), "SMTD_DIGITS")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Purge(context.Background()); err != nil {
		t.Fatal(err)
	}
	events := watchErrors(t, nc, "smtd")
	d2 := startDaemon(t, cfg)
	ev := events.wait(t, ReasonStreamPurged, 10*time.Second)
	if st := pipelineStatus(d2, "digits"); st.Lost != int64(m) {
		t.Errorf("lost %d messages, want %d (event: %s)", st.Lost, m, ev.Error)
	}
}

// A deleted input stream is noticed while the daemon runs: it is reported
// once, recreated under on_reset restart, and what is published to it
// afterwards is learned.
func TestStreamDeletedWhileRunning(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t, digitsPipeline("digits", "live.images", 16))
	d := startDaemon(t, cfg)
	nc := connect(t, d.ClientURL())
	js := jetStream(t, nc)
	n := replayFile(t, nc, "mnist-raw-100.smtdrec", "live.images")
	waitFor(t, 30*time.Second, "stream learned", func() bool { return pipelineStatus(d, "digits").Learned == int64(n) })
	events := watchErrors(t, nc, "smtd")
	if err := js.DeleteStream(context.Background(), "SMTD_DIGITS"); err != nil {
		t.Fatal(err)
	}
	events.wait(t, ReasonStreamReset, 20*time.Second)
	m := replayFile(t, nc, "mnist-raw-100.smtdrec", "live.images")
	waitFor(t, 30*time.Second, "recreated stream learned", func() bool { return pipelineStatus(d, "digits").Learned == int64(n+m) })
	if got := events.count(ReasonInputMissing); got > 1 {
		t.Errorf("%d input_missing events, want at most one", got)
	}
}

// With input.on_reset refuse, a deleted input stream leaves the pipeline's
// health input_missing, reported once however long it lasts.
func TestDeletedStreamReportedInStatus(t *testing.T) {
	t.Parallel()
	p := digitsPipeline("digits", "gone.images", 16)
	p.Input.OnReset = config.ResetRefuse
	d := startDaemon(t, testConfig(t, p))
	nc := connect(t, d.ClientURL())
	events := watchErrors(t, nc, "smtd")
	if err := jetStream(t, nc).DeleteStream(context.Background(), "SMTD_DIGITS"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "health input_missing", func() bool {
		return pipelineStatus(d, "digits").Health.State == HealthInputMissing
	})
	time.Sleep(3 * time.Second) // several retries
	if got := events.count(ReasonInputMissing); got != 1 {
		t.Errorf("%d input_missing events over several retries, want 1", got)
	}
	if h := pipelineStatus(d, "digits").Health; !strings.Contains(h.Reason, "deleted") {
		t.Errorf("health reason %q does not say the stream was deleted", h.Reason)
	}
}

// A corrupt newest checkpoint does not block the start: the newest good one
// is restored, and an event names the one skipped and why.
func TestCorruptNewestCheckpointFallsBack(t *testing.T) {
	t.Parallel()
	ns := startNATS(t)
	nc := connect(t, ns.ClientURL())
	cfg := externalConfig(t, ns.ClientURL(), digitsPipeline("digits", "fallback.images", 16))
	cfg.Checkpoint.EverySamples = 40
	d := startDaemon(t, cfg)
	n := replayFile(t, nc, "mnist-raw-100.smtdrec", "fallback.images")
	waitFor(t, 30*time.Second, "stream learned", func() bool { return pipelineStatus(d, "digits").Learned == int64(n) })
	if err := d.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	files := must(checkpointFiles(d.checkpointDir("digits")))
	if len(files) < 2 {
		t.Fatalf("%d checkpoint files, want at least 2", len(files))
	}
	newest := files[len(files)-1]
	older, err := ReadCheckpoint(files[len(files)-2])
	if err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(newest)
	data[len(data)/2] ^= 0xff
	os.WriteFile(newest, data, 0o644)

	events := watchErrors(t, nc, "smtd")
	d2 := startDaemon(t, cfg)
	ev := events.wait(t, ReasonCheckpointSkipped, 10*time.Second)
	if !strings.Contains(ev.Error, filepath.Base(newest)) || !strings.Contains(ev.Error, "CRC") {
		t.Errorf("skip event %q does not name the file and why", ev.Error)
	}
	if st := pipelineStatus(d2, "digits"); st.ModelVersion != older.ModelVersion {
		t.Errorf("restored version %d, want %d of the older checkpoint", st.ModelVersion, older.ModelVersion)
	}
	// Every message after the older checkpoint is learned again.
	waitFor(t, 30*time.Second, "messages after the older checkpoint learned", func() bool {
		return pipelineStatus(d2, "digits").LastSeq == uint64(n)
	})
}

// A newest checkpoint in the object store that is corrupt is skipped for an
// older good one on disk.
func TestCorruptStoredCheckpointFallsBack(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t, digitsPipeline("digits", "store.images", 16))
	d := startDaemon(t, cfg)
	nc := connect(t, d.ClientURL())
	n := replayFile(t, nc, "mnist-raw-100.smtdrec", "store.images")
	waitFor(t, 30*time.Second, "stream learned", func() bool { return pipelineStatus(d, "digits").Learned == int64(n) })
	good := must(checkpointFiles(d.checkpointDir("digits")))
	// Plant a corrupt object of a higher version.
	bad := []byte("SMTDCKPT garbage that is no checkpoint at all")
	if _, err := d.store.put(context.Background(), "digits", checkpointName("digits", 0, 1<<40), bad, 10, nil); err != nil {
		t.Fatal(err)
	}
	if err := d.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	d2 := startDaemon(t, cfg)
	if st := pipelineStatus(d2, "digits"); st.ModelVersion == 0 || st.Learned != int64(n) {
		t.Errorf("after skipping the corrupt object: version %d, learned %d; want the good checkpoint (%d files)", st.ModelVersion, st.Learned, len(good))
	}
}

// Counters continue from the checkpoint after a restart, and redeliveries
// are not counted as received.
func TestCountersSurviveRestart(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t, digitsPipeline("digits", "count.images", 16))
	d := startDaemon(t, cfg)
	nc := connect(t, d.ClientURL())
	nc.Publish("count.images", []byte("not an image"))
	n := replayFile(t, nc, "mnist-raw-100.smtdrec", "count.images")
	waitFor(t, 30*time.Second, "stream learned", func() bool { return pipelineStatus(d, "digits").Learned == int64(n) })
	// The last batch is counted as learned before its outputs are
	// published; a checkpoint round trip waits for the pipeline to finish
	// that batch.
	request(t, nc, "smtd.control.checkpoint", nil, nil)
	before := pipelineStatus(d, "digits")
	if err := d.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	d2 := startDaemon(t, cfg)
	after := pipelineStatus(d2, "digits")
	if after.Received != before.Received || after.Learned != before.Learned || after.Rejected != before.Rejected || after.Published != before.Published {
		t.Errorf("after a restart: received %d learned %d rejected %d published %d; before: %d %d %d %d",
			after.Received, after.Learned, after.Rejected, after.Published, before.Received, before.Learned, before.Rejected, before.Published)
	}
	if before.Received != before.Learned+before.Rejected+before.NotLearned {
		t.Errorf("received %d != learned %d + rejected %d + not learned %d", before.Received, before.Learned, before.Rejected, before.NotLearned)
	}
}

// With output transport jetstream, outputs published again after a restart
// from an older checkpoint (as after a crash) are dropped by the server:
// each input has exactly one output in the output stream.
func TestJetStreamOutputsAreEffectivelyOnce(t *testing.T) {
	t.Parallel()
	p := digitsPipeline("digits", "once.images", 16)
	p.Output.Transport = config.JetStream
	cfg := testConfig(t, p)
	cfg.Checkpoint.EverySamples = 40
	cfg.Checkpoint.ObjectStore = false
	d := startDaemon(t, cfg)
	nc := connect(t, d.ClientURL())
	n := replayFile(t, nc, "mnist-raw-100.smtdrec", "once.images")
	waitFor(t, 30*time.Second, "stream learned", func() bool { return pipelineStatus(d, "digits").Learned == int64(n) })
	if err := d.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	// Forget the newest checkpoint: the restart applies and publishes the
	// messages after the older one again, as after a kill -9.
	files := must(checkpointFiles(d.checkpointDir("digits")))
	os.Remove(files[len(files)-1])
	d2 := startDaemon(t, cfg)
	waitFor(t, 30*time.Second, "replay learned", func() bool { return pipelineStatus(d2, "digits").LastSeq == uint64(n) })
	nc2 := connect(t, d2.ClientURL())
	s, err := jetStream(t, nc2).Stream(context.Background(), p.OutputStreamName())
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != uint64(n) {
		t.Errorf("output stream holds %d messages for %d inputs", info.State.Msgs, n)
	}
}

// With output transport jetstream an input is acknowledged, and a
// checkpoint covers it, only once the output stream has stored its
// output: sampled while a stream is learned, the output stream never
// holds fewer outputs than the input consumer has acknowledged inputs, or
// the newest checkpoint has applied (both read first).
func TestJetStreamOutputsStoredBeforeAck(t *testing.T) {
	t.Parallel()
	p := digitsPipeline("digits", "order.images", 16)
	p.Output.Transport = config.JetStream
	cfg := testConfig(t, p)
	cfg.Checkpoint.EverySamples = 64
	cfg.Checkpoint.ObjectStore = false
	d := startDaemon(t, cfg)
	nc := connect(t, d.ClientURL())
	js := jetStream(t, nc)
	ctx := context.Background()
	n := replayFile(t, nc, "mnist-train-1000.smtdrec", "order.images")
	cons, err := js.Consumer(ctx, p.StreamName(), "smtd-digits")
	if err != nil {
		t.Fatal(err)
	}
	out, err := js.Stream(ctx, p.OutputStreamName())
	if err != nil {
		t.Fatal(err)
	}
	samples, checkpointed := 0, uint64(0)
	for {
		if files, _ := checkpointFiles(d.checkpointDir("digits")); len(files) > 0 {
			// A file may be rotated away as it is read: keep the last read.
			if c, err := ReadCheckpoint(files[len(files)-1]); err == nil {
				checkpointed = c.LastSeq
			}
		}
		ci, err := cons.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		si, err := out.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		samples++
		if acked := ci.AckFloor.Stream; si.State.Msgs < acked || si.State.Msgs < checkpointed {
			t.Fatalf("the output stream holds %d outputs; the consumer acknowledged input through %d, the newest checkpoint applied it through %d", si.State.Msgs, acked, checkpointed)
		}
		if ci.AckFloor.Stream == uint64(n) {
			break
		}
		time.Sleep(time.Millisecond)
	}
	if checkpointed == 0 {
		t.Error("no checkpoint was read while the stream was learned")
	}
	t.Logf("%d samples, the last checkpoint read through %d", samples, checkpointed)
}

// A checkpoint whose model is not finite is never restored.
func TestDegenerateCheckpointRefused(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t, digitsPipeline("digits", "nan.images", 16))
	pl := newPipeline(&Daemon{cfg: cfg, fixed: cfg, log: NewLogger(testWriter{t}, "console").Logger}, cfg.Pipelines[0])
	m := pl.model.(*imageModel)
	secs := must(m.sections())
	c := &Checkpoint{Pipeline: "digits", Modality: "image", Config: must(yaml.Marshal(cfg.Pipelines[0])), Sections: secs, RNG: must(pl.src.MarshalBinary())}
	if err := pl.restore(c); err != nil {
		t.Fatalf("a fresh model's checkpoint: %v", err)
	}
	// Overwrite the whitening operator's first entry (the identity's 1)
	// with NaN in the encoded state.
	for i, sec := range c.Sections {
		if sec.Name != "whitener" {
			continue
		}
		one := binary.LittleEndian.AppendUint64(nil, math.Float64bits(1))
		j := bytes.Index(sec.Data, one)
		if j < 0 {
			t.Fatal("no 1 in the whitener's state")
		}
		data := bytes.Clone(sec.Data)
		binary.LittleEndian.PutUint64(data[j:], math.Float64bits(math.NaN()))
		c.Sections[i].Data = data
	}
	if err := pl.restore(c); !errors.Is(err, ErrCheckpoint) {
		t.Errorf("restoring a non-finite model: %v, want ErrCheckpoint", err)
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

func writeCheckpoint(t testing.TB, cfg *config.Config, c *Checkpoint) {
	t.Helper()
	dir := filepath.Join(cfg.DataDir, "checkpoints", c.Pipeline)
	var b bytes.Buffer
	if err := encodeCheckpoint(&b, c); err != nil {
		t.Fatal(err)
	}
	if _, err := writeCheckpointFile(dir, checkpointName(c.Pipeline, 0, c.ModelVersion), b.Bytes(), 3); err != nil {
		t.Fatal(err)
	}
}

// A checkpoint of an instance of the stream created after the current one
// cannot be of this stream's past (it was copied or planted): it is
// skipped with an event, and the daemon's own checkpoint is restored.
func TestPlantedCheckpointRefused(t *testing.T) {
	t.Parallel()
	ns := startNATS(t)
	nc := connect(t, ns.ClientURL())
	cfg := externalConfig(t, ns.ClientURL(), digitsPipeline("digits", "planted.images", 16))
	d := startDaemon(t, cfg)
	n := replayFile(t, nc, "mnist-raw-100.smtdrec", "planted.images")
	waitFor(t, 30*time.Second, "stream learned", func() bool { return pipelineStatus(d, "digits").Learned == int64(n) })
	if err := d.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	own := lastCheckpoint(t, cfg, "digits")
	planted := *own
	planted.StreamCreated = own.StreamCreated.Add(time.Hour)
	planted.LastSeq = 16000
	planted.ModelVersion = own.ModelVersion + 1000
	writeCheckpoint(t, cfg, &planted)

	events := watchErrors(t, nc, "smtd")
	d2 := startDaemon(t, cfg)
	ev := events.wait(t, ReasonCheckpointSkipped, 10*time.Second)
	if !strings.Contains(ev.Error, "after the current one") {
		t.Errorf("skip event %q does not say why", ev.Error)
	}
	if st := pipelineStatus(d2, "digits"); st.ModelVersion != own.ModelVersion || st.LastSeq != own.LastSeq {
		t.Errorf("restored version %d at seq %d, want the daemon's own %d at %d", st.ModelVersion, st.LastSeq, own.ModelVersion, own.LastSeq)
	}
}

// Checkpoint names sort and parse as decimal versions (zero-padded).
func TestCheckpointVersion(t *testing.T) {
	t.Parallel()
	for _, v := range []uint64{0, 7, 8, 65, 79, 1 << 40} {
		if got := checkpointVersion("/x/digits-2/" + checkpointName("digits-2", 0, v)); got != v {
			t.Errorf("version of %s: %d", checkpointName("digits-2", 0, v), got)
		}
	}
}

// A delivery the daemon never received (here: taken by another client
// pulling from its consumer, as a delivery lost in a server restart would
// be) is read again, not acknowledged unread with the messages after it.
func TestLostDeliveryIsReadAgain(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t, digitsPipeline("digits", "gap.images", 16))
	d := startDaemon(t, cfg)
	nc := connect(t, d.ClientURL())
	js := jetStream(t, nc)
	n := replayFile(t, nc, "mnist-raw-100.smtdrec", "gap.images")
	waitFor(t, 30*time.Second, "stream learned", func() bool { return pipelineStatus(d, "digits").Learned == int64(n) })
	cons, err := js.Consumer(t.Context(), "SMTD_DIGITS", "smtd-digits")
	if err != nil {
		t.Fatal(err)
	}
	stolen := make(chan int, 1)
	go func() {
		b, err := cons.Fetch(10, jetstream.FetchMaxWait(5*time.Second))
		got := 0
		if err == nil {
			for range b.Messages() {
				got++ // never acknowledged
			}
		}
		stolen <- got
	}()
	time.Sleep(100 * time.Millisecond) // the pull request is waiting
	m := replayFile(t, nc, "mnist-raw-100.smtdrec", "gap.images")
	if got := <-stolen; got == 0 {
		t.Skip("the other client received no message")
	} else {
		t.Logf("another client took %d deliveries", got)
	}
	waitFor(t, 30*time.Second, "every message learned", func() bool { return pipelineStatus(d, "digits").Learned == int64(n+m) })
}
