package spectral

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"

	"gonum.org/v1/gonum/floats"
	"gonum.org/v1/gonum/mat"
)

// LEMSettings configures LEM and NonRedundantLEM. A zero field means its
// documented default.
type LEMSettings struct {
	// Neighbours is k of the k-nearest-neighbour graph: each point is
	// joined to its k nearest points (Euclidean), and the graph is the
	// union of these edges, so it is symmetric. Zero means 10, at most
	// N − 1.
	Neighbours int
	// Sigma, when positive, is a global width σ of the Gaussian
	// affinity on the edges, w_ab = exp(−‖x_a − x_b‖²/(2σ²)). Zero means
	// local scaling (LocalScale); it must be >= 0.
	Sigma float64
	// LocalScale sets the widths of the default affinity, one per point
	// (Zelnik-Manor and Perona, "Self-tuning spectral clustering", 2004):
	// σ_a is the distance from x_a to its LocalScale-th nearest
	// neighbour and w_ab = exp(−‖x_a − x_b‖²/(2σ_aσ_b)), so that points
	// in sparse regions are not cut off from the graph. (On MNIST a
	// global σ leaves loosely attached groups whose localised
	// eigenvectors the non-redundant coordinates pick up.) Zero means 7,
	// at most the number of neighbours. A negative value means one global
	// σ instead, the median over the points of the distance to their
	// k-th nearest neighbour (on a uniformly sampled strip this follows
	// the Neumann eigenfunctions (1) more closely at the boundary). It
	// must be 0 when Sigma is set.
	LocalScale int
	// Lanczos configures the eigensolves. The zero value is Smallest's
	// defaults.
	Lanczos LanczosSettings
}

func (s LEMSettings) neighbours(n int) int {
	k := s.Neighbours
	if k == 0 {
		k = 10
	}
	return min(k, n-1)
}

// Validate reports whether the settings are usable.
func (s LEMSettings) Validate() error {
	switch {
	case s.Neighbours < 0:
		return fmt.Errorf("spectral: lem neighbours %d: must be >= 1 (0 means 10)", s.Neighbours)
	case !(s.Sigma >= 0) || math.IsInf(s.Sigma, 1):
		return fmt.Errorf("spectral: lem sigma %v: must be > 0 (0 means the median k-th neighbour distance)", s.Sigma)
	case s.LocalScale > 0 && s.Sigma != 0:
		return fmt.Errorf("spectral: lem sigma %v and local scale %d: set at most one", s.Sigma, s.LocalScale)
	}
	return s.Lanczos.Validate()
}

// Errors of LEM and NonRedundantLEM.
var (
	// ErrNotFinite means the data hold NaN or Inf.
	ErrNotFinite = errors.New("spectral: data hold NaN or Inf")
	// ErrDegenerate means the affinity graph is unusable: duplicate
	// points make a local σ_a zero, or a σ too small leaves a point with
	// zero affinity to all its neighbours.
	ErrDegenerate = errors.New("spectral: degenerate affinity graph")
)

// LEM returns the Laplacian eigenmaps embedding (Belkin and Niyogi 2003)
// of the rows of x (N points of dimension D), one point per row of the
// N×dim result: with the k-nearest-neighbour Gaussian affinity W of
// LEMSettings (locally scaled by default) and its degrees D = diag(W·1), the generalised
// eigenvectors of the graph Laplacian with the smallest eigenvalues
// after the constant one,
//
//	(D − W) f = λ D f,   fᵀ D 1 = 0,   0 < λ_1 ≤ λ_2 ≤ ...
//
// computed as in Alg. 1, step 2 of Blau and Michaeli (non-redundant
// spectral dimensionality reduction): with u = D^(1/2) f the problem is
// the maximisation (4) of uᵀ K u for
//
//	K = 2I − D^(−1/2)(D − W)D^(−1/2) = I + D^(−1/2) W D^(−1/2)
//
// (λ_max·I − L with the bound λ_max ≤ 2 of the normalised Laplacian),
// u ⟂ D^(1/2)·1, solved by the Lanczos method (Smallest) on −K with that
// direction projected out; K is sparse and never formed densely. Each
// column is scaled so that Σ_a d_a f_a² = Σ_a d_a (unit mean square
// under the degree weighting) and signed so that its entry of largest
// magnitude is positive.
//
// The k-nearest-neighbour search is brute force, O(N²·D) through matrix
// products. A graph with several connected components has one more
// zero-eigenvalue (locally constant) coordinate for each; they come first.
//
// It panics if dim < 1 or dim > N − 2 or the settings are invalid, and
// returns an error wrapping ErrNotFinite for data with NaN or Inf,
// ErrDegenerate for an unusable graph, ErrNoConvergence (with the best vectors found) when the Lanczos method
// did not converge.
func LEM(x mat.Matrix, dim int, s LEMSettings, src rand.Source) (*mat.Dense, error) {
	if err := s.Validate(); err != nil {
		panic(err)
	}
	n, _ := x.Dims()
	if dim < 1 || dim > n-2 {
		panic(fmt.Sprintf("spectral: %d LEM coordinates of %d points", dim, n))
	}
	g, err := newLEMGraph(x, s)
	if err != nil {
		return nil, err
	}
	if src == nil {
		src = rand.NewPCG(0x5eed, 0x6c656d)
	}
	op := newProjected(g, g.trivial())
	lr, err := Smallest(op, dim, s.Lanczos, src)
	if lr.Vectors == nil {
		return nil, err
	}
	scale := g.scale()
	f := make([]float64, n)
	out := mat.NewDense(n, dim, nil)
	for i := 0; i < dim; i++ {
		mat.Col(f, i, lr.Vectors)
		floats.Mul(f, scale)
		if f[floats.MaxIdx(absTo(op.y, f))] < 0 {
			floats.Scale(-1, f)
		}
		out.SetCol(i, f)
	}
	if err != nil {
		err = fmt.Errorf("spectral: lem: %w", err)
	}
	return out, err
}

