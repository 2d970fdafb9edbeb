package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/smtd/smtd/config"
	"github.com/smtd/smtd/daemon"
)

const feedData = "../../testdata/feed"

// startFeedDaemon starts a daemon with the default pipelines (images
// 28x28, frames 32x32, words) on a random port, with changes applied to
// its config; it is shut down at the end of the test.
func startFeedDaemon(t *testing.T, changes ...func(*config.Config)) *daemon.Daemon {
	t.Helper()
	cfg := config.Default()
	cfg.DataDir = t.TempDir()
	cfg.NATS.Listen = "127.0.0.1:-1"
	cfg.Log.Level = "warn"
	for _, change := range changes {
		change(cfg)
	}
	var logs syncBuffer
	d, err := daemon.New(cfg, daemon.Options{Logger: daemon.NewLogger(&logs, "console")})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		d.Shutdown(context.Background())
		if t.Failed() {
			t.Logf("daemon logs:\n%s", logs.String())
		}
	})
	return d
}

// startFeedDaemonConn is startFeedDaemon with a client connection to it,
// closed at the end of the test.
func startFeedDaemonConn(t *testing.T) (*daemon.Daemon, *nats.Conn) {
	t.Helper()
	d := startFeedDaemon(t)
	nc, err := nats.Connect(d.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return d, nc
}

// syncBuffer is a bytes.Buffer safe for concurrent use.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// outputCollector keeps every message of a subject.
type outputCollector struct {
	mu   sync.Mutex
	msgs []*nats.Msg
}

func collectOutputs(t *testing.T, nc *nats.Conn, subject string) *outputCollector {
	t.Helper()
	c := &outputCollector{}
	if _, err := nc.Subscribe(subject, func(m *nats.Msg) {
		c.mu.Lock()
		c.msgs = append(c.msgs, m)
		c.mu.Unlock()
	}); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return c
}

func (c *outputCollector) all() []*nats.Msg {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.msgs)
}

func (c *outputCollector) wait(t *testing.T, n int) []*nats.Msg {
	t.Helper()
	waitUntil(t, fmt.Sprintf("%d outputs", n), func() bool { return len(c.all()) >= n })
	return c.all()
}

// waitUntil polls cond for up to a minute.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func streamMsgs(t *testing.T, nc *nats.Conn, stream string) uint64 {
	t.Helper()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	s, err := js.Stream(context.Background(), stream)
	if err != nil {
		t.Fatal(err)
	}
	return s.CachedInfo().State.Msgs
}

// pipelineStatus returns the daemon's status of pipeline name.
func pipelineStatus(d *daemon.Daemon, name string) daemon.PipelineStatus {
	for _, p := range d.Status().Pipelines {
		if p.Name == name {
			return p
		}
	}
	return daemon.PipelineStatus{}
}

