package sgd

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sync"

	"gonum.org/v1/gonum/mat"

	"github.com/smtd/smtd/internal/finite"
	"github.com/smtd/smtd/internal/parts"
	"github.com/smtd/smtd/internal/state"
	"github.com/smtd/smtd/online"
)

// SMTSettings configures an SMT. K, Blank and Dim are its shape and cannot
// change; the rates may be tuned live with SetSettings. A zero field means
// its documented default.
type SMTSettings struct {
	// K is the number of atoms of the dictionary. Required. P has K
	// columns, K+1 with BlankAtom.
	K int
	// Blank must match the statistics' (see BlankMode). The zero value
	// is BlankAtom.
	Blank BlankMode
	// Dim is the embedding dimension, the number of rows of P. Required.
	Dim int
	// LearningRate is η_P of Supp. C, step 1. The step is stable while
	// 2γ₀η·λ_max(V⁻¹L) < 2; with the normalisation of Stats λ_max is a
	// few units for 1-hot codes whatever the context range (2.0 to 2.5 on
	// MNIST, K = 1024). Zero means 0.1.
	LearningRate float64
	// Decay anneals the rate: η_t = η/(1 + Decay·t), t the number of
	// steps taken before this one, so that the minibatch noise dies out
	// and P settles. Zero means no decay; it must be >= 0.
	Decay float64
	// Gamma0 is γ₀ of eq. 12, the weight of the smoothness term. Zero
	// means 1; it must be >= 0.
	Gamma0 float64
	// Gamma1 is γ₁ of eq. 12, the weight of the sparsity term ‖PW‖₁,
	// W = diag(⟨α⟩), applied by shrinkage (Supp. C, step 2). Zero means
	// no shrinkage, the default: the closed-form optimum of eq. 3 is then
	// the fixed point. It must be >= 0.
	Gamma1 float64
	// DropConstant keeps every row p of P V-orthogonal to the constant
	// function, p V 1 = 0, by projecting it out after step 2. With 1-hot
	// codes each neighbour pair's α_i − α_j sums to zero, so L1 = 0: the
	// constant is the eigenvector of eigenvalue 0 of L x = λ V x. It
	// embeds every atom alike; kept, it spends a row of P on a component
	// shared by all patches. Without it the iteration converges to the
	// eigenvectors 1 ... Dim, with it to 2 ... Dim+1: the closed form
	// with spectral.Settings Drop 1. With Gamma1 > 0 the projection moves
	// the entries that step 2 set to zero. It needs 1-hot statistics
	// (diagonal V) and Dim < Size(), and cannot change live.
	DropConstant bool
}

const defaultLearningRate = 0.1

func (s SMTSettings) learningRate() float64 { return orDefault(s.LearningRate, defaultLearningRate) }

func (s SMTSettings) gamma0() float64 { return orDefault(s.Gamma0, 1) }

// Validate reports whether the settings are usable.
func (s SMTSettings) Validate() error {
	ok := func(v float64) bool { return v >= 0 && !math.IsInf(v, 1) }
	switch {
	case s.K < 1:
		return fmt.Errorf("sgd: SMT K = %d: must be >= 1", s.K)
	case !s.Blank.valid():
		return fmt.Errorf("sgd: SMT %v: want atom or skip", s.Blank)
	case s.Dim < 1 || s.Dim > s.Blank.atoms(s.K):
		return fmt.Errorf("sgd: SMT dimension %d: must be in [1, %d]", s.Dim, s.Blank.atoms(s.K))
	case !ok(s.LearningRate):
		return fmt.Errorf("sgd: SMT learning rate %v: must be > 0 (0 means %v)", s.LearningRate, defaultLearningRate)
	case !ok(s.Decay):
		return fmt.Errorf("sgd: SMT decay %v: must be >= 0", s.Decay)
	case !ok(s.Gamma0):
		return fmt.Errorf("sgd: SMT gamma0 %v: must be > 0 (0 means 1)", s.Gamma0)
	case !ok(s.Gamma1):
		return fmt.Errorf("sgd: SMT gamma1 %v: must be >= 0", s.Gamma1)
	case s.DropConstant && s.Dim >= s.Blank.atoms(s.K):
		return fmt.Errorf("sgd: SMT dimension %d with the constant dropped: must be in [1, %d]", s.Dim, s.Blank.atoms(s.K)-1)
	}
	return nil
}

// StepError reports a step that would have left P non-finite or the
// constraint matrix PVPᵀ singular. P is left as it was before the step.
type StepError struct {
	Step   int64 // the number of steps taken before the failed one
	Reason string
}

func (e *StepError) Error() string {
	return fmt.Sprintf("sgd: SMT step %d failed: %s (P unchanged)", e.Step+1, e.Reason)
}

// unseenRidge is the ridge, relative to the mean of diag V, added to a
// non-diagonal V before it is factorised.
const unseenRidge = 1e-10

