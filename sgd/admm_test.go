package sgd

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"gonum.org/v1/gonum/floats"
	"gonum.org/v1/gonum/floats/scalar"
	"gonum.org/v1/gonum/mat"

	"github.com/smtd/smtd/online"
)

func TestProjectSimplex(t *testing.T) {
	for _, tc := range []struct {
		v, want []float64
	}{
		{[]float64{0.2, 0.3, 0.5}, []float64{0.2, 0.3, 0.5}}, // already on the simplex
		{[]float64{1, 1}, []float64{0.5, 0.5}},
		{[]float64{2, 0}, []float64{1, 0}},
		{[]float64{-1, -1, -1, -1}, []float64{0.25, 0.25, 0.25, 0.25}},
		{[]float64{0.9, 0.8, -3}, []float64{0.55, 0.45, 0}},
		{[]float64{5}, []float64{1}},
	} {
		got := make([]float64, len(tc.v))
		ProjectSimplex(got, tc.v)
		if !floats.EqualApprox(got, tc.want, 1e-12) {
			t.Errorf("ProjectSimplex(%v) = %v, want %v", tc.v, got, tc.want)
		}
	}

	// Properties on random vectors: on the simplex, idempotent, and the
	// closest point: (v − p)·(y − p) <= 0 for every y of the simplex.
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := 0; trial < 200; trial++ {
		k := 1 + rng.IntN(12)
		v := make([]float64, k)
		for j := range v {
			v[j] = 3 * rng.NormFloat64()
		}
		p := make([]float64, k)
		ProjectSimplex(p, v)
		if s := floats.Sum(p); !scalar.EqualWithinAbs(s, 1, 1e-12) || floats.Min(p) < 0 {
			t.Fatalf("projection of %v = %v: sum %v, min %v", v, p, s, floats.Min(p))
		}
		again := append([]float64(nil), p...)
		ProjectSimplex(again, again) // aliasing allowed
		if !floats.EqualApprox(again, p, 1e-12) {
			t.Fatalf("not idempotent: %v then %v", p, again)
		}
		for y := 0; y < 20; y++ {
			q := make([]float64, k)
			for j := range q {
				q[j] = rng.ExpFloat64()
			}
			floats.Scale(1/floats.Sum(q), q)
			var ip float64
			for j := range q {
				ip += (v[j] - p[j]) * (q[j] - p[j])
			}
			if ip > 1e-9 {
				t.Fatalf("projection %v of %v is not the nearest point: %v", p, v, ip)
			}
		}
	}
}

// synthDictionary returns k true atoms (rows, N(0, 1) entries) and t
// samples with nz non-zero N(0, 1) codes each, as in section 4.1.
func synthDictionary(rng *rand.Rand, n, k, t, nz int) (truth, x *mat.Dense) {
	truth = mat.NewDense(k, n, nil)
	for i := range truth.RawMatrix().Data {
		truth.RawMatrix().Data[i] = rng.NormFloat64()
	}
	x = mat.NewDense(t, n, nil)
	for i := 0; i < t; i++ {
		for _, a := range rng.Perm(k)[:nz] {
			floats.AddScaled(x.RawRowView(i), rng.NormFloat64(), truth.RawRowView(a))
		}
	}
	return truth, x
}

// fitR2 returns the R² of x reconstructed by the implicit dictionary from
// the codes of Encode.
func fitR2(m *ADMM, x *mat.Dense) float64 {
	var z, xh mat.Dense
	m.Encode(&z, x)
	xh.Mul(&z, m.Dictionary())
	t, n := x.Dims()
	var sse, sst float64
	for j := 0; j < n; j++ {
		col := mat.Col(nil, j, x)
		mean := floats.Sum(col) / float64(t)
		for i, v := range col {
			sse += (v - xh.At(i, j)) * (v - xh.At(i, j))
			sst += (v - mean) * (v - mean)
		}
	}
	return 1 - sse/sst
}

