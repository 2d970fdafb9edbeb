package online

import (
	"errors"
	"fmt"
	"math"
	"slices"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas64"
	"gonum.org/v1/gonum/floats"
	"gonum.org/v1/gonum/mat"

	"github.com/smtd/smtd/internal/finite"
	"github.com/smtd/smtd/internal/state"
)

// Moments is the running mean and covariance of a stream of row vectors,
// merged one minibatch at a time (Chan, Golub and LeVeque's pairwise
// update), with optional exponential forgetting of the past:
//
//	w ← (1−f)·w,  M ← (1−f)·M                    (forget)
//	δ = m_b − m,  w' = w + n_b
//	m ← m + δ·n_b/w'
//	M ← M + M_b + δδᵀ·w·n_b/w'
//	Σ = M/w
//
// where m_b and M_b = Σ_b (x−m_b)(x−m_b)ᵀ are the mean and scatter of the
// n_b rows of the batch. The zero value is not usable; use NewMoments.
type Moments struct {
	dim     int
	weight  float64   // w, the (forgotten) number of rows
	mean    []float64 // m
	scatter []float64 // M, dim×dim row-major, upper triangle only

	bmean    []float64 // workspace: batch mean
	centered []float64 // workspace: centred batch rows
	bscatter []float64 // workspace: batch scatter
}

// NewMoments returns empty moments of dim-vectors. It panics if dim < 1.
func NewMoments(dim int) *Moments {
	if dim < 1 {
		panic(fmt.Sprintf("online: moments of dimension %d", dim))
	}
	return &Moments{
		dim:      dim,
		mean:     make([]float64, dim),
		scatter:  make([]float64, dim*dim),
		bmean:    make([]float64, dim),
		bscatter: make([]float64, dim*dim),
	}
}

// Dim returns the dimension of the vectors.
func (m *Moments) Dim() int { return m.dim }

// Weight returns the effective number of rows merged so far: their count
// without forgetting.
func (m *Moments) Weight() float64 { return m.weight }

// Add merges the rows of x that skip does not flag (skip may be nil),
// after multiplying the weight of the past by 1−forget, and returns the
// number of rows merged. It panics with mat.ErrShape if x does not have
// Dim columns or skip is non-nil and not one flag per row, and if forget
// is outside [0, 1).
func (m *Moments) Add(x mat.Matrix, skip []bool, forget float64) int {
	r, c := x.Dims()
	if c != m.dim || (skip != nil && len(skip) != r) {
		panic(mat.ErrShape)
	}
	if !(forget >= 0 && forget < 1) {
		panic(fmt.Sprintf("online: forget factor %v outside [0, 1)", forget))
	}
	n := m.batch(m.bmean, m.bscatter, x, skip)
	if n == 0 {
		return 0
	}
	m.weight = mergeMoments(m.weight, m.mean, m.scatter, float64(n), m.bmean, m.bscatter, forget)
	return n
}

// batch writes into mean and scatter (Dim and Dim×Dim, upper triangle)
// the mean m_b and scatter M_b = Σ_b (x−m_b)(x−m_b)ᵀ of the rows of x
// that skip does not flag and returns their number n_b. With n_b = 0 it
// writes nothing. x must have Dim columns.
func (m *Moments) batch(mean, scatter []float64, x mat.Matrix, skip []bool) int {
	r, _ := x.Dims()
	n := 0
	for i := 0; i < r; i++ {
		if skip == nil || !skip[i] {
			n++
		}
	}
	if n == 0 {
		return 0
	}
	if cap(m.centered) < n*m.dim {
		m.centered = make([]float64, n*m.dim)
	}
	cen := m.centered[:n*m.dim]
	k := 0
	clear(mean)
	for i := 0; i < r; i++ {
		if skip != nil && skip[i] {
			continue
		}
		row := cen[k*m.dim : (k+1)*m.dim]
		mat.Row(row, i, x)
		for j, v := range row {
			mean[j] += v
		}
		k++
	}
	nb := float64(n)
	for j := range mean {
		mean[j] /= nb
	}
	for k := 0; k < n; k++ {
		row := cen[k*m.dim : (k+1)*m.dim]
		for j := range row {
			row[j] -= mean[j]
		}
	}
	blas64.Syrk(blas.Trans, 1,
		blas64.General{Rows: n, Cols: m.dim, Stride: m.dim, Data: cen},
		0, blas64.Symmetric{Uplo: blas.Upper, N: m.dim, Stride: m.dim, Data: scatter})
	return n
}

