package spectral

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas64"
	"gonum.org/v1/gonum/floats"
	"gonum.org/v1/gonum/lapack/lapack64"
	"gonum.org/v1/gonum/mat"
)

// NonRedundantSettings configures the non-redundant solves (NonRedundant,
// NonRedundantLEM, SolveSMTNonRedundant): Blau and Michaeli,
// "Non-redundant Spectral Dimensionality Reduction" (ECML PKDD 2017),
// Alg. 1 and section 5. A zero field means its documented default.
type NonRedundantSettings struct {
	// Alpha is α of the bandwidth of the Nadaraya–Watson smoother of
	// coordinate i (section 5),
	//
	//	h = α·(Σ_{j<i} (1/N)‖f_j‖²)^(1/2),
	//
	// with the mean weighted by the sample weights when there are some.
	// The paper tunes α in [0.1, 0.6]. Zero means 0.3; it must be >= 0.
	Alpha float64
	// Neighbours is the number of nearest neighbours, in the space of the
	// previous coordinates, that each row of the smoother keeps (section
	// 4, "Efficient implementation": the paper keeps as many as fit in
	// memory, 10,000 of 15,000). Neighbours beyond 4h, whose weight is
	// below e⁻⁸ of the nearest, are dropped as well. The smoother takes
	// 12 bytes per kept entry, or 8·N² bytes when rows keep at least a
	// quarter of the points and it is stored dense (1.8 GB for 15,000
	// rows; see newSmoother). Too few neighbours narrow the
	// smoother below h and raise its rank: on 15,000 MNIST digits 1,000
	// neighbours gave ranks of 170 to 440 and coordinates worse than
	// LEM's for classification. Zero means min(N, 10000).
	Neighbours int
	// Truncate is the relative cutoff of the smoother's singular values:
	// the right singular vectors V_i kept are those of singular values at
	// least Truncate times the largest (section 5: 3%). Zero means 0.03;
	// it must be in [0, 1).
	Truncate float64
	// MaxRank bounds the number r of right singular vectors kept per
	// coordinate. Zero means N/2.
	MaxRank int
	// PowerIters is the number of power iterations of the randomised
	// SVD of the smoother (Halko, Martinsson and Tropp 2011, Alg. 4.4,
	// the paper's reference [16]). Zero means 2.
	PowerIters int
	// Lanczos configures the eigensolves of K̃_i. The zero value is
	// Smallest's defaults.
	Lanczos LanczosSettings
}

func (s NonRedundantSettings) alpha() float64 {
	if s.Alpha == 0 {
		return 0.3
	}
	return s.Alpha
}

func (s NonRedundantSettings) neighbours(n int) int {
	if s.Neighbours == 0 {
		return min(n, 10000)
	}
	return min(n, s.Neighbours)
}

func (s NonRedundantSettings) truncate() float64 {
	if s.Truncate == 0 {
		return 0.03
	}
	return s.Truncate
}

func (s NonRedundantSettings) maxRank(n int) int {
	if s.MaxRank == 0 {
		return max(n/2, 1)
	}
	return min(n, s.MaxRank)
}

func (s NonRedundantSettings) powerIters() int {
	if s.PowerIters == 0 {
		return 2
	}
	return s.PowerIters
}

// Validate reports whether the settings are usable.
func (s NonRedundantSettings) Validate() error {
	switch {
	case !(s.Alpha >= 0) || math.IsInf(s.Alpha, 1):
		return fmt.Errorf("spectral: non-redundant alpha %v: must be > 0 (0 means 0.3)", s.Alpha)
	case s.Neighbours < 0:
		return fmt.Errorf("spectral: non-redundant neighbours %d: must be >= 1 (0 means min(N, 10000))", s.Neighbours)
	case !(s.Truncate >= 0 && s.Truncate < 1):
		return fmt.Errorf("spectral: non-redundant truncation %v: must be in [0, 1) (0 means 0.03)", s.Truncate)
	case s.MaxRank < 0:
		return fmt.Errorf("spectral: non-redundant max rank %d: must be >= 0", s.MaxRank)
	case s.PowerIters < 0:
		return fmt.Errorf("spectral: non-redundant power iterations %d: must be >= 0", s.PowerIters)
	}
	return s.Lanczos.Validate()
}

