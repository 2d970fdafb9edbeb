package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"gopkg.in/yaml.v3"

	"github.com/smtd/smtd/config"
)

// snapshot is an immutable copy of a pipeline's model, for queries.
type snapshot struct {
	model   model
	version uint64
	cfg     config.Pipeline // the pipeline's config when the snapshot was taken
	// readers counts the goroutines that read model (pipeline.acquire).
	// Once the snapshot is replaced and has no readers, the pipeline
	// takes its memory for a later one (publishSnapshot).
	readers atomic.Int64
}

// release ends a read of the snapshot begun by pipeline.acquire.
func (s *snapshot) release() { s.readers.Add(-1) }

// acquire returns the pipeline's current snapshot, nil before the first,
// counted as read until its release: a goroutine other than the
// pipeline's own that reads a snapshot's model must hold it so. The
// count is checked against a replacement in between (the snapshot is
// then retired and may be written already): this goroutine's increment
// and the pipeline's swap and look at the count are ordered, so either
// the pipeline sees the reader or the reader sees the swap.
func (pl *pipeline) acquire() *snapshot {
	for {
		s := pl.snap.Load()
		if s == nil {
			return nil
		}
		s.readers.Add(1)
		if pl.snap.Load() == s {
			return s
		}
		s.release()
	}
}

// recycler is a model whose snapshots can take the memory of a retired
// snapshot's model (of the same model) instead of new memory. At K = 4096
// an image model's snapshot is 4 MB, published after every minibatch:
// about half of what the daemon allocated while learning and answering
// queries (`smtd bench throughput -k 4096`), and with it half of the
// garbage collection cycles that delay queries.
type recycler interface {
	// snapshotInto is snapshot, in the memory of retired (nil: new
	// memory).
	snapshotInto(retired model) model
}

// maxRetired bounds the replaced snapshots a pipeline keeps for their
// memory: one per query worker still reading an older one, and one
// free.
const maxRetired = 4

// counters are a pipeline's running totals, readable from any goroutine.
// Every message read is counted once: received = rejected + learned +
// notLearned once its batch is done. They are kept in checkpoints, so
// after a restart they continue from the checkpoint's values (messages
// applied after it are read, and counted, again).
type counters struct {
	// received counts messages read for the first time; redelivered,
	// messages delivered again that the model had already applied
	// (skipped).
	received, redelivered atomic.Int64
	// rejected counts invalid messages (by reason in byReason); learned,
	// the valid ones the model learned from; notLearned, valid ones of
	// batches a learner refused or that were rolled back.
	rejected, learned, notLearned atomic.Int64
	// published counts outputs published; rollbacks, batches rolled
	// back; lost, messages removed from the stream before they were
	// learned (purges, stream limits, resets).
	published, rollbacks, lost, checkpoints atomic.Int64
	lastSeq                                 atomic.Uint64
	// backlog is how many input messages wait (health: lagging).
	backlog  atomic.Uint64
	mu       sync.Mutex
	byReason map[string]int64
}

func (c *counters) reject(reason string) {
	c.rejected.Add(1)
	c.mu.Lock()
	if c.byReason == nil {
		c.byReason = map[string]int64{}
	}
	c.byReason[reason]++
	c.mu.Unlock()
}

// state returns the counters for a checkpoint.
func (c *counters) state() CounterState {
	s := CounterState{
		Received: c.received.Load(), Learned: c.learned.Load(), Rejected: c.rejected.Load(),
		Published: c.published.Load(), Redelivered: c.redelivered.Load(), Rollbacks: c.rollbacks.Load(),
		Checkpoints: c.checkpoints.Load(), NotLearned: c.notLearned.Load(), Lost: c.lost.Load(),
	}
	c.mu.Lock()
	s.ByReason = maps.Clone(c.byReason)
	c.mu.Unlock()
	return s
}

// restore sets the counters from a checkpoint.
func (c *counters) restore(s CounterState) {
	c.received.Store(s.Received)
	c.learned.Store(s.Learned)
	c.rejected.Store(s.Rejected)
	c.published.Store(s.Published)
	c.redelivered.Store(s.Redelivered)
	c.rollbacks.Store(s.Rollbacks)
	c.checkpoints.Store(s.Checkpoints)
	c.notLearned.Store(s.NotLearned)
	c.lost.Store(s.Lost)
	c.mu.Lock()
	c.byReason = maps.Clone(s.ByReason)
	c.mu.Unlock()
}

// Health of a pipeline, as smtd.status reports it, most severe first.
const (
	// HealthInputMissing: the input stream is gone or cannot be read.
	HealthInputMissing = "input_missing"
	// HealthDiverged: the last learning step left the model non-finite or
	// degenerate and was rolled back.
	HealthDiverged = "diverged"
	// HealthStalled: the learner refused the last stalledAfter batches.
	HealthStalled = "stalled"
	// HealthLagging: more than lagBatches batches wait in the input.
	HealthLagging = "lagging"
	// HealthOK: learning.
	HealthOK = "ok"
)

