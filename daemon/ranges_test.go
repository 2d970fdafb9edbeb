package daemon

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/smtd/smtd/config"
)

// Every live value may be set anywhere in its validated range: at both ends
// of every range at once, each learner keeps learning from real data,
// without refusing a step, and stays finite and non-degenerate.
func TestLiveRangesAreStable(t *testing.T) {
	t.Parallel()
	image := func(high bool) config.Pipeline {
		p := digitsPipeline("digits", "ranges.images", 32)
		k, s, w := &p.KMeans, &p.SMT, &p.Whiten
		if high {
			k.LearningRate, k.Decay, k.Memory, k.ReseedAfter = 1, 0, 1, 1
			s.LearningRate, s.Decay, s.Gamma0, s.Gamma1, s.Memory = 0.5, 0, 10, 1, 1000
			w.Lambda, w.RefreshEvery = 1e3, 1
			p.Patches.MinNorm = 0
		} else {
			k.LearningRate, k.Decay, k.Memory, k.ReseedAfter = 1e-9, 1e6, math.Inf(1), 1<<30
			s.LearningRate, s.Decay, s.Gamma0, s.Gamma1, s.Memory = 1e-9, 1e6, 1e-3, 0, 0
			w.Lambda, w.RefreshEvery = 1e-6, 1
		}
		return p
	}
	ksm := func(high bool) config.Pipeline {
		p := moonsPipeline()
		k := &p.KSM
		if high {
			k.EtaW, k.EtaQ, k.EtaL, k.AnnealFactor = 0.3, 0.3, 1, 1
		} else {
			k.EtaW, k.EtaQ, k.EtaL, k.AnnealFactor = 1e-9, 1e-9, 1e-9, 1e-9
			k.AnnealEvery = 1
		}
		return p
	}
	ksmDigits := func(high bool) config.Pipeline {
		p := ksm(high)
		p.Image = config.ImageShape{Width: 28, Height: 28, Channels: 1}
		p.KSM.Crop, p.KSM.Kernel, p.KSM.Alpha = 4, config.KernelPowerCosine, 3
		return p
	}
	admm := func(high bool) config.Pipeline {
		p := digitsPipeline("digits", "ranges.admm", 16)
		p.Learner = config.LearnerADMM
		p.ADMM.Atoms = 16
		p.ADMM.Crop = 4
		a := &p.ADMM
		if high {
			a.LearningRate, a.Rho, a.Lambda, a.Omega, a.Memory = 1, 100, 1, 100, 1
		} else {
			a.LearningRate, a.Rho, a.Lambda, a.Omega, a.Memory = 1e-9, 1e-3, 1e-9, 1e-9, math.Inf(1)
		}
		return p
	}
	for _, tc := range []struct {
		name   string
		p      func(bool) config.Pipeline
		stream string
	}{
		{"smt", image, "mnist-train-1000.smtdrec"},
		{"ksm", ksm, "moons-1600.smtdrec"},
		{"ksm-digits", ksmDigits, "mnist-train-1000.smtdrec"},
		{"admm", admm, "mnist-train-1000.smtdrec"},
	} {
		for _, high := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/high=%v", tc.name, high), func(t *testing.T) {
				p := tc.p(high)
				cfg := config.Default()
				cfg.Pipelines = []config.Pipeline{p}
				if err := cfg.Validate(); err != nil {
					t.Fatalf("the test's extremes are not valid: %v", err)
				}
				msgs := readStream(t, tc.stream)
				var samples []sample
				for _, m := range msgs {
					s, err := decode(&p, m.Header, m.Data)
					if err != nil {
						t.Fatal(err)
					}
					samples = append(samples, s)
				}
				samples = append(append(samples, samples...), samples...) // three passes
				m := newModel(&p, rand.NewPCG(1, 2))
				const batch = 50
				for i := 0; i+batch <= len(samples); i += batch {
					if _, err := m.learn(samples[i : i+batch]); errors.Is(err, errRefused) {
						t.Fatalf("batch %d refused: %v", i/batch, err)
					}
					if err := m.check(); err != nil {
						t.Fatalf("after batch %d: %v", i/batch, err)
					}
				}
			})
		}
	}
}
