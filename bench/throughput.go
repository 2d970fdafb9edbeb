package bench

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/debug"
	"runtime/metrics"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/smtd/smtd/config"
	"github.com/smtd/smtd/daemon"
	"github.com/smtd/smtd/dataset"
)

// Throughput measures, in one run on the default image pipeline (28x28,
// 6x6 patches, K = 256, SMT dimension 32) and recorded MNIST, and on the
// default frames pipeline and panned photos:
//
//   - learning throughput (medians of -rounds alternating runs) of the library (daemon.OfflineLearner: the
//     decoding and learning code of a pipeline, in process, no NATS)
//     against the daemon's (the same images published through JetStream
//     into a daemon in this process, or with -process in `smtd run` of its
//     own, until all are learned), and
//     throughput_daemon_overhead = 1 − daemon/library; and, as the
//     machine's load drifts between rounds, the median of each round's
//     own 1 − daemon/library (throughput_daemon_overhead_paired, each
//     round's in throughput_daemon_overhead_rounds: the daemon runs right
//     after the library);
//   - with the daemon idle, embed queries sent open-loop at -rate per
//     second from a connection of their own: latency p50 and p99 (idle_*),
//     the floor for the next figures;
//   - while the daemon learns, the same queries sent open-loop at -rate per
//     second: latency p50 and p99 of the answers, timeouts and busy
//     replies, and the learning throughput meanwhile;
//   - the same while the daemon learns a recorded backlog instead, as
//     when recorded streams are replayed into JetStream (replay_*):
//     images published before the phase, none during it, and
//     replay_backlog_left of them still unlearned as it ends (above 0:
//     it learned throughout);
//   - the same at -flood-rate, past what the query workers can encode:
//     every query must get an answer or a fast busy error (503 "busy: …"),
//     reported with the p99 of the busy replies;
//   - -rounds times, the library learning the -images images again,
//     then the daemon restarted with its model reset (its checkpoints
//     deleted) learning the same first images of its input stream again:
//     a backlog stored before it starts, no publisher running, as when it
//     is started on a recorded stream. Its rate from its first status
//     answer until it has learned them (throughput_backlog_images_per_s),
//     the library's over the same images just before
//     (throughput_backlog_library_images_per_s), and the median of each
//     round's 1 − daemon/library
//     (throughput_backlog_overhead; each round's in
//     throughput_backlog_overhead_rounds). Unlike
//     throughput_daemon_overhead, no publisher shares the machine's
//     cores with the daemon. The same over CPU time rather than wall
//     time, on Linux: images per second of CPU spent by the benchmark's
//     processes (the daemon's, its NATS server included, with -process)
//     while the daemon learns them and while the library does
//     (throughput_backlog_cpu_images_per_s,
//     throughput_backlog_library_cpu_images_per_s) and the median of
//     each round's 1 − daemon/library (throughput_backlog_cpu_overhead,
//     throughput_backlog_cpu_overhead_rounds): the work the daemon adds,
//     which a host that runs the machine's cores slower or not at all
//     changes less than it changes the wall-clock rates;
//   - last, -rounds alternating runs of the library and of a new daemon
//     on the default frames pipeline (32x32 gray video, the temporal SMT
//     of each stream's consecutive frames; -k atoms too): -frames frames
//     of clips panned over the photos of -photos (framesInput), the
//     throughput_frames_* lines as the images' above.
//
// Each daemon learning round also ends once the daemon has published the
// outputs of all it learned (throughput_daemon_published_images_per_s,
// throughput_frames_daemon_published_per_s: learned and published).
//
// With the daemon in this process, each query phase also reports the
// garbage collection cycles of the process (<phase>_gc_cycles) and the
// share of the answers above the p99 that were in flight as one ended
// (<phase>_slow_near_gc; see collections), and what the process
// allocated a second (<phase>_alloc_mb_per_s). Each query phase also
// reports, from the daemon's counters (daemon.QueryStatus, Linux), the
// share of the query workers' time their threads did not run, mostly
// waiting for a core (<phase>_work_off_cpu), and the share of the
// queries whose thread did not run for more than half of their work
// (<phase>_mostly_off_cpu): above 0.01, the scheduling of threads on
// cores alone can set the p99.
//
// The daemon runs with its configured query workers and queue and the
// learner's yield to queries (service.query_workers, service.query_queue,
// service.learn_yield; flags -workers, -queue, -learn-yield).
func Throughput(ctx context.Context, w io.Writer, args []string) error {
	fs := flag.NewFlagSet("bench throughput", flag.ContinueOnError)
	dir := fs.String("mnist", "../shared/data/mnist", "`directory` with the MNIST IDX files (gzip'd or not)")
	nImages := fs.Int("images", 10000, "training images learned by the library and by the daemon")
	atoms := fs.Int("k", config.DefaultPipeline(config.Image, "images").KMeans.Atoms, "dictionary size (kmeans.atoms) of the image pipeline")
	rate := fs.Float64("rate", 500, "embed queries per second, idle and while the daemon learns")
	floodRate := fs.Float64("flood-rate", 5000, "embed queries per second past capacity")
	seconds := fs.Float64("seconds", 10, "duration of each query phase")
	timeout := fs.Duration("timeout", 5*time.Second, "a query not answered within this is a timeout")
	workers := fs.Int("workers", 0, "service.query_workers (0: GOMAXPROCS)")
	queue := fs.Int("queue", config.Default().Service.QueryQueue, "service.query_queue")
	learnYield := fs.Duration("learn-yield", config.Default().Service.LearnYield, "service.learn_yield")
	learnNice := fs.Int("learn-nice", config.Default().Service.LearnNice, "service.learn_nice: the learner's nice value above the daemon's (0..19)")
	rounds := fs.Int("rounds", 3, "alternating library and daemon learning runs; their medians are reported")
	nFrames := fs.Int("frames", 10000, "video frames learned by the library and by the daemon in each round of the frames pipeline (0: no frames rounds)")
	photos := fs.String("photos", "../shared/data/images", "`directory` of the photos (PNG or JPEG) the video frames pan over")
	process := fs.Bool("process", false, "run the daemon as smtd run in a process of its own (default: in this process)")
	daemonProfile := fs.String("daemon-cpuprofile", "", "with -process, write a CPU profile of the first round's daemon process to `file` (with -rounds 1 it runs the query phases too)")
	daemonTrace := fs.String("daemon-trace", "", "with -process, write an execution trace of the first round's daemon process to `file` (with -rounds 1 it runs the query phases too)")
	tracePath := fs.String("trace", "", "write an execution trace (runtime/trace) of the query phase at -rate to `file`")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *rate <= 0 || *floodRate <= 0 || *seconds <= 0 || *nImages < 1 || *rounds < 1 || *atoms < 1 {
		return errors.New("bench throughput: -rate, -flood-rate, -seconds, -images, -rounds and -k must be positive")
	}
	if *nFrames < 0 {
		return errors.New("bench throughput: -frames must be >= 0")
	}
	if (*daemonProfile != "" || *daemonTrace != "") && !*process {
		return errors.New("bench throughput: -daemon-cpuprofile and -daemon-trace need -process")
	}
	train, err := dataset.ReadMNIST(*dir, "train")
	if err != nil {
		return err
	}
	test, err := dataset.ReadMNIST(*dir, "t10k")
	if err != nil {
		return err
	}
	n := min(*nImages, train.N)
	p := config.DefaultPipeline(config.Image, "images")
	p.Input.Subject = "bench.images"
	p.Output.Subject = "bench.images.embeddings"
	p.KMeans.Atoms = *atoms
	// The library is fed the pipeline directly, without the daemon's
	// checks of its config: check it here.
	check := config.Default()
	check.Pipelines = []config.Pipeline{p}
	if err := check.Validate(); err != nil {
		return fmt.Errorf("bench throughput: %w", err)
	}

	// The library (the pipeline's model alone, fed the same minibatches)
	// and the daemon, alternately, each from an empty model: on a shared
	// machine the load of other processes changes between runs, and the
	// medians of alternating rounds see the same load.
	msgs := make([]*nats.Msg, n)
	for i := range msgs {
		msgs[i] = imageMsg(p.Input.Subject, train, i)
	}
	// The frames, made before any round so that a missing photo fails
	// the run at once.
	var framesPipeline config.Pipeline
	var frames []*nats.Msg
	if *nFrames > 0 {
		if framesPipeline, frames, err = framesInput(*photos, *nFrames, *atoms); err != nil {
			return err
		}
	}
	// The daemon, with the query pool under test.
	change := func(c *config.Config) {
		c.Service.QueryWorkers, c.Service.QueryQueue, c.Service.LearnYield, c.Service.LearnNice = *workers, *queue, *learnYield, *learnNice
	}
	start := func(p config.Pipeline, round int) (*benchDaemon, error) {
		if !*process {
			return startDaemonWith(ctx, p, os.Stderr, change)
		}
		var runArgs []string
		for _, f := range []struct{ flag, path string }{{"--cpuprofile", *daemonProfile}, {"--trace", *daemonTrace}} {
			if round > 0 || p.Modality != config.Image || f.path == "" {
				continue
			}
			path, err := filepath.Abs(f.path)
			if err != nil {
				return nil, err
			}
			runArgs = append(runArgs, f.flag, path)
		}
		return startDaemonProcessWith(ctx, p, change, runArgs...)
	}
	learning, in, err := learningRounds(ctx, p, msgs, *rounds, start)
	defer func() {
		if in != nil {
			in.Close()
		}
	}()
	if err != nil {
		return err
	}
	sent := n
	libRate, daemonRate := median(learning.lib), median(learning.daemon)
	overheads := learning.overheads()

	// Queries while the daemon learns: the publisher keeps it learning
	// (the same images again) until the query phase ends.
	embedSubject := config.Default().EmbedSubject(p.Name)
	phase := func(name string, r float64, learning bool) (*queryLoad, float64, error) {
		stop := make(chan struct{})
		learnedBefore := in.learned()
		errc := make(chan error, 1)
		start, allocated := time.Now(), heapAllocated()
		work0, err := in.queryWork()
		if err != nil {
			return nil, 0, err
		}
		go func() {
			if !learning {
				<-stop
				errc <- nil
				return
			}
			errc <- in.publish(ctx, msgs, &sent, -1, stop)
		}()
		// A client of its own, as the users who query are not the
		// producers.
		qnc, err := nats.Connect(in.url)
		if err != nil {
			return nil, 0, err
		}
		defer qnc.Close()
		load, err := sendQueries(ctx, qnc, embedSubject, test, r, time.Duration(*seconds*float64(time.Second)), *timeout, name)
		if load != nil {
			load.gcCycles, load.slowNearGC = collections(load, start)
			load.allocMBps = float64(heapAllocated()-allocated) / 1e6 / time.Since(start).Seconds()
			work1, werr := in.queryWork()
			if werr != nil && err == nil {
				err = werr
			}
			load.setOffCPU(work0, work1)
			load.daemonP99 = work1.P99Ms
		}
		close(stop)
		if perr := <-errc; err == nil {
			err = perr
		}
		learnRate := float64(in.learned()-learnedBefore) / time.Since(start).Seconds()
		return load, learnRate, err
	}
	stopTrace, err := StartTrace(*tracePath)
	if err != nil {
		return err
	}
	idle, _, err := phase("idle", *rate, false)
	if err != nil {
		return err
	}
	steady, steadyLearn, err := phase("steady", *rate, true)
	stopTrace()
	if err != nil {
		return err
	}
	// What the publisher sent ahead learned, a backlog of half again
	// what the daemon learned in as long (and a few minibatches), and
	// after the phase what is left of it learned too.
	if err := in.waitLearned(ctx, sent, 5*time.Millisecond); err != nil {
		return err
	}
	backlog := int(1.5*steadyLearn**seconds) + 4*p.Batch.Size
	if err := in.publishBacklog(ctx, msgs, &sent, backlog); err != nil {
		return err
	}
	replay, replayLearn, err := phase("replay", *rate, false)
	if err != nil {
		return err
	}
	backlogLeft := int64(sent) - in.learned()
	if err := in.waitLearned(ctx, sent, 5*time.Millisecond); err != nil {
		return err
	}
	flood, floodLearn, err := phase("flood", *floodRate, true)
	if err != nil {
		return err
	}
	fromBacklog, err := in.learnBacklog(ctx, p, msgs[:n], *rounds)
	if err != nil {
		return err
	}
	in.Close()
	in = nil
	var video learningRates
	if *nFrames > 0 {
		video, in, err = learningRounds(ctx, framesPipeline, frames, *rounds, start)
		if err != nil {
			return err
		}
		in.Close()
		in = nil
	}
	showProgress("")

	line := func(name string, v any) { fmt.Fprintf(w, "%s: %v\n", name, v) }
	writeMachine(w)
	line("throughput_images", n)
	line("throughput_batch", p.Batch.Size)
	line("throughput_k", p.KMeans.Atoms)
	line("throughput_smt_dim", p.SMT.Dim)
	line("throughput_query_workers", *workers)
	line("throughput_query_queue", *queue)
	line("throughput_learn_yield_ms", fmt.Sprintf("%.1f", ms(*learnYield)))
	line("throughput_learn_nice", *learnNice)
	line("throughput_rounds", *rounds)
	line("throughput_daemon_process", *process)
	line("throughput_library_images_per_s", fmt.Sprintf("%.0f", libRate))
	line("throughput_daemon_images_per_s", fmt.Sprintf("%.0f", daemonRate))
	line("throughput_daemon_overhead", fmt.Sprintf("%.3f", learning.overhead()))
	line("throughput_daemon_overhead_paired", fmt.Sprintf("%.3f", median(overheads)))
	line("throughput_daemon_overhead_rounds", formatOverheads(overheads))
	line("throughput_backlog_images_per_s", fmt.Sprintf("%.0f", median(fromBacklog.rates)))
	line("throughput_backlog_library_images_per_s", fmt.Sprintf("%.0f", median(fromBacklog.libRates)))
	line("throughput_backlog_overhead", fmt.Sprintf("%.3f", median(fromBacklog.overheads)))
	line("throughput_backlog_overhead_rounds", formatOverheads(fromBacklog.overheads))
	if fromBacklog.cpuOverheads != nil {
		line("throughput_backlog_cpu_images_per_s", fmt.Sprintf("%.0f", median(fromBacklog.cpuRates)))
		line("throughput_backlog_library_cpu_images_per_s", fmt.Sprintf("%.0f", median(fromBacklog.libCPURates)))
		line("throughput_backlog_cpu_overhead", fmt.Sprintf("%.3f", median(fromBacklog.cpuOverheads)))
		line("throughput_backlog_cpu_overhead_rounds", formatOverheads(fromBacklog.cpuOverheads))
	}
	line("throughput_daemon_published_images_per_s", fmt.Sprintf("%.0f", median(learning.published)))
	if *nFrames > 0 {
		line("throughput_frames", *nFrames)
		line("throughput_frames_library_per_s", fmt.Sprintf("%.0f", median(video.lib)))
		line("throughput_frames_daemon_per_s", fmt.Sprintf("%.0f", median(video.daemon)))
		line("throughput_frames_daemon_published_per_s", fmt.Sprintf("%.0f", median(video.published)))
		line("throughput_frames_overhead", fmt.Sprintf("%.3f", video.overhead()))
		line("throughput_frames_overhead_paired", fmt.Sprintf("%.3f", median(video.overheads())))
		line("throughput_frames_overhead_rounds", formatOverheads(video.overheads()))
	}
	for _, ph := range []struct {
		name  string
		load  *queryLoad
		learn float64
	}{{"idle", idle, 0}, {"embed", steady, steadyLearn}, {"replay", replay, replayLearn}, {"flood", flood, floodLearn}} {
		l := ph.load
		line(ph.name+"_rate_per_s", fmt.Sprintf("%.0f", l.rate))
		line(ph.name+"_sent", l.sent)
		line(ph.name+"_answered", l.answered)
		line(ph.name+"_busy", l.busy)
		line(ph.name+"_errors", l.errors)
		line(ph.name+"_timeouts", l.timeouts)
		line(ph.name+"_answer_p50_ms", fmt.Sprintf("%.2f", ms(percentile(l.answerLat, 0.5))))
		line(ph.name+"_answer_p99_ms", fmt.Sprintf("%.2f", ms(percentile(l.answerLat, 0.99))))
		line(ph.name+"_busy_p99_ms", fmt.Sprintf("%.2f", ms(percentile(l.busyLat, 0.99))))
		line(ph.name+"_daemon_p99_ms", fmt.Sprintf("%.2f", l.daemonP99))
		if ph.load != idle {
			line(ph.name+"_learn_images_per_s", fmt.Sprintf("%.0f", ph.learn))
		}
		if ph.load == replay {
			line("replay_backlog_left", backlogLeft)
		}
		line(ph.name+"_work_off_cpu", fmt.Sprintf("%.3f", l.offCPU))
		line(ph.name+"_mostly_off_cpu", fmt.Sprintf("%.4f", l.mostlyOffCPU))
		if !*process { // the collector of the daemon's process
			line(ph.name+"_gc_cycles", l.gcCycles)
			line(ph.name+"_slow_near_gc", fmt.Sprintf("%.2f", l.slowNearGC))
			line(ph.name+"_alloc_mb_per_s", fmt.Sprintf("%.1f", l.allocMBps))
		}
	}
	return nil
}

