package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"gopkg.in/yaml.v3"

	"github.com/smtd/smtd/config"
	"github.com/smtd/smtd/daemon"
	"github.com/smtd/smtd/internal/disk"
	"github.com/smtd/smtd/internal/progress"
	"github.com/smtd/smtd/record"
)

// Faults measures the daemon's delivery guarantees under faults. The
// daemon runs as child processes of the smtd binary (`smtd run --config
// FILE`) against a NATS server started in this process, so that either can
// be killed independently, with two image pipelines fed the same messages:
// "core" with core-NATS outputs and "js" with the JetStream output option.
// Each scenario replays a recorded stream (repeated to -messages messages,
// each labelled with its index through Smtd-Label, which outputs carry
// back) while it injects its fault:
//
//   - kill9: SIGKILL the daemon at -kills random points (seeded by -seed)
//     of the stream and restart it each time;
//   - nats_restart: stop the NATS server mid-stream for -down and start it
//     again on the same port and store;
//   - stream_delete: delete both input streams mid-stream (on_reset:
//     restart); what they held but was not yet learned is lost by
//     definition, and everything published afterwards must be learned;
//   - full_disk: the daemon's embedded server on a small tmpfs, filled up
//     mid-stream and freed after -full (skipped if mount fails: it needs
//     root);
//   - corrupt_checkpoint: stop the daemon mid-stream, flip a byte in the
//     middle of each pipeline's newest checkpoint file (the object store
//     copy is turned off), restart.
//
// For each scenario S it prints, for the core pipeline (faults_S_*) and for
// the JetStream one (faults_S_jetstream_*):
//
//   - in: messages stored in the input stream (acknowledged to the
//     publisher, deduplicated by Nats-Msg-Id);
//   - applied: the final `learned` counter, which continues from the
//     restored checkpoint, so it counts each application in the final
//     model's history; model_samples is the same count taken from the model
//     itself (patches merged into the whitening moments / patches per image);
//   - applied_twice: applied − the distinct messages applied, which are the
//     sequences 1..last_seq of the input stream (JetStream delivers a
//     stream in order and the daemon applies every valid message), plus,
//     after a stream deletion, the distinct labels of the deleted stream
//     instance that have an output;
//   - lost: in − distinct messages applied; lost_reported is the daemon's
//     own `lost` counter;
//   - published: outputs seen (core: by a subscriber of this process;
//     jetstream: messages in the output stream); duplicate_outputs:
//     published − distinct labels among them; missing_outputs: distinct
//     messages applied that have no output seen.
//
// plus faults_S_seconds (wall time), faults_S_events_<reason> (events on
// <prefix>.events.errors) and lines that say what the fault did: among them
// faults_corrupt_checkpoint_expected_duplicate_outputs, the core outputs
// that restoring the newest good checkpoint publishes again, and
// faults_S_jetstream_unreadable_outputs, messages the output stream counts
// but cannot return (printed only when there are some).
func Faults(ctx context.Context, w io.Writer, args []string) error {
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("bench faults: %w", err)
	}
	return runFaults(ctx, w, args, func(path string) *exec.Cmd {
		return exec.Command(exe, "run", "--config", path)
	})
}

// daemonCommand returns the command that runs a daemon with the config
// file at path (not yet started).
type daemonCommand func(path string) *exec.Cmd

// faultScenarios are the scenarios of Faults, in the order they run.
var faultScenarios = []struct {
	name string
	run  func(r *faultRun, ctx context.Context) error
}{
	{"kill9", (*faultRun).kill9},
	{"nats_restart", (*faultRun).natsRestart},
	{"stream_delete", (*faultRun).streamDelete},
	{"full_disk", (*faultRun).fullDisk},
	{"corrupt_checkpoint", (*faultRun).corruptCheckpoint},
}

// faultFlags are the flags of Faults.
type faultFlags struct {
	stream    string
	messages  int
	kills     int
	seed      uint64
	rate      float64
	every     int64
	atoms     int
	dim       int
	batch     int
	down      time.Duration
	full      time.Duration
	diskMiB   int
	timeout   time.Duration
	keep      bool
	scenarios string
}

