package hebbian

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sort"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas64"
	"gonum.org/v1/gonum/mat"
)

// ErrEigen is returned when an eigendecomposition does not converge.
var ErrEigen = errors.New("hebbian: eigendecomposition failed")

// KernelMatrix sets dst (T×T) to the kernel matrix K_st = f(x_s, x_t) of
// the rows of x (T×M). dst must be empty or T×T.
func KernelMatrix(dst *mat.SymDense, k Kernel, x mat.Matrix) {
	t, _ := x.Dims()
	if dst.IsEmpty() {
		dst.ReuseAsSym(t)
	} else if dst.SymmetricDim() != t {
		panic(mat.ErrShape)
	}
	var g mat.Dense
	Gram(&g, k, x, x)
	for i := range t {
		for j := i; j < t; j++ {
			dst.SetSym(i, j, g.At(i, j))
		}
	}
}

// NormalizedError returns the normalised error of the factor y (T×n) of
// the kernel matrix k (T×T), the square root of the objective of eq. 1
// relative to ‖K‖:
//
//	‖K − YYᵀ‖_F / ‖K‖_F.
//
// It panics with mat.ErrShape if y does not have T rows.
func NormalizedError(k mat.Symmetric, y mat.Matrix) float64 {
	t := k.SymmetricDim()
	if r, _ := y.Dims(); r != t {
		panic(mat.ErrShape)
	}
	yd := denseOf(y).RawMatrix()
	yy := blas64.Symmetric{Uplo: blas.Upper, N: t, Stride: t, Data: make([]float64, t*t)}
	blas64.Syrk(blas.NoTrans, 1, yd, 0, yy)
	var num, den float64
	for i := range t {
		for j := i; j < t; j++ {
			kij := k.At(i, j)
			d := kij - yy.Data[i*t+j]
			w := 2.0
			if i == j {
				w = 1
			}
			num += w * d * d
			den += w * kij * kij
		}
	}
	return math.Sqrt(num / den)
}

// KernelPCA sets dst (T×n) to the optimal rank-n factor of the kernel
// matrix k (A.5, eq. 28): column i is √λ_i·v_i for the i-th largest
// eigenvalue λ_i (negative ones, from rounding, taken as 0) and its unit
// eigenvector v_i. The columns come in decreasing order, so the first n'
// columns are the optimum of rank n'. dst must be empty or T×n; n must be
// in [1, T]. It uses a full symmetric eigendecomposition, O(T³).
func KernelPCA(dst *mat.Dense, k mat.Symmetric, n int) error {
	t := k.SymmetricDim()
	if n < 1 || n > t {
		panic(mat.ErrShape)
	}
	reuseAs(dst, t, n)
	var eig mat.EigenSym
	if !eig.Factorize(k, true) {
		return ErrEigen
	}
	vals := eig.Values(nil)
	var vecs mat.Dense
	eig.VectorsTo(&vecs)
	// Values come in ascending order.
	for c := range n {
		j := t - 1 - c
		s := math.Sqrt(max(vals[j], 0))
		for r := range t {
			dst.Set(r, c, s*vecs.At(r, j))
		}
	}
	return nil
}

// nystromTol is the threshold, relative to the largest eigenvalue, below
// which eigenvalues of the landmark kernel matrix are taken as zero in
// its pseudo-inverse (A.5 zeroes singular values below 1e-10).
const nystromTol = 1e-10

