package hebbian

import (
	"fmt"
	"math"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas64"
	"gonum.org/v1/gonum/mat"
)

// Kernel is a positive semi-definite kernel f(u, v) that depends on its
// arguments only through their inner product and squared norms,
//
//	f(u, v) = φ(u·v, ‖u‖², ‖v‖²),   φ(s, a, b) = φ(s, b, a),
//
// which is the class of kernels invariant under rotations of the input
// space (f(Qu, Qv) = f(u, v) for orthogonal Q). The Gaussian RBF, the
// power-cosine, the linear and the polynomial kernels are of this form.
// The form is what lets one matrix product S = X Wᵀ serve a whole
// minibatch: the value and the gradient of every pair (x_b, w_i) follow
// from S and the norms, elementwise, and the gradient in w is
//
//	∂f(w, x)/∂w = φ_s·x + 2φ_b·w,   φ_s = ∂φ/∂s, φ_b = ∂φ/∂‖w‖²,
//
// so that the weighted sum over a minibatch is again one matrix product
// (see Grad). At u = v = w, symmetry gives ∂f(w, w)/∂w = 2(φ_s + 2φ_b)·w.
type Kernel interface {
	// Eval evaluates the kernel between one input x and several w_j
	// (neurons, landmarks) from s_j = x·w_j, xx = ‖x‖² and ww_j = ‖w_j‖²:
	//
	//	f_j = φ(s_j, xx, ww_j),  ds_j = ∂φ/∂s,  dw_j = ∂φ/∂ww_j.
	//
	// ds and dw may be nil when only values are wanted. All slices have
	// the length of s; f may alias s.
	Eval(f, ds, dw, s []float64, xx float64, ww []float64)
	// Homogeneous reports whether f(a·u, b·v) = (ab)^k·f(u, v) for some
	// k and all a, b > 0, in which case the regulatory terms q are
	// redundant with the norms of W and stay 1 (kernel similarity
	// matching, appendix A.3-A.4).
	Homogeneous() bool
	// Validate reports whether the kernel's parameters are usable.
	Validate() error
}

var (
	_ Kernel = Gaussian{}
	_ Kernel = PowerCosine{}
	_ Kernel = Linear{}
	_ Kernel = Polynomial{}
)

// Gaussian is the Gaussian RBF kernel of section 4.1,
//
//	f(u, v) = exp(−‖u − v‖² / (2σ²)),
//
// with ∂f(w, x)/∂w = f·(x − w)/σ² (eq. 17 with g' = −g/σ²) and
// f(w, w) = 1. It is not homogeneous.
type Gaussian struct {
	// Sigma is the width σ > 0.
	Sigma float64
}

// Eval implements Kernel. Squared distances below zero, from rounding
// in a + b − 2s, are taken as zero so that f ≤ 1.
func (g Gaussian) Eval(f, ds, dw, s []float64, xx float64, ww []float64) {
	c := -0.5 / (g.Sigma * g.Sigma)
	for j, sj := range s {
		d2 := max(xx+ww[j]-2*sj, 0)
		v := math.Exp(c * d2)
		f[j] = v
		if ds != nil {
			ds[j] = -2 * c * v
			dw[j] = c * v
		}
	}
}

// Homogeneous implements Kernel: false.
func (Gaussian) Homogeneous() bool { return false }

// Validate implements Kernel.
func (g Gaussian) Validate() error {
	if !(g.Sigma > 0) || math.IsInf(g.Sigma, 1) {
		return fmt.Errorf("hebbian: gaussian kernel σ = %v: must be positive and finite", g.Sigma)
	}
	return nil
}

// String returns "gaussian(σ=...)".
func (g Gaussian) String() string { return fmt.Sprintf("gaussian(σ=%g)", g.Sigma) }

// PowerCosine is the power-cosine kernel of section 4.2,
//
//	f(u, v) = ‖u‖‖v‖(û·v̂)^α = (u·v)^α (‖u‖‖v‖)^(1−α),
//
// with ∂f(w, x)/∂w = α(ŵ·x̂)^(α−1)·x + (1−α)(ŵ·x̂)^α‖x‖·ŵ and f(w, w) = ‖w‖².
// α = 1 is the linear kernel. It is homogeneous of degree 1 in each
// argument, so q stays 1 (A.3). It is positive semi-definite for integer
// α (a product of kernels), hence the integer Alpha. A zero argument
// gives f = 0, and, for α > 1, a zero gradient.
type PowerCosine struct {
	// Alpha is the power α >= 1; the paper uses 1, 2, 3 and 4.
	Alpha int
}