func runFaults(ctx context.Context, w io.Writer, args []string, cmd daemonCommand) error {
	var f faultFlags
	fs := flag.NewFlagSet("bench faults", flag.ContinueOnError)
	fs.StringVar(&f.stream, "stream", "testdata/streams/mnist-train-1000.smtdrec", "recorded image stream `file` (smtd record), repeated to -messages")
	fs.IntVar(&f.messages, "messages", 3000, "messages replayed per scenario (to each pipeline)")
	fs.IntVar(&f.kills, "kills", 3, "kill9: SIGKILLs per run")
	fs.Uint64Var(&f.seed, "seed", 1, "seed of the kill points")
	fs.Float64Var(&f.rate, "rate", 400, "messages published per second (0: as fast as the server takes them)")
	fs.Int64Var(&f.every, "every", 250, "checkpoint.every_samples of the daemon")
	fs.IntVar(&f.atoms, "k", 32, "k-means atoms of each pipeline")
	fs.IntVar(&f.dim, "dim", 8, "SMT dimension of each pipeline")
	fs.IntVar(&f.batch, "batch", 20, "minibatch size")
	fs.DurationVar(&f.down, "down", 2*time.Second, "nats_restart: how long the server is down")
	fs.DurationVar(&f.full, "full", 3*time.Second, "full_disk: how long the disk stays full")
	fs.IntVar(&f.diskMiB, "disk", 64, "full_disk: tmpfs size in MiB")
	fs.DurationVar(&f.timeout, "timeout", 5*time.Minute, "longest wait for one stage of a scenario")
	fs.BoolVar(&f.keep, "keep", false, "keep each scenario's directory (config, daemon.log, data, outputs.txt: the output stream by sequence)")
	fs.StringVar(&f.scenarios, "scenarios", "kill9,nats_restart,stream_delete,full_disk,corrupt_checkpoint", "comma-separated scenarios to run")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if f.messages < 10 {
		return errors.New("bench faults: -messages must be at least 10")
	}
	msgs, err := record.ReadFile(f.stream)
	if err != nil {
		return fmt.Errorf("bench faults: %w", err)
	}
	if len(msgs) == 0 {
		return fmt.Errorf("bench faults: %s holds no messages", f.stream)
	}
	stream := make([]*record.Message, f.messages)
	for i := range stream {
		stream[i] = msgs[i%len(msgs)]
	}
	want := strings.Split(f.scenarios, ",")
	known := map[string]bool{}
	for _, sc := range faultScenarios {
		known[sc.name] = true
	}
	for _, name := range want {
		if !known[name] {
			return fmt.Errorf("bench faults: unknown scenario %q", name)
		}
	}

	writeMachine(w)
	fmt.Fprintf(w, "machine_nproc: %d\n", runtime.NumCPU())
	fmt.Fprintf(w, "faults_messages: %d\n", f.messages)
	fmt.Fprintf(w, "faults_stream: %s\n", filepath.Base(f.stream))
	fmt.Fprintf(w, "faults_seed: %d\n", f.seed)
	for _, sc := range faultScenarios {
		if !slices.Contains(want, sc.name) {
			continue
		}
		r, err := newFaultRun(sc.name, &f, stream, cmd)
		if err != nil {
			return err
		}
		start := time.Now()
		err = sc.run(r, ctx)
		if errors.Is(err, errSkipped) {
			fmt.Fprintf(w, "faults_%s_skipped: 1\n", sc.name)
			r.close(true)
			continue
		}
		if err == nil {
			err = r.report(ctx, w, time.Since(start))
		}
		r.close(err == nil)
		if err != nil {
			return fmt.Errorf("bench faults: %s: %w (daemon log: %s)", sc.name, err, r.logPath)
		}
	}
	return nil
}

// errSkipped says a scenario cannot run on this machine.
var errSkipped = errors.New("skipped")

// faultPipelines are the names of the two pipelines, with the output
// transport of each.
var faultPipelines = []struct{ name, transport string }{
	{"core", config.Core},
	{"js", config.JetStream},
}

