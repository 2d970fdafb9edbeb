package daemon

import (
	"os"
	"runtime"
)

// startProcs is GOMAXPROCS as the process started: the Ps the daemon keeps
// for NATS traffic and queries when learners run on threads of their own.
var startProcs = runtime.GOMAXPROCS(0)

// reserveLearnerProcs gives each learning goroutine (a pipeline's learner,
// and a pipeline's worker in worker mode) one P more than the process
// started with, when learners run below the daemon's priority
// (service.learn_nice > 0): a learner that runs holds its P, and the Ps of
// the rest of the daemon stay as many as before. With the GOMAXPROCS
// environment variable set it changes nothing. Shutdown sets GOMAXPROCS
// back.
func (d *Daemon) reserveLearnerProcs() {
	if d.cfg.Service.LearnNice == 0 || os.Getenv("GOMAXPROCS") != "" {
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
		d.log.Info().Int("nice", d.cfg.Service.LearnNice).Int("gomaxprocs", startProcs+learners).Int("was", was).
			Msg("learners run on threads of their own below the daemon's priority (service.learn_nice), with a P each")
	}
}

// learnBelowDaemon runs the calling learning goroutine at nice n
// (service.learn_nice, see lowerLearnerPriority); with 0, or where it
// cannot, at the daemon's priority.
func (pl *pipeline) learnBelowDaemon(n int) {
	if n == 0 {
		return
	}
	if err := lowerLearnerPriority(n); err != nil {
		pl.log.Warn().Err(err).Msg("learning at the daemon's priority")
	}
}
