package bench

import (
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
	"syscall"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"gopkg.in/yaml.v3"

	"github.com/smtd/smtd/config"
	"github.com/smtd/smtd/daemon"
	"github.com/smtd/smtd/dataset"
	"github.com/smtd/smtd/internal/natscluster"
)

// Cluster measures worker mode (config.Workers) on this machine. For 1 to
// -workers worker processes it starts a NATS server with JetStream in this
// process, an owner daemon that only merges (workers.on_owner false, the
// only daemon carrying the label the pipeline is placed on) and the worker
// daemons, each a process with GOMAXPROCS=1; learns -warmup MNIST
// training images (the dictionary is seeded from the first step's,
// which costs the owner O(K²) per row); then publishes the next -train
// images and times them from the first publish to the last one applied:
//
//   - cluster_workers_<n>_images_per_s;
//   - cluster_max_payload_bytes: the server's max_payload (-max-payload),
//     above which contributions and models travel in chunks;
//   - cluster_precision_bits: workers.precision (-precision), the float
//     width of the sums and gradients in contributions;
//   - for the run with the most workers, the CPU-seconds (from /proc) and
//     the bytes in and out of the NATS connections (the server's connz)
//     per 1,000 images, of the owner and of the workers together;
//   - cluster_workers_per_owner: how many workers, each as busy as one
//     core, one owner core can merge for: the workers' CPU per image over
//     the owner's;
//   - then, the daemons left idle for -idle while the status is polled
//     as during the run, cluster_owner_idle_cpu_fraction and
//     cluster_workers_idle_cpu_fraction (a worker's): the CPU a daemon
//     spends per second whatever it learns (lease and membership
//     renewals, the Go runtime, the bench's status requests);
//     cluster_owner_marginal_cpu_seconds_per_1000_images and
//     cluster_workers_marginal_cpu_seconds_per_1000_images, the CPU per
//     image beyond it; and cluster_workers_per_owner_at_saturation, the
//     workers one owner core feeds when each of them codes as fast as
//     its core allows, (1 − idle_o)/marginal_o over (1 − idle_w)/marginal_w;
//     cluster_owner_images_per_s_at_saturation, (1 − idle_o)/marginal_o,
//     and cluster_owner_mbit_per_s_at_saturation, the owner's network
//     traffic (in and out) at that rate, which its link must carry.
//     A run with few workers spreads the idle cost over few images, which
//     cluster_workers_per_owner charges to every image;
//   - cluster_owner_page_faults_per_1000_images: the owner's minor page
//     faults (from /proc), memory it touched fresh, which costs the
//     kernel's time on this kind of virtual machine, and
//     cluster_owner_rss_mib, its resident set at the end (and
//     cluster_worker_rss_mib, the largest worker's);
//   - cluster_minibatches_in_flight: (τ+1)·merge, the most minibatches
//     the schedule lets workers code at once (steps of merge minibatches,
//     at most τ+1 of them handed out ahead of the owner's model). The
//     workers one owner keeps busy are the fewer of the two.
//
// With -owner-quota q it then measures the owner's capacity rather than
// deriving it: one worker again, with the owner capped at the fraction q
// of a core (a cgroup CPU quota; root only) once the warm-up is learned.
// It prints cluster_quota_images_per_s, the owner's CPU fraction and CPU
// per 1,000 images under the cap, and cluster_workers_per_owner_at_quota,
// the images/s one whole owner core would merge at that pace over the
// uncapped worker's images/s: (images/s / q) / cluster_workers_1_images_per_s.
// A capped owner that still keeps up with its worker shows it can feed
// 1/q workers; below that the cluster slows, and the figure says by how
// much.
//
// With -load N (8 by default; 0: not) it then measures the owner at
// saturation, which this machine cannot reach with worker processes: one
// worker learns the warm-up while the bench records the contributions it
// sends (daemon.ContributionLoad); the worker stops, -load-images more
// images are published, and N connections of the bench ask the owner
// for their tasks and answer each at once with a recorded contribution.
// The owner (GOMAXPROCS=1) merges as fast as it can. It prints
// cluster_load_images_per_s, the owner's CPU fraction and CPU per 1,000
// images over that run, cluster_load_owner_images_per_core_s (images/s
// over the CPU fraction: what one whole owner core merges) and
// cluster_workers_per_owner_at_load, that over cluster_workers_1_images_per_s.
//
// With -accuracy it then runs the quick MNIST setting of `smtd bench
// mnist` (-accuracy-train images, two passes, -accuracy-test test
// images; K = -k) in one daemon and with 2 and 3 workers, and prints the
// soft-KNN top-1 of each (cluster_top1_workers_<n>, cluster_top1_single).
// One daemon's result is a function of the pipeline's seed, the workers'
// also of the timing of their tasks; with -accuracy-runs N > 1 each of
// the three is learned N times, with seeds 1 to N, and the means
// (cluster_top1_single_mean, cluster_top1_workers_<n>_mean) and each
// run's top-1 (cluster_top1_single_seed_<s>, ...) are printed too: a
// 1000-image test set resolves 0.1 points, and one run's top-1 has a
// standard error of about 0.45 points around 97.9%.
func Cluster(ctx context.Context, w io.Writer, args []string) error {
	fs := flag.NewFlagSet("bench cluster", flag.ContinueOnError)
	dir := fs.String("mnist", "../shared/data/mnist", "`directory` with the MNIST IDX files (gzip'd or not)")
	nTrain := fs.Int("train", 6000, "images timed per throughput run")
	warmup := fs.Int("warmup", 1000, "images learned before the timed ones")
	maxWorkers := fs.Int("workers", 3, "throughput runs with 1..N worker processes (0: none, e.g. with -accuracy)")
	atoms := fs.Int("k", 4096, "dictionary size K")
	merge := fs.Int("merge", 4, "workers.merge: minibatches per learning step")
	batch := fs.Int("batch", 32, "batch.size: images per minibatch (a contribution's size hardly depends on it)")
	staleness := fs.Int("staleness", 1, "workers.staleness τ")
	precision := fs.Int("precision", config.Default().Pipelines[0].Workers.Precision, "workers.precision: bits (32 or 64) of the k-means sums and SMT gradient in contributions")
	accuracy := fs.Bool("accuracy", false, "also compare quick-MNIST accuracy: one daemon, 2 and 3 workers")
	accTrain := fs.Int("accuracy-train", 5000, "-accuracy: training images (two passes)")
	accTest := fs.Int("accuracy-test", 1000, "-accuracy: test images")
	accRuns := fs.Int("accuracy-runs", 1, "-accuracy: runs of each, with seeds 1..N")
	idle := fs.Duration("idle", 10*time.Second, "how long the daemons are left idle after the timed run, to measure what they spend per second whatever they learn")
	maxPayload := fs.Int("max-payload", 0, "the NATS server's max_payload in `bytes` (0: its default, 1 MiB); a contribution or model larger than it travels in chunks")
	ownerQuota := fs.Float64("owner-quota", 0, "then time one worker once more with the owner capped at this `fraction` of a core by a cgroup CPU quota (needs root; 0: not)")
	load := fs.Int("load", 8, "then drive the owner to saturation with this many `connections` replaying recorded contributions (0: not)")
	loadImages := fs.Int("load-images", 192000, "-load: images published for the owner to merge")
	keep := fs.Bool("keep", false, "keep the temporary directory (configs, stores, daemon logs)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *maxWorkers < 0 || *nTrain < 1 || *warmup < 0 || *maxPayload < 0 || (*precision != 32 && *precision != 64) || *idle < time.Second || *accRuns < 1 || *ownerQuota < 0 || *ownerQuota > 1 || (*ownerQuota > 0 && *maxWorkers < 1) || *load < 0 || *loadImages < 1 {
		return errors.New("bench cluster: -train, -accuracy-runs and -load-images must be positive, -workers, -warmup, -max-payload and -load not negative, -precision 32 or 64, -idle at least 1s, -owner-quota between 0 and 1 and with -workers at least 1")
	}
	train, err := dataset.ReadMNIST(*dir, "train")
	if err != nil {
		return err
	}
	root, err := os.MkdirTemp("", "smtd-cluster-")
	if err != nil {
		return err
	}
	if *keep {
		fmt.Fprintf(os.Stderr, "bench cluster: files in %s\n", root)
	} else {
		defer os.RemoveAll(root)
	}
	p := mnistPipeline(*atoms)
	p.Batch.Size = *batch
	p.Workers.Merge, p.Workers.Staleness, p.Workers.Precision = *merge, *staleness, *precision
	var last *workerRun
	var oneWorker float64 // images/s
	timed := min(*nTrain, train.N-*warmup)
	for n := 1; n <= *maxWorkers; n++ {
		r := &workerRun{root: filepath.Join(root, fmt.Sprintf("w%d", n)), workers: n, p: p, maxPayload: int32(*maxPayload), idleFor: *idle}
		secs, err := r.throughput(ctx, train, *warmup, timed)
		r.stop()
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "cluster_workers_%d_images_per_s: %.1f\n", n, float64(timed)/secs)
		if n == 1 {
			oneWorker = float64(timed) / secs
		}
		last = r
	}
	if last != nil {
		mp := *maxPayload
		if mp == 0 {
			mp = server.MAX_PAYLOAD_SIZE
		}
		fmt.Fprintf(w, "cluster_max_payload_bytes: %d\n", mp)
		fmt.Fprintf(w, "cluster_precision_bits: %d\n", *precision)
		last.report(w, timed)
		fmt.Fprintf(w, "cluster_minibatches_in_flight: %d\n", (*staleness+1)**merge)
	}
	if *ownerQuota > 0 {
		r := &workerRun{root: filepath.Join(root, "quota"), workers: 1, p: p, maxPayload: int32(*maxPayload)}
		secs, err := r.capped(ctx, train, *warmup, timed, *ownerQuota)
		if err != nil {
			return err
		}
		rate := float64(timed) / secs
		fmt.Fprintf(w, "cluster_owner_quota_core_fraction: %g\n", *ownerQuota)
		fmt.Fprintf(w, "cluster_quota_images_per_s: %.1f\n", rate)
		fmt.Fprintf(w, "cluster_quota_owner_cpu_fraction: %.4f\n", r.ownerCPU/secs)
		fmt.Fprintf(w, "cluster_quota_owner_cpu_seconds_per_1000_images: %.3f\n", r.ownerCPU*1000/float64(timed))
		fmt.Fprintf(w, "cluster_workers_per_owner_at_quota: %.1f\n", rate / *ownerQuota / oneWorker)
	}
	if *load > 0 && *maxWorkers > 0 {
		r := &workerRun{root: filepath.Join(root, "load"), workers: 1, p: p, maxPayload: int32(*maxPayload)}
		secs, err := r.saturate(ctx, train, *warmup, *loadImages, *load)
		r.stop()
		if err != nil {
			return err
		}
		rate := float64(*loadImages) / secs
		busy := r.ownerCPU / secs
		fmt.Fprintf(w, "cluster_load_workers: %d\n", *load)
		fmt.Fprintf(w, "cluster_load_images_per_s: %.0f\n", rate)
		fmt.Fprintf(w, "cluster_load_owner_cpu_fraction: %.3f\n", busy)
		fmt.Fprintf(w, "cluster_load_owner_cpu_seconds_per_1000_images: %.4f\n", r.ownerCPU*1000/float64(*loadImages))
		fmt.Fprintf(w, "cluster_load_owner_images_per_core_s: %.0f\n", rate/busy)
		fmt.Fprintf(w, "cluster_workers_per_owner_at_load: %.1f\n", rate/busy/oneWorker)
	}
	if !*accuracy {
		return nil
	}
	return clusterAccuracy(ctx, w, root, p, *dir, *accTrain, *accTest, *accRuns)
}

