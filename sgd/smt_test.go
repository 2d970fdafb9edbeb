package sgd_test

import (
	"bytes"
	"errors"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/smtd/smtd/online"
	"github.com/smtd/smtd/sgd"
	"gonum.org/v1/gonum/mat"
)

// expectedStep computes one step of Supp. C densely: with the minibatch's
// L_b and the statistics' V (unseen atoms at the mean frequency),
//
//	P ← P − c P L_b V'⁻¹,  shrink by thr·V_jj,  P ← (PVPᵀ)^(−1/2) P,
//
// V' = V, or with degrees V'_jj = max(V_jj, c·deg_j) (Stats.BatchDegrees).
// It also returns the number of atoms whose V_jj the degrees raised.
func expectedStep(p *mat.Dense, lb, v *mat.Dense, c, thr float64, deg []float64) (*mat.Dense, int64) {
	n := v.RawMatrix().Rows
	vr := mat.DenseCopyOf(v)
	var sum float64
	seen := 0
	for a := 0; a < n; a++ {
		if d := vr.At(a, a); d > 0 {
			sum += d
			seen++
		}
	}
	for a := 0; a < n; a++ {
		if vr.At(a, a) <= 0 {
			vr.Set(a, a, sum/float64(seen))
		}
	}
	vs := mat.DenseCopyOf(vr)
	var raised int64
	for a, d := range deg {
		if c*d > vr.At(a, a) {
			vs.Set(a, a, c*d)
			raised++
		}
	}
	var g, vinv, step mat.Dense
	g.Mul(p, lb)
	if err := vinv.Inverse(vs); err != nil {
		panic(err)
	}
	step.Mul(&g, &vinv)
	var next mat.Dense
	next.Scale(-c, &step)
	next.Add(&next, p)
	if thr > 0 {
		r, cols := next.Dims()
		for i := 0; i < r; i++ {
			for a := 0; a < cols; a++ {
				t := thr * vr.At(a, a)
				x := next.At(i, a)
				next.Set(i, a, math.Copysign(math.Max(math.Abs(x)-t, 0), x))
			}
		}
	}
	var m1, m mat.Dense
	m1.Mul(&next, vr)
	m.Mul(&m1, next.T())
	d, _ := m.Dims()
	ms := mat.NewSymDense(d, nil)
	for i := 0; i < d; i++ {
		for j := i; j < d; j++ {
			ms.SetSym(i, j, 0.5*(m.At(i, j)+m.At(j, i)))
		}
	}
	var eig mat.EigenSym
	eig.Factorize(ms, true)
	vals := eig.Values(nil)
	var u, us, half mat.Dense
	eig.VectorsTo(&u)
	us.CloneFrom(&u)
	for j, l := range vals {
		for i := 0; i < d; i++ {
			us.Set(i, j, us.At(i, j)/math.Sqrt(l))
		}
	}
	half.Mul(&us, u.T())
	var out mat.Dense
	out.Mul(&half, &next)
	return &out, raised
}

