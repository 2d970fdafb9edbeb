package daemon

import (
	"os"
	"runtime"
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

// reserveLearnerProcs gives each learning goroutine (a pipeline's learner,
// and a pipeline's worker in worker mode) one P more than the process
// started with, when learners run below the daemon's priority (nice > 0):
// a learner that runs holds its P, and the Ps of the rest of the daemon
// stay as many as before. Shutdown sets GOMAXPROCS back.
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
	was := runtime.GOMAXPROCS(startProcs + learners)
	d.procsBefore = was
	if was != startProcs+learners {
		d.log.Info().Int("nice", nice).Int("gomaxprocs", startProcs+learners).Int("was", was).
			Msg("learners run on threads of their own below the daemon's priority (service.learn_nice), with a P each")
	}
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
	if t == nil || !t.d.queriedWithin(queriesRecently) {
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
