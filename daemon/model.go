package daemon

import (
	"errors"
	"fmt"
	"math/rand/v2"

	"github.com/smtd/smtd/config"
)

// model is the chain of learning stages of one pipeline. It is owned by
// the pipeline's goroutine; queries read immutable clones (snapshots) of
// it through readers.
type model interface {
	// encode returns the output vector of each sample, computed with the
	// model as it is (it does not learn). Text models also return tokens.
	encode(batch []sample) []output
	// learn updates the model with one minibatch of valid samples and
	// returns the output of each sample as the learning step coded it (so
	// that no work is done twice). Its randomness comes only from the
	// source the model was built with. An error reports a stage that
	// could not learn from this batch (and was left as it was); the
	// outputs are still valid. An error wrapping errRefused means no
	// stage learned: the model is exactly as before.
	learn(batch []sample) ([]output, error)
	// flush brings derived state up to date before a checkpoint.
	flush() error
	// snapshot returns an immutable deep copy of what encode and describe
	// need, sharing nothing mutable with the model.
	snapshot() model
	// reader returns a model that encodes with the parameters of the
	// snapshot m, which it only reads, in the workspaces of prev when
	// prev is a reader of the same kind (nil: new ones). Any number of
	// readers of one snapshot, each with workspaces of its own, may
	// encode at once; nothing but encode and describe may be called on
	// a reader, and m must not learn meanwhile. A reader's outputs may
	// share its memory: they are valid until its next encode.
	reader(prev model) model
	// rollback returns the parameters to those of a snapshot, after a
	// learning step that diverged.
	rollback(to model)
	// check reports whether every stage is finite and non-degenerate;
	// an error names the stage and what is wrong, and makes the pipeline
	// roll the model back.
	check() error
	// tune applies the live fields of p (learning rates, thresholds, ...).
	tune(p *config.Pipeline)
	// sections returns the model's state for a checkpoint.
	sections() ([]Section, error)
	// restore sets the model's state from checkpoint sections; on error
	// the model is unchanged.
	restore(secs []Section) error
	// describe summarises the model for status and inspect.
	describe() map[string]any
}

// stagedLearner is a model whose learn calls a function between the
// stages of a batch (nil: none), on the learning goroutine. The pipeline
// gives way there to the queries in flight (service.learn_yield); the
// library (OfflineLearner) sets none.
type stagedLearner interface {
	betweenStages(f func())
}

// coresLearner is a model whose learning step can score (and, for
// images, extract, whiten, step and embed) on several goroutines at
// once, with the same results as on one (online.KMeans.SetCores,
// sgd.SMT.SetCores). The pipeline sets the number before every
// batch (Daemon.learnCores); snapshots and readers score on one.
type coresLearner interface {
	learnOn(cores int)
}

// Section is one named part of a model's serialised state.
type Section struct {
	Name string
	Data []byte
}

// newModel builds the empty model of pipeline p, drawing randomness from
// src. The pipeline checkpoints src with the model.
func newModel(p *config.Pipeline, src rand.Source) model {
	if p.Modality == config.Text {
		return newTextModel(p, src)
	}
	switch p.Learner {
	case config.LearnerKSM:
		return newKSMModel(p, src)
	case config.LearnerADMM:
		return newADMMModel(p, src)
	}
	return newImageModel(p, src)
}

// findSection returns the data of the named Section.
func findSection(secs []Section, name string) ([]byte, error) {
	for _, s := range secs {
		if s.Name == name {
			return s.Data, nil
		}
	}
	return nil, fmt.Errorf("smtd: checkpoint has no %q Section", name)
}

// errRefused is wrapped by learn errors after which the model is
// unchanged: the batch does not count as a model version.
var errRefused = errors.New("step refused, model unchanged")

// stageError names the stage of a model whose check failed.
func stageError(stage string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%s: %w", stage, err)
}