func TestADMMRecoversSyntheticDictionary(t *testing.T) {
	const n, k, samples, batch = 12, 6, 600, 64
	rng := rand.New(rand.NewPCG(3, 4))
	truth, x := synthDictionary(rng, n, k, samples, 2)
	km := online.NewKMeans(online.KMeansSettings{K: k, Dim: n}, rand.NewPCG(5, 6))
	for e := 0; e < 5; e++ {
		for lo := 0; lo < samples; lo += batch {
			km.Learn(x.Slice(lo, min(samples, lo+batch), 0, n), nil)
		}
	}
	m := NewADMM(ADMMSettings{K: k, Lambda: 0.2, Memory: samples}, n, rand.NewPCG(7, 8))
	if err := m.WarmStart(km.Atoms()); err != nil {
		t.Fatal(err)
	}
	mb := mat.NewDense(batch, n, nil)
	for step := 0; step < 600; step++ {
		for i := 0; i < batch; i++ {
			mb.SetRow(i, x.RawRowView(rng.IntN(samples)))
		}
		if err := m.Step(mb); err != nil {
			t.Fatal(err)
		}
	}
	if r2 := fitR2(m, x); r2 < 0.99 {
		t.Errorf("R² = %.4f, want >= 0.99", r2)
	}
	if r2 := m.R2(); r2 < 0.97 {
		t.Errorf("running R² = %.4f, want >= 0.97", r2)
	}
	d := m.Dictionary()
	for i := 0; i < k; i++ {
		best := 0.0
		for j := 0; j < k; j++ {
			c := mat.Dot(truth.RowView(i), d.RowView(j)) / (mat.Norm(truth.RowView(i), 2) * mat.Norm(d.RowView(j), 2))
			best = math.Max(best, math.Abs(c))
		}
		if best < 0.95 {
			t.Errorf("true atom %d: best |cos| %.3f, want >= 0.95", i, best)
		}
	}
}

// naiveADMM is Algorithm 1 with an explicit K×K P_i and M_i per sample,
// for checking the shared-matrix form of ADMM.Step.
type naiveADMM struct {
	s    ADMMSettings
	w    *mat.Dense
	z    [][]float64
	zt   [][]float64 // z at the last P-step, for Schedule3's step bound
	p, m []*mat.Dense
}

func (nv *naiveADMM) lipschitz() float64 {
	k, _ := nv.w.Dims()
	var sym mat.SymDense
	var power [2][]float64
	return admmGram(mat.NewDense(k, k, nil), &sym, nv.w, &power)
}

// offset returns ωI (R₁) or ω diag(z) (R₂).
func (nv *naiveADMM) offset(z []float64) *mat.Dense {
	k := len(z)
	d := mat.NewDense(k, k, nil)
	for j := 0; j < k; j++ {
		if nv.s.Prior == PriorSimplex {
			d.Set(j, j, nv.s.omega()*z[j])
		} else {
			d.Set(j, j, nv.s.omega())
		}
	}
	return d
}

// pStep is eq. 10 (14): P = (M − ½WWᵀ)/ρ + zzᵀ + ωI (ω diag z).
func (nv *naiveADMM) pStep(i int) {
	var wwt, zz mat.Dense
	wwt.Mul(nv.w, nv.w.T())
	z := mat.NewVecDense(len(nv.z[i]), nv.z[i])
	zz.Outer(1, z, z)
	p := mat.NewDense(len(nv.z[i]), len(nv.z[i]), nil)
	p.Scale(-0.5, &wwt)
	p.Add(p, nv.m[i])
	p.Scale(1/nv.s.rho(), p)
	p.Add(p, &zz)
	p.Add(p, nv.offset(nv.z[i]))
	nv.p[i] = p
	nv.zt[i] = append(nv.zt[i][:0], nv.z[i]...)
}

// zUpdate is one update of eq. 9 (13) with the explicit P_i and M_i.
func (nv *naiveADMM) zUpdate(i int, x []float64, lip float64, quartic bool) {
	s := nv.s
	rho, om := s.rho(), s.omega()
	z := nv.z[i]
	k := len(z)
	zv := mat.NewVecDense(k, z)
	// C = zzᵀ + ωI (ω diag z) − P + M/ρ.
	var c mat.Dense
	c.Outer(1, zv, zv)
	c.Add(&c, nv.offset(z))
	c.Sub(&c, nv.p[i])
	var mr mat.Dense
	mr.Scale(1/rho, nv.m[i])
	c.Add(&c, &mr)
	var g, wx mat.VecDense
	g.MulVec(&c, zv)
	g.ScaleVec(2*rho, &g)
	wx.MulVec(nv.w, mat.NewVecDense(len(x), x))
	g.SubVec(&g, &wx)
	if s.Prior == PriorSimplex {
		for j := 0; j < k; j++ {
			g.SetVec(j, g.AtVec(j)+rho*om*c.At(j, j))
		}
	}
	l := lip
	if quartic {
		zt := nv.zt[i]
		l += 2 * rho * (3*floats.Dot(z, z) + floats.Dot(zt, zt))
		if s.Prior == PriorSimplex {
			l += rho * om * (8 + om)
		}
	}
	for j := range z {
		z[j] -= g.AtVec(j) / l
	}
	if s.Prior == PriorSimplex {
		ProjectSimplex(z, z)
		return
	}
	thr := s.lambda() / l
	for j, v := range z {
		z[j] = math.Copysign(math.Max(math.Abs(v)-thr, 0), v)
	}
}

