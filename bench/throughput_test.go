package bench

import (
	"context"
	"io"
	"math"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/smtd/smtd/config"
	"github.com/smtd/smtd/daemon"
)

// collections counts the answers above the p99 that were in flight while
// a collection of this process ended, and only those.
func TestCollectionsFindsSlowAnswersNearGC(t *testing.T) {
	start := time.Now()
	runtime.GC()
	end := time.Now() // after the cycle's end
	l := &queryLoad{}
	for i := range 100 {
		at, lat := start.Add(-time.Second+time.Duration(i)*time.Millisecond), time.Millisecond
		switch i {
		case 10: // in flight for the whole collection
			at, lat = start, end.Sub(start)+time.Millisecond
		case 20: // as slow, an hour later
			at, lat = end.Add(time.Hour), end.Sub(start)+time.Millisecond
		}
		l.sentAt = append(l.sentAt, at)
		l.outcome = append(l.outcome, queryOutcome{'a', lat})
		l.answerLat = append(l.answerLat, lat)
	}
	cycles, near := collections(l, start)
	if cycles < 1 {
		t.Errorf("%d collections since the start, want at least the forced one", cycles)
	}
	if near != 0.5 {
		t.Errorf("slow answers near a collection: %v, want 0.5", near)
	}
}

// heapAllocated counts what this process allocates.
func TestHeapAllocatedCounts(t *testing.T) {
	before := heapAllocated()
	sink = make([]byte, 1<<20)
	if got := heapAllocated() - before; got < 1<<20 {
		t.Errorf("%d bytes counted for a 1 MiB allocation", got)
	}
}

var sink []byte

// The off-CPU shares of a phase come from the daemon's counters' growth
// over it, and are -1 when it timed no query.
func TestOffCPUShares(t *testing.T) {
	a := daemon.QueryStatus{Timed: 100, WorkSeconds: 1, OffCPUSeconds: 0.5, MostlyOffCPU: 10}
	b := daemon.QueryStatus{Timed: 300, WorkSeconds: 3, OffCPUSeconds: 0.9, MostlyOffCPU: 14}
	var l queryLoad
	l.setOffCPU(a, b)
	if math.Abs(l.offCPU-0.2) > 1e-12 || math.Abs(l.mostlyOffCPU-0.02) > 1e-12 {
		t.Errorf("off CPU %v, mostly %v; want 0.2 and 0.02", l.offCPU, l.mostlyOffCPU)
	}
	l.setOffCPU(b, b)
	if l.offCPU != -1 || l.mostlyOffCPU != -1 {
		t.Errorf("no query timed: off CPU %v, mostly %v; want -1", l.offCPU, l.mostlyOffCPU)
	}
}

