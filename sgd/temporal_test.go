package sgd_test

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"gonum.org/v1/gonum/mat"

	"github.com/smtd/smtd/online"
	"github.com/smtd/smtd/sgd"
	"github.com/smtd/smtd/spectral"
)

// randomWeighted returns n codes of up to three distinct atoms in [0, k)
// with coefficients in (0, 1], a fraction blank of them empty.
func randomWeighted(rng *rand.Rand, n, k int, blank float64) *online.SparseCodes {
	c := &online.SparseCodes{Rows: n, Atoms: k, Ptr: []int{0}}
	for i := 0; i < n; i++ {
		if rng.Float64() >= blank {
			c.Index = append(c.Index, rng.Perm(k)[:1+rng.IntN(min(3, k))]...)
			row := c.Index[c.Ptr[i]:]
			for p := 1; p < len(row); p++ { // sort the few atoms
				for q := p; q > 0 && row[q] < row[q-1]; q-- {
					row[q], row[q-1] = row[q-1], row[q]
				}
			}
			for range row {
				c.Cos = append(c.Cos, 1-rng.Float64())
			}
		}
		c.Ptr = append(c.Ptr, len(c.Index))
	}
	return c
}

// denseCode returns code i of c as a dense n-vector: the blank atom k with
// coefficient 1 for an empty code under BlankAtom.
func denseCode(c *online.SparseCodes, i, n int, blank sgd.BlankMode) []float64 {
	v := make([]float64, n)
	atoms, w := c.Row(i)
	if len(atoms) == 0 && blank == sgd.BlankAtom {
		v[c.Atoms] = 1
	}
	for k, a := range atoms {
		v[a] = w[k]
	}
	return v
}

// temporalReference accumulates V = mean of α αᵀ over the counted current
// codes and L = mean of u uᵀ over the columns u = α_t − ½α_{t−1} − ½α_{t+1},
// densely, by the definitions of Stats.AddTemporalGQ.
type temporalReference struct {
	n, cols, rows int
	blank         sgd.BlankMode
	v, l          *mat.Dense
}

func newTemporalReference(k int, blank sgd.BlankMode) *temporalReference {
	n := k
	if blank == sgd.BlankAtom {
		n++
	}
	return &temporalReference{n: n, blank: blank, v: mat.NewDense(n, n, nil), l: mat.NewDense(n, n, nil)}
}

func (r *temporalReference) add(prev, cur, next *online.SparseCodes) {
	for p := 0; p < cur.Rows; p++ {
		empty := func(c *online.SparseCodes) bool { return c.Ptr[p] == c.Ptr[p+1] }
		a := mat.NewVecDense(r.n, denseCode(cur, p, r.n, r.blank))
		if !empty(cur) || r.blank == sgd.BlankAtom {
			r.v.RankOne(r.v, 1, a, a)
			r.rows++
		}
		if r.blank == sgd.BlankSkip && (empty(prev) || empty(cur) || empty(next)) {
			continue
		}
		u := mat.NewVecDense(r.n, nil)
		u.AddScaledVec(a, -0.5, mat.NewVecDense(r.n, denseCode(prev, p, r.n, r.blank)))
		u.AddScaledVec(u, -0.5, mat.NewVecDense(r.n, denseCode(next, p, r.n, r.blank)))
		r.l.RankOne(r.l, 1, u, u)
		r.cols++
	}
}

func (r *temporalReference) V() *mat.Dense {
	var v mat.Dense
	v.Scale(1/float64(r.rows), r.v)
	return &v
}

func (r *temporalReference) L() *mat.Dense {
	var l mat.Dense
	l.Scale(1/float64(r.cols), r.l)
	return &l
}

func TestAddTemporalGQMatchesDefinition(t *testing.T) {
	const k, positions = 5, 8
	for _, tc := range []struct {
		blank    sgd.BlankMode
		multiHot bool
		frames   int
	}{
		{sgd.BlankAtom, true, 6},
		{sgd.BlankSkip, true, 6},
		{sgd.BlankAtom, true, 3},
	} {
		t.Run(fmt.Sprintf("%v/%d frames", tc.blank, tc.frames), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(31, uint64(tc.frames)))
			st := sgd.NewStats(sgd.StatsSettings{K: k, Blank: tc.blank, MultiHot: tc.multiHot})
			ref := newTemporalReference(k, tc.blank)
			var frames []*online.SparseCodes
			for f := 0; f < tc.frames; f++ {
				frames = append(frames, randomWeighted(rng, positions, k, 0.2))
			}
			for f := 1; f+1 < tc.frames; f++ {
				st.AddTemporalGQ(frames[f-1], frames[f], frames[f+1])
				ref.add(frames[f-1], frames[f], frames[f+1])
			}
			equalApprox(t, "V", denseOfSym(st, false), ref.V(), 1e-12)
			equalApprox(t, "L", denseOfSym(st, true), ref.L(), 1e-12)
			if st.Rows() != int64(ref.rows) || st.Pairs() != int64(ref.cols) {
				t.Errorf("rows %d, columns %d; want %d, %d", st.Rows(), st.Pairs(), ref.rows, ref.cols)
			}
		})
	}
}