const (
	stalledAfter = 3
	lagBatches   = 100
)

// Health is a pipeline's health and why.
type Health struct {
	State  string `json:"state"`
	Reason string `json:"reason,omitempty"`
}

// tuneRequest hands a pipeline a new configuration whose differences are
// all live fields.
type tuneRequest struct {
	p    config.Pipeline
	ckpt config.Checkpoint
	done chan struct{}
}

// checkpointRequest asks a pipeline to checkpoint now.
type checkpointRequest struct {
	done chan checkpointResult
}

type checkpointResult struct {
	info *checkpointInfo
	err  error
}

// pipeline is one input subject, its model and its output. One goroutine
// (run) owns the model and everything below the mutex-free fields; other
// goroutines read snapshot and counters, and talk to it through channels.
type pipeline struct {
	d    *Daemon
	name string            // never changes; safe to read from any goroutine
	cfg  config.Pipeline   // owned by run
	ckpt config.Checkpoint // owned by run
	log  zerolog.Logger
	in   intake
	// stream is the instance of the JetStream stream read; zero on core
	// NATS.
	stream streamState
	// outBuf holds the payload of the last output published on core NATS,
	// whose memory the next one reuses: PublishMsg copies the payload
	// before it returns (JetStream's asynchronous publishes keep theirs
	// for retries, so they get new memory). Owned by whoever publishes:
	// out's goroutine while run runs one, run otherwise.
	outBuf []byte
	// out publishes outputs and acknowledges input behind the learner
	// while run runs; nil otherwise (outputs are then published inline).
	out *outputQueue

	// term is the ownership term in cluster mode (nil otherwise): run
	// writes, acknowledges and publishes only while its lease holds.
	term *term
	// lease is the pipeline's lease as this daemon last saw it (its own
	// while it owns the pipeline); nil when free or outside cluster mode.
	lease atomic.Pointer[Lease]
	// served is the checkpoint object a standby serves queries from.
	served string

	model model
	src   *rand.PCG // the model's only source of randomness
	// workVersions are, in worker mode, the encoded worker sections of
	// the model versions steps in flight may be coded with.
	workVersions map[uint64][]byte
	version      uint64
	samples      int64
	lastSeq      uint64

	sinceCkpt    int64
	lastCkptTime time.Time
	lastCkptSeq  uint64

	// refused counts the batches in a row a learner refused; diverged,
	// those rolled back; missing says why input cannot be read ("": it
	// can). With the last error of each they make the health.
	refused, diverged       int
	lastRefusal, lastDiverg string
	missing                 string
	goneSince               time.Time // when the input stream was found deleted
	gapAfter                uint64    // the sequence after which a delivery hole was last re-read
	health                  atomic.Pointer[Health]

	snap     atomic.Pointer[snapshot]
	retired  []*snapshot    // replaced snapshots, oldest first; written with model (publishSnapshot)
	gate     queryGate      // the queries waiting to be encoded, which learning gives way to
	learner  *learnerThread // runs batches below the daemon's priority while it serves queries; nil: never
	yield    time.Duration  // service.learn_yield
	yieldFor time.Duration  // what is left of yield in this batch
	stats    counters
	obs      *pipelineMetrics
	tune     chan tuneRequest
	ckptReq  chan checkpointRequest
	finished chan struct{}
}

func newPipeline(d *Daemon, p config.Pipeline) *pipeline {
	pl := &pipeline{
		d:        d,
		name:     p.Name,
		cfg:      p,
		ckpt:     d.cfg.Checkpoint,
		log:      d.log.With().Str("pipeline", p.Name).Logger(),
		obs:      newPipelineMetrics(p.Name),
		tune:     make(chan tuneRequest),
		ckptReq:  make(chan checkpointRequest),
		finished: make(chan struct{}),
		yield:    d.cfg.Service.LearnYield,
	}
	pl.reset()
	return pl
}

// reset gives the pipeline a fresh model, random source and counters, as
// before its first message: a cluster owner starts every term from this
// and the newest checkpoint, never from what it held before.
func (pl *pipeline) reset() {
	pl.src = rand.NewPCG(pl.cfg.Seed, 0x736d7464) // "smtd"
	pl.model = newModel(&pl.cfg, pl.src)
	pl.model.tune(&pl.cfg)
	pl.version, pl.samples, pl.lastSeq = 0, 0, 0
	pl.workVersions = nil
	pl.sinceCkpt, pl.lastCkptSeq = 0, 0
	pl.refused, pl.diverged, pl.missing, pl.gapAfter = 0, 0, "", 0
	pl.goneSince = time.Time{}
	pl.stats.restore(CounterState{})
	pl.stats.lastSeq.Store(0)
	pl.stats.backlog.Store(0)
	pl.health.Store(&Health{State: HealthOK})
}

