package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/smtd/smtd/internal/state"
)

// Worker mode (config.Workers): one pipeline learned by every daemon of a
// cluster that carries it, the parameter-server pattern on NATS.
//
// The owner (the lease holder of cluster mode) reads the input stream
// through its consumer with headers only: it learns the sequences of the
// messages, not their payloads, and cuts them into minibatches of
// batch.size messages as a single daemon does. Each minibatch is a task;
// merge consecutive tasks make a step, which yields one model version.
// The tasks of the step that makes version v+1 are coded with version
// v−τ or newer (τ = workers.staleness; exactly v−τ in deterministic
// mode), so that at most τ+1 steps are in flight.
//
// Workers (every daemon carrying the pipeline; the owner too unless
// workers.on_owner is false) ask the owner for a task on
// <prefix>.work.<pipeline>.task, fetch its messages from the stream by
// sequence (direct get), decode and validate them, code them with the
// model version the task names, publish their outputs (with the same
// Nats-Msg-Id a single daemon would use), and send the contribution to
// <prefix>.work.<pipeline>.done. The owner applies a step once all its
// tasks are in, in sequence order, then acknowledges the step's last
// message, and publishes the new version on <prefix>.work.<pipeline>.model,
// where workers collect it; a worker that misses one asks for it on
// <prefix>.work.<pipeline>.model.get. Messages larger than the server's
// max_payload (models, contributions) travel in numbered chunks.
//
// Failures. A task whose contribution has not come back within
// workers.task_timeout goes to the next worker that asks: nothing is
// lost, and a step applies each task once, whichever worker's
// contribution arrives first (the others are dropped). Contributions and
// tasks carry the owner's epoch: after a takeover the new owner restores
// the newest checkpoint, reads again after its last sequence, and drops
// what its predecessor's workers send; the workers move to the new owner
// at their next request. The re-seeding candidates of a task are drawn
// from a source seeded by the pipeline's seed and the task's first
// sequence, so that a task coded twice contributes the same.
const (
	// A worker's request for a task waits workTaskWait; the owner answers
	// only requests younger than workParkFor (with no task once they are
	// that old), so that a task is never handed to a worker that has
	// stopped waiting for it, even when a long step (the dictionary's
	// seeding) kept the owner from answering for a while.
	workTaskWait = 5 * time.Second
	workParkFor  = time.Second
	workPoll     = 5 * time.Millisecond
	// workIdle bounds an idle owner's sleep, so that its health follows
	// the daemon's storage.
	workIdle = 250 * time.Millisecond
)

// workModel is a model whose learning splits, in worker mode, into the
// workers' contributions and the owner's merge of them: the image and
// video chain (image_work.go) and the word statistics (text_work.go).
type workModel interface {
	model
	// workerSections returns a model version: what a worker needs of the
	// model to code and embed.
	workerSections() ([]Section, error)
	// withWorkerSections returns a snapshot of the model whose state is
	// read from secs, a version of the owner's.
	withWorkerSections(secs []Section) (workModel, error)
	// contribute codes a minibatch with the model, which it does not
	// change, and returns its contribution, encoded, and its outputs. The
	// randomness it needs comes from src; ahead is how many versions past
	// this one the contribution may be applied, precision the width of
	// the floats it sends (config.Workers.Precision).
	contribute(batch []sample, src rand.Source, ahead, precision int) ([]byte, []output)
	// applyContributions takes one learning step from the encoded
	// contributions of a step's minibatches, in order. A contribution
	// that does not decode or does not fit the model is refused (an error
	// wrapping errRefused) before anything changes.
	applyContributions(enc [][]byte) error
}

var (
	_ workModel = (*imageModel)(nil)
	_ workModel = (*textModel)(nil)
)

// workSubject is <prefix>.work.<pipeline>.<what>.
func (d *Daemon) workSubject(pipeline, what string) string {
	return d.cfg.Subject("work." + pipeline + "." + what)
}

// workTask is a minibatch handed to a worker.
type workTask struct {
	ID      uint64   `json:"id"` // the first sequence of the minibatch
	Epoch   uint64   `json:"epoch"`
	Version uint64   `json:"version"` // code with this model version or newer
	Exact   bool     `json:"exact"`   // exactly Version (deterministic mode)
	Ahead   int      `json:"ahead"`   // versions between Version and the step's
	Seqs    []uint64 `json:"seqs"`
	// Precision is the owner's workers.precision, which its workers
	// follow, so that a task coded twice gives the same bytes; an owner
	// that predates it sends none and gets float64 (64), all it reads.
	Precision int `json:"precision,omitempty"`

	step   *workStep
	worker string
	sent   time.Time // zero while not handed out
	result []byte
	meta   workMeta
}

// precision returns the bits a worker sends the task's contribution in.
func (t *workTask) precision() int {
	if t.Precision == 32 {
		return 32
	}
	return 64
}

// workMeta accompanies a contribution (JSON in the Smtd-Work header).
type workMeta struct {
	Task      uint64           `json:"task"`
	Epoch     uint64           `json:"epoch"`
	Daemon    string           `json:"daemon"`
	Version   uint64           `json:"version"` // the model version it was coded with
	Received  int64            `json:"received"`
	Images    int              `json:"images"` // valid messages coded
	Published int64            `json:"published"`
	Rejected  map[string]int64 `json:"rejected,omitempty"`
	Missing   int64            `json:"missing,omitempty"` // sequences no longer in the stream
}

const headerWork = "Smtd-Work"