// faultRun is one scenario: a NATS server (unless the daemon embeds it),
// the daemon's config and process, a publisher and the outputs seen.
type faultRun struct {
	name   string
	flags  *faultFlags
	stream []*record.Message
	cmd    daemonCommand

	dir     string
	logPath string
	log     *os.File
	port    int
	store   string
	ns      *server.Server
	nc      *nats.Conn
	js      jetstream.JetStream
	cfg     *config.Config
	cfgPath string
	child   *exec.Cmd
	pub     *publisher
	outputs *outputSet
	events  *eventCounts
	extra   []string // scenario lines, "name: value"
	mount   string   // a tmpfs to unmount (full_disk)

	// split is the number of messages published before the input streams
	// were deleted (stream_delete), 0 otherwise.
	split int
	// final is the status just before the daemon was stopped.
	final daemon.Status
}

func newFaultRun(name string, f *faultFlags, stream []*record.Message, cmd daemonCommand) (*faultRun, error) {
	dir, err := os.MkdirTemp("", "smtd-faults-"+name+"-")
	if err != nil {
		return nil, err
	}
	r := &faultRun{name: name, flags: f, stream: stream, cmd: cmd, dir: dir,
		logPath: filepath.Join(dir, "daemon.log"), store: filepath.Join(dir, "nats"),
		outputs: &outputSet{count: map[int]int{}}, events: &eventCounts{n: map[string]int{}}}
	if r.log, err = os.Create(r.logPath); err != nil {
		return nil, err
	}
	if r.port, err = freePort(); err != nil {
		return nil, err
	}
	r.cfg = config.Default()
	r.cfg.DataDir = filepath.Join(dir, "data")
	r.cfg.NATS.Listen = "127.0.0.1:-1"
	r.cfg.Log.Level = "info"
	r.cfg.Log.Format = "console"
	r.cfg.Service.Name = "smtd-faults"
	r.cfg.Checkpoint.EverySamples = f.every
	r.cfg.Pipelines = nil
	for _, fp := range faultPipelines {
		p := config.DefaultPipeline(config.Image, fp.name)
		p.Input.Subject = "faults." + fp.name
		p.Output.Subject = "faults." + fp.name + ".out"
		p.Output.Transport = fp.transport
		p.KMeans.Atoms = f.atoms
		p.SMT.Dim = f.dim
		p.Batch.Size = f.batch
		// Never frozen, so the whitening moments count every patch the
		// model learned from (model_samples).
		p.Whiten.FreezeAfter = 0
		r.cfg.Pipelines = append(r.cfg.Pipelines, p)
	}
	r.cfgPath = filepath.Join(dir, "smtd.yaml")
	return r, nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// close stops whatever still runs and removes the scenario's directory
// unless -keep or the scenario failed.
func (r *faultRun) close(ok bool) {
	if r.child != nil {
		r.child.Process.Kill()
		r.child.Wait()
		r.child = nil
	}
	if r.nc != nil {
		r.nc.Close()
	}
	if r.ns != nil {
		r.ns.Shutdown()
		r.ns.WaitForShutdown()
	}
	if r.mount != "" {
		exec.Command("umount", "-l", r.mount).Run()
	}
	r.log.Close()
	if ok && !r.flags.keep {
		os.RemoveAll(r.dir)
	}
}

// startServer starts (or restarts) the NATS server on r.port with its
// store in r.store.
func (r *faultRun) startServer() error {
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: r.port, JetStream: true, StoreDir: r.store, NoSigs: true, NoLog: true})
	if err != nil {
		return err
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		s.Shutdown()
		return errors.New("NATS server did not start")
	}
	r.ns = s
	return nil
}

// connect connects this process to url, reconnecting for ever, and
// subscribes to the core outputs and the error events.
func (r *faultRun) connect(url string) error {
	var err error
	r.nc, err = nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond),
		nats.RetryOnFailedConnect(true), nats.Name("smtd bench faults"))
	if err != nil {
		return err
	}
	if r.js, err = jetstream.New(r.nc); err != nil {
		return err
	}
	sub, err := r.nc.Subscribe("faults.core.out", r.outputs.add)
	if err != nil {
		return err
	}
	sub.SetPendingLimits(-1, -1)
	if _, err := r.nc.Subscribe(r.cfg.Subject("events.errors"), r.events.add); err != nil {
		return err
	}
	return nil
}

// external sets the run up on a NATS server of this process.
func (r *faultRun) external() error {
	if err := r.startServer(); err != nil {
		return err
	}
	r.cfg.NATS.URL = r.ns.ClientURL()
	return r.connect(r.ns.ClientURL())
}