// bench throughput runs its phases on a small stream and reports, for
// each, what was sent and how it ended; in the replay phase the daemon
// learns a backlog published before it, and, restarted with its model
// reset, its first images again as a backlog; then the frames pipeline
// learns panned video in the library and the daemon. The phases last 2
// s: the daemon counts what it learned a minibatch (32 images) at a time,
// and under the race detector it learns about 60 images a second.
func TestThroughputPhases(t *testing.T) {
	dir := digitsDir(t, 11, 64)
	photos := t.TempDir()
	writePhoto(t, filepath.Join(photos, "a.png"), 1)
	lines := runBench(t, Throughput, "-mnist", dir, "-images", "96", "-k", "64", "-rounds", "2", "-seconds", "2", "-rate", "50", "-flood-rate", "400",
		"-photos", photos, "-frames", "64")
	for _, phase := range []string{"idle", "embed", "replay", "flood"} {
		sent, err := strconv.Atoi(lines[phase+"_sent"])
		if err != nil || sent == 0 {
			t.Errorf("%s_sent: %q, want queries sent", phase, lines[phase+"_sent"])
			continue
		}
		outcomes := 0
		for _, o := range []string{"answered", "busy", "errors", "timeouts"} {
			n, err := strconv.Atoi(lines[phase+"_"+o])
			if err != nil {
				t.Errorf("%s_%s: %q", phase, o, lines[phase+"_"+o])
			}
			outcomes += n
		}
		if outcomes != sent {
			t.Errorf("%s: %d outcomes of %d queries", phase, outcomes, sent)
		}
		if lines[phase+"_errors"] != "0" {
			t.Errorf("%s_errors: %s", phase, lines[phase+"_errors"])
		}
	}
	// Each round's overhead, and their median (of two: the mean).
	var rounds []float64
	for _, f := range strings.Split(lines["throughput_daemon_overhead_rounds"], ",") {
		x, err := strconv.ParseFloat(f, 64)
		if err != nil {
			t.Fatalf("throughput_daemon_overhead_rounds: %q", lines["throughput_daemon_overhead_rounds"])
		}
		rounds = append(rounds, x)
	}
	paired, err := strconv.ParseFloat(lines["throughput_daemon_overhead_paired"], 64)
	if len(rounds) != 2 || err != nil || math.Abs(paired-(rounds[0]+rounds[1])/2) > 0.0015 {
		t.Errorf("throughput_daemon_overhead_paired %q of rounds %q, want their median", lines["throughput_daemon_overhead_paired"], lines["throughput_daemon_overhead_rounds"])
	}
	// The daemon restarted with its model reset learns the stream again,
	// once a round.
	if f := strings.Split(lines["throughput_backlog_overhead_rounds"], ","); len(f) != 2 {
		t.Errorf("throughput_backlog_overhead_rounds: %q, want one a round", lines["throughput_backlog_overhead_rounds"])
	}
	for _, name := range []string{"throughput_backlog_images_per_s", "throughput_backlog_library_images_per_s"} {
		if r, err := strconv.ParseFloat(lines[name], 64); err != nil || r <= 0 {
			t.Errorf("%s: %q, want a rate", name, lines[name])
		}
	}
	// And per second of CPU time, where /proc tells it.
	if runtime.GOOS == "linux" {
		for _, name := range []string{"throughput_backlog_cpu_images_per_s", "throughput_backlog_library_cpu_images_per_s"} {
			if r, err := strconv.ParseFloat(lines[name], 64); err != nil || r <= 0 {
				t.Errorf("%s: %q, want a rate", name, lines[name])
			}
		}
		if f := strings.Split(lines["throughput_backlog_cpu_overhead_rounds"], ","); len(f) != 2 {
			t.Errorf("throughput_backlog_cpu_overhead_rounds: %q, want one a round", lines["throughput_backlog_cpu_overhead_rounds"])
		}
	}
	// Learned, then published: the outputs of a round go out after its
	// inputs are learned.
	for _, pair := range [][2]string{
		{"throughput_daemon_images_per_s", "throughput_daemon_published_images_per_s"},
		{"throughput_frames_daemon_per_s", "throughput_frames_daemon_published_per_s"},
	} {
		learned, err1 := strconv.ParseFloat(lines[pair[0]], 64)
		published, err2 := strconv.ParseFloat(lines[pair[1]], 64)
		if err1 != nil || err2 != nil || !(published > 0 && published <= learned) {
			t.Errorf("%s %q, %s %q: want a rate no higher than the learning rate", pair[0], lines[pair[0]], pair[1], lines[pair[1]])
		}
	}
	if r, err := strconv.ParseFloat(lines["throughput_frames_library_per_s"], 64); err != nil || r <= 0 {
		t.Errorf("throughput_frames_library_per_s: %q, want a rate", lines["throughput_frames_library_per_s"])
	}
	if f := strings.Split(lines["throughput_frames_overhead_rounds"], ","); len(f) != 2 || lines["throughput_frames"] != "64" {
		t.Errorf("throughput_frames %q, throughput_frames_overhead_rounds %q: want 64 frames, one overhead a round", lines["throughput_frames"], lines["throughput_frames_overhead_rounds"])
	}
	if n, err := strconv.Atoi(lines["replay_backlog_left"]); err != nil || n < 0 {
		t.Errorf("replay_backlog_left: %q, want a count", lines["replay_backlog_left"])
	}
	if r, err := strconv.ParseFloat(lines["replay_learn_images_per_s"], 64); err != nil || r <= 0 {
		t.Errorf("replay_learn_images_per_s: %q, want the daemon learning the backlog", lines["replay_learn_images_per_s"])
	}
	for _, flag := range []string{"-daemon-cpuprofile", "-daemon-trace"} {
		if err := Throughput(context.Background(), io.Discard, []string{"-mnist", dir, flag, filepath.Join(t.TempDir(), "p")}); err == nil || !strings.Contains(err.Error(), "need -process") {
			t.Errorf("%s without -process: %v, want it refused", flag, err)
		}
	}
	if err := Throughput(context.Background(), io.Discard, []string{"-mnist", dir, "-frames", "-1"}); err == nil || !strings.Contains(err.Error(), "-frames") {
		t.Errorf("-frames -1: %v, want it refused", err)
	}
	// A folder without photos is refused.
	if err := Throughput(context.Background(), io.Discard, []string{"-mnist", dir, "-photos", t.TempDir()}); err == nil || !strings.Contains(err.Error(), "no photos") {
		t.Errorf("-photos of an empty directory: %v, want it refused", err)
	}
	// 16 atoms cannot carry the default 32 SMT dimensions.
	if err := Throughput(context.Background(), io.Discard, []string{"-mnist", dir, "-k", "16"}); err == nil || !strings.Contains(err.Error(), "smt.dim") {
		t.Errorf("-k 16: %v, want the config refused", err)
	}
}

// The frames are clips of clipFrames frames, each a stream of its own
// numbered from 0, panned over the photos in turn, raw uint8 of the
// pipeline's shape.
func TestPanFrames(t *testing.T) {
	dir := t.TempDir()
	writePhoto(t, filepath.Join(dir, "a.png"), 1)
	writePhoto(t, filepath.Join(dir, "b.png"), 2)
	p := config.DefaultPipeline(config.Video, "frames")
	n := 2*clipFrames + 10
	msgs, err := panFrames(dir, p, n)
	if err != nil {
		t.Fatal(err)
	}
	if len(msgs) != n {
		t.Fatalf("%d frames, want %d", len(msgs), n)
	}
	streams := map[string]int{}
	for i, m := range msgs {
		stream := m.Header.Get(daemon.HeaderStream)
		if want := strconv.Itoa(streams[stream]); m.Header.Get(daemon.HeaderFrame) != want {
			t.Fatalf("frame %d: %s %q in stream %q, want %s", i, daemon.HeaderFrame, m.Header.Get(daemon.HeaderFrame), stream, want)
		}
		streams[stream]++
		if len(m.Data) != p.Image.Width*p.Image.Height || m.Header.Get(daemon.HeaderShape) != "32,32" {
			t.Fatalf("frame %d: %d bytes, shape %q", i, len(m.Data), m.Header.Get(daemon.HeaderShape))
		}
	}
	if len(streams) != 3 || streams["pan-0-a.png"] != clipFrames || streams["pan-1-b.png"] != clipFrames || streams["pan-2-a.png"] != 10 {
		t.Errorf("streams %v, want two clips of %d and one of 10, the photos in turn", streams, clipFrames)
	}
	if _, err := panFrames(t.TempDir(), p, 1); err == nil || !strings.Contains(err.Error(), "no photos") {
		t.Errorf("an empty directory: %v, want it refused", err)
	}
}