// fenced reports whether the pipeline's cluster lease has run out: its
// owner must then not checkpoint, acknowledge or publish.
func (pl *pipeline) fenced() bool { return pl.term != nil && !pl.term.valid() }

// restore loads c into the pipeline. Nothing changes unless all of it
// fits: model sections, random source, and a config of the same shape.
func (pl *pipeline) restore(c *Checkpoint) error {
	if c.Pipeline != pl.cfg.Name || c.Modality != string(pl.cfg.Modality) {
		return fmt.Errorf("%w: it is of pipeline %s (%s), not %s", ErrCheckpoint, c.Pipeline, c.Modality, pl.cfg.String())
	}
	var old config.Pipeline
	if err := yaml.Unmarshal(c.Config, &old); err != nil {
		return fmt.Errorf("%w: its config: %v", ErrCheckpoint, err)
	}
	if changed := shapeChanges(&old, &pl.cfg); len(changed) > 0 {
		return fmt.Errorf("%w: trained with a different model shape (%v); move the checkpoint away or restore those settings", ErrCheckpoint, changed)
	}
	var src rand.PCG
	if err := src.UnmarshalBinary(c.RNG); err != nil {
		return fmt.Errorf("%w: random source: %v", ErrCheckpoint, err)
	}
	m := newModel(&pl.cfg, pl.src)
	if err := m.restore(c.Sections); err != nil {
		return fmt.Errorf("%w: %v", ErrCheckpoint, err)
	}
	if err := m.check(); err != nil {
		return fmt.Errorf("%w: its model is degenerate: %v", ErrCheckpoint, err)
	}
	m.tune(&pl.cfg)
	var work map[uint64][]byte
	if b, err := findSection(c.Sections, workVersionsSection); err == nil {
		if work, err = decodeWorkVersions(b); err != nil {
			return fmt.Errorf("%w: %v", ErrCheckpoint, err)
		}
	}
	*pl.src = src
	pl.model, pl.workVersions = m, work
	pl.version, pl.samples, pl.lastSeq = c.ModelVersion, c.Samples, c.LastSeq
	pl.lastCkptSeq = c.LastSeq
	pl.stats.restore(c.Counters)
	if c.Counters.Learned == 0 {
		pl.stats.learned.Store(c.Samples) // a checkpoint of an older smtd
	}
	pl.stats.lastSeq.Store(c.LastSeq)
	pl.obs.checkpointed(c.Created, 0)
	return nil
}

// shapeChanges lists the fields that decide a model's shape and differ.
func shapeChanges(a, b *config.Pipeline) []string {
	var out []string
	add := func(name string, x, y any) {
		if x != y {
			out = append(out, fmt.Sprintf("%s %v → %v", name, x, y))
		}
	}
	add("modality", a.Modality, b.Modality)
	if b.Modality == config.Text {
		add("text.vocabulary", a.Text.Vocabulary, b.Text.Vocabulary)
		add("smt.dim", a.SMT.Dim, b.SMT.Dim)
		add("text.window", a.Text.Window, b.Text.Window)
		return out
	}
	add("image", a.Image, b.Image)
	add("learner", a.Learner, b.Learner)
	if b.Learner == config.LearnerADMM {
		add("admm.atoms", a.ADMM.Atoms, b.ADMM.Atoms)
		add("admm.prior", a.ADMM.Prior, b.ADMM.Prior)
		add("admm.crop", a.ADMM.Crop, b.ADMM.Crop)
		return out
	}
	if b.Learner == config.LearnerKSM {
		k, l := a.KSM, b.KSM
		add("ksm.neurons", k.Neurons, l.Neurons)
		add("ksm.kernel", ksmKernel(k), ksmKernel(l))
		add("ksm.mixing", k.Mixing, l.Mixing)
		add("ksm.lambda", k.Lambda, l.Lambda)
		add("ksm.crop", k.Crop, l.Crop)
		return out
	}
	add("patches.size", a.Patches.Size, b.Patches.Size)
	add("patches.stride", a.Patches.Stride, b.Patches.Stride)
	add("kmeans.atoms", a.KMeans.Atoms, b.KMeans.Atoms)
	add("smt.dim", a.SMT.Dim, b.SMT.Dim)
	if b.SMT.Dim > 0 {
		// The statistics' layout depends on these.
		add("smt.blank", a.SMT.Blank, b.SMT.Blank)
		add("smt.solver", a.SMT.Solver, b.SMT.Solver)
		add("kmeans.code", a.KMeans.Code, b.KMeans.Code)
		if b.SMT.Solver == config.SolverSGD {
			// SGD's P lies in, or orthogonal to, the constant.
			add("smt.drop", a.SMT.Drop, b.SMT.Drop)
		}
	}
	return out
}

