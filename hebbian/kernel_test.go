package hebbian

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"gonum.org/v1/gonum/floats/scalar"
	"gonum.org/v1/gonum/mat"
)

var testKernels = []Kernel{
	Gaussian{Sigma: 0.7},
	PowerCosine{Alpha: 1},
	PowerCosine{Alpha: 2},
	PowerCosine{Alpha: 3},
	PowerCosine{Alpha: 4},
	Linear{},
	Polynomial{Degree: 2},
	Polynomial{Degree: 3, Gamma: 0.5, Coef0: 1},
}

// value returns f(u, v) through Eval.
func value(k Kernel, u, v []float64) float64 {
	var s, uu, vv float64
	for i := range u {
		s += u[i] * v[i]
		uu += u[i] * u[i]
		vv += v[i] * v[i]
	}
	f := []float64{s}
	k.Eval(f, nil, nil, f, uu, []float64{vv})
	return f[0]
}

func TestKernelValues(t *testing.T) {
	u, v := []float64{1, 2, 0}, []float64{0, 1, 1}
	// u·v = 2, ‖u‖² = 5, ‖v‖² = 2, ‖u − v‖² = 3, cos = 2/√10.
	c := 2 / math.Sqrt(10)
	for _, tc := range []struct {
		k    Kernel
		want float64
	}{
		{Gaussian{Sigma: 1}, math.Exp(-1.5)},
		{Gaussian{Sigma: 0.5}, math.Exp(-6)},
		{PowerCosine{Alpha: 1}, 2},
		{PowerCosine{Alpha: 3}, math.Sqrt(10) * c * c * c},
		{Linear{}, 2},
		{Polynomial{Degree: 2}, 4},
		{Polynomial{Degree: 3, Gamma: 0.5, Coef0: 1}, 8},
	} {
		if got := value(tc.k, u, v); !scalar.EqualWithinAbsOrRel(got, tc.want, 1e-14, 1e-14) {
			t.Errorf("%v: f(u, v) = %v, want %v", tc.k, got, tc.want)
		}
		if got := value(tc.k, v, u); !scalar.EqualWithinAbsOrRel(got, tc.want, 1e-14, 1e-14) {
			t.Errorf("%v: f(v, u) = %v, want %v", tc.k, got, tc.want)
		}
	}
	zero := []float64{0, 0, 0}
	for _, a := range []int{1, 2, 3} {
		if got := value(PowerCosine{Alpha: a}, zero, u); got != 0 {
			t.Errorf("power-cosine α=%d: f(0, u) = %v, want 0", a, got)
		}
	}
	if got := value(Gaussian{Sigma: 1}, u, u); got != 1 {
		t.Errorf("gaussian f(u, u) = %v, want 1", got)
	}
}

// TestKernelGradient checks ∂f(w, x)/∂w = φ_s x + 2φ_b w (Kernel's
// contract) and the batch Grad against central finite differences.
func TestKernelGradient(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	const B, N, M = 5, 3, 4
	for _, k := range testKernels {
		t.Run(fmt.Sprint(k), func(t *testing.T) {
			x := randMatrix(rng, B, M, 0.2, 1)
			w := randMatrix(rng, N, M, 0.2, 1)
			c := randMatrix(rng, B, N, 0, 1)
			objective := func() float64 {
				var g mat.Dense
				Gram(&g, k, x, w)
				var s float64
				for b := range B {
					for i := range N {
						s += c.At(b, i) * g.At(b, i)
					}
				}
				return s
			}
			want := numGrad(w, objective)
			var got mat.Dense
			Grad(&got, k, c, x, w)
			assertClose(t, "Grad", &got, want, 1e-7)
		})
	}
}