// NonRedundantProblem is the spectral problem (4) of Blau and Michaeli in
// the maximisation form Alg. 1 needs, on N variables u:
//
//	max_u uᵀ K u   s.t.  ‖u‖ = 1,  Fixedᵀ u = 0,
//
// whose coordinates, the embedding, are f = Scale ⊙ u. Spectral methods
// with weighted constraints (LEM: fᵀ D f = 1, SMT: p V pᵀ = 1) take this
// form through u = S⁻¹ f with a diagonal S (LEM: D^(−1/2); SMT:
// V^(−1/2)); the unpredictability constraint is placed on f.
type NonRedundantProblem struct {
	// K is the kernel, symmetric positive semi-definite, given by its
	// products. A method that minimises (LEM, SMT) uses λ_max·I − K
	// (Alg. 1, step 2).
	K Operator
	// Scale maps the variables to the coordinates, f = Scale ⊙ u. Nil
	// means f = u. Entries must be finite and nonzero.
	Scale []float64
	// Weights are the sample weights of the smoother, the probability of
	// each point (SMT: the usage of each atom). Nil means equal weights.
	// Entries must be finite and >= 0, with a positive sum.
	Weights []float64
	// Fixed holds, as columns, the trivial directions u must be
	// orthogonal to (LEM: D^(1/2)·1, the constant function). Nil means
	// none.
	Fixed mat.Matrix
}

// NonRedundantResult describes a solution of NonRedundant.
type NonRedundantResult struct {
	// Values are the objectives uᵢᵀ K uᵢ of the coordinates, in order.
	// Unlike eigenvalues of K they need not decrease.
	Values []float64
	// Ranks are the numbers r of right singular vectors of each
	// coordinate's smoother projected out (0 for the first).
	Ranks []int
	// LanczosCounts sum the coordinates' Lanczos solves: Applies
	// counts the products with K.
	LanczosCounts
	// SmootherProducts counts the products of a vector with a smoother
	// or its transpose.
	SmootherProducts int
}

// Errors of the non-redundant solves.
var (
	// ErrNoRoom means the constraints of a coordinate (the trivial
	// directions, the previous coordinates and the smoother's singular
	// vectors) leave no direction on which the kernel is positive.
	ErrNoRoom = errors.New("spectral: the unpredictability constraints leave no room for another coordinate")
	// ErrBadProblem means a problem's scale or weights are unusable.
	ErrBadProblem = errors.New("spectral: bad non-redundant problem")
)

// smootherCutoff is the radius, in bandwidths, beyond which the
// smoothers drop neighbours: e^(−cutoff²/2) = e⁻⁸ ≈ 3.4·10⁻⁴.
const smootherCutoff = 4

