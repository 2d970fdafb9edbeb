package daemon

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/nats-io/nats.go"

	"github.com/smtd/smtd/config"
	"github.com/smtd/smtd/internal/state"
	"github.com/smtd/smtd/online"
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

	// warm learns the spherical k-means atoms of the warm start while
	// warmLeft samples remain; nil once ADMM has started from them.
	warm     *online.KMeans
	warmLeft int64

	// The workspaces of encode and learn (the codes in y); a reader of a
	// snapshot has its own (see reader).
	*rowWork
}

func newADMMModel(p *config.Pipeline, src rand.Source) *admmModel {
	m := &admmModel{admm: sgd.NewADMM(admmSettings(p), p.ADMMInputs(), src), shape: p.Image, crop: p.ADMM.Crop, rowWork: new(rowWork)}
	if p.ADMM.WarmStart > 0 {
		m.warm = online.NewKMeans(online.KMeansSettings{K: p.ADMM.Atoms, Dim: p.ADMMInputs()}, src)
		m.warmLeft = p.ADMM.WarmStart
	}
	return m
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
		Iterations: a.Iterations, WarmIterations: a.WarmIterations, Passes: a.Passes, Memory: a.Memory,
	}
}

func (m *admmModel) encode(batch []sample) []output {
	m.y.Reset()
	m.admm.Encode(&m.y, flatten(&m.x, batch, m.shape, m.crop))
	return rowOutputs(&m.y, batch)
}

// learn publishes the codes of the dictionary before the step, then
// learns; a refused step leaves the learner as it was.
func (m *admmModel) learn(batch []sample) ([]output, error) {
	out := m.encode(batch)
	if m.warm != nil {
		m.warm.Learn(&m.x, nil)
		if m.warmLeft -= int64(len(batch)); m.warmLeft <= 0 {
			if err := m.admm.WarmStart(m.warm.Atoms()); err != nil {
				return out, fmt.Errorf("admm: warm start: %w", err)
			}
			m.warm = nil
		}
		return out, nil
	}
	if err := m.admm.Step(&m.x); err != nil {
		return out, fmt.Errorf("admm: %w: %w", errRefused, err)
	}
	return out, nil
}

func (m *admmModel) flush() error { return nil }

func (m *admmModel) snapshot() model {
	return &admmModel{admm: m.admm.Clone(), shape: m.shape, crop: m.crop, rowWork: new(rowWork)}
}

// reader shares the learner of the snapshot m, whose Encode never changes
// it (its scratch comes from a pool), and encodes in the workspaces of
// prev, or new ones.
func (m *admmModel) reader(prev model) model {
	r := &admmModel{admm: m.admm, shape: m.shape, crop: m.crop, rowWork: new(rowWork)}
	if p, ok := prev.(*admmModel); ok {
		r.rowWork = p.rowWork
	}
	return r
}

func (m *admmModel) rollback(to model) { m.admm = to.(*admmModel).admm.Clone() }

func (m *admmModel) check() error { return stageError("admm", m.admm.Check()) }

func (m *admmModel) tune(p *config.Pipeline) { mustTune(m.admm.SetSettings(admmSettings(p))) }

func (m *admmModel) sections() ([]Section, error) {
	b, err := m.admm.MarshalBinary()
	if err != nil {
		return nil, err
	}
	secs := []Section{{Name: "admm", Data: b}}
	if m.warm == nil {
		return secs, nil
	}
	kb, err := m.warm.MarshalBinary()
	if err != nil {
		return nil, err
	}
	e := state.NewEncoder(nil)
	e.I64(m.warmLeft)
	e.Raw(kb)
	return append(secs, Section{Name: "admm-warm-start", Data: e.Bytes()}), nil
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
	// A checkpoint taken during the warm start carries its k-means.
	var warm *online.KMeans
	var left int64
	if b, err := findSection(secs, "admm-warm-start"); err == nil {
		if m.warm == nil {
			return errors.New("admm: checkpoint is warming up, config admm.warm_start is 0")
		}
		d := state.NewDecoder(b)
		left = d.I64()
		warm = m.warm.Clone()
		if err := warm.UnmarshalBinary(d.Bytes(d.Len())); d.Bad() || err != nil {
			return fmt.Errorf("admm warm start: bad state: %v", err)
		}
	}
	m.admm, m.warm, m.warmLeft = a, warm, left
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
		"warming":  m.warm != nil,
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
