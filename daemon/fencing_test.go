//go:build unix

package daemon

import (
	"bytes"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"

	"github.com/smtd/smtd/config"
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
	waitForOwner(t, nc, js, p)
	if got := replayFile(t, nc, stream, "fence.kid"); got != n {
		t.Fatalf("replayed %d of %d", got, n)
	}
	st := ownerPast(t, status, daemons, 200)
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

// A daemon frozen with SIGSTOP keeps its queue subscriptions, and so its
// share of the embed requests, until the NATS server drops its connection
// after ping_interval × ping_max without an answer (deploy/ sets 5 s × 2;
// the server's default is 2 min × 2). From then on the other daemon
// answers every request; resumed, the frozen one reconnects and answers
// again.
func TestFrozenDaemonLeavesQueries(t *testing.T) {
	if testing.Short() {
		t.Skip("runs daemon processes")
	}
	const ping, pings = time.Second, 2
	ns := startNATS(t, func(o *server.Options) { o.PingInterval, o.MaxPingsOut = ping, pings })
	nc := connect(t, ns.ClientURL())
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	p := clusterPipeline("kid", "frozen.kid")
	cfgs := map[string]*config.Config{}
	daemons := map[string]*childDaemon{}
	for _, name := range []string{"a", "b"} {
		cfgs[name] = clusterConfig(t, ns.ClientURL(), name, 1, p)
		daemons[name] = newChildDaemon(t, name, cfgs[name])
	}
	waitForOwner(t, nc, js, p)
	finalCheckpoint(t, nc, js, "kid", replayFile(t, nc, "mnist-train-1000.smtdrec", "frozen.kid"))
	req := digitRequest(cfgs["a"].EmbedSubject("kid"))
	ask := func(timeout time.Duration) (by string, ok bool) {
		m, err := nc.RequestMsg(req, timeout)
		if err != nil || m.Header.Get(micro.ErrorHeader) != "" {
			return "", false
		}
		return m.Header.Get(HeaderDaemon), true
	}
	waitFor(t, time.Minute, "both daemons answering", func() bool {
		seen := map[string]bool{}
		for range 20 {
			if by, ok := ask(time.Second); ok {
				seen[by] = true
			}
		}
		return len(seen) == 2
	})
	st, _ := clusterPipelineStatus(nc, "cl", "kid")
	frozen := daemons["a"]
	if st.Owner == "a" {
		frozen = daemons["b"] // the standby: only its queries move
	}

	frozen.signal(t, syscall.SIGSTOP)
	frozen.waitStopped(t)
	froze := time.Now()
	const run = 50 // answers in a row that say the frozen daemon is out
	deadline := froze.Add(ping*(pings+1) + 10*time.Second)
	var lost, answered, total int
	var lastLost time.Duration
	for answered < run && time.Now().Before(deadline) {
		by, ok := ask(250 * time.Millisecond)
		switch {
		case !ok:
			lost++
			lastLost, answered = time.Since(froze), 0
		case by == frozen.name:
			t.Fatalf("the frozen daemon %s answered", by)
		default:
			answered++
			total++
		}
	}
	if answered < run {
		t.Fatalf("%v after the freeze, %d requests still lost (%d answered): the server keeps the frozen daemon's subscriptions", time.Since(froze).Round(time.Millisecond), lost, total)
	}
	t.Logf("%d requests lost, the last %v after the freeze; %d answered", lost, lastLost.Round(time.Millisecond), total)

	frozen.signal(t, syscall.SIGCONT)
	waitFor(t, time.Minute, "the resumed daemon answering", func() bool {
		by, ok := ask(time.Second)
		return ok && by == frozen.name
	})
}

// waitStopped waits until the child has stopped after a SIGSTOP, which
// takes effect asynchronously: until its state in /proc is T, or, where
// there is no /proc, for 100 ms.
func (c *childDaemon) waitStopped(t testing.TB) {
	t.Helper()
	stat := fmt.Sprintf("/proc/%d/stat", c.cmd.Process.Pid)
	if _, err := os.Stat(stat); err != nil {
		time.Sleep(100 * time.Millisecond)
		return
	}
	waitFor(t, 10*time.Second, c.name+" stopped", func() bool {
		b, err := os.ReadFile(stat)
		// pid (comm) state …; comm may hold spaces and parentheses.
		i := bytes.LastIndexByte(b, ')')
		return err == nil && i >= 0 && bytes.HasPrefix(b[i+1:], []byte(" T"))
	})
}