// NonRedundant writes into dst (N×dim, or empty) the non-redundant
// embedding of the problem pr, Alg. 1 of Blau and Michaeli: the
// coordinates f_i = Scale ⊙ u_i are found one at a time, each the top
// eigenvector of the kernel restricted to the functions the previous
// coordinates cannot predict (problem (11), solved as (12) by Lemma 2):
//
//	[P_i]_jk ∝ w_k·exp(−‖f_<i(x_j) − f_<i(x_k)‖²/(2h²)),  Σ_k [P_i]_jk = 1
//	P_i ≈ U_i D_i V_iᵀ        (singular values ≥ Truncate·σ_1)
//	C_i = orth[Fixed, u_1, ..., u_(i−1), Scale ⊙ V_i]
//	u_i = top eigenvector of K̃_i = (I − C_i C_iᵀ) K (I − C_i C_iᵀ)
//
// P_i is the Nadaraya–Watson smoother (Alg. 1, step 5) over the previous
// coordinates with the bandwidth h of NonRedundantSettings.Alpha, kept
// sparse by its nearest neighbours; its dominant right singular vectors
// V_i come from a randomised SVD (Halko et al. 2011) that only multiplies
// by P_i and P_iᵀ, doubling the sketch until the smallest singular value
// found is below the cutoff. P_i f = 0 is V_iᵀ f = 0, that is
// u ⟂ Scale ⊙ V_i. K̃_i is never formed: each Lanczos step applies the
// projector (two products with the N×|C| basis), K, and the projector
// again (the paper's "efficient implementation").
//
// Besides the paper's constraints, u_i is kept exactly orthogonal to the
// previous u_j. Unpredictability implies it (E[f_i f_j] = 0 by (8) with
// g = f_j), the sample smoother only approximately, and it makes the
// coordinates satisfy the original method's normalisation: for SMT,
// P V Pᵀ = I.
//
// Each coordinate is signed so that its entry of largest magnitude is
// positive. src seeds the Lanczos start vectors and the random sketches.
//
// It panics if dim < 1, the settings are invalid, the sizes of Scale,
// Weights or Fixed differ from N, or dst has another shape. It returns
// an error wrapping ErrBadProblem for unusable scale or weights,
// ErrNoRoom when a coordinate has no room left, and ErrNoConvergence
// (dst then holds the best vectors found) when a Lanczos solve did not
// converge.
func NonRedundant(dst *mat.Dense, pr NonRedundantProblem, dim int, s NonRedundantSettings, src rand.Source) (NonRedundantResult, error) {
	if err := s.Validate(); err != nil {
		panic(err)
	}
	n := pr.K.Size()
	if dim < 1 {
		panic(fmt.Sprintf("spectral: non-redundant embedding of dimension %d", dim))
	}
	if dst.IsEmpty() {
		dst.ReuseAs(n, dim)
	} else if r, c := dst.Dims(); r != n || c != dim {
		panic(mat.ErrShape)
	}
	if (pr.Scale != nil && len(pr.Scale) != n) || (pr.Weights != nil && len(pr.Weights) != n) {
		panic(mat.ErrShape)
	}
	if pr.Fixed != nil {
		if r, _ := pr.Fixed.Dims(); r != n {
			panic(mat.ErrShape)
		}
	}
	for i, x := range pr.Scale {
		if x == 0 || math.IsNaN(x) || math.IsInf(x, 0) {
			return NonRedundantResult{}, fmt.Errorf("%w: scale %d is %v", ErrBadProblem, i, x)
		}
	}
	if pr.Weights != nil {
		sum := 0.0
		for i, x := range pr.Weights {
			if !(x >= 0) || math.IsInf(x, 1) {
				return NonRedundantResult{}, fmt.Errorf("%w: weight %d is %v", ErrBadProblem, i, x)
			}
			sum += x
		}
		if !(sum > 0) {
			return NonRedundantResult{}, fmt.Errorf("%w: the weights sum to %v", ErrBadProblem, sum)
		}
	}
	if src == nil {
		src = rand.NewPCG(0x5eed, 0x6e72)
	}
	rng := rand.New(src)

	var fixed *mat.Dense // orthonormal trivial directions
	if pr.Fixed != nil {
		fixed = orthonormalize(nil, mat.DenseCopyOf(pr.Fixed))
	}
	res := NonRedundantResult{Values: make([]float64, dim), Ranks: make([]int, dim)}
	us := mat.NewDense(n, dim, nil) // the unit variables u_i
	f := make([]float64, n)
	var err error
	for i := 0; i < dim; i++ {
		// The constraint basis C_i: the trivial directions, the previous
		// u_j (orthonormal to them by construction) and Scale ⊙ V_i.
		base := fixed
		if i > 0 {
			base = hcat(fixed, us.Slice(0, n, 0, i).(*mat.Dense))
		}
		c := base
		if i > 0 {
			h := bandwidth(dst.Slice(0, n, 0, i).(*mat.Dense), pr.Weights, s.alpha())
			p := newSmoother(dst.Slice(0, n, 0, i).(*mat.Dense), pr.Weights, h, s.neighbours(n))
			v, prods := topRightSingular(p, s.truncate(), s.maxRank(n), s.powerIters(), res.Ranks[i-1], rng)
			res.SmootherProducts += prods
			if v != nil {
				_, res.Ranks[i] = v.Dims()
			}
			if v != nil && pr.Scale != nil {
				for a := 0; a < n; a++ {
					floats.Scale(pr.Scale[a], v.RawRowView(a))
				}
			}
			c = orthonormalize(base, v)
		}
		op := newProjected(pr.K, c)
		if op.rank() >= n {
			return res, fmt.Errorf("%w: coordinate %d: %d of %d directions constrained", ErrNoRoom, i+1, op.rank(), n)
		}
		lr, lerr := Smallest(op, 1, s.Lanczos, rand.NewPCG(rng.Uint64(), rng.Uint64()))
		res.add(lr.LanczosCounts)
		if lr.Vectors == nil {
			return res, fmt.Errorf("spectral: coordinate %d: %w", i+1, lerr)
		}
		if lerr != nil && err == nil {
			err = fmt.Errorf("spectral: coordinate %d: %w", i+1, lerr)
		}
		u := us.RawMatrix().Data
		for a := 0; a < n; a++ {
			f[a] = lr.Vectors.At(a, 0)
		}
		// Rounding leaves u slightly outside the allowed subspace.
		op.project(f)
		nrm := floats.Norm(f, 2)
		if !(nrm > 0.5) || !(-lr.Values[0] > 1e-12*op.knorm) {
			return res, fmt.Errorf("%w: coordinate %d: objective %.3g", ErrNoRoom, i+1, -lr.Values[0])
		}
		floats.Scale(1/nrm, f)
		for a := 0; a < n; a++ {
			u[a*dim+i] = f[a]
		}
		res.Values[i] = -lr.Values[0]
		if pr.Scale != nil {
			floats.Mul(f, pr.Scale)
		}
		if big := floats.MaxIdx(absTo(op.y, f)); f[big] < 0 {
			floats.Scale(-1, f)
			for a := 0; a < n; a++ {
				u[a*dim+i] = -u[a*dim+i]
			}
		}
		dst.SetCol(i, f)
	}
	return res, err
}

