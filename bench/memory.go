package bench

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/smtd/smtd/config"
	"github.com/smtd/smtd/daemon"
	"github.com/smtd/smtd/dataset"
)

// Memory replays MNIST training images (cycling through the set) into a
// daemon running in this process, on an embedded NATS server, and reports
// the process's resident memory once 10% and once 100% of the patches
// were learned: memory must not grow with stream length.
func Memory(ctx context.Context, w io.Writer, args []string) error {
	fs := flag.NewFlagSet("bench memory", flag.ContinueOnError)
	dir := fs.String("mnist", "../shared/data/mnist", "`directory` with the MNIST IDX files (gzip'd or not)")
	patches := fs.Int("patches", 1000000, "patches to stream (529 per 28x28 image with 6x6 patches)")
	atoms := fs.Int("k", 256, "dictionary size K")
	batch := fs.Int("batch", 32, "images per minibatch")
	if err := fs.Parse(args); err != nil {
		return err
	}
	imgs, err := dataset.ReadMNIST(*dir, "train")
	if err != nil {
		return err
	}
	p := config.DefaultPipeline(config.Image, "images")
	p.KMeans.Atoms = *atoms
	p.Batch.Size = *batch
	in, err := startDaemon(ctx, p, io.Discard)
	if err != nil {
		return err
	}
	defer in.Close()
	js, learned := in.js, in.learned

	perImage := p.PatchesPerImage()
	n := (*patches + perImage - 1) / perImage
	start := time.Now()
	var rss10 int64
	for i := 0; i < n; i++ {
		m := nats.NewMsg(p.Input.Subject)
		m.Header.Set(daemon.HeaderShape, fmt.Sprintf("%d,%d", imgs.Rows, imgs.Cols))
		m.Header.Set(daemon.HeaderDtype, "uint8")
		m.Data = imgs.Image(i % imgs.N)
		if _, err := js.PublishMsgAsync(m); err != nil {
			return err
		}
		// Bounded publishing: the stream stays a little ahead of the
		// daemon instead of holding the whole replay.
		for int64(i)-learned() > 4096 {
			if err := wait(ctx, 5*time.Millisecond); err != nil {
				return err
			}
		}
		if rss10 == 0 && learned() >= int64(n/10) {
			rss10 = rss()
		}
	}
	for learned() < int64(n) {
		if rss10 == 0 && learned() >= int64(n/10) {
			rss10 = rss()
		}
		if err := wait(ctx, 5*time.Millisecond); err != nil {
			return err
		}
	}
	elapsed := time.Since(start)
	rss100 := rss()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	fmt.Fprintf(w, "images: %d\n", n)
	fmt.Fprintf(w, "patches: %d\n", n*perImage)
	fmt.Fprintf(w, "k: %d\n", *atoms)
	fmt.Fprintf(w, "rss_mib_at_10pct: %.1f\n", float64(rss10)/(1<<20))
	fmt.Fprintf(w, "rss_mib_at_100pct: %.1f\n", float64(rss100)/(1<<20))
	fmt.Fprintf(w, "go_heap_inuse_mib_at_100pct: %.1f\n", float64(ms.HeapInuse)/(1<<20))
	fmt.Fprintf(w, "daemon_patches_per_s: %.0f\n", float64(n*perImage)/elapsed.Seconds())
	fmt.Fprintf(w, "daemon_images_per_s: %.0f\n", float64(n)/elapsed.Seconds())
	return nil
}

func wait(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

// rss returns the resident set size of this process in bytes (Linux), or
// 0 where /proc is not available.
func rss() int64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if rest, ok := strings.CutPrefix(s.Text(), "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}