// asGQ returns f_vq codes as 1-hot weighted codes of coefficient 1.
func asGQ(codes []int, k int) *online.SparseCodes {
	c := &online.SparseCodes{Rows: len(codes), Atoms: k, Ptr: []int{0}}
	for _, a := range codes {
		if a >= 0 {
			c.Index = append(c.Index, a)
			c.Cos = append(c.Cos, 1)
		}
		c.Ptr = append(c.Ptr, len(c.Index))
	}
	return c
}

func TestTemporalGQOneHotMatchesVQ(t *testing.T) {
	const k, positions = 7, 12
	for _, blank := range []sgd.BlankMode{sgd.BlankAtom, sgd.BlankSkip} {
		t.Run(blank.String(), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(41, 42))
			ss := sgd.StatsSettings{K: k, Blank: blank}
			vq, gq := sgd.NewStats(ss), sgd.NewStats(ss)
			s := sgd.SMTSettings{K: k, Blank: blank, Dim: 3, LearningRate: 0.05}
			mvq, mgq := sgd.NewSMT(s, rand.NewPCG(1, 1)), sgd.NewSMT(s, rand.NewPCG(1, 1))
			frames := [][]int{randomVQ(rng, positions, k, 0.2), randomVQ(rng, positions, k, 0.2)}
			for f := 2; f < 8; f++ {
				frames = append(frames, randomVQ(rng, positions, k, 0.2))
				p, c, n := frames[f-2], frames[f-1], frames[f]
				vq.AddTemporalVQ(p, c, n)
				gq.AddTemporalGQ(asGQ(p, k), asGQ(c, k), asGQ(n, k))
				if err := mvq.StepTemporalVQ(vq, p, c, n); err != nil {
					t.Fatal(err)
				}
				if err := mgq.StepTemporalGQ(gq, asGQ(p, k), asGQ(c, k), asGQ(n, k)); err != nil {
					t.Fatal(err)
				}
			}
			a, _ := vq.MarshalBinary()
			b, _ := gq.MarshalBinary()
			if !bytes.Equal(a, b) {
				t.Error("statistics of 1-hot weighted codes differ from f_vq's")
			}
			if !mat.Equal(mvq.P(), mgq.P()) {
				t.Error("SGD on 1-hot weighted codes differs from f_vq's")
			}
		})
	}
}

func TestStepTemporalGQMatchesDefinition(t *testing.T) {
	const k, dim, positions = 6, 2, 20
	rng := rand.New(rand.NewPCG(51, 52))
	for _, blank := range []sgd.BlankMode{sgd.BlankAtom, sgd.BlankSkip} {
		t.Run(blank.String(), func(t *testing.T) {
			ss := sgd.StatsSettings{K: k, Blank: blank, MultiHot: true}
			st := sgd.NewStats(ss)
			s := sgd.SMTSettings{K: k, Blank: blank, Dim: dim, LearningRate: 0.05, Decay: 0.3, Gamma1: 0.01}
			m := sgd.NewSMT(s, rand.NewPCG(5, 6))
			for step := 0; step < 3; step++ {
				f0, f1, f2 := randomWeighted(rng, positions, k, 0.1), randomWeighted(rng, positions, k, 0.1), randomWeighted(rng, positions, k, 0.1)
				batch := sgd.NewStats(ss)
				st.AddTemporalGQ(f0, f1, f2)
				batch.AddTemporalGQ(f0, f1, f2)
				eta := s.LearningRate / (1 + s.Decay*float64(step))
				want, _ := expectedStep(mat.DenseCopyOf(m.P()), denseOfSym(batch, true), denseOfSym(st, false), 2*eta, eta*s.Gamma1, nil)
				if err := m.StepTemporalGQ(st, f0, f1, f2); err != nil {
					t.Fatal(err)
				}
				equalApprox(t, "P", m.P(), want, 1e-8)
			}
		})
	}
}