// publish sends msgs through JetStream in order, cycling, a little ahead
// of the daemon: until limit messages are learned (limit ≥ 0), or until
// stop is closed (limit < 0). sent counts the messages published over all
// calls.
func (in *benchDaemon) publish(ctx context.Context, msgs []*nats.Msg, sent *int, limit int, stop <-chan struct{}) error {
	base := *sent
	for {
		if limit >= 0 && *sent-base == limit {
			break
		}
		select {
		case <-stop:
			return nil
		default:
		}
		m := msgs[*sent%len(msgs)]
		if _, err := in.js.PublishMsgAsync(&nats.Msg{Subject: m.Subject, Header: m.Header, Data: m.Data}); err != nil {
			return err
		}
		*sent++
		// 2048 ahead is seconds of learning. The daemon is asked how far
		// it got only once its last answer puts the publisher that far
		// ahead, and then every 20 ms: a status request is work of the
		// daemon and the server that the library does not do.
		for int64(*sent)-in.lastLearned > 2048 {
			if err := wait(ctx, 20*time.Millisecond); err != nil {
				return err
			}
			in.learned()
			select {
			case <-stop:
				return nil
			default:
			}
		}
		if limit >= 0 && *sent%1000 == 0 {
			showProgress("daemon: %d/%d images", *sent-base, limit)
		}
	}
	return in.waitLearned(ctx, *sent, 5*time.Millisecond)
}

