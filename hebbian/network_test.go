package hebbian

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"gonum.org/v1/gonum/floats/scalar"
	"gonum.org/v1/gonum/mat"
)

// randMatrix returns an r×c matrix of N(mean, sd²) entries.
func randMatrix(rng *rand.Rand, r, c int, mean, sd float64) *mat.Dense {
	m := mat.NewDense(r, c, nil)
	for i := range r {
		for j := range c {
			m.Set(i, j, mean+sd*rng.NormFloat64())
		}
	}
	return m
}

// energy evaluates the minibatch energy of eq. 8 (with a full Q and its
// ridge (λ/2)‖Q‖² when mixing, diag(q) otherwise) at given responses y,
// term by term and sample by sample, independently of Network.
func energy(k Kernel, w, q *mat.Dense, l *mat.Dense, lambda float64, mixing bool, x, y *mat.Dense) float64 {
	b, _ := x.Dims()
	n, _ := w.Dims()
	var g, f mat.Dense
	Gram(&g, k, w, w)
	Gram(&f, k, x, w)
	var qgq mat.Dense
	qgq.Product(q, &g, q.T())
	var e float64
	for s := range b {
		var t float64
		for i := range n {
			var z float64
			for j := range n {
				z += q.At(i, j) * f.At(s, j)
			}
			t -= y.At(s, i)*z - 0.5*qgq.At(i, i)
		}
		for i := range n {
			for j := range n {
				t += 0.5 * (l.At(i, j)*y.At(s, i)*y.At(s, j) - 0.5*l.At(i, j)*l.At(i, j))
			}
			t += 0.5 * lambda * y.At(s, i) * y.At(s, i)
		}
		e += t / float64(b)
	}
	if mixing {
		e += 0.5 * lambda * mat.Norm(q, 2) * mat.Norm(q, 2)
	}
	return e
}

// numGrad returns the central finite-difference gradient of fn with
// respect to every entry of p.
func numGrad(p *mat.Dense, fn func() float64) *mat.Dense {
	r, c := p.Dims()
	g := mat.NewDense(r, c, nil)
	const h = 1e-6
	for i := range r {
		for j := range c {
			v := p.At(i, j)
			p.Set(i, j, v+h)
			up := fn()
			p.Set(i, j, v-h)
			down := fn()
			p.Set(i, j, v)
			g.Set(i, j, (up-down)/(2*h))
		}
	}
	return g
}

func assertClose(t *testing.T, name string, got, want mat.Matrix, tol float64) {
	t.Helper()
	r, c := want.Dims()
	if gr, gc := got.Dims(); gr != r || gc != c {
		t.Fatalf("%s: shape %dx%d, want %dx%d", name, gr, gc, r, c)
	}
	for i := range r {
		for j := range c {
			if g, w := got.At(i, j), want.At(i, j); !scalar.EqualWithinAbsOrRel(g, w, tol, tol) {
				t.Fatalf("%s[%d,%d] = %v, want %v", name, i, j, g, w)
			}
		}
	}
}

