package daemon

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"

	"gonum.org/v1/gonum/mat"

	"github.com/smtd/smtd/config"
	"github.com/smtd/smtd/hebbian"
)

// ksmModel is the kernel similarity matching network of
// kernel-similarity-matching-hebbian (sections 2-3) on whole images: the
// pixels of an image, after cropping, are one input x, and its output is
// the response vector
//
//	y = (L + λI)⁻¹ (q ∘ f(W, x))    (eq. 12),
//
// learned by the Hebbian/anti-Hebbian updates of eqs. 10 and 13-15, one
// step per minibatch (package hebbian). A step that would diverge is
// refused by the network and reported; a minibatch after which some
// parameter is not finite is rolled back by the pipeline.
type ksmModel struct {
	net   *hebbian.Network
	shape config.ImageShape
	crop  int
	// seeded counts the rows of W taken from the stream (ksm.init:
	// data); it equals the number of neurons when W is complete or when
	// W starts random.
	seeded int

	// The workspaces of encode and learn; a reader of a snapshot has its
	// own (see reader).
	*rowWork
}

func newKSMModel(p *config.Pipeline, src rand.Source) *ksmModel {
	m := &ksmModel{net: hebbian.New(ksmSettings(p), src), shape: p.Image, crop: p.KSM.Crop, rowWork: new(rowWork)}
	if p.KSM.Init != config.InitData {
		m.seeded = p.KSM.Neurons
	}
	return m
}

// ksmKernel returns the kernel named by the config.
func ksmKernel(k config.KSM) hebbian.Kernel {
	switch k.Kernel {
	case config.KernelPowerCosine:
		return hebbian.PowerCosine{Alpha: k.Alpha}
	case config.KernelLinear:
		return hebbian.Linear{}
	case config.KernelPolynomial:
		return hebbian.Polynomial{Degree: k.Degree, Gamma: k.Gamma, Coef0: k.Coef0}
	default:
		return hebbian.Gaussian{Sigma: k.Sigma}
	}
}

// ksmSettings maps the config onto the network's settings. The config's
// max_anneals 0 (never anneal) is the network's AnnealEvery 0.
func ksmSettings(p *config.Pipeline) hebbian.Settings {
	k := p.KSM
	s := hebbian.Settings{
		Neurons: k.Neurons, Dim: p.KSMInputs(), Kernel: ksmKernel(k), Mixing: k.Mixing,
		Lambda: k.Lambda, EtaW: k.EtaW, EtaQ: k.EtaQ, EtaL: k.EtaL,
		AnnealEvery: k.AnnealEvery, AnnealFactor: k.AnnealFactor, MaxAnneals: k.MaxAnneals,
		InitScale: k.InitScale,
	}
	if k.MaxAnneals == 0 {
		s.AnnealEvery, s.MaxAnneals = 0, 1
	}
	return s
}

func (m *ksmModel) encode(batch []sample) []output {
	resize(&m.y, len(batch), m.net.Neurons()) // batches vary in size
	m.net.Transform(&m.y, flatten(&m.x, batch, m.shape, m.crop))
	return rowOutputs(&m.y, batch)
}

// learn takes one step on the minibatch and returns the responses the
// step learned from; a refused step leaves the network as it was and the
// outputs are its responses.
func (m *ksmModel) learn(batch []sample) ([]output, error) {
	x := flatten(&m.x, batch, m.shape, m.crop)
	m.seed(x)
	resize(&m.y, len(batch), m.net.Neurons()) // batches vary in size
	if err := m.net.Step(&m.y, x); err != nil {
		m.net.Transform(&m.y, x)
		return rowOutputs(&m.y, batch), fmt.Errorf("ksm: %w: %w", errRefused, err)
	}
	return rowOutputs(&m.y, batch), nil
}