// publishSnapshot makes the current model the one queries see. The
// snapshot is also the last good state a diverged model rolls back to.
func (pl *pipeline) publishSnapshot() {
	s := &snapshot{version: pl.version, cfg: pl.cfg}
	if r, ok := pl.model.(recycler); ok {
		s.model = r.snapshotInto(pl.unread())
	} else {
		s.model = pl.model.snapshot()
	}
	if old := pl.snap.Swap(s); old != nil {
		pl.retired = append(pl.retired, old)
		if len(pl.retired) > maxRetired {
			pl.retired = slices.Delete(pl.retired, 0, 1) // still read: left to the collector
		}
	}
}

// unread returns the model of a retired snapshot that nobody reads, and
// forgets the snapshot; nil when every one is read.
func (pl *pipeline) unread() model {
	for i, s := range pl.retired {
		if s.readers.Load() == 0 {
			pl.retired = slices.Delete(pl.retired, i, i+1)
			return s.model
		}
	}
	return nil
}

// run is the pipeline's owner goroutine: it cuts batches, learns, publishes
// outputs, acknowledges and checkpoints, until ctx is done; then it writes
// a last checkpoint.
func (pl *pipeline) run(ctx context.Context) {
	if pl.cfg.Workers.Enabled {
		pl.runWorkers(ctx)
		return
	}
	defer pl.in.stop()
	pl.out = pl.startOutputs()
	// The final checkpoint below flushes the queue first; stopping it
	// comes before the input stops, as it acknowledges.
	defer pl.stopOutputs()
	pl.lastCkptTime = time.Now()
	for {
		select {
		case r := <-pl.tune:
			pl.applyTune(r)
			continue
		case r := <-pl.ckptReq:
			info, err := pl.checkpoint(context.WithoutCancel(ctx))
			r.done <- checkpointResult{info, err}
			continue
		default:
		}
		wait := pl.cfg.Batch.Timeout
		if pl.cfg.Deterministic {
			wait = 0
		}
		msgs, err := pl.in.next(ctx, pl.cfg.Batch.Size, wait, wait == 0)
		if ctx.Err() != nil {
			// Deterministic mode applies whole batches only: the partial
			// batch is left unacknowledged and read again after a
			// restart, so batch boundaries never depend on shutdowns.
			if !pl.cfg.Deterministic && len(msgs) > 0 && !pl.fenced() {
				sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
				pl.process(sctx, msgs)
				pl.flushOutputs()
				cancel()
			}
			break
		}
		if err != nil && len(msgs) == 0 {
			pl.inputTrouble(ctx, err)
			continue
		}
		pl.inputFine()
		pl.stats.backlog.Store(pl.in.backlog())
		pl.learner.run(func() { pl.process(ctx, msgs) })
		pl.updateHealth()
		if pl.sinceCkpt >= pl.ckpt.EverySamples || (pl.sinceCkpt > 0 && time.Since(pl.lastCkptTime) >= pl.ckpt.Every) {
			if _, err := pl.checkpoint(ctx); err != nil {
				pl.log.Error().Err(err).Msg("checkpoint failed")
			}
		}
	}
	if errors.Is(context.Cause(ctx), errLeaseLost) {
		return // the successor continues from the newest checkpoint
	}
	if pl.lastSeq != pl.lastCkptSeq || pl.sinceCkpt > 0 {
		if _, err := pl.checkpoint(context.WithoutCancel(ctx)); err != nil {
			pl.log.Error().Err(err).Msg("final checkpoint failed")
		}
	}
}

func (pl *pipeline) applyTune(r tuneRequest) {
	pl.cfg = r.p
	pl.ckpt = r.ckpt
	pl.model.tune(&pl.cfg)
	pl.publishSnapshot()
	close(r.done)
}

// process decodes, validates and learns one batch, publishes an output per
// valid message and acknowledges the batch.
func (pl *pipeline) process(ctx context.Context, msgs []inMsg) {
	if len(msgs) == 0 || pl.fenced() {
		return
	}
	if pl.deliveryGap(ctx, msgs) {
		return
	}
	start := time.Now()
	defer func() { pl.obs.batch.Observe(time.Since(start).Seconds()) }()
	batch := make([]sample, 0, len(msgs))
	for _, m := range msgs {
		if m.seq <= pl.lastSeq && pl.stream.name != "" {
			pl.stats.redelivered.Add(1)
			continue // redelivered after being applied: never apply twice
		}
		pl.stats.received.Add(1)
		s, err := decode(&pl.cfg, m.header, m.data)
		if err != nil {
			pl.rejectMsg(m.seq, err)
			continue
		}
		s.seq = m.seq
		batch = append(batch, s)
	}
	var outs []output
	if len(batch) > 0 {
		outs = pl.learn(batch, msgs[len(msgs)-1].seq)
	}
	last := msgs[len(msgs)-1]
	if last.seq > pl.lastSeq {
		pl.lastSeq = last.seq
		pl.stats.lastSeq.Store(last.seq)
	}
	pl.emit(ctx, outs, last.ack, last.seq)
}