// NonRedundantLEM returns the non-redundant Laplacian eigenmaps embedding
// of the rows of x (Blau and Michaeli, Alg. 1 applied to LEM): the
// problem of LEM, with the orthogonality of each coordinate to the
// previous ones replaced by unpredictability from them (problem (11)),
// solved by NonRedundant with the kernel K = I + D^(−1/2) W D^(−1/2) on
// u = D^(1/2) f, the trivial direction D^(1/2)·1 fixed, equal sample
// weights, and the coordinates scaled like LEM's. The first coordinate is
// LEM's first.
//
// It panics like LEM and if nr is invalid, and returns the errors of LEM
// and NonRedundant.
func NonRedundantLEM(x mat.Matrix, dim int, s LEMSettings, nr NonRedundantSettings, src rand.Source) (*mat.Dense, NonRedundantResult, error) {
	if err := s.Validate(); err != nil {
		panic(err)
	}
	if err := nr.Validate(); err != nil {
		panic(err)
	}
	n, _ := x.Dims()
	if dim < 1 || dim > n-2 {
		panic(fmt.Sprintf("spectral: %d LEM coordinates of %d points", dim, n))
	}
	g, err := newLEMGraph(x, s)
	if err != nil {
		return nil, NonRedundantResult{}, err
	}
	if nr.Lanczos == (LanczosSettings{}) {
		nr.Lanczos = s.Lanczos
	}
	out := mat.NewDense(n, dim, nil)
	res, err := NonRedundant(out, NonRedundantProblem{K: g, Scale: g.scale(), Fixed: g.trivial()}, dim, nr, src)
	if err != nil {
		err = fmt.Errorf("spectral: non-redundant lem: %w", err)
	}
	return out, res, err
}

// lemGraph is the kernel K = I + D^(−1/2) W D^(−1/2) of LEM.
type lemGraph struct {
	a   *csr      // D^(−1/2) W D^(−1/2)
	deg []float64 // the degrees d_a
}

func (g *lemGraph) Size() int { return g.a.n }

func (g *lemGraph) Apply(dst, x []float64) {
	g.a.mulVec(dst, x)
	floats.Add(dst, x)
}

// trivial returns the unit vector D^(1/2)·1/‖D^(1/2)·1‖ as an N×1 matrix.
func (g *lemGraph) trivial() *mat.Dense {
	t := mat.NewDense(len(g.deg), 1, nil)
	sum := floats.Sum(g.deg)
	for a, d := range g.deg {
		t.Set(a, 0, math.Sqrt(d/sum))
	}
	return t
}

// scale returns the map from unit u to the coordinates,
// f = (Σd)^(1/2) D^(−1/2) u, so that Σ d_a f_a² = Σ d_a.
func (g *lemGraph) scale() []float64 {
	sum := floats.Sum(g.deg)
	s := make([]float64, len(g.deg))
	for a, d := range g.deg {
		s[a] = math.Sqrt(sum / d)
	}
	return s
}

// knnBlock is the number of rows whose distances to all points one
// matrix product computes.
const knnBlock = 256

