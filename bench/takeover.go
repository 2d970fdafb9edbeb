package bench

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/smtd/smtd/config"
	"github.com/smtd/smtd/daemon"
	"github.com/smtd/smtd/dataset"
	"github.com/smtd/smtd/internal/natscluster"
)

// Takeover measures cluster mode on this machine: a 3-node JetStream
// cluster (in this process, routes on loopback ports, R3) and three smtd
// daemon processes in cluster mode with the default lease TTL, learning
// the default image pipeline from MNIST published at -rate images/s while
// embed queries arrive at -qrate per second (each daemon answers some).
// After -warmup it prints, from /proc, the resident memory and the CPU
// (CPU-seconds per second over the last -window) of the owner and of a
// standby that serves queries but does not learn; then it kills the
// pipeline's owner with SIGKILL and prints
//
//   - takeover_seconds: from the SIGKILL to the first output of a batch
//     applied by the new owner (outputs carry the Smtd-Daemon header);
//   - the embed queries sent between the SIGKILL and one second after
//     that first output: how many, how many failed (no answer within
//     -timeout, or an error), and the latency percentiles of the answered.
func Takeover(ctx context.Context, w io.Writer, args []string) error {
	fs := flag.NewFlagSet("bench takeover", flag.ContinueOnError)
	dir := fs.String("mnist", "../shared/data/mnist", "`directory` with the MNIST IDX files (gzip'd or not)")
	rate := fs.Float64("rate", 200, "images published per second")
	qrate := fs.Float64("qrate", 100, "embed queries per second")
	warmup := fs.Duration("warmup", 20*time.Second, "learning before the kill")
	window := fs.Duration("window", 5*time.Second, "CPU of owner and standby measured over the end of the warm-up")
	after := fs.Duration("after", 20*time.Second, "queries go on this long after the kill")
	timeout := fs.Duration("timeout", 2*time.Second, "a query not answered within this failed")
	every := fs.Int64("every", 1000, "checkpoint.every_samples of the daemons")
	keep := fs.Bool("keep", false, "keep the temporary directory (configs, stores, daemon logs)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *rate <= 0 || *qrate <= 0 || *window > *warmup {
		return errors.New("bench takeover: -rate and -qrate must be positive, -window at most -warmup")
	}
	train, err := dataset.ReadMNIST(*dir, "train")
	if err != nil {
		return err
	}
	test, err := dataset.ReadMNIST(*dir, "t10k")
	if err != nil {
		return err
	}
	root, err := os.MkdirTemp("", "smtd-takeover-")
	if err != nil {
		return err
	}
	if *keep {
		fmt.Fprintf(os.Stderr, "bench takeover: files in %s\n", root)
	} else {
		defer os.RemoveAll(root)
	}
	cl, err := natscluster.Start(filepath.Join(root, "nats"), 3)
	if err != nil {
		return err
	}
	defer cl.Shutdown()

	p := config.DefaultPipeline(config.Image, "images")
	p.Input.Subject = "bench.takeover.images"
	p.Output.Subject = "bench.takeover.embeddings"
	var daemons []*daemonProcess
	defer func() {
		for _, c := range daemons {
			c.cmd.Process.Signal(syscall.SIGTERM)
			c.wait()
		}
	}()
	pids := map[string]*exec.Cmd{}
	for i := 1; i <= 3; i++ {
		name := fmt.Sprintf("d%d", i)
		cfg := config.Default()
		cfg.DataDir = filepath.Join(root, name)
		cfg.NATS.URL, cfg.NATS.Replicas = cl.URL, 3
		cfg.Checkpoint.EverySamples = *every
		cfg.Cluster.Enabled, cfg.Cluster.Name = true, name
		cfg.Pipelines = []config.Pipeline{p}
		c, err := startDaemonProcess(root, name, cfg, nil)
		if err != nil {
			return err
		}
		daemons = append(daemons, c)
		pids[name] = c.cmd
	}

	nc, js, err := cl.Connect()
	if err != nil {
		return err
	}
	defer nc.Close()
	status := func() daemon.PipelineStatus {
		st, err := requestStatus(nc, config.Default().Subject("status"), time.Second)
		if err != nil {
			return daemon.PipelineStatus{}
		}
		return st.Pipelines[0]
	}
	if err := pollUntil(ctx, time.Minute, "an owner and its input stream", func() bool {
		if status().Owner == "" {
			return false
		}
		sctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		s, err := js.Stream(sctx, p.StreamName())
		return err == nil && s.CachedInfo().Cluster != nil && s.CachedInfo().Cluster.Leader != ""
	}); err != nil {
		return err
	}

	// Outputs, by the daemon that made them.
	var mu sync.Mutex
	var killedAt, firstNew time.Time
	var killed string
	sub, err := nc.Subscribe(p.Output.Subject, func(m *nats.Msg) {
		mu.Lock()
		defer mu.Unlock()
		if from := m.Header.Get(daemon.HeaderDaemon); !killedAt.IsZero() && firstNew.IsZero() && from != killed {
			firstNew = time.Now()
		}
	})
	if err != nil {
		return err
	}
	defer sub.Unsubscribe()

	// The publisher, at rate, until the end.
	pctx, stopPublishing := context.WithCancel(ctx)
	defer stopPublishing()
	go func() {
		start := time.Now()
		for i := 0; pctx.Err() == nil; i++ {
			if wait := time.Until(start.Add(time.Duration(float64(i) / *rate * float64(time.Second)))); wait > 0 {
				time.Sleep(wait)
			}
			m := imageMsg(p.Input.Subject, train, i%train.N)
			js.PublishMsgAsync(m)
		}
	}()
	type loadResult struct {
		load *queryLoad
		err  error
	}
	loadc := make(chan loadResult, 1)
	go func() {
		l, err := sendQueries(ctx, nc, config.Default().EmbedSubject(p.Name), test, *qrate, *warmup+*after, *timeout, "takeover")
		loadc <- loadResult{l, err}
	}()

	if err := wait(ctx, *warmup-*window); err != nil {
		return err
	}
	owner := status().Owner
	var standby string
	for name := range pids {
		if name != owner && standby == "" {
			standby = name
		}
	}
	if owner == "" {
		return errors.New("bench takeover: the pipeline has no owner at the end of the warm-up")
	}
	cpu0 := map[string]float64{owner: cpuSeconds(pids[owner].Process.Pid), standby: cpuSeconds(pids[standby].Process.Pid)}
	if err := wait(ctx, *window); err != nil {
		return err
	}
	for _, r := range []struct{ role, name string }{{"owner", owner}, {"standby", standby}} {
		pid := pids[r.name].Process.Pid
		fmt.Fprintf(w, "takeover_%s_rss_mib: %.1f\n", r.role, rssMiB(pid))
		fmt.Fprintf(w, "takeover_%s_cpu_per_s: %.3f\n", r.role, (cpuSeconds(pid)-cpu0[r.name])/window.Seconds())
	}

	before := status()
	mu.Lock()
	killed, killedAt = owner, time.Now()
	mu.Unlock()
	if err := pids[owner].Process.Signal(syscall.SIGKILL); err != nil {
		return err
	}
	pids[owner].Wait()
	if err := pollUntil(ctx, time.Minute, "the new owner's first output", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return !firstNew.IsZero()
	}); err != nil {
		return err
	}
	mu.Lock()
	took := firstNew.Sub(killedAt)
	mu.Unlock()
	res := <-loadc
	stopPublishing()
	if res.err != nil {
		return res.err
	}
	after1 := status()
	fmt.Fprintf(w, "takeover_lease_ttl_seconds: %.1f\n", config.Default().Cluster.LeaseTTL.Seconds())
	fmt.Fprintf(w, "takeover_seconds: %.3f\n", took.Seconds())
	fmt.Fprintf(os.Stderr, "bench takeover: %s (epoch %d) killed; %s (epoch %d) took over\n", owner, before.Epoch, after1.Owner, after1.Epoch)

	// The queries sent in the takeover window.
	from, to := killedAt, killedAt.Add(took+time.Second)
	var sent, failed int
	var lat []time.Duration
	for i, at := range res.load.sentAt {
		if at.Before(from) || at.After(to) {
			continue
		}
		sent++
		switch o := res.load.outcome[i]; {
		case o.kind == 'a' && o.lat <= *timeout:
			lat = append(lat, o.lat)
		default:
			failed++
		}
	}
	fmt.Fprintf(w, "takeover_embed_requests: %d\n", sent)
	fmt.Fprintf(w, "takeover_embed_failed: %d\n", failed)
	fmt.Fprintf(w, "takeover_embed_p50_ms: %.2f\n", ms(percentile(lat, 0.5)))
	fmt.Fprintf(w, "takeover_embed_p99_ms: %.2f\n", ms(percentile(lat, 0.99)))
	fmt.Fprintf(w, "takeover_embed_max_ms: %.2f\n", ms(percentile(lat, 1)))
	fmt.Fprintf(w, "takeover_all_embed_requests: %d\n", res.load.sent)
	fmt.Fprintf(w, "takeover_all_embed_failed: %d\n", res.load.timeouts+res.load.errors+res.load.busy)
	return nil
}