// hatCodes returns the piecewise-linear interpolation codes of points x on
// k landmarks at 0, 1, ..., k−1: weight 1 − frac on ⌊x⌋, frac on ⌊x⌋+1.
func hatCodes(xs []float64, k int) *online.SparseCodes {
	c := &online.SparseCodes{Rows: len(xs), Atoms: k, Ptr: []int{0}}
	for _, x := range xs {
		i := min(int(x), k-2)
		f := x - float64(i)
		if f < 1 {
			c.Index = append(c.Index, i)
			c.Cos = append(c.Cos, 1-f)
		}
		if f > 0 {
			c.Index = append(c.Index, i+1)
			c.Cos = append(c.Cos, f)
		}
		c.Ptr = append(c.Ptr, len(c.Index))
	}
	return c
}

// lineTriples returns, for n points each moving at its own constant
// speed on [0, k−1], their positions at times t−1, t, t+1.
func lineTriples(rng *rand.Rand, n, k int) (prev, cur, next []float64) {
	for len(cur) < n {
		v := 0.2 + 1.5*rng.Float64()
		x := rng.Float64() * float64(k-1)
		if x-v < 0 || x+v > float64(k-1) {
			continue
		}
		prev, cur, next = append(prev, x-v), append(cur, x), append(next, x+v)
	}
	return prev, cur, next
}

// TestTemporalSGDReachesClosedForm learns the embedding of landmarks on a
// line from interpolation codes of points in uniform motion, by SGD from
// a random P, and compares its objective with the closed form's.
func TestTemporalSGDReachesClosedForm(t *testing.T) {
	const k, dim, batch = 16, 4, 512
	rng := rand.New(rand.NewPCG(61, 62))
	ss := sgd.StatsSettings{K: k, Blank: sgd.BlankSkip, MultiHot: true}
	st := sgd.NewStats(ss)
	var triples [][3]*online.SparseCodes
	for b := 0; b < 20; b++ {
		p, c, n := lineTriples(rng, batch, k)
		tr := [3]*online.SparseCodes{hatCodes(p, k), hatCodes(c, k), hatCodes(n, k)}
		st.AddTemporalGQ(tr[0], tr[1], tr[2])
		triples = append(triples, tr)
	}
	var closed mat.Dense
	if _, err := spectral.SolveSMT(&closed, st, spectral.Settings{Dim: dim, Method: spectral.Dense}, nil); err != nil {
		t.Fatal(err)
	}
	// The constant and the ramp are straight: zero objective.
	ramp := mat.NewDense(2, k, nil)
	for a := 0; a < k; a++ {
		ramp.Set(0, a, 1)
		ramp.Set(1, a, float64(a))
	}
	if o := spectral.Objective(st, ramp); math.Abs(o) > 1e-12 {
		t.Errorf("tr(PLPᵀ) of the constant and the ramp = %v, want 0", o)
	}
	m := sgd.NewSMT(sgd.SMTSettings{K: k, Blank: sgd.BlankSkip, Dim: dim, LearningRate: 0.1, Decay: 0.002}, rand.NewPCG(7, 8))
	for epoch := 0; epoch < 60; epoch++ {
		for _, tr := range triples {
			if err := m.StepTemporalGQ(st, tr[0], tr[1], tr[2]); err != nil {
				t.Fatal(err)
			}
		}
	}
	want, got := spectral.Objective(st, &closed), spectral.Objective(st, m.P())
	if !(got <= 1.02*want+1e-12) || spectral.ConstraintError(st, m.P()) > 1e-9 {
		t.Errorf("SGD objective %v, constraint error %v; closed form %v",
			got, spectral.ConstraintError(st, m.P()), want)
	}
}

