package daemon

import (
	"errors"
	"fmt"
	"runtime/debug"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"github.com/rs/zerolog"
)

// queryPool answers embed and neighbours queries on a bounded set of
// worker goroutines, so that queries use the cores the pipelines leave
// free instead of queueing on the one goroutine of a micro endpoint's
// subscription, and so that an overload is answered at once.
//
// The endpoint handler does nothing but queue: a query that finds
// the queue (service.query_queue) full is answered immediately with
//
//	Nats-Service-Error-Code: 503
//	Nats-Service-Error: busy: ...
//
// Workers (service.query_workers) encode from the pipeline's published
// snapshot. A snapshot's parameters are only ever read, by any number of
// goroutines; the workspaces an encode writes are the worker's own: a
// worker encodes with a reader of the snapshot (model.reader), which
// shares the snapshot's parameters and keeps the worker's workspaces from
// one snapshot to the next. So a new snapshot, published after every
// batch, costs a worker no copy of the model and no new workspaces. The
// live model is never touched. Queries never train.
//
// While a pipeline's queries wait for a worker to start on them, its
// learner may give way to them between the stages of a batch, for at
// most service.learn_yield per batch (see queryGate; default 0: never).
//
// A worker replies by publishing on the request's reply subject itself,
// with the headers micro.Request.Error would set, because a micro.Request
// must not be used once its handler has returned.
type queryPool struct {
	nc      *nats.Conn
	log     zerolog.Logger
	workers int
	jobs    chan query
	stats   map[*pipeline]*queryStats // fixed at creation

	mu     sync.RWMutex // closed and close(jobs) against sends on jobs
	closed bool
	wg     sync.WaitGroup
}

// queryKind says which endpoint a query came from.
type queryKind uint8

const (
	embedQuery queryKind = iota
	neighboursQuery
)

// query is one request waiting for a worker. It holds copies of what it
// needs of the micro.Request, which is not used after the handler returns.
type query struct {
	pl     *pipeline
	kind   queryKind
	reply  string
	header nats.Header
	data   []byte
	start  time.Time
}

// queryReply is an answer (data and header) or, when code is not empty,
// an error reply.
type queryReply struct {
	data   []byte
	header nats.Header
	code   string
	desc   string
}

func errorReply(code, desc string) queryReply { return queryReply{code: code, desc: desc} }

// newQueryPool starts workers goroutines (when workers is 0, startProcs:
// GOMAXPROCS as the process started, without the learners' Ps) that
// serve the queries of pipelines from a queue of queue entries.
func newQueryPool(nc *nats.Conn, log zerolog.Logger, pipelines []*pipeline, workers, queue int) *queryPool {
	if workers <= 0 {
		workers = startProcs
	}
	p := &queryPool{nc: nc, log: log, workers: workers, jobs: make(chan query, queue), stats: map[*pipeline]*queryStats{}}
	for _, pl := range pipelines {
		p.stats[pl] = &queryStats{}
	}
	p.wg.Add(workers)
	for range workers {
		go p.work()
	}
	return p
}

// handler returns the micro handler of pipeline pl's endpoint of kind k:
// it queues the request, or answers busy at once.
func (p *queryPool) handler(pl *pipeline, k queryKind) micro.HandlerFunc {
	return func(req micro.Request) {
		q := query{pl: pl, kind: k, reply: req.Reply(), header: nats.Header(req.Headers()), data: req.Data(), start: time.Now()}
		switch err := p.submit(q); {
		case err == errPoolStopped:
			p.stats[pl].failed.Add(1)
			req.Error("503", "shutting down", nil)
		case err != nil:
			p.stats[pl].busy.Add(1)
			req.Error("503", p.busyReason(), nil)
		}
	}
}

// busyReason is the description of a busy reply.
func (p *queryPool) busyReason() string {
	return fmt.Sprintf("busy: %d queries wait for %d workers; retry later, or raise service.query_workers or service.query_queue", cap(p.jobs), p.workers)
}