// mergeMoments merges the moments (n_b, m_b, M_b) of a batch into those
// (w, m, M) of the past, which lose the fraction forget of their weight
// first, and returns the new weight w' (Chan, Golub and LeVeque, 1979,
// pairwise update; see Moments):
//
//	w ← (1−f)·w,  M ← (1−f)·M
//	δ = m_b − m,  w' = w + n_b
//	m ← m + δ·n_b/w'
//	M ← M + M_b + δδᵀ·w·n_b/w'
//
// mean and scatter are updated in place; only the upper triangles of the
// scatters are read and written. With forget = 0 it is the exact pairwise
// combination of two batches.
func mergeMoments(w float64, mean, scatter []float64, nb float64, bmean, bscatter []float64, forget float64) float64 {
	dim := len(mean)
	w *= 1 - forget
	tot := w + nb
	coef := w * nb / tot
	for i := 0; i < dim; i++ {
		di := bmean[i] - mean[i]
		row := scatter[i*dim : (i+1)*dim]
		brow := bscatter[i*dim : (i+1)*dim]
		for j := i; j < dim; j++ {
			dj := bmean[j] - mean[j]
			row[j] = row[j]*(1-forget) + brow[j] + di*dj*coef
		}
	}
	for j := range mean {
		mean[j] += (bmean[j] - mean[j]) * nb / tot
	}
	return tot
}

// Mean returns the running mean, written into dst if it has length Dim
// (else into a new slice).
func (m *Moments) Mean(dst []float64) []float64 {
	if len(dst) != m.dim {
		dst = make([]float64, m.dim)
	}
	copy(dst, m.mean)
	return dst
}

// Cov writes the running covariance Σ = M/w into dst, which must be
// Dim×Dim or empty. With no rows merged it writes zeros.
func (m *Moments) Cov(dst *mat.SymDense) {
	if dst.IsEmpty() {
		dst.ReuseAsSym(m.dim)
	} else if dst.SymmetricDim() != m.dim {
		panic(mat.ErrShape)
	}
	inv := 0.0
	if m.weight > 0 {
		inv = 1 / m.weight
	}
	for i := 0; i < m.dim; i++ {
		for j := i; j < m.dim; j++ {
			dst.SetSym(i, j, m.scatter[i*m.dim+j]*inv)
		}
	}
}

func (m *Moments) encode(e *state.Encoder) {
	e.F64(m.weight)
	e.F64s(m.mean)
	e.F64s(m.scatter)
}

func (m *Moments) decode(d *state.Decoder) {
	m.weight = d.F64()
	d.F64s(m.mean)
	d.F64s(m.scatter)
}

func (m *Moments) clone() *Moments {
	c := NewMoments(m.dim)
	c.weight = m.weight
	copy(c.mean, m.mean)
	copy(c.scatter, m.scatter)
	return c
}

// WhitenSettings configures a Whitener. The zero value is the default.
type WhitenSettings struct {
	// Lambda is the regulariser λ of the operator (λI+Σ)^(−1/2), in the
	// units of Σ (squared input units). It keeps directions of tiny
	// variance, mostly noise, from being amplified without bound; a λ much
	// larger than the eigenvalues of Σ makes W close to I/√λ, no
	// whitening at all. For scale: MNIST 6×6 patches with pixels in
	// [0, 1] and the contextual mean (d = 1) removed have eigenvalues from
	// 0.0025 to 0.046, mean 0.017. Zero means 0.1; it must be >= 0.
	Lambda float64
	// RefreshEvery bounds the number of minibatches between two
	// recomputations of the operator from Σ. Observe refreshes at batches
	// 1, 2, 4, 8, ... (a doubling warm-up while Σ moves fast) until the
	// gap reaches RefreshEvery, then every RefreshEvery batches. Zero means
	// 64; a negative value means only Refresh and freezing refresh.
	RefreshEvery int
	// FreezeAfter is the number of rows after which Σ stops updating: the
	// batch that reaches it is the last one merged, the operator is
	// refreshed one last time and then stays fixed, so later codes are
	// comparable. Zero means never freeze.
	FreezeAfter int64
	// Forget is the fraction f of the past statistics' weight dropped at
	// each minibatch (Moments), so Σ tracks a drifting stream with a
	// memory of about 1/f batches. Zero means no forgetting; it must be in
	// [0, 1).
	Forget float64
	// Clip is c, the bound on the influence of one row on Σ (see
	// Whitener.Observe): a row farther than τ = c·√(λ·dim + tr Σ) from
	// the running mean is pulled in to that distance before it is merged.
	// Zero means DefaultClip; it must be >= 1, and +Inf turns the bound
	// off.
	Clip float64
}