// TestStepIsGradientDescentAscent checks one Step against eqs. 10 and
// 13-15 computed from finite differences of the energy of eq. 8 at the
// responses of eq. 12 (which minimise it, so partial and total
// derivatives agree).
func TestStepIsGradientDescentAscent(t *testing.T) {
	for _, tc := range []struct {
		kernel Kernel
		mixing bool
		mean   float64 // of the data and weights
	}{
		{Gaussian{Sigma: 0.8}, false, 0},
		{Gaussian{Sigma: 0.8}, true, 0},
		{PowerCosine{Alpha: 3}, false, 0.3},
		{PowerCosine{Alpha: 2}, true, 0.3},
		{Linear{}, false, 0},
		{Polynomial{Degree: 2, Gamma: 0.5, Coef0: 1}, false, 0},
		{Polynomial{Degree: 3, Gamma: 0.5, Coef0: 0.5}, true, 0},
	} {
		t.Run(fmt.Sprintf("%v/mixing=%v", tc.kernel, tc.mixing), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(1, 2))
			const N, M, B = 4, 3, 7
			s := Settings{Neurons: N, Dim: M, Kernel: tc.kernel, Mixing: tc.mixing,
				EtaW: 0.05, EtaQ: 0.03, EtaL: 0.2, Lambda: 0.01, InitScale: 0.7}
			net := New(s, rand.NewPCG(3, 4))
			// Move away from q = 1, L = I so that every term matters.
			for range 5 {
				if err := net.Step(nil, randMatrix(rng, B, M, tc.mean, 1)); err != nil {
					t.Fatal(err)
				}
			}
			x := randMatrix(rng, B, M, tc.mean, 1)
			w, q, l := net.Weights(), net.Q(), mat.DenseCopyOf(net.Lateral())
			var y mat.Dense
			net.Transform(&y, x)
			eta := func() (float64, float64, float64) { return s.Rates(net.Steps()) }
			etaW, etaQ, etaL := eta()
			lambda := s.lambda()

			e := func() float64 { return energy(tc.kernel, w, q, l, lambda, tc.mixing, x, &y) }
			gw, gq, gl := numGrad(w, e), numGrad(q, e), numGrad(l, e)

			var ys mat.Dense
			if err := net.Step(&ys, x); err != nil {
				t.Fatal(err)
			}
			assertClose(t, "responses", &ys, &y, 1e-12)
			if got, want := net.Energy(), e(); !scalar.EqualWithinAbsOrRel(got, want, 1e-9, 1e-9) {
				t.Errorf("Energy() = %v, want %v", got, want)
			}

			// Rescaling of the W step: q_i² or, with mixing, (QᵀQ)_jj
			// (these networks are far from the floor of 1% of the mean).
			var p mat.Dense
			p.Mul(q.T(), q)
			wantW := mat.DenseCopyOf(w)
			for j := range N {
				for a := range M {
					wantW.Set(j, a, w.At(j, a)-etaW/p.At(j, j)*gw.At(j, a))
				}
			}
			wantQ := mat.DenseCopyOf(q)
			if tc.mixing {
				// Preconditioned by (G + λI)⁻¹.
				var g, step mat.Dense
				Gram(&g, tc.kernel, w, w)
				g.Add(&g, scaledIdentity(N, lambda))
				if err := step.Solve(&g, gq.T()); err != nil {
					t.Fatal(err)
				}
				wantQ.Sub(q, scaled(etaQ, step.T()))
			} else {
				for i := range N {
					wantQ.Set(i, i, q.At(i, i)-etaQ*gq.At(i, i))
				}
			}
			// L is symmetric: the derivative along L_ij alone is half of
			// the symmetric update; numGrad perturbs one entry.
			wantL := mat.DenseCopyOf(l)
			for i := range N {
				for j := range N {
					wantL.Set(i, j, l.At(i, j)+etaL*gl.At(i, j))
				}
			}
			assertClose(t, "W", net.Weights(), wantW, 1e-6)
			assertClose(t, "Q", net.Q(), wantQ, 1e-6)
			assertClose(t, "L", net.Lateral(), wantL, 1e-6)
		})
	}
}

// TestHomogeneousKernelKeepsQ checks that q stays 1 for homogeneous
// kernels without Mixing (A.3).
func TestHomogeneousKernelKeepsQ(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, k := range []Kernel{Linear{}, PowerCosine{Alpha: 3}, Polynomial{Degree: 2}} {
		net := New(Settings{Neurons: 3, Dim: 4, Kernel: k, EtaQ: 0.5}, rand.NewPCG(1, 1))
		for range 20 {
			if err := net.Step(nil, randMatrix(rng, 8, 4, 0.5, 1)); err != nil {
				t.Fatal(err)
			}
		}
		q := net.Q()
		for i := range 3 {
			if q.At(i, i) != 1 {
				t.Errorf("%v: q_%d = %v, want 1", k, i, q.At(i, i))
			}
		}
	}
}

// TestMixingFirstStepIsThePapers checks that from Q = I the first step
// with Mixing computes the same responses and moves W and L exactly as
// the paper's network does from q = 1; the energies differ by the ridge
// (λ/2)‖Q‖²_F.
func TestMixingFirstStepIsThePapers(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	x := randMatrix(rng, 9, 3, 0, 1)
	s := Settings{Neurons: 5, Dim: 3, Kernel: Gaussian{Sigma: 1}, EtaW: 0.1, EtaQ: 0.1, EtaL: 0.3, Lambda: 0.01}
	diag := New(s, rand.NewPCG(1, 1))
	s.Mixing = true
	mix := New(s, rand.NewPCG(1, 1))
	var yd, ym mat.Dense
	if err := diag.Step(&yd, x); err != nil {
		t.Fatal(err)
	}
	if err := mix.Step(&ym, x); err != nil {
		t.Fatal(err)
	}
	assertClose(t, "Y", &ym, &yd, 1e-14)
	assertClose(t, "W", mix.Weights(), diag.Weights(), 1e-12)
	assertClose(t, "L", mix.Lateral(), diag.Lateral(), 1e-12)
	if want := diag.Energy() + 0.5*0.01*5; !scalar.EqualWithinAbsOrRel(mix.Energy(), want, 1e-12, 1e-12) {
		t.Errorf("energy %v, want %v", mix.Energy(), want)
	}
}

