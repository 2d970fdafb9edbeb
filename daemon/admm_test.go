package daemon

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"gonum.org/v1/gonum/mat"

	"github.com/smtd/smtd/config"
	"github.com/smtd/smtd/online"
	"github.com/smtd/smtd/sgd"
)

// The ADMM dictionary learned from digits arriving as messages is the
// library's, bit for bit, across a restart, with and without a k-means
// warm start: 1000 recorded digits are
// replayed twice into one daemon, which is shut down, then once more into
// a new daemon on the same data directory; the embed endpoint's codes
// equal those of an sgd.ADMM stepped on the same minibatches in memory,
// the running R² is the library's, and a checkpoint publishes the atoms
// (the request is served while the deterministic pipeline is idle).
func TestADMMLearnsStreamedDigitsExactly(t *testing.T) {
	for _, warm := range []int64{0, 2500} {
		t.Run(fmt.Sprintf("warm_start=%d", warm), func(t *testing.T) { testADMMStream(t, warm) })
	}
}

// testADMMStream runs the test with a warm start of warm samples: with
// 2500 the restart (after 2000) falls in the warm start.
func testADMMStream(t *testing.T, warm int64) {
	msgs := readStream(t, "mnist-train-1000.smtdrec")
	p := digitsPipeline("digits", "mnist.images", 16)
	p.Deterministic = true
	p.Batch.Size = 100
	p.Learner = config.LearnerADMM
	p.ADMM.Atoms = 32
	p.ADMM.Crop = 4
	p.ADMM.LearningRate = 0.05
	p.ADMM.WarmStart = warm
	cfg := testConfig(t, p)
	learned := 0 // counters continue across restarts
	replays := func(n int) {
		learned += n * len(msgs)
		d := startDaemon(t, cfg)
		nc := connect(t, d.ClientURL())
		for range n {
			replayFile(t, nc, "mnist-train-1000.smtdrec", p.Input.Subject)
		}
		waitFor(t, 2*time.Minute, "replays learned", func() bool { return pipelineStatus(d, "digits").Learned == int64(learned) })
		if err := d.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	replays(2)
	replays(1)
	d := startDaemon(t, cfg)
	nc := connect(t, d.ClientURL())
	atoms := subscribe(t, nc, "mnist.images.codes.atoms")
	request(t, nc, "smtd.control.checkpoint", nil, nil)
	m, err := atoms.NextMsg(10 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if m.Header.Get(HeaderShape) != "32,400" || len(m.Data) != 4*32*400 {
		t.Errorf("atoms message of shape %q, %d bytes", m.Header.Get(HeaderShape), len(m.Data))
	}
	got := embed(t, nc, "digits", msgs[:200])

	x := mat.NewDense(len(msgs), 400, nil)
	for i, msg := range msgs {
		s, err := decode(&p, msg.Header, msg.Data)
		if err != nil {
			t.Fatal(err)
		}
		x.SetRow(i, flatten(&mat.Dense{}, []sample{s}, p.Image, p.ADMM.Crop).RawRowView(0))
	}
	src := rand.NewPCG(p.Seed, 0x736d7464)
	a := sgd.NewADMM(admmSettings(&p), 400, src)
	km := online.NewKMeans(online.KMeansSettings{K: 32, Dim: 400}, src)
	seen := int64(0)
	for range 3 {
		for b := 0; b < len(msgs); b += p.Batch.Size {
			mb := mat.DenseCopyOf(x.Slice(b, b+p.Batch.Size, 0, 400))
			if seen < warm {
				km.Learn(mb, nil)
				if seen += int64(p.Batch.Size); seen >= warm {
					if err := a.WarmStart(km.Atoms()); err != nil {
						t.Fatal(err)
					}
				}
				continue
			}
			if err := a.Step(mb); err != nil {
				t.Fatal(err)
			}
		}
	}
	var z mat.Dense
	a.Encode(&z, x.Slice(0, 200, 0, 400))
	for i := range 200 {
		for j := range 32 {
			if g, w := float32(got.At(i, j)), float32(z.At(i, j)); g != w {
				t.Fatalf("code %d,%d through the daemon %v, library %v", i, j, g, w)
			}
		}
	}
	r2 := pipelineStatus(d, "digits").Model["r2"].(float64)
	if r2 != a.R2() || r2 < 0.3 {
		t.Errorf("daemon's running R² %v, library's %v (want > 0.3)", r2, a.R2())
	}
	t.Logf("R² after %d minibatches: %.3f", a.Steps(), r2)
}