// DefaultClip is the default of WhitenSettings.Clip. Measured on 6×6
// patches (contextual mean removed, d = 3) streamed in batches of 1 and
// 32 images: the largest distance of a patch from the running mean,
// relative to √(tr Σ) alone, is 2.1 on the 1000 recorded MNIST digits,
// 2.9 on the recorded panned video, and up to 116 on 32×32 crops of
// scikit-image's gray photographs (camera, coffee, rocket, ...) taken in
// raster order, a flat sky first. The floor λ·dim covers the latter: with
// λ = 0.1 (or 0.01), τ = 8·√(λ·36 + tr Σ) ≥ 15 (4.8), and no patch of
// any of these streams is clipped; with λ = 0.001, 4 of the 187 000
// patches of camera are. A patch with pixels in [0, 1] has a norm of at
// most 6 after mean removal.
const DefaultClip = 8

const (
	defaultLambda       = 0.1
	defaultRefreshEvery = 64
)

func (s WhitenSettings) lambda() float64 {
	if s.Lambda == 0 {
		return defaultLambda
	}
	return s.Lambda
}

func (s WhitenSettings) clip() float64 {
	if s.Clip == 0 {
		return DefaultClip
	}
	return s.Clip
}

func (s WhitenSettings) refreshEvery() int {
	if s.RefreshEvery == 0 {
		return defaultRefreshEvery
	}
	return s.RefreshEvery
}

// Validate reports whether the settings are usable.
func (s WhitenSettings) Validate() error {
	switch {
	case !(s.Lambda >= 0) || math.IsInf(s.Lambda, 1):
		return fmt.Errorf("online: whiten lambda %v: must be >= 0 (0 means %v)", s.Lambda, defaultLambda)
	case s.FreezeAfter < 0:
		return fmt.Errorf("online: whiten freeze after %d rows: must be >= 0", s.FreezeAfter)
	case !(s.Forget >= 0 && s.Forget < 1):
		return fmt.Errorf("online: whiten forget %v: must be in [0, 1)", s.Forget)
	case !(s.Clip == 0 || s.Clip >= 1):
		return fmt.Errorf("online: whiten clip %v: must be >= 1 or +Inf (0 means %v)", s.Clip, DefaultClip)
	}
	return nil
}

// ErrEigen is returned when the eigendecomposition of Σ fails, which
// happens when Σ holds NaN or Inf.
var ErrEigen = errors.New("online: eigendecomposition of the covariance failed")

// Whitener estimates the whitening operator of smt-minimalistic, App. C,
// from a stream of (mean-removed) patches, one minibatch at a time:
//
//	W = (λI + Σ)^(−1/2) = U diag(1/√(λ+e_k)) Uᵀ,   Σ = U diag(e) Uᵀ,
//
// with Σ the running covariance of the rows (Moments). Whiten applies W to
// each row as it is, without subtracting the running mean: mean removal is
// the job of RemoveMean, and App. C applies W to the mean-removed patch x̄.
// Eigenvalues are clipped at zero before λ is added.
//
// Until the first refresh the operator is the identity (rows pass
// unchanged); with the default schedule the first Observe refreshes it.
//
// A single row cannot poison Σ: Observe bounds the distance of each row
// from the running mean before merging it (WhitenSettings.Clip), and
// leaves out rows holding NaN or ±Inf. Check reports a state whose
// operator has collapsed anyway.
//
// Observe, Contribute, Apply, Refresh, SetSettings and UnmarshalBinary
// modify the Whitener (Contribute only its workspaces);
// the other methods only read it and may run concurrently with each other.
type Whitener struct {
	s         WhitenSettings
	mom       *Moments
	op        *mat.Dense // W
	inv       *mat.Dense // W⁻¹ = (λI+Σ)^(1/2)
	batches   int64      // minibatches merged
	rows      int64      // rows merged
	last      int64      // batch of the last scheduled refresh
	refreshes int64
	clipped   int64 // rows pulled in by the bound of Observe
	rejected  int64 // non-finite rows left out by Observe

	// For Check: the floored trace λ·dim + tr Σ at the last refresh (0
	// before any), and tr W of the operator the last refresh replaced (0
	// when there is nothing to compare: the initial identity, or a change
	// of λ).
	refScale  float64
	prevTrace float64

	cov    mat.SymDense // workspace
	rows2  mat.Dense    // workspace: the bounded rows of a batch
	omit   []bool       // workspace: the rows Observe leaves out
	centre []float64    // workspace
	dist   []float64    // workspace
	eig    mat.EigenSym
	vec    mat.Dense
	tmp    *mat.Dense

	own  WhitenContribution // workspace: the batch of Observe
	comb WhitenContribution // workspace: the contributions combined by Apply
}