// absTo writes |x| into dst and returns it.
func absTo(dst, x []float64) []float64 {
	for i, v := range x {
		dst[i] = math.Abs(v)
	}
	return dst
}

// hcat returns [a, b] (a may be nil).
func hcat(a, b *mat.Dense) *mat.Dense {
	if a == nil {
		return mat.DenseCopyOf(b)
	}
	var c mat.Dense
	c.Augment(a, b)
	return &c
}

// projected is the operator −(I − CCᵀ) K (I − CCᵀ) for an orthonormal
// N×c basis C (K̃ of Alg. 1, step 7, negated so that Smallest finds its
// top eigenvector), applied without forming any N×N matrix.
type projected struct {
	k     Operator
	c     blas64.General // N×c, zero columns for none
	h     []float64      // c
	t, y  []float64      // N
	knorm float64        // an estimate of ‖K‖, for tolerances
}

func newProjected(k Operator, c *mat.Dense) *projected {
	n := k.Size()
	p := &projected{k: k, t: make([]float64, n), y: make([]float64, n)}
	if c != nil {
		p.c = c.RawMatrix()
		p.h = make([]float64, p.c.Cols)
	}
	// One product with a fixed vector estimates ‖K‖ from below.
	for i := range p.t {
		p.t[i] = 1 / math.Sqrt(float64(n))
		if i%2 == 1 {
			p.t[i] = -p.t[i]
		}
	}
	k.Apply(p.y, p.t)
	p.knorm = max(floats.Norm(p.y, 2), 1e-300)
	return p
}

func (p *projected) Size() int { return p.k.Size() }

// rank returns the number of columns of C.
func (p *projected) rank() int { return p.c.Cols }

// project sets x = (I − CCᵀ) x.
func (p *projected) project(x []float64) {
	if p.c.Cols == 0 {
		return
	}
	n := len(x)
	xv := blas64.Vector{N: n, Inc: 1, Data: x}
	hv := blas64.Vector{N: p.c.Cols, Inc: 1, Data: p.h}
	blas64.Gemv(blas.Trans, 1, p.c, xv, 0, hv)
	blas64.Gemv(blas.NoTrans, -1, p.c, hv, 1, xv)
}

func (p *projected) Apply(dst, x []float64) {
	copy(p.t, x)
	p.project(p.t)
	p.k.Apply(dst, p.t)
	p.project(dst)
	floats.Scale(-1, dst)
}