// waitLearned returns once the daemon has learned n messages, asking it
// every d (a run's end is known to d).
func (in *benchDaemon) waitLearned(ctx context.Context, n int, d time.Duration) error {
	for in.learned() < int64(n) {
		if err := wait(ctx, d); err != nil {
			return err
		}
	}
	return nil
}

// libraryRound learns msgs in minibatches with a new library model of p
// and returns when each minibatch was learned, since the start, and, with
// withCPU, the CPU seconds this process had spent by then, since the
// start (cpuSeconds: all 0 where there is no /proc; a read of /proc after
// each minibatch, left out of the rounds that do not use it).
func libraryRound(ctx context.Context, p config.Pipeline, msgs []*nats.Msg, name string, withCPU bool) (done []time.Duration, cpu []float64, err error) {
	lib := daemon.NewOfflineLearner(p)
	t0, cpu0 := time.Now(), cpuSeconds(os.Getpid())
	for i := 0; i < len(msgs); i += p.Batch.Size {
		if _, err := lib.Learn(msgs[i:min(i+p.Batch.Size, len(msgs))]); err != nil {
			return nil, nil, fmt.Errorf("bench throughput: library: %w", err)
		}
		done = append(done, time.Since(t0))
		if withCPU {
			cpu = append(cpu, cpuSeconds(os.Getpid())-cpu0)
		}
		if err := ctx.Err(); err != nil {
			return nil, nil, err
		}
		showProgress("%s: library %d/%d images", name, i, len(msgs))
	}
	return done, cpu, nil
}