// SMT is the embedding P of the sparse manifold transform learned online
// by the whitened-gradient SGD of sparse-manifold-transform, Supp. C,
// which solves (eq. 12, with the matrices of Stats)
//
//	min_P  γ₀ tr(P L Pᵀ) + γ₁ ‖P W‖₁   s.t.  P V Pᵀ = I,   W = diag(⟨α⟩),
//
// one minibatch at a time. Each step takes the minibatch's neighbour term
// L_b (the same normalisation as Stats: per column of D) and the running
// V, and does
//
//	η_t = η/(1 + Decay·t)
//	P ← P − 2γ₀η_t P L_b V⁻¹                   (step 1, whitened gradient)
//	P_ij ← sign(P_ij)·max(|P_ij| − η_tγ₁⟨α_j⟩, 0)   (step 2, shrinkage)
//	P ← (P V Pᵀ)^(−1/2) P                      (step 3, parallel orthogonalisation)
//
// Supp. C shrinks by γ₁⟨α_j⟩; the threshold here also carries the rate
// η_t, like a proximal step of η_tγ₁‖PW‖₁, so that annealing the rate
// anneals the shrinkage with it and γ₁ keeps its meaning in eq. 12.
// ⟨α_j⟩ = V_jj for binary codes. With γ₁ = 0 the iteration is a
// stochastic subspace iteration on I − 2γ₀η V⁻¹L (in the metric V), whose
// fixed points are the solutions of the generalized eigenproblem
// L x = λ V x; it converges to the span of the Dim smallest, the
// closed-form optimum (package spectral), when 2γ₀η·λ_max(V⁻¹L) < 2.
//
// P L_b is computed from the codes without forming L_b: each pair of
// neighbours with codes α_i, α_j and embeddings β_i = Pα_i, β_j = Pα_j
// adds (β_i − β_j)(α_i − α_j)ᵀ, which sums to Σ_i r_i α_iᵀ with r_i the
// sum of β_i − β_j over the neighbours of i, computed with running window
// sums in O(Dim) per patch whatever the range (whole images from the atom
// histogram, see Stats). V⁻¹ is a
// column scaling for 1-hot statistics; with MultiHot statistics V is
// formed and factorised at every step (O(n³/3): small K only). An atom
// never seen (V_jj = 0) is given the mean frequency of the seen atoms in
// V⁻¹ and PVPᵀ, so that its random initial column keeps P of full rank
// until it is seen; the constraint holds exactly in that regularised V.
//
// Step 1 bounds each atom's step with 1-hot image and sequence
// statistics: V_aa is raised to at least 2γ₀η_t·d_a, d_a ≥ (L_b)_aa the
// atom's share of the minibatch's neighbour pairs (Stats.BatchDegrees),
// so that the atom's own term moves its column at most to the mean of
// its neighbours in the minibatch (a coefficient ≤ 1; by Gershgorin
// 2γ₀η_t·λ_max(V'⁻¹L_b) ≤ 2). The whitened gradient divides by the
// running frequency V_aa, and an atom can be many times more frequent in
// one minibatch than in V (a rare atom, or one the dictionary has just
// moved); the uncapped step then throws its column past its neighbours,
// and with a slowly annealed rate nothing calls it back before the last
// step. On MNIST at K = 16384 with 128-image minibatches and Decay 0.001
// atoms were up to 64 times more frequent in their minibatch than in V
// (BENCHMARKS.md, "a bound on each atom's step"). d_a is about twice the
// atom's share of the minibatch's rows, so at η_t = 0.1 the bound binds
// from about 2.5 times its share in V and leaves the other atoms' steps
// as they were. Temporal and MultiHot statistics have no bound.
//
// The embedding of a patch is β = Pα normalised (smt-minimalistic,
// section 3); see EmbedImagesVQ.
//
// P is stored transposed, one row per atom (the embedding of the atom),
// as n×Dim. Step*, SetP, SetSettings and UnmarshalBinary modify the SMT;
// the other methods only read it and may run concurrently with each other,
// so that a Clone is a safe snapshot for queries.
type SMT struct {
	s     SMTSettings
	n     int
	pt    *mat.Dense // n×Dim: row a is column a of P
	unit  *mat.Dense // rows of pt scaled to unit norm (zero rows stay zero)
	steps int64
	// bounded counts the atom-steps whose V_aa step 1 raised (see SMT).
	bounded int64

	c     csr
	cat   []int
	seg   []segment
	gt    *mat.Dense // n×Dim workspace: (P L_b)ᵀ
	next  *mat.Dense // n×Dim workspace: the new Pᵀ
	beta  []float64  // rows×Dim workspace: β of multi-hot codes
	cnt   []float64  // per-atom histogram, zero between uses
	touch []int
	u     spvec
	tmp   spvec
	diff  []float64
	// windows are the workspaces of the goroutines of a windowed
	// gradient (gradient), one a goroutine; resid holds its rows' r_i
	// (rows×Dim) and ends each grid's Σ deg_i.
	windows []windowWork
	resid   []float64
	ends    []float64
	// cores is how many goroutines a gradient may use (SetCores).
	cores int
	v     []float64
	deg   []float64 // the atoms' shares of the minibatch's pairs (Stats.BatchDegrees)
	pv1   []float64 // Dim workspace: P V 1 (DropConstant)
	m     mat.SymDense
	eig   mat.EigenSym
	vec   mat.Dense
	half  *mat.Dense
	mm    *mat.Dense // Dim×Dim workspace
	vals  []float64
	vt    *mat.Dense // n×Dim workspace: V·Pᵀ
	vsym  mat.SymDense
	chol  mat.Cholesky

	pool *sync.Pool // *embedScratch, shared with clones (see Clone)
}