// orthonormalize returns an orthonormal basis of span[base, m] whose
// first columns are base (assumed orthonormal; nil for none): the columns
// of m are projected off base twice and the rest orthonormalised through
// the eigendecomposition of their Gram matrix, dropping directions whose
// norm fell below 10⁻⁷ of m's largest column (already spanned). m is
// overwritten.
func orthonormalize(base, m *mat.Dense) *mat.Dense {
	if m == nil {
		return base
	}
	_, c := m.Dims()
	scale := 0.0
	for j := 0; j < c; j++ {
		scale = max(scale, mat.Norm(m.ColView(j), 2))
	}
	if scale == 0 {
		return base
	}
	var q *mat.Dense
	for pass := 0; pass < 2; pass++ {
		if base != nil {
			var h, bh mat.Dense
			h.Mul(base.T(), m)
			bh.Mul(base, &h)
			m.Sub(m, &bh)
		}
		var g mat.SymDense
		g.SymOuterK(1, m.T())
		var eig mat.EigenSym
		if !eig.Factorize(&g, true) {
			panic("spectral: eigendecomposition of a Gram matrix failed")
		}
		vals := eig.Values(nil)
		var w mat.Dense
		eig.VectorsTo(&w)
		cut := 1e-14 * scale * scale
		if pass == 1 {
			cut = 0.25 // a second pass only cleans up rounding
		}
		var keep []int
		for j := len(vals) - 1; j >= 0; j-- {
			if vals[j] > cut {
				keep = append(keep, j)
			}
		}
		if len(keep) == 0 {
			return base
		}
		ws := mat.NewDense(len(vals), len(keep), nil)
		for k, j := range keep {
			f := 1 / math.Sqrt(vals[j])
			for r := range vals {
				ws.Set(r, k, w.At(r, j)*f)
			}
		}
		q = new(mat.Dense)
		q.Mul(m, ws) // n×len(keep), orthonormal up to rounding
		m = q
	}
	if base == nil {
		return q
	}
	return hcat(base, q)
}

// bandwidth returns h = α·(Σ_j (1/N)‖f_j‖²)^(1/2) over the columns of y,
// the mean weighted by w when w is not nil.
func bandwidth(y *mat.Dense, w []float64, alpha float64) float64 {
	n, m := y.Dims()
	var s, ws float64
	for a := 0; a < n; a++ {
		wa := 1.0
		if w != nil {
			wa = w[a]
		}
		row := y.RawRowView(a)
		s += wa * floats.Dot(row[:m], row[:m])
		ws += wa
	}
	return alpha * math.Sqrt(s/ws)
}

// csr is a square sparse matrix in compressed sparse row form.
type csr struct {
	n   int
	ptr []int // row a holds idx[ptr[a]:ptr[a+1]]
	idx []int32
	val []float64
}

func (m *csr) size() int { return m.n }

// mulVec sets dst = M x.
func (m *csr) mulVec(dst, x []float64) {
	for a := 0; a < m.n; a++ {
		s := 0.0
		for p := m.ptr[a]; p < m.ptr[a+1]; p++ {
			s += m.val[p] * x[m.idx[p]]
		}
		dst[a] = s
	}
}

// mulDense sets dst = M x for N×l matrices; dst and x must not alias.
func (m *csr) mulDense(dst, x *mat.Dense) {
	dst.Zero()
	for a := 0; a < m.n; a++ {
		d := dst.RawRowView(a)
		for p := m.ptr[a]; p < m.ptr[a+1]; p++ {
			floats.AddScaled(d, m.val[p], x.RawRowView(int(m.idx[p])))
		}
	}
}

// mulTDense sets dst = Mᵀ x for N×l matrices; dst and x must not alias.
func (m *csr) mulTDense(dst, x *mat.Dense) {
	dst.Zero()
	for a := 0; a < m.n; a++ {
		xa := x.RawRowView(a)
		for p := m.ptr[a]; p < m.ptr[a+1]; p++ {
			floats.AddScaled(dst.RawRowView(int(m.idx[p])), m.val[p], xa)
		}
	}
}

// neighbour is a candidate neighbour: its squared distance and index.
type neighbour struct {
	d float64
	j int32
}

// nearest writes into buf the points b (rows of y, which has m columns)
// within squared distance cut2 of row a, and keeps the k nearest of them
// (in no particular order). skipSelf leaves a itself out.
func nearest(buf []neighbour, y *mat.Dense, a, k int, cut2 float64, skipSelf bool) []neighbour {
	n, m := y.Dims()
	raw := y.RawMatrix()
	ya := raw.Data[a*raw.Stride : a*raw.Stride+m]
	buf = buf[:0]
	for b := 0; b < n; b++ {
		if skipSelf && b == a {
			continue
		}
		yb := raw.Data[b*raw.Stride : b*raw.Stride+m]
		d := 0.0
		for l, v := range ya {
			t := v - yb[l]
			d += t * t
		}
		if d <= cut2 {
			buf = append(buf, neighbour{d, int32(b)})
		}
	}
	if len(buf) > k {
		selectSmallest(buf, k)
		buf = buf[:k]
	}
	return buf
}

