package daemon

import (
	"fmt"
	"math/rand/v2"

	"github.com/smtd/smtd/config"
	"github.com/smtd/smtd/online"
)

// model is the chain of learning stages of one pipeline. It is owned by
// the pipeline's goroutine; queries use clones (snapshots) of it.
type model interface {
	// encode returns the output vector of each sample, computed with the
	// model as it is (it does not learn). Text models also return tokens.
	encode(batch []sample) []output
	// learn updates the model with one minibatch of valid samples and
	// returns the output of each sample as the learning step coded it (so
	// that no work is done twice). Its randomness comes only from the
	// source the model was built with. An error reports a stage that
	// could not learn from this batch (and was left as it was); the
	// outputs are still valid.
	learn(batch []sample) ([]output, error)
	// flush brings derived state up to date before a checkpoint.
	flush() error
	// snapshot returns an immutable deep copy of what encode and describe
	// need, sharing nothing mutable with the model.
	snapshot() model
	// rollback returns the parameters to those of a snapshot, after a
	// learning step that diverged.
	rollback(to model)
	// finite reports whether every parameter is finite; false means the
	// learner diverged.
	finite() bool
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

// Section is one named part of a model's serialised state.
type Section struct {
	Name string
	Data []byte
}

// newModel builds the empty model of pipeline p, drawing randomness from
// src. The pipeline checkpoints src with the model.
func newModel(p *config.Pipeline, src rand.Source) model {
	if p.Modality == config.Text {
		return &textModel{vocab: online.NewVocabulary(p.Text.Vocabulary)}
	}
	if p.Learner == config.LearnerKSM {
		return newKSMModel(p, src)
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

// textModel codes word tokens 1-hot over an online vocabulary. Its output
// for a message is the id of each token (as float32), in order.
type textModel struct {
	vocab *online.Vocabulary
}

func (m *textModel) encode(batch []sample) []output {
	out := make([]output, len(batch))
	for i, s := range batch {
		v := make([]float32, len(s.tokens))
		for j, t := range s.tokens {
			id, ok := m.vocab.Lookup(t)
			if !ok {
				id = -1 // not (yet) in the vocabulary
			}
			v[j] = float32(id)
		}
		out[i] = output{vector: v, tokens: s.tokens, source: s}
	}
	return out
}

func (m *textModel) learn(batch []sample) ([]output, error) {
	out := make([]output, len(batch))
	for i, s := range batch {
		v := make([]float32, len(s.tokens))
		for j, t := range s.tokens {
			v[j] = float32(m.vocab.Add(t))
		}
		out[i] = output{vector: v, tokens: s.tokens, source: s}
	}
	return out, nil
}

func (m *textModel) flush() error            { return nil }
func (m *textModel) snapshot() model         { return &textModel{vocab: m.vocab.Clone()} }
func (m *textModel) rollback(to model)       { m.vocab = to.(*textModel).vocab.Clone() }
func (m *textModel) finite() bool            { return true }
func (m *textModel) tune(p *config.Pipeline) {}

func (m *textModel) sections() ([]Section, error) {
	b, err := m.vocab.MarshalBinary()
	return []Section{{Name: "vocabulary", Data: b}}, err
}

func (m *textModel) restore(secs []Section) error {
	b, err := findSection(secs, "vocabulary")
	if err != nil {
		return err
	}
	v := online.NewVocabulary(m.vocab.Size())
	if err := v.UnmarshalBinary(b); err != nil {
		return err
	}
	if v.Size() != m.vocab.Size() {
		return fmt.Errorf("smtd: checkpoint vocabulary holds %d words, config text.vocabulary is %d", v.Size(), m.vocab.Size())
	}
	m.vocab = v
	return nil
}

func (m *textModel) describe() map[string]any {
	return map[string]any{"vocabulary_size": m.vocab.Size(), "words": m.vocab.Len()}
}