// NewSMT returns an SMT whose P has independent standard normal entries
// drawn from src (the only randomness of the SMT). The first step
// orthogonalises it. It panics if the settings are invalid.
func NewSMT(s SMTSettings, src rand.Source) *SMT {
	if err := s.Validate(); err != nil {
		panic(err)
	}
	n := s.Blank.atoms(s.K)
	m := newSMT(s)
	rng := rand.New(src)
	raw := m.pt.RawMatrix()
	for a := 0; a < n; a++ {
		for l := 0; l < s.Dim; l++ {
			raw.Data[a*raw.Stride+l] = rng.NormFloat64()
		}
	}
	m.refresh()
	return m
}

func newSMT(s SMTSettings) *SMT {
	n := s.Blank.atoms(s.K)
	m := &SMT{
		s:    s,
		n:    n,
		pt:   mat.NewDense(n, s.Dim, nil),
		unit: mat.NewDense(n, s.Dim, nil),
	}
	m.pool = &sync.Pool{New: func() any { return new(embedScratch) }}
	return m
}

// Settings returns the current settings.
func (m *SMT) Settings() SMTSettings { return m.s }

// SetSettings replaces the rates (LearningRate, Decay, Gamma0, Gamma1)
// for live tuning. It refuses another K, Blank, Dim or DropConstant.
func (m *SMT) SetSettings(s SMTSettings) error {
	if err := s.Validate(); err != nil {
		return err
	}
	if s.K != m.s.K || s.Blank != m.s.Blank || s.Dim != m.s.Dim || s.DropConstant != m.s.DropConstant {
		return fmt.Errorf("sgd: SMT K, blank, dimension and DropConstant cannot change live (%d, %v, %d, %t to %d, %v, %d, %t)",
			m.s.K, m.s.Blank, m.s.Dim, m.s.DropConstant, s.K, s.Blank, s.Dim, s.DropConstant)
	}
	m.s = s
	return nil
}

// SetCores lets each later gradient of a step run on up to n goroutines
// (n ≤ 1: the caller's only), at most one for each gridsPerPart of the
// minibatch's grids (images, or sentences), which take the grids one at a
// time as each finishes the last (parts.Share). Every r_i is computed as
// on one core and added in the same order: the step is the same bits
// whatever n and whichever goroutine computed it.
func (m *SMT) SetCores(n int) { m.cores = n }

// gridsPerPart is the fewest grids (28x28 MNIST images: about 0.2 ms of
// one core each) worth a goroutine of a gradient, against the tens of µs
// an idle core of a virtual machine can take to pick up a goroutine.
const gridsPerPart = 8

// Size returns the number of columns of P: K, or K+1 with BlankAtom (the
// blank atom is the last).
func (m *SMT) Size() int { return m.n }

// Steps returns the number of SGD steps taken.
func (m *SMT) Steps() int64 { return m.steps }

// BoundedAtomSteps returns how many times step 1 has raised an atom's
// V_aa to 2γ₀η_t·d_a (see SMT), summed over the steps taken: the
// atom-steps in which an atom was so much more frequent in its minibatch
// than in V that its uncapped step would have moved its column past the
// mean of its neighbours.
func (m *SMT) BoundedAtomSteps() int64 { return m.bounded }

// P returns a read-only Dim×Size() view of P. The view follows later
// updates; Clone the SMT for a fixed copy.
func (m *SMT) P() mat.Matrix { return mat.Transpose{Matrix: readOnly{m.pt}} }

// Embeddings returns a read-only Size()×Dim view of Pᵀ: row a is the
// embedding of atom a (before normalisation).
func (m *SMT) Embeddings() mat.Matrix { return readOnly{m.pt} }

// SetP replaces P, a Dim×Size() matrix, for example by the closed-form
// solution of package spectral (to embed with it, or to start SGD from
// it). It returns an error and leaves P unchanged if p holds NaN or Inf,
// and panics with mat.ErrShape if p has another shape.
func (m *SMT) SetP(p mat.Matrix) error {
	r, c := p.Dims()
	if r != m.s.Dim || c != m.n {
		panic(mat.ErrShape)
	}
	next := mat.NewDense(m.n, m.s.Dim, nil)
	next.Copy(p.T())
	if !finite.All(next.RawMatrix().Data) {
		return fmt.Errorf("sgd: SetP: P holds NaN or Inf")
	}
	m.pt = next
	m.refresh()
	return nil
}

// Finite reports whether every entry of P is finite.
func (m *SMT) Finite() bool { return finite.All(m.pt.RawMatrix().Data) }

