package record

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// runServer starts an embedded NATS server with JetStream on a random port
// and returns a connection to it; both are closed when the test ends.
func runServer(t *testing.T) (*server.Server, *nats.Conn) {
	t.Helper()
	s, err := server.NewServer(&server.Options{
		Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true,
		JetStream: true, StoreDir: t.TempDir(),
	})
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats server not ready")
	}
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	return s, connect(t, s)
}

func connect(t *testing.T, s *server.Server) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// waitFor polls cond until it holds or 10 s pass.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// testMessages returns n messages alternating between two subjects, each with
// a multi-valued header and a distinct payload, 10 ms apart.
func testMessages(n int) []*Message {
	msgs := make([]*Message, n)
	for i := range msgs {
		subj := "in.images"
		if i%2 == 1 {
			subj = "in.words"
		}
		msgs[i] = &Message{
			Subject: subj,
			Header:  nats.Header{"Smtd-Label": {fmt.Sprint(i % 10)}, "Smtd-Tag": {"a", fmt.Sprint(i)}},
			Data:    []byte(fmt.Sprintf("payload %d", i)),
			Offset:  time.Duration(i) * 10 * time.Millisecond,
		}
	}
	return msgs
}

type captureResult struct {
	n   int
	err error
}

// startCapture runs Capture in a goroutine owned by the test and returns once
// it is subscribed; the result arrives on the returned channel.
func startCapture(ctx context.Context, t *testing.T, nc *nats.Conn, subjects []string, w *Writer, opts CaptureOptions) <-chan captureResult {
	t.Helper()
	ready := make(chan struct{})
	opts.Ready = func() { close(ready) }
	done := make(chan captureResult, 1)
	go func() {
		n, err := Capture(ctx, nc, subjects, w, opts)
		done <- captureResult{n, err}
	}()
	select {
	case <-ready:
	case r := <-done:
		t.Fatalf("capture ended before subscribing: %v", r.err)
	}
	return done
}

func TestCaptureCount(t *testing.T) {
	s, nc := runServer(t)
	pubc := connect(t, s)
	var file bytes.Buffer
	w, _ := NewWriter(&file)
	const n = 300
	done := startCapture(context.Background(), t, nc, []string{"in.images", "in.words"}, w, CaptureOptions{Count: n})

	want := testMessages(n + 5) // the last five are beyond Count
	for _, m := range want {
		if err := pubc.PublishMsg(&nats.Msg{Subject: m.Subject, Header: m.Header, Data: m.Data}); err != nil {
			t.Fatal(err)
		}
	}
	pubc.Publish("other.subject", []byte("not captured"))
	pubc.Flush()
	r := <-done
	if r.err != nil || r.n != n {
		t.Fatalf("Capture = %d, %v; want %d, nil", r.n, r.err, n)
	}
	rd, err := NewReader(&file)
	if err != nil {
		t.Fatal(err)
	}
	got, err := readAll(rd)
	if err != io.EOF || len(got) != n {
		t.Fatalf("recording has %d messages, err %v", len(got), err)
	}
	for i, m := range got {
		if m.Subject != want[i].Subject || !bytes.Equal(m.Data, want[i].Data) ||
			m.Header.Get("Smtd-Label") != want[i].Header.Get("Smtd-Label") ||
			fmt.Sprint(m.Header.Values("Smtd-Tag")) != fmt.Sprint(want[i].Header.Values("Smtd-Tag")) {
			t.Fatalf("message %d = %+v, want %+v", i, m, want[i])
		}
		if i == 0 && m.Offset != 0 || i > 0 && m.Offset < got[i-1].Offset {
			t.Fatalf("message %d: offset %v after %v", i, m.Offset, got[max(i-1, 0)].Offset)
		}
	}
}