func TestTemporalGQPanics(t *testing.T) {
	const k = 4
	good := func() *online.SparseCodes {
		return &online.SparseCodes{Rows: 2, Atoms: k, Ptr: []int{0, 1, 3}, Index: []int{0, 1, 3}, Cos: []float64{1, 0.5, 0.5}}
	}
	tests := map[string]func(p, c, n *online.SparseCodes){
		"rows":       func(p, c, n *online.SparseCodes) { n.Rows, n.Ptr = 1, n.Ptr[:2] },
		"atoms":      func(p, c, n *online.SparseCodes) { c.Atoms = k + 1 },
		"order":      func(p, c, n *online.SparseCodes) { p.Index[1], p.Index[2] = 3, 1 },
		"range":      func(p, c, n *online.SparseCodes) { c.Index[0] = k },
		"nan":        func(p, c, n *online.SparseCodes) { n.Cos[2] = math.NaN() },
		"short cos":  func(p, c, n *online.SparseCodes) { c.Cos = c.Cos[:2] },
		"decreasing": func(p, c, n *online.SparseCodes) { p.Ptr[1] = 4 },
	}
	for name, spoil := range tests {
		t.Run(name, func(t *testing.T) {
			p, c, n := good(), good(), good()
			spoil(p, c, n)
			st := sgd.NewStats(sgd.StatsSettings{K: k, MultiHot: true})
			m := sgd.NewSMT(sgd.SMTSettings{K: k, Dim: 2}, rand.NewPCG(1, 2))
			for what, f := range map[string]func(){
				"AddTemporalGQ":  func() { st.AddTemporalGQ(p, c, n) },
				"StepTemporalGQ": func() { _ = m.StepTemporalGQ(st, p, c, n) },
			} {
				func() {
					defer func() {
						if recover() == nil {
							t.Errorf("%s: no panic", what)
						}
					}()
					f()
				}()
			}
		})
	}
	t.Run("multi-hot", func(t *testing.T) {
		st := sgd.NewStats(sgd.StatsSettings{K: k})
		m := sgd.NewSMT(sgd.SMTSettings{K: k, Dim: 2}, rand.NewPCG(1, 2))
		for what, f := range map[string]func(){
			"AddTemporalGQ":  func() { st.AddTemporalGQ(good(), good(), good()) },
			"StepTemporalGQ": func() { _ = m.StepTemporalGQ(st, good(), good(), good()) },
		} {
			func() {
				defer func() {
					if recover() == nil {
						t.Errorf("%s without MultiHot: no panic", what)
					}
				}()
				f()
			}()
		}
	})
}

// A point moving at constant speed over landmarks on a line, coded by
// interpolation between its two nearest landmarks: every affine function
// of the landmarks is straight in time, so the second-order temporal
// objective of the ramp is zero, while a bump is not.
func ExampleStats_AddTemporalGQ() {
	const k = 5
	st := sgd.NewStats(sgd.StatsSettings{K: k, Blank: sgd.BlankSkip, MultiHot: true})
	xs := []float64{0.3, 0.9, 1.5, 2.1, 2.7, 3.3}
	for t := 1; t+1 < len(xs); t++ {
		st.AddTemporalGQ(hatCodes(xs[t-1:t], k), hatCodes(xs[t:t+1], k), hatCodes(xs[t+1:t+2], k))
	}
	ramp := mat.NewDense(1, k, []float64{0, 1, 2, 3, 4})
	bump := mat.NewDense(1, k, []float64{0, 1, 0, 1, 0})
	fmt.Printf("ramp: %.4f\n", spectral.Objective(st, ramp))
	fmt.Printf("bump: %.4f\n", spectral.Objective(st, bump))
	// Output:
	// ramp: 0.0000
	// bump: 0.1475
}

func BenchmarkStatsAddTemporalGQ(b *testing.B) {
	const k, positions = 1024, 1024
	rng := rand.New(rand.NewPCG(71, 72))
	f0, f1, f2 := randomWeighted(rng, positions, k, 0.1), randomWeighted(rng, positions, k, 0.1), randomWeighted(rng, positions, k, 0.1)
	st := sgd.NewStats(sgd.StatsSettings{K: k, MultiHot: true})
	b.ReportAllocs()
	for b.Loop() {
		st.AddTemporalGQ(f0, f1, f2)
	}
	b.ReportMetric(float64(b.N*positions)/b.Elapsed().Seconds(), "positions/s")
}

func BenchmarkSMTStepTemporalGQ(b *testing.B) {
	const k, positions, dim = 256, 1024, 32
	rng := rand.New(rand.NewPCG(73, 74))
	f0, f1, f2 := randomWeighted(rng, positions, k, 0.1), randomWeighted(rng, positions, k, 0.1), randomWeighted(rng, positions, k, 0.1)
	st := sgd.NewStats(sgd.StatsSettings{K: k, MultiHot: true, VOnly: true})
	st.AddTemporalGQ(f0, f1, f2)
	m := sgd.NewSMT(sgd.SMTSettings{K: k, Dim: dim, LearningRate: 0.01}, rand.NewPCG(1, 2))
	b.ReportAllocs()
	for b.Loop() {
		if err := m.StepTemporalGQ(st, f0, f1, f2); err != nil {
			b.Fatal(err)
		}
	}
}