// refresh recomputes the unit rows after P changed.
func (m *SMT) refresh() {
	m.unit = grownDense(m.unit, m.n, m.s.Dim)
	pr, ur := m.pt.RawMatrix(), m.unit.RawMatrix()
	for a := 0; a < m.n; a++ {
		row := pr.Data[a*pr.Stride : a*pr.Stride+m.s.Dim]
		dst := ur.Data[a*ur.Stride : a*ur.Stride+m.s.Dim]
		var ss float64
		for _, v := range row {
			ss += v * v
		}
		if ss == 0 {
			clear(dst)
			continue
		}
		inv := 1 / math.Sqrt(ss)
		for l, v := range row {
			dst[l] = v * inv
		}
	}
}

func grownDense(d *mat.Dense, r, c int) *mat.Dense {
	if d == nil {
		return mat.NewDense(r, c, nil)
	}
	if dr, dc := d.Dims(); dr != r || dc != c {
		return mat.NewDense(r, c, nil)
	}
	return d
}

// checkStats panics if st does not describe the codes of this SMT.
func (m *SMT) checkStats(st *Stats) {
	if st.s.K != m.s.K || st.s.Blank != m.s.Blank {
		panic(fmt.Sprintf("sgd: SMT of K %d, blank %v stepped with stats of K %d, blank %v",
			m.s.K, m.s.Blank, st.s.K, st.s.Blank))
	}
	if m.s.DropConstant && !st.DiagonalV() {
		panic("sgd: SMT with DropConstant stepped with MultiHot statistics")
	}
}

// StepImagesVQ takes one SGD step on a minibatch of images coded by f_vq,
// laid out as for Stats.AddImagesVQ, with the neighbours of st's Range and
// st's V. Add the minibatch to st first, so that V includes it. A
// minibatch without a counted row changes nothing.
//
// It returns a *StepError, leaving P unchanged, if the step would make P
// non-finite or PVPᵀ singular. It panics with mat.ErrShape if
// len(codes) != images·grid.Len(), and if st has another K or Blank or a
// code is out of range.
func (m *SMT) StepImagesVQ(st *Stats, codes []int, images int, grid online.PatchGrid) error {
	m.checkStats(st)
	m.seg = imageSegments(m.seg, len(codes), images, grid)
	m.c.fromVQ(codes, m.s.K, m.s.Blank)
	return m.stepGrid(st)
}

// StepImagesGQ is StepImagesVQ for f_gq codes, laid out as for
// Stats.AddImagesGQ. Multi-hot codes need MultiHot statistics.
func (m *SMT) StepImagesGQ(st *Stats, codes *online.SparseCodes, images int, grid online.PatchGrid) error {
	m.checkStats(st)
	m.seg = imageSegments(m.seg, codes.Rows, images, grid)
	m.c.fromGQ(codes, m.s.K, m.s.Blank)
	return m.stepGrid(st)
}

// StepSequencesVQ is StepImagesVQ for token sequences, laid out as for
// Stats.AddSequencesVQ.
func (m *SMT) StepSequencesVQ(st *Stats, codes []int, lengths []int) error {
	m.checkStats(st)
	m.seg = sequenceSegments(m.seg, len(codes), lengths)
	m.c.fromVQ(codes, m.s.K, m.s.Blank)
	return m.stepGrid(st)
}

func axpy(dst []float64, a float64, x []float64) {
	for i, v := range x {
		dst[i] += a * v
	}
}

func (m *SMT) startGradient() {
	m.gt = grownDense(m.gt, m.n, m.s.Dim)
	m.gt.Zero()
}

// GradientImagesVQ computes what StepImagesVQ steps with, without
// stepping: the gradient term (P L_b)ᵀ of a minibatch of images coded by
// f_vq, with neighbours within rangeD grid positions (the statistics'
// Range; 0: the whole image), written into dst (resized to K×Dim), and
// the number of pairs it sums over. ok is false when no row of the
// minibatch counts (StepImagesVQ would not step). Gradients of several
// minibatches computed with the same P add up: StepGradient then takes
// the step of their union.
func (m *SMT) GradientImagesVQ(dst *mat.Dense, codes []int, images int, grid online.PatchGrid, rangeD int) (pairs int64, ok bool) {
	m.seg = imageSegments(m.seg, len(codes), images, grid)
	m.c.fromVQ(codes, m.s.K, m.s.Blank)
	if m.c.counted == 0 {
		return 0, false
	}
	pairs = m.gradient(rangeD)
	if r, c := dst.Dims(); dst.IsEmpty() || r != m.n || c != m.s.Dim {
		dst.Reset()
		dst.ReuseAs(m.n, m.s.Dim)
	}
	dst.Copy(m.gt)
	return pairs, true
}

// StepGradient takes the SGD step of sparse-manifold-transform eq. 5
// (steps 1-3 of StepImagesVQ) from a gradient term g = (P L_b)ᵀ (K×Dim)
// summed over the given number of pairs, as GradientImagesVQ computes it.
// Add the minibatches to st first. It returns a *StepError, leaving P
// unchanged, as StepImagesVQ does, and panics with mat.ErrShape if g is
// not K×Dim.
func (m *SMT) StepGradient(st *Stats, g mat.Matrix, pairs int64) error {
	m.checkStats(st)
	if r, c := g.Dims(); r != m.n || c != m.s.Dim {
		panic(mat.ErrShape)
	}
	m.startGradient()
	m.gt.Copy(g)
	return m.finishStep(st, pairs)
}