// solveCodes is the warm start's accelerated gradient written out: each
// update is zUpdate (P tracking z) at the extrapolated point y.
func (nv *naiveADMM) solveCodes(i int, x []float64, lip float64) {
	k := len(nv.z[i])
	y := slices.Clone(nv.z[i])
	back, fwd := make([]float64, k), make([]float64, k)
	t := 1.0
	for it := 0; it < nv.s.warmIterations(); it++ {
		prev := slices.Clone(nv.z[i])
		copy(nv.z[i], y)
		nv.pStep(i)
		nv.zUpdate(i, x, lip, false)
		z := nv.z[i]
		if floats.Dot(floats.SubTo(back, y, z), floats.SubTo(fwd, z, prev)) > 0 {
			t = 1 // restart: the step went against the momentum
		}
		next := (1 + math.Sqrt(1+4*t*t)) / 2
		for j := range y {
			y[j] = z[j] + (t-1)/next*(z[j]-prev[j])
		}
		t = next
	}
	nv.pStep(i)
}

// step is one Step of ADMM written out per sample.
func (nv *naiveADMM) step(x *mat.Dense) {
	s := nv.s
	b, n := x.Dims()
	k := s.K
	sched := s.Schedule.orDefault()
	var wwt mat.Dense
	wwt.Mul(nv.w, nv.w.T())
	lip := nv.lipschitz()
	nv.z, nv.zt = make([][]float64, b), make([][]float64, b)
	nv.p, nv.m = make([]*mat.Dense, b), make([]*mat.Dense, b)
	for i := 0; i < b; i++ {
		nv.z[i] = make([]float64, k)
		if s.Prior == PriorSimplex {
			best, bestD := 0, math.Inf(1)
			for j := 0; j < k; j++ {
				wj := nv.w.RawRowView(j)
				if d := floats.Dot(wj, wj) - 2*floats.Dot(wj, x.RawRowView(i)); d < bestD {
					best, bestD = j, d
				}
			}
			nv.z[i][best] = 1
		}
		nv.m[i] = mat.NewDense(k, k, nil)
		nv.m[i].Scale(0.5, &wwt) // M⁰ = ½WWᵀ
		nv.pStep(i)
		nv.solveCodes(i, x.RawRowView(i), lip)
	}
	for pass := 0; pass < s.passes(); pass++ {
		if pass > 0 {
			lip = nv.lipschitz()
		}
		for i := 0; i < b; i++ {
			for it := 0; it < s.iterations(); it++ {
				nv.zUpdate(i, x.RawRowView(i), lip, sched == Schedule3)
				if sched != Schedule3 {
					nv.pStep(i)
				}
			}
			nv.pStep(i)
			if sched != Schedule1 {
				// M ← M + ρ(zzᵀ + ωI − P).
				zv := mat.NewVecDense(k, nv.z[i])
				var d mat.Dense
				d.Outer(1, zv, zv)
				d.Add(&d, nv.offset(nv.z[i]))
				d.Sub(&d, nv.p[i])
				d.Scale(s.rho(), &d)
				nv.m[i].Add(nv.m[i], &d)
			}
		}
		// W ← W − η_W (1/B) Σ (−z xᵀ + P W).
		grad := mat.NewDense(k, n, nil)
		for i := 0; i < b; i++ {
			var zx, pw mat.Dense
			zx.Outer(1, mat.NewVecDense(k, nv.z[i]), mat.NewVecDense(n, x.RawRowView(i)))
			pw.Mul(nv.p[i], nv.w)
			grad.Sub(grad, &zx)
			grad.Add(grad, &pw)
		}
		grad.Scale(s.rate()/float64(b), grad)
		next := mat.DenseCopyOf(nv.w)
		next.Sub(next, grad)
		if s.Prior == PriorSparse {
			for j := 0; j < k; j++ {
				row := next.RawRowView(j)
				floats.Scale(1/floats.Norm(row, 2), row)
			}
		}
		nv.w = next
		wwt.Mul(nv.w, nv.w.T())
		if sched == Schedule1 {
			for i := range nv.m {
				nv.m[i].Scale(0.5, &wwt)
			}
		}
	}
}

