package bench

import (
	"os"
	"runtime"
	"testing"
	"time"
)

// TestProcReadings checks the /proc readings of bench cluster on this
// process: touching 64 MB of new memory counts at least half its pages
// as minor faults and in the resident set, and CPU time grows with work.
func TestProcReadings(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc")
	}
	pid := os.Getpid()
	before := minorFaults(pid)
	mem := make([]byte, 64<<20)
	for i := 0; i < len(mem); i += 4096 {
		mem[i] = 1
	}
	if got, want := minorFaults(pid)-before, float64(len(mem)/4096/2); got < want {
		t.Errorf("%v minor faults for touching %d pages, want at least %v", got, len(mem)/4096, want)
	}
	if rss := rssMiB(pid); rss < 64 {
		t.Errorf("RSS %v MiB with 64 MiB touched", rss)
	}
	runtime.KeepAlive(mem)
	// CPU time, in clock ticks, grows while this goroutine spins.
	start, deadline := cpuSeconds(pid), time.Now().Add(5*time.Second)
	for cpuSeconds(pid) <= start {
		if time.Now().After(deadline) {
			t.Fatalf("CPU time stayed at %v s while spinning for 5 s", start)
		}
	}
}

// cpuSeconds counts this process's CPU time: at least the 0.1 s that a
// goroutine spinning 0.2 s spends (the clock ticks are 10 ms), and at
// most the wall-clock time times the cores; none for a process that
// does not exist.
func TestCPUSecondsCounts(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc")
	}
	before := cpuSeconds(os.Getpid())
	t0 := time.Now()
	for time.Since(t0) < 200*time.Millisecond {
	}
	wall := time.Since(t0).Seconds()
	if got := cpuSeconds(os.Getpid()) - before; got < 0.1 || got > wall*float64(runtime.NumCPU())+0.02 {
		t.Errorf("%v s of CPU counted over %v s of spinning", got, wall)
	}
	if got := cpuSeconds(-1); got != 0 {
		t.Errorf("%v s of CPU for pid -1", got)
	}
}