// stepGrid computes P L_b for the grids m.seg of the codes m.c and steps.
func (m *SMT) stepGrid(st *Stats) error {
	c := &m.c
	if c.counted == 0 {
		return nil
	}
	if !c.oneHot && !st.s.MultiHot {
		panic("sgd: multi-hot codes need StatsSettings.MultiHot")
	}
	return m.finishStep(st, m.gradient(st.s.Range))
}

// gradient computes (P L_b)ᵀ into m.gt for the grids m.seg of the codes
// m.c, neighbours within range d, and returns the number of pairs.
func (m *SMT) gradient(d int) int64 {
	c := &m.c
	m.startGradient()
	dim := m.s.Dim
	pr := m.pt.RawMatrix()
	// β_i of every row: a row of Pᵀ for 1-hot codes, a sum of rows for
	// multi-hot codes.
	beta := func(i int) []float64 {
		if c.oneHot {
			a := c.first(i)
			return pr.Data[a*pr.Stride : a*pr.Stride+dim]
		}
		return m.beta[i*dim : (i+1)*dim]
	}
	if !c.oneHot {
		m.beta = grow(m.beta, c.rows()*dim)
		clear(m.beta)
		for i := 0; i < c.rows(); i++ {
			for _, a := range c.row(i) {
				axpy(m.beta[i*dim:(i+1)*dim], 1, pr.Data[a*pr.Stride:a*pr.Stride+dim])
			}
		}
	}
	m.diff = grow(m.diff, dim)
	m.cnt = grow(m.cnt, m.n)
	// The windowed grids' r_i first, in parts; then every grid's
	// contribution to m.gt in order.
	m.resid = grow(m.resid, c.rows()*dim)
	m.ends = grow(m.ends, len(m.seg))
	split := max(1, min(m.cores, len(m.seg)/gridsPerPart))
	for len(m.windows) < split {
		m.windows = append(m.windows, windowWork{})
	}
	parts.Share(len(m.seg), split, 1, func(worker, lo, hi int) {
		for s := lo; s < hi; s++ {
			if sg := m.seg[s]; !sg.whole(d) {
				m.ends[s] = m.windowResiduals(sg, d, beta, &m.windows[worker])
			}
		}
	})
	gr := m.gt.RawMatrix()
	var cols int64
	for s, sg := range m.seg {
		if sg.whole(d) {
			cols += m.gradWhole(sg, beta)
			continue
		}
		for i := sg.first; i < sg.first+sg.rows*sg.cols; i++ {
			if c.empty(i) {
				continue
			}
			r := m.resid[i*dim : (i+1)*dim]
			for _, a := range c.row(i) {
				axpy(gr.Data[a*gr.Stride:a*gr.Stride+dim], 1, r)
			}
		}
		cols += int64(m.ends[s]) / 2
	}
	return cols
}

// windowWork is the workspace of windowResiduals.
type windowWork struct {
	box  []float64 // 2·cells×Dim: window sums
	boxN []float64 // 2·cells: window counts
}

