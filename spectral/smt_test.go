package spectral_test

import (
	"errors"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/smtd/smtd/online"
	"github.com/smtd/smtd/sgd"
	"github.com/smtd/smtd/spectral"
	"gonum.org/v1/gonum/floats/scalar"
	"gonum.org/v1/gonum/mat"
)

var _ spectral.Pencil = (*sgd.Stats)(nil)

// ringCodes returns f_vq codes of images whose patch at grid position
// (r, c) is atom (o + r + c + noise) mod k, for a random offset o per
// image: the atoms lie on a ring, neighbouring patches have neighbouring
// atoms, and blank patches (−1) are sprinkled in.
func ringCodes(rng *rand.Rand, images, k int, g online.PatchGrid, blank float64) []int {
	codes := make([]int, 0, images*g.Len())
	for i := 0; i < images; i++ {
		o := rng.IntN(k)
		for r := 0; r < g.Rows(); r++ {
			for c := 0; c < g.Cols(); c++ {
				if rng.Float64() < blank {
					codes = append(codes, -1)
					continue
				}
				a := (o + r + c + rng.IntN(3) - 1 + k) % k
				codes = append(codes, a)
			}
		}
	}
	return codes
}

func ringStats(k int, blank sgd.BlankMode, unused int) *sgd.Stats {
	g := online.PatchGrid{Width: 14, Height: 14, Size: 3}
	rng := rand.New(rand.NewPCG(11, 12))
	st := sgd.NewStats(sgd.StatsSettings{K: k + unused, Blank: blank, Range: 2})
	for b := 0; b < 10; b++ {
		st.AddImagesVQ(ringCodes(rng, 20, k, g, 0.1), 20, g)
	}
	return st
}

func TestSolveSMTLanczosMatchesDense(t *testing.T) {
	for _, blank := range []sgd.BlankMode{sgd.BlankAtom, sgd.BlankSkip} {
		t.Run(blank.String(), func(t *testing.T) {
			st := ringStats(500, blank, 0)
			s := spectral.Settings{Dim: 6, Drop: 1}
			var pd, pl mat.Dense
			s.Method = spectral.Dense
			rd, err := spectral.SolveSMT(&pd, st, s, nil)
			if err != nil {
				t.Fatal(err)
			}
			s.Method = spectral.Lanczos
			s.Lanczos.Tol = 1e-11
			rl, err := spectral.SolveSMT(&pl, st, s, rand.NewPCG(5, 6))
			if err != nil {
				t.Fatal(err)
			}
			if rd.Method != spectral.Dense || rl.Method != spectral.Lanczos || rl.Applies == 0 {
				t.Errorf("methods %v, %v; %d applications", rd.Method, rl.Method, rl.Applies)
			}
			if math.Abs(rd.Dropped[0]) > 1e-10 {
				t.Errorf("the dropped constant function has eigenvalue %v, want 0", rd.Dropped[0])
			}
			var sum float64
			for i, v := range rd.Values {
				sum += v
				if !scalar.EqualWithinAbsOrRel(rl.Values[i], v, 1e-9, 1e-9) {
					t.Errorf("value %d: lanczos %.12g, dense %.12g", i, rl.Values[i], v)
				}
			}
			for name, p := range map[string]*mat.Dense{"dense": &pd, "lanczos": &pl} {
				if c := spectral.ConstraintError(st, p); c > 1e-9 {
					t.Errorf("%s: ‖PVPᵀ − I‖ = %.3g", name, c)
				}
				if obj := spectral.Objective(st, p); !scalar.EqualWithinRel(obj, sum, 1e-9) {
					t.Errorf("%s: objective %.12g, want the sum of the eigenvalues %.12g", name, obj, sum)
				}
			}
			// Same rows up to sign (the eigenvalues are distinct enough
			// here; the sign convention makes them equal).
			for r := 0; r < s.Dim-1; r++ {
				for a := 0; a < st.Size(); a++ {
					if !scalar.EqualWithinAbs(pl.At(r, a), pd.At(r, a), 1e-6) {
						t.Fatalf("P[%d,%d]: lanczos %v, dense %v", r, a, pl.At(r, a), pd.At(r, a))
					}
				}
			}
		})
	}
}

// TestSolveSMTRing checks that the first non-constant rows of P lay the
// ring of atoms out as a circle: neighbouring atoms get embeddings with
// cosine close to one.
func TestSolveSMTRing(t *testing.T) {
	const k = 200
	st := ringStats(k, sgd.BlankSkip, 0)
	var p mat.Dense
	if _, err := spectral.SolveSMT(&p, st, spectral.Settings{Dim: 2, Drop: 1}, nil); err != nil {
		t.Fatal(err)
	}
	worst := 1.0
	for a := 0; a < k; a++ {
		b := (a + 1) % k
		x0, y0, x1, y1 := p.At(0, a), p.At(1, a), p.At(0, b), p.At(1, b)
		cos := (x0*x1 + y0*y1) / math.Hypot(x0, y0) / math.Hypot(x1, y1)
		worst = min(worst, cos)
	}
	if worst < 0.9 {
		t.Errorf("neighbouring atoms on the ring: smallest cosine %.3f, want > 0.9", worst)
	}
}

