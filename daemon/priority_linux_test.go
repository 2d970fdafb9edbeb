package daemon

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

// threadsAtNice counts the threads of this process whose nice value is
// nice, from /proc/self/task/*/stat (field 19, proc(5)); the main thread
// only if withMain. When a goroutine locked to the main thread exits, the
// runtime parks that thread for good instead of ending it, so a learner
// that ran there leaves it at the learner's nice value, running nothing.
func threadsAtNice(t *testing.T, nice int, withMain bool) int {
	t.Helper()
	stats, err := filepath.Glob("/proc/self/task/*/stat")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, p := range stats {
		if !withMain && filepath.Base(filepath.Dir(p)) == strconv.Itoa(os.Getpid()) {
			continue
		}
		b, err := os.ReadFile(p)
		if err != nil {
			continue // the thread has exited
		}
		// The command name, in parentheses, may hold spaces: count
		// fields from after it, where field 3 (state) comes first.
		f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
		if v, err := strconv.Atoi(f[19-3]); err == nil && v == nice {
			n++
		}
	}
	return n
}

// A pipeline's learner runs at the daemon's priority while the daemon
// serves no queries, and on an OS thread of its own at
// service.learn_nice while it does; that thread ends with the learner
// (or, the main thread, is parked for good): no other goroutine of the
// daemon runs at the lowered priority afterwards.
func TestLearnerRunsAtLearnNiceWhileQueried(t *testing.T) {
	const nice = 13 // no other test's daemon uses it
	if os.Getenv("GOMAXPROCS") != "" {
		t.Skip("with GOMAXPROCS set, learners run at the daemon's priority")
	}
	if threadsAtNice(t, nice, false) != 0 {
		t.Fatalf("a thread is at nice %d before the daemon starts", nice)
	}
	parked := threadsAtNice(t, nice, true) // the main thread, by an earlier run

	cfg := testConfig(t, digitsPipeline("digits", "mnist.images", 64))
	cfg.Service.LearnNice = nice
	d := startDaemon(t, cfg)
	nc := connect(t, d.ClientURL())

	// No queries: every batch is learned at the daemon's priority.
	n := replayFile(t, nc, "mnist-train-1000.smtdrec", "mnist.images")
	waitFor(t, time.Minute, "the stream learned", func() bool { return pipelineStatus(d, "digits").LastSeq >= uint64(n) })
	if got := threadsAtNice(t, nice, true); got != parked {
		t.Fatalf("%d threads at nice %d after learning without queries, want %d", got, nice, parked)
	}

	// Queries every 20 ms while the stream is learned again.
	stop := make(chan struct{})
	queried := make(chan struct{})
	go func() {
		defer close(queried)
		for {
			if _, err := nc.RequestMsg(digitRequest(cfg.EmbedSubject("digits")), 10*time.Second); err != nil {
				t.Errorf("embed query: %v", err)
				return
			}
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	replayFile(t, nc, "mnist-train-1000.smtdrec", "mnist.images")
	waitFor(t, time.Minute, "the learner's thread at nice 13", func() bool { return threadsAtNice(t, nice, true) == parked+1 })
	close(stop)
	<-queried
	if err := d.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "no thread at nice 13", func() bool { return threadsAtNice(t, nice, false) == 0 })
}

// With the GOMAXPROCS environment variable set, the daemon leaves
// GOMAXPROCS as it is and its learners run at its own priority.
func TestLearnNiceOffWithGOMAXPROCSSet(t *testing.T) {
	const nice = 14 // no other test's daemon uses it
	procs := runtime.GOMAXPROCS(0)
	t.Setenv("GOMAXPROCS", strconv.Itoa(procs))
	cfg := testConfig(t, digitsPipeline("digits", "mnist.images", 64))
	cfg.Service.LearnNice = nice
	d := startDaemon(t, cfg)
	if got := runtime.GOMAXPROCS(0); got != procs {
		t.Errorf("GOMAXPROCS %d, want %d as set", got, procs)
	}
	// Once a message is applied, the learner is past the point where it
	// would have lowered its thread.
	nc := connect(t, d.ClientURL())
	replayFile(t, nc, "mnist-train-1000.smtdrec", "mnist.images")
	waitFor(t, time.Minute, "a message applied", func() bool { return pipelineStatus(d, "digits").LastSeq > 0 })
	if n := threadsAtNice(t, nice, true); n != 0 {
		t.Errorf("%d threads at nice %d, want none", n, nice)
	}
}