// workStep is up to merge consecutive minibatches applied as one step.
type workStep struct {
	tasks []*workTask
	// last is the step's last message: acknowledging it acknowledges the
	// step (the consumer acknowledges all before it).
	last inMsg
	// closed: the step takes no more minibatches, as it is full or
	// (outside deterministic mode) the input paused before it filled.
	closed bool
}

// workOwner is the owner's side of worker mode, run by the pipeline's
// goroutine.
type workOwner struct {
	pl     *pipeline
	epoch  uint64
	start  uint64 // the model version the owner started from
	steps  []*workStep
	byID   map[uint64]*workTask
	parked []parkedRequest
	// events are what the subscriptions received, for the owner's loop.
	events chan workEvent
	subs   []*nats.Subscription
	// lastRead is the last sequence read.
	lastRead uint64
	// buffers hold contributions, lent by the assembly of their chunks
	// and given back once applied: a contribution is MBs at K = 4096,
	// and fresh memory costs a page fault per 4 KB.
	buffers sync.Pool
}

type parkedRequest struct {
	msg *nats.Msg
	at  time.Time
}

// workEvent is a message for the owner's loop: a request for a task
// (stamped on arrival: one that waited out a long step in the channel is
// as old as its worker's wait), a whole contribution, or a request for a
// model version.
type workEvent struct {
	what string // "task", "done" or "model.get"
	parkedRequest
}

// handle takes one event.
func (o *workOwner) handle(e workEvent) {
	switch e.what {
	case "task":
		o.parked = append(o.parked, e.parkedRequest)
	case "done":
		o.accept(e.msg)
	default:
		o.serveModel(e.msg)
	}
}

// runWorkers is run for a pipeline in worker mode: it hands minibatches to
// workers and applies their contributions until ctx is done.
func (pl *pipeline) runWorkers(ctx context.Context) {
	defer pl.in.stop()
	o := &workOwner{
		pl: pl, start: pl.version, byID: map[uint64]*workTask{}, lastRead: pl.lastSeq,
		events: make(chan workEvent, 512),
	}
	if pl.term != nil {
		o.epoch = pl.term.epoch
	}
	if err := o.subscribe(ctx); err != nil {
		pl.log.Error().Err(err).Msg("worker mode: subscribing; the pipeline does not learn")
		<-ctx.Done()
		return
	}
	defer o.unsubscribe()
	o.publishModel()
	pl.lastCkptTime = time.Now()
	pl.log.Info().Int("merge", pl.cfg.Workers.Merge).Int("staleness", pl.cfg.Workers.Staleness).Uint64("version", pl.version).Msg("worker mode: handing minibatches to workers")
	idle := time.NewTimer(workPoll)
	defer idle.Stop()
	for ctx.Err() == nil {
		select {
		case r := <-pl.tune:
			pl.applyTune(r)
		case r := <-pl.ckptReq:
			info, err := pl.checkpoint(context.WithoutCancel(ctx))
			r.done <- checkpointResult{info, err}
		default:
		}
		pl.learner.run(func() {
			o.drain()
			o.applyReady(ctx)
			// What arrived during a long step (the dictionary's seeding)
			// is taken before any task is judged late.
			o.drain()
			o.handOut()
		})
		if o.canRead() {
			o.read(ctx)
		} else {
			idle.Reset(o.idleFor(time.Now()))
			select {
			case <-ctx.Done():
			case e := <-o.events:
				o.handle(e)
			case r := <-pl.tune:
				pl.applyTune(r)
			case r := <-pl.ckptReq:
				info, err := pl.checkpoint(context.WithoutCancel(ctx))
				r.done <- checkpointResult{info, err}
			case <-idle.C:
			}
		}
		pl.updateHealth()
		if pl.sinceCkpt >= pl.ckpt.EverySamples || (pl.sinceCkpt > 0 && time.Since(pl.lastCkptTime) >= pl.ckpt.Every) {
			if _, err := pl.checkpoint(ctx); err != nil {
				pl.log.Error().Err(err).Msg("checkpoint failed")
			}
		}
	}
	if errors.Is(context.Cause(ctx), errLeaseLost) {
		return
	}
	if pl.lastSeq != pl.lastCkptSeq || pl.sinceCkpt > 0 {
		if _, err := pl.checkpoint(context.WithoutCancel(ctx)); err != nil {
			pl.log.Error().Err(err).Msg("final checkpoint failed")
		}
	}
}

func (o *workOwner) subscribe(ctx context.Context) error {
	d, name := o.pl.d, o.pl.name
	// A request is dropped when the loop is that far behind: its worker
	// asks again.
	forward := func(what string) nats.MsgHandler {
		return func(m *nats.Msg) {
			select {
			case o.events <- workEvent{what, parkedRequest{m, time.Now()}}:
			default:
			}
		}
	}
	asm := assembly{lend: o.lend}
	for _, s := range []struct {
		what string
		h    nats.MsgHandler
	}{
		{"task", forward("task")},
		{"model.get", forward("model.get")},
		{"done", func(m *nats.Msg) {
			if whole := asm.add(m); whole != nil {
				// Received whole: the worker goes on; the owner's loop
				// decides whether it takes the contribution.
				whole.Respond([]byte("ok"))
				select { // blocks the subscription, not the owner
				case o.events <- workEvent{"done", parkedRequest{whole, time.Now()}}:
				case <-ctx.Done():
				}
			}
		}},
	} {
		sub, err := d.nc.Subscribe(d.workSubject(name, s.what), s.h)
		if err != nil {
			o.unsubscribe()
			return err
		}
		o.subs = append(o.subs, sub)
	}
	return d.nc.Flush()
}

