//go:build unix

package daemon

import (
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Fencing: an owner frozen with SIGSTOP past its lease's TTL loses the
// pipeline to a standby; resumed, it steps down without storing a
// checkpoint, moving the latest pointer or acknowledging input, and the
// model still ends equal to an uninterrupted run's.
func TestFencingFrozenOwner(t *testing.T) {
	if testing.Short() {
		t.Skip("runs daemon processes")
	}
	const stream = "mnist-train-1000.smtdrec"
	p := clusterPipeline("kid", "fence.kid")
	want, n := referenceModel(t, clusterPipeline("ref", "fence.ref"), stream)
	want.Pipeline = "kid"

	ns := startNATS(t)
	nc := connect(t, ns.ClientURL())
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	daemons := map[string]*childDaemon{}
	for _, name := range []string{"a", "b"} {
		daemons[name] = newChildDaemon(t, name, clusterConfig(t, ns.ClientURL(), name, 1, p))
	}
	status := func() PipelineStatus {
		st, _ := clusterPipelineStatus(nc, "cl", "kid")
		return st
	}
	waitFor(t, time.Minute, "an owner and its input stream", func() bool { return status().Owner != "" && streamReachable(js, p.Input.Subject) })
	if got := replayFile(t, nc, stream, "fence.kid"); got != n {
		t.Fatalf("replayed %d of %d", got, n)
	}
	var st PipelineStatus
	waitFor(t, 2*time.Minute, "past seq 200", func() bool { st = status(); return st.LastSeq >= 200 })
	frozen := daemons[st.Owner]
	frozen.signal(t, syscall.SIGSTOP)
	t.Logf("%s (epoch %d) frozen after seq %d", frozen.name, st.Epoch, st.LastSeq)
	var next PipelineStatus
	waitFor(t, time.Minute, "a new owner", func() bool {
		next = status()
		return next.Owner != "" && next.Owner != frozen.name && next.Epoch > st.Epoch
	})
	// The successor has claimed the latest pointer.
	waitFor(t, time.Minute, "the pointer claimed", func() bool {
		_, ptr := storedCheckpoint(t, js, "kid")
		return ptr.Epoch >= next.Epoch
	})
	before := checkpointObjects(t, js)
	frozen.signal(t, syscall.SIGCONT)
	waitFor(t, time.Minute, "the old owner to step down", func() bool {
		return strings.Contains(frozen.log.String(), "lease lost: stepped down without writing")
	})

	got := finalCheckpoint(t, nc, js, "kid", n)
	_, ptr := storedCheckpoint(t, js, "kid")
	for name := range checkpointObjects(t, js) {
		if checkpointEpoch(name) == st.Epoch && !before[name] {
			t.Errorf("the fenced owner stored %s after it resumed", name)
		}
	}
	if ptr.Epoch == st.Epoch {
		t.Errorf("the latest pointer carries the fenced owner's epoch %d", st.Epoch)
	}
	sameModel(t, got, want)
	if c := got.Counters; c.Received != int64(n) || c.Learned != int64(n) {
		t.Errorf("counters %+v: want every one of %d messages received and learned once", c, n)
	}
}