// report prints the cost of the run per 1000 of the n images timed.
func (r *workerRun) report(w io.Writer, n int) {
	per := 1000 / float64(n)
	fmt.Fprintf(w, "cluster_owner_cpu_seconds_per_1000_images: %.3f\n", r.ownerCPU*per)
	fmt.Fprintf(w, "cluster_workers_cpu_seconds_per_1000_images: %.3f\n", r.workersCPU*per)
	fmt.Fprintf(w, "cluster_owner_mib_per_1000_images: %.2f\n", float64(r.ownerBytes)*per/(1<<20))
	fmt.Fprintf(w, "cluster_workers_mib_per_1000_images: %.2f\n", float64(r.workersBytes)*per/(1<<20))
	fmt.Fprintf(w, "cluster_workers_per_owner: %.1f\n", r.workersCPU/r.ownerCPU)
	fmt.Fprintf(w, "cluster_owner_page_faults_per_1000_images: %.0f\n", r.ownerFaults*per)
	fmt.Fprintf(w, "cluster_owner_rss_mib: %.0f\n", r.ownerRSS)
	fmt.Fprintf(w, "cluster_worker_rss_mib: %.0f\n", r.workerRSS)
	owner := (r.ownerCPU - r.ownerIdle*r.secs) * per
	workers := (r.workersCPU - r.workerIdle*float64(r.workers)*r.secs) * per
	fmt.Fprintf(w, "cluster_owner_idle_cpu_fraction: %.4f\n", r.ownerIdle)
	fmt.Fprintf(w, "cluster_workers_idle_cpu_fraction: %.4f\n", r.workerIdle)
	fmt.Fprintf(w, "cluster_owner_marginal_cpu_seconds_per_1000_images: %.3f\n", owner)
	fmt.Fprintf(w, "cluster_workers_marginal_cpu_seconds_per_1000_images: %.3f\n", workers)
	fmt.Fprintf(w, "cluster_workers_per_owner_at_saturation: %.1f\n", (1-r.ownerIdle)/owner/((1-r.workerIdle)/workers))
	// The owner's network at that rate: its bytes in and out per image
	// times the images one core merges per second.
	rate := 1000 * (1 - r.ownerIdle) / owner
	fmt.Fprintf(w, "cluster_owner_images_per_s_at_saturation: %.0f\n", rate)
	fmt.Fprintf(w, "cluster_owner_mbit_per_s_at_saturation: %.0f\n", rate*float64(r.ownerBytes)/float64(n)*8/1e6)
}