func runOK(t *testing.T, args ...string) string {
	t.Helper()
	var stdout, stderr bytes.Buffer
	if code := run(args, &stdout, &stderr); code != 0 {
		t.Fatalf("smtd %s: exit %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), code, stdout.String(), stderr.String())
	}
	return stdout.String()
}

// Each fed item gives exactly one output with its label (images) or
// stream and frame (video), and feeding the same data again stores
// nothing in the input stream and makes no output.
func TestFeedSendsEachItemOnce(t *testing.T) {
	d, nc := startFeedDaemonConn(t)
	url := d.ClientURL()

	// feedTwice feeds args, waits for want outputs, checks them, feeds
	// again and checks that nothing was added.
	feedTwice := func(t *testing.T, pipeline, stream string, want int, stdin string, check func([]*nats.Msg), args ...string) {
		out := collectOutputs(t, nc, "smtd.out."+pipeline)
		feed := func() string {
			if stdin != "" {
				f, err := os.Open(stdin)
				if err != nil {
					t.Fatal(err)
				}
				defer f.Close()
				saved := os.Stdin
				os.Stdin = f
				defer func() { os.Stdin = saved }()
			}
			return runOK(t, append([]string{"feed", "--server", url, pipeline}, args...)...)
		}
		if got := feed(); !strings.Contains(got, fmt.Sprintf("sent %d items", want)) {
			t.Errorf("first feed: %s", got)
		}
		msgs := out.wait(t, want)
		waitUntil(t, "the pipeline to apply its input", func() bool {
			p := pipelineStatus(d, pipeline)
			return p.Received == int64(want) && p.Published == int64(want) && p.Backlog == 0
		})
		if n := streamMsgs(t, nc, stream); n != uint64(want) {
			t.Errorf("%s holds %d messages, want %d", stream, n, want)
		}
		check(msgs)

		if got := feed(); !strings.Contains(got, fmt.Sprintf("sent 0 items to smtd.in.%s (%s), %d already there", pipeline, pipeline, want)) {
			t.Errorf("second feed: %s", got)
		}
		if n := streamMsgs(t, nc, stream); n != uint64(want) {
			t.Errorf("after the second feed %s holds %d messages, want %d", stream, n, want)
		}
		if p := pipelineStatus(d, pipeline); p.Received != int64(want) || p.Published != int64(want) {
			t.Errorf("after the second feed: received %d, published %d; want %d", p.Received, p.Published, want)
		}
		if err := nc.Flush(); err != nil {
			t.Fatal(err)
		}
		if n := len(out.all()); n != want {
			t.Errorf("%d outputs after the second feed, want %d", n, want)
		}
	}

	t.Run("images", func(t *testing.T) {
		feedTwice(t, "images", "SMTD_IMAGES", 6, "", func(msgs []*nats.Msg) {
			labels := map[string]int{}
			seqs := map[string]bool{}
			for _, m := range msgs {
				labels[m.Header.Get("Smtd-Label")]++
				seqs[m.Header.Get("Smtd-Source-Seq")] = true
				if v, _, err := daemon.DecodeOutput(m.Header, m.Data); err != nil || len(v) == 0 {
					t.Errorf("output %v: %d numbers, %v", m.Header, len(v), err)
				}
			}
			if labels["even"] != 3 || labels["odd"] != 3 || len(seqs) != 6 {
				t.Errorf("labels %v, %d distinct sequences; want 3 even, 3 odd, 6", labels, len(seqs))
			}
		}, filepath.Join(feedData, "images"))
	})

	t.Run("video from stdin", func(t *testing.T) {
		feedTwice(t, "frames", "SMTD_FRAMES", 5, filepath.Join(feedData, "clip.y4m"), func(msgs []*nats.Msg) {
			frames := map[string]int{}
			for _, m := range msgs {
				if s := m.Header.Get("Smtd-Stream"); s != "cam1" {
					t.Errorf("output of stream %q, want cam1", s)
				}
				frames[m.Header.Get("Smtd-Frame")]++
			}
			for f := range 5 {
				if frames[fmt.Sprint(f)] != 1 {
					t.Errorf("frames %v: want 0..4 once each", frames)
					break
				}
			}
		}, "--stream", "cam1", "-")
	})

	t.Run("text", func(t *testing.T) {
		feedTwice(t, "words", "SMTD_WORDS", 4, "", func(msgs []*nats.Msg) {
			for _, m := range msgs {
				if _, _, err := daemon.DecodeOutput(m.Header, m.Data); err != nil {
					t.Error(err)
				}
			}
		}, filepath.Join(feedData, "words.txt"))
	})

	t.Run("dry run", func(t *testing.T) {
		got := runOK(t, "feed", "--server", url, "--dry-run", "images", filepath.Join(feedData, "images"), filepath.Join(feedData, "photo.jpg"))
		if !strings.Contains(got, "would send 7 items to smtd.in.images") || strings.Count(got, "Smtd-Shape=28,28,1") != 7 ||
			!strings.Contains(got, "Smtd-Label=odd") {
			t.Errorf("dry run printed:\n%s", got)
		}
		if n := streamMsgs(t, nc, "SMTD_IMAGES"); n != 6 {
			t.Errorf("after a dry run SMTD_IMAGES holds %d messages, want 6", n)
		}
	})
}

func TestFeedRefusesWhatItCannotSend(t *testing.T) {
	d := startFeedDaemon(t)
	url := d.ClientURL()
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"nope", "x"}, 1, `no such pipeline "nope" (the daemon runs images, frames, words)`},
		{[]string{"images"}, 1, "give PNG or JPEG files or directories"},
		{[]string{"frames", "a", "b"}, 1, "give one Y4M file"},
		{[]string{"frames", filepath.Join(feedData, "words.txt")}, 1, "no YUV4MPEG2 signature"},
		{[]string{"--raw", "32", "frames", filepath.Join(feedData, "words.txt")}, 1, "WIDTHxHEIGHT"},
		{[]string{"images", filepath.Join(feedData, "words.txt")}, 1, "1 items could not be read"},
		{[]string{"--dry-run", "images", filepath.Join(feedData, "words.txt")}, 1, "1 items could not be read"},
	} {
		var out bytes.Buffer
		args := append([]string{"feed", "--server", url}, tc.args...)
		if code := run(args, &out, &out); code != tc.code || !strings.Contains(out.String(), tc.want) {
			t.Errorf("smtd %v: exit %d, want %d; output does not contain %q:\n%s", tc.args, code, tc.code, tc.want, out.String())
		}
	}
}