func TestADMMStepMatchesAlgorithm1(t *testing.T) {
	const n, k, b = 5, 4, 6
	for _, prior := range []Prior{PriorSparse, PriorSimplex} {
		for _, sched := range []Schedule{Schedule1, Schedule2, Schedule3} {
			for _, passes := range []int{1, 3} {
				t.Run(fmt.Sprintf("%v/schedule%d/passes%d", prior, sched, passes), func(t *testing.T) {
					rng := rand.New(rand.NewPCG(uint64(sched), uint64(passes)))
					s := ADMMSettings{K: k, Prior: prior, Schedule: sched, Lambda: 0.3, Omega: 0.05,
						Rho: 0.7, LearningRate: 0.05, Iterations: 4, Passes: passes}
					m := NewADMM(s, n, rand.NewPCG(9, uint64(prior)))
					nv := &naiveADMM{s: s, w: mat.DenseCopyOf(m.Weights())}
					x := mat.NewDense(b, n, nil)
					for step := 0; step < 3; step++ {
						for i := range x.RawMatrix().Data {
							x.RawMatrix().Data[i] = rng.NormFloat64()
						}
						if err := m.Step(x); err != nil {
							t.Fatal(err)
						}
						nv.step(x)
						if !mat.EqualApprox(m.Weights(), nv.w, 1e-10) {
							t.Fatalf("step %d: W =\n%v\nwant\n%v", step, mat.Formatted(m.Weights()), mat.Formatted(nv.w))
						}
						for i := 0; i < b; i++ {
							if !floats.EqualApprox(m.work.codes.z.RawRowView(i), nv.z[i], 1e-10) {
								t.Fatalf("step %d, row %d: z = %v, want %v", step, i, m.work.codes.z.RawRowView(i), nv.z[i])
							}
						}
					}
				})
			}
		}
	}
}

func TestADMMEncodeIsTheStepsZStep(t *testing.T) {
	const n, k, b = 8, 5, 10
	for _, prior := range []Prior{PriorSparse, PriorSimplex} {
		for _, sched := range []Schedule{Schedule1, Schedule3} {
			m := NewADMM(ADMMSettings{K: k, Prior: prior, Schedule: sched}, n, rand.NewPCG(1, 1))
			rng := rand.New(rand.NewPCG(2, 2))
			x := mat.NewDense(b, n, nil)
			for i := range x.RawMatrix().Data {
				x.RawMatrix().Data[i] = rng.NormFloat64()
			}
			before, _ := m.MarshalBinary()
			var z mat.Dense
			m.Encode(&z, x)
			after, _ := m.MarshalBinary()
			if !bytes.Equal(before, after) {
				t.Fatalf("%v schedule %d: Encode changed the learner", prior, sched)
			}
			if err := m.Step(x); err != nil {
				t.Fatal(err)
			}
			if !mat.Equal(&z, m.work.codes.z) {
				t.Errorf("%v schedule %d: Encode's codes differ from the step's", prior, sched)
			}
			if prior == PriorSimplex {
				for i := 0; i < b; i++ {
					if s := floats.Sum(z.RawRowView(i)); !scalar.EqualWithinAbs(s, 1, 1e-12) || floats.Min(z.RawRowView(i)) < 0 {
						t.Errorf("simplex code %v: sum %v", z.RawRowView(i), s)
					}
				}
			}
		}
	}
}

// admmBatches returns count minibatches of b rows of dimension n.
func admmBatches(count, b, n int, seed uint64) []*mat.Dense {
	rng := rand.New(rand.NewPCG(seed, 7))
	out := make([]*mat.Dense, count)
	for c := range out {
		out[c] = mat.NewDense(b, n, nil)
		for i := range out[c].RawMatrix().Data {
			out[c].RawMatrix().Data[i] = rng.NormFloat64()
		}
	}
	return out
}