// TestTransformSolvesEq12 compares Transform with an explicit solve of
// (L + λI) y = q∘f(W, x).
func TestTransformSolvesEq12(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	for _, mixing := range []bool{false, true} {
		net := New(Settings{Neurons: 6, Dim: 2, Kernel: Gaussian{Sigma: 0.5}, Mixing: mixing, Lambda: 0.05}, rand.NewPCG(2, 2))
		for range 30 {
			if err := net.Step(nil, randMatrix(rng, 16, 2, 0, 1)); err != nil {
				t.Fatal(err)
			}
		}
		x := randMatrix(rng, 5, 2, 0, 1)
		var f, z, a, want, got mat.Dense
		Gram(&f, net.Settings().Kernel, x, net.Weights())
		z.Mul(&f, net.Q().T())
		a.Add(net.Lateral(), scaledIdentity(6, 0.05))
		if err := want.Solve(&a, z.T()); err != nil {
			t.Fatal(err)
		}
		net.Transform(&got, x)
		assertClose(t, fmt.Sprintf("y (mixing %v)", mixing), &got, want.T(), 1e-10)
	}
}

func scaled(f float64, a mat.Matrix) *mat.Dense {
	var m mat.Dense
	m.Scale(f, a)
	return &m
}

func scaledIdentity(n int, v float64) *mat.Dense {
	m := mat.NewDense(n, n, nil)
	for i := range n {
		m.Set(i, i, v)
	}
	return m
}

// TestLinearKernelIsPCA checks that with the linear kernel, whose bound
// is tight (linear similarity matching, A.3), the network's responses
// reach the optimal rank-n error of kernel PCA.
func TestLinearKernelIsPCA(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	const T, M, N = 256, 5, 2
	x := mat.NewDense(T, M, nil)
	for i := range T {
		for j := range M {
			x.Set(i, j, rng.NormFloat64()*float64(M-j))
		}
	}
	net := New(Settings{Neurons: N, Dim: M, Kernel: Linear{}, EtaW: 0.005, EtaL: 0.1, InitScale: 0.3,
		AnnealEvery: 3000, AnnealFactor: 0.1}, rand.NewPCG(1, 1))
	for s := range 4000 {
		i := (s * 32) % T
		if err := net.Step(nil, x.Slice(i, i+32, 0, M)); err != nil {
			t.Fatal(err)
		}
	}
	var k mat.SymDense
	KernelMatrix(&k, Linear{}, x)
	var y, p mat.Dense
	net.Transform(&y, x)
	if err := KernelPCA(&p, &k, N); err != nil {
		t.Fatal(err)
	}
	got, opt := NormalizedError(&k, &y), NormalizedError(&k, &p)
	if got > opt+0.01 {
		t.Errorf("linear network error %.4f, kernel PCA %.4f", got, opt)
	}
}

// TestStepRefusesDivergence checks that a step that would diverge is
// refused with a *StepError and leaves the network bit-identical.
func TestStepRefusesDivergence(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	for _, tc := range []struct {
		name string
		s    Settings
		x    *mat.Dense
	}{
		// A huge η_w throws W (and the responses) far away.
		{"eta", Settings{Neurons: 4, Dim: 3, Kernel: Polynomial{Degree: 3, Coef0: 1}, EtaW: 1e6, MaxLateral: 1e6}, randMatrix(rng, 8, 3, 0, 10)},
		// A tiny bound on L.
		{"max lateral", Settings{Neurons: 4, Dim: 3, Kernel: Linear{}, EtaL: 2, MaxLateral: 1e-3}, randMatrix(rng, 8, 3, 0, 10)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			net := New(tc.s, rand.NewPCG(1, 1))
			before, _ := net.MarshalBinary()
			var err error
			for range 10 {
				if err = net.Step(nil, tc.x); err != nil {
					break
				}
				before, _ = net.MarshalBinary()
			}
			var se *StepError
			if !errors.As(err, &se) || !errors.Is(err, ErrDiverged) {
				t.Fatalf("Step error %v, want a *StepError wrapping ErrDiverged", err)
			}
			after, _ := net.MarshalBinary()
			if !bytes.Equal(before, after) {
				t.Error("network changed by a refused step")
			}
			if !net.Finite() {
				t.Error("network not finite after a refused step")
			}
		})
	}
}