func (o *workOwner) unsubscribe() {
	for _, s := range o.subs {
		s.Unsubscribe()
	}
	o.subs = nil
}

// lend lends the assembly of contributions a buffer given back after a
// step (see apply), if one has room for n bytes.
func (o *workOwner) lend(n int) []byte {
	if b, ok := o.buffers.Get().(*[]byte); ok && cap(*b) >= n {
		return (*b)[:0]
	}
	return nil
}

// drain takes every waiting request and result without blocking.
func (o *workOwner) drain() {
	for {
		select {
		case e := <-o.events:
			o.handle(e)
		default:
			return
		}
	}
}

// idleFor is how long the owner's loop, with nothing to read, may wait
// for an event before something falls due: the oldest parked request's
// answer, a late task to hand out again, or a checkpoint by time; at most
// workIdle. Waking only then, rather than every few milliseconds, keeps
// an owner that waits for its workers off the CPU.
func (o *workOwner) idleFor(now time.Time) time.Duration {
	pl := o.pl
	due := now.Add(workIdle)
	if len(o.parked) > 0 {
		due = minTime(due, o.parked[0].at.Add(workParkFor))
		for _, s := range o.steps {
			for _, t := range s.tasks {
				if t.result == nil && !t.sent.IsZero() {
					due = minTime(due, t.sent.Add(pl.cfg.Workers.TaskTimeout))
				}
			}
		}
	}
	// A checkpoint overdue has failed (the loop tries one whenever it is
	// due): it is tried again at the next wake, not in a busy loop.
	if at := pl.lastCkptTime.Add(pl.ckpt.Every); pl.sinceCkpt > 0 && at.After(now) {
		due = minTime(due, at)
	}
	return max(due.Sub(now), time.Millisecond)
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// canRead reports whether another minibatch may be read: the open step is
// not full, or fewer than τ+1 steps are in flight.
func (o *workOwner) canRead() bool {
	if n := len(o.steps); n > 0 && !o.steps[n-1].closed {
		return true
	}
	return len(o.steps) < o.pl.cfg.Workers.Staleness+1
}

// read takes the next minibatch from the stream, if one is there, as a
// task of the open step (a new one if there is none).
func (o *workOwner) read(ctx context.Context) {
	pl := o.pl
	// With tasks out, their contributions are taken between short
	// fetches. With none, only requests can come: the fetch may wait
	// until the oldest parked one must be answered, at most
	// batch.timeout as a single daemon waits for a minibatch (it returns
	// once the minibatch is whole), rather than poll the server 200
	// times a second while the input is quiet.
	wait := workPoll
	if len(o.steps) == 0 {
		wait = min(pl.cfg.Batch.Timeout, o.idleFor(time.Now()))
	}
	det := pl.cfg.Deterministic
	msgs, err := pl.in.next(ctx, pl.cfg.Batch.Size, wait, det)
	if err != nil && len(msgs) == 0 {
		if ctx.Err() == nil {
			pl.inputTrouble(ctx, err)
		}
		return
	}
	pl.inputFine()
	pl.stats.backlog.Store(pl.in.backlog())
	if o.gap(ctx, msgs) {
		return
	}
	n := len(o.steps)
	if len(msgs) == 0 {
		// The input paused: close a partial step so that it is applied.
		if n > 0 && !det && len(o.steps[n-1].tasks) > 0 {
			o.steps[n-1].closed = true
		}
		return
	}
	if n == 0 || o.steps[n-1].closed {
		o.steps = append(o.steps, &workStep{})
		n++
	}
	s := o.steps[n-1]
	t := &workTask{ID: msgs[0].seq, Epoch: o.epoch, Exact: pl.cfg.Deterministic, Precision: pl.cfg.Workers.Precision, step: s}
	for _, m := range msgs {
		if m.seq <= pl.lastSeq && pl.stream.name != "" {
			pl.stats.redelivered.Add(1)
			continue
		}
		t.Seqs = append(t.Seqs, m.seq)
	}
	s.last = msgs[len(msgs)-1]
	o.lastRead = s.last.seq
	if len(t.Seqs) > 0 {
		s.tasks = append(s.tasks, t)
		o.byID[t.ID] = t
	}
	if len(s.tasks) >= pl.cfg.Workers.Merge || (len(msgs) < pl.cfg.Batch.Size && !det) {
		s.closed = true
	}
}

// gap finds a hole in the sequences read, as a delivery lost while the
// server restarts leaves (see pipeline.deliveryGap): acknowledging the
// step after it would acknowledge the missing messages, unread. The first
// time a hole follows a given sequence, the steps in flight are dropped
// (their contributions will find no task) and the consumer is created
// again right after the last applied sequence; a hole still there then
// holds no message of the input.
func (o *workOwner) gap(ctx context.Context, msgs []inMsg) bool {
	if !o.pl.holeAfter(ctx, msgs, o.lastRead) {
		return false
	}
	o.steps = nil
	clear(o.byID)
	o.lastRead = o.pl.lastSeq
	return true
}

// versionFor is the model version the tasks of the i-th step in flight are
// coded with: v−τ for the step that makes version v+1 (0 for the first
// τ steps). A new owner has those before its own first version from the
// checkpoint it restored (pipeline.workVersions); when the checkpoint
// did not keep them, it codes with its first version instead.
func (o *workOwner) versionFor(i int) uint64 {
	v := o.pl.version + uint64(i)
	tau := uint64(o.pl.cfg.Workers.Staleness)
	want := uint64(0)
	if v > tau {
		want = v - tau
	}
	if _, ok := o.pl.workVersions[want]; !ok && want < o.start {
		return o.start
	}
	return want
}

// handOut answers the parked requests with the tasks that are due: not
// handed out, or handed out longer than workers.task_timeout ago, and
// whose model version exists. Requests parked too long get no task.
func (o *workOwner) handOut() {
	pl := o.pl
	now := time.Now()
	for len(o.parked) > 0 && now.Sub(o.parked[0].at) > workParkFor {
		// Too old: its worker may stop waiting before a task is there.
		o.parked[0].msg.Respond(nil) // no task now: ask again
		o.parked = o.parked[1:]
	}
	if pl.fenced() {
		return // a successor owns the pipeline: its workers work for it
	}
	for i, s := range o.steps {
		v := o.versionFor(i)
		if v > pl.version {
			break
		}
		for _, t := range s.tasks {
			if len(o.parked) == 0 {
				break
			}
			if t.result != nil || (!t.sent.IsZero() && now.Sub(t.sent) < pl.cfg.Workers.TaskTimeout) {
				continue
			}
			r := o.parked[0]
			o.parked = o.parked[1:]
			if !t.sent.IsZero() {
				pl.log.Warn().Uint64("task", t.ID).Str("worker", t.worker).Msg("worker mode: no contribution in time; handing the minibatch to another worker")
			}
			t.Version = v
			t.Ahead = int(pl.version+uint64(i)-v) + 1
			b, _ := json.Marshal(t)
			if err := r.msg.Respond(b); err != nil {
				continue
			}
			t.sent, t.worker = now, r.msg.Header.Get(HeaderDaemon)
		}
	}
}

// accept records a contribution for its task, unless the task is not this
// owner's, already has one, or was coded with a version it must not be.
func (o *workOwner) accept(m *nats.Msg) {
	var meta workMeta
	log := o.pl.log.Debug()
	if err := json.Unmarshal([]byte(m.Header.Get(headerWork)), &meta); err != nil {
		log.Err(err).Msg("worker mode: a contribution without its " + headerWork + " header")
		return
	}
	t := o.byID[meta.Task]
	switch {
	case meta.Epoch != o.epoch || t == nil:
		log.Uint64("task", meta.Task).Uint64("epoch", meta.Epoch).Msg("worker mode: a contribution to a task not of this owner")
	case t.result != nil:
		// Another worker was first.
	case meta.Version < t.Version || (t.Exact && meta.Version != t.Version):
		log.Uint64("task", meta.Task).Uint64("version", meta.Version).Uint64("needs", t.Version).Msg("worker mode: a contribution coded with another version; handing the task out again")
		t.sent = time.Time{}
	default:
		t.result, t.meta = m.Data, meta
	}
}

// applyReady applies, in order, the steps whose tasks are all back.
func (o *workOwner) applyReady(ctx context.Context) {
	pl := o.pl
	for len(o.steps) > 0 {
		s := o.steps[0]
		if !s.closed {
			return
		}
		for _, t := range s.tasks {
			if t.result == nil {
				return
			}
		}
		o.steps = o.steps[1:]
		o.apply(ctx, s)
		if pl.fenced() {
			return
		}
	}
}

// apply learns from one step's contributions and acknowledges its input.
func (o *workOwner) apply(ctx context.Context, s *workStep) {
	pl := o.pl
	start := time.Now()
	var enc [][]byte
	images := 0
	for _, t := range s.tasks {
		delete(o.byID, t.ID)
		pl.stats.received.Add(t.meta.Received)
		pl.stats.published.Add(t.meta.Published)
		pl.stats.lost.Add(t.meta.Missing)
		for r, n := range t.meta.Rejected {
			for range n {
				pl.stats.reject(r)
			}
		}
		if t.meta.Images > 0 {
			enc = append(enc, t.result)
			images += t.meta.Images
		}
	}
	if len(enc) > 0 {
		pl.giveWayToQueries()
		err := pl.model.(workModel).applyContributions(enc)
		if pl.settle(err, images, s.last.seq) {
			o.publishModel()
			pl.publishVocabulary()
		}
		switch m, _ := pl.model.(*imageModel); {
		case m != nil && m.tookSeeds:
			// The first steps' contributions carry every row of their
			// minibatches, hundreds of MB at a batch.size in the
			// hundreds. Return them to the system now: else the
			// collector's goal stays at twice that, and the heap grows
			// into fresh pages (a fault each) until it is reached.
			for _, t := range s.tasks {
				t.result = nil
			}
			debug.FreeOSMemory()
		default:
			for _, t := range s.tasks {
				if b := t.result[:0]; cap(b) > 0 {
					o.buffers.Put(&b)
				}
				t.result = nil
			}
		}
	}
	if last := s.last; last.seq > pl.lastSeq {
		pl.lastSeq = last.seq
		pl.stats.lastSeq.Store(last.seq)
	}
	if ack := s.last.ack; ack != nil && !pl.fenced() {
		if err := ack(); err != nil {
			pl.log.Warn().Err(err).Uint64("seq", s.last.seq).Msg("ack failed; the step may be delivered again and will be skipped")
		}
	}
	pl.obs.batch.Observe(time.Since(start).Seconds())
}

// publishModel sends the current version to the workers and keeps it for
// those that ask again.
func (o *workOwner) publishModel() {
	pl := o.pl
	secs, err := pl.model.(workModel).workerSections()
	if err != nil {
		pl.log.Error().Err(err).Msg("worker mode: encoding the model")
		return
	}
	b := encodeSections(secs)
	// A version that repeats the one before, a text model between two
	// solves, is sent as a reference to it: workers hold it already
	// (one that does not asks for it by number and gets the bytes).
	var prev []byte
	repeat := false
	if pl.version > 0 {
		prev, repeat = pl.workVersions[pl.version-1]
		repeat = repeat && bytes.Equal(prev, b)
	}
	if repeat {
		b = prev
	}
	if pl.workVersions == nil {
		pl.workVersions = map[uint64][]byte{}
	}
	pl.workVersions[pl.version] = b
	for v := range pl.workVersions {
		if v+uint64(pl.cfg.Workers.Staleness) < pl.version {
			delete(pl.workVersions, v)
		}
	}
	h := o.modelHeader(pl.version)
	if repeat {
		h.Set(headerModelSame, strconv.FormatUint(pl.version-1, 10))
		b = nil
	}
	if err := publishChunks(pl.d.nc, pl.d.workSubject(pl.name, "model"), h, b); err != nil {
		pl.log.Warn().Err(err).Msg("worker mode: publishing the model")
	}
}

// headerModelSame, on a model version without data, names the version
// whose bytes it repeats.
const headerModelSame = "Smtd-Model-Same"

// modelHeader returns the headers of model version v.
func (o *workOwner) modelHeader(v uint64) nats.Header {
	h := nats.Header{}
	h.Set(headerEpoch, strconv.FormatUint(o.epoch, 10))
	h.Set(HeaderModelVersion, strconv.FormatUint(v, 10))
	return h
}

// serveModel answers a worker's model.get with the version it asks for
// (the newest if it is gone), in chunks to its reply subject.
func (o *workOwner) serveModel(m *nats.Msg) {
	if m.Reply == "" {
		return
	}
	v, err := strconv.ParseUint(m.Header.Get(HeaderModelVersion), 10, 64)
	b, ok := o.pl.workVersions[v]
	if err != nil || !ok {
		v, b = o.pl.version, o.pl.workVersions[o.pl.version]
	}
	if err := publishChunks(o.pl.d.nc, m.Reply, o.modelHeader(v), b); err != nil {
		o.pl.log.Warn().Err(err).Msg("worker mode: sending a model")
	}
}

const headerEpoch = "Smtd-Epoch"

// workVersionsSection is the checkpoint section, in worker mode, holding
// the versions the steps in flight are coded with (the last τ+1), so that
// a new owner codes them as its predecessor did.
const workVersionsSection = "work-versions"

// encodeWorkVersions encodes a pipeline's workVersions, oldest first.
func encodeWorkVersions(vs map[uint64][]byte) []byte {
	w := state.NewEncoder(nil)
	w.Uvarint(uint64(len(vs)))
	for _, v := range slices.Sorted(maps.Keys(vs)) {
		w.Uvarint(v)
		appendPrefixed(w, vs[v])
	}
	return w.Bytes()
}

func decodeWorkVersions(b []byte) (map[uint64][]byte, error) {
	r := state.NewDecoder(b)
	n := r.Uvarint()
	if n > 1<<10 {
		return nil, errors.New("smtd: work versions: bad count")
	}
	vs := make(map[uint64][]byte, n)
	for range n {
		v := r.Uvarint()
		vs[v] = prefixed(r)
	}
	if !r.Done() {
		return nil, errors.New("smtd: work versions: truncated")
	}
	return vs, nil
}

// encodeSections concatenates named sections (a checkpoint's encoding of
// them without the rest).
func encodeSections(secs []Section) []byte {
	r := state.NewEncoder(nil)
	r.Uvarint(uint64(len(secs)))
	for _, s := range secs {
		appendPrefixed(r, []byte(s.Name))
		appendPrefixed(r, s.Data)
	}
	return r.Bytes()
}

func decodeSections(b []byte) ([]Section, error) {
	r := state.NewDecoder(b)
	n := r.Uvarint()
	if n > 64 {
		return nil, errors.New("smtd: model sections: bad count")
	}
	secs := make([]Section, 0, n)
	for range n {
		name, data := prefixed(r), prefixed(r)
		secs = append(secs, Section{Name: string(name), Data: data})
	}
	if !r.Done() {
		return nil, errors.New("smtd: model sections: truncated")
	}
	return secs, nil
}

// appendPrefixed writes b as its length (uvarint) and its bytes.
func appendPrefixed(e *state.Encoder, b []byte) {
	e.Uvarint(uint64(len(b)))
	e.Raw(b)
}

// prefixed reads what appendPrefixed wrote.
func prefixed(d *state.Decoder) []byte {
	n := d.Uvarint()
	if n > uint64(d.Len()) {
		d.Fail()
		return nil
	}
	return d.Bytes(int(n))
}

// Chunks.

const (
	headerTransfer = "Smtd-Transfer" // one id per transfer
	headerChunk    = "Smtd-Chunk"    // "i/n"
)

// publishChunks publishes data on subject in pieces that fit the server's
// max_payload, each with the headers h, a transfer id and its index.
// Pieces of one publisher reach a subscriber in order; a transfer with a
// piece lost is never completed (assembly drops it), and its sender asks
// again.
func publishChunks(nc *nats.Conn, subject string, h nats.Header, data []byte) error {
	return eachChunk(nc, subject, h, data, nc.PublishMsg)
}

// requestChunks is publishChunks with the last piece a request: it
// returns the reply, waiting for it until ctx is done.
func requestChunks(ctx context.Context, nc *nats.Conn, subject string, h nats.Header, data []byte) (reply *nats.Msg, err error) {
	err = eachChunk(nc, subject, h, data, func(m *nats.Msg) (err error) {
		reply, err = nc.RequestMsgWithContext(ctx, m)
		return err
	})
	return reply, err
}

// eachChunk cuts data into the pieces of publishChunks, publishes all
// but the last and hands the last to send.
func eachChunk(nc *nats.Conn, subject string, h nats.Header, data []byte, send func(*nats.Msg) error) error {
	mp := int(nc.MaxPayload())
	size := mp - min(16<<10, mp/4) // room for the headers
	n := max(1, (len(data)+size-1)/size)
	id := nats.NewInbox()[len(nats.InboxPrefix):]
	for i := range n {
		m := nats.NewMsg(subject)
		for k, v := range h {
			m.Header[k] = v
		}
		m.Header.Set(headerTransfer, id)
		m.Header.Set(headerChunk, fmt.Sprintf("%d/%d", i, n))
		m.Data = data[i*size : min(len(data), (i+1)*size)]
		if i == n-1 {
			return send(m)
		}
		if err := nc.PublishMsg(m); err != nil {
			return err
		}
	}
	return nil
}

// assembly puts chunked transfers together. It is used by one
// subscription's handler, which NATS calls from one goroutine.
type assembly struct {
	parts map[string]*partial
	// lend, if set, returns memory to put a transfer of n bytes together
	// in (an empty slice with room for them), or nil for new memory.
	lend func(n int) []byte
}

type partial struct {
	chunks [][]byte
	got    int
	size   int
	start  time.Time
}

// assemblyLimit bounds the memory of transfers in progress, and
// assemblyAge how long an incomplete one is kept.
const (
	assemblyLimit = 1 << 30
	assemblyAge   = time.Minute
)

// add takes one chunk; when it completes its transfer, add returns the
// last chunk's message with the whole data in it.
func (a *assembly) add(m *nats.Msg) *nats.Msg {
	i, n, ok := parseChunk(m.Header.Get(headerChunk))
	if !ok {
		return nil
	}
	if n == 1 {
		return m
	}
	if a.parts == nil {
		a.parts = map[string]*partial{}
	}
	id := m.Header.Get(headerTransfer)
	p := a.parts[id]
	if p == nil {
		a.expire()
		p = &partial{chunks: make([][]byte, n), start: time.Now()}
		a.parts[id] = p
	}
	if len(p.chunks) != n || p.chunks[i] != nil {
		return nil
	}
	p.chunks[i], p.got, p.size = m.Data, p.got+1, p.size+len(m.Data)
	if p.got < n {
		return nil
	}
	delete(a.parts, id)
	var data []byte
	if a.lend != nil {
		data = a.lend(p.size)
	}
	if data == nil {
		data = make([]byte, 0, p.size)
	}
	for _, c := range p.chunks {
		data = append(data, c...)
	}
	m.Data = data
	return m
}

// expire drops transfers that have waited too long, or too much data.
func (a *assembly) expire() {
	total := 0
	for id, p := range a.parts {
		if time.Since(p.start) > assemblyAge {
			delete(a.parts, id)
			continue
		}
		total += p.size
	}
	if total > assemblyLimit {
		clear(a.parts)
	}
}

func parseChunk(s string) (i, n int, ok bool) {
	a, b, found := strings.Cut(s, "/")
	if !found {
		return 0, 0, false
	}
	i, err1 := strconv.Atoi(a)
	n, err2 := strconv.Atoi(b)
	return i, n, err1 == nil && err2 == nil && n >= 1 && n <= 1<<16 && i >= 0 && i < n
}

// The worker's side.

// worker codes the minibatches its owner hands out, with a copy of the
// model per version.
type worker struct {
	d    *Daemon
	pl   *pipeline // the worker's own: config, counters, output publishing
	base workModel
	self string

	// workspace is the coding workspace of every version held: only
	// the worker's goroutine codes, one task at a time, and a workspace
	// is tens of MB at a batch.size in the hundreds.
	workspace *imageWork

	// sending holds a token while a contribution is being sent and its
	// receipt awaited, which the worker does while it codes the next
	// task; sends counts them.
	sending chan struct{}
	sends   sync.WaitGroup

	mu       sync.Mutex
	versions map[workVersion]*heldVersion
	arrived  chan struct{} // closed and replaced when a version arrives
	stream   jetstream.Stream
	asks     sync.WaitGroup // requests for a missing version (ask) in flight
}

type workVersion struct{ epoch, version uint64 }

// heldVersion is a model version as the owner sent it, decoded the first
// time a task needs it (a worker that is not asked to code with a
// version never pays for decoding it).
type heldVersion struct {
	secs  []Section
	model workModel
}

// runWorker works for the owner of main, with pl (a pipeline of its own)
// until ctx is done. While this daemon owns main and workers.on_owner is
// false, it does not ask for tasks.
func (d *Daemon) runWorker(ctx context.Context, pl, main *pipeline) {
	w := &worker{d: d, pl: pl, base: pl.model.(workModel), versions: map[workVersion]*heldVersion{}, arrived: make(chan struct{}), sending: make(chan struct{}, 1)}
	w.self = d.cluster.self.Name
	defer w.asks.Wait() // ctx is done: they return
	defer w.sends.Wait()
	var asm assembly
	sub, err := d.nc.Subscribe(d.workSubject(pl.name, "model"), func(m *nats.Msg) {
		if whole := asm.add(m); whole != nil {
			w.store(whole)
		}
	})
	if err != nil {
		pl.log.Error().Err(err).Msg("worker mode: subscribing to models; not working")
		return
	}
	defer sub.Unsubscribe()
	pl.log.Info().Msg("worker mode: working for the pipeline's owner")
	// The next task is asked for while one is coded, so that a worker
	// never waits for the owner between two.
	tasks := make(chan *workTask)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer close(tasks)
		for ctx.Err() == nil {
			if l := main.lease.Load(); !pl.cfg.Workers.OnOwner && l != nil && l.Owner == w.self {
				sleep(ctx, 100*time.Millisecond)
				continue
			}
			t, err := w.request(ctx)
			if err != nil {
				if ctx.Err() == nil {
					pl.log.Debug().Err(err).Msg("worker mode: asking for a task")
					sleep(ctx, 100*time.Millisecond)
				}
				continue
			}
			if t == nil {
				continue
			}
			select {
			case tasks <- t:
			case <-ctx.Done():
			}
		}
	}()
	for t := range tasks {
		var err error
		pl.learner.run(func() { err = w.work(ctx, t) })
		if err != nil && ctx.Err() == nil {
			w.failed(t, err)
		}
	}
	wg.Wait()
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// store decodes a model version sent by the owner.
func (w *worker) store(m *nats.Msg) {
	epoch, err1 := strconv.ParseUint(m.Header.Get(headerEpoch), 10, 64)
	version, err2 := strconv.ParseUint(m.Header.Get(HeaderModelVersion), 10, 64)
	if same := m.Header.Get(headerModelSame); same != "" && err1 == nil && err2 == nil {
		v, err := strconv.ParseUint(same, 10, 64)
		w.mu.Lock()
		defer w.mu.Unlock()
		// Not held: the version is asked for when a task needs it.
		if h, ok := w.versions[workVersion{epoch, v}]; ok && err == nil {
			w.hold(workVersion{epoch, version}, h)
		}
		return
	}
	secs, err3 := decodeSections(m.Data)
	if err := errors.Join(err1, err2, err3); err != nil {
		w.pl.log.Warn().Err(err).Msg("worker mode: a model that does not decode")
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.hold(workVersion{epoch, version}, &heldVersion{secs: secs})
}

// hold keeps h as version key, unless one is held already, forgets the
// versions of older epochs and those more than τ+2 behind, and wakes the
// tasks waiting for a version. A version that repeats another shares its
// heldVersion, decoded once. w.mu is held.
func (w *worker) hold(key workVersion, h *heldVersion) {
	if _, ok := w.versions[key]; ok {
		return
	}
	w.versions[key] = h
	keep := uint64(w.pl.cfg.Workers.Staleness + 2)
	for k := range w.versions {
		if k.epoch < key.epoch || k.version+keep < key.version {
			delete(w.versions, k)
		}
	}
	close(w.arrived)
	w.arrived = make(chan struct{})
}

// model returns the model version a task is to be coded with: exactly
// its version in deterministic mode, otherwise the newest held that is
// not older. It asks the owner when it has none.
func (w *worker) model(ctx context.Context, t *workTask) (workModel, uint64, error) {
	deadline := time.Now().Add(w.pl.cfg.Workers.TaskTimeout)
	asked := false
	for {
		w.mu.Lock()
		var best *heldVersion
		var bestV uint64
		for k, h := range w.versions {
			if k.epoch != t.Epoch || k.version < t.Version || (t.Exact && k.version != t.Version) {
				continue
			}
			if best == nil || k.version > bestV {
				best, bestV = h, k.version
			}
		}
		arrived := w.arrived
		w.mu.Unlock()
		if best != nil {
			// Only this goroutine decodes and reads the models.
			if best.model == nil {
				m, err := w.base.withWorkerSections(best.secs)
				if err != nil {
					w.mu.Lock()
					// Versions that repeat it (hold) go too.
					maps.DeleteFunc(w.versions, func(_ workVersion, h *heldVersion) bool { return h == best })
					w.mu.Unlock()
					return nil, 0, fmt.Errorf("smtd: model version %d does not decode: %w", bestV, err)
				}
				w.shareWorkspace(m)
				best.model, best.secs = m, nil
			}
			return best.model, bestV, nil
		}
		if time.Now().After(deadline) {
			return nil, 0, fmt.Errorf("smtd: no model version %d of epoch %d", t.Version, t.Epoch)
		}
		if !asked {
			asked = true
			w.asks.Go(func() { w.ask(ctx, t.Version) })
		}
		select {
		case <-ctx.Done():
			return nil, 0, ctx.Err()
		case <-arrived:
		case <-time.After(time.Second):
			asked = false
		}
	}
}

// shareWorkspace makes an image model version code in the worker's
// workspace.
func (w *worker) shareWorkspace(m workModel) {
	im, ok := m.(*imageModel)
	switch {
	case !ok:
	case w.workspace == nil:
		w.workspace = im.imageWork
	default:
		// The patch settings of the worker's config as it is now.
		p := &w.workspace.patcher
		p.Grid, p.Mean, p.Context = im.patcher.Grid, im.patcher.Mean, im.patcher.Context
		im.imageWork = w.workspace
	}
}

// ask requests a model version from the owner; it arrives in chunks on an
// inbox of the worker's.
func (w *worker) ask(ctx context.Context, version uint64) {
	inbox := nats.NewInbox()
	sub, err := w.d.nc.SubscribeSync(inbox)
	if err != nil {
		return
	}
	defer sub.Unsubscribe()
	m := nats.NewMsg(w.d.workSubject(w.pl.name, "model.get"))
	m.Reply = inbox
	m.Header.Set(HeaderModelVersion, strconv.FormatUint(version, 10))
	if err := w.d.nc.PublishMsg(m); err != nil {
		return
	}
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var asm assembly
	for {
		c, err := sub.NextMsgWithContext(cctx)
		if err != nil {
			return
		}
		if whole := asm.add(c); whole != nil {
			w.store(whole)
			return
		}
	}
}

// request asks the owner for a task; nil: none now.
func (w *worker) request(ctx context.Context) (*workTask, error) {
	return requestTask(ctx, w.d.nc, w.d.workSubject(w.pl.name, "task"), w.self)
}

// requestTask asks the owner on subject for a task as the worker named
// self, waiting at most workTaskWait; nil: no task now.
func requestTask(ctx context.Context, nc *nats.Conn, subject, self string) (*workTask, error) {
	req := nats.NewMsg(subject)
	req.Header.Set(HeaderDaemon, self)
	rctx, cancel := context.WithTimeout(ctx, workTaskWait)
	r, err := nc.RequestMsgWithContext(rctx, req)
	cancel()
	if err != nil {
		return nil, err
	}
	if len(r.Data) == 0 {
		return nil, nil // no task now
	}
	t := new(workTask)
	if err := json.Unmarshal(r.Data, t); err != nil {
		return nil, fmt.Errorf("smtd: a task that does not decode: %w", err)
	}
	return t, nil
}

// work codes a task, publishes its outputs and sends its contribution
// (send).
func (w *worker) work(ctx context.Context, t *workTask) error {
	pl := w.pl
	model, version, err := w.model(ctx, t)
	if err != nil {
		return err
	}
	meta := workMeta{Task: t.ID, Epoch: t.Epoch, Daemon: w.self, Version: version}
	batch, err := w.fetch(ctx, t, &meta)
	if err != nil {
		return err
	}
	var enc []byte
	if len(batch) > 0 {
		var outs []output
		pl.d.setLearnCores(model)
		// The same task always draws the same candidates.
		enc, outs = model.contribute(batch, rand.NewPCG(pl.cfg.Seed, t.ID), t.Ahead, t.precision())
		meta.Images = len(batch)
		before := pl.stats.published.Load()
		pl.version = version
		pl.stamp(outs)
		pl.publishOutputs(ctx, &pl.cfg, pl.stream, outs)
		meta.Published = pl.stats.published.Load() - before
	}
	w.send(ctx, t, &meta, enc)
	return nil
}

// send sends a task's contribution and returns; the owner's receipt is
// awaited while the next task is coded, so that a worker does not wait
// between two tasks for an owner busy receiving other workers'
// contributions. One contribution is sent at a time: send waits for the
// previous one's receipt first, so that a worker holds at most two.
func (w *worker) send(ctx context.Context, t *workTask, meta *workMeta, enc []byte) {
	m := *meta
	select {
	case w.sending <- struct{}{}:
	case <-ctx.Done():
		return // shutting down: the owner hands the task out again
	}
	w.sends.Add(1)
	go func() {
		defer func() { <-w.sending; w.sends.Done() }()
		if err := deliver(ctx, w.d.nc, w.d.workSubject(w.pl.name, "done"), &m, enc); err != nil && ctx.Err() == nil {
			w.failed(t, err)
		}
	}()
}

// deliver sends a contribution, with meta in its headers, on subject (in
// chunks) and waits for the owner's receipt, for at most 10 s or until
// ctx is done.
func deliver(ctx context.Context, nc *nats.Conn, subject string, meta *workMeta, enc []byte) error {
	h := nats.Header{}
	b, _ := json.Marshal(meta)
	h.Set(headerWork, string(b))
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	reply, err := requestChunks(ctx, nc, subject, h, enc)
	switch {
	case err != nil:
		return fmt.Errorf("smtd: sending a contribution: %w", err)
	case string(reply.Data) != "ok":
		return fmt.Errorf("smtd: contribution refused: %s", reply.Data)
	}
	return nil
}

// failed logs a task that the worker could not do or deliver.
func (w *worker) failed(t *workTask, err error) {
	w.pl.log.Warn().Err(err).Uint64("task", t.ID).Msg("worker mode: the task failed; the owner hands it out again after workers.task_timeout")
}

// fetch reads a task's messages from the stream by sequence and decodes
// them; invalid ones are rejected (counted in meta and reported like a
// single daemon's), sequences gone from the stream are counted missing.
func (w *worker) fetch(ctx context.Context, t *workTask, meta *workMeta) ([]sample, error) {
	pl := w.pl
	if w.stream == nil {
		s, err := w.d.js.Stream(ctx, pl.stream.name)
		if err != nil {
			return nil, err
		}
		w.stream = s
	}
	batch := make([]sample, 0, len(t.Seqs))
	for _, seq := range t.Seqs {
		m, err := w.stream.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			meta.Missing++
			continue
		}
		if err != nil {
			return nil, err
		}
		meta.Received++
		s, err := decode(&pl.cfg, m.Header, m.Data)
		if err != nil {
			reason := pl.rejectMsg(seq, err)
			if meta.Rejected == nil {
				meta.Rejected = map[string]int64{}
			}
			meta.Rejected[reason]++
			continue
		}
		s.seq = seq
		batch = append(batch, s)
	}
	return batch, nil
}

// startWorker starts the worker of pipeline main (in worker mode), with a
// pipeline of its own for its config, counters and outputs, at nice
// (service.learn_nice); it runs until runCtx is done.
func (d *Daemon) startWorker(ctx, runCtx context.Context, main *pipeline, nice int) error {
	pl := newPipeline(d, main.cfg)
	st, err := ensureStream(ctx, d.js, d.cfg, &pl.cfg)
	if err != nil {
		return err
	}
	pl.stream = st
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		pl.learner = d.newLearnerThread(pl.log, nice)
		defer pl.learner.stop()
		d.runWorker(runCtx, pl, main)
	}()
	return nil
}