// NewWhitener returns a Whitener of dim-vectors whose operator is the
// identity. It panics if dim < 1 or the settings are invalid.
func NewWhitener(dim int, s WhitenSettings) *Whitener {
	if err := s.Validate(); err != nil {
		panic(err)
	}
	w := &Whitener{s: s, mom: NewMoments(dim), tmp: mat.NewDense(dim, dim, nil)}
	w.op = identity(dim)
	w.inv = identity(dim)
	return w
}

func identity(n int) *mat.Dense {
	m := mat.NewDense(n, n, nil)
	for i := 0; i < n; i++ {
		m.Set(i, i, 1)
	}
	return m
}

// Dim returns the dimension of the rows.
func (w *Whitener) Dim() int { return w.mom.dim }

// Settings returns the current settings.
func (w *Whitener) Settings() WhitenSettings { return w.s }

// SetSettings replaces the settings, for live tuning. If λ changes and
// rows have been merged, the operator is recomputed at once (even when
// frozen, since Σ itself is unchanged). A larger FreezeAfter (or 0)
// unfreezes a frozen Whitener.
func (w *Whitener) SetSettings(s WhitenSettings) error {
	if err := s.Validate(); err != nil {
		return err
	}
	old := w.s
	w.s = s
	if s.lambda() != old.lambda() && w.mom.weight > 0 {
		if err := w.Refresh(); err != nil {
			w.s = old
			return err
		}
		// A new λ rescales W on purpose: not a collapse.
		w.prevTrace = 0
	}
	return nil
}

// Frozen reports whether Σ has stopped updating (FreezeAfter reached).
func (w *Whitener) Frozen() bool {
	return w.s.FreezeAfter > 0 && w.rows >= w.s.FreezeAfter
}

// Rows returns the number of rows merged into Σ.
func (w *Whitener) Rows() int64 { return w.rows }

// Batches returns the number of minibatches merged into Σ.
func (w *Whitener) Batches() int64 { return w.batches }

// Refreshes returns the number of times the operator was computed.
func (w *Whitener) Refreshes() int64 { return w.refreshes }

// Clipped returns the number of rows Observe pulled in to the bound τ
// before merging them (see Observe).
func (w *Whitener) Clipped() int64 { return w.clipped }

// Rejected returns the number of rows holding NaN or ±Inf that Observe
// left out of Σ.
func (w *Whitener) Rejected() int64 { return w.rejected }

// Moments returns the running moments. They must not be modified.
func (w *Whitener) Moments() *Moments { return w.mom }

