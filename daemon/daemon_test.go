package daemon

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/smtd/smtd/config"
	"github.com/smtd/smtd/record"
)

// testConfig is a config on an embedded server at a free port, with data
// in a temporary directory, and one pipeline per given pipeline config.
func testConfig(t testing.TB, pipelines ...config.Pipeline) *config.Config {
	cfg := config.Default()
	cfg.DataDir = t.TempDir()
	cfg.NATS.Listen = "127.0.0.1:-1"
	cfg.Log.Level = "warn"
	cfg.Pipelines = pipelines
	return cfg
}

// startDaemon starts a daemon and stops it at the end of the test.
func startDaemon(t testing.TB, cfg *config.Config) *Daemon {
	t.Helper()
	d, err := New(cfg, Options{Logger: NewLogger(testWriter{t}, "console")})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Shutdown(context.Background()) })
	return d
}

// testWriter sends logs to t.Log, so they show only for failed tests.
type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(string(p))
	return len(p), nil
}

func connect(t testing.TB, url string) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// pipelineStatus returns the status of the named pipeline.
func pipelineStatus(d *Daemon, name string) PipelineStatus {
	for _, p := range d.Status().Pipelines {
		if p.Name == name {
			return p
		}
	}
	return PipelineStatus{}
}

// replayFile publishes a recorded stream from testdata through JetStream,
// optionally to another subject, and returns how many messages it sent.
func replayFile(t testing.TB, nc *nats.Conn, name, subject string) int {
	t.Helper()
	f, err := os.Open(filepath.Join("..", "testdata", "streams", name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, err := record.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	n, err := record.Replay(context.Background(), nc, r, record.ReplayOptions{Subject: subject, JetStream: true})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// request sends a request and decodes a JSON reply into v.
func request(t testing.TB, nc *nats.Conn, subject string, data []byte, v any) *nats.Msg {
	t.Helper()
	m, err := nc.Request(subject, data, 10*time.Second)
	if err != nil {
		t.Fatalf("request %s: %v", subject, err)
	}
	if v != nil {
		if err := json.Unmarshal(m.Data, v); err != nil {
			t.Fatalf("reply of %s: %v: %s", subject, err, m.Data)
		}
	}
	return m
}

// subscribe collects the messages of subject.
func subscribe(t testing.TB, nc *nats.Conn, subject string) *nats.Subscription {
	t.Helper()
	sub, err := nc.SubscribeSync(subject)
	if err != nil {
		t.Fatal(err)
	}
	sub.SetPendingLimits(-1, -1)
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return sub
}

// readStream reads a recorded stream from testdata.
func readStream(t testing.TB, name string) []*record.Message {
	t.Helper()
	msgs, err := record.ReadFile(filepath.Join("..", "testdata", "streams", name))
	if err != nil {
		t.Fatal(err)
	}
	return msgs
}

// decodeSamples decodes recorded input messages of pipeline p, every one
// of which must be valid.
func decodeSamples(t testing.TB, p *config.Pipeline, msgs []*record.Message) []sample {
	t.Helper()
	out := make([]sample, 0, len(msgs))
	for _, r := range msgs {
		s, err := decode(p, r.Header, r.Data)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
	return out
}

func natsMsg(subject string, h nats.Header, data []byte) *nats.Msg {
	m := nats.NewMsg(subject)
	for k, v := range h {
		m.Header[k] = v
	}
	m.Data = data
	return m
}