// acknowledge acknowledges the input through seq with ack (nil: nothing
// to acknowledge), unless the pipeline's lease is lost.
func (pl *pipeline) acknowledge(ack func() error, seq uint64) {
	if ack == nil || pl.fenced() {
		return
	}
	if err := ack(); err != nil {
		pl.log.Warn().Err(err).Uint64("seq", seq).Msg("ack failed; the batch may be delivered again and will be skipped")
	}
}

// deliveryGap finds a hole in the sequences delivered after the last one
// applied, as when a delivery is lost while the server restarts: with the
// consumer's ack-all policy, acknowledging the messages after the hole
// would acknowledge the missing ones, unread. The first time a hole
// follows a given sequence, the consumer is created again right after it
// and the batch dropped, to be read again; a hole that is still there
// then holds no message of the input (deleted, or of another subject).
func (pl *pipeline) deliveryGap(ctx context.Context, msgs []inMsg) bool {
	return pl.holeAfter(ctx, msgs, pl.lastSeq)
}

// holeAfter is deliveryGap for messages read after sequence prev (0:
// none is looked at).
func (pl *pipeline) holeAfter(ctx context.Context, msgs []inMsg, prev uint64) bool {
	if pl.stream.name == "" || prev == 0 {
		return false
	}
	for _, m := range msgs {
		if m.seq <= prev {
			continue
		}
		if m.seq > prev+1 && pl.gapAfter != prev {
			pl.gapAfter = prev
			pl.flushOutputs() // the acknowledgements go to the consumer replaced
			pl.log.Warn().Uint64("after_seq", prev).Uint64("next_delivered", m.seq).Msg("a hole in the delivered sequences; reading the stream again after the last applied message")
			in, err := newJSIntake(context.WithoutCancel(ctx), pl.d.js, pl.stream.name, pl.consumerName(), &pl.cfg, pl.lastSeq)
			if err != nil {
				pl.log.Error().Err(err).Msg("reading the stream again")
				return false
			}
			pl.in = in
			return true
		}
		prev = m.seq
	}
	return false
}

// learn applies one batch of valid samples, then checks the model: a
// model that is no longer finite or has gone degenerate is rolled back
// and the batch's outputs are dropped. It returns the outputs to
// publish, stamped with the model version, which counts the batches
// that changed the model.
func (pl *pipeline) learn(batch []sample, seq uint64) []output {
	pl.giveWayToQueries()
	outs, err := pl.model.learn(batch)
	if !pl.settle(err, len(batch), seq) {
		return nil
	}
	pl.stamp(outs)
	pl.publishVocabulary()
	return outs
}

// settle accounts for a learning step from n samples, the last of input
// sequence seq, that returned err: it reports a stage that skipped them,
// rolls a diverged model back, counts the samples and the model version,
// and publishes the snapshot. It reports whether the step's outputs may
// be published (not after a rollback).
func (pl *pipeline) settle(err error, n int, seq uint64) bool {
	refused := errors.Is(err, errRefused)
	if err != nil {
		pl.log.Warn().Err(err).Uint64("version", pl.version).Bool("model_unchanged", refused).Msg("a learning stage skipped this batch")
		pl.d.publishEvent("events.errors", errorEvent{
			Pipeline: pl.cfg.Name, Subject: pl.cfg.Input.Subject, Seq: seq, Reason: ReasonLearner, Error: err.Error(),
		})
	}
	if refused {
		pl.refused++
		pl.lastRefusal = err.Error()
	} else {
		pl.refused = 0
	}
	if err := pl.model.check(); err != nil {
		pl.rollback(seq, err)
		pl.stats.notLearned.Add(int64(n))
		return false
	}
	pl.diverged = 0
	if !refused {
		pl.version++
		pl.samples += int64(n)
		pl.sinceCkpt += int64(n)
	}
	pl.publishSnapshot()
	// The counts move after the snapshot, so a reader that sees a batch
	// counted (Status reads the counts first) sees the model that learned it.
	if refused {
		pl.stats.notLearned.Add(int64(n))
	} else {
		pl.stats.learned.Add(int64(n))
	}
	return true
}