func TestSMTStepMatchesDefinition(t *testing.T) {
	grid := online.PatchGrid{Width: 8, Height: 8, Size: 2} // 7×7 grid
	const k, dim, images = 12, 3, 4
	for _, tc := range []struct {
		name   string
		blank  sgd.BlankMode
		rng    int
		multi  bool
		gamma1 float64
		rate   float64 // η; 0.07 unless set, which the bound on each atom's step never reaches
		vOnly  bool
	}{
		{"vq/atom/d=1", sgd.BlankAtom, 1, false, 0, 0, false},
		{"vq/skip/d=2", sgd.BlankSkip, 2, false, 0, 0, false},
		{"vq/atom/whole", sgd.BlankAtom, 0, false, 0, 0, false},
		{"vq/skip/whole/shrink", sgd.BlankSkip, 0, false, 0.05, 0, false},
		{"vq/atom/d=1/shrink", sgd.BlankAtom, 1, false, 0.2, 0, false},
		{"vq/atom/d=1/capped", sgd.BlankAtom, 1, false, 0, 0.6, false},
		{"vq/skip/whole/capped", sgd.BlankSkip, 0, false, 0, 0.6, false},
		{"vq/atom/d=2/capped/v-only", sgd.BlankAtom, 2, false, 0, 0.6, true},
		{"gq/atom/d=1", sgd.BlankAtom, 1, true, 0, 0, false},
		{"gq/skip/whole", sgd.BlankSkip, 0, true, 0, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(21, 22))
			ss := sgd.StatsSettings{K: k, Blank: tc.blank, Range: tc.rng, MultiHot: tc.multi}
			vs := ss
			vs.VOnly = tc.vOnly
			st := sgd.NewStats(vs)
			rate := tc.rate
			if rate == 0 {
				rate = 0.07
			}
			s := sgd.SMTSettings{K: k, Blank: tc.blank, Dim: dim, LearningRate: rate, Decay: 0.5, Gamma0: 1.5, Gamma1: tc.gamma1}
			capBound := false // whether the cap changed a step
			var bounded int64 // atoms whose V_aa the cap raised, summed over the steps
			m := sgd.NewSMT(s, rand.NewPCG(1, 2))
			for step := 0; step < 3; step++ {
				n := images * grid.Len()
				batch := sgd.NewStats(ss) // L_b
				var err error
				if tc.multi {
					c := randomGQ(rng, n, k, 0.2)
					st.AddImagesGQ(c, images, grid)
					batch.AddImagesGQ(c, images, grid)
					before := mat.DenseCopyOf(m.P())
					eta := s.LearningRate / (1 + s.Decay*float64(step))
					want, _ := expectedStep(before, denseOfSym(batch, true), denseOfSym(st, false), 2*s.Gamma0*eta, eta*s.Gamma1, nil)
					err = m.StepImagesGQ(st, c, images, grid)
					equalApprox(t, "P", m.P(), want, 1e-8)
				} else {
					c := randomVQ(rng, n, k, 0.2)
					st.AddImagesVQ(c, images, grid)
					batch.AddImagesVQ(c, images, grid)
					before := mat.DenseCopyOf(m.P())
					eta := s.LearningRate / (1 + s.Decay*float64(step))
					lb, v := denseOfSym(batch, true), denseOfSym(st, false)
					want, raised := expectedStep(before, lb, v, 2*s.Gamma0*eta, eta*s.Gamma1, st.BatchDegrees(nil))
					uncapped, _ := expectedStep(before, lb, v, 2*s.Gamma0*eta, eta*s.Gamma1, nil)
					bounded += raised
					capBound = capBound || !mat.EqualApprox(want, uncapped, 1e-6)
					err = m.StepImagesVQ(st, c, images, grid)
					equalApprox(t, "P", m.P(), want, 1e-8)
				}
				if err != nil {
					t.Fatal(err)
				}
			}
			if m.Steps() != 3 || !m.Finite() {
				t.Errorf("%d steps, finite %v", m.Steps(), m.Finite())
			}
			if capBound != (tc.rate != 0) {
				t.Errorf("the cap on an atom's step changed a step: %v, want %v (η = %v)", capBound, tc.rate != 0, rate)
			}
			if got := m.BoundedAtomSteps(); got != bounded {
				t.Errorf("BoundedAtomSteps %d, want %d", got, bounded)
			}
			if capBound && bounded == 0 {
				t.Error("the cap changed a step but no atom was counted")
			}
		})
	}
}

func TestSMTStepSequencesAndTemporal(t *testing.T) {
	const k, dim = 6, 2
	rng := rand.New(rand.NewPCG(23, 24))
	s := sgd.SMTSettings{K: k, Dim: dim, LearningRate: 0.05}
	t.Run("sequences", func(t *testing.T) {
		ss := sgd.StatsSettings{K: k, Range: 2}
		st, batch := sgd.NewStats(ss), sgd.NewStats(ss)
		m := sgd.NewSMT(s, rand.NewPCG(3, 4))
		codes, lengths := randomVQ(rng, 40, k, 0.1), []int{10, 25, 5}
		st.AddSequencesVQ(codes, lengths)
		batch.AddSequencesVQ(codes, lengths)
		want, _ := expectedStep(mat.DenseCopyOf(m.P()), denseOfSym(batch, true), denseOfSym(st, false), 2*s.LearningRate, 0, st.BatchDegrees(nil))
		if err := m.StepSequencesVQ(st, codes, lengths); err != nil {
			t.Fatal(err)
		}
		equalApprox(t, "P", m.P(), want, 1e-8)
	})
	t.Run("temporal", func(t *testing.T) {
		ss := sgd.StatsSettings{K: k}
		st := sgd.NewStats(ss)
		m := sgd.NewSMT(s, rand.NewPCG(5, 6))
		f0, f1, f2 := randomVQ(rng, 30, k, 0.1), randomVQ(rng, 30, k, 0.1), randomVQ(rng, 30, k, 0.1)
		batch := sgd.NewStats(ss)
		st.AddTemporalVQ(f0, f1, f2)
		batch.AddTemporalVQ(f0, f1, f2)
		want, _ := expectedStep(mat.DenseCopyOf(m.P()), denseOfSym(batch, true), denseOfSym(st, false), 2*s.LearningRate, 0, st.BatchDegrees(nil))
		if err := m.StepTemporalVQ(st, f0, f1, f2); err != nil {
			t.Fatal(err)
		}
		equalApprox(t, "P", m.P(), want, 1e-8)
	})
}