// startDaemon writes the config and starts a daemon process, and waits
// until it answers on its status subject.
func (r *faultRun) startDaemon(ctx context.Context) error {
	data, err := yaml.Marshal(r.cfg)
	if err != nil {
		return err
	}
	if err := os.WriteFile(r.cfgPath, data, 0o644); err != nil {
		return err
	}
	c := r.cmd(r.cfgPath)
	c.Stdout, c.Stderr = r.log, r.log
	if err := c.Start(); err != nil {
		return err
	}
	r.child = c
	return r.waitFor(ctx, "the daemon answers", func() (bool, string) {
		_, err := r.status()
		return err == nil, ""
	})
}

// signalDaemon sends sig to the daemon and waits for it to exit.
func (r *faultRun) signalDaemon(sig syscall.Signal) error {
	if err := r.child.Process.Signal(sig); err != nil {
		return err
	}
	err := r.child.Wait()
	r.child = nil
	var exit *exec.ExitError
	if sig == syscall.SIGKILL && errors.As(err, &exit) {
		return nil
	}
	return err
}

func (r *faultRun) status() (daemon.Status, error) {
	return requestStatus(r.nc, r.cfg.Subject("status"), 2*time.Second)
}

// learned returns the least last applied sequence over the pipelines.
func (r *faultRun) learned() uint64 {
	st, err := r.status()
	if err != nil || len(st.Pipelines) != len(faultPipelines) {
		return 0
	}
	least := st.Pipelines[0].LastSeq
	for _, p := range st.Pipelines[1:] {
		least = min(least, p.LastSeq)
	}
	return least
}

// waitLearned waits until every pipeline has applied its first n messages.
func (r *faultRun) waitLearned(ctx context.Context, n uint64) error {
	return r.waitFor(ctx, fmt.Sprintf("%d messages learned", n), func() (bool, string) {
		got := r.learned()
		return got >= n, fmt.Sprintf("learned %d/%d, published %d", got, n, r.pub.acked.Load())
	})
}

// waitFor polls cond until it holds, for at most -timeout, showing its
// progress on a terminal.
func (r *faultRun) waitFor(ctx context.Context, what string, cond func() (bool, string)) error {
	deadline := time.Now().Add(r.flags.timeout)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		ok, progress := cond()
		if progress != "" {
			showProgress("faults %s: %s", r.name, progress)
		}
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("waiting %v for %s: %s", r.flags.timeout, what, progress)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}

// showProgress rewrites the progress line when standard error is a
// terminal.
var showProgress = progress.Show

// finish waits until the publisher is done and both pipelines have applied
// their whole input stream and the core outputs stop arriving, then takes
// the final status and stops the daemon.
func (r *faultRun) finish(ctx context.Context) error {
	if err := r.waitFor(ctx, "all messages published", func() (bool, string) {
		return r.pub.finished(), fmt.Sprintf("published %d/%d, learned %d", r.pub.acked.Load(), len(r.stream), r.learned())
	}); err != nil {
		return err
	}
	if err := r.pub.err(); err != nil {
		return err
	}
	if err := r.waitFor(ctx, "both input streams learned", func() (bool, string) {
		st, err := r.status()
		if err != nil || len(st.Pipelines) != len(faultPipelines) {
			return false, "waiting for the daemon"
		}
		done, progress := true, ""
		for i, p := range st.Pipelines {
			s, err := r.js.Stream(ctx, r.cfg.Pipelines[i].StreamName())
			if err != nil {
				return false, err.Error()
			}
			last := s.CachedInfo().State.LastSeq
			done = done && p.LastSeq == last && p.Backlog == 0
			progress += fmt.Sprintf("%s %d/%d ", p.Name, p.LastSeq, last)
		}
		return done, progress
	}); err != nil {
		return err
	}
	// Core outputs of the last batch may still be on their way.
	seen, quiet := r.outputs.total(), 0
	r.waitFor(ctx, "core outputs settle", func() (bool, string) {
		if now := r.outputs.total(); now != seen {
			seen, quiet = now, 0
		} else {
			quiet++
		}
		return quiet >= 10, ""
	})
	st, err := r.status()
	if err != nil {
		return err
	}
	r.final = st
	showProgress("")
	return nil
}

