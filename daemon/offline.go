package daemon

import (
	"math/rand/v2"
	"runtime"

	"github.com/nats-io/nats.go"

	"github.com/smtd/smtd/config"
)

// OfflineLearner is the model of one pipeline driven in this process with
// no NATS, no snapshots, checks, outputs or acknowledgements: the decoding
// and learning code a daemon's pipeline runs, alone. Its throughput is the
// library's; the daemon's overhead is measured against it (`smtd bench
// throughput`). An OfflineLearner is not safe for concurrent use.
type OfflineLearner struct {
	p     config.Pipeline
	m     model
	batch []sample
}

// NewOfflineLearner returns the empty model of pipeline p, seeded as the
// daemon seeds it (p.Seed). p must be valid (config.Config.Validate).
func NewOfflineLearner(p config.Pipeline) *OfflineLearner {
	src := rand.NewPCG(p.Seed, 0x736d7464) // as newPipeline
	m := newModel(&p, src)
	if c, ok := m.(coresLearner); ok {
		c.learnOn(runtime.GOMAXPROCS(0)) // as a daemon nobody queries
	}
	return &OfflineLearner{p: p, m: m}
}

// Learn decodes msgs, input messages as they arrive on the pipeline's
// subject, and learns them as one minibatch. It returns how many were
// valid and learned from, and the learner's error, if any, as the daemon
// logs it (the model may then have skipped the batch).
func (l *OfflineLearner) Learn(msgs []*nats.Msg) (int, error) {
	l.batch = l.batch[:0]
	for _, m := range msgs {
		s, err := decode(&l.p, m.Header, m.Data)
		if err != nil {
			continue
		}
		l.batch = append(l.batch, s)
	}
	if len(l.batch) == 0 {
		return 0, nil
	}
	_, err := l.m.learn(l.batch)
	return len(l.batch), err
}
