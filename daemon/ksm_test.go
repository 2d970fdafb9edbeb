package daemon

import (
	"context"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"gonum.org/v1/gonum/mat"

	"github.com/smtd/smtd/config"
	"github.com/smtd/smtd/hebbian"
	"github.com/smtd/smtd/record"
)

// moonsPipeline is a deterministic KSM pipeline on the recorded half moons
// (1x2 float32 points): the paper's network of A.6 with 16 neurons,
// Gaussian σ = 0.3 and minibatches of 64, annealed after 400 steps so that
// a short test crosses an anneal.
func moonsPipeline() config.Pipeline {
	p := config.DefaultPipeline(config.Image, "moons")
	p.Input.Subject = "smtd.in.points"
	p.Output.Subject = "smtd.out.points"
	p.Deterministic = true
	p.Batch.Size = 64
	p.Image = config.ImageShape{Width: 2, Height: 1, Channels: 1}
	p.Learner = config.LearnerKSM
	p.KSM.Neurons = 16
	p.KSM.Sigma = 0.3
	p.KSM.AnnealEvery = 400
	return p
}

// moonsPoints decodes the recorded points.
func moonsPoints(t *testing.T, p *config.Pipeline, msgs []*record.Message) *mat.Dense {
	x := mat.NewDense(len(msgs), 2, nil)
	for i, m := range msgs {
		s, err := decode(p, m.Header, m.Data)
		if err != nil {
			t.Fatal(err)
		}
		x.SetRow(i, s.pixels)
	}
	return x
}