// Eval implements Kernel.
func (p PowerCosine) Eval(f, ds, dw, s []float64, xx float64, ww []float64) {
	a := float64(p.Alpha)
	nx := math.Sqrt(xx)
	for j, sj := range s {
		nn := nx * math.Sqrt(ww[j])
		if nn == 0 {
			f[j] = 0
			if ds != nil {
				ds[j], dw[j] = 0, 0
				if p.Alpha == 1 {
					ds[j] = 1
				}
			}
			continue
		}
		c := min(max(sj/nn, -1), 1)
		cp := ipow(c, p.Alpha-1) // c^(α−1)
		v := nn * cp * c
		f[j] = v
		if ds != nil {
			ds[j] = a * cp
			dw[j] = 0.5 * (1 - a) * v / ww[j]
		}
	}
}

// ipow returns x^n for n >= 0 by repeated squaring.
func ipow(x float64, n int) float64 {
	r := 1.0
	for n > 0 {
		if n&1 == 1 {
			r *= x
		}
		x *= x
		n >>= 1
	}
	return r
}

// Homogeneous implements Kernel: true.
func (PowerCosine) Homogeneous() bool { return true }

// Validate implements Kernel.
func (p PowerCosine) Validate() error {
	if p.Alpha < 1 {
		return fmt.Errorf("hebbian: power-cosine kernel α = %d: must be >= 1", p.Alpha)
	}
	return nil
}

// String returns "power-cosine(α=...)".
func (p PowerCosine) String() string { return fmt.Sprintf("power-cosine(α=%d)", p.Alpha) }

// Linear is the linear kernel f(u, v) = u·v, with ∂f(w, x)/∂w = x: linear
// similarity matching (Pehlevan et al., 2018; A.3, eq. 26). It is
// homogeneous.
type Linear struct{}

// Eval implements Kernel.
func (Linear) Eval(f, ds, dw, s []float64, xx float64, ww []float64) {
	copy(f, s)
	if ds != nil {
		for j := range s {
			ds[j], dw[j] = 1, 0
		}
	}
}

// Homogeneous implements Kernel: true.
func (Linear) Homogeneous() bool { return true }

// Validate implements Kernel: always nil.
func (Linear) Validate() error { return nil }

// String returns "linear".
func (Linear) String() string { return "linear" }

// Polynomial is the polynomial kernel
//
//	f(u, v) = (γ·u·v + c₀)^d,
//
// with ∂f(w, x)/∂w = dγ(γ·w·x + c₀)^(d−1)·x. With c₀ = 0 it is
// homogeneous (of degree d in each argument) and q stays 1 (A.3).
type Polynomial struct {
	// Degree is d >= 1.
	Degree int
	// Gamma is γ > 0; zero means 1.
	Gamma float64
	// Coef0 is c₀ >= 0 (the kernel is positive semi-definite for
	// c₀ >= 0).
	Coef0 float64
}

func (p Polynomial) gamma() float64 {
	if p.Gamma == 0 {
		return 1
	}
	return p.Gamma
}

// Eval implements Kernel.
func (p Polynomial) Eval(f, ds, dw, s []float64, xx float64, ww []float64) {
	g, d := p.gamma(), float64(p.Degree)
	for j, sj := range s {
		b := g*sj + p.Coef0
		bp := ipow(b, p.Degree-1)
		f[j] = bp * b
		if ds != nil {
			ds[j] = d * g * bp
			dw[j] = 0
		}
	}
}

// Homogeneous implements Kernel: true when Coef0 is zero.
func (p Polynomial) Homogeneous() bool { return p.Coef0 == 0 }

// Validate implements Kernel.
func (p Polynomial) Validate() error {
	switch {
	case p.Degree < 1:
		return fmt.Errorf("hebbian: polynomial kernel degree %d: must be >= 1", p.Degree)
	case !(p.Gamma >= 0) || math.IsInf(p.Gamma, 1):
		return fmt.Errorf("hebbian: polynomial kernel γ = %v: must be positive and finite (0 means 1)", p.Gamma)
	case !(p.Coef0 >= 0) || math.IsInf(p.Coef0, 1):
		return fmt.Errorf("hebbian: polynomial kernel c₀ = %v: must be >= 0 and finite", p.Coef0)
	}
	return nil
}

// String returns "polynomial(d=..., γ=..., c₀=...)".
func (p Polynomial) String() string {
	return fmt.Sprintf("polynomial(d=%d, γ=%g, c₀=%g)", p.Degree, p.gamma(), p.Coef0)
}

