package daemon

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// threadsAtNice counts the threads of this process whose nice value is
// nice, from /proc/self/task/*/stat (field 19, proc(5)).
func threadsAtNice(t *testing.T, nice int) int {
	t.Helper()
	stats, err := filepath.Glob("/proc/self/task/*/stat")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, p := range stats {
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

// A pipeline's learner runs on an OS thread of its own at
// service.learn_nice, and that thread ends with the learner: no other
// goroutine of the daemon runs at the lowered priority afterwards.
func TestLearnerRunsAtLearnNice(t *testing.T) {
	const nice = 13 // no other test's daemon uses it
	if threadsAtNice(t, nice) != 0 {
		t.Fatalf("a thread is at nice %d before the daemon starts", nice)
	}
	cfg := testConfig(t, digitsPipeline("digits", "mnist.images", 64))
	cfg.Service.LearnNice = nice
	d := startDaemon(t, cfg)
	waitFor(t, 10*time.Second, "the learner's thread at nice 13", func() bool { return threadsAtNice(t, nice) == 1 })
	if err := d.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "no thread at nice 13", func() bool { return threadsAtNice(t, nice) == 0 })
}