// rollback returns a diverged model to its last good state, the snapshot
// queries see, and reports it; the batch's outputs are not published.
func (pl *pipeline) rollback(seq uint64, why error) {
	pl.model.rollback(pl.snap.Load().model)
	pl.stats.rollbacks.Add(1)
	pl.diverged++
	pl.lastDiverg = why.Error()
	pl.log.Error().Err(why).Uint64("version", pl.version).Msg("model diverged; rolled back to the last good state")
	pl.d.publishEvent("events.errors", errorEvent{
		Pipeline: pl.cfg.Name, Subject: pl.cfg.Input.Subject, Seq: seq, Reason: ReasonDiverged,
		Error: why.Error() + "; rolled back to version " + fmt.Sprint(pl.version),
	})
}

// updateHealth recomputes the pipeline's health from what run saw last.
func (pl *pipeline) updateHealth() {
	h := Health{State: HealthOK}
	storage := pl.d.storage.Load()
	switch {
	case storage != nil:
		h = Health{HealthInputMissing, *storage}
	case pl.missing != "":
		h = Health{HealthInputMissing, pl.missing}
	case pl.diverged > 0:
		h = Health{HealthDiverged, fmt.Sprintf("%d batches in a row rolled back: %s", pl.diverged, pl.lastDiverg)}
	case pl.refused >= stalledAfter:
		h = Health{HealthStalled, fmt.Sprintf("the learner refused %d batches in a row: %s", pl.refused, pl.lastRefusal)}
	case pl.stats.backlog.Load() > uint64(lagBatches*pl.cfg.Batch.Size):
		h = Health{HealthLagging, fmt.Sprintf("%d messages wait in the input (more than %d batches)", pl.stats.backlog.Load(), lagBatches)}
	}
	if old := pl.health.Load(); old == nil || *old != h {
		pl.health.Store(&h)
	}
}

func (pl *pipeline) rejectMsg(seq uint64, err error) (reason string) {
	reason = "invalid"
	var ie *InputError
	if errors.As(err, &ie) {
		reason = ie.Reason
	}
	pl.stats.reject(reason)
	pl.log.Warn().Uint64("seq", seq).Str("reason", reason).Err(err).Msg("input rejected")
	pl.d.publishEvent("events.errors", errorEvent{
		Pipeline: pl.cfg.Name, Subject: pl.cfg.Input.Subject, Seq: seq, Reason: reason, Error: err.Error(),
	})
	return reason
}

// stamp gives a batch's outputs the model version that learned them and
// the input subject.
func (pl *pipeline) stamp(outs []output) {
	for i := range outs {
		outs[i].version = pl.version
		outs[i].subject = pl.cfg.Input.Subject
	}
}

// outputJob is one batch's outputs on their way out and the
// acknowledgement of its input, which follows them.
type outputJob struct {
	ctx    context.Context
	cfg    *config.Pipeline // a copy, as the batch was learned
	stream streamState
	outs   []output     // stamped
	ack    func() error // nil: nothing to acknowledge
	seq    uint64       // the input sequence ack acknowledges
}

// outputQueue publishes a pipeline's outputs and acknowledges its input on
// a goroutine of its own, in the order the batches were learned, so that
// encoding and publishing one batch's outputs overlaps the learning of the
// next, work the library's learner does not do. It holds one batch
// besides the one being published; a learner further ahead waits.
type outputQueue struct {
	jobs    chan outputJob
	pending sync.WaitGroup // jobs sent and not yet done; Add and Wait by the pipeline's owner only
	done    chan struct{}  // closed when the goroutine has returned
}

func (pl *pipeline) startOutputs() *outputQueue {
	q := &outputQueue{jobs: make(chan outputJob, 1), done: make(chan struct{})}
	go func() {
		defer close(q.done)
		for j := range q.jobs {
			pl.publishOutputs(j.ctx, j.cfg, j.stream, j.outs)
			pl.acknowledge(j.ack, j.seq)
			q.pending.Done()
		}
	}()
	return q
}

// flushOutputs returns once every output handed to the queue is published
// and its input acknowledged: before the input's consumer changes, and
// before a checkpoint, which must not cover input whose outputs are not
// out yet.
func (pl *pipeline) flushOutputs() {
	if pl.out != nil {
		pl.out.pending.Wait()
	}
}

// stopOutputs flushes and ends the output queue; outputs are published
// inline afterwards. It is idempotent.
func (pl *pipeline) stopOutputs() {
	if pl.out == nil {
		return
	}
	close(pl.out.jobs)
	<-pl.out.done
	pl.out = nil
}