// mnistPipeline is the image pipeline of the MNIST benchmarks with K
// atoms: the defaults (6x6 patches, contextual mean, SMT of dim 32 by
// SGD), solved once before the final checkpoint.
func mnistPipeline(k int) config.Pipeline {
	p := config.DefaultPipeline(config.Image, "mnist")
	p.Input.Subject = "bench.mnist"
	p.Output.Subject = "bench.mnist.embeddings"
	p.KMeans.Atoms = k
	p.SMT.SolveEvery = 1 << 30
	return p
}

// workerRun is one owner and its worker processes on a NATS server of
// their own.
type workerRun struct {
	root    string
	workers int
	p       config.Pipeline
	nats    *natscluster.Cluster
	// maxPayload is the server's max_payload (0: its default).
	maxPayload int32
	procs      map[string]*daemonProcess
	cpu0       map[string]float64
	faults0    float64 // the owner's minor page faults when learn started
	sent       int     // images published so far

	secs                  float64 // the timed window
	ownerCPU, workersCPU  float64
	ownerFaults, ownerRSS float64 // in the timed window; MiB at its end
	// idleFor is how long idle measures; ownerIdle and workerIdle are
	// the CPU the owner and a worker spend per second when idle.
	idleFor                  time.Duration
	ownerIdle, workerIdle    float64
	workerRSS                float64 // the largest worker's, MiB, at the end
	ownerBytes, workersBytes int64
}