// report prints the scenario's lines. It reads the JetStream output
// stream while the daemon still runs (full_disk: its server), then stops
// the daemon.
func (r *faultRun) report(ctx context.Context, w io.Writer, wall time.Duration) error {
	jsLabels, jsMsgs, unreadable, err := r.outputStream(ctx)
	if err != nil {
		return err
	}
	if unreadable > 0 {
		r.extra = append(r.extra, fmt.Sprintf("jetstream_unreadable_outputs: %d", unreadable))
	}
	if r.child != nil {
		if err := r.signalDaemon(syscall.SIGTERM); err != nil {
			return fmt.Errorf("stopping the daemon: %w", err)
		}
	}
	acked := r.pub.acked.Load()
	for i, fp := range faultPipelines {
		st := r.final.Pipelines[i]
		if st.Name != fp.name {
			return fmt.Errorf("status lists pipeline %s where %s was expected", st.Name, fp.name)
		}
		labels, published := r.outputs.snapshot(), r.outputs.total()
		prefix := "faults_" + r.name + "_"
		if fp.transport == config.JetStream {
			labels, published = jsLabels, jsMsgs
			prefix += "jetstream_"
		}
		// Distinct messages applied: sequences 1..last_seq of the final
		// stream instance, plus those of a deleted instance with an output.
		distinct := int64(st.LastSeq)
		for l := range labels {
			if l <= r.split {
				distinct++
			}
		}
		seen := 0
		for l := range labels {
			if l <= r.split || l-r.split <= int(st.LastSeq) {
				seen++
			}
		}
		p := r.cfg.Pipelines[i]
		samples, _ := st.Model["whitening_patches"].(float64)
		line := func(name string, v any) { fmt.Fprintf(w, "%s%s: %v\n", prefix, name, v) }
		line("in", acked)
		line("applied", st.Learned)
		line("model_samples", int64(samples)/int64(p.PatchesPerImage()))
		line("applied_twice", st.Learned-distinct)
		line("lost", acked-distinct)
		line("lost_reported", st.Lost)
		line("published", published)
		readable := published
		if fp.transport == config.JetStream {
			readable -= unreadable
		}
		line("duplicate_outputs", readable-len(labels))
		line("missing_outputs", distinct-int64(seen))
	}
	prefix := "faults_" + r.name + "_"
	for _, l := range r.extra {
		fmt.Fprintf(w, "%s%s\n", prefix, l)
	}
	for _, reason := range r.events.reasons() {
		fmt.Fprintf(w, "%sevents_%s: %d\n", prefix, reason, r.events.get(reason))
	}
	fmt.Fprintf(w, "%sseconds: %.1f\n", prefix, wall.Seconds())
	return nil
}

// outputStream reads the JetStream pipeline's output stream message by
// message and returns the labels of those it could read, how many it
// holds, and how many of those could not be read (the server's store lost
// their data).
func (r *faultRun) outputStream(ctx context.Context) (labels map[int]int, msgs, unreadable int, err error) {
	s, err := r.js.Stream(ctx, r.cfg.Pipelines[1].OutputStreamName())
	if err != nil {
		return nil, 0, 0, err
	}
	st := s.CachedInfo().State
	// With -keep, an index of the stream: sequence, label, Nats-Msg-Id.
	var index io.Writer = io.Discard
	if r.flags.keep {
		f, err := os.Create(filepath.Join(r.dir, "outputs.txt"))
		if err != nil {
			return nil, 0, 0, err
		}
		defer f.Close()
		index = f
		fmt.Fprintf(index, "# %s: %d messages, sequences %d-%d, %d deleted\n", s.CachedInfo().Config.Name, st.Msgs, st.FirstSeq, st.LastSeq, st.NumDeleted)
	}
	labels = map[int]int{}
	for seq := st.FirstSeq; seq <= st.LastSeq && st.Msgs > 0; seq++ {
		// Nothing deletes outputs, so a message the state counts that
		// cannot be read is lost from the store.
		m, err := s.GetMsg(ctx, seq)
		if err != nil {
			fmt.Fprintf(index, "%d unreadable: %v\n", seq, err)
			unreadable++
			continue
		}
		fmt.Fprintf(index, "%d %s %s\n", seq, m.Header.Get(daemon.HeaderLabel), m.Header.Get(jetstream.MsgIDHeader))
		if l, err := strconv.Atoi(m.Header.Get(daemon.HeaderLabel)); err == nil {
			labels[l]++
		}
	}
	return labels, int(st.Msgs), max(0, unreadable-int(st.NumDeleted)), nil
}