func TestSMTStepErrorLeavesP(t *testing.T) {
	grid := online.PatchGrid{Width: 6, Height: 6, Size: 2}
	rng := rand.New(rand.NewPCG(25, 26))
	st := sgd.NewStats(sgd.StatsSettings{K: 5, Range: 1})
	m := sgd.NewSMT(sgd.SMTSettings{K: 5, Dim: 2, LearningRate: 1e308}, rand.NewPCG(7, 8))
	c := randomVQ(rng, grid.Len(), 5, 0.2)
	st.AddImagesVQ(c, 1, grid)
	before := mat.DenseCopyOf(m.P())
	err := m.StepImagesVQ(st, c, 1, grid)
	var se *sgd.StepError
	if !errors.As(err, &se) {
		t.Fatalf("error %v, want a *StepError", err)
	}
	if !mat.Equal(before, m.P()) || m.Steps() != 0 || !m.Finite() {
		t.Error("a failed step changed P")
	}
}

func TestSMTMarshalExact(t *testing.T) {
	grid := online.PatchGrid{Width: 9, Height: 9, Size: 3}
	rng := rand.New(rand.NewPCG(27, 28))
	ss := sgd.StatsSettings{K: 10, Range: 2}
	st := sgd.NewStats(ss)
	// A rate at which the bound on an atom's step binds, so that the
	// count of bounded atom-steps is restored too.
	s := sgd.SMTSettings{K: 10, Dim: 4, LearningRate: 0.6, Decay: 0.1, Gamma1: 0.01, DropConstant: true}
	a := sgd.NewSMT(s, rand.NewPCG(9, 10))
	var batches [][]int
	for i := 0; i < 6; i++ {
		batches = append(batches, randomVQ(rng, 2*grid.Len(), 10, 0.2))
	}
	for _, c := range batches[:3] {
		st.AddImagesVQ(c, 2, grid)
		if err := a.StepImagesVQ(st, c, 2, grid); err != nil {
			t.Fatal(err)
		}
	}
	data, err := a.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	if a.BoundedAtomSteps() == 0 {
		t.Fatal("no atom-step was bounded: the test does not see the count restored")
	}
	// A state written before the count existed (no trailing count, no
	// DropConstant) restores with none; one written before DropConstant,
	// with the count and without dropping.
	old := sgd.NewSMT(s, rand.NewPCG(1, 1))
	if err := old.UnmarshalBinary(data[:len(data)-9]); err != nil || old.BoundedAtomSteps() != 0 || old.Steps() != a.Steps() || old.Settings().DropConstant {
		t.Errorf("state without the count: %v, %d bounded, %d steps, %+v", err, old.BoundedAtomSteps(), old.Steps(), old.Settings())
	}
	old = sgd.NewSMT(s, rand.NewPCG(1, 1))
	if err := old.UnmarshalBinary(data[:len(data)-1]); err != nil || old.BoundedAtomSteps() != a.BoundedAtomSteps() || old.Settings().DropConstant {
		t.Errorf("state without DropConstant: %v, %d bounded, %+v", err, old.BoundedAtomSteps(), old.Settings())
	}
	if err := old.UnmarshalBinary(append(data[:len(data)-1:len(data)-1], 2)); !errors.Is(err, sgd.ErrFormat) {
		t.Errorf("DropConstant byte 2: %v, want ErrFormat", err)
	}
	// Without DropConstant the state is as before it existed, which an
	// older smtd reads.
	s0 := s
	s0.DropConstant = false
	if plain, _ := sgd.NewSMT(s0, rand.NewPCG(1, 1)).MarshalBinary(); len(plain) != len(data)-1 {
		t.Errorf("state without DropConstant: %d bytes, want %d (no trailing byte)", len(plain), len(data)-1)
	}
	b := sgd.NewSMT(s, rand.NewPCG(1, 1))
	if err := b.UnmarshalBinary(data); err != nil {
		t.Fatal(err)
	}
	if b.BoundedAtomSteps() != a.BoundedAtomSteps() || !b.Settings().DropConstant {
		t.Errorf("restored %d bounded atom-steps and %+v, want %d and DropConstant", b.BoundedAtomSteps(), b.Settings(), a.BoundedAtomSteps())
	}
	c := a.Clone()
	for _, codes := range batches[3:] {
		st.AddImagesVQ(codes, 2, grid)
		for _, m := range []*sgd.SMT{a, b, c} {
			if err := m.StepImagesVQ(st, codes, 2, grid); err != nil {
				t.Fatal(err)
			}
		}
	}
	da, _ := a.MarshalBinary()
	db, _ := b.MarshalBinary()
	dc, _ := c.MarshalBinary()
	if !bytes.Equal(da, db) || !bytes.Equal(da, dc) {
		t.Fatal("restored or cloned SMT diverges from the original")
	}
	if err := b.UnmarshalBinary(data[:10]); !errors.Is(err, sgd.ErrFormat) {
		t.Errorf("truncated: %v, want ErrFormat", err)
	}
	if err := b.UnmarshalBinary(append([]byte{2}, data[1:]...)); !errors.Is(err, sgd.ErrVersion) {
		t.Errorf("version 2: %v, want ErrVersion", err)
	}
	other := sgd.NewSMT(sgd.SMTSettings{K: 10, Dim: 3}, rand.NewPCG(1, 1))
	if err := other.UnmarshalBinary(data); !errors.Is(err, sgd.ErrFormat) {
		t.Errorf("other dimension: %v, want ErrFormat", err)
	}
}