// start starts the server, the owner (d0) and the workers (d1...).
func (r *workerRun) start(ctx context.Context) error {
	var err error
	if r.nats, err = natscluster.Start(filepath.Join(r.root, "nats"), 1, func(o *server.Options) {
		if r.maxPayload > 0 {
			o.MaxPayload = r.maxPayload
		}
	}); err != nil {
		return err
	}
	p := r.p
	p.Workers.Enabled, p.Workers.OnOwner = true, false
	p.Placement = []string{"owner"}
	r.procs = map[string]*daemonProcess{}
	for i := 0; i <= r.workers; i++ {
		name := fmt.Sprintf("d%d", i)
		cfg := config.Default()
		cfg.DataDir = filepath.Join(r.root, name)
		cfg.NATS.URL = r.nats.URL
		cfg.Service.QueryWorkers = 1
		cfg.Checkpoint.EverySamples = 1 << 40
		cfg.Cluster.Enabled, cfg.Cluster.Name = true, name
		if i == 0 {
			cfg.Cluster.Labels = []string{"owner"}
		}
		cfg.Pipelines = []config.Pipeline{p}
		c, err := startDaemonProcess(r.root, name, cfg, []string{"GOMAXPROCS=1"})
		if err != nil {
			return err
		}
		r.procs[name] = c
	}
	nc, js, err := r.nats.Connect()
	if err != nil {
		return err
	}
	defer nc.Close()
	return pollUntil(ctx, time.Minute, "the owner and its input stream", func() bool {
		st, err := requestStatus(nc, config.Default().Subject("status"), time.Second)
		if err != nil || st.Pipelines[0].Owner != "d0" {
			return false
		}
		sctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		_, err = js.Stream(sctx, p.StreamName())
		return err == nil
	})
}