// emit publishes a batch's stamped outputs, then acknowledges its input
// through seq (ack nil: nothing to acknowledge): on the output queue
// while run runs one, at once otherwise.
func (pl *pipeline) emit(ctx context.Context, outs []output, ack func() error, seq uint64) {
	if len(outs) == 0 && ack == nil {
		return
	}
	if pl.out == nil {
		pl.publishOutputs(ctx, &pl.cfg, pl.stream, outs)
		pl.acknowledge(ack, seq)
		return
	}
	cfg := pl.cfg
	pl.out.pending.Add(1)
	pl.out.jobs <- outputJob{ctx: ctx, cfg: &cfg, stream: pl.stream, outs: outs, ack: ack, seq: seq}
}

// publishOutputs publishes stamped outputs of pipeline config p reading
// input stream. With output transport jetstream each carries the
// Nats-Msg-Id <pipeline>:<stream epoch>:<source sequence>, so that the
// output stream drops one published again after a restart (within its
// duplicate window), and publishOutputs returns once the stream has
// stored every output: outputs not acknowledged are published again
// every second (the ID makes that safe), until ctx is done. Only then is
// the batch's input acknowledged.
func (pl *pipeline) publishOutputs(ctx context.Context, p *config.Pipeline, stream streamState, outs []output) {
	msgs := make([]*nats.Msg, 0, len(outs))
	core := p.Output.Transport != config.JetStream
	for i := range outs {
		var buf []byte
		if core {
			buf = pl.outBuf
		}
		m := encodeOutput(p, p.Output.Subject, &outs[i], buf)
		if c := pl.d.cluster; c != nil {
			m.Header.Set(HeaderDaemon, c.self.Name)
		}
		if core {
			pl.outBuf = m.Data
			if err := pl.d.nc.PublishMsg(m); err != nil {
				pl.log.Warn().Err(err).Msg("publishing output")
				continue
			}
			pl.stats.published.Add(1)
			continue
		}
		m.Header.Set(jetstream.MsgIDHeader, outputID(p.Name, stream, outs[i].source.seq))
		msgs = append(msgs, m)
	}
	for try := 0; len(msgs) > 0; try++ {
		if try > 0 {
			if try == 1 {
				pl.log.Warn().Int("outputs", len(msgs)).Msg("the output stream did not store every output; publishing them again every second")
			}
			select {
			case <-ctx.Done():
				pl.log.Error().Int("outputs", len(msgs)).Msg("outputs not stored in the output stream before shutdown")
				return
			case <-time.After(time.Second):
			}
		}
		msgs = pl.publishStored(msgs)
	}
}

// publishStored publishes msgs to JetStream and returns those the stream
// did not acknowledge within 10 s.
func (pl *pipeline) publishStored(msgs []*nats.Msg) []*nats.Msg {
	acks := make([]jetstream.PubAckFuture, len(msgs))
	var failed []*nats.Msg
	for i, m := range msgs {
		f, err := pl.d.js.PublishMsgAsync(m)
		if err != nil {
			failed = append(failed, m)
			continue
		}
		acks[i] = f
	}
	timeout := time.NewTimer(10 * time.Second)
	defer timeout.Stop()
	for i, f := range acks {
		if f == nil {
			continue
		}
		select {
		case a := <-f.Ok():
			if !a.Duplicate {
				pl.stats.published.Add(1)
			}
		case <-f.Err():
			failed = append(failed, msgs[i])
		case <-timeout.C:
			for j := i; j < len(acks); j++ {
				if acks[j] != nil {
					failed = append(failed, msgs[j])
				}
			}
			return failed
		}
	}
	return failed
}

// outputID is the Nats-Msg-Id of the output of the input at seq in
// stream: the pipeline, the input stream's instance and the sequence, so that a
// recreated input stream, whose sequences start again at 1, is not taken
// for a replay.
func outputID(pipeline string, stream streamState, seq uint64) string {
	return fmt.Sprintf("%s:%d:%d", pipeline, stream.created.UnixNano(), seq)
}

// publishVocabulary publishes the word embeddings of a text pipeline's
// newest solve, if not yet published, on <output subject>.vocabulary: JSON
// chunks of up to 256 words with their vectors, numbered, all with the
// model version of the solve.
func (pl *pipeline) publishVocabulary() {
	t, ok := pl.model.(*textModel)
	if !ok {
		return
	}
	sv := t.takeSolve()
	if sv == nil {
		return
	}
	subject := pl.cfg.Output.Subject + ".vocabulary"
	chunks := sv.vocabularyChunks(pl.cfg.Name, pl.version)
	for _, ch := range chunks {
		b, err := json.Marshal(ch)
		if err == nil {
			err = pl.d.nc.Publish(subject, b)
		}
		if err != nil {
			pl.log.Warn().Err(err).Str("subject", subject).Msg("publishing the vocabulary embeddings")
			return
		}
	}
	pl.log.Info().Str("subject", subject).Int("messages", len(chunks)).Uint64("version", pl.version).Msg("vocabulary embeddings published")
}