// cpu returns the CPU seconds spent by this process and, when the daemon
// runs in a process of its own, by that process: everything the
// benchmark runs, the daemon's NATS server included (cpuSeconds).
func (in *benchDaemon) cpu() float64 {
	c := cpuSeconds(os.Getpid())
	if in.proc != nil {
		c += cpuSeconds(in.proc.cmd.Process.Pid)
	}
	return c
}

// learningRates are the images (or frames) a second of alternating
// rounds: the library learning them (lib), then a new daemon learning
// the same through NATS (daemon, until its status counts them all
// learned) and publishing their outputs (published, until it counts
// them all published).
type learningRates struct {
	lib, daemon, published []float64
}

// overhead returns 1 − daemon/library of the rounds' median rates.
func (r learningRates) overhead() float64 { return 1 - median(r.daemon)/median(r.lib) }

// overheads returns each round's 1 − daemon/library.
func (r learningRates) overheads() []float64 {
	o := make([]float64, len(r.lib))
	for i := range o {
		o[i] = 1 - r.daemon[i]/r.lib[i]
	}
	return o
}

// learningRounds measures, rounds times, the library learning msgs from
// an empty model, then a daemon started by start (its data new) learning
// them from an empty model as they are published to it: on a shared
// machine the load of other processes changes between runs, and the
// medians of alternating rounds see the same load. Each round's daemon
// is closed when the next starts; the last one's is returned, running.
func learningRounds(ctx context.Context, p config.Pipeline, msgs []*nats.Msg, rounds int, start func(p config.Pipeline, round int) (*benchDaemon, error)) (learningRates, *benchDaemon, error) {
	var r learningRates
	var in *benchDaemon
	n := len(msgs)
	for round := range rounds {
		done, _, err := libraryRound(ctx, p, msgs, fmt.Sprintf("%s round %d", p.Name, round+1), false)
		if err != nil {
			return r, in, err
		}
		r.lib = append(r.lib, float64(n)/done[len(done)-1].Seconds())
		if in != nil {
			in.Close()
		}
		if in, err = start(p, round); err != nil {
			return r, nil, err
		}
		t0 := time.Now()
		sent := 0
		if err := in.publish(ctx, msgs, &sent, n, nil); err != nil {
			return r, in, err
		}
		r.daemon = append(r.daemon, float64(n)/time.Since(t0).Seconds())
		if err := in.waitPublished(ctx, n, 5*time.Millisecond); err != nil {
			return r, in, err
		}
		r.published = append(r.published, float64(n)/time.Since(t0).Seconds())
	}
	return r, in, nil
}