// TestKernelSelfGradient checks ½ ∂f(w, w)/∂w = h·w, h = φ_s + 2φ_b at
// u = v = w, which the network's self-terms use.
func TestKernelSelfGradient(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, k := range testKernels {
		w := randMatrix(rng, 1, 3, 0, 1)
		_, self, h := selfTerms(k, nil, nil, nil, w)
		if got, want := self[0], value(k, w.RawRowView(0), w.RawRowView(0)); !scalar.EqualWithinAbsOrRel(got, want, 1e-12, 1e-12) {
			t.Errorf("%v: f(w, w) = %v, want %v", k, got, want)
		}
		g := numGrad(w, func() float64 { return 0.5 * value(k, w.RawRowView(0), w.RawRowView(0)) })
		for j := range 3 {
			if got, want := h[0]*w.At(0, j), g.At(0, j); !scalar.EqualWithinAbsOrRel(got, want, 1e-7, 1e-7) {
				t.Errorf("%v: ½∂f(w, w)/∂w_%d = %v, want %v", k, j, got, want)
			}
		}
	}
}

func TestKernelHomogeneity(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	u := randMatrix(rng, 1, 4, 0, 1).RawRowView(0)
	v := randMatrix(rng, 1, 4, 0, 1).RawRowView(0)
	scale := func(a float64, x []float64) []float64 {
		out := make([]float64, len(x))
		for i := range x {
			out[i] = a * x[i]
		}
		return out
	}
	for _, tc := range []struct {
		k      Kernel
		degree float64 // f(au, bv) = (ab)^degree f(u, v)
	}{
		{PowerCosine{Alpha: 3}, 1},
		{Linear{}, 1},
		{Polynomial{Degree: 3}, 3},
	} {
		if !tc.k.Homogeneous() {
			t.Errorf("%v: not homogeneous", tc.k)
		}
		a, b := 1.7, 0.4
		got := value(tc.k, scale(a, u), scale(b, v))
		want := math.Pow(a*b, tc.degree) * value(tc.k, u, v)
		if !scalar.EqualWithinAbsOrRel(got, want, 1e-12, 1e-12) {
			t.Errorf("%v: f(au, bv) = %v, want %v", tc.k, got, want)
		}
	}
	for _, k := range []Kernel{Gaussian{Sigma: 1}, Polynomial{Degree: 2, Coef0: 1}} {
		if k.Homogeneous() {
			t.Errorf("%v: homogeneous", k)
		}
	}
}

// TestKernelMatrixIsPSD checks that every kernel's matrix on random
// points has no eigenvalue below rounding.
func TestKernelMatrixIsPSD(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	x := randMatrix(rng, 30, 3, 0, 1)
	for _, k := range testKernels {
		var km mat.SymDense
		KernelMatrix(&km, k, x)
		var eig mat.EigenSym
		if !eig.Factorize(&km, false) {
			t.Fatalf("%v: eigendecomposition failed", k)
		}
		vals := eig.Values(nil)
		if lo, hi := vals[0], vals[len(vals)-1]; lo < -1e-10*hi {
			t.Errorf("%v: smallest eigenvalue %v (largest %v)", k, lo, hi)
		}
	}
}

func TestKernelValidate(t *testing.T) {
	for _, tc := range []struct {
		k  Kernel
		ok bool
	}{
		{Gaussian{Sigma: 0.3}, true},
		{Gaussian{}, false},
		{Gaussian{Sigma: math.Inf(1)}, false},
		{Gaussian{Sigma: math.NaN()}, false},
		{PowerCosine{Alpha: 1}, true},
		{PowerCosine{Alpha: 0}, false},
		{Linear{}, true},
		{Polynomial{Degree: 2}, true},
		{Polynomial{Degree: 0}, false},
		{Polynomial{Degree: 2, Gamma: -1}, false},
		{Polynomial{Degree: 2, Coef0: math.NaN()}, false},
	} {
		if err := tc.k.Validate(); (err == nil) != tc.ok {
			t.Errorf("%#v: Validate() = %v, want ok %v", tc.k, err, tc.ok)
		}
	}
}