// checkpointInfo describes a written checkpoint (the checkpoint event).
type checkpointInfo struct {
	Pipeline string `json:"pipeline"`
	Version  uint64 `json:"model_version"`
	Samples  int64  `json:"samples"`
	LastSeq  uint64 `json:"last_seq"`
	File     string `json:"file,omitempty"`
	Object   string `json:"object,omitempty"`
	// Epoch is the owner's lease epoch in cluster mode.
	Epoch uint64 `json:"epoch,omitempty"`
	Bytes int    `json:"bytes"`
}

// checkpoint writes the pipeline's state to disk and, if configured, to the
// object store, and announces it.
func (pl *pipeline) checkpoint(ctx context.Context) (*checkpointInfo, error) {
	pl.flushOutputs()
	if pl.fenced() {
		return nil, fmt.Errorf("smtd: checkpoint of %s not written: %w", pl.cfg.Name, errLeaseLost)
	}
	if err := pl.model.flush(); err != nil {
		pl.log.Warn().Err(err).Msg("bringing the model up to date before a checkpoint")
	}
	if err := pl.model.check(); err != nil {
		// A degenerate model is never checkpointed.
		pl.rollback(pl.lastSeq, err)
		pl.updateHealth()
		return nil, fmt.Errorf("smtd: checkpoint of %s not written: %w", pl.cfg.Name, err)
	}
	pl.publishSnapshot() // queries see what the checkpoint holds
	pl.publishVocabulary()
	if a, ok := pl.model.(*admmModel); ok {
		if err := pl.d.nc.PublishMsg(a.atomsMsg(pl.cfg.Output.Subject+".atoms", pl.version)); err != nil {
			pl.log.Warn().Err(err).Msg("publishing the dictionary atoms")
		}
	}
	secs, err := pl.model.sections()
	if err != nil {
		return nil, err
	}
	if pl.cfg.Workers.Enabled {
		secs = append(secs, Section{Name: workVersionsSection, Data: encodeWorkVersions(pl.workVersions)})
	}
	rng, _ := pl.src.MarshalBinary() // cannot fail
	cfgYAML, err := yaml.Marshal(pl.cfg)
	if err != nil {
		return nil, err
	}
	c := &Checkpoint{
		Pipeline: pl.cfg.Name, Modality: string(pl.cfg.Modality),
		ModelVersion: pl.version, Samples: pl.samples, Created: time.Now().UTC(),
		Config: cfgYAML, Input: pl.cfg.Input.Subject, Stream: pl.stream.name, StreamCreated: pl.stream.created,
		LastSeq: pl.lastSeq, RNG: rng, Sections: secs, Counters: pl.stats.state(),
	}
	if pl.term != nil {
		c.Epoch = pl.term.epoch
	}
	c.Counters.Checkpoints++ // this one
	var buf bytes.Buffer
	if err := encodeCheckpoint(&buf, c); err != nil {
		return nil, err
	}
	name := checkpointName(pl.cfg.Name, c.Epoch, pl.version)
	info := &checkpointInfo{Pipeline: pl.cfg.Name, Version: pl.version, Samples: pl.samples, LastSeq: pl.lastSeq, Bytes: buf.Len(), Epoch: c.Epoch}
	if pl.term == nil {
		path, err := writeCheckpointFile(pl.d.checkpointDir(pl.cfg.Name), name, buf.Bytes(), pl.ckpt.Keep)
		if err != nil {
			return nil, fmt.Errorf("smtd: writing checkpoint %s: %w", name, err)
		}
		info.File = path
	}
	if pl.d.store != nil {
		obj, err := pl.d.store.put(ctx, pl.cfg.Name, name, buf.Bytes(), pl.ckpt.Keep, pl.term)
		switch {
		case errors.Is(err, errLeaseLost):
			pl.term.lose()
			return nil, fmt.Errorf("smtd: checkpoint of %s not written: %w", pl.cfg.Name, err)
		case err != nil && pl.term != nil:
			// In a cluster the object store is the only place a
			// successor restores from.
			return nil, fmt.Errorf("smtd: storing checkpoint %s in JetStream: %w", name, err)
		case err != nil:
			pl.log.Warn().Err(err).Msg("storing checkpoint in JetStream; it is on disk")
		}
		info.Object = obj
	}
	pl.sinceCkpt = 0
	pl.lastCkptTime = time.Now()
	pl.lastCkptSeq = pl.lastSeq
	pl.stats.checkpoints.Add(1)
	pl.obs.checkpointed(pl.lastCkptTime, info.Bytes)
	pl.log.Info().Uint64("version", pl.version).Int64("samples", pl.samples).Uint64("last_seq", pl.lastSeq).Str("file", info.File).Str("object", info.Object).Msg("checkpoint written")
	pl.d.publishEvent("events.checkpoint", info)
	return info, nil
}
