package daemon

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/smtd/smtd/config"
)

// The JetStream intake sends the fetch of the next batch as it returns
// one, so that the server delivers it while the batch is learned, and
// still returns the stream's messages once each, in order.
func TestJetStreamIntakeFetchesAhead(t *testing.T) {
	d := startDaemon(t, testConfig(t, config.DefaultPipeline(config.Image, "images")))
	ctx := context.Background()
	p := config.DefaultPipeline(config.Image, "ahead")
	p.Input.Subject = "test.ahead"
	st, err := ensureStream(ctx, d.js, d.cfg, &p)
	if err != nil {
		t.Fatal(err)
	}
	const n = 70
	for i := range n {
		if _, err := d.js.Publish(ctx, p.Input.Subject, []byte(strconv.Itoa(i))); err != nil {
			t.Fatal(err)
		}
	}
	in, err := newJSIntake(ctx, d.js, st.name, "smtd-ahead", &p, 0)
	if err != nil {
		t.Fatal(err)
	}
	var seqs []uint64
	for _, want := range []int{32, 32, 6} {
		msgs, err := in.next(ctx, 32, 200*time.Millisecond, false)
		if err != nil || len(msgs) != want {
			t.Fatalf("next: %d messages, err %v; want %d", len(msgs), err, want)
		}
		if in.ahead == nil {
			t.Fatal("no fetch ahead after a batch was returned")
		}
		for _, m := range msgs {
			seqs = append(seqs, m.seq)
		}
	}
	for i, s := range seqs {
		if s != uint64(i+1) {
			t.Fatalf("sequences %v: want 1..%d in order", seqs, n)
		}
	}
	if msgs, err := in.next(ctx, 32, 50*time.Millisecond, false); err != nil || len(msgs) != 0 {
		t.Fatalf("past the end: %d messages, err %v", len(msgs), err)
	}
	if in.ahead != nil {
		t.Error("a fetch ahead after an empty batch")
	}
}