// Nystrom sets dst (T×n) to the Nyström features of the rows of x (T×M)
// for the n landmarks in the rows of landmarks (n×M), eq. 18:
//
//	y_t = B^(†½) f(W, x_t),   B_ij = f(w_i, w_j),
//
// so that YYᵀ = A B^† Aᵀ with A_ti = f(x_t, w_i), the Nyström
// approximation of eqs. 29-30. Eigenvalues of B below 1e-10 times the
// largest count as zero. dst must be empty or T×n.
func Nystrom(dst *mat.Dense, k Kernel, x, landmarks mat.Matrix) error {
	t, m := x.Dims()
	n, lm := landmarks.Dims()
	if lm != m {
		panic(mat.ErrShape)
	}
	reuseAs(dst, t, n)
	var a, b mat.Dense
	Gram(&a, k, x, landmarks)
	Gram(&b, k, landmarks, landmarks)
	bs := mat.NewSymDense(n, nil)
	for i := range n {
		for j := i; j < n; j++ {
			bs.SetSym(i, j, 0.5*(b.At(i, j)+b.At(j, i)))
		}
	}
	var eig mat.EigenSym
	if !eig.Factorize(bs, true) {
		return ErrEigen
	}
	vals := eig.Values(nil)
	var v mat.Dense
	eig.VectorsTo(&v)
	top := 0.0
	for _, l := range vals {
		top = max(top, l)
	}
	// M = V diag(λ^(−½)) Vᵀ over the eigenvalues kept.
	vs := mat.DenseCopyOf(&v)
	for j, l := range vals {
		s := 0.0
		if l > nystromTol*top {
			s = 1 / math.Sqrt(l)
		}
		for i := range n {
			vs.Set(i, j, vs.At(i, j)*s)
		}
	}
	var half mat.Dense
	half.Mul(vs, v.T())
	dst.Mul(&a, &half)
	return nil
}

// UniformLandmarks sets the rows of dst (n×M) to n distinct rows of x
// (T×M) drawn uniformly without replacement from src (Williams and
// Seeger, 2001). dst must be empty or n×M; n must be in [1, T].
func UniformLandmarks(dst *mat.Dense, x mat.Matrix, n int, src rand.Source) {
	t, m := x.Dims()
	if n < 1 || n > t {
		panic(mat.ErrShape)
	}
	reuseAs(dst, n, m)
	rng := rand.New(src)
	perm := rng.Perm(t)
	for i := range n {
		for j := range m {
			dst.Set(i, j, x.At(perm[i], j))
		}
	}
}