// sqNorms sets dst_i = ‖row i of a‖² and returns dst, grown as needed.
func sqNorms(dst []float64, a blas64.General) []float64 {
	dst = grow(dst, a.Rows)
	for i := range a.Rows {
		row := a.Data[i*a.Stride : i*a.Stride+a.Cols]
		var ss float64
		for _, v := range row {
			ss += v * v
		}
		dst[i] = ss
	}
	return dst
}

// grow returns s resliced to n elements, reallocated if too short.
func grow[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}

// reuseAs makes dst an r×c matrix, reusing its storage when it is large
// enough; it panics with mat.ErrShape if dst is a non-empty matrix of
// another shape.
func reuseAs(dst *mat.Dense, r, c int) {
	if dst.IsEmpty() {
		dst.ReuseAs(r, c)
		return
	}
	if rr, cc := dst.Dims(); rr != r || cc != c {
		panic(mat.ErrShape)
	}
}

// denseOf returns a *mat.Dense holding m: m itself if it is one, else a
// copy.
func denseOf(m mat.Matrix) *mat.Dense {
	if d, ok := m.(*mat.Dense); ok {
		return d
	}
	return mat.DenseCopyOf(m)
}

// Gram sets dst_ij = f(u_i, v_j) for the rows u_i of u and v_j of v, with
// one matrix product U Vᵀ. dst must be empty (it is then allocated) or
// rows(u)×rows(v); it must not alias u or v. It panics with mat.ErrShape
// if u and v have different numbers of columns.
func Gram(dst *mat.Dense, k Kernel, u, v mat.Matrix) {
	ur, uc := u.Dims()
	vr, vc := v.Dims()
	if uc != vc {
		panic(mat.ErrShape)
	}
	reuseAs(dst, ur, vr)
	ud, vd := denseOf(u).RawMatrix(), denseOf(v).RawMatrix()
	g := dst.RawMatrix()
	blas64.Gemm(blas.NoTrans, blas.Trans, 1, ud, vd, 0, g)
	uu := sqNorms(nil, ud)
	vv := sqNorms(nil, vd)
	for i := range ur {
		row := g.Data[i*g.Stride : i*g.Stride+vr]
		k.Eval(row, nil, nil, row, uu[i], vv)
	}
}

// Grad sets the rows of dst (N×M) to the coefficient-weighted sums of
// kernel gradients
//
//	dst_i = Σ_b c_bi ∂f(w_i, x_b)/∂w_i = [(C∘Φ_s)ᵀ X]_i + 2(Σ_b c_bi φ_b(b,i))·w_i,
//
// for the rows x_b of x (B×M), w_i of w (N×M) and c (B×N); the
// minibatch gradient of eq. 13 is this with c_bi = y_bi/B. dst must be
// empty or N×M and must not alias the arguments. It panics with
// mat.ErrShape on mismatched shapes.
func Grad(dst *mat.Dense, k Kernel, c, x, w mat.Matrix) {
	b, m := x.Dims()
	n, wm := w.Dims()
	cr, cc := c.Dims()
	if wm != m || cr != b || cc != n {
		panic(mat.ErrShape)
	}
	reuseAs(dst, n, m)
	xd, wd, cd := denseOf(x).RawMatrix(), denseOf(w).RawMatrix(), denseOf(c).RawMatrix()
	s := mat.NewDense(b, n, nil).RawMatrix()
	blas64.Gemm(blas.NoTrans, blas.Trans, 1, xd, wd, 0, s)
	xx, ww := sqNorms(nil, xd), sqNorms(nil, wd)
	f := make([]float64, n)
	dw := make([]float64, n)
	scale := make([]float64, n)
	for r := range b {
		row := s.Data[r*s.Stride : r*s.Stride+n]
		k.Eval(f, row, dw, row, xx[r], ww)
		crow := cd.Data[r*cd.Stride : r*cd.Stride+n]
		for i, ci := range crow {
			row[i] *= ci
			scale[i] += 2 * ci * dw[i]
		}
	}
	g := dst.RawMatrix()
	blas64.Gemm(blas.Trans, blas.NoTrans, 1, s, xd, 0, g)
	for i := range n {
		blas64.Axpy(scale[i], blas64.Vector{N: m, Data: wd.Data[i*wd.Stride:], Inc: 1},
			blas64.Vector{N: m, Data: g.Data[i*g.Stride:], Inc: 1})
	}
}