func TestStepRejectsNonFiniteInput(t *testing.T) {
	net := New(Settings{Neurons: 3, Dim: 2, Kernel: Gaussian{Sigma: 1}}, rand.NewPCG(1, 1))
	before, _ := net.MarshalBinary()
	for _, v := range []float64{math.NaN(), math.Inf(1), math.Inf(-1)} {
		x := mat.NewDense(2, 2, []float64{0, 1, v, 0})
		err := net.Step(nil, x)
		if !errors.Is(err, ErrNonFinite) || errors.Is(err, ErrDiverged) {
			t.Errorf("input %v: error %v, want ErrNonFinite", v, err)
		}
	}
	after, _ := net.MarshalBinary()
	if !bytes.Equal(before, after) || net.Steps() != 0 {
		t.Error("network changed by a rejected minibatch")
	}
}

func TestSettingsValidate(t *testing.T) {
	ok := Settings{Neurons: 2, Dim: 3, Kernel: Gaussian{Sigma: 1}}
	for _, tc := range []struct {
		name string
		edit func(*Settings)
		ok   bool
	}{
		{"defaults", func(*Settings) {}, true},
		{"all set", func(s *Settings) {
			*s = Settings{Neurons: 2, Dim: 3, Kernel: PowerCosine{Alpha: 2}, Mixing: true, Lambda: 0.1, EtaW: 1, EtaQ: 1, EtaL: 2,
				AnnealEvery: 10, AnnealFactor: 0.5, MaxAnneals: -1, MaxLateral: 10, InitScale: 0.1}
		}, true},
		{"no neurons", func(s *Settings) { s.Neurons = 0 }, false},
		{"no dim", func(s *Settings) { s.Dim = 0 }, false},
		{"no kernel", func(s *Settings) { s.Kernel = nil }, false},
		{"bad sigma", func(s *Settings) { s.Kernel = Gaussian{} }, false},
		{"bad alpha", func(s *Settings) { s.Kernel = PowerCosine{} }, false},
		{"bad degree", func(s *Settings) { s.Kernel = Polynomial{} }, false},
		{"negative coef0", func(s *Settings) { s.Kernel = Polynomial{Degree: 2, Coef0: -1} }, false},
		{"negative lambda", func(s *Settings) { s.Lambda = -1 }, false},
		{"NaN eta w", func(s *Settings) { s.EtaW = math.NaN() }, false},
		{"negative eta q", func(s *Settings) { s.EtaQ = -0.1 }, false},
		{"eta l too big", func(s *Settings) { s.EtaL = 2.5 }, false},
		{"negative anneal", func(s *Settings) { s.AnnealEvery = -1 }, false},
		{"anneal factor > 1", func(s *Settings) { s.AnnealFactor = 2 }, false},
		{"infinite max lateral", func(s *Settings) { s.MaxLateral = math.Inf(1) }, false},
		{"negative init scale", func(s *Settings) { s.InitScale = -1 }, false},
	} {
		s := ok
		tc.edit(&s)
		if err := s.Validate(); (err == nil) != tc.ok {
			t.Errorf("%s: Validate() = %v, want ok %v", tc.name, err, tc.ok)
		}
	}
}

func TestRates(t *testing.T) {
	s := Settings{Neurons: 1, Dim: 1, Kernel: Gaussian{Sigma: 1}, EtaW: 0.01, EtaQ: 0.02, EtaL: 0.1, AnnealEvery: 100}
	for _, tc := range []struct {
		maxAnneals int
		t          int64
		want       [3]float64
	}{
		{0, 0, [3]float64{0.01, 0.02, 0.1}},
		{0, 99, [3]float64{0.01, 0.02, 0.1}},
		{0, 100, [3]float64{0.001, 0.002, 0.01}},
		{0, 1000, [3]float64{0.001, 0.002, 0.01}},
		{2, 250, [3]float64{0.0001, 0.0002, 0.001}},
		{-1, 300, [3]float64{0.00001, 0.00002, 0.0001}},
	} {
		s.MaxAnneals = tc.maxAnneals
		w, q, l := s.Rates(tc.t)
		for i, got := range []float64{w, q, l} {
			if !scalar.EqualWithinRel(got, tc.want[i], 1e-12) {
				t.Errorf("max anneals %d, step %d: rate %d = %v, want %v", tc.maxAnneals, tc.t, i, got, tc.want[i])
			}
		}
	}
	s.Kernel = Linear{}
	if _, q, _ := s.Rates(0); q != 0 {
		t.Errorf("homogeneous kernel: η_q = %v, want 0", q)
	}
}

