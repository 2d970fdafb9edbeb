package daemon

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/nats-io/nats.go"
	"gonum.org/v1/gonum/mat"

	"github.com/smtd/smtd/config"
	"github.com/smtd/smtd/sgd"
)

// admmModel is dictionary learning by kernel matching
// (dictionary-learning-kernel-matching-admm, sections 2-4; sgd.ADMM) on
// whole images: the pixels of an image, after cropping, are one sample x,
// and its output is its code z over the K atoms, computed with the
// dictionary as it was before the minibatch's step (the Z-steps of
// eq. 9, or of eq. 13 on the simplex). Each minibatch then takes the
// Z-, P-, M- and W-steps of the configured schedule. The per-sample
// variables live only while their minibatch is in flight; the implicit
// dictionary A and the running reconstruction R² come from decayed sums,
// so memory does not grow with the stream. The atoms are published after
// every checkpoint.
type admmModel struct {
	admm  *sgd.ADMM
	shape config.ImageShape
	crop  int

	// Workspaces, never shared with snapshots.
	x, z mat.Dense
}

func newADMMModel(p *config.Pipeline, src rand.Source) *admmModel {
	return &admmModel{admm: sgd.NewADMM(admmSettings(p), p.ADMMInputs(), src), shape: p.Image, crop: p.ADMM.Crop}
}

func admmSettings(p *config.Pipeline) sgd.ADMMSettings {
	a := p.ADMM
	prior := sgd.PriorSparse
	if a.Prior == config.PriorSimplex {
		prior = sgd.PriorSimplex
	}
	return sgd.ADMMSettings{
		K: a.Atoms, Prior: prior, Schedule: sgd.Schedule(a.Schedule),
		Lambda: a.Lambda, Omega: a.Omega, Rho: a.Rho, LearningRate: a.LearningRate,
		Iterations: a.Iterations, Passes: a.Passes, Memory: a.Memory,
	}
}

func (m *admmModel) encode(batch []sample) []output {
	m.z.Reset()
	m.admm.Encode(&m.z, flatten(&m.x, batch, m.shape, m.crop))
	return rowOutputs(&m.z, batch)
}

// learn publishes the codes of the dictionary before the step, then
// learns; a refused step leaves the learner as it was.
func (m *admmModel) learn(batch []sample) ([]output, error) {
	out := m.encode(batch)
	if err := m.admm.Step(&m.x); err != nil {
		return out, fmt.Errorf("admm: %w", err)
	}
	return out, nil
}

func (m *admmModel) flush() error { return nil }

func (m *admmModel) snapshot() model {
	return &admmModel{admm: m.admm.Clone(), shape: m.shape, crop: m.crop}
}

func (m *admmModel) rollback(to model) { m.admm = to.(*admmModel).admm.Clone() }

func (m *admmModel) finite() bool { return m.admm.Finite() }

func (m *admmModel) tune(p *config.Pipeline) { mustTune(m.admm.SetSettings(admmSettings(p))) }

func (m *admmModel) sections() ([]Section, error) {
	b, err := m.admm.MarshalBinary()
	return []Section{{Name: "admm", Data: b}}, err
}

// restore reads the learner of a checkpoint, keeping the configured
// settings; one of another shape (atoms, inputs, prior) is refused.
func (m *admmModel) restore(secs []Section) error {
	b, err := findSection(secs, "admm")
	if err != nil {
		return err
	}
	// UnmarshalBinary refuses a state of another shape or prior.
	a := m.admm.Clone()
	if err := a.UnmarshalBinary(b); err != nil {
		return fmt.Errorf("admm: %w", err)
	}
	if err := a.SetSettings(m.admm.Settings()); err != nil {
		return fmt.Errorf("admm: checkpoint does not fit the config: %w", err)
	}
	m.admm = a
	return nil
}

func (m *admmModel) describe() map[string]any {
	s := m.admm.Settings()
	return map[string]any{
		"learner":  config.LearnerADMM,
		"image":    fmt.Sprintf("%dx%dx%d, crop %d", m.shape.Height, m.shape.Width, m.shape.Channels, m.crop),
		"atoms":    s.K,
		"inputs":   m.admm.Dim(),
		"prior":    s.Prior.String(),
		"schedule": int(s.Schedule),
		"steps":    m.admm.Steps(),
		"samples":  m.admm.Samples(),
		"r2":       m.admm.R2(),
	}
}

// atomsMsg is the implicit dictionary as a message on subject: K rows of
// N float32 (little-endian), Smtd-Shape "K,N".
func (m *admmModel) atomsMsg(subject string, version uint64) *nats.Msg {
	a := m.admm.Dictionary()
	k, n := a.Dims()
	msg := nats.NewMsg(subject)
	msg.Header.Set(HeaderShape, fmt.Sprintf("%d,%d", k, n))
	msg.Header.Set(HeaderDtype, "float32")
	msg.Header.Set(HeaderModelVersion, fmt.Sprint(version))
	msg.Data = make([]byte, 0, 4*k*n)
	for i := range k {
		for _, x := range a.RawRowView(i) {
			msg.Data = binary.LittleEndian.AppendUint32(msg.Data, math.Float32bits(float32(x)))
		}
	}
	return msg
}