// selectSmallest reorders c so that its k smallest distances come first
// (Hoare's quickselect with the middle element as pivot).
func selectSmallest(c []neighbour, k int) {
	lo, hi := 0, len(c)-1
	for lo < hi {
		pivot := c[(lo+hi)/2].d
		i, j := lo, hi
		for i <= j {
			for c[i].d < pivot {
				i++
			}
			for c[j].d > pivot {
				j--
			}
			if i <= j {
				c[i], c[j] = c[j], c[i]
				i++
				j--
			}
		}
		switch {
		case k-1 <= j:
			hi = j
		case k-1 >= i:
			lo = i
		default:
			return
		}
	}
}

// nwSmoother returns the Nadaraya–Watson smoother over the rows of y
// (Alg. 1, step 5) with sample weights w (nil: equal), Gaussian kernel of
// bandwidth h, each row keeping its k nearest neighbours within
// smootherCutoff·h, itself included when self is true:
//
//	[P]_ab = w_b·exp(−‖y_a − y_b‖²/(2h²)) / Σ_c w_c·exp(−‖y_a − y_c‖²/(2h²)).
//
// Distances are taken relative to the nearest kept neighbour, so a row
// whose neighbours are all far becomes its nearest neighbour's value
// instead of 0/0; a row whose kept weights are all zero is left empty.
func nwSmoother(y *mat.Dense, w []float64, h float64, k int, self bool) *csr {
	n, _ := y.Dims()
	p := &csr{n: n, ptr: make([]int, n+1)}
	nwRows(y, w, h, k, self, func(a int, c []neighbour, v []float64) {
		for _, e := range c {
			p.idx = append(p.idx, e.j)
		}
		p.val = append(p.val, v...)
		p.ptr[a+1] = len(p.val)
	})
	return p
}

// denseSmootherBytes bounds the size of a smoother stored dense.
const denseSmootherBytes = 2 << 30

// newSmoother returns nwSmoother(y, w, h, k, true), stored dense when
// rows keep at least a quarter of the points and N×N float64 fit in
// denseSmootherBytes: its products then run at the speed of the BLAS
// matrix product instead of one sparse row at a time (about 10 times
// faster on 15,000 MNIST digits with 10,000 neighbours, 44% of the
// entries kept, and OpenBLAS).
func newSmoother(y *mat.Dense, w []float64, h float64, k int) smoother {
	n, _ := y.Dims()
	if 4*k < n || n*n > denseSmootherBytes/8 {
		return nwSmoother(y, w, h, k, true)
	}
	p := denseSmoother{mat.NewDense(n, n, nil)}
	nwRows(y, w, h, k, true, func(a int, c []neighbour, v []float64) {
		row := p.m.RawRowView(a)
		for i, e := range c {
			row[e.j] = v[i]
		}
	})
	return p
}

// nwRows computes the rows of nwSmoother one at a time and passes each
// to row as its columns c and values v (only valid during the call).
func nwRows(y *mat.Dense, w []float64, h float64, k int, self bool, row func(a int, c []neighbour, v []float64)) {
	n, _ := y.Dims()
	buf := make([]neighbour, 0, n)
	vals := make([]float64, 0, n)
	cut2 := smootherCutoff * smootherCutoff * h * h
	if h == 0 {
		cut2 = 0
	}
	inv := 0.0
	if h > 0 {
		inv = 1 / (2 * h * h)
	}
	for a := 0; a < n; a++ {
		c := nearest(buf, y, a, k, cut2, !self)
		if len(c) == 0 && !self {
			// Nothing within the cutoff: fall back on the nearest point.
			c = nearest(buf, y, a, 1, math.Inf(1), true)
		}
		d0 := math.Inf(1)
		for _, e := range c {
			d0 = min(d0, e.d)
		}
		kept, v := c[:0], vals[:0]
		sum := 0.0
		for _, e := range c {
			x := math.Exp(-(e.d - d0) * inv)
			if w != nil {
				x *= w[e.j]
			}
			if x > 0 {
				kept = append(kept, e)
				v = append(v, x)
				sum += x
			}
		}
		if sum > 0 {
			floats.Scale(1/sum, v)
		}
		row(a, kept, v)
		buf = c[:0]
	}
}