func TestSetSettings(t *testing.T) {
	s := Settings{Neurons: 3, Dim: 2, Kernel: Gaussian{Sigma: 1}}
	net := New(s, rand.NewPCG(1, 1))
	tuned := s
	tuned.EtaW, tuned.Lambda = 0.5, 0.2
	if err := net.SetSettings(tuned); err != nil {
		t.Fatal(err)
	}
	if net.Settings() != tuned {
		t.Errorf("settings %+v, want %+v", net.Settings(), tuned)
	}
	// The factor follows λ: responses are (L + 0.2 I)⁻¹ f = f/1.2 at L = I.
	x := mat.NewDense(1, 2, []float64{0.3, -0.2})
	var y, f mat.Dense
	net.Transform(&y, x)
	Gram(&f, s.Kernel, x, net.Weights())
	f.Scale(1/1.2, &f)
	assertClose(t, "y", &y, &f, 1e-14)

	for _, bad := range []Settings{
		{Neurons: 4, Dim: 2, Kernel: Gaussian{Sigma: 1}},
		{Neurons: 3, Dim: 1, Kernel: Gaussian{Sigma: 1}},
		{Neurons: 3, Dim: 2, Kernel: Gaussian{Sigma: 2}},
		{Neurons: 3, Dim: 2, Kernel: Gaussian{Sigma: 1}, Mixing: true},
		{Neurons: 3, Dim: 2, Kernel: Gaussian{Sigma: 1}, EtaL: 3},
	} {
		if err := net.SetSettings(bad); err == nil {
			t.Errorf("SetSettings(%+v) accepted", bad)
		}
	}
	if net.Settings() != tuned {
		t.Error("a refused SetSettings changed the settings")
	}
}

func TestCloneIsIndependent(t *testing.T) {
	rng := rand.New(rand.NewPCG(15, 16))
	net := New(Settings{Neurons: 4, Dim: 2, Kernel: Gaussian{Sigma: 0.5}, Mixing: true}, rand.NewPCG(1, 1))
	x := randMatrix(rng, 8, 2, 0, 1)
	if err := net.Step(nil, x); err != nil {
		t.Fatal(err)
	}
	c := net.Clone()
	snap, _ := c.MarshalBinary()
	if orig, _ := net.MarshalBinary(); !bytes.Equal(orig, snap) {
		t.Fatal("clone differs from the original")
	}
	var y0, y1 mat.Dense
	c.Transform(&y0, x)
	for range 5 {
		if err := net.Step(nil, x); err != nil {
			t.Fatal(err)
		}
	}
	if now, _ := c.MarshalBinary(); !bytes.Equal(now, snap) {
		t.Error("stepping the original changed the clone")
	}
	c.Transform(&y1, x)
	assertClose(t, "clone responses", &y1, &y0, 0)
	if err := c.Step(nil, x); err != nil {
		t.Fatal(err)
	}
}

func TestSetWeights(t *testing.T) {
	net := New(Settings{Neurons: 2, Dim: 2, Kernel: Gaussian{Sigma: 1}}, rand.NewPCG(1, 1))
	w := mat.NewDense(2, 2, []float64{1, 2, 3, 4})
	if err := net.SetWeights(w); err != nil {
		t.Fatal(err)
	}
	assertClose(t, "W", net.Weights(), w, 0)
	if err := net.SetWeights(mat.NewDense(2, 2, []float64{1, math.NaN(), 0, 0})); !errors.Is(err, ErrNonFinite) {
		t.Errorf("NaN weights: error %v, want ErrNonFinite", err)
	}
	assertClose(t, "W after refused weights", net.Weights(), w, 0)
}

func TestShapePanics(t *testing.T) {
	net := New(Settings{Neurons: 2, Dim: 3, Kernel: Linear{}}, rand.NewPCG(1, 1))
	for name, fn := range map[string]func(){
		"step":             func() { net.Step(nil, mat.NewDense(2, 2, nil)) },
		"transform":        func() { net.Transform(&mat.Dense{}, mat.NewDense(2, 2, nil)) },
		"transform dst":    func() { net.Transform(mat.NewDense(3, 3, nil), mat.NewDense(2, 3, nil)) },
		"step dst":         func() { net.Step(mat.NewDense(3, 3, nil), mat.NewDense(2, 3, nil)) },
		"set weights":      func() { net.SetWeights(mat.NewDense(3, 3, nil)) },
		"gram":             func() { Gram(&mat.Dense{}, Linear{}, mat.NewDense(2, 3, nil), mat.NewDense(2, 2, nil)) },
		"normalized error": func() { NormalizedError(mat.NewSymDense(3, nil), mat.NewDense(2, 2, nil)) },
	} {
		func() {
			defer func() {
				if r := recover(); r != mat.ErrShape {
					t.Errorf("%s: panic %v, want mat.ErrShape", name, r)
				}
			}()
			fn()
		}()
	}
}
