package daemon

import (
	"os"
	"runtime"
)

// startProcs is GOMAXPROCS as the process started: the Ps the daemon keeps
// for NATS traffic and queries when learners run on threads of their own.
var startProcs = runtime.GOMAXPROCS(0)

// learnerNice is the nice value the daemon's learners run at:
// service.learn_nice, or 0 where a thread has no priority of its own
// (then it says so in the log).
func (d *Daemon) learnerNice() int {
	n := d.cfg.Service.LearnNice
	if n > 0 && !threadPriorities {
		d.log.Warn().Str("os", runtime.GOOS).Int("learn_nice", n).Msg("service.learn_nice is ignored on this system: learners run at the daemon's priority")
		return 0
	}
	return n
}

// reserveLearnerProcs gives each learning goroutine (a pipeline's learner,
// and a pipeline's worker in worker mode) one P more than the process
// started with, when learners run below the daemon's priority (nice > 0):
// a learner that runs holds its P, and the Ps of the rest of the daemon
// stay as many as before. With the GOMAXPROCS environment variable set it
// changes nothing. Shutdown sets GOMAXPROCS back.
func (d *Daemon) reserveLearnerProcs(nice int) {
	if nice == 0 || os.Getenv("GOMAXPROCS") != "" {
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