// label returns message i's label: its index in the replay, from 1.
func label(i int) string { return strconv.Itoa(i + 1) }

// outputSet counts the core outputs by label.
type outputSet struct {
	mu    sync.Mutex
	count map[int]int
	n     int
}

func (o *outputSet) add(m *nats.Msg) {
	l, err := strconv.Atoi(m.Header.Get(daemon.HeaderLabel))
	o.mu.Lock()
	defer o.mu.Unlock()
	o.n++
	if err == nil {
		o.count[l]++
	}
}

func (o *outputSet) total() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.n
}

func (o *outputSet) snapshot() map[int]int {
	o.mu.Lock()
	defer o.mu.Unlock()
	c := make(map[int]int, len(o.count))
	for k, v := range o.count {
		c[k] = v
	}
	return c
}

// eventCounts counts the events on <prefix>.events.errors by reason.
type eventCounts struct {
	mu sync.Mutex
	n  map[string]int
}

func (e *eventCounts) add(m *nats.Msg) {
	var ev struct {
		Reason string `json:"reason"`
	}
	if json.Unmarshal(m.Data, &ev) != nil || ev.Reason == "" {
		return
	}
	e.mu.Lock()
	e.n[ev.Reason]++
	e.mu.Unlock()
}

func (e *eventCounts) get(reason string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.n[reason]
}

func (e *eventCounts) reasons() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	var rs []string
	for r := range e.n {
		rs = append(rs, r)
	}
	slices.Sort(rs)
	return rs
}

// publisher publishes the stream to every pipeline's input subject, each
// message with its label and a Nats-Msg-Id, so that one published again
// after a lost acknowledgement is stored once. It retries a message until
// the server stores it.
type publisher struct {
	js      jetstream.JetStream
	msgs    []*record.Message
	inputs  []string
	rate    float64
	mu      sync.Mutex // held while a message is published; pause takes it
	acked   atomic.Int64
	retries atomic.Int64
	done    chan struct{}
	failure error
}

// startPublisher starts publishing r.stream in a goroutine of its own,
// which ends when the stream is published or ctx is cancelled.
func (r *faultRun) startPublisher(ctx context.Context) {
	p := &publisher{js: r.js, msgs: r.stream, rate: r.flags.rate, done: make(chan struct{})}
	for _, pc := range r.cfg.Pipelines {
		p.inputs = append(p.inputs, pc.Input.Subject)
	}
	r.pub = p
	go func() {
		defer close(p.done)
		p.failure = p.run(ctx)
	}()
}

func (p *publisher) run(ctx context.Context) error {
	start := time.Now()
	for i, m := range p.msgs {
		if p.rate > 0 {
			due := start.Add(time.Duration(float64(i) / p.rate * float64(time.Second)))
			if wait := time.Until(due); wait > 0 {
				select {
				case <-time.After(wait):
				case <-ctx.Done():
					return ctx.Err()
				}
			}
		}
		p.mu.Lock()
		for _, subject := range p.inputs {
			h := nats.Header{}
			for k, v := range m.Header {
				h[k] = slices.Clone(v)
			}
			h.Set(daemon.HeaderLabel, label(i))
			msg := &nats.Msg{Subject: subject, Header: h, Data: m.Data}
			for {
				pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
				_, err := p.js.PublishMsg(pctx, msg, jetstream.WithMsgID("m"+label(i)))
				cancel()
				if err == nil {
					break
				}
				if ctx.Err() != nil {
					p.mu.Unlock()
					return ctx.Err()
				}
				p.retries.Add(1)
				time.Sleep(50 * time.Millisecond)
			}
		}
		p.acked.Add(1)
		p.mu.Unlock()
	}
	return nil
}

// pause stops the publisher between two messages and returns how many it
// has published; resume lets it go on.
func (p *publisher) pause() int { p.mu.Lock(); return int(p.acked.Load()) }
func (p *publisher) resume()    { p.mu.Unlock() }

