package daemon

import (
	"os"
	"runtime"
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

// learnBelowDaemon runs the calling learning goroutine at nice n
// (learnerNice, see lowerLearnerPriority); with 0, or if the system
// refuses, at the daemon's priority.
func (pl *pipeline) learnBelowDaemon(n int) {
	if n == 0 {
		return
	}
	if err := lowerLearnerPriority(n); err != nil {
		pl.log.Warn().Err(err).Msg("learning at the daemon's priority")
	}
}