// smtd tail writes the outputs it reads: as .npy files of --every rows
// with their sequences and labels, and as JSON lines.
func TestTailWritesWhatThePipelinePublishes(t *testing.T) {
	d, nc := startFeedDaemonConn(t)
	url := d.ClientURL()

	// tail starts smtd tail with args and returns once it listens.
	tail := func(args ...string) (stdout *syncBuffer, done chan int) {
		stdout, stderr := &syncBuffer{}, &syncBuffer{}
		done = make(chan int, 1)
		go func() { done <- run(append([]string{"tail", "--server", url}, args...), stdout, stderr) }()
		waitUntil(t, "smtd tail to listen", func() bool {
			select {
			case code := <-done:
				t.Fatalf("smtd tail exited %d: %s", code, stderr.String())
			default:
			}
			return strings.Contains(stderr.String(), "smtd tail: reading smtd.out.")
		})
		return stdout, done
	}
	waitExit := func(done chan int) {
		t.Helper()
		select {
		case code := <-done:
			if code != 0 {
				t.Fatalf("smtd tail exited %d", code)
			}
		case <-time.After(time.Minute):
			t.Fatal("smtd tail did not stop after --count outputs")
		}
	}

	t.Run("npy", func(t *testing.T) {
		dir := t.TempDir()
		out := collectOutputs(t, nc, "smtd.out.images")
		_, done := tail("--npy", dir, "--every", "4", "--count", "6", "images")
		runOK(t, "feed", "--server", url, "images", filepath.Join(feedData, "images"))
		waitExit(done)
		bySeq := map[uint64][]float32{}
		labelOf := map[uint64]string{}
		for _, m := range out.wait(t, 6) {
			v, label, err := daemon.DecodeOutput(m.Header, m.Data)
			if err != nil {
				t.Fatal(err)
			}
			var seq uint64
			fmt.Sscan(m.Header.Get("Smtd-Source-Seq"), &seq)
			bySeq[seq], labelOf[seq] = v, label
		}
		dim := len(bySeq[1])
		rows := 0
		for chunk, n := range []int{4, 2} {
			base := filepath.Join(dir, fmt.Sprintf("images-%05d", chunk))
			vectors := readNPY(t, base+".npy", "<f4", fmt.Sprintf("(%d, %d)", n, dim), 4*n*dim)
			seqs := readNPY(t, base+".seqs.npy", "<i8", fmt.Sprintf("(%d,)", n), 8*n)
			labels, err := os.ReadFile(base + ".labels.txt")
			if err != nil {
				t.Fatal(err)
			}
			lines := strings.Split(strings.TrimSuffix(string(labels), "\n"), "\n")
			for i := range n {
				seq := binary.LittleEndian.Uint64(seqs[8*i:])
				want, ok := bySeq[seq]
				if !ok {
					t.Fatalf("%s row %d: sequence %d is not an output", base, i, seq)
				}
				for j, w := range want {
					if got := math.Float32frombits(binary.LittleEndian.Uint32(vectors[4*(i*dim+j):])); got != w {
						t.Fatalf("%s row %d (seq %d) column %d: %v, output has %v", base, i, seq, j, got, w)
					}
				}
				if lines[i] != labelOf[seq] {
					t.Errorf("%s line %d: label %q, output has %q", base, i, lines[i], labelOf[seq])
				}
				delete(bySeq, seq)
				rows++
			}
		}
		if rows != 6 || len(bySeq) != 0 {
			t.Errorf("%d rows written; outputs not written: %v", rows, slices.Collect(func(yield func(uint64) bool) {
				for s := range bySeq {
					yield(s)
				}
			}))
		}
		if _, err := os.Stat(filepath.Join(dir, "images-00002.npy")); !os.IsNotExist(err) {
			t.Errorf("a third chunk: %v", err)
		}
	})

	t.Run("json", func(t *testing.T) {
		stdout, done := tail("--count", "5", "frames")
		runOK(t, "feed", "--server", url, "--stream", "cam2", "frames", filepath.Join(feedData, "clip.y4m"))
		waitExit(done)
		frames := map[uint64]bool{}
		for _, line := range strings.Split(strings.TrimSpace(stdout.String()), "\n") {
			var l struct {
				Pipeline  string    `json:"pipeline"`
				Seq       uint64    `json:"seq"`
				Version   *uint64   `json:"version"`
				Stream    string    `json:"stream"`
				Frame     *uint64   `json:"frame"`
				Embedding []float32 `json:"embedding"`
			}
			if err := json.Unmarshal([]byte(line), &l); err != nil {
				t.Fatalf("%v: %s", err, line)
			}
			if l.Pipeline != "frames" || l.Seq == 0 || l.Version == nil || l.Stream != "cam2" || l.Frame == nil || len(l.Embedding) == 0 {
				t.Fatalf("line %s", line)
			}
			frames[*l.Frame] = true
		}
		if len(frames) != 5 {
			t.Errorf("frames %v, want 0..4", frames)
		}
	})
}