// windowResiduals computes what Σ (β_i − β_j)(α_i − α_j)ᵀ over the pairs
// of neighbours within range d of one grid adds to m.gt (transposed):
// each pair contributes (β_i − β_j)α_iᵀ + (β_j − β_i)α_jᵀ, so
// the sum is Σ_i r_i α_iᵀ with
//
//	r_i = Σ_{j∈N(i)} (β_i − β_j) = deg_i·β_i − (S_i − β_i),
//
// S_i the sum of β over the (2d+1)×(2d+1) window of i (itself included)
// and deg_i the number of other coded patches in it. The window sums are
// separable running sums, O(dim) per patch whatever d, instead of
// O(dim·(2d+1)²) for the pairs one by one. It writes r_i of each coded
// patch i to its row of m.resid and returns Σ deg_i, twice the number of
// pairs. It only reads the SMT and the codes, and writes the grid's rows
// of m.resid and w: the grids of a minibatch can be computed at once.
func (m *SMT) windowResiduals(sg segment, d int, beta func(int) []float64, w *windowWork) float64 {
	c := &m.c
	dim := m.s.Dim
	rows, cols := sg.rows, sg.cols
	cells := rows * cols
	w.box = grow(w.box, 2*cells*dim)
	w.boxN = grow(w.boxN, 2*cells)
	hs, vs := w.box[:cells*dim], w.box[cells*dim:]
	hn, vn := w.boxN[:cells], w.boxN[cells:]
	at := func(i int) []float64 { return beta(sg.first + i) }
	// Horizontal running sums over columns c−d..c+d.
	for r := 0; r < rows; r++ {
		acc := hs[r*cols*dim : r*cols*dim+dim] // reuse the first cell as the accumulator start
		clear(acc)
		var n float64
		for col := 0; col <= min(d, cols-1); col++ {
			if i := r*cols + col; !c.empty(sg.first + i) {
				axpy(acc, 1, at(i))
				n++
			}
		}
		for col := 0; col < cols; col++ {
			i := r*cols + col
			if col > 0 {
				copy(hs[i*dim:(i+1)*dim], hs[(i-1)*dim:i*dim])
				n = hn[i-1]
				if in := col + d; in < cols && !c.empty(sg.first+r*cols+in) {
					axpy(hs[i*dim:(i+1)*dim], 1, at(r*cols+in))
					n++
				}
				if out := col - d - 1; out >= 0 && !c.empty(sg.first+r*cols+out) {
					axpy(hs[i*dim:(i+1)*dim], -1, at(r*cols+out))
					n--
				}
			}
			hn[i] = n
		}
	}
	// Vertical running sums of those over rows r−d..r+d.
	for col := 0; col < cols; col++ {
		for r := 0; r < rows; r++ {
			i := r*cols + col
			v := vs[i*dim : (i+1)*dim]
			if r == 0 {
				clear(v)
				vn[i] = 0
				for r2 := 0; r2 <= min(d, rows-1); r2++ {
					j := r2*cols + col
					axpy(v, 1, hs[j*dim:(j+1)*dim])
					vn[i] += hn[j]
				}
				continue
			}
			p := (r-1)*cols + col
			copy(v, vs[p*dim:(p+1)*dim])
			vn[i] = vn[p]
			if in := r + d; in < rows {
				j := in*cols + col
				axpy(v, 1, hs[j*dim:(j+1)*dim])
				vn[i] += hn[j]
			}
			if out := r - d - 1; out >= 0 {
				j := out*cols + col
				axpy(v, -1, hs[j*dim:(j+1)*dim])
				vn[i] -= hn[j]
			}
		}
	}
	var ends float64
	for i := 0; i < cells; i++ {
		if c.empty(sg.first + i) {
			continue
		}
		deg := vn[i] - 1
		ends += deg
		bi := at(i)
		r := m.resid[(sg.first+i)*dim : (sg.first+i+1)*dim]
		for l, x := range bi {
			r[l] = (deg+1)*x - vs[i*dim+l]
		}
	}
	return ends
}

// gradWhole adds (n·H − s·sᵀ)Pᵀ for all pairs of one grid (see
// Stats.addWhole): row a gets n·Σ_{i∋a} β_i − s_a·Σ_i β_i. It returns the
// number of pairs n(n−1)/2.
func (m *SMT) gradWhole(sg segment, beta func(int) []float64) int64 {
	c := &m.c
	gr := m.gt.RawMatrix()
	dim := m.s.Dim
	n := 0
	for i := sg.first; i < sg.first+sg.rows*sg.cols; i++ {
		if !c.empty(i) {
			n++
		}
	}
	if n < 2 {
		return 0
	}
	clear(m.diff) // B = Σ_i β_i
	m.touch = m.touch[:0]
	fn := float64(n)
	for i := sg.first; i < sg.first+sg.rows*sg.cols; i++ {
		if c.empty(i) {
			continue
		}
		bi := beta(i)
		axpy(m.diff, 1, bi)
		for _, a := range c.row(i) {
			if m.cnt[a] == 0 {
				m.touch = append(m.touch, a)
			}
			m.cnt[a]++
			axpy(gr.Data[a*gr.Stride:a*gr.Stride+dim], fn, bi)
		}
	}
	for _, a := range m.touch {
		axpy(gr.Data[a*gr.Stride:a*gr.Stride+dim], -m.cnt[a], m.diff)
		m.cnt[a] = 0
	}
	return int64(n) * int64(n-1) / 2
}