// Observe merges the rows of x that skip does not flag (skip may be nil)
// into the running moments and refreshes the operator when the schedule
// of WhitenSettings.RefreshEvery says so, or when the batch reaches
// FreezeAfter. A frozen Whitener ignores x, and so does a batch whose rows
// are all skipped. It returns ErrEigen (wrapped) if a refresh fails; the
// moments keep the batch and the operator is unchanged.
//
// Each row's influence on the moments is bounded first. Rows holding NaN
// or ±Inf are left out (Rejected counts them). A row x farther than τ
// from the centre m is pulled in along the ray from m (Clipped counts
// them),
//
//	x ← m + (x − m)·τ/‖x − m‖   if ‖x − m‖ > τ,
//	τ = c·√(λ·dim + s²),
//
// with c = WhitenSettings.Clip. Once rows have been merged, m is the
// running mean and s² = tr Σ, the mean squared distance of a row from
// it, so one row adds at most τ²/w to tr Σ (w the weight of the past)
// and one image of p patches at most p·τ²/w, whatever its values: a
// 28×28 image of N(0,1)·10⁶ (10¹⁸, or 10³⁸ with pixels that overflow
// float32) after 500 MNIST digits moves W by 3-5% of its norm instead of
// shrinking tr W from 96 to 10⁻³ or less (TestWhitenerOutlierImage).
// For the first batch, with no moments yet, m is the coordinate-wise
// median of its rows and s the median of the distances from m that are
// not zero (blank patches left aside), which break down only if half the
// rows of that batch are outliers: a stream whose very first batch is
// mostly outliers starts from a poisoned Σ, which only Forget wears
// off. The floor
// λ·dim, the variance the regulariser of W already treats as noise,
// keeps the bound from firing on a stream that starts flat (a blank sky,
// a dark frame) and then gains contrast. The bound depends only on the
// state and the batch, so a resumed Whitener continues bit for bit.
//
// Observe is Contribute followed by Apply of that one contribution.
//
// It panics with mat.ErrShape if x does not have Dim columns or skip is
// non-nil and not one flag per row.
func (w *Whitener) Observe(x mat.Matrix, skip []bool) error {
	w.Contribute(&w.own, x, skip)
	c := &w.own
	return w.merge(c.Rows, c.Mean, c.Scatter, c.Clipped, c.Rejected)
}

// Contribute writes into dst, reusing its slices, what Observe(x, skip)
// would merge: the count n_b, mean m_b and scatter M_b of the rows of x
// that skip does not flag and that are finite, after the bound of Observe
// under w's current moments, and the numbers of rows the bound clipped and
// rejected. It changes none of w's moments, operator or counters, only its
// workspaces, so it must not run concurrently with the other methods that
// modify w. A frozen Whitener contributes nothing (Rows 0). With Rows 0,
// dst.Mean and dst.Scatter are not meaningful.
//
// It panics with mat.ErrShape if x does not have Dim columns or skip is
// non-nil and not one flag per row.
func (w *Whitener) Contribute(dst *WhitenContribution, x mat.Matrix, skip []bool) {
	r, c := x.Dims()
	d := w.mom.dim
	if c != d || (skip != nil && len(skip) != r) {
		panic(mat.ErrShape)
	}
	dst.Rows, dst.Clipped, dst.Rejected = 0, 0, 0
	if w.Frozen() {
		return
	}
	rows, omit := w.bound(dst, x, skip)
	dst.Mean = grow(dst.Mean, d)
	dst.Scatter = grow(dst.Scatter, d*d)
	dst.Rows = w.mom.batch(dst.Mean, dst.Scatter, rows, omit)
}