func TestADMMMarshalResumeExact(t *testing.T) {
	const n, k = 7, 5
	for _, tc := range []ADMMSettings{
		{K: k},
		{K: k, Schedule: Schedule2, Passes: 2, Memory: 50},
		{K: k, Schedule: Schedule3, WarmIterations: -1, Memory: math.Inf(1)},
		{K: k, Prior: PriorSimplex, Omega: 0.1, LearningRate: 0.002},
	} {
		batches := admmBatches(6, 9, n, 3)
		a := NewADMM(tc, n, rand.NewPCG(4, 5))
		for _, x := range batches[:3] {
			if err := a.Step(x); err != nil {
				t.Fatal(err)
			}
		}
		data, err := a.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		b := NewADMM(ADMMSettings{K: k, Prior: tc.Prior}, n, rand.NewPCG(6, 7))
		if err := b.UnmarshalBinary(data); err != nil {
			t.Fatal(err)
		}
		if b.Settings() != a.Settings() {
			t.Errorf("settings %+v, want %+v", b.Settings(), a.Settings())
		}
		again, _ := b.MarshalBinary()
		if !bytes.Equal(data, again) {
			t.Fatalf("%+v: round trip is not bit-exact", tc)
		}
		c := a.Clone()
		for _, x := range batches[3:] {
			for _, m := range []*ADMM{a, b, c} {
				if err := m.Step(x); err != nil {
					t.Fatal(err)
				}
			}
		}
		da, _ := a.MarshalBinary()
		db, _ := b.MarshalBinary()
		dc, _ := c.MarshalBinary()
		if !bytes.Equal(da, db) || !bytes.Equal(da, dc) {
			t.Errorf("%+v: resumed or cloned learner diverged from the original", tc)
		}
		if math.Float64bits(a.R2()) != math.Float64bits(b.R2()) {
			t.Errorf("%+v: R² %v after resume, want %v", tc, b.R2(), a.R2())
		}
	}
}

func TestADMMUnmarshalErrors(t *testing.T) {
	a := NewADMM(ADMMSettings{K: 3}, 4, rand.NewPCG(1, 2))
	if err := a.Step(admmBatches(1, 5, 4, 1)[0]); err != nil {
		t.Fatal(err)
	}
	good, _ := a.MarshalBinary()
	mutate := func(f func([]byte) []byte) []byte { return f(append([]byte(nil), good...)) }
	for _, tc := range []struct {
		name string
		data []byte
		want error
	}{
		{"empty", nil, ErrVersion},
		{"version", mutate(func(b []byte) []byte { b[0] = 9; return b }), ErrVersion},
		{"kind", mutate(func(b []byte) []byte { b[1] = kindSMT; return b }), ErrFormat},
		{"truncated", good[:len(good)-1], ErrFormat},
		{"trailing", append(append([]byte(nil), good...), 0), ErrFormat},
		{"K", mutate(func(b []byte) []byte { b[2] = 4; return b }), ErrFormat},
		{"prior", mutate(func(b []byte) []byte { b[18] = byte(PriorSimplex); return b }), ErrFormat},
		{"schedule", mutate(func(b []byte) []byte { b[19] = 7; return b }), ErrFormat},
	} {
		b := NewADMM(ADMMSettings{K: 3}, 4, rand.NewPCG(3, 4))
		before, _ := b.MarshalBinary()
		err := b.UnmarshalBinary(tc.data)
		if !errors.Is(err, tc.want) {
			t.Errorf("%s: error %v, want %v", tc.name, err, tc.want)
		}
		if after, _ := b.MarshalBinary(); !bytes.Equal(before, after) {
			t.Errorf("%s: a failed UnmarshalBinary changed the learner", tc.name)
		}
	}
}

func TestADMMStepErrorLeavesModel(t *testing.T) {
	a := NewADMM(ADMMSettings{K: 3}, 4, rand.NewPCG(1, 2))
	x := admmBatches(1, 5, 4, 1)[0]
	if err := a.Step(x); err != nil {
		t.Fatal(err)
	}
	before, _ := a.MarshalBinary()
	bad := mat.DenseCopyOf(x)
	bad.Set(2, 1, math.NaN())
	var ae *ADMMError
	if err := a.Step(bad); !errors.As(err, &ae) || ae.Stage != "input" || ae.Row != 2 || ae.Step != 1 {
		t.Errorf("NaN input: error %v, want an *ADMMError at input row 2", err)
	}
	s := a.Settings()
	s.LearningRate = math.MaxFloat64
	if err := a.SetSettings(s); err != nil {
		t.Fatal(err)
	}
	huge := mat.DenseCopyOf(x)
	huge.Scale(1e200, huge)
	if err := a.Step(huge); !errors.As(err, &ae) || ae.Stage != "W-step" {
		t.Errorf("overflowing W-step: error %v, want an *ADMMError in the W-step", err)
	}
	s.LearningRate = 0
	if err := a.SetSettings(s); err != nil {
		t.Fatal(err)
	}
	if after, _ := a.MarshalBinary(); !bytes.Equal(before, after) {
		t.Error("a refused step changed the learner")
	}
	if !a.Finite() {
		t.Error("learner not finite after refused steps")
	}
}