func TestSMTSettings(t *testing.T) {
	for _, tc := range []struct {
		s  sgd.SMTSettings
		ok bool
	}{
		{sgd.SMTSettings{K: 4, Dim: 2}, true},
		{sgd.SMTSettings{K: 4, Dim: 5}, true}, // K+1 columns with the blank atom
		{sgd.SMTSettings{K: 4, Blank: sgd.BlankSkip, Dim: 5}, false},
		{sgd.SMTSettings{K: 0, Dim: 1}, false},
		{sgd.SMTSettings{K: 4, Dim: 0}, false},
		{sgd.SMTSettings{K: 4, Dim: 2, LearningRate: -1}, false},
		{sgd.SMTSettings{K: 4, Dim: 2, Decay: math.Inf(1)}, false},
		{sgd.SMTSettings{K: 4, Dim: 2, Gamma0: math.NaN()}, false},
		{sgd.SMTSettings{K: 4, Dim: 2, Gamma1: -0.1}, false},
		{sgd.SMTSettings{K: 4, Dim: 4, DropConstant: true}, true},
		{sgd.SMTSettings{K: 4, Dim: 5, DropConstant: true}, false}, // the constant leaves K
	} {
		if err := tc.s.Validate(); (err == nil) != tc.ok {
			t.Errorf("%+v: Validate() = %v, want ok %v", tc.s, err, tc.ok)
		}
	}
	m := sgd.NewSMT(sgd.SMTSettings{K: 4, Dim: 2}, rand.NewPCG(1, 2))
	if err := m.SetSettings(sgd.SMTSettings{K: 4, Dim: 2, LearningRate: 0.3, Gamma1: 0.1}); err != nil {
		t.Errorf("changing rates: %v", err)
	}
	if got := m.Settings().LearningRate; got != 0.3 {
		t.Errorf("learning rate %v after SetSettings, want 0.3", got)
	}
	if err := m.SetSettings(sgd.SMTSettings{K: 4, Dim: 3}); err == nil {
		t.Error("changing Dim live was accepted")
	}
	if err := m.SetSettings(sgd.SMTSettings{K: 4, Dim: 2, DropConstant: true}); err == nil {
		t.Error("changing DropConstant live was accepted")
	}
}