// seed sets the next rows of W to the rows of x while W is not complete
// (ksm.init: data). The rows are finite: the pipeline refused the others.
func (m *ksmModel) seed(x *mat.Dense) {
	n := m.net.Neurons()
	if m.seeded >= n {
		return
	}
	w := m.net.Weights()
	rows, _ := x.Dims()
	for i := 0; i < rows && m.seeded < n; i++ {
		w.SetRow(m.seeded, x.RawRowView(i))
		m.seeded++
	}
	if err := m.net.SetWeights(w); err != nil {
		panic(err) // the pipeline refused non-finite inputs: a bug
	}
}

func (m *ksmModel) flush() error { return nil }

func (m *ksmModel) snapshot() model {
	return &ksmModel{net: m.net.Clone(), shape: m.shape, crop: m.crop, seeded: m.seeded, rowWork: new(rowWork)}
}

// reader shares the network of the snapshot m, whose Transform only reads
// it (its scratch comes from a pool), and encodes in the workspaces of
// prev, or new ones.
func (m *ksmModel) reader(prev model) model {
	r := &ksmModel{net: m.net, shape: m.shape, crop: m.crop, seeded: m.seeded, rowWork: new(rowWork)}
	if p, ok := prev.(*ksmModel); ok {
		r.rowWork = p.rowWork
	}
	return r
}

func (m *ksmModel) rollback(to model) {
	from := to.(*ksmModel)
	m.net, m.seeded = from.net.Clone(), from.seeded
}

func (m *ksmModel) check() error { return stageError("ksm", m.net.Check()) }

func (m *ksmModel) tune(p *config.Pipeline) { mustTune(m.net.SetSettings(ksmSettings(p))) }

func (m *ksmModel) sections() ([]Section, error) {
	b, err := m.net.MarshalBinary()
	if err != nil {
		return nil, err
	}
	secs := []Section{{Name: "ksm", Data: b}}
	if m.seeded < m.net.Neurons() {
		secs = append(secs, Section{Name: "ksm-seeded", Data: binary.LittleEndian.AppendUint64(nil, uint64(m.seeded))})
	}
	return secs, nil
}

// restore reads the network of a checkpoint, keeping the configured
// settings (rates, schedule); a network of another shape, kernel or λ is
// refused. A checkpoint taken before W was complete (ksm.init: data)
// says how many rows the stream has set; otherwise W is complete.
func (m *ksmModel) restore(secs []Section) error {
	b, err := findSection(secs, "ksm")
	if err != nil {
		return err
	}
	n := new(hebbian.Network)
	if err := n.UnmarshalBinary(b); err != nil {
		return fmt.Errorf("ksm: %w", err)
	}
	s := m.net.Settings()
	if got := n.Settings(); got.Lambda != s.Lambda {
		return fmt.Errorf("ksm: checkpoint has λ = %g, config ksm.lambda is %g", got.Lambda, s.Lambda)
	}
	if err := n.SetSettings(s); err != nil {
		return fmt.Errorf("ksm: checkpoint does not fit the config: %w", err)
	}
	m.net, m.seeded = n, n.Neurons()
	if b, err := findSection(secs, "ksm-seeded"); err == nil {
		if len(b) != 8 || binary.LittleEndian.Uint64(b) >= uint64(n.Neurons()) {
			return fmt.Errorf("ksm: bad ksm-seeded section")
		}
		m.seeded = int(binary.LittleEndian.Uint64(b))
	}
	return nil
}

func (m *ksmModel) describe() map[string]any {
	s := m.net.Settings()
	etaW, etaQ, etaL := s.Rates(m.net.Steps())
	return map[string]any{
		"learner": config.LearnerKSM,
		"image":   fmt.Sprintf("%dx%dx%d, crop %d", m.shape.Height, m.shape.Width, m.shape.Channels, m.crop),
		"neurons": m.net.Neurons(),
		"inputs":  m.net.Dim(),
		"kernel":  fmt.Sprint(s.Kernel),
		"mixing":  s.Mixing,
		"seeded":  m.seeded,
		"steps":   m.net.Steps(),
		"energy":  m.net.Energy(),
		"rates":   fmt.Sprintf("η_w %g, η_q %g, η_l %g", etaW, etaQ, etaL),
	}
}