// throughput starts the run, learns warmup images, times the next n and
// then measures what the daemons spend idle.
func (r *workerRun) throughput(ctx context.Context, train *dataset.Images, warmup, n int) (float64, error) {
	secs, err := r.timed(ctx, train, warmup, n, nil)
	if err != nil {
		return 0, err
	}
	return secs, r.idle(ctx)
}

// capped is throughput with one worker and the owner capped at fraction
// of a core once the warm-up images are learned (the dictionary's
// seeding, O(K²) a row on the owner, runs uncapped), without the idle
// window. It returns the seconds the n timed images took; the owner's
// CPU is in r.ownerCPU.
func (r *workerRun) capped(ctx context.Context, train *dataset.Images, warmup, n int, fraction float64) (secs float64, err error) {
	q, err := newCPUQuota(fmt.Sprintf("smtd-bench-%d", os.Getpid()), fraction)
	if err != nil {
		return 0, err
	}
	defer func() {
		r.stop() // the group must be empty to go
		if rerr := q.remove(); err == nil {
			err = rerr
		}
	}()
	return r.timed(ctx, train, warmup, n, func() error { return q.add(r.procs["d0"].cmd.Process.Pid) })
}

// saturate starts the run with one worker, learns warmup images while
// recording the worker's contributions, stops the worker, publishes n
// more images and times them from the first contribution replayed by
// load connections to the last image applied; the owner's CPU over that
// window is in r.ownerCPU.
func (r *workerRun) saturate(ctx context.Context, train *dataset.Images, warmup, n, load int) (float64, error) {
	if err := r.start(ctx); err != nil {
		return 0, err
	}
	nc, js, err := r.nats.Connect()
	if err != nil {
		return 0, err
	}
	defer nc.Close()
	rec, err := daemon.RecordContributions(nc, config.Default(), r.p.Name)
	if err != nil {
		return 0, err
	}
	if _, err := r.learn(ctx, train, 0, warmup, 1); err != nil {
		return 0, err
	}
	if rec.Recorded() == 0 {
		return 0, errors.New("bench cluster: the warm-up sent no contribution past the dictionary's seeding: raise -warmup")
	}
	// From now on, the owner's tasks go to the replaying connections.
	worker := r.procs["d1"]
	worker.cmd.Process.Signal(syscall.SIGTERM)
	worker.wait()
	delete(r.procs, "d1")
	// The owner answers a request it parked for the worker (its last)
	// with no task after a second; a task handed to it would wait out
	// workers.task_timeout.
	time.Sleep(2 * time.Second)
	if err := r.publish(js, train, warmup, n, 1); err != nil {
		return 0, err
	}
	before, err := requestStatus(nc, config.Default().Subject("status"), time.Second)
	if err != nil {
		return 0, err
	}
	owner := r.procs["d0"].cmd.Process.Pid
	cpu0 := cpuSeconds(owner)
	start := time.Now()
	lctx, cancel := context.WithCancel(ctx)
	replayed := make(chan error, 1)
	go func() {
		_, err := rec.Replay(lctx, load)
		replayed <- err
	}()
	after, err := r.applied(ctx, nc)
	secs := time.Since(start).Seconds()
	r.ownerCPU = cpuSeconds(owner) - cpu0
	cancel()
	if rerr := <-replayed; err == nil {
		err = rerr
	}
	// Every step must have been learned, not refused or rolled back:
	// those cost the owner less. (The learned count itself follows the
	// recorded contributions' images: a task the owner cut short, as
	// the input arrived, is answered with a whole minibatch's when no
	// shorter one was recorded.)
	if b, a := before.Pipelines[0], after.Pipelines[0]; err == nil && a.NotLearned != b.NotLearned {
		err = fmt.Errorf("bench cluster: the owner refused or rolled back %d of the images replayed", a.NotLearned-b.NotLearned)
	}
	return secs, err
}