func TestSolveSMTUnusedAtoms(t *testing.T) {
	st := ringStats(100, sgd.BlankSkip, 7) // atoms 100..106 never used
	var p mat.Dense
	res, err := spectral.SolveSMT(&p, st, spectral.Settings{Dim: 4, Method: spectral.Lanczos}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Atoms != 100 {
		t.Errorf("%d atoms in the problem, want 100", res.Atoms)
	}
	for a := 100; a < 107; a++ {
		for r := 0; r < 4; r++ {
			if p.At(r, a) != 0 {
				t.Fatalf("unused atom %d has P[%d] = %v, want 0", a, r, p.At(r, a))
			}
		}
	}
	if c := spectral.ConstraintError(st, &p); c > 1e-9 {
		t.Errorf("‖PVPᵀ − I‖ = %.3g", c)
	}
	if _, err := spectral.SolveSMT(&mat.Dense{}, st, spectral.Settings{Dim: 99, Drop: 2}, nil); !errors.Is(err, spectral.ErrTooFewAtoms) {
		t.Errorf("101 eigenvectors of 100 atoms: error %v, want ErrTooFewAtoms", err)
	}
}

// TestSolveSMTMultiHot checks the dense path for a non-diagonal V (f_gq
// codes): the rows of P solve L pᵀ = λ V pᵀ.
func TestSolveSMTMultiHot(t *testing.T) {
	const k = 40
	g := online.PatchGrid{Width: 10, Height: 10, Size: 3}
	rng := rand.New(rand.NewPCG(13, 14))
	st := sgd.NewStats(sgd.StatsSettings{K: k, Range: 1, MultiHot: true})
	for b := 0; b < 5; b++ {
		vq := ringCodes(rng, 10, k, g, 0.1)
		gq := &online.SparseCodes{Rows: len(vq), Atoms: k, Ptr: []int{0}}
		for _, a := range vq {
			if a >= 0 {
				// The atom and, half the time, its successor.
				if rng.IntN(2) == 0 || a == k-1 {
					gq.Index = append(gq.Index, a)
				} else {
					gq.Index = append(gq.Index, a, a+1)
				}
			}
			gq.Ptr = append(gq.Ptr, len(gq.Index))
		}
		gq.Cos = make([]float64, len(gq.Index))
		st.AddImagesGQ(gq, 10, g)
	}
	var p mat.Dense
	res, err := spectral.SolveSMT(&p, st, spectral.Settings{Dim: 5}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Method != spectral.Dense {
		t.Errorf("method %v, want dense for a non-diagonal V", res.Method)
	}
	if _, err := spectral.SolveSMT(&mat.Dense{}, st, spectral.Settings{Dim: 5, Method: spectral.Lanczos}, nil); err == nil {
		t.Error("Lanczos accepted a non-diagonal V")
	}
	var lp, vp mat.Dense
	st.MulL(&lp, p.T())
	st.MulV(&vp, p.T())
	for r := 0; r < 5; r++ {
		for a := 0; a < st.Size(); a++ {
			if d := lp.At(a, r) - res.Values[r]*vp.At(a, r); math.Abs(d) > 1e-9 {
				t.Fatalf("row %d, atom %d: (L − λV)pᵀ = %.3g", r, a, d)
			}
		}
	}
	if c := spectral.ConstraintError(st, &p); c > 1e-9 {
		t.Errorf("‖PVPᵀ − I‖ = %.3g", c)
	}
}

func TestSettingsValidate(t *testing.T) {
	for _, tc := range []struct {
		s  spectral.Settings
		ok bool
	}{
		{spectral.Settings{Dim: 1}, true},
		{spectral.Settings{Dim: 32, Drop: 1, Method: spectral.Lanczos}, true},
		{spectral.Settings{}, false},
		{spectral.Settings{Dim: 3, Drop: -1}, false},
		{spectral.Settings{Dim: 3, Method: 9}, false},
		{spectral.Settings{Dim: 3, Lanczos: spectral.LanczosSettings{Tol: 2}}, false},
	} {
		if err := tc.s.Validate(); (err == nil) != tc.ok {
			t.Errorf("%+v: Validate() = %v, want ok %v", tc.s, err, tc.ok)
		}
	}
}