// finishStep scales m.gt = (P L)ᵀ summed over cols columns of D to the
// minibatch mean and applies steps 1-3.
func (m *SMT) finishStep(st *Stats, cols int64) error {
	dim, n := m.s.Dim, m.n
	eta := m.s.learningRate() / (1 + m.s.Decay*float64(m.steps))
	step := 2 * m.s.gamma0() * eta
	if cols > 0 {
		step /= float64(cols)
	} else {
		step = 0
	}
	m.next = grownDense(m.next, n, dim)
	m.next.Copy(m.pt)
	nr, gr := m.next.RawMatrix(), m.gt.RawMatrix()

	// The frequencies ⟨α_a⟩ = V_aa, unseen atoms at the mean.
	m.v = st.DiagV(m.v)
	var sum float64
	seen := 0
	for _, v := range m.v {
		if v > 0 {
			sum += v
			seen++
		}
	}
	mean := 1.0
	if seen > 0 {
		mean = sum / float64(seen)
	}
	for a, v := range m.v {
		if !(v > 0) {
			m.v[a] = mean
		}
	}

	// Step 1: P ← P − 2γ₀η P L_b V⁻¹, as Pᵀ ← Pᵀ − 2γ₀η V⁻¹ (P L_b)ᵀ,
	// each V_aa raised to at least 2γ₀η d_a (see SMT).
	var bounded int64
	if step != 0 {
		if st.DiagonalV() {
			m.deg = st.BatchDegrees(m.deg)
			reach := 2 * m.s.gamma0() * eta
			for a := 0; a < n; a++ {
				v := m.v[a]
				if b := reach * m.deg[a]; b > v {
					v = b
					bounded++
				}
				axpy(nr.Data[a*nr.Stride:a*nr.Stride+dim], -step/v, gr.Data[a*gr.Stride:a*gr.Stride+dim])
			}
		} else {
			if err := m.factorV(st, mean); err != nil {
				return err
			}
			if err := m.chol.SolveTo(m.gt, m.gt); err != nil {
				return &StepError{Step: m.steps, Reason: "V is singular: " + err.Error()}
			}
			gr = m.gt.RawMatrix()
			for a := 0; a < n; a++ {
				axpy(nr.Data[a*nr.Stride:a*nr.Stride+dim], -step, gr.Data[a*gr.Stride:a*gr.Stride+dim])
			}
		}
	}

	// Step 2: shrink column a of P (row a of Pᵀ) by η γ₁ ⟨α_a⟩.
	if g1 := m.s.Gamma1; g1 > 0 {
		for a := 0; a < n; a++ {
			softThreshold(nr.Data[a*nr.Stride:a*nr.Stride+dim], eta*g1*m.v[a])
		}
	}

	if m.s.DropConstant {
		m.dropConstant()
	}

	// Step 3: P ← (P V Pᵀ)^(−1/2) P, as Pᵀ ← Pᵀ M^(−1/2), M = P V Pᵀ.
	if err := m.orthogonalize(st, mean); err != nil {
		return err
	}
	if !finite.All(m.next.RawMatrix().Data) {
		return &StepError{Step: m.steps, Reason: "P became non-finite"}
	}
	m.pt, m.next = m.next, m.pt
	m.steps++
	m.bounded += bounded
	m.refresh()
	return nil
}

// dropConstant projects the constant function out of each row p of the
// new P (m.next, transposed) in the metric of the regularised diagonal V
// (m.v): p ← p − (p V 1 / 1ᵀV1) 1ᵀ, so that P V 1 = 0. Step 3 keeps it,
// as it only mixes the rows.
func (m *SMT) dropConstant() {
	dim := m.s.Dim
	nr := m.next.RawMatrix()
	m.pv1 = grow(m.pv1, dim)
	clear(m.pv1)
	var total float64
	for a, v := range m.v {
		axpy(m.pv1, v, nr.Data[a*nr.Stride:a*nr.Stride+dim])
		total += v
	}
	for l := range m.pv1 {
		m.pv1[l] /= total
	}
	for a := range m.v {
		axpy(nr.Data[a*nr.Stride:a*nr.Stride+dim], -1, m.pv1)
	}
}

// factorV factorises the regularised V of MultiHot statistics into
// m.chol: unseen atoms get the mean frequency on the diagonal, and a
// ridge of unseenRidge·mean keeps the factorisation defined when atoms
// always fire together.
func (m *SMT) factorV(st *Stats, mean float64) error {
	st.VTo(&m.vsym)
	for a := 0; a < m.n; a++ {
		m.vsym.SetSym(a, a, m.v[a]+unseenRidge*mean)
	}
	if !m.chol.Factorize(&m.vsym) {
		return &StepError{Step: m.steps, Reason: "V is not positive definite"}
	}
	return nil
}

// orthogonalize replaces m.next (Pᵀ) by Pᵀ (P V Pᵀ)^(−1/2).
func (m *SMT) orthogonalize(st *Stats, mean float64) error {
	dim, n := m.s.Dim, m.n
	m.vt = grownDense(m.vt, n, dim)
	if st.DiagonalV() {
		// V Pᵀ: row a of Pᵀ scaled by V_aa (regularised).
		nr, vr := m.next.RawMatrix(), m.vt.RawMatrix()
		for a := 0; a < n; a++ {
			dst := vr.Data[a*vr.Stride : a*vr.Stride+dim]
			for l, x := range nr.Data[a*nr.Stride : a*nr.Stride+dim] {
				dst[l] = m.v[a] * x
			}
		}
	} else {
		st.VTo(&m.vsym)
		for a := 0; a < n; a++ {
			m.vsym.SetSym(a, a, m.v[a])
		}
		m.vt.Mul(&m.vsym, m.next)
	}
	if m.m.IsEmpty() {
		m.m.ReuseAsSym(dim)
	}
	m.mm = grownDense(m.mm, dim, dim)
	m.mm.Mul(m.next.T(), m.vt)
	for i := 0; i < dim; i++ {
		for j := i; j < dim; j++ {
			m.m.SetSym(i, j, 0.5*(m.mm.At(i, j)+m.mm.At(j, i)))
		}
	}
	if !m.eig.Factorize(&m.m, true) {
		return &StepError{Step: m.steps, Reason: "eigendecomposition of PVPᵀ failed"}
	}
	m.vals = grow(m.vals, dim)
	vals := m.eig.Values(m.vals)
	m.eig.VectorsTo(&m.vec)
	top := vals[len(vals)-1]
	if !(vals[0] > 1e-13*top) {
		return &StepError{Step: m.steps, Reason: fmt.Sprintf("PVPᵀ is singular (eigenvalues %.3g to %.3g)", vals[0], top)}
	}
	// M^(−1/2) = U diag(λ^(−1/2)) Uᵀ.
	m.half = grownDense(m.half, dim, dim)
	m.mm.Copy(&m.vec)
	for j, l := range vals {
		f := 1 / math.Sqrt(l)
		for i := 0; i < dim; i++ {
			m.mm.Set(i, j, m.mm.At(i, j)*f)
		}
	}
	m.half.Mul(m.mm, m.vec.T())
	m.vt.Mul(m.next, m.half)
	m.next, m.vt = m.vt, m.next
	return nil
}