// backlogRounds are the daemon's learning rates on a backlog
// (learnBacklog), the library's over the same images, and each round's
// 1 − daemon/library; and the same over CPU time rather than wall-clock
// time (nil where there is no /proc).
type backlogRounds struct {
	rates, libRates, overheads          []float64
	cpuRates, libCPURates, cpuOverheads []float64
}

// learnBacklog measures, rounds times, the library learning msgs (the
// first messages of the daemon's input stream) and then the daemon
// restarted with its model reset (restartReset) learning them again, a
// backlog stored before it starts, from its first status answer until it
// has learned them all. The images it learned before that answer are
// left out, of its rate and of the library's. The daemon is stopped
// while the library learns (its stream holds more than msgs, which it
// would go on learning), and at the end.
func (in *benchDaemon) learnBacklog(ctx context.Context, p config.Pipeline, msgs []*nats.Msg, rounds int) (backlogRounds, error) {
	var b backlogRounds
	n, batch := len(msgs), p.Batch.Size
	defer in.stop()
	for r := range rounds {
		in.stop()
		done, libCPU, err := libraryRound(ctx, p, msgs, fmt.Sprintf("backlog round %d", r+1), true)
		if err != nil {
			return b, err
		}
		showProgress("backlog round %d: daemon", r+1)
		if err := in.restartReset(ctx); err != nil {
			return b, err
		}
		t0, from := time.Now(), int(in.learned())
		cpu0 := in.cpu()
		if from >= n || from%batch != 0 {
			return b, fmt.Errorf("bench throughput: the daemon restarted on its backlog had learned %d of %d images at its first status answer", from, n)
		}
		if err := in.waitLearned(ctx, n, 20*time.Millisecond); err != nil {
			return b, err
		}
		rate := float64(n-from) / time.Since(t0).Seconds()
		cpu := in.cpu() - cpu0
		libRate := float64(n-from) / since(done, from/batch).Seconds()
		b.rates, b.libRates = append(b.rates, rate), append(b.libRates, libRate)
		b.overheads = append(b.overheads, 1-rate/libRate)
		if libCPU := since(libCPU, from/batch); cpu > 0 && libCPU > 0 {
			cpuRate, libCPURate := float64(n-from)/cpu, float64(n-from)/libCPU
			b.cpuRates, b.libCPURates = append(b.cpuRates, cpuRate), append(b.libCPURates, libCPURate)
			b.cpuOverheads = append(b.cpuOverheads, 1-cpuRate/libCPURate)
		}
	}
	return b, nil
}

