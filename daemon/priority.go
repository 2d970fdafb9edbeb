package daemon

import (
	"os"
	"runtime"
	"sync"
	"time"

	"github.com/rs/zerolog"
)

// startProcs is GOMAXPROCS as the process started: the Ps the daemon keeps
// for NATS traffic and queries when learners run on threads of their own.
var startProcs = runtime.GOMAXPROCS(0)

// learnerNice is the nice value the daemon's learners run at:
// service.learn_nice; or 0, with a line in the log (not a warning: the
// default config asks for it everywhere), where a thread has no
// priority of its own, or where the GOMAXPROCS environment variable fixes
// the Ps (a learner at a lower priority that holds one of them would only
// lose the core to other processes: bench cluster's GOMAXPROCS=1 workers
// learned more slowly that way).
func (d *Daemon) learnerNice() int {
	n := d.cfg.Service.LearnNice
	switch {
	case n > 0 && !threadPriorities:
		d.log.Info().Str("os", runtime.GOOS).Int("learn_nice", n).Msg("service.learn_nice is ignored on this system: learners run at the daemon's priority")
		return 0
	case n > 0 && os.Getenv("GOMAXPROCS") != "":
		d.log.Info().Str("GOMAXPROCS", os.Getenv("GOMAXPROCS")).Int("learn_nice", n).Msg("GOMAXPROCS is set: learners run at the daemon's priority, without a P of their own (service.learn_nice)")
		return 0
	}
	return n
}

// reserveLearnerProcs prepares one P more than the process started with
// for each learning goroutine (a pipeline's learner, and a pipeline's
// worker in worker mode), when learners run below the daemon's priority
// (nice > 0), which fitLearnerProcs adds while the daemon serves queries:
// a niced learner holds its P, and the Ps of the rest of the daemon stay
// as many as before. Without queries the learners run at the daemon's
// priority on the Ps it started with: with one P more than the cores,
// the default pipeline's learning from a backlog ran on 1.33-1.36 of two
// cores against 1.46-1.48 without it, 17-22% under the library's rate
// against 2-11% (BENCHMARKS.md, "The daemon's Ps while nobody queries").
func (d *Daemon) reserveLearnerProcs(nice int) {
	if nice == 0 {
		return
	}
	learners := len(d.cfg.Pipelines)
	for _, p := range d.cfg.Pipelines {
		if p.Workers.Enabled {
			learners++
		}
	}
	d.procs.raise = startProcs + learners
	d.log.Info().Int("nice", nice).Int("gomaxprocs", d.procs.raise).
		Msg("while queried, learners run on threads of their own below the daemon's priority (service.learn_nice), with a P each")
}

// learnerProcs is the GOMAXPROCS the daemon's learners run with: raise
// while the daemon serves queries, before otherwise.
type learnerProcs struct {
	mu      sync.Mutex
	raise   int  // startProcs plus a P a learner; 0: never raised
	raised  bool // GOMAXPROCS is raise
	before  int  // GOMAXPROCS before it was raised
	stopped bool // shut down: never raised again
}

// fitLearnerProcs raises GOMAXPROCS to reserveLearnerProcs' count when
// queried, and sets it back when not; it calls runtime.GOMAXPROCS, which
// stops the world for a moment, only when that changes.
func (d *Daemon) fitLearnerProcs(queried bool) {
	ps := &d.procs
	if ps.raise == 0 {
		return
	}
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if queried == ps.raised || ps.stopped {
		return
	}
	if queried {
		ps.before = runtime.GOMAXPROCS(ps.raise)
	} else {
		runtime.GOMAXPROCS(ps.before)
	}
	ps.raised = queried
	d.log.Debug().Bool("queried", queried).Int("gomaxprocs", runtime.GOMAXPROCS(0)).Msg("learners' Ps")
}

// stopLearnerProcs sets GOMAXPROCS back, if it was raised, for good.
func (d *Daemon) stopLearnerProcs() {
	ps := &d.procs
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if ps.raised {
		runtime.GOMAXPROCS(ps.before)
		ps.raised = false
	}
	ps.stopped = true
}

// queriesRecently is how long after a query the daemon's learners keep
// running at service.learn_nice: while the daemon serves queries, a
// learner gives them the cores; in between, it learns at the daemon's
// priority.
const queriesRecently = time.Second

// learnerThread runs one learning goroutine's work (a pipeline's batches,
// or its worker's tasks) at nice (service.learn_nice) while the daemon has
// received a query within queriesRecently, on an OS thread of its own
// started for it at that priority, and on the calling goroutine, at the
// daemon's priority, otherwise. The kernel lets an unprivileged thread
// raise its nice value but not lower it again, so the niced thread stays,
// parked between uses, until stop ends it: no other goroutine ever runs
// at the lowered priority. A nil learnerThread runs everything on the
// caller. Not safe for concurrent use.
type learnerThread struct {
	d    *Daemon
	log  zerolog.Logger
	nice int
	work chan func() // nil until the first niced run
	done chan struct{}
}

// newLearnerThread returns the learnerThread of a learner of d at nice
// (learnerNice); nil for 0.
func (d *Daemon) newLearnerThread(log zerolog.Logger, nice int) *learnerThread {
	if nice == 0 {
		return nil
	}
	return &learnerThread{d: d, log: log, nice: nice}
}

// run runs f to its end, at nice while the daemon serves queries.
func (t *learnerThread) run(f func()) {
	if t == nil {
		f()
		return
	}
	queried := t.d.queriedWithin(queriesRecently)
	t.d.fitLearnerProcs(queried)
	if !queried {
		f()
		return
	}
	if t.work == nil {
		t.start()
	}
	t.work <- f
	<-t.done
}

func (t *learnerThread) start() {
	t.work, t.done = make(chan func()), make(chan struct{})
	go func() {
		if err := lowerLearnerPriority(t.nice); err != nil {
			t.log.Warn().Err(err).Msg("learning at the daemon's priority")
		}
		for f := range t.work {
			f()
			t.done <- struct{}{}
		}
	}()
}

// stop ends the niced thread, if one was started. t is not used after.
func (t *learnerThread) stop() {
	if t != nil && t.work != nil {
		close(t.work)
	}
}

// learnCores is how many cores the next learning step may score on
// (online.KMeans.SetCores): one while the daemon serves queries (one
// arrived within queriesRecently), so that they find the other cores
// free, and service.learn_cores otherwise (0: startProcs, the cores the
// daemon started with).
func (d *Daemon) learnCores() int {
	if d.queriedWithin(queriesRecently) {
		return 1
	}
	if n := d.cfg.Service.LearnCores; n > 0 {
		return n
	}
	return startProcs
}

// setLearnCores sets the cores the next learning step of m scores on
// (learnCores), if m can score on several.
func (d *Daemon) setLearnCores(m model) {
	if c, ok := m.(coresLearner); ok {
		c.learnOn(d.learnCores())
	}
}

// queriedWithin reports whether a query of any of d's pipelines arrived
// within the last span (busy replies included).
func (d *Daemon) queriedWithin(span time.Duration) bool {
	since := time.Now().Add(-span).UnixNano()
	for _, pl := range d.pipelines {
		if pl.gate.last.Load() >= since {
			return true
		}
	}
	return false
}