func TestADMMSettings(t *testing.T) {
	for _, tc := range []struct {
		s  ADMMSettings
		ok bool
	}{
		{ADMMSettings{K: 1}, true},
		{ADMMSettings{K: 4, Prior: PriorSimplex, Schedule: Schedule3, Memory: math.Inf(1), WarmIterations: -1}, true},
		{ADMMSettings{}, false},
		{ADMMSettings{K: 2, Prior: 2}, false},
		{ADMMSettings{K: 2, Schedule: 4}, false},
		{ADMMSettings{K: 2, Lambda: -1}, false},
		{ADMMSettings{K: 2, Omega: math.NaN()}, false},
		{ADMMSettings{K: 2, Rho: math.Inf(1)}, false},
		{ADMMSettings{K: 2, LearningRate: -0.1}, false},
		{ADMMSettings{K: 2, Iterations: -1}, false},
		{ADMMSettings{K: 2, Passes: -2}, false},
		{ADMMSettings{K: 2, Memory: -1}, false},
	} {
		if err := tc.s.Validate(); (err == nil) != tc.ok {
			t.Errorf("Validate(%+v) = %v, want ok %v", tc.s, err, tc.ok)
		}
	}
	a := NewADMM(ADMMSettings{K: 3}, 2, rand.NewPCG(1, 1))
	if err := a.SetSettings(ADMMSettings{K: 4}); err == nil {
		t.Error("SetSettings accepted another K")
	}
	if err := a.SetSettings(ADMMSettings{K: 3, Prior: PriorSimplex}); err == nil {
		t.Error("SetSettings accepted another prior")
	}
	if err := a.SetSettings(ADMMSettings{K: 3, Schedule: Schedule2, LearningRate: 0.5}); err != nil {
		t.Errorf("SetSettings refused new rates: %v", err)
	}
	if !math.IsNaN(a.R2()) {
		t.Errorf("R² before any step = %v, want NaN", a.R2())
	}
}

func TestADMMWarmStart(t *testing.T) {
	a := NewADMM(ADMMSettings{K: 3}, 2, rand.NewPCG(1, 1))
	old := mat.DenseCopyOf(a.Weights())
	atoms := mat.NewDense(3, 2, []float64{3, 4, 0, 0, 0, -2})
	if err := a.WarmStart(atoms); err != nil {
		t.Fatal(err)
	}
	want := mat.NewDense(3, 2, []float64{0.6, 0.8, old.At(1, 0), old.At(1, 1), 0, -1})
	if !mat.EqualApprox(a.Weights(), want, 1e-15) {
		t.Errorf("W after warm start =\n%v\nwant\n%v", mat.Formatted(a.Weights()), mat.Formatted(want))
	}
	atoms.Set(0, 0, math.Inf(1))
	if err := a.WarmStart(atoms); err == nil {
		t.Error("WarmStart accepted Inf")
	}
	if !mat.EqualApprox(a.Weights(), want, 1e-15) {
		t.Error("a refused warm start changed W")
	}
}

func BenchmarkADMMStep(b *testing.B) {
	for _, tc := range []struct {
		k, n  int
		prior Prior
	}{{64, 64, PriorSparse}, {256, 256, PriorSparse}, {12, 2, PriorSimplex}} {
		b.Run(fmt.Sprintf("%v/K=%d/N=%d", tc.prior, tc.k, tc.n), func(b *testing.B) {
			batches := admmBatches(4, 128, tc.n, 1)
			a := NewADMM(ADMMSettings{K: tc.k, Prior: tc.prior, Lambda: 1}, tc.n, rand.NewPCG(1, 2))
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				if err := a.Step(batches[i%len(batches)]); err != nil {
					b.Fatal(err)
				}
				i++
			}
			b.ReportMetric(float64(i*128)/b.Elapsed().Seconds(), "samples/s")
		})
	}
}