// KMeansLandmarks sets the rows of dst (n×M) to n Euclidean k-means
// centres of the rows of x (T×M) (Zhang et al., 2008): greedy k-means++
// seeding (Arthur and Vassilvitskii, 2007, with 2 + ⌊ln n⌋ candidates
// per centre, as scikit-learn) drawn from src, then Lloyd iterations
// until no assignment changes or iters iterations. A centre left without
// points takes the point farthest from its centre. It returns the number
// of Lloyd iterations run. With iters = 0 dst holds the k-means++ seeds
// alone: n well-spread points of x, a good initial W for a Network
// (SetWeights). dst must be empty or n×M; n must be in [1, T].
func KMeansLandmarks(dst *mat.Dense, x mat.Matrix, n, iters int, src rand.Source) int {
	t, m := x.Dims()
	if n < 1 || n > t {
		panic(mat.ErrShape)
	}
	reuseAs(dst, n, m)
	xd := mat.DenseCopyOf(x)
	xr := xd.RawMatrix()
	xx := sqNorms(nil, xr)
	rng := rand.New(src)

	// Greedy k-means++.
	d2 := make([]float64, t) // squared distance to the nearest centre
	cand := make([]float64, t)
	dist := func(dst []float64, c []float64) {
		var cc float64
		for _, v := range c {
			cc += v * v
		}
		for i := range t {
			row := xr.Data[i*xr.Stride : i*xr.Stride+m]
			var s float64
			for j, v := range row {
				s += v * c[j]
			}
			dst[i] = max(xx[i]+cc-2*s, 0)
		}
	}
	first := rng.IntN(t)
	dst.SetRow(0, xd.RawRowView(first))
	dist(d2, xd.RawRowView(first))
	trials := 2 + int(math.Log(float64(n)))
	best := make([]float64, t)
	for c := 1; c < n; c++ {
		var total float64
		for _, v := range d2 {
			total += v
		}
		bestPot, bestIdx := math.Inf(1), -1
		for range trials {
			idx := 0
			if total > 0 {
				u := rng.Float64() * total
				for idx = 0; idx < t-1 && u >= d2[idx]; idx++ {
					u -= d2[idx]
				}
			} else {
				idx = rng.IntN(t)
			}
			dist(cand, xd.RawRowView(idx))
			var pot float64
			for i, v := range cand {
				pot += min(v, d2[i])
			}
			if pot < bestPot {
				bestPot, bestIdx = pot, idx
				copy(best, cand)
			}
		}
		dst.SetRow(c, xd.RawRowView(bestIdx))
		for i, v := range best {
			d2[i] = min(d2[i], v)
		}
	}

	// Lloyd.
	assign := make([]int, t)
	for i := range assign {
		assign[i] = -1
	}
	scores := mat.NewDense(t, n, nil)
	counts := make([]int, n)
	sums := mat.NewDense(n, m, nil)
	for it := 0; it < iters; it++ {
		cr := dst.RawMatrix()
		cc := sqNorms(nil, cr)
		scores.Mul(xd, dst.T())
		changed := false
		for i := range t {
			row := scores.RawRowView(i)
			bj, bd := 0, math.Inf(1)
			for j, s := range row {
				if d := cc[j] - 2*s; d < bd {
					bj, bd = j, d
				}
			}
			d2[i] = max(xx[i]+bd, 0)
			if assign[i] != bj {
				assign[i], changed = bj, true
			}
		}
		if !changed {
			return it
		}
		clear(counts)
		sums.Zero()
		for i, j := range assign {
			counts[j]++
			blas64.Axpy(1, blas64.Vector{N: m, Data: xr.Data[i*xr.Stride:], Inc: 1},
				blas64.Vector{N: m, Data: sums.RawRowView(j), Inc: 1})
		}
		var far []int
		for j := range n {
			if counts[j] > 0 {
				row := dst.RawRowView(j)
				for l, v := range sums.RawRowView(j) {
					row[l] = v / float64(counts[j])
				}
				continue
			}
			if far == nil {
				far = make([]int, t)
				for i := range far {
					far[i] = i
				}
				sort.SliceStable(far, func(a, b int) bool { return d2[far[a]] > d2[far[b]] })
			}
			dst.SetRow(j, xd.RawRowView(far[0]))
			far = far[1:]
		}
	}
	return iters
}

// RandomFourier sets dst (T×n) to n random Fourier features of the rows
// of x (T×M) for the Gaussian kernel of width sigma (Rahimi and Recht,
// 2007; A.5, eq. 31):
//
//	φ_i(x) = √(2/n) cos(ω_i·x + b_i),   ω_i ~ N(0, I/σ²),  b_i ~ U[0, 2π),
//
// drawn from src, so that E[φ(x)·φ(x')] = exp(−‖x − x'‖²/(2σ²)). dst must
// be empty or T×n.
func RandomFourier(dst *mat.Dense, x mat.Matrix, n int, sigma float64, src rand.Source) {
	t, m := x.Dims()
	if n < 1 {
		panic(mat.ErrShape)
	}
	if !(sigma > 0) {
		panic(fmt.Sprintf("hebbian: random Fourier features with σ = %v", sigma))
	}
	reuseAs(dst, t, n)
	rng := rand.New(src)
	omega := mat.NewDense(n, m, nil)
	for i := range n {
		for j := range m {
			omega.Set(i, j, rng.NormFloat64()/sigma)
		}
	}
	b := make([]float64, n)
	for i := range b {
		b[i] = 2 * math.Pi * rng.Float64()
	}
	dst.Mul(x, omega.T())
	s := math.Sqrt(2 / float64(n))
	for r := range t {
		row := dst.RawRowView(r)
		for i, v := range row {
			row[i] = s * math.Cos(v+b[i])
		}
	}
}