// The KSM network learned from points arriving as messages is the
// library's network learned from the same minibatches, bit for bit, also
// when the daemon is stopped and restarted from its checkpoint halfway:
// the recorded half moons are replayed 8 times into one daemon, which is
// shut down, then 12 more times into a new daemon on the same data
// directory (500 minibatches in all, the anneal at 400 after the
// restart); the embed endpoint's responses equal those of a
// hebbian.Network stepped on the same minibatches in memory, and the
// kernel approximation is far better than the untrained network's.
func TestKSMLearnsStreamedPointsExactly(t *testing.T) {
	msgs := readStream(t, "moons-1600.smtdrec")
	p := moonsPipeline()
	x := moonsPoints(t, &p, msgs)
	cfg := testConfig(t, p)

	learned := 0 // counters continue across restarts
	replays := func(n int) {
		learned += n * len(msgs)
		d := startDaemon(t, cfg)
		nc := connect(t, d.ClientURL())
		for range n {
			replayFile(t, nc, "moons-1600.smtdrec", p.Input.Subject)
		}
		waitFor(t, time.Minute, "replays learned", func() bool { return pipelineStatus(d, "moons").Learned == int64(learned) })
		if err := d.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	replays(8)
	replays(12)
	d := startDaemon(t, cfg)
	nc := connect(t, d.ClientURL())
	if got := pipelineStatus(d, "moons").LastSeq; got != uint64(20*len(msgs)) {
		t.Fatalf("restored daemon is at stream sequence %d, want %d", got, 20*len(msgs))
	}
	got := embed(t, nc, "moons", msgs)

	net := hebbian.New(ksmSettings(&p), rand.NewPCG(p.Seed, 0x736d7464))
	var k mat.SymDense
	hebbian.KernelMatrix(&k, net.Settings().Kernel, x)
	var y mat.Dense
	net.Transform(&y, x)
	untrained := hebbian.NormalizedError(&k, &y)
	for range 20 {
		for b := 0; b < len(msgs); b += p.Batch.Size {
			if err := net.Step(nil, x.Slice(b, b+p.Batch.Size, 0, 2)); err != nil {
				t.Fatal(err)
			}
		}
	}
	net.Transform(&y, x)
	for i := range len(msgs) {
		for j := range p.KSM.Neurons {
			if g, w := float32(got.At(i, j)), float32(y.At(i, j)); g != w {
				t.Fatalf("response %d,%d through the daemon %v, library %v", i, j, g, w)
			}
		}
	}
	trained := hebbian.NormalizedError(&k, got)
	t.Logf("normalised kernel error: untrained %.4f, after %d steps %.4f", untrained, net.Steps(), trained)
	// bench moons measures 0.19-0.22 for this network after 500 to
	// 20,000 steps (other seeds).
	if trained > 0.3 || trained >= untrained {
		t.Errorf("kernel error %.4f after learning (%.4f before), want <= 0.3", trained, untrained)
	}
}

// A KSM checkpoint of another network shape is refused with the setting
// named, and one of the same shape restores the network exactly.
func TestKSMCheckpointShape(t *testing.T) {
	p := moonsPipeline()
	m := newModel(&p, rand.NewPCG(1, 1)).(*ksmModel)
	batch := make([]sample, 64)
	rng := rand.New(rand.NewPCG(2, 2))
	for i := range batch {
		batch[i].pixels = []float64{rng.NormFloat64(), rng.NormFloat64()}
	}
	if _, err := m.learn(batch); err != nil {
		t.Fatal(err)
	}
	secs, err := m.sections()
	if err != nil {
		t.Fatal(err)
	}
	same := newModel(&p, rand.NewPCG(3, 3))
	if err := same.restore(secs); err != nil {
		t.Fatal(err)
	}
	a, b := m.encode(batch), same.encode(batch)
	for i := range a {
		for j := range a[i].vector {
			if a[i].vector[j] != b[i].vector[j] {
				t.Fatalf("restored network answers %v, saved one %v", b[i].vector, a[i].vector)
			}
		}
	}
	q := p
	q.KSM.Neurons = 8
	if err := newModel(&q, rand.NewPCG(1, 1)).restore(secs); err == nil {
		t.Error("a checkpoint of 16 neurons restored into a network of 8")
	}
	if changed := shapeChanges(&p, &q); len(changed) != 1 {
		t.Errorf("shapeChanges = %v, want ksm.neurons only", changed)
	}
}

// With ksm.init: data the first inputs of the stream become the rows of
// W, one per neuron, as they are learned (queries do not seed), and a
// checkpoint taken before W is complete resumes the seeding exactly.
func TestKSMInitFromData(t *testing.T) {
	p := moonsPipeline()
	p.KSM.Neurons = 100
	p.KSM.Init = config.InitData
	rng := rand.New(rand.NewPCG(4, 4))
	batches := make([][]sample, 3)
	for b := range batches {
		batches[b] = make([]sample, 64)
		for i := range batches[b] {
			batches[b][i].pixels = []float64{rng.NormFloat64(), rng.NormFloat64()}
		}
	}
	m := newModel(&p, rand.NewPCG(1, 1)).(*ksmModel)
	before := m.net.Weights()
	m.encode(batches[0])
	if !mat.Equal(before, m.net.Weights()) {
		t.Fatal("a query changed W")
	}
	if _, err := m.learn(batches[0]); err != nil {
		t.Fatal(err)
	}
	if m.seeded != 64 {
		t.Fatalf("%d rows seeded after 64 inputs", m.seeded)
	}
	secs, err := m.sections()
	if err != nil {
		t.Fatal(err)
	}
	resumed := newModel(&p, rand.NewPCG(9, 9)).(*ksmModel)
	if err := resumed.restore(secs); err != nil {
		t.Fatal(err)
	}
	for _, n := range []*ksmModel{m, resumed} {
		if _, err := n.learn(batches[1]); err != nil {
			t.Fatal(err)
		}
	}
	if m.seeded != 100 || resumed.seeded != 100 {
		t.Fatalf("seeded %d and %d rows after 128 inputs, want 100", m.seeded, resumed.seeded)
	}
	// Each row was set to its input just before the step that learned
	// from it: rows 64..99 moved by one step from batch 1's first points.
	w := m.net.Weights()
	for r := 64; r < 100; r++ {
		x := batches[1][r-64].pixels
		if d := math.Hypot(w.At(r, 0)-x[0], w.At(r, 1)-x[1]); d > 0.5 {
			t.Errorf("row %d is %.3f from input %d of the second batch", r, d, r-64)
		}
	}
	if !mat.Equal(w, resumed.net.Weights()) {
		t.Error("the resumed seeding differs from the uninterrupted one")
	}
	if secs, _ := m.sections(); len(secs) != 1 {
		t.Errorf("a complete W still checkpoints %d sections", len(secs))
	}
}

// Batches cut by the timeout vary in size: the network learns and answers
// minibatches of any size one after another.
func TestKSMBatchesOfAnySize(t *testing.T) {
	p := moonsPipeline()
	msgs := readStream(t, "moons-1600.smtdrec")
	var batch []sample
	for _, m := range msgs[:12] {
		s, err := decode(&p, m.Header, m.Data)
		if err != nil {
			t.Fatal(err)
		}
		batch = append(batch, s)
	}
	m := newModel(&p, rand.NewPCG(1, 2))
	for _, n := range []int{4, 5, 1, 2} {
		if out, err := m.learn(batch[:n]); err != nil || len(out) != n {
			t.Fatalf("batch of %d: %d outputs, %v", n, len(out), err)
		}
		if out := m.encode(batch[:n+1]); len(out) != n+1 {
			t.Fatalf("query of %d: %d outputs", n+1, len(out))
		}
	}
}