// Apply merges the contributions cs, in order, into the moments as one
// minibatch: the weight of the past is forgotten once, the batch moments
// of the contributions are combined pairwise (Chan, Golub and LeVeque,
// 1979; the update of Moments with f = 0),
//
//	n = n_a + n_b,  δ = m_b − m_a
//	m = m_a + δ·n_b/n
//	M = M_a + M_b + δδᵀ·n_a·n_b/n,
//
// and the result is merged as Moments.Add merges a batch. Batches counts
// one, Rows, Clipped and Rejected add up, and the operator is refreshed
// when the schedule of WhitenSettings.RefreshEvery says so or FreezeAfter
// is reached, exactly as in Observe; Apply of the single contribution of
// a batch is Observe of that batch, bit for bit. Contributions with Rows 0
// add only their Rejected count (as Observe counts the rejected rows of a
// batch it otherwise ignores); a frozen Whitener ignores cs.
//
// The contributions should have been computed under a recent state of w:
// each one's rows were bounded under the moments of the Whitener that
// contributed it. Apply returns an error wrapping ErrFormat, and changes
// nothing, if a contribution with rows does not have Dim-sized moments or
// has a negative count, and ErrEigen (wrapped) if a refresh fails, in
// which case the moments keep the batch and the operator is unchanged.
func (w *Whitener) Apply(cs []*WhitenContribution) error {
	if w.Frozen() {
		return nil
	}
	d := w.mom.dim
	for i, c := range cs {
		if c.Rows < 0 || c.Clipped < 0 || c.Rejected < 0 ||
			(c.Rows > 0 && (len(c.Mean) != d || len(c.Scatter) != d*d)) {
			return fmt.Errorf("%w: whiten contribution %d of %d rows, %d-mean and %d-scatter, receiver has dimension %d",
				ErrFormat, i, c.Rows, len(c.Mean), len(c.Scatter), d)
		}
	}
	var (
		first             *WhitenContribution // the only contribution with rows, until a second one
		clipped, rejected int64
		comb              = &w.comb
	)
	for _, c := range cs {
		clipped += c.Clipped
		rejected += c.Rejected
		if c.Rows == 0 {
			continue
		}
		switch first {
		case nil:
			first = c
			continue
		case comb:
		default:
			comb.Rows = first.Rows
			comb.Mean = append(comb.Mean[:0], first.Mean...)
			comb.Scatter = append(comb.Scatter[:0], first.Scatter...)
			first = comb
		}
		mergeMoments(float64(comb.Rows), comb.Mean, comb.Scatter, float64(c.Rows), c.Mean, c.Scatter, 0)
		comb.Rows += c.Rows
	}
	if first == nil {
		return w.merge(0, nil, nil, clipped, rejected)
	}
	return w.merge(first.Rows, first.Mean, first.Scatter, clipped, rejected)
}

// merge merges the batch moments (n, mean, scatter) into w's moments,
// forgetting the past once, counts the batch and refreshes the operator
// on schedule (see Observe); with n = 0 it only counts the bounded rows.
func (w *Whitener) merge(n int, mean, scatter []float64, clipped, rejected int64) error {
	w.clipped += clipped
	w.rejected += rejected
	if n == 0 {
		return nil
	}
	w.mom.weight = mergeMoments(w.mom.weight, w.mom.mean, w.mom.scatter, float64(n), mean, scatter, w.s.Forget)
	w.batches++
	w.rows += int64(n)
	if w.Frozen() {
		return w.Refresh()
	}
	if every := int64(w.s.refreshEvery()); every > 0 && w.batches >= max(1, w.last+min(w.last, every)) {
		w.last = w.batches
		return w.Refresh()
	}
	return nil
}

// bound copies x into a workspace, flags the rows Observe leaves out and
// pulls the others in to the bound τ (see Observe), counting the rows it
// rejects and clips in dst.
func (w *Whitener) bound(dst *WhitenContribution, x mat.Matrix, skip []bool) (*mat.Dense, []bool) {
	r, d := x.Dims()
	if !w.rows2.IsEmpty() {
		if rr, _ := w.rows2.Dims(); rr != r {
			w.rows2.Reset()
		}
	}
	if w.rows2.IsEmpty() {
		w.rows2.ReuseAs(r, d)
	}
	w.rows2.Copy(x)
	raw := w.rows2.RawMatrix()
	w.omit = growBools(w.omit, r)
	eligible := 0
	for i := range r {
		w.omit[i] = skip != nil && skip[i]
		if w.omit[i] {
			continue
		}
		if !finite.All(raw.Data[i*raw.Stride : i*raw.Stride+d]) {
			w.omit[i] = true
			dst.Rejected++
			continue
		}
		eligible++
	}
	c := w.s.clip()
	if eligible == 0 || math.IsInf(c, 1) {
		return &w.rows2, w.omit
	}
	if len(w.centre) != d {
		w.centre = make([]float64, d)
	}
	var s2 float64
	if w.mom.weight > 0 {
		copy(w.centre, w.mom.mean)
		for j := range d {
			s2 += w.mom.scatter[j*d+j]
		}
		s2 /= w.mom.weight
	} else {
		s := w.batchScale(raw, w.omit, eligible)
		s2 = s * s
	}
	tau := c * math.Sqrt(w.s.lambda()*float64(d)+s2)
	for i := range r {
		if w.omit[i] {
			continue
		}
		row := raw.Data[i*raw.Stride : i*raw.Stride+d]
		// floats.Distance scales its sum of squares, so it is +Inf only
		// if a difference overflows; the row is then set to the centre.
		dist := floats.Distance(row, w.centre, 2)
		if !(dist > tau) {
			continue
		}
		dst.Clipped++
		if math.IsInf(dist, 1) {
			copy(row, w.centre)
			continue
		}
		f := tau / dist
		for j, v := range row {
			row[j] = w.centre[j] + (v-w.centre[j])*f
		}
	}
	return &w.rows2, w.omit
}

