package feed

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// startJetStream runs a NATS server with JetStream and a stream on
// "in.>" that remembers message ids for an hour.
func startJetStream(t *testing.T) (*nats.Conn, jetstream.Stream) {
	t.Helper()
	nc, err := nats.Connect(runServer(t, nil))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	st, err := js.CreateStream(context.Background(), jetstream.StreamConfig{Name: "IN", Subjects: []string{"in.>"}, Duplicates: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	return nc, st
}

// runServer starts a NATS server with JetStream on a free loopback port,
// with users if any, and returns its client URL.
func runServer(t *testing.T, users []*server.User) string {
	t.Helper()
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true, Users: users})
	if err != nil {
		t.Fatal(err)
	}
	s.Start()
	t.Cleanup(s.Shutdown)
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("NATS server not ready")
	}
	return s.ClientURL()
}

func streamCount(t *testing.T, st jetstream.Stream) uint64 {
	t.Helper()
	info, err := st.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}

// A feed cut short and run again stores the rest and nothing twice.
func TestSendAgainAfterAnInterruptionStoresEachItemOnce(t *testing.T) {
	nc, st := startJetStream(t)
	images := func() Source {
		return must(Images("images", Shape{28, 28, 1}, []string{filepath.Join(testdata, "images")}, nil))
	}
	ctx, cancel := context.WithCancel(context.Background())
	// Stop after the third item is read.
	src := images()
	all := src.Items
	n := 0
	src.Items = func(yield func(Item, error) bool) {
		for it, err := range all {
			if n++; n == 4 {
				cancel()
			}
			if !yield(it, err) {
				return
			}
		}
	}
	res, err := Send(ctx, nc, "in.images", src, Options{Window: 1, Rate: 1000})
	if !errors.Is(err, context.Canceled) || res.Sent < 1 || res.Sent > 4 {
		t.Fatalf("interrupted feed: %+v, %v", res, err)
	}
	first := res.Sent
	if got := streamCount(t, st); got != uint64(first) {
		t.Fatalf("stream holds %d, feed says %d sent", got, first)
	}
	res, err = Send(context.Background(), nc, "in.images", images(), Options{})
	if err != nil || res.Sent != 6-first || res.Duplicates != first {
		t.Fatalf("second feed: %+v, %v; want %d sent, %d duplicates", res, err, 6-first, first)
	}
	if got := streamCount(t, st); got != 6 {
		t.Errorf("stream holds %d, want 6", got)
	}
}

func TestSendReportsUnreadableItemsAndAMissingStream(t *testing.T) {
	nc, _ := startJetStream(t)
	src := Concat(
		must(Images("images", Shape{4, 4, 1}, []string{filepath.Join(testdata, "images", "odd")}, nil)),
		must(Images("images", Shape{4, 4, 1}, []string{filepath.Join(testdata, "words.txt")}, nil)),
	)
	var skipped []string
	res, err := Send(context.Background(), nc, "in.x", src, Options{Skip: func(name string, err error) { skipped = append(skipped, name) }})
	if err != nil || res.Sent != 3 || res.Skipped != 1 || len(skipped) != 1 || !strings.HasSuffix(skipped[0], "words.txt") {
		t.Errorf("%+v, %v, skipped %v; want 3 sent, words.txt skipped", res, err, skipped)
	}
	_, err = Send(context.Background(), nc, "elsewhere", Text("words", strings.NewReader("a b\n"), "-", false), Options{AckWait: 5 * time.Second})
	if !errors.Is(err, ErrNoStream) {
		t.Errorf("publishing where no stream listens: %v, want ErrNoStream", err)
	}
}

// A user who may not publish to the subject is told at once, not after
// AckWait.
func TestSendReportsARefusedPublish(t *testing.T) {
	url := runServer(t, []*server.User{{Username: "reader", Password: "secret", Permissions: &server.Permissions{
		Publish: &server.SubjectPermission{Deny: []string{"in.>"}},
	}}})
	nc, err := nats.Connect(url, nats.UserInfo("reader", "secret"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	res, err := Send(context.Background(), nc, "in.words", Text("words", strings.NewReader("a b\nc d\n"), "-", false), Options{})
	if !errors.Is(err, nats.ErrPermissionViolation) || res.Sent != 0 {
		t.Errorf("%+v, %v; want nothing sent and a permissions violation", res, err)
	}
}

func TestDryRunPrintsAndSendsNothing(t *testing.T) {
	var b bytes.Buffer
	res, err := DryRun(&b, "in.words", Text("words", strings.NewReader("one\ntwo\n"), "t.txt", false))
	if err != nil || res.Sent != 2 {
		t.Fatalf("%+v, %v", res, err)
	}
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "t.txt:1 -> in.words 3 bytes Nats-Msg-Id=words:") {
		t.Errorf("dry run printed %q", b.String())
	}
}