// readNPY reads a .npy file of format 1.0 and checks its header; it
// returns the data.
func readNPY(t *testing.T, path, descr, shape string, size int) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) < 10 || string(b[:8]) != "\x93NUMPY\x01\x00" {
		t.Fatalf("%s: no .npy 1.0 magic", path)
	}
	hlen := int(binary.LittleEndian.Uint16(b[8:]))
	if (10+hlen)%64 != 0 || len(b) < 10+hlen {
		t.Fatalf("%s: header of %d bytes", path, hlen)
	}
	header := string(b[10 : 10+hlen])
	want := fmt.Sprintf("{'descr': '%s', 'fortran_order': False, 'shape': %s, }", descr, shape)
	if !strings.HasPrefix(header, want) || !strings.HasSuffix(header, "\n") || strings.TrimSpace(header) != want {
		t.Fatalf("%s: header %q, want %q", path, header, want)
	}
	if data := b[10+hlen:]; len(data) != size {
		t.Fatalf("%s: %d bytes of data, want %d", path, len(data), size)
	} else {
		return data
	}
	return nil
}

func TestFeedAndTailUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"feed", "--help"}, 0, "-dry-run"},
		{[]string{"feed", "--help"}, 0, "-creds file"},
		{[]string{"feed"}, 2, feedSynopsis},
		{[]string{"feed"}, 2, "smtd feed: name the pipeline to feed"},
		{[]string{"tail", "--help"}, 0, "-npy dir"},
		{[]string{"tail"}, 2, tailSynopsis},
		{[]string{"tail", "--every", "0", "images"}, 2, "smtd tail: --every must be >= 1"},
		{[]string{"--help"}, 0, "smtd feed [--server URL]"},
	} {
		var out bytes.Buffer
		if code := run(tc.args, &out, &out); code != tc.code || !strings.Contains(out.String(), tc.want) {
			t.Errorf("smtd %v: exit %d, want %d; output does not contain %q:\n%s", tc.args, code, tc.code, tc.want, out.String())
		}
	}
}