// pollUntil polls cond every 20 ms until it holds, ctx is done or timeout
// passes.
func pollUntil(ctx context.Context, timeout time.Duration, what string, cond func() bool) error {
	return pollEvery(ctx, 20*time.Millisecond, timeout, what, cond)
}

// pollEvery is pollUntil checking cond every interval.
func pollEvery(ctx context.Context, interval, timeout time.Duration, what string, cond func() bool) error {
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			return fmt.Errorf("bench: timed out after %v waiting for %s", timeout, what)
		}
		if err := wait(ctx, interval); err != nil {
			return err
		}
	}
	return nil
}

// cpuSeconds is the user and system CPU time of process pid so far, from
// /proc/<pid>/stat (0 where there is no /proc).
func cpuSeconds(pid int) float64 {
	// utime and stime are the 14th and 15th fields, in clock ticks
	// (USER_HZ, 100 on Linux).
	return (procStatField(pid, 14) + procStatField(pid, 15)) / 100
}

// minorFaults is the number of minor page faults of process pid so far:
// pages it touched for the first time (or again after the runtime gave
// them back), from /proc/<pid>/stat.
func minorFaults(pid int) float64 { return procStatField(pid, 10) }

// procStatField is the n-th field (from 1) of /proc/<pid>/stat, 0 where
// there is none.
func procStatField(pid, n int) float64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The fields after the command name, which is in parentheses, start
	// with the third.
	s := string(data)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if n < 3 || n-3 >= len(fields) {
		return 0
	}
	v, _ := strconv.ParseFloat(fields[n-3], 64)
	return v
}

// rssMiB is the resident set size of process pid, from
// /proc/<pid>/status.
func rssMiB(pid int) float64 {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			return kb / 1024
		}
	}
	return 0
}