// smoother is a smoother matrix that multiplies N×l matrices.
type smoother interface {
	// size returns N.
	size() int
	// mulDense sets dst = P x; dst and x must not alias.
	mulDense(dst, x *mat.Dense)
	// mulTDense sets dst = Pᵀ x; dst and x must not alias.
	mulTDense(dst, x *mat.Dense)
}

// denseSmoother is a smoother stored as a dense matrix.
type denseSmoother struct{ m *mat.Dense }

func (p denseSmoother) size() int                   { r, _ := p.m.Dims(); return r }
func (p denseSmoother) mulDense(dst, x *mat.Dense)  { dst.Mul(p.m, x) }
func (p denseSmoother) mulTDense(dst, x *mat.Dense) { dst.Mul(p.m.T(), x) }

// topRightSingular returns, as the columns of an N×r matrix, the right
// singular vectors of p whose singular values are at least trunc times
// the largest, at most maxRank of them (nil for none), by a randomised SVD (Halko et
// al. 2011, Alg. 4.4 with q power iterations and Rayleigh–Ritz): a
// sketch Q of range(Pᵀ), refined as Q ← orth(Pᵀ P Q), then the SVD of
// P Q. The sketch starts with max(64, 1.25·hint + 10) columns (hint:
// the rank of the previous coordinate's smoother, which the next one
// rarely undercuts) and doubles while its smallest singular value is
// still above the cutoff. It also returns the number of matrix–vector
// products taken.
func topRightSingular(p smoother, trunc float64, maxRank, q, hint int, rng *rand.Rand) (*mat.Dense, int) {
	n := p.size()
	const over = 10 // oversampling
	l := min(n, max(64, hint+hint/4+over))
	prods := 0
	for {
		omega := mat.NewDense(n, l, nil)
		raw := omega.RawMatrix().Data
		for i := range raw {
			raw[i] = rng.NormFloat64()
		}
		qm := mat.NewDense(n, l, nil)
		z := mat.NewDense(n, l, nil)
		p.mulTDense(qm, omega)
		prods += l
		thinQ(qm)
		for it := 0; it < q; it++ {
			p.mulDense(z, qm)
			p.mulTDense(qm, z)
			prods += 2 * l
			thinQ(qm)
		}
		p.mulDense(z, qm) // B = P Q
		prods += l
		var g mat.SymDense
		g.SymOuterK(1, z.T()) // BᵀB = W Σ² Wᵀ
		var eig mat.EigenSym
		if !eig.Factorize(&g, true) {
			panic("spectral: eigendecomposition of a sketch failed")
		}
		vals := eig.Values(nil)
		top := math.Sqrt(max(vals[l-1], 0))
		r := 0
		for j := l - 1; j >= 0 && r < maxRank; j-- {
			if math.Sqrt(max(vals[j], 0)) >= trunc*top && top > 0 {
				r++
			} else {
				break
			}
		}
		if r+over <= l || l == n || r >= maxRank {
			var w mat.Dense
			eig.VectorsTo(&w)
			if r == 0 {
				return nil, prods
			}
			keep := mat.NewDense(l, r, nil)
			for k := 0; k < r; k++ {
				for i := 0; i < l; i++ {
					keep.Set(i, k, w.At(i, l-1-k))
				}
			}
			var v mat.Dense
			v.Mul(qm, keep)
			return &v, prods
		}
		l = min(n, 2*l)
	}
}

// thinQ overwrites the n×l matrix a (n >= l) with the Q factor of its
// thin QR factorisation.
func thinQ(a *mat.Dense) {
	g := a.RawMatrix()
	tau := make([]float64, g.Cols)
	work := []float64{0}
	lapack64.Geqrf(g, tau, work, -1)
	lw := int(work[0])
	lapack64.Orgqr(g, tau, work, -1)
	lw = max(lw, int(work[0]), 1)
	work = make([]float64, lw)
	lapack64.Geqrf(g, tau, work, lw)
	lapack64.Orgqr(g, tau, work, lw)
}