// A step from a gradient computed apart (GradientImagesVQ, as a worker
// computes it) is StepImagesVQ bit for bit, and the gradients of two
// minibatches added step like their union.
func TestSMTStepGradientEqualsStep(t *testing.T) {
	grid := online.PatchGrid{Width: 9, Height: 9, Size: 3}
	rng := rand.New(rand.NewPCG(29, 30))
	st := sgd.NewStats(sgd.StatsSettings{K: 10, Range: 2})
	// A rate at which the bound on an atom's step binds, so that the
	// count of bounded atom-steps is restored too.
	s := sgd.SMTSettings{K: 10, Dim: 4, LearningRate: 0.6, Decay: 0.1, Gamma1: 0.01}
	a := sgd.NewSMT(s, rand.NewPCG(9, 10))
	b := a.Clone()
	var g mat.Dense
	for i := 0; i < 4; i++ {
		codes := randomVQ(rng, 2*grid.Len(), 10, 0.2)
		st.AddImagesVQ(codes, 2, grid)
		if err := a.StepImagesVQ(st, codes, 2, grid); err != nil {
			t.Fatal(err)
		}
		pairs, ok := b.GradientImagesVQ(&g, codes, 2, grid, 2)
		if !ok {
			t.Fatal("no row counted")
		}
		if err := b.StepGradient(st, &g, pairs); err != nil {
			t.Fatal(err)
		}
	}
	da, _ := a.MarshalBinary()
	db, _ := b.MarshalBinary()
	if !bytes.Equal(da, db) {
		t.Fatal("StepGradient differs from StepImagesVQ")
	}

	c1, c2 := randomVQ(rng, 2*grid.Len(), 10, 0.2), randomVQ(rng, 2*grid.Len(), 10, 0.2)
	union := append(append([]int(nil), c1...), c2...)
	st.AddImagesVQ(union, 4, grid)
	var g2 mat.Dense
	p1, _ := b.GradientImagesVQ(&g, c1, 2, grid, 2)
	p2, _ := b.GradientImagesVQ(&g2, c2, 2, grid, 2)
	g.Add(&g, &g2)
	if err := b.StepGradient(st, &g, p1+p2); err != nil {
		t.Fatal(err)
	}
	if err := a.StepImagesVQ(st, union, 4, grid); err != nil {
		t.Fatal(err)
	}
	if !mat.EqualApprox(a.P(), b.P(), 1e-12) {
		t.Error("summed gradients step unlike their union")
	}
}

// An SMT whose gradients run on several goroutines (SetCores) takes the
// same steps bit for bit as one on a single goroutine: f_vq and f_gq
// codes, windows of range 2 (the 24 images shared by three goroutines)
// and whole grids (range 0, on the caller).
func TestSMTStepOnCoresSameBits(t *testing.T) {
	grid := online.PatchGrid{Width: 10, Height: 10, Size: 3} // 8×8 grid
	const k, dim, images = 40, 4, 24
	for _, tc := range []struct {
		name  string
		rng   int
		multi bool
	}{
		{"vq/d=2", 2, false},
		{"gq/d=2", 2, true},
		{"vq/whole", 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ss := sgd.StatsSettings{K: k, Blank: sgd.BlankAtom, Range: tc.rng, MultiHot: tc.multi}
			s := sgd.SMTSettings{K: k, Blank: sgd.BlankAtom, Dim: dim, LearningRate: 0.07, Gamma0: 1.5}
			one, three := sgd.NewSMT(s, rand.NewPCG(1, 2)), sgd.NewSMT(s, rand.NewPCG(1, 2))
			three.SetCores(3)
			st := sgd.NewStats(ss)
			rng := rand.New(rand.NewPCG(5, 6))
			for step := 0; step < 3; step++ {
				n := images * grid.Len()
				var errOne, errThree error
				if tc.multi {
					c := randomGQ(rng, n, k, 0.2)
					st.AddImagesGQ(c, images, grid)
					errOne, errThree = one.StepImagesGQ(st, c, images, grid), three.StepImagesGQ(st, c, images, grid)
				} else {
					c := randomVQ(rng, n, k, 0.2)
					st.AddImagesVQ(c, images, grid)
					errOne, errThree = one.StepImagesVQ(st, c, images, grid), three.StepImagesVQ(st, c, images, grid)
				}
				if errOne != nil || errThree != nil {
					t.Fatalf("step %d: %v on one core, %v on three", step, errOne, errThree)
				}
				a, b := one.P(), three.P()
				r, c := a.Dims()
				for i := range r {
					for j := range c {
						if x, y := a.At(i, j), b.At(i, j); math.Float64bits(x) != math.Float64bits(y) {
							t.Fatalf("step %d: P[%d, %d] differs on three cores: %v against %v", step, i, j, y, x)
						}
					}
				}
			}
		})
	}
}