// Clone returns a deep copy of the SMT that shares nothing mutable with m
// but the pool of embedding workspaces, which is safe for concurrent use.
func (m *SMT) Clone() *SMT { return m.CloneInto(nil) }

// CloneInto is Clone into the memory of dst, an earlier clone of m that
// nobody reads any more, or into new memory if dst is nil or of another
// shape (see online.KMeans.CloneInto).
func (m *SMT) CloneInto(dst *SMT) *SMT {
	if dst == nil || dst.n != m.n || dst.s.Dim != m.s.Dim {
		dst = newSMT(m.s)
	}
	*dst = SMT{s: m.s, n: m.n, pt: dst.pt, unit: dst.unit, steps: m.steps, bounded: m.bounded, pool: m.pool}
	dst.pt.Copy(m.pt)
	dst.unit.Copy(m.unit)
	return dst
}

// MarshalBinary encodes the settings, the step count, P (float64s
// bit-exact), the count of bounded atom-steps and, if set, DropConstant
// (the last two after the rest, so that states written before them still
// decode; without DropConstant the state is as before it existed).
func (m *SMT) MarshalBinary() ([]byte, error) {
	e := state.NewEncoder(make([]byte, 0, 96+8*m.n*m.s.Dim))
	e.U8(stateVersion)
	e.U8(kindSMT)
	e.U64(uint64(m.s.K))
	e.U8(byte(m.s.Blank))
	e.U64(uint64(m.s.Dim))
	e.F64(m.s.LearningRate)
	e.F64(m.s.Decay)
	e.F64(m.s.Gamma0)
	e.F64(m.s.Gamma1)
	e.I64(m.steps)
	e.F64s(m.pt.RawMatrix().Data)
	e.I64(m.bounded)
	if m.s.DropConstant { // without it, the state an older smtd reads
		e.U8(1)
	}
	return e.Bytes(), nil
}

// UnmarshalBinary restores a state written by MarshalBinary, settings
// included, into m, which must have the same K, Blank and Dim. On error m
// is unchanged.
func (m *SMT) UnmarshalBinary(data []byte) error {
	d := state.NewDecoder(data)
	if v := d.U8(); v != stateVersion {
		return fmt.Errorf("%w: SMT state version %d, want %d", ErrVersion, v, stateVersion)
	}
	if kind := d.U8(); kind != kindSMT {
		return fmt.Errorf("%w: not an SMT state", ErrFormat)
	}
	s := SMTSettings{K: int(d.U64()), Blank: BlankMode(d.U8()), Dim: int(d.U64())}
	if d.Bad() || s.K != m.s.K || s.Blank != m.s.Blank || s.Dim != m.s.Dim {
		return fmt.Errorf("%w: SMT state of K %d, blank %v, dimension %d; receiver has %d, %v, %d",
			ErrFormat, s.K, s.Blank, s.Dim, m.s.K, m.s.Blank, m.s.Dim)
	}
	s.LearningRate, s.Decay, s.Gamma0, s.Gamma1 = d.F64(), d.F64(), d.F64(), d.F64()
	steps := d.I64()
	p := make([]float64, m.n*m.s.Dim)
	d.F64s(p)
	var bounded int64
	if d.Len() > 0 { // states written before the count have none
		bounded = d.I64()
	}
	var drop byte
	if d.Len() > 0 { // nor before DropConstant
		drop = d.U8()
	}
	s.DropConstant = drop == 1
	if !d.Done() {
		return fmt.Errorf("%w: SMT state of %d bytes is truncated or too long", ErrFormat, len(data))
	}
	if err := s.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrFormat, err)
	}
	if steps < 0 || bounded < 0 || drop > 1 || !finite.All(p) {
		return fmt.Errorf("%w: SMT values out of range", ErrFormat)
	}
	m.s = s
	m.steps, m.bounded = steps, bounded
	m.pt = mat.NewDense(m.n, m.s.Dim, p)
	m.refresh()
	return nil
}

// readOnly is a mat.Matrix view that does not expose its storage, so a
// caller cannot type-assert it back to *mat.Dense and write into P.
type readOnly struct{ m *mat.Dense }

func (r readOnly) Dims() (int, int)    { return r.m.Dims() }
func (r readOnly) At(i, j int) float64 { return r.m.At(i, j) }
func (r readOnly) T() mat.Matrix       { return mat.Transpose{Matrix: r} }