// batchScale sets w.centre to the coordinate-wise median of the n rows of
// raw that omit does not flag and returns the median of their non-zero
// distances from it (0 if there is none): the robust centre and scale of
// a first batch.
func (w *Whitener) batchScale(raw blas64.General, omit []bool, n int) float64 {
	d := raw.Cols
	w.dist = slices.Grow(w.dist[:0], n)[:n]
	for j := range d {
		col := w.dist[:0]
		for i := range raw.Rows {
			if !omit[i] {
				col = append(col, raw.Data[i*raw.Stride+j])
			}
		}
		w.centre[j] = median(col)
	}
	dist := w.dist[:0]
	for i := range raw.Rows {
		if omit[i] {
			continue
		}
		if v := floats.Distance(raw.Data[i*raw.Stride:i*raw.Stride+d], w.centre, 2); v > 0 {
			dist = append(dist, v)
		}
	}
	if len(dist) == 0 {
		return 0
	}
	return median(dist)
}

// median sorts s and returns its median; s must not be empty.
func median(s []float64) float64 {
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

func growBools(s []bool, n int) []bool {
	if cap(s) < n {
		return make([]bool, n)
	}
	return s[:n]
}

// Refresh recomputes the operator from the current Σ. With no rows merged
// it does nothing.
func (w *Whitener) Refresh() error {
	if w.mom.weight == 0 {
		return nil
	}
	n := w.mom.dim
	w.mom.Cov(&w.cov)
	if !w.eig.Factorize(&w.cov, true) {
		return fmt.Errorf("%w after %d rows", ErrEigen, w.rows)
	}
	vals := w.eig.Values(nil)
	w.eig.VectorsTo(&w.vec)
	lambda := w.s.lambda()
	// W = U·diag(s)·Uᵀ, computed as (U·diag(s))·Uᵀ; the same for W⁻¹.
	op, inv := mat.NewDense(n, n, nil), mat.NewDense(n, n, nil)
	for k := range 2 {
		w.tmp.Copy(&w.vec)
		for j, e := range vals {
			f := math.Sqrt(lambda + max(e, 0))
			if k == 0 {
				f = 1 / f
			}
			for i := 0; i < n; i++ {
				w.tmp.Set(i, j, w.tmp.At(i, j)*f)
			}
		}
		dst := op
		if k == 1 {
			dst = inv
		}
		dst.Mul(w.tmp, w.vec.T())
	}
	if !finite.All(op.RawMatrix().Data) || !finite.All(inv.RawMatrix().Data) {
		return fmt.Errorf("%w: non-finite operator after %d rows", ErrEigen, w.rows)
	}
	// Symmetrise exactly, so that W = Wᵀ bit for bit.
	for i := 0; i < n; i++ {
		for j := i + 1; j < n; j++ {
			op.Set(j, i, op.At(i, j))
			inv.Set(j, i, inv.At(i, j))
		}
	}
	w.prevTrace = 0
	if w.refreshes > 0 {
		w.prevTrace = mat.Trace(w.op)
	}
	w.refScale = lambda*float64(n) + mat.Trace(&w.cov)
	w.op, w.inv = op, inv
	w.refreshes++
	return nil
}

// Finite reports whether the operator is finite.
func (w *Whitener) Finite() bool { return finite.All(w.op.RawMatrix().Data) }

// Whiten writes x·W into dst (each row whitened; W is symmetric). dst must
// be r×Dim for an r×Dim x, or empty, and must not alias x. It panics with
// mat.ErrShape on other shapes.
func (w *Whitener) Whiten(dst *mat.Dense, x mat.Matrix) {
	mulRows(dst, x, w.op)
}

// Unwhiten writes x·W⁻¹ into dst, undoing Whiten for display (App. C:
// multiply by (λI+Σ)^(1/2)). Shapes as for Whiten.
func (w *Whitener) Unwhiten(dst *mat.Dense, x mat.Matrix) {
	mulRows(dst, x, w.inv)
}

func mulRows(dst *mat.Dense, x mat.Matrix, op *mat.Dense) {
	r, c := x.Dims()
	if n, _ := op.Dims(); c != n {
		panic(mat.ErrShape)
	}
	reuseAs(dst, r, c)
	dst.Mul(x, op)
}

// Operator returns a read-only view of the current operator W.
func (w *Whitener) Operator() mat.Matrix { return readOnly{w.op} }

// Clone returns a deep copy of w that shares nothing with it.
func (w *Whitener) Clone() *Whitener {
	c := *w
	c.mom = w.mom.clone()
	c.op = mat.DenseCopyOf(w.op)
	c.inv = mat.DenseCopyOf(w.inv)
	c.cov, c.eig, c.vec = mat.SymDense{}, mat.EigenSym{}, mat.Dense{}
	c.rows2, c.omit, c.centre, c.dist = mat.Dense{}, nil, nil, nil
	c.own, c.comb = WhitenContribution{}, WhitenContribution{}
	c.tmp = mat.NewDense(w.mom.dim, w.mom.dim, nil)
	return &c
}

// MarshalBinary encodes the settings, moments, schedule state and
// operator of w, with float64 values bit-exact, followed by an extension
// block with the state of the bound of Observe and of Check, which
// UnmarshalBinary also does without (states written before the bound).
func (w *Whitener) MarshalBinary() ([]byte, error) {
	n := w.mom.dim
	e := state.NewEncoder(make([]byte, 0, 128+8*(3*n*n+n)))
	e.U8(stateVersion)
	e.U8(kindWhitener)
	e.U64(uint64(n))
	e.F64(w.s.Lambda)
	e.I64(int64(w.s.RefreshEvery))
	e.I64(w.s.FreezeAfter)
	e.F64(w.s.Forget)
	e.I64(w.batches)
	e.I64(w.rows)
	e.I64(w.last)
	e.I64(w.refreshes)
	w.mom.encode(e)
	e.Dense(w.op)
	e.Dense(w.inv)
	e.U8(whitenerGuard)
	e.F64(w.s.Clip)
	e.I64(w.clipped)
	e.I64(w.rejected)
	e.F64(w.refScale)
	e.F64(w.prevTrace)
	return e.Bytes(), nil
}

// whitenerGuard tags the extension block of a Whitener's state.
const whitenerGuard = 'g'

// UnmarshalBinary restores a state written by MarshalBinary into w, which
// must have the same dimension. On error w is unchanged.
func (w *Whitener) UnmarshalBinary(data []byte) error {
	d := state.NewDecoder(data)
	if v := d.U8(); v != stateVersion {
		return fmt.Errorf("%w: whitener state version %d, want %d", ErrVersion, v, stateVersion)
	}
	if k := d.U8(); k != kindWhitener {
		return fmt.Errorf("%w: not a whitener state", ErrFormat)
	}
	n := w.mom.dim
	if got := d.U64(); got != uint64(n) {
		return fmt.Errorf("%w: whitener of dimension %d, receiver has %d", ErrFormat, got, n)
	}
	var s WhitenSettings
	s.Lambda = d.F64()
	s.RefreshEvery = int(d.I64())
	s.FreezeAfter = d.I64()
	s.Forget = d.F64()
	c := &Whitener{s: s, mom: NewMoments(n), tmp: w.tmp}
	c.batches, c.rows, c.last, c.refreshes = d.I64(), d.I64(), d.I64(), d.I64()
	c.mom.decode(d)
	op, inv := make([]float64, n*n), make([]float64, n*n)
	d.F64s(op)
	d.F64s(inv)
	// Without the extension (a state from before the bound), Check
	// compares only the refreshes after the restore.
	if d.Len() > 0 {
		if d.U8() != whitenerGuard {
			d.Fail()
		}
		s.Clip = d.F64()
		c.s.Clip = s.Clip
		c.clipped, c.rejected = d.I64(), d.I64()
		c.refScale, c.prevTrace = d.F64(), d.F64()
	}
	if !d.Done() {
		return fmt.Errorf("%w: whitener state of %d bytes is truncated or too long", ErrFormat, len(data))
	}
	if err := s.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrFormat, err)
	}
	c.op, c.inv = mat.NewDense(n, n, op), mat.NewDense(n, n, inv)
	*w = *c
	return nil
}