func (p *publisher) finished() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

func (p *publisher) err() error {
	<-p.done
	return p.failure
}

// at returns the message index at fraction frac of the stream.
func (r *faultRun) at(frac float64) uint64 { return uint64(frac * float64(len(r.stream))) }

// kill9 kills the daemon with SIGKILL at -kills random points of the
// stream, restarting it each time.
func (r *faultRun) kill9(ctx context.Context) error {
	if err := r.external(); err != nil {
		return err
	}
	if err := r.startDaemon(ctx); err != nil {
		return err
	}
	r.startPublisher(ctx)
	rng := rand.New(rand.NewPCG(r.flags.seed, 9))
	points := make([]float64, r.flags.kills)
	for i := range points {
		points[i] = 0.1 + 0.8*rng.Float64()
	}
	slices.Sort(points)
	for _, frac := range points {
		if err := r.waitLearned(ctx, r.at(frac)); err != nil {
			return err
		}
		time.Sleep(time.Duration(rng.IntN(20)) * time.Millisecond)
		if err := r.signalDaemon(syscall.SIGKILL); err != nil {
			return err
		}
		if err := r.startDaemon(ctx); err != nil {
			return err
		}
	}
	r.extra = append(r.extra, fmt.Sprintf("kills: %d", len(points)))
	return r.finish(ctx)
}

// natsRestart stops the NATS server for -down once a third of the stream
// is learned, and starts it again on the same port and store.
func (r *faultRun) natsRestart(ctx context.Context) error {
	if err := r.external(); err != nil {
		return err
	}
	if err := r.startDaemon(ctx); err != nil {
		return err
	}
	r.startPublisher(ctx)
	if err := r.waitLearned(ctx, r.at(0.3)); err != nil {
		return err
	}
	r.ns.Shutdown()
	r.ns.WaitForShutdown()
	r.ns = nil
	time.Sleep(r.flags.down)
	if err := r.startServer(); err != nil {
		return err
	}
	r.extra = append(r.extra, fmt.Sprintf("down_seconds: %.1f", r.flags.down.Seconds()),
		fmt.Sprintf("publish_retries: %d", r.pub.retries.Load()))
	return r.finish(ctx)
}

// streamDelete deletes both input streams once a third of the stream is
// learned, with the publisher paused; the daemon (on_reset: restart)
// creates them again and learns what is published afterwards.
func (r *faultRun) streamDelete(ctx context.Context) error {
	if err := r.external(); err != nil {
		return err
	}
	if err := r.startDaemon(ctx); err != nil {
		return err
	}
	r.startPublisher(ctx)
	if err := r.waitLearned(ctx, r.at(0.3)); err != nil {
		return err
	}
	r.split = r.pub.pause()
	learned := r.learned()
	var err error
	for _, p := range r.cfg.Pipelines {
		if err = r.js.DeleteStream(ctx, p.StreamName()); err != nil {
			break
		}
	}
	r.pub.resume()
	if err != nil {
		return err
	}
	r.extra = append(r.extra, fmt.Sprintf("published_before_delete: %d", r.split),
		fmt.Sprintf("learned_before_delete: %d", learned))
	if err := r.finish(ctx); err != nil {
		return err
	}
	// What was published after the deletion is in the new instances.
	after := len(r.stream) - r.split
	for i, p := range r.final.Pipelines {
		r.extra = append(r.extra, fmt.Sprintf("%s_lost_after_delete: %d", faultPipelines[i].name, after-int(p.LastSeq)))
	}
	return nil
}