var (
	errPoolBusy    = errors.New("smtd: query queue full")
	errPoolStopped = errors.New("smtd: query pool stopped")
)

// submit queues q for a worker, without waiting: errPoolBusy when the
// queue is full, errPoolStopped once the pool is stopped. A queued query
// waits on its pipeline's gate until a worker starts on it.
func (p *queryPool) submit(q query) error {
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.closed {
		return errPoolStopped
	}
	q.pl.gate.enter()
	select {
	case p.jobs <- q:
		return nil
	default:
		q.pl.gate.leave()
		return errPoolBusy
	}
}

// stop refuses new queries (they get busy replies), lets the workers
// answer those queued, and waits for them. It is idempotent.
func (p *queryPool) stop() {
	p.mu.Lock()
	if !p.closed {
		p.closed = true
		close(p.jobs)
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// encoder is a worker's reader of one published snapshot, which it
// holds (pipeline.acquire) until it moves to a newer one.
type encoder struct {
	from  *snapshot
	model model  // from.model.reader(...)
	reply []byte // the payload of the worker's last reply, published before the next
}

// work answers queries until the pool stops.
func (p *queryPool) work() {
	defer p.wg.Done()
	encoders := map[*pipeline]*encoder{}
	defer releaseEncoders(encoders)
	for q := range p.jobs {
		q.pl.gate.leave()
		w := startWork()
		r := p.answer(&q, encoders)
		p.respond(&q, &r)
		p.stats[q.pl].worked(w)
	}
}

// work is when a query worker started on a query: the wall clock, and
// its thread and that thread's CPU time (ok false: unknown).
type work struct {
	start time.Time
	tid   int
	cpu   time.Duration
	ok    bool
}

// startWork reads the wall clock before the thread's clock, and worked
// after it, so that the wall time spans the CPU time measured.
func startWork() work {
	start := time.Now()
	tid, cpu, ok := threadCPU()
	return work{start, tid, cpu, ok}
}

// answer computes the reply to q. A panic while encoding (a bug: inputs
// are validated before they reach a model) answers that query with a 500
// error and is logged with its stack; the worker drops its reader of the
// pipeline, whose workspaces it may have left half written, and serves on.
func (p *queryPool) answer(q *query, encoders map[*pipeline]*encoder) (r queryReply) {
	defer func() {
		if v := recover(); v != nil {
			if e := encoders[q.pl]; e != nil {
				e.from.release()
				delete(encoders, q.pl)
			}
			p.log.Error().Str("pipeline", q.pl.name).Interface("panic", v).Str("stack", string(debug.Stack())).Msg("query failed")
			r = errorReply("500", fmt.Sprintf("internal error: %v", v))
		}
	}()
	switch q.kind {
	case embedQuery:
		return q.pl.embed(encoders, q.header, q.data)
	case neighboursQuery:
		return q.pl.neighbours(q.data)
	}
	return errorReply("500", "unknown query")
}

// respond publishes r on the query's reply subject and counts it. It
// counts first, so that a client that has its reply finds it counted in
// the status.
func (p *queryPool) respond(q *query, r *queryReply) {
	m := &nats.Msg{Subject: q.reply, Data: r.data, Header: r.header}
	if r.code != "" {
		m.Header = nats.Header{micro.ErrorHeader: {r.desc}, micro.ErrorCodeHeader: {r.code}}
	}
	st := p.stats[q.pl]
	if q.reply == "" {
		st.failed.Add(1) // a publish, not a request: nobody to answer
		return
	}
	if r.code != "" {
		st.failed.Add(1)
		p.nc.PublishMsg(m) // a lost error reply times out at the client
		return
	}
	st.answered.Add(1)
	if err := p.nc.PublishMsg(m); err != nil {
		st.answered.Add(-1)
		st.failed.Add(1)
		return
	}
	took := time.Since(q.start)
	st.observe(took)
	q.pl.obs.query[q.kind].Observe(took.Seconds())
}

// releaseEncoders releases the snapshots the encoders hold.
func releaseEncoders(encoders map[*pipeline]*encoder) {
	for _, e := range encoders {
		e.from.release()
	}
}

// snapshotEncoder returns the worker's reader of the pipeline's current
// snapshot (nil before the first), moving its workspaces to a reader of
// the newer snapshot when the pipeline has published one.
func (pl *pipeline) snapshotEncoder(encoders map[*pipeline]*encoder) *encoder {
	e := encoders[pl]
	if e != nil && e.from == pl.snap.Load() {
		return e // held since the reader was made
	}
	snap := pl.acquire()
	if snap == nil {
		return nil
	}
	if e == nil {
		e = &encoder{}
		encoders[pl] = e
	} else {
		e.from.release()
	}
	e.from, e.model = snap, snap.model.reader(e.model)
	return e
}

// queryLatencies is how many of the latest answered queries the latency
// percentiles of status are computed over.
const queryLatencies = 1024

// queryStats are one pipeline's query counters, readable from any
// goroutine.
type queryStats struct {
	// answered counts queries answered with an embedding or neighbours;
	// busy, those refused at once because the queue was full; failed,
	// the other error replies (bad request, model not ready, ...).
	answered, busy, failed atomic.Int64
	// timed counts the queries whose work was timed on one thread;
	// workNs and offCPUNs sum their work and the part of it their
	// threads did not run; mostlyOffCPU counts those that did not run
	// for more than half of their work (see QueryStatus).
	timed, workNs, offCPUNs, mostlyOffCPU atomic.Int64

	mu      sync.Mutex
	latency [queryLatencies]time.Duration // ring of the latest answers
	n       int                           // how many of latency are set
	next    int
}

func (s *queryStats) observe(d time.Duration) {
	s.mu.Lock()
	s.latency[s.next] = d
	s.next = (s.next + 1) % len(s.latency)
	s.n = min(s.n+1, len(s.latency))
	s.mu.Unlock()
}

// worked adds the time a worker spent on a query it started at w, if its
// goroutine was on the same thread at both ends and that thread's CPU
// time is known. A goroutine that left its thread and came back to it
// between the two can show its thread running longer than the wall
// clock (the thread ran other goroutines), or the clock reads can
// straddle a move; such a query is not timed.
func (s *queryStats) worked(w work) {
	tid, cpu, ok := threadCPU()
	if !ok || !w.ok || tid != w.tid {
		return
	}
	wall, ran := time.Since(w.start), cpu-w.cpu
	if ran < 0 || ran > wall {
		return
	}
	off := wall - ran
	s.timed.Add(1)
	s.workNs.Add(int64(wall))
	s.offCPUNs.Add(int64(off))
	if 2*off > wall {
		s.mostlyOffCPU.Add(1)
	}
}

// QueryStatus counts a pipeline's embed and neighbours queries since the
// daemon started.
type QueryStatus struct {
	// Answered queries got an embedding or neighbours; Busy ones found the
	// queue full and got a 503 "busy: ..." error at once; Errors got
	// another error (bad request, model not ready, unknown word, ...).
	Answered int64 `json:"answered"`
	Busy     int64 `json:"busy"`
	Errors   int64 `json:"errors"`
	// P50Ms and P99Ms are the median and 99th percentile, in
	// milliseconds, of the time from a query's arrival to its answer over
	// the last 1024 answered queries; 0 before the first.
	P50Ms float64 `json:"latency_p50_ms"`
	P99Ms float64 `json:"latency_p99_ms"`
	// Timed queries are those whose work (from a worker taking the query
	// to its reply going out) was timed; on Linux, every query whose
	// goroutine stayed on one OS thread meanwhile, elsewhere none.
	// WorkSeconds sums their work and OffCPUSeconds the part of it their
	// threads did not run (wall time minus the thread's CPU time): they
	// waited for a core that other threads, of this process or others,
	// had, or slept while the worker waited for a lock. Time the thread
	// spent on other goroutines, or on the collector's assists, counts
	// as run. MostlyOffCPU counts the timed queries whose thread did not
	// run for more than half of their work. A share of OffCPUSeconds
	// that grows with load says the daemon needs more cores, not faster
	// code.
	Timed         int64   `json:"timed"`
	WorkSeconds   float64 `json:"work_seconds"`
	OffCPUSeconds float64 `json:"off_cpu_seconds"`
	MostlyOffCPU  int64   `json:"mostly_off_cpu"`
}

func (s *queryStats) status() QueryStatus {
	st := QueryStatus{
		Answered: s.answered.Load(), Busy: s.busy.Load(), Errors: s.failed.Load(),
		Timed: s.timed.Load(), WorkSeconds: time.Duration(s.workNs.Load()).Seconds(),
		OffCPUSeconds: time.Duration(s.offCPUNs.Load()).Seconds(), MostlyOffCPU: s.mostlyOffCPU.Load(),
	}
	s.mu.Lock()
	lat := slices.Clone(s.latency[:s.n])
	s.mu.Unlock()
	if len(lat) == 0 {
		return st
	}
	slices.Sort(lat)
	ms := func(q float64) float64 {
		return float64(lat[min(int(q*float64(len(lat))), len(lat)-1)]) / float64(time.Millisecond)
	}
	st.P50Ms, st.P99Ms = ms(0.5), ms(0.99)
	return st
}

// giveWayToQueries sets the cores the next batch may score on
// (Daemon.learnCores: one while the daemon serves queries), and makes the
// pipeline's model, if it learns in stages, wait between the stages of
// the next batch while the pipeline's queries wait for a worker, for at
// most service.learn_yield in all. Both are set before every batch, so
// that a model built anew (restored, reset) gives way as well.
func (pl *pipeline) giveWayToQueries() {
	pl.d.setLearnCores(pl.model)
	m, ok := pl.model.(stagedLearner)
	if !ok {
		return
	}
	pl.yieldFor = pl.yield
	if pl.yield > 0 {
		m.betweenStages(func() { pl.yieldFor -= pl.gate.wait(pl.yieldFor) })
	} else {
		m.betweenStages(nil)
	}
}

// queryGate counts the queries of one pipeline that wait for a worker to
// start on them, from the moment they are queued, so that the pipeline's
// learner can give way to them: on two cores, a learner that runs a batch
// of 32 MNIST images (about 25 ms of one core) straight through, with the
// embedded NATS server and the garbage collector busy on the other core,
// leaves a query's worker runnable but without a P until the runtime
// preempts someone, every 10 ms. A learner that blocks while queries
// wait hands its P to them; once they are being encoded it goes on. The
// zero value is ready to use.
type queryGate struct {
	last    atomic.Int64 // when the newest query was queued or turned away busy, Unix ns
	mu      sync.Mutex
	waiting int
	clear   chan struct{} // closed when waiting drops to 0; nil at 0
}

func (g *queryGate) enter() {
	g.last.Store(time.Now().UnixNano())
	g.mu.Lock()
	if g.waiting == 0 {
		g.clear = make(chan struct{})
	}
	g.waiting++
	g.mu.Unlock()
}

func (g *queryGate) leave() {
	g.mu.Lock()
	if g.waiting--; g.waiting == 0 {
		close(g.clear)
		g.clear = nil
	}
	g.mu.Unlock()
}

// wait blocks until no query waits, or for at most max, and returns how
// long it blocked: 0 when no query waits or max ≤ 0.
func (g *queryGate) wait(max time.Duration) time.Duration {
	if max <= 0 {
		return 0
	}
	g.mu.Lock()
	c := g.clear
	g.mu.Unlock()
	if c == nil {
		return 0
	}
	start := time.Now()
	t := time.NewTimer(max)
	defer t.Stop()
	select {
	case <-c:
	case <-t.C:
	}
	return time.Since(start)
}