// timed starts the run, learns warmup images, calls warm (if not nil),
// then times the next n images and measures the daemons' CPU over them.
func (r *workerRun) timed(ctx context.Context, train *dataset.Images, warmup, n int, warm func() error) (float64, error) {
	if err := r.start(ctx); err != nil {
		return 0, err
	}
	if _, err := r.learn(ctx, train, 0, warmup, 1); err != nil {
		return 0, err
	}
	if warm != nil {
		if err := warm(); err != nil {
			return 0, err
		}
	}
	secs, err := r.learn(ctx, train, warmup, n, 1)
	if err != nil {
		return 0, err
	}
	r.secs = secs
	return secs, r.measure()
}

// statusEvery is how often the bench asks for the status while it waits
// for the images to be applied (and while the daemons are idle): its
// requests cost the daemons CPU too, so not more often than the end of a
// run of tens of seconds needs.
const statusEvery = 100 * time.Millisecond

// idle measures the CPU each daemon spends per second over r.idleFor with
// no input, while the status is polled as learn polls it.
func (r *workerRun) idle(ctx context.Context) error {
	nc, _, err := r.nats.Connect()
	if err != nil {
		return err
	}
	defer nc.Close()
	cpu0 := map[string]float64{}
	for name, c := range r.procs {
		cpu0[name] = cpuSeconds(c.cmd.Process.Pid)
	}
	start := time.Now()
	if err := pollEvery(ctx, statusEvery, 2*r.idleFor, "the idle window", func() bool {
		requestStatus(nc, config.Default().Subject("status"), time.Second)
		return time.Since(start) >= r.idleFor
	}); err != nil {
		return err
	}
	secs := time.Since(start).Seconds()
	for name, c := range r.procs {
		s := (cpuSeconds(c.cmd.Process.Pid) - cpu0[name]) / secs
		if name == "d0" {
			r.ownerIdle = s
		} else {
			r.workerIdle += s / float64(r.workers)
		}
	}
	return nil
}

// learn publishes images from..from+n−1 passes times and returns the
// seconds from the first publish to the last image applied. The CPU time
// and NATS bytes of every daemon are counted from its start (measure).
func (r *workerRun) learn(ctx context.Context, train *dataset.Images, from, n, passes int) (float64, error) {
	nc, js, err := r.nats.Connect()
	if err != nil {
		return 0, err
	}
	defer nc.Close()
	r.cpu0 = map[string]float64{}
	for name, c := range r.procs {
		r.cpu0[name] = cpuSeconds(c.cmd.Process.Pid)
	}
	r.faults0 = minorFaults(r.procs["d0"].cmd.Process.Pid)
	bytes0 := r.connBytes()
	r.ownerBytes, r.workersBytes = 0, 0
	start := time.Now()
	if err := r.publish(js, train, from, n, passes); err != nil {
		return 0, err
	}
	_, err = r.applied(ctx, nc)
	secs := time.Since(start).Seconds()
	for name, b := range r.connBytes() {
		if name == "d0" {
			r.ownerBytes += b - bytes0[name]
		} else {
			r.workersBytes += b - bytes0[name]
		}
	}
	return secs, err
}