// since returns the time (or CPU time) libraryRound took from the start
// of its minibatch first (counted from 0) to the end of its last: its
// last time less the one before first.
func since[T time.Duration | float64](times []T, first int) T {
	t := times[len(times)-1]
	if first > 0 {
		t -= times[first-1]
	}
	return t
}

// publishBacklog publishes the next n of msgs (cycling) without waiting
// for the daemon to learn them, a thousand at a time (fewer than the
// client's asynchronous publishes in flight), and returns when JetStream
// has stored them all.
func (in *benchDaemon) publishBacklog(ctx context.Context, msgs []*nats.Msg, sent *int, n int) error {
	for i := 0; i < n; i++ {
		m := msgs[*sent%len(msgs)]
		if _, err := in.js.PublishMsgAsync(&nats.Msg{Subject: m.Subject, Header: m.Header, Data: m.Data}); err != nil {
			return err
		}
		*sent++
		if (i+1)%1000 != 0 && i+1 != n {
			continue
		}
		select {
		case <-in.js.PublishAsyncComplete():
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// queryLoad is what a run of sendQueries saw.
type queryLoad struct {
	rate                                   float64 // achieved send rate
	sent, answered, busy, errors, timeouts int
	answerLat, busyLat                     []time.Duration
	// sentAt and outcome are each query's, in the order sent.
	sentAt  []time.Time
	outcome []queryOutcome
	// gcCycles is how many garbage collection cycles of this process
	// ended during the phase, and slowNearGC the fraction of the answers
	// slower than the p99 that were in flight within gcWindow before the
	// end of one (see collections).
	gcCycles   int
	slowNearGC float64
	// allocMBps is what this process allocated on the heap a second
	// over the phase, in MB: what the collector's cycles follow.
	allocMBps float64
	// offCPU is the share of the daemon's query work (a worker taking a
	// query to its reply going out) its workers' threads did not run,
	// and mostlyOffCPU the share of the timed queries whose thread did
	// not run for more than half of their work (daemon.QueryStatus; -1 when the
	// daemon timed none, off Linux).
	offCPU, mostlyOffCPU float64
	// daemonP99 is the daemon's own p99, in ms, of the time from a
	// query's arrival at its handler to its answer, over its last 1024
	// answered queries (daemon.QueryStatus): the part of the tail
	// spent inside the daemon's query path rather than on the way
	// through the NATS server and the connections.
	daemonP99 float64
}

// queryWork returns the query counters of the pipeline the bench runs.
func (in *benchDaemon) queryWork() (daemon.QueryStatus, error) {
	st, err := in.status()
	if err != nil {
		return daemon.QueryStatus{}, err
	}
	return st.Pipelines[0].Queries, nil
}

// setOffCPU sets l.offCPU and l.mostlyOffCPU from the daemon's query
// counters before (a) and after (b) the phase.
func (l *queryLoad) setOffCPU(a, b daemon.QueryStatus) {
	l.offCPU, l.mostlyOffCPU = -1, -1
	if b.Timed > a.Timed {
		l.offCPU = (b.OffCPUSeconds - a.OffCPUSeconds) / (b.WorkSeconds - a.WorkSeconds)
		l.mostlyOffCPU = float64(b.MostlyOffCPU-a.MostlyOffCPU) / float64(b.Timed-a.Timed)
	}
}

// heapAllocated returns the bytes this process has allocated on the heap
// since it started (runtime/metrics).
func heapAllocated() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// gcWindow is how long before the end of a garbage collection cycle an
// answer counts as slowed by it: with GODEBUG=gctrace=1, the concurrent
// mark phases of `smtd bench throughput -k 4096` took 5 to 45 ms.
const gcWindow = 50 * time.Millisecond

// collections returns how many garbage collection cycles of this process
// ended since start, and the fraction of l's answers slower than their
// p99 that were in flight within gcWindow before such an end. With the
// daemon in the bench's process, that is how much of the tail its
// collector accounts for.
func collections(l *queryLoad, start time.Time) (cycles int, slowNearGC float64) {
	var st debug.GCStats
	debug.ReadGCStats(&st)
	var ends []time.Time
	for _, e := range st.PauseEnd { // the newest first, one per cycle
		if e.Before(start) {
			break
		}
		ends = append(ends, e)
	}
	p99 := percentile(l.answerLat, 0.99)
	slow, near := 0, 0
	for i, o := range l.outcome {
		if o.kind != 'a' || o.lat < p99 {
			continue
		}
		slow++
		from, to := l.sentAt[i], l.sentAt[i].Add(o.lat)
		if slices.ContainsFunc(ends, func(e time.Time) bool { return !e.Before(from) && !e.Add(-gcWindow).After(to) }) {
			near++
		}
	}
	if slow > 0 {
		slowNearGC = float64(near) / float64(slow)
	}
	return len(ends), slowNearGC
}

// queryOutcome is how one query ended: kind 'a' answer, 'b' busy, 'e'
// error, 0 no reply; lat is the time to the reply.
type queryOutcome struct {
	kind byte
	lat  time.Duration
}

// sendQueries sends embed queries of the test images on subject open-loop
// at rate per second for d (a late sender catches up in bursts, as real
// clients do not wait for each other), then waits up to timeout for the
// last replies. Each query has its own reply subject, so that every reply
// is matched to its query.
func sendQueries(ctx context.Context, nc *nats.Conn, subject string, test *dataset.Images, rate float64, d, timeout time.Duration, name string) (*queryLoad, error) {
	total := int(rate * d.Seconds())
	sentAt := make([]time.Time, total)
	var mu sync.Mutex
	gotAt := make([]time.Time, total)
	kind := make([]byte, total) // 'a' answer, 'b' busy, 'e' error
	var replies atomic.Int64
	prefix := nats.NewInbox() + "."
	sub, err := nc.Subscribe(prefix+"*", func(m *nats.Msg) {
		now := time.Now()
		i, err := strconv.Atoi(strings.TrimPrefix(m.Subject, prefix))
		if err != nil || i < 0 || i >= total {
			return
		}
		k := byte('a')
		if code := m.Header.Get(micro.ErrorCodeHeader); code != "" {
			k = 'e'
			if code == "503" && strings.HasPrefix(m.Header.Get(micro.ErrorHeader), "busy:") {
				k = 'b'
			}
		}
		mu.Lock()
		if gotAt[i].IsZero() {
			gotAt[i], kind[i] = now, k
			replies.Add(1)
		}
		mu.Unlock()
	})
	if err != nil {
		return nil, err
	}
	defer sub.Unsubscribe()
	if err := sub.SetPendingLimits(-1, -1); err != nil {
		return nil, err
	}
	reqs := make([]*nats.Msg, test.N)
	start := time.Now()
	for i := range total {
		due := start.Add(time.Duration(float64(i) / rate * float64(time.Second)))
		if wait := time.Until(due); wait > 0 {
			time.Sleep(wait)
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		j := i % test.N
		if reqs[j] == nil {
			reqs[j] = imageMsg(subject, test, j)
		}
		m := &nats.Msg{Subject: subject, Reply: prefix + strconv.Itoa(i), Header: reqs[j].Header, Data: reqs[j].Data}
		mu.Lock()
		sentAt[i] = time.Now()
		mu.Unlock()
		if err := nc.PublishMsg(m); err != nil {
			return nil, err
		}
		if i%256 == 0 {
			showProgress("%s: %d/%d queries, %d replies", name, i, total, replies.Load())
		}
	}
	l := &queryLoad{sent: total, rate: float64(total) / time.Since(start).Seconds()}
	if err := nc.Flush(); err != nil {
		return nil, err
	}
	deadline := time.Now().Add(timeout)
	for replies.Load() < int64(total) && time.Now().Before(deadline) {
		if err := wait(ctx, 5*time.Millisecond); err != nil {
			return nil, err
		}
	}
	mu.Lock()
	defer mu.Unlock()
	l.sentAt = sentAt
	l.outcome = make([]queryOutcome, total)
	for i := range total {
		lat := gotAt[i].Sub(sentAt[i])
		if !gotAt[i].IsZero() {
			l.outcome[i] = queryOutcome{kind[i], lat}
		}
		switch {
		case gotAt[i].IsZero() || lat > timeout:
			l.timeouts++
		case kind[i] == 'a':
			l.answered++
			l.answerLat = append(l.answerLat, lat)
		case kind[i] == 'b':
			l.busy++
			l.busyLat = append(l.busyLat, lat)
		default:
			l.errors++
		}
	}
	return l, nil
}

// formatOverheads lists per-round overheads, in run order, as
// comma-separated fractions.
func formatOverheads(xs []float64) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = fmt.Sprintf("%.3f", x)
	}
	return strings.Join(s, ",")
}

// median returns the median of xs, which is not empty.
func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// percentile returns the q-quantile of xs (nearest rank); 0 for none.
func percentile(xs []time.Duration, q float64) time.Duration {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[min(int(q*float64(len(s))), len(s)-1)]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