// newLEMGraph builds the symmetric k-nearest-neighbour Gaussian affinity
// of the rows of x and normalises it.
func newLEMGraph(x mat.Matrix, s LEMSettings) (*lemGraph, error) {
	xd := mat.DenseCopyOf(x)
	n, dims := xd.Dims()
	for a := 0; a < n; a++ {
		for _, v := range xd.RawRowView(a) {
			if math.IsNaN(v) || math.IsInf(v, 0) {
				return nil, fmt.Errorf("%w: point %d", ErrNotFinite, a)
			}
		}
	}
	k := s.neighbours(n)
	sq := make([]float64, n)
	for a := 0; a < n; a++ {
		r := xd.RawRowView(a)
		sq[a] = floats.Dot(r, r)
	}
	nbr := make([]neighbour, n*k) // the k nearest of each point
	buf := make([]neighbour, n)
	var gram mat.Dense
	for a0 := 0; a0 < n; a0 += knnBlock {
		a1 := min(n, a0+knnBlock)
		gram.Reset()
		gram.Mul(xd.Slice(a0, a1, 0, dims), xd.T())
		for a := a0; a < a1; a++ {
			row := gram.RawRowView(a - a0)
			buf = buf[:0]
			for b, g := range row {
				if b != a {
					buf = append(buf, neighbour{max(sq[a]+sq[b]-2*g, 0), int32(b)})
				}
			}
			selectSmallest(buf, k)
			slices.SortFunc(buf[:k], func(p, q neighbour) int {
				switch {
				case p.d < q.d:
					return -1
				case p.d > q.d:
					return 1
				}
				return int(p.j - q.j)
			})
			copy(nbr[a*k:(a+1)*k], buf[:k])
		}
	}
	sigma := s.Sigma
	var local []float64 // σ_a
	if sigma == 0 && s.LocalScale < 0 {
		kth := make([]float64, n)
		for a := 0; a < n; a++ {
			kth[a] = nbr[a*k+k-1].d
		}
		slices.Sort(kth)
		sigma = math.Sqrt(kth[n/2])
		if !(sigma > 0) {
			return nil, fmt.Errorf("%w: the median distance to the %d-th neighbour is 0 (duplicate points)", ErrDegenerate, k)
		}
	} else if sigma == 0 {
		ls := s.LocalScale
		if ls == 0 {
			ls = 7
		}
		ls = min(ls, k)
		local = make([]float64, n)
		for a := 0; a < n; a++ {
			local[a] = math.Sqrt(nbr[a*k+ls-1].d)
			if !(local[a] > 0) {
				return nil, fmt.Errorf("%w: point %d has %d or more duplicates", ErrDegenerate, a, ls)
			}
		}
	}

	// Union of the directed k-nearest-neighbour edges; w_ab = w_ba.
	rows := make([][]neighbour, n)
	inv := 0.0
	if sigma > 0 {
		inv = 1 / (2 * sigma * sigma)
	}
	for a := 0; a < n; a++ {
		for _, e := range nbr[a*k : (a+1)*k] {
			w := math.Exp(-e.d * inv)
			if local != nil {
				w = math.Exp(-e.d / (2 * local[a] * local[e.j]))
			}
			rows[a] = append(rows[a], neighbour{w, e.j})
			rows[e.j] = append(rows[e.j], neighbour{w, int32(a)})
		}
	}
	w := &csr{n: n, ptr: make([]int, n+1)}
	deg := make([]float64, n)
	for a, r := range rows {
		slices.SortFunc(r, func(p, q neighbour) int { return int(p.j - q.j) })
		for i, e := range r {
			if i > 0 && r[i-1].j == e.j {
				continue
			}
			w.idx = append(w.idx, e.j)
			w.val = append(w.val, e.d)
			deg[a] += e.d
		}
		w.ptr[a+1] = len(w.val)
		rows[a] = nil
	}
	for a := 0; a < n; a++ {
		if !(deg[a] > 0) {
			return nil, fmt.Errorf("%w: point %d has no affinity with its neighbours (σ = %.3g too small)", ErrDegenerate, a, sigma)
		}
	}
	isq := make([]float64, n)
	for a, d := range deg {
		isq[a] = 1 / math.Sqrt(d)
	}
	for a := 0; a < n; a++ {
		for p := w.ptr[a]; p < w.ptr[a+1]; p++ {
			w.val[p] *= isq[a] * isq[w.idx[p]]
		}
	}
	return &lemGraph{a: w, deg: deg}, nil
}