// publish publishes images from..from+n−1 of train (past its end, from
// its start again) passes times and waits for the server to store them.
func (r *workerRun) publish(js jetstream.JetStream, train *dataset.Images, from, n, passes int) error {
	for k := range passes * n {
		if _, err := js.PublishMsgAsync(imageMsg(r.p.Input.Subject, train, (from+k%n)%train.N)); err != nil {
			return err
		}
		if k%256 == 255 {
			<-js.PublishAsyncComplete()
		}
	}
	<-js.PublishAsyncComplete()
	r.sent += passes * n
	return nil
}

// applied waits until the owner has applied every image published and
// returns its status then.
func (r *workerRun) applied(ctx context.Context, nc *nats.Conn) (daemon.Status, error) {
	var last daemon.Status
	err := pollEvery(ctx, statusEvery, time.Hour, "every image applied", func() bool {
		st, err := requestStatus(nc, config.Default().Subject("status"), time.Second)
		if err != nil {
			return false
		}
		last = st
		return st.Pipelines[0].LastSeq >= uint64(r.sent)
	})
	return last, err
}

// measure adds up the CPU time of the owner and of the workers since
// learn started.
func (r *workerRun) measure() error {
	for name, c := range r.procs {
		s := cpuSeconds(c.cmd.Process.Pid) - r.cpu0[name]
		if s <= 0 {
			return fmt.Errorf("bench cluster: no CPU time for %s", name)
		}
		if name == "d0" {
			r.ownerFaults += minorFaults(c.cmd.Process.Pid) - r.faults0
			r.ownerRSS = rssMiB(c.cmd.Process.Pid)
			r.ownerCPU += s
		} else {
			r.workerRSS = max(r.workerRSS, rssMiB(c.cmd.Process.Pid))
			r.workersCPU += s
		}
	}
	return nil
}

// connBytes returns the bytes in and out of each daemon's NATS
// connections, by daemon (their names end in @<daemon>).
func (r *workerRun) connBytes() map[string]int64 {
	out := map[string]int64{}
	for _, s := range r.nats.Servers {
		cz, err := s.Connz(&server.ConnzOptions{Limit: 1024})
		if err != nil {
			continue
		}
		for _, c := range cz.Conns {
			if _, who, ok := strings.Cut(c.Name, "@"); ok {
				out[who] += c.InBytes + c.OutBytes
			}
		}
	}
	return out
}

func (r *workerRun) stop() {
	for _, c := range r.procs {
		c.cmd.Process.Signal(syscall.SIGTERM)
	}
	for _, c := range r.procs {
		c.wait()
	}
	if r.nats != nil {
		r.nats.Shutdown()
	}
}

// daemonProcess is `smtd run` in a process of its own.
type daemonProcess struct {
	cmd  *exec.Cmd
	logs *os.File
}

// wait waits for the process to end and closes its log.
func (d *daemonProcess) wait() {
	d.cmd.Wait()
	d.logs.Close()
}

// startDaemonProcess writes cfg to root/name.yaml and starts `smtd run`
// on it (this executable), its output in root/name.log, with env added to
// the environment and runArgs to the command line.
func startDaemonProcess(root, name string, cfg *config.Config, env []string, runArgs ...string) (*daemonProcess, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	data, err := yaml.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	path := filepath.Join(root, name+".yaml")
	if err := os.MkdirAll(root, 0o755); err != nil {
		return nil, err
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		return nil, err
	}
	logs, err := os.Create(filepath.Join(root, name+".log"))
	if err != nil {
		return nil, err
	}
	c := exec.Command(exe, append([]string{"run", "--config", path}, runArgs...)...)
	c.Stdout, c.Stderr = logs, logs
	c.Env = append(os.Environ(), env...)
	if err := c.Start(); err != nil {
		logs.Close()
		return nil, err
	}
	return &daemonProcess{cmd: c, logs: logs}, nil
}