// TestCaptureCancel stops an unlimited capture with its context: the result
// is nil and the recording holds the published messages in order (a prefix:
// the client may still be reading the last ones when the capture stops).
func TestCaptureCancel(t *testing.T) {
	s, nc := runServer(t)
	pubc := connect(t, s)
	var file bytes.Buffer
	w, _ := NewWriter(&file)
	ctx, cancel := context.WithCancel(context.Background())
	done := startCapture(ctx, t, nc, []string{"in.>"}, w, CaptureOptions{})
	want := testMessages(50)
	for _, m := range want {
		pubc.PublishMsg(&nats.Msg{Subject: m.Subject, Header: m.Header, Data: m.Data})
	}
	pubc.Flush()
	waitFor(t, "messages to reach the capture connection", func() bool { return nc.Stats().InMsgs == 50 })
	cancel()
	r := <-done
	if r.err != nil {
		t.Fatalf("Capture: %v", r.err)
	}
	got, _ := readAll(must(NewReader(&file)))
	if len(got) != r.n || r.n > 50 || r.n < 40 {
		t.Fatalf("Capture wrote %d, file holds %d of 50", r.n, len(got))
	}
	for i, m := range got {
		if !bytes.Equal(m.Data, want[i].Data) {
			t.Fatalf("message %d = %q, want %q", i, m.Data, want[i].Data)
		}
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// blockingWriter blocks every Write until release is closed.
type blockingWriter struct {
	release chan struct{}
	started chan struct{}
	once    bool
}

func (b *blockingWriter) Write(p []byte) (int, error) {
	if !b.once {
		b.once = true
		close(b.started)
	}
	<-b.release
	return len(p), nil
}

// TestCaptureReportsDrops makes the client a slow consumer: the writer blocks
// while messages pour into a one-message buffer. Capture must fail with
// ErrDropped instead of writing a recording with holes.
func TestCaptureReportsDrops(t *testing.T) {
	s, nc := runServer(t)
	pubc := connect(t, s)
	bw := &blockingWriter{release: make(chan struct{}), started: make(chan struct{})}
	w, _ := NewWriter(bw)
	done := startCapture(context.Background(), t, nc, []string{"in.>"}, w, CaptureOptions{Buffer: 1})
	big := make([]byte, 100<<10) // larger than the Writer's buffer: the first Write blocks
	for range 20 {
		pubc.Publish("in.big", big)
	}
	pubc.Flush()
	<-bw.started
	waitFor(t, "messages to reach the capture connection", func() bool { return nc.Stats().InMsgs == 20 })
	close(bw.release)
	r := <-done
	if !errors.Is(r.err, ErrDropped) || !errors.Is(r.err, nats.ErrSlowConsumer) {
		t.Fatalf("Capture = %d, %v; want ErrDropped", r.n, r.err)
	}
}

func TestCaptureErrors(t *testing.T) {
	s, nc := runServer(t)
	w, _ := NewWriter(io.Discard)
	if _, err := Capture(context.Background(), nc, nil, w, CaptureOptions{}); !errors.Is(err, ErrOptions) {
		t.Errorf("no subjects: %v", err)
	}
	if _, err := Capture(context.Background(), nc, []string{"x"}, w, CaptureOptions{Count: -1}); !errors.Is(err, ErrOptions) {
		t.Errorf("negative count: %v", err)
	}
	if _, err := Capture(context.Background(), nc, []string{"bad subject"}, w, CaptureOptions{}); err == nil {
		t.Error("bad subject: no error")
	}
	// The connection closing ends the capture with an error.
	nc2 := connect(t, s)
	done := startCapture(context.Background(), t, nc2, []string{"x"}, w, CaptureOptions{})
	nc2.Close()
	if r := <-done; !errors.Is(r.err, nats.ErrConnectionClosed) {
		t.Errorf("closed connection: %v", r.err)
	}
}

// recording encodes msgs and returns a Reader over them.
func recording(t *testing.T, msgs []*Message) *Reader {
	t.Helper()
	r, err := NewReader(bytes.NewReader(encode(t, msgs)))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// collect subscribes to subject and returns a function that waits for n
// messages and returns them.
func collect(t *testing.T, nc *nats.Conn, subject string) func(n int) []*nats.Msg {
	t.Helper()
	ch := make(chan *nats.Msg, 1<<12)
	sub, err := nc.ChanSubscribe(subject, ch)
	if err != nil {
		t.Fatal(err)
	}
	nc.Flush()
	t.Cleanup(func() { sub.Unsubscribe() })
	return func(n int) []*nats.Msg {
		t.Helper()
		var got []*nats.Msg
		waitFor(t, fmt.Sprintf("%d messages on %s", n, subject), func() bool {
			for len(ch) > 0 {
				got = append(got, <-ch)
			}
			return len(got) >= n
		})
		return got
	}
}

func TestReplayCore(t *testing.T) {
	s, nc := runServer(t)
	want := testMessages(500)
	wait := collect(t, connect(t, s), "in.>")
	n, err := Replay(context.Background(), nc, recording(t, want), ReplayOptions{})
	if err != nil || n != len(want) {
		t.Fatalf("Replay = %d, %v", n, err)
	}
	got := wait(len(want))
	for i, m := range got {
		if m.Subject != want[i].Subject || !bytes.Equal(m.Data, want[i].Data) ||
			fmt.Sprint(m.Header.Values("Smtd-Tag")) != fmt.Sprint(want[i].Header.Values("Smtd-Tag")) {
			t.Fatalf("message %d: %s %q %v, want %s %q %v", i, m.Subject, m.Data, m.Header, want[i].Subject, want[i].Data, want[i].Header)
		}
	}
}

func TestReplaySubjectOverride(t *testing.T) {
	s, nc := runServer(t)
	wait := collect(t, connect(t, s), "elsewhere")
	want := testMessages(10)
	if n, err := Replay(context.Background(), nc, recording(t, want), ReplayOptions{Subject: "elsewhere"}); err != nil || n != 10 {
		t.Fatalf("Replay = %d, %v", n, err)
	}
	for i, m := range wait(10) {
		if !bytes.Equal(m.Data, want[i].Data) {
			t.Fatalf("message %d = %q", i, m.Data)
		}
	}
	if _, err := Replay(context.Background(), nc, recording(t, want), ReplayOptions{Subject: "in.*"}); !errors.Is(err, ErrOptions) {
		t.Fatalf("wildcard subject: %v", err)
	}
}

func TestReplayRate(t *testing.T) {
	_, nc := runServer(t)
	msgs := testMessages(11) // offsets 0 ... 100 ms
	for _, tt := range []struct {
		speed float64
		min   time.Duration
	}{{0, 100 * time.Millisecond}, {1, 100 * time.Millisecond}, {4, 25 * time.Millisecond}} {
		start := time.Now()
		n, err := Replay(context.Background(), nc, recording(t, msgs), ReplayOptions{Rate: true, Speed: tt.speed})
		if took := time.Since(start); err != nil || n != 11 || took < tt.min {
			t.Errorf("speed %v: Replay = %d, %v in %v; want 11 messages in >= %v", tt.speed, n, err, took, tt.min)
		}
	}

	// Cancelling while waiting for a far message returns at once.
	far := []*Message{{Subject: "x", Offset: 0}, {Subject: "x", Offset: time.Hour}}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	n, err := Replay(ctx, nc, recording(t, far), ReplayOptions{Rate: true})
	if n != 1 || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("cancelled: Replay = %d, %v", n, err)
	}
}

// inStream runs a server with a stream IN taking in.>, and returns a
// client connection and the stream.
func inStream(t *testing.T) (*nats.Conn, jetstream.Stream) {
	t.Helper()
	_, nc := runServer(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	stream, err := js.CreateStream(context.Background(), jetstream.StreamConfig{Name: "IN", Subjects: []string{"in.>"}})
	if err != nil {
		t.Fatal(err)
	}
	return nc, stream
}

func TestReplayJetStream(t *testing.T) {
	nc, stream := inStream(t)
	ctx := context.Background()
	want := testMessages(600)
	n, err := Replay(ctx, nc, recording(t, want), ReplayOptions{JetStream: true, Window: 16})
	if err != nil || n != len(want) {
		t.Fatalf("Replay = %d, %v", n, err)
	}
	// Replay returned after every ack: the stream already holds everything.
	info, err := stream.Info(ctx)
	if err != nil || info.State.Msgs != uint64(len(want)) {
		t.Fatalf("stream holds %d messages, %v", info.State.Msgs, err)
	}
	for i, m := range want {
		got, err := stream.GetMsg(ctx, uint64(i+1))
		if err != nil {
			t.Fatal(err)
		}
		if got.Subject != m.Subject || !bytes.Equal(got.Data, m.Data) ||
			fmt.Sprint(got.Header.Values("Smtd-Tag")) != fmt.Sprint(m.Header.Values("Smtd-Tag")) {
			t.Fatalf("sequence %d: %s %q %v, want %s %q %v", i+1, got.Subject, got.Data, got.Header, m.Subject, m.Data, m.Header)
		}
	}

	// A subject no stream takes fails instead of hanging or dropping.
	n, err = Replay(ctx, nc, recording(t, []*Message{{Subject: "nostream.x", Data: []byte("x")}}), ReplayOptions{JetStream: true})
	if n != 0 || !errors.Is(err, jetstream.ErrNoStreamResponse) {
		t.Fatalf("no stream: Replay = %d, %v", n, err)
	}
}

// Messages with a Nats-Msg-Id replayed into the stream that stored them
// are acknowledged as duplicates: counted apart, not as replayed, unless
// the ids are stripped.
func TestReplayDuplicates(t *testing.T) {
	nc, stream := inStream(t)
	ctx := context.Background()
	msgs := testMessages(20)
	for i, m := range msgs {
		if i%2 == 0 {
			m.Header.Set(nats.MsgIdHdr, fmt.Sprint("id-", i))
		}
	}
	var dups []int
	opts := ReplayOptions{JetStream: true, Duplicate: func(i int) { dups = append(dups, i) }}
	if n, err := Replay(ctx, nc, recording(t, msgs), opts); err != nil || n != 20 || len(dups) != 0 {
		t.Fatalf("first replay: %d stored, duplicates %v, %v", n, dups, err)
	}
	if n, err := Replay(ctx, nc, recording(t, msgs), opts); err != nil || n != 10 || len(dups) != 10 || dups[0] != 0 || dups[9] != 18 {
		t.Fatalf("again: %d stored, duplicates %v, %v; want 10 stored, the even messages duplicates", n, dups, err)
	}
	opts.StripMsgID = true
	if n, err := Replay(ctx, nc, recording(t, msgs), opts); err != nil || n != 20 || len(dups) != 10 {
		t.Fatalf("ids stripped: %d stored, duplicates %v, %v; want all 20 stored", n, dups, err)
	}
	if info, err := stream.Info(ctx); err != nil || info.State.Msgs != 50 {
		t.Fatalf("stream holds %v messages, %v; want 50", info.State.Msgs, err)
	}
	if m, err := stream.GetMsg(ctx, 50); err != nil || m.Header.Get(nats.MsgIdHdr) != "" {
		t.Errorf("last stored message: %v, %v; want no Nats-Msg-Id", m, err)
	}
}

// TestReplayDamaged replays a recording cut by a crash: the whole records go
// out and the truncation is reported.
func TestReplayDamaged(t *testing.T) {
	s, nc := runServer(t)
	msgs := testMessages(5)
	data := encode(t, msgs)
	wait := collect(t, connect(t, s), "in.>")
	r, _ := NewReader(bytes.NewReader(data[:len(data)-2]))
	n, err := Replay(context.Background(), nc, r, ReplayOptions{})
	if n != 4 || !errors.Is(err, ErrTruncated) {
		t.Fatalf("Replay = %d, %v; want 4, ErrTruncated", n, err)
	}
	if got := wait(4); len(got) != 4 {
		t.Fatalf("received %d", len(got))
	}
}

func TestOptionsValidate(t *testing.T) {
	tests := []struct {
		name string
		err  error
	}{
		{"capture zero", CaptureOptions{}.Validate()},
		{"replay zero", ReplayOptions{}.Validate()},
		{"replay full", ReplayOptions{Subject: "a.b", Rate: true, Speed: 2, JetStream: true, Window: 8, AckWait: time.Second}.Validate()},
	}
	for _, tt := range tests {
		if tt.err != nil {
			t.Errorf("%s: %v", tt.name, tt.err)
		}
	}
	bad := []error{
		CaptureOptions{Buffer: -1}.Validate(),
		ReplayOptions{Subject: "a..b"}.Validate(),
		ReplayOptions{Subject: "a.>"}.Validate(),
		ReplayOptions{Subject: "a b"}.Validate(),
		ReplayOptions{Speed: -1}.Validate(),
		ReplayOptions{Window: -1}.Validate(),
		ReplayOptions{AckWait: -1}.Validate(),
	}
	for i, err := range bad {
		if !errors.Is(err, ErrOptions) {
			t.Errorf("bad case %d: %v", i, err)
		}
	}
}