// fullDisk runs the daemon with its embedded server and data on a small
// tmpfs, fills the tmpfs once a third of the stream is learned, and frees
// it after -full.
func (r *faultRun) fullDisk(ctx context.Context) error {
	mnt := filepath.Join(r.dir, "tmpfs")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		return err
	}
	size := fmt.Sprintf("size=%dm", r.flags.diskMiB)
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", size, "tmpfs", mnt).CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "bench faults: full_disk skipped: cannot mount a tmpfs (%v: %s)\n", err, bytes.TrimSpace(out))
		return errSkipped
	}
	r.mount = mnt // unmounted by close, once the daemon is stopped
	r.cfg.DataDir = filepath.Join(mnt, "data")
	r.cfg.NATS.Listen = fmt.Sprintf("127.0.0.1:%d", r.port)
	// Room for every stream (the output stream holds ~3.4 KB per output
	// at -dim 8), so that none discards old messages.
	r.cfg.NATS.StreamMaxBytes = int64(r.flags.diskMiB) << 20 / 5
	r.cfg.Checkpoint.ObjectStore = false
	if err := r.connect(fmt.Sprintf("nats://127.0.0.1:%d", r.port)); err != nil {
		return err
	}
	if err := r.startDaemon(ctx); err != nil {
		return err
	}
	r.startPublisher(ctx)
	if err := r.waitLearned(ctx, r.at(0.3)); err != nil {
		return err
	}
	filler := filepath.Join(mnt, "filler")
	f, err := os.Create(filler)
	if err != nil {
		return err
	}
	block := make([]byte, 64<<10)
	for disk.Free(mnt) > 512<<10 {
		if _, err := f.Write(block); err != nil {
			break
		}
	}
	f.Close()
	// The server notices a full store when it next writes: wait for the
	// daemon to report it (or give up after 20 s), then keep it full.
	disabled := false
	full := time.Now()
	for time.Since(full) < 20*time.Second && !disabled {
		st, err := r.status()
		disabled = err == nil && st.JetStream != ""
		time.Sleep(100 * time.Millisecond)
	}
	select {
	case <-time.After(r.flags.full):
	case <-ctx.Done():
		return ctx.Err()
	}
	if err := os.Remove(filler); err != nil {
		return err
	}
	r.extra = append(r.extra, fmt.Sprintf("jetstream_disabled: %d", b2i(disabled)),
		fmt.Sprintf("full_seconds: %.1f", r.flags.full.Seconds()))
	if err := r.finish(ctx); err != nil {
		return err
	}
	r.extra = append(r.extra, fmt.Sprintf("publish_retries: %d", r.pub.retries.Load()))
	return nil
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// corruptCheckpoint stops the daemon once half the stream is learned,
// flips a byte in the middle of each pipeline's newest checkpoint file
// (the object store is off, so there is no other copy of it) and restarts.
func (r *faultRun) corruptCheckpoint(ctx context.Context) error {
	r.cfg.Checkpoint.ObjectStore = false
	if err := r.external(); err != nil {
		return err
	}
	if err := r.startDaemon(ctx); err != nil {
		return err
	}
	r.startPublisher(ctx)
	if err := r.waitLearned(ctx, r.at(0.5)); err != nil {
		return err
	}
	if err := r.signalDaemon(syscall.SIGTERM); err != nil {
		return fmt.Errorf("stopping the daemon: %w", err)
	}
	// Restoring the newest good checkpoint (the one before the corrupt
	// newest) publishes the core outputs between the two again.
	corrupted, republish := 0, uint64(0)
	for _, p := range r.cfg.Pipelines {
		files, _ := filepath.Glob(filepath.Join(r.cfg.DataDir, "checkpoints", p.Name, "*.ckpt"))
		files = slices.DeleteFunc(files, func(f string) bool { return strings.HasPrefix(filepath.Base(f), ".") })
		if len(files) < 2 {
			return fmt.Errorf("pipeline %s has %d checkpoint files, want at least 2", p.Name, len(files))
		}
		slices.Sort(files) // zero-padded versions: newest last
		newest, good := files[len(files)-1], files[len(files)-2]
		a, err := daemon.ReadCheckpoint(newest)
		if err != nil {
			return err
		}
		b, err := daemon.ReadCheckpoint(good)
		if err != nil {
			return err
		}
		if p.Output.Transport == config.Core {
			republish = a.LastSeq - b.LastSeq
		}
		data, err := os.ReadFile(newest)
		if err != nil {
			return err
		}
		data[len(data)/2] ^= 0xff
		if err := os.WriteFile(newest, data, 0o644); err != nil {
			return err
		}
		corrupted++
	}
	r.extra = append(r.extra, fmt.Sprintf("expected_duplicate_outputs: %d", republish))
	if err := r.startDaemon(ctx); err != nil {
		return err
	}
	r.extra = append(r.extra, fmt.Sprintf("checkpoints_corrupted: %d", corrupted))
	return r.finish(ctx)
}