// clusterAccuracy prints the soft-KNN top-1 of the quick MNIST setting
// learned by one daemon (bench mnist) and by 2 and 3 workers, runs times
// each, with seeds 1 to runs.
func clusterAccuracy(ctx context.Context, w io.Writer, root string, p config.Pipeline, dir string, nTrain, nTest, runs int) error {
	train, err := dataset.ReadMNIST(dir, "train")
	if err != nil {
		return err
	}
	test, err := dataset.ReadMNIST(dir, "t10k")
	if err != nil {
		return err
	}
	nTrain, nTest = min(nTrain, train.N), min(nTest, test.N)
	names := []string{"single", "workers_2", "workers_3"}
	sums := make([]float64, len(names))
	for seed := uint64(1); seed <= uint64(runs); seed++ {
		for i, name := range names {
			var top1 float64
			if i == 0 {
				top1, err = singleTop1(ctx, p, dir, nTrain, nTest, seed)
			} else {
				p := p
				p.Seed = seed
				r := &workerRun{root: filepath.Join(root, fmt.Sprintf("acc%d-%d", i+1, seed)), workers: i + 1, p: p}
				top1, err = r.top1(ctx, train, test, nTrain, nTest)
				r.stop()
				top1 *= 100
			}
			if err != nil {
				return err
			}
			sums[i] += top1
			if seed == 1 {
				fmt.Fprintf(w, "cluster_top1_%s: %.2f\n", name, top1)
			}
			if runs > 1 {
				fmt.Fprintf(w, "cluster_top1_%s_seed_%d: %.2f\n", name, seed, top1)
			}
		}
	}
	if runs > 1 {
		fmt.Fprintf(w, "cluster_accuracy_runs: %d\n", runs)
		for i, name := range names {
			fmt.Fprintf(w, "cluster_top1_%s_mean: %.2f\n", name, sums[i]/float64(runs))
		}
	}
	return nil
}

// singleTop1 runs bench mnist's quick setting in one daemon, with the
// workers' K and batch.size, and returns its top-1, in percent.
func singleTop1(ctx context.Context, p config.Pipeline, dir string, nTrain, nTest int, seed uint64) (float64, error) {
	var out strings.Builder
	if err := MNIST(ctx, &out, []string{"-mnist", dir, "-train", fmt.Sprint(nTrain), "-test", fmt.Sprint(nTest), "-k", fmt.Sprint(p.KMeans.Atoms), "-batch", fmt.Sprint(p.Batch.Size), "-seed", fmt.Sprint(seed)}); err != nil {
		return 0, err
	}
	for _, line := range strings.Split(out.String(), "\n") {
		if v, ok := strings.CutPrefix(line, "top1: "); ok {
			return strconv.ParseFloat(strings.TrimSuffix(v, "%"), 64)
		}
	}
	return 0, errors.New("bench cluster: bench mnist printed no top1")
}

// top1 learns nTrain images twice with the run's workers, checkpoints,
// embeds the training and test images through the daemons' endpoint and
// returns the soft-KNN top-1.
func (r *workerRun) top1(ctx context.Context, train, test *dataset.Images, nTrain, nTest int) (float64, error) {
	if err := r.start(ctx); err != nil {
		return 0, err
	}
	if _, err := r.learn(ctx, train, 0, nTrain, 2); err != nil {
		return 0, err
	}
	nc, _, err := r.nats.Connect()
	if err != nil {
		return 0, err
	}
	defer nc.Close()
	cfg := config.Default()
	if _, err := nc.Request(cfg.Subject("control.checkpoint"), []byte(r.p.Name), 10*time.Minute); err != nil {
		return 0, fmt.Errorf("bench cluster: checkpoint: %w", err)
	}
	// The workers answer queries from the newest checkpoint, which they
	// load within an eighth of the lease TTL.
	if err := wait(ctx, cfg.Cluster.LeaseTTL/2); err != nil {
		return 0, err
	}
	trainX, err := embedAll(nc, cfg.EmbedSubject(r.p.Name), nTrain, func(s string, i int) *nats.Msg { return imageMsg(s, train, i) })
	if err != nil {
		return 0, err
	}
	testX, err := embedAll(nc, cfg.EmbedSubject(r.p.Name), nTest, func(s string, i int) *nats.Msg { return imageMsg(s, test, i) })
	if err != nil {
		return 0, err
	}
	top1, _, err := knnTop1(trainX, train, testX, test)
	return top1, err
}
