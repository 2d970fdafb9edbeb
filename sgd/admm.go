package sgd

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sync"

	"github.com/smtd/smtd/internal/finite"
	"gonum.org/v1/gonum/floats"
	"gonum.org/v1/gonum/mat"
)

// Prior is the constraint on the codes z of an ADMM learner: the problem
// it solves.
type Prior uint8

const (
	// PriorSparse is sparse dictionary learning, P₁ (eq. 2) in its
	// separable form R₁ (eq. 6): ℓ₁-penalised codes.
	PriorSparse Prior = iota
	// PriorSimplex is piecewise-linear manifold approximation, P₂
	// (eq. 4) in its separable form R₂ (eq. 7): codes on the
	// probability simplex, atoms as anchor points on the manifold.
	PriorSimplex
)

func (p Prior) String() string {
	switch p {
	case PriorSparse:
		return "sparse"
	case PriorSimplex:
		return "simplex"
	}
	return fmt.Sprintf("Prior(%d)", uint8(p))
}

// Schedule is one of the three orders of the ADMM steps of section 4.1.
// The zero value means Schedule1.
type Schedule uint8

const (
	// Schedule1 does a P-step after every gradient update of the Z-step
	// (P_i tracks z_i) and replaces the M-step by M_i ← ½WWᵀ after the
	// W-step: alternating minimisation with ISTA as the sparse coder and
	// Wᵀ as the dictionary.
	Schedule1 Schedule = 1
	// Schedule2 does a P-step after every gradient update of the Z-step,
	// then the M-step and W-step of Algorithm 1: a slightly modified
	// ISTA.
	Schedule2 Schedule = 2
	// Schedule3 is Algorithm 1 as written: the Z-step runs with P_i held
	// fixed, then one P-step, the M-step and the W-step.
	Schedule3 Schedule = 3
)

func (s Schedule) orDefault() Schedule {
	if s == 0 {
		return Schedule1
	}
	return s
}

// Defaults of ADMMSettings.
const (
	defaultADMMLambda     = 0.1
	defaultADMMOmega      = 1e-4
	defaultADMMRho        = 0.5
	defaultADMMRate       = 0.01
	defaultADMMIterations = 15
	// defaultADMMSimplexWarm is R₂'s default WarmIterations: on the half
	// moons 15 leave the mode of ‖z‖₀ at 3, 50 bring it to 2 (80% of the
	// points) and 100 change it little.
	defaultADMMSimplexWarm = 50
	defaultADMMMemory      = 10000
)

// ADMMSettings configures an ADMM learner. K and Prior are its shape and
// cannot change; the rest may be tuned live with SetSettings. A zero
// field means its documented default.
type ADMMSettings struct {
	// K is the number of atoms, the dimension of the codes. Required.
	K int
	// Prior selects R₁ (PriorSparse, the zero value) or R₂
	// (PriorSimplex).
	Prior Prior
	// Schedule orders the steps (section 4.1). Zero means Schedule1.
	Schedule Schedule
	// Lambda is λ of eq. 2, the weight of ‖z‖₁ (PriorSparse only; the
	// simplex fixes ‖z‖₁ = 1). The soft threshold of eq. 9 is λη. Zero
	// means 0.1, the paper's MNIST value.
	Lambda float64
	// Omega is ω of eqs. 2 and 4: the ridge ω‖A‖²_F of P₁, the locality
	// weight of P₂, and the ωI (ω diag z) in P_i. Zero means 1e-4.
	Omega float64
	// Rho is ρ of the augmented Lagrangian (eq. 8). With P_i tracking z_i
	// (schedules 1 and 2 on fresh samples) it cancels from the updates;
	// it shapes the quartic Z-step of Schedule3. Zero means 0.5.
	Rho float64
	// LearningRate is η_W of the W-step (eq. 11). Zero means 0.01 (the
	// paper uses 0.01 on synthetic data, 1e-4 on MNIST and patches,
	// 2e-3 on moons).
	LearningRate float64
	// Iterations is the number of proximal (projected) gradient updates
	// of each Z-step (eqs. 9 and 13). Zero means 15.
	Iterations int
	// WarmIterations is the number of accelerated proximal (projected)
	// gradient updates (FISTA, see solveCodes) for the current W that
	// initialise the codes of a fresh sample before its first Z-step,
	// the warm start of section 4.1 (Z_init: "solve the sparse coding
	// problem corresponding to W"). Zero means 50 for PriorSimplex, whose
	// 15-update Z-step alone leaves codes far from the optimum (see
	// solveCodes); otherwise none for schedules 1 and 2, whose Z-step is
	// plain ISTA on the same problem, and Iterations for Schedule3, whose
	// Z-step penalises moving away from the codes P was last set with
	// (and would pull codes started at 0 towards 0). A negative value
	// means none.
	WarmIterations int
	// Passes is the number of ADMM iterations (Z-, P-, M- and W-step of
	// Algorithm 1) run on each minibatch while it is in flight; each
	// Z-step is warm-started from the codes of the previous pass. Zero
	// means 1.
	Passes int
	// Memory is the number of samples the running sums behind the
	// implicit dictionary and R² average over: after a minibatch of B
	// rows every sum is multiplied by exp(−B/Memory), so codes computed
	// with an old W fade out. Zero means 10,000; +Inf never forgets.
	Memory float64
}

func (s ADMMSettings) lambda() float64 { return orDefault(s.Lambda, defaultADMMLambda) }

func (s ADMMSettings) omega() float64 { return orDefault(s.Omega, defaultADMMOmega) }

func (s ADMMSettings) rho() float64 { return orDefault(s.Rho, defaultADMMRho) }

func (s ADMMSettings) rate() float64 { return orDefault(s.LearningRate, defaultADMMRate) }

func (s ADMMSettings) iterations() int { return orDefault(s.Iterations, defaultADMMIterations) }

func (s ADMMSettings) warmIterations() int {
	switch {
	case s.WarmIterations < 0:
		return 0
	case s.WarmIterations == 0 && s.Prior == PriorSimplex:
		return defaultADMMSimplexWarm
	case s.WarmIterations == 0 && s.Schedule.orDefault() == Schedule3:
		return s.iterations()
	}
	return s.WarmIterations
}

func (s ADMMSettings) passes() int { return orDefault(s.Passes, 1) }

func (s ADMMSettings) memory() float64 { return orDefault(s.Memory, defaultADMMMemory) }

// Validate reports whether the settings are usable.
func (s ADMMSettings) Validate() error {
	pos := func(v float64) bool { return v >= 0 && !math.IsInf(v, 1) }
	switch {
	case s.K < 1:
		return fmt.Errorf("sgd: ADMM K = %d: must be >= 1", s.K)
	case s.Prior > PriorSimplex:
		return fmt.Errorf("sgd: ADMM %v: want sparse or simplex", s.Prior)
	case s.Schedule > Schedule3:
		return fmt.Errorf("sgd: ADMM schedule %d: want 1, 2 or 3 (0 means 1)", s.Schedule)
	case !pos(s.Lambda):
		return fmt.Errorf("sgd: ADMM lambda %v: must be > 0 (0 means %v)", s.Lambda, defaultADMMLambda)
	case !pos(s.Omega):
		return fmt.Errorf("sgd: ADMM omega %v: must be > 0 (0 means %v)", s.Omega, defaultADMMOmega)
	case !pos(s.Rho):
		return fmt.Errorf("sgd: ADMM rho %v: must be > 0 (0 means %v)", s.Rho, defaultADMMRho)
	case !pos(s.LearningRate):
		return fmt.Errorf("sgd: ADMM learning rate %v: must be > 0 (0 means %v)", s.LearningRate, defaultADMMRate)
	case s.Iterations < 0:
		return fmt.Errorf("sgd: ADMM iterations %d: must be >= 1 (0 means %d)", s.Iterations, defaultADMMIterations)
	case s.Passes < 0:
		return fmt.Errorf("sgd: ADMM passes %d: must be >= 1 (0 means 1)", s.Passes)
	case !(s.Memory >= 0):
		return fmt.Errorf("sgd: ADMM memory %v: must be > 0 (0 means %v)", s.Memory, defaultADMMMemory)
	}
	return nil
}

// ADMMError reports a minibatch that ADMM refused: non-finite input, or a
// Z-step or W-step that produced NaN or Inf (a learning rate too large
// for the data's scale, or overflow). The model is left as it was before
// the step.
type ADMMError struct {
	Step  int64  // the number of steps taken before the failed one
	Stage string // "input", "Z-step" or "W-step"
	Row   int    // the first bad row: of the minibatch, or of W for the W-step
}

func (e *ADMMError) Error() string {
	return fmt.Sprintf("sgd: ADMM step %d: %s is not finite at row %d (model unchanged)", e.Step+1, e.Stage, e.Row)
}

// ADMM learns a dictionary by kernel matching (Choudhary, Masset and Ba,
// "Self supervised dictionary learning using kernel matching", called
// dictionary-learning-kernel-matching-admm in the seeds), online, one
// minibatch at a time.
//
// # The problem
//
// Dictionary learning P₁ (eq. 2),
//
//	min_{A,Z}  1/(2T)‖X − AZ‖²_F + λ/T ‖Z‖₁,₁ + ω/2 ‖A‖²_F,
//
// has the closed-form inner optimum A = (1/T) X Zᵀ H⁻¹ with
// H = ZZᵀ/T + ωI, which turns it into kernel matching of Xᵀ X and
// Zᵀ H⁻¹ Z (Q₁, eq. 3). The Legendre transform of the trace term makes it
// separable over samples (R₁, eq. 6): with W (K×N, sample-independent)
// and P_i (K×K, one per sample),
//
//	min  (1/T) Σ_i [ −x_iᵀ Wᵀ z_i + ½ tr(Wᵀ P_i W) + λ‖z_i‖₁ ]
//	s.t. P_i = z_i z_iᵀ + ωI,
//
// and W's optimum is W = (1/T) H⁻¹ Z Xᵀ = Aᵀ: the rows of W play the
// atoms. PriorSimplex is the same for P₂/Q₂/R₂ (eqs. 4, 5, 7): z_i on the
// probability simplex, P_i = z_i z_iᵀ + ω diag(z_i), H = ZZᵀ/T + ωD,
// D = diag(Z1/T).
//
// # The steps (Algorithm 1, appendix 6.3 and 6.4)
//
// With the augmented Lagrangian of eq. 8 (multipliers M_i, penalty ρ),
// each pass over a minibatch of B samples does, for each sample i,
//
//	Z-step (eq. 9):  z ← S_λη[ z − η(2ρ(zzᵀ + ωI − P_i + M_i/ρ) z − W x_i) ]
//	P-step (eq. 10): P_i ← (M_i − ½WWᵀ)/ρ + z zᵀ + ωI
//	M-step (eq. 12): M_i ← M_i + ρ(z zᵀ + ωI − P_i)
//
// with S_t the soft threshold and η = 1/L, L = λ_max(WWᵀ), repeated
// Iterations times in the Z-step; then for the minibatch
//
//	W-step (eq. 11): W ← W − η_W (1/B) Σ_i (−z_i x_iᵀ + P_i W),
//	                 then each row of W scaled to unit norm (R₁ only).
//
// For R₂ the Z-step is the projected gradient of eq. 13 onto the simplex
// (ProjectSimplex), with the extra term ρω diag(·) of the diagonal in
// P_i, and the P-step (eq. 14) has ω diag(z) in place of ωI. R₂ keeps
// the norms of W's rows: its atoms are anchor points, not directions.
//
// # How the per-sample variables are held
//
// Every M-step follows a P-step with the same z, and substituting eq. 10
// into eq. 12 gives M_i ← ½WWᵀ for every i: the multipliers of a
// minibatch are all equal, and P_i = z̃_i z̃_iᵀ + ωI + E with z̃_i the
// code at its last P-step and E = (M − ½WWᵀ)/ρ shared. So the learner
// keeps, for the minibatch in flight only, the codes z_i and z̃_i (B×K
// each) and the shared K×K matrices M and E, never a K×K matrix per
// sample; nothing per sample survives the Step, and memory does not grow
// with the stream. With P_i tracking z_i (schedules 1 and 2) the Z-step
// gradient reduces exactly to WWᵀz − Wx: ISTA with dictionary Wᵀ.
//
// A fresh sample is initialised as in section 4.1: z from
// WarmIterations accelerated (FISTA) updates for the current W (the warm
// start), started at z = 0 (R₁) or at the vertex of the nearest atom (R₂,
// the k-means code), P_i = zzᵀ + ωI and M_i = ½WWᵀ (the value the M-step
// gives, so that E = 0). With one pass per minibatch, schedules 1 and 2
// then take identical steps; from the second pass on, M lags W by one
// W-step in Schedule2 (the first Z-update of a pass sees the P left by the
// previous pass) and the two differ. Schedule3's Z-step adds the quartic
// penalty's gradient 2ρ((zᵀz)z − (z̃ᵀz)z̃), which holds the codes near the
// z̃ of the last P-step; it needs the warm start (WarmIterations defaults
// to Iterations for it) and a smaller step than 1/L (see zStep).
//
// Measured with `smtd bench admm-synthetic` (N = 30, K = 16, T = 1500,
// two non-zero codes, k-means warm start, the same 15-update code warm
// start for every schedule, 3000 minibatches of 128): R² 0.996 and every
// true atom found (|cos| >= 0.9999) under each schedule; schedules 1 and
// 2 lead Schedule3 slightly (R² 0.9706 against 0.9694 after 100
// minibatches; 0.9910 against 0.9898 with -passes 3), as in the paper's
// Fig. 1.
//
// R₂'s locality term is not lost in the separable form: for a fixed W
// the Z-step minimises
//
//	−(W x)ᵀz + ½‖Wᵀz‖² + (ω/2) Σ_k z_k‖w_k‖²,
//
// which, with A = (1 + ω)Wᵀ and up to a constant factor, is P₂'s
// ½‖x − Az‖² + (ω/2) Σ_k z_k‖x − a_k‖² (see Dictionary). Among codes with
// the same reconstruction that term is (ω/2) Σ_k z_k‖a_k‖², which favours
// the nearest anchors but is small, so plain projected gradient moves
// slowly along those directions: on the half moons (`smtd bench
// admm-moons`, ω = 0.1) the 15 updates of the Z-step leave most codes on
// 3 to 4 atoms, and the warm start's accelerated solve (WarmIterations
// = 50) brings the mode to 2, the paper's Fig. 3.
//
// # The implicit dictionary and R²
//
// The codes of every minibatch (those its last W-step used) are added to
// running sums Σ z xᵀ, Σ z zᵀ, Σ z and the count T, each decayed by
// exp(−B/Memory) per minibatch, from which Dictionary returns
// Aᵀ = H⁻¹ (Σ z xᵀ/T), the implicit dictionary. R2 is the running
// R² = 1 − Σ‖x − Wᵀz‖² / Σ‖x − x̄‖² of the reconstructions the W-steps
// compute, decayed the same way.
//
// Step, WarmStart, SetSettings and UnmarshalBinary modify the learner;
// the other methods only read it and may run concurrently with each
// other (Encode takes its workspace from a pool), so a Clone is a safe
// snapshot for queries.
type ADMM struct {
	s   ADMMSettings
	dim int
	w   *mat.Dense // K×N, one row per atom

	// Derived from w by refresh: G = WWᵀ and its largest eigenvalue.
	g   *mat.Dense
	lip float64

	steps int64

	// Running sums of the implicit dictionary.
	n   float64
	sz  []float64  // Σ z, K
	szz *mat.Dense // Σ z zᵀ, K×K
	szx *mat.Dense // Σ z xᵀ, K×N

	// Running sums of R².
	rn, rxx, rse float64
	rx           []float64 // Σ x, N

	work admmStepWork
	pool sync.Pool // *admmCodes for Encode
}

// admmCodes holds the per-sample variables of a minibatch in flight.
type admmCodes struct {
	z, zt, wx *mat.Dense // B×K: z_i, z̃_i (z at the last P-step), W x_i
	qz        *mat.Dense // B×K: Q z_i
	y         *mat.Dense // B×K: solveCodes' extrapolated points
	momentum  []float64  // B: solveCodes' t
	grad      []float64  // K
	diag      []float64  // K: (ω/2) diag(Q)
	sorted    []float64  // K, for the simplex projection
}

func (c *admmCodes) reset(b, k int) {
	c.z = admmReuse(c.z, b, k)
	c.zt = admmReuse(c.zt, b, k)
	c.wx = admmReuse(c.wx, b, k)
	c.grad = grow(c.grad, k)
	c.sorted = grow(c.sorted, k)
}

// admmStepWork is Step's workspace.
type admmStepWork struct {
	codes admmCodes
	w     [2]*mat.Dense // K×N: W after each W-step
	g     *mat.Dense    // K×K: G of a W other than the model's
	m, e  *mat.Dense    // K×K: M and E when not implied
	q     *mat.Dense    // K×K: 2M − 2ρE
	grad  *mat.Dense    // K×N: W-step gradient
	ew    *mat.Dense    // K×N: E W
	res   *mat.Dense    // B×N: Z W − X
	sym   mat.SymDense
	power [2][]float64
	zmean []float64
	zz    *mat.Dense // K×K: ZᵀZ
	zx    *mat.Dense // K×N: ZᵀX
	sse   float64    // Σ‖Z W − X‖² of the last W-step
}

// admmReuse returns d if it is r×c, else a new r×c matrix. Contents are
// not cleared.
func admmReuse(d *mat.Dense, r, c int) *mat.Dense {
	if d != nil {
		if dr, dc := d.Dims(); dr == r && dc == c {
			return d
		}
		if raw := d.RawMatrix(); cap(raw.Data) >= r*c {
			return mat.NewDense(r, c, raw.Data[:r*c])
		}
	}
	return mat.NewDense(r, c, nil)
}

// NewADMM returns a learner of K atoms (s.K) for data of dimension dim,
// whose W has independent standard normal entries drawn from src (rows
// scaled to unit norm for PriorSparse); src is used only here. Use
// WarmStart to start from k-means atoms instead, as the paper does. It
// panics if the settings are invalid or dim < 1.
func NewADMM(s ADMMSettings, dim int, src rand.Source) *ADMM {
	if err := s.Validate(); err != nil {
		panic(err)
	}
	if dim < 1 {
		panic(fmt.Sprintf("sgd: ADMM dimension %d: must be >= 1", dim))
	}
	a := newADMM(s, dim)
	rng := rand.New(src)
	raw := a.w.RawMatrix()
	for i := range raw.Data {
		raw.Data[i] = rng.NormFloat64()
	}
	if s.Prior == PriorSparse {
		admmNormalizeRows(a.w, nil)
	}
	a.refresh()
	return a
}

func newADMM(s ADMMSettings, dim int) *ADMM {
	a := &ADMM{
		s:   s,
		dim: dim,
		w:   mat.NewDense(s.K, dim, nil),
		g:   mat.NewDense(s.K, s.K, nil),
		sz:  make([]float64, s.K),
		szz: mat.NewDense(s.K, s.K, nil),
		szx: mat.NewDense(s.K, dim, nil),
		rx:  make([]float64, dim),
	}
	a.pool.New = func() any { return new(admmCodes) }
	return a
}

// Settings returns the current settings.
func (a *ADMM) Settings() ADMMSettings { return a.s }

// SetSettings replaces every setting but K and Prior, which it refuses to
// change. It takes effect at the next Step.
func (a *ADMM) SetSettings(s ADMMSettings) error {
	if err := s.Validate(); err != nil {
		return err
	}
	if s.K != a.s.K || s.Prior != a.s.Prior {
		return fmt.Errorf("sgd: ADMM K and prior cannot change live (%d, %v to %d, %v)", a.s.K, a.s.Prior, s.K, s.Prior)
	}
	a.s = s
	return nil
}

// Dim returns the dimension N of the data.
func (a *ADMM) Dim() int { return a.dim }

// Steps returns the number of minibatches learned.
func (a *ADMM) Steps() int64 { return a.steps }

// Weights returns a read-only K×N view of W (eq. 6), one row per atom.
// The view follows later updates; Clone the learner for a fixed copy.
func (a *ADMM) Weights() mat.Matrix { return readOnly{a.w} }

// Finite reports whether W and every running sum are finite.
func (a *ADMM) Finite() bool {
	return finite.All(a.w.RawMatrix().Data) && finite.All(a.sz) && finite.All(a.szz.RawMatrix().Data) &&
		finite.All(a.szx.RawMatrix().Data) && finite.All(a.rx) && finite.All([]float64{a.n, a.rn, a.rxx, a.rse})
}

// WarmStart replaces W by atoms (K×N, one atom per row), for example the
// atoms of an online.KMeans trained on the same data (section 4.1), and
// clears the running sums (their codes belong to the old W). Rows are
// scaled to unit norm for PriorSparse and by 1/WeightScale for
// PriorSimplex (so that the atoms are the anchors the codes mix); an
// all-zero row (an atom k-means has not seeded) keeps the current row of
// W. It returns an error, leaving the learner unchanged, if atoms holds
// NaN or Inf, and panics with mat.ErrShape if atoms is not K×N.
func (a *ADMM) WarmStart(atoms mat.Matrix) error {
	r, c := atoms.Dims()
	if r != a.s.K || c != a.dim {
		panic(mat.ErrShape)
	}
	next := mat.DenseCopyOf(atoms)
	if !finite.All(next.RawMatrix().Data) {
		return fmt.Errorf("sgd: ADMM warm start: atoms hold NaN or Inf")
	}
	next.Scale(1/a.WeightScale(), next)
	for k := 0; k < r; k++ {
		if floats.Norm(next.RawRowView(k), 2) == 0 {
			next.SetRow(k, a.w.RawRowView(k))
		}
	}
	if a.s.Prior == PriorSparse {
		admmNormalizeRows(next, nil)
	}
	a.w.Copy(next)
	a.clearSums()
	a.refresh()
	return nil
}

func (a *ADMM) clearSums() {
	a.n, a.rn, a.rxx, a.rse = 0, 0, 0, 0
	clear(a.sz)
	clear(a.rx)
	a.szz.Zero()
	a.szx.Zero()
}

// refresh recomputes G = WWᵀ and L = λ_max(G) after W changed.
func (a *ADMM) refresh() {
	a.lip = admmGram(a.g, &a.work.sym, a.w, &a.work.power)
}

// admmGram sets g = wwᵀ (full K×K) and returns its largest eigenvalue,
// estimated by power iteration from the all-ones vector: deterministic,
// so that a restored learner steps bit-identically.
func admmGram(g *mat.Dense, sym *mat.SymDense, w *mat.Dense, power *[2][]float64) float64 {
	k, _ := w.Dims()
	if sym.IsEmpty() || sym.SymmetricDim() != k {
		*sym = *mat.NewSymDense(k, nil)
	}
	sym.SymOuterK(1, w)
	for i := 0; i < k; i++ {
		for j := i; j < k; j++ {
			v := sym.At(i, j)
			g.Set(i, j, v)
			g.Set(j, i, v)
		}
	}
	const iters = 30
	v, u := grow(power[0], k), grow(power[1], k)
	power[0], power[1] = v, u
	for i := range v {
		v[i] = 1 / math.Sqrt(float64(k))
	}
	var l float64
	for it := 0; it < iters; it++ {
		admmSymVec(u, g, v)
		l = floats.Dot(v, u)
		nu := floats.Norm(u, 2)
		if nu == 0 {
			break
		}
		floats.ScaleTo(v, 1/nu, u)
	}
	if !(l > 0) || math.IsInf(l, 0) {
		l = 1
	}
	return l
}

// admmSymVec sets dst = g v for a K×K g, skipping zero entries of v.
func admmSymVec(dst []float64, g *mat.Dense, v []float64) {
	clear(dst)
	for j, x := range v {
		if x != 0 {
			floats.AddScaled(dst, x, g.RawRowView(j))
		}
	}
}

// admmNormalizeRows scales every non-zero row of w to unit norm; a zero
// row takes the row of fallback if fallback is not nil.
func admmNormalizeRows(w, fallback *mat.Dense) {
	k, _ := w.Dims()
	for i := 0; i < k; i++ {
		row := w.RawRowView(i)
		nr := floats.Norm(row, 2)
		if nr == 0 {
			if fallback != nil {
				copy(row, fallback.RawRowView(i))
			}
			continue
		}
		floats.Scale(1/nr, row)
	}
}

// Encode writes the codes of the rows of x to the rows of dst (B×K): the
// Z-steps of Passes passes for fresh samples (with their P- and M-steps),
// W held fixed. These are the codes a minibatch is learned with, up to
// the W-steps between passes. Encode never changes the learner. dst is
// resized if it is empty; otherwise it panics with mat.ErrShape if dst is
// not B×K or x has not N columns. Rows of x holding NaN or Inf get
// non-finite codes.
func (a *ADMM) Encode(dst *mat.Dense, x mat.Matrix) {
	b, n := x.Dims()
	if n != a.dim {
		panic(mat.ErrShape)
	}
	if dst.IsEmpty() {
		dst.ReuseAs(b, a.s.K)
	}
	if r, c := dst.Dims(); r != b || c != a.s.K {
		panic(mat.ErrShape)
	}
	if b == 0 {
		return
	}
	c := a.pool.Get().(*admmCodes)
	defer a.pool.Put(c)
	c.reset(b, a.s.K)
	c.wx.Mul(x, a.w.T())
	a.freshCodes(c, a.g, a.lip)
	track := a.s.Schedule.orDefault() != Schedule3
	for p := 0; p < a.s.passes(); p++ {
		// W is fixed, so every M-step leaves M = ½G and every P-step
		// E = 0: each pass's Z-step sees Q = G.
		a.zStep(c, a.g, a.g, a.lip, track, a.s.iterations())
		c.zt.Copy(c.z) // P-step
	}
	dst.Copy(c.z)
}

// freshCodes initialises the codes of a fresh minibatch (section 4.1,
// "warm start"): z = 0 for R₁; for R₂ the vertex of the simplex of the
// atom nearest to x (the k-means code: argmin_k ‖w_k‖² − 2 w_kᵀx, the
// squared distance up to ‖x‖²), from which the projected gradient moves
// along the edges towards neighbouring atoms. Then WarmIterations
// updates of solveCodes for the current W, whose Gram matrix is g
// with largest eigenvalue lip; then z̃ = z, so that P = z zᵀ + ωI
// (ω diag z). It needs c.wx.
func (a *ADMM) freshCodes(c *admmCodes, g *mat.Dense, lip float64) {
	c.z.Zero()
	if a.s.Prior == PriorSimplex {
		for i := 0; i < c.z.RawMatrix().Rows; i++ {
			wx := c.wx.RawRowView(i)
			best, bestD := 0, math.Inf(1)
			for k, v := range wx {
				if d := g.At(k, k) - 2*v; d < bestD {
					best, bestD = k, d
				}
			}
			c.z.Set(i, best, 1)
		}
	}
	if n := a.s.warmIterations(); n > 0 {
		a.solveCodes(c, g, lip, n)
	}
	c.zt.Copy(c.z)
}

// solveCodes runs iters updates of an accelerated proximal gradient
// method (FISTA, Beck and Teboulle 2009, with the gradient restart of
// O'Donoghue and Candès 2015) on every row of c.z, for the coding problem
// of the current W (whose Gram matrix is g with largest eigenvalue lip):
//
//	min_z ½ zᵀ G z − (W x)ᵀ z + λ‖z‖₁                   (R₁)
//	min_z ½ zᵀ G z − (W x)ᵀ z + (ω/2) diag(G)ᵀ z,  z on the simplex   (R₂)
//
// the problem the Z-step solves when P tracks z. Each update is the
// Z-step's update taken at the extrapolated point
//
//	z' = prox(y − (G y − W x [+ (ω/2) diag G])/L)
//	t' = (1 + √(1 + 4t²))/2,  y ← z' + ((t − 1)/t')(z' − z),  z ← z'
//
// with t reset to 1 (y = z') whenever (y − z')ᵀ(z' − z) > 0, a step
// against the momentum. It needs c.wx and leaves the codes in c.z.
// On the half moons with R₂ the Z-step's own 15 updates, started at the
// nearest atom's vertex, are far from the optimum (most codes keep 3 to 4
// atoms) because the simplex's directions that leave Wᵀz unchanged are
// driven only by the small term (ω/2) diag(G); this solves them.
func (a *ADMM) solveCodes(c *admmCodes, g *mat.Dense, lip float64, iters int) {
	k := a.s.K
	rows := c.z.RawMatrix().Rows
	c.y = admmReuse(c.y, rows, k)
	c.y.Copy(c.z)
	c.qz = admmReuse(c.qz, rows, k)
	c.diag = grow(c.diag, k)
	if a.s.Prior == PriorSimplex {
		for j := range c.diag {
			c.diag[j] = 0.5 * a.s.omega() * g.At(j, j)
		}
	} else {
		clear(c.diag)
	}
	c.momentum = grow(c.momentum, rows)
	for i := range c.momentum {
		c.momentum[i] = 1
	}
	prev := c.grad
	for it := 0; it < iters; it++ {
		c.qz.Mul(c.y, g) // g is symmetric: row i is (G y_i)ᵀ
		for i := 0; i < rows; i++ {
			z, y, gy, wx := c.z.RawRowView(i), c.y.RawRowView(i), c.qz.RawRowView(i), c.wx.RawRowView(i)
			copy(prev, z)
			for j := range z {
				z[j] = y[j] - (gy[j]-wx[j]+c.diag[j])/lip
			}
			a.prox(z, 1/lip, c.sorted)
			t := c.momentum[i]
			against := 0.0
			for j := range z {
				against += (y[j] - z[j]) * (z[j] - prev[j])
			}
			if against > 0 {
				t = 1
			}
			next := (1 + math.Sqrt(1+4*t*t)) / 2
			beta := (t - 1) / next
			for j := range y {
				y[j] = z[j] + beta*(z[j]-prev[j])
			}
			c.momentum[i] = next
		}
	}
}

// prox applies the proximal operator of the codes' prior to z in place,
// for a gradient step of size eta: the soft threshold S_λη (R₁, eq. 9)
// or the projection onto the simplex P_s (R₂, eq. 13).
func (a *ADMM) prox(z []float64, eta float64, sorted []float64) {
	if a.s.Prior == PriorSimplex {
		admmProjectSimplex(z, z, sorted)
		return
	}
	softThreshold(z, a.s.lambda()*eta)
}

// softThreshold applies S_t(x) = sign(x)·max(|x| − t, 0) to every entry
// of x in place.
func softThreshold(x []float64, t float64) {
	for j, v := range x {
		switch {
		case v > t:
			x[j] = v - t
		case v < -t:
			x[j] = v + t
		default:
			x[j] = 0
		}
	}
}

// zStep runs iters updates of the Z-step on every row of c.z, with
// c.wx = X Wᵀ. The first update sees P_i = z̃ z̃ᵀ + ωI + E as the last
// P-step left it, with z = z̃, and takes the general gradient below with
// Q = first = 2M − 2ρE. If P tracks z (a P-step after every update:
// schedules 1 and 2) the later updates see P_i from eq. 10 with the
// current z, M and W, the quartic terms of eqs. 9 and 13 cancel and the
// gradient is the ISTA gradient
//
//	∇ = G z − W x                          (R₁)
//	∇ = G z − W x + (ω/2) diag(G)          (R₂)
//
// with G = rest = WWᵀ, whatever M. (Q = G too unless M lags W: from the
// second pass of Schedule2 on.) Otherwise (Schedule3) P_i is held fixed,
// every update uses Q = first = rest, and
//
//	∇ = 2ρ((zᵀz) z − (z̃ᵀz) z̃) + Q z − W x                          (R₁)
//	∇ = 2ρ((zᵀz) z − (z̃ᵀz) z̃ + ω(z − z̃)∘z) + Q z − W x
//	    + ρω(z∘z − z̃∘z̃ + ω(z − z̃)) + (ω/2) diag(Q)                 (R₂)
//
// The update is z ← S_λη(z − η∇) (R₁) or P_s(z − η∇) (R₂). The step is
// η = 1/L with L = lip = λ_max(G) when P tracks z (eq. 9). The quartic
// terms make the untracked gradient steeper than that bound: their
// Jacobian 2ρ(‖z‖²I + 2zzᵀ − z̃z̃ᵀ) has norm up to 2ρ(3‖z‖² + ‖z̃‖²), far
// above λ_max(G) when codes are large, and η = 1/λ_max(G) then diverges
// within a few updates (section 6.3 warns of this). So Schedule3 takes
// η = 1/(L + 2ρ(3‖z‖² + ‖z̃‖²) [+ ρω(8 + ω) for R₂]) at each update, a
// local Lipschitz bound. It returns the first row whose codes are not
// finite, or −1.
func (a *ADMM) zStep(c *admmCodes, first, rest *mat.Dense, lip float64, track bool, iters int) int {
	k := a.s.K
	rho, om := a.s.rho(), a.s.omega()
	simplex := a.s.Prior == PriorSimplex
	grad := c.grad
	c.diag = grow(c.diag, k)
	rows := c.z.RawMatrix().Rows
	c.qz = admmReuse(c.qz, rows, k)
	for it := 0; it < iters; it++ {
		q := rest
		if it == 0 {
			q = first
		}
		if it <= 1 {
			for j := range c.diag {
				c.diag[j] = 0.5 * om * q.At(j, j)
			}
		}
		// Q z for every row: one matrix product while the codes are
		// dense, sums over the non-zero codes once they are sparse.
		if admmDenseCodes(c.z) {
			c.qz.Mul(c.z, q) // q is symmetric: row i is (Q z_i)ᵀ
		} else {
			for i := 0; i < rows; i++ {
				admmSymVec(c.qz.RawRowView(i), q, c.z.RawRowView(i))
			}
		}
		for i := 0; i < rows; i++ {
			z, zt, wx := c.z.RawRowView(i), c.zt.RawRowView(i), c.wx.RawRowView(i)
			floats.SubTo(grad, c.qz.RawRowView(i), wx)
			if simplex {
				floats.Add(grad, c.diag)
			}
			l := lip
			if !track {
				zz, ztz := floats.Dot(z, z), floats.Dot(zt, z)
				floats.AddScaled(grad, 2*rho*zz, z)
				floats.AddScaled(grad, -2*rho*ztz, zt)
				l += 2 * rho * (3*zz + floats.Dot(zt, zt))
				if simplex {
					for j := range grad {
						d := z[j] - zt[j]
						grad[j] += 2*rho*om*d*z[j] + rho*om*(z[j]*z[j]-zt[j]*zt[j]+om*d)
					}
					l += rho * om * (8 + om)
				}
			}
			eta := 1 / l
			floats.AddScaled(z, -eta, grad)
			a.prox(z, eta, c.sorted)
		}
	}
	for i := 0; i < rows; i++ {
		if !finite.All(c.z.RawRowView(i)) {
			return i
		}
	}
	return -1
}

// admmDenseCodes reports whether more than a quarter of the codes are
// non-zero, when dense matrix products beat sums over the non-zeros.
func admmDenseCodes(z *mat.Dense) bool {
	raw := z.RawMatrix()
	nnz := 0
	for i := 0; i < raw.Rows; i++ {
		for _, v := range raw.Data[i*raw.Stride : i*raw.Stride+raw.Cols] {
			if v != 0 {
				nnz++
			}
		}
	}
	return 4*nnz > raw.Rows*raw.Cols
}

// Step learns one minibatch, one sample per row of x: Passes ADMM
// iterations (Z-, P-, M- and W-step in the order of the Schedule) on its
// fresh per-sample variables, which are then dropped; the final codes
// enter the running sums of the implicit dictionary and R². An empty x
// changes nothing. It returns an *ADMMError, leaving the learner
// unchanged, if x or a step is not finite, and panics with mat.ErrShape if
// x has not N columns.
func (a *ADMM) Step(x *mat.Dense) error {
	b, n := x.Dims()
	if n != a.dim {
		panic(mat.ErrShape)
	}
	if b == 0 {
		return nil
	}
	for i := 0; i < b; i++ {
		if !finite.All(x.RawRowView(i)) {
			return &ADMMError{Step: a.steps, Stage: "input", Row: i}
		}
	}
	k := a.s.K
	ws := &a.work
	c := &ws.codes
	c.reset(b, k)
	sched := a.s.Schedule.orDefault()
	rho, om := a.s.rho(), a.s.omega()
	passes := a.s.passes()

	// M = ½G of the current W (mHalfG) or ws.m; E = 0 (eZero) or ws.e.
	mHalfG, eZero := true, true
	cur, g, lip := a.w, a.g, a.lip
	for p := 0; p < passes; p++ {
		if p > 0 {
			ws.g = admmReuse(ws.g, k, k)
			g = ws.g
			lip = admmGram(g, &ws.sym, cur, &ws.power)
		}
		c.wx.Mul(x, cur.T())
		if p == 0 {
			a.freshCodes(c, g, lip)
		}

		// Z-step: its first update sees Q = 2M − 2ρE of the last P-step
		// (G unless M lags W); later ones G if P tracks z (schedules 1
		// and 2), Q again if P is held (schedule 3).
		tracked := sched != Schedule3
		q := g
		if !(mHalfG && eZero) {
			ws.q = admmReuse(ws.q, k, k)
			q = ws.q
			if mHalfG {
				q.Copy(g)
			} else {
				q.Scale(2, ws.m)
			}
			if !eZero {
				admmAddScaled(q, -2*rho, ws.e)
			}
		}
		rest := g
		if !tracked {
			rest = q
		}
		if row := a.zStep(c, q, rest, lip, tracked, a.s.iterations()); row >= 0 {
			return &ADMMError{Step: a.steps, Stage: "Z-step", Row: row}
		}

		// P-step (eq. 10): z̃ = z, E = (M − ½G)/ρ.
		c.zt.Copy(c.z)
		if mHalfG {
			eZero = true
		} else {
			ws.e = admmReuse(ws.e, k, k)
			ws.e.Copy(ws.m)
			admmAddScaled(ws.e, -0.5, g)
			ws.e.Scale(1/rho, ws.e)
			eZero = false
		}

		// M-step (eq. 12): M ← M + ρ(zzᵀ + ωI − P) = M − ρE. Schedule 1
		// replaces it by M ← ½WWᵀ after the W-step. After the last pass
		// the multipliers are dropped.
		last := p == passes-1
		if sched != Schedule1 && !last {
			if !eZero {
				admmAddScaled(ws.m, -rho, ws.e)
			} else if mHalfG {
				// M = ½G of the W about to change: make it explicit.
				ws.m = admmReuse(ws.m, k, k)
				ws.m.Scale(0.5, g)
				mHalfG = false
			}
		}

		// W-step (eq. 11) into the buffer that is not cur.
		for i := range ws.w {
			ws.w[i] = admmReuse(ws.w[i], k, a.dim)
		}
		next := ws.w[0]
		if next == cur {
			next = ws.w[1]
		}
		if row := a.wStep(next, cur, x, eZero, om, last); row >= 0 {
			return &ADMMError{Step: a.steps, Stage: "W-step", Row: row}
		}
		cur = next
		if sched == Schedule1 {
			mHalfG = true // M ← ½WWᵀ of the new W
		}
	}

	// Commit: the new W, then the sums with the codes of the last pass.
	for i, buf := range ws.w {
		if buf == cur {
			ws.w[i] = a.w
		}
	}
	a.w = cur
	a.refresh()
	a.addSums(x, c.z)
	a.steps++
	return nil
}

// admmAddScaled sets dst += f·m for matrices of equal shape.
func admmAddScaled(dst *mat.Dense, f float64, m *mat.Dense) {
	r, _ := dst.Dims()
	for i := 0; i < r; i++ {
		floats.AddScaled(dst.RawRowView(i), f, m.RawRowView(i))
	}
}

// wStep sets next = cur − η_W ∇, with the gradient of eq. 11 averaged
// over the minibatch, P_i = z_i z_iᵀ + ωI + E (R₁) or
// z_i z_iᵀ + ω diag(z_i) + E (R₂):
//
//	∇ = (1/B) Zᵀ(Z W − X) + ωW + E W                 (R₁)
//	∇ = (1/B) Zᵀ(Z W − X) + ω diag(z̄) W + E W        (R₂)
//
// then scales the rows of next to unit norm (R₁). If last, the squared
// errors of the reconstructions c·Z W (c = WeightScale) enter the running
// R² sums' workspace. It returns the first
// non-finite row of next, or −1.
func (a *ADMM) wStep(next, cur, x *mat.Dense, eZero bool, om float64, last bool) int {
	ws := &a.work
	c := &ws.codes
	b, n := x.Dims()
	k := a.s.K
	ws.res = admmReuse(ws.res, b, n)
	ws.grad = admmReuse(ws.grad, k, n)
	ws.grad.Zero()
	ws.zmean = grow(ws.zmean, k)
	clear(ws.zmean)
	inv := 1 / float64(b)
	dense := admmDenseCodes(c.z)
	if dense {
		ws.res.Mul(c.z, cur)
		ws.res.Sub(ws.res, x)
	}
	var sse float64
	scale := a.WeightScale()
	for i := 0; i < b; i++ {
		z, r := c.z.RawRowView(i), ws.res.RawRowView(i)
		if !dense {
			copy(r, x.RawRowView(i))
			floats.Scale(-1, r)
			for j, v := range z {
				if v != 0 {
					floats.AddScaled(r, v, cur.RawRowView(j))
				}
			}
		}
		if scale == 1 {
			sse += floats.Dot(r, r)
		} else {
			// x̂ − x = c·Wᵀz − x = c·r + (c − 1)·x.
			for j, v := range x.RawRowView(i) {
				e := scale*r[j] + (scale-1)*v
				sse += e * e
			}
		}
		for j, v := range z {
			if v != 0 {
				if !dense {
					floats.AddScaled(ws.grad.RawRowView(j), v*inv, r)
				}
				ws.zmean[j] += v * inv
			}
		}
	}
	if dense {
		ws.grad.Mul(c.z.T(), ws.res)
		ws.grad.Scale(inv, ws.grad)
	}
	if last {
		ws.sse = sse
	}
	for j := 0; j < k; j++ {
		f := om
		if a.s.Prior == PriorSimplex {
			f = om * ws.zmean[j]
		}
		if f != 0 {
			floats.AddScaled(ws.grad.RawRowView(j), f, cur.RawRowView(j))
		}
	}
	if !eZero {
		ws.ew = admmReuse(ws.ew, k, n)
		ws.ew.Mul(ws.e, cur)
		admmAddScaled(ws.grad, 1, ws.ew)
	}
	next.Copy(cur)
	admmAddScaled(next, -a.s.rate(), ws.grad)
	if a.s.Prior == PriorSparse {
		admmNormalizeRows(next, cur)
	}
	for j := 0; j < k; j++ {
		if !finite.All(next.RawRowView(j)) {
			return j
		}
	}
	return -1
}

// addSums decays the running sums by exp(−B/Memory) and adds the
// minibatch x with its codes z, and the R² terms of the last W-step.
func (a *ADMM) addSums(x, z *mat.Dense) {
	b, _ := x.Dims()
	f := math.Exp(-float64(b) / a.s.memory())
	a.n = f*a.n + float64(b)
	floats.Scale(f, a.sz)
	a.szz.Scale(f, a.szz)
	a.szx.Scale(f, a.szx)
	a.rn = f*a.rn + float64(b)
	a.rxx *= f
	a.rse = f*a.rse + a.work.sse
	floats.Scale(f, a.rx)
	dense := admmDenseCodes(z)
	if dense {
		ws := &a.work
		ws.zz = admmReuse(ws.zz, a.s.K, a.s.K)
		ws.zz.Mul(z.T(), z)
		a.szz.Add(a.szz, ws.zz)
		ws.zx = admmReuse(ws.zx, a.s.K, a.dim)
		ws.zx.Mul(z.T(), x)
		a.szx.Add(a.szx, ws.zx)
	}
	for i := 0; i < b; i++ {
		zi, xi := z.RawRowView(i), x.RawRowView(i)
		floats.Add(a.sz, zi)
		if !dense {
			for j, v := range zi {
				if v != 0 {
					floats.AddScaled(a.szz.RawRowView(j), v, zi)
					floats.AddScaled(a.szx.RawRowView(j), v, xi)
				}
			}
		}
		floats.Add(a.rx, xi)
		a.rxx += floats.Dot(xi, xi)
	}
}

// R2 returns the running coefficient of determination of the
// reconstructions x̂ = c·Wᵀz (c = WeightScale) made by the W-steps,
//
//	R² = 1 − Σ‖x − x̂‖² / Σ‖x − x̄‖²,
//
// over about the last Memory samples (exponentially weighted, x̄ their
// weighted mean). It is NaN before the first step.
func (a *ADMM) R2() float64 {
	if a.rn == 0 {
		return math.NaN()
	}
	sst := a.rxx - floats.Dot(a.rx, a.rx)/a.rn
	if !(sst > 0) {
		return math.NaN()
	}
	return 1 - a.rse/sst
}

// Samples returns the weight T of the running sums: the number of samples
// learned, discounted by Memory.
func (a *ADMM) Samples() float64 { return a.n }

// WeightScale returns the factor c by which W's rows reconstruct the
// data, x̂ = c·Wᵀz: 1 for R₁, whose optimal W is Aᵀ, and 1 + ω for R₂
// (see Dictionary).
func (a *ADMM) WeightScale() float64 {
	if a.s.Prior == PriorSimplex {
		return 1 + a.s.omega()
	}
	return 1
}

// Dictionary returns the implicit dictionary of section 2.1 as a new K×N
// matrix, one atom per row (Aᵀ, the orientation of W and of WarmStart):
//
//	Aᵀ = H⁻¹ (1/T) Σ z xᵀ,           H = (1/T) Σ z zᵀ + ωI            (R₁)
//	Aᵀ = (1 + ω) H⁻¹ (1/T) Σ z xᵀ,   H = (1/T) Σ z zᵀ + ω diag(Σz/T)    (R₂)
//
// from the running sums: the optimal A of P₁ and P₂ for the codes, so
// Z Aᵀ reconstructs X. For R₂ the paper writes A = (1/T) X Zᵀ H⁻¹ as for
// R₁, but setting P₂'s gradient in A to zero gives
//
//	A (Z Zᵀ + 2ω' diag(Z1)) = (1 + 2ω') X Zᵀ
//
// for the locality weight ω' of eq. 4; Q₂'s H = ZZᵀ/T + ω diag(Z1/T)
// (eq. 5) is P₂ with ω' = ω/2, hence the factor 1 + ω. It is also the
// one by which the optimal W = H⁻¹ Z Xᵀ/T of R₂ falls short of Aᵀ; with
// it, the Z-step's problem for a fixed W is exactly P₂'s for A = (1+ω)Wᵀ,
// locality term included. On the half moons (ω = 0.1) R² is 0.9985
// with it and was 0.9900 without (`smtd bench admm-moons`). An atom no code of R₂ has
// used gets a zero row. Before the first step it returns a copy of W
// (times WeightScale). Cost O(K³ + K²N).
func (a *ADMM) Dictionary() *mat.Dense {
	k := a.s.K
	if a.n == 0 {
		out := mat.DenseCopyOf(a.w)
		out.Scale(a.WeightScale(), out)
		return out
	}
	h := mat.NewSymDense(k, nil)
	inv := 1 / a.n
	om := a.s.omega()
	for i := 0; i < k; i++ {
		row := a.szz.RawRowView(i)
		for j := i; j < k; j++ {
			h.SetSym(i, j, inv*row[j])
		}
		d := inv * row[i]
		if a.s.Prior == PriorSimplex {
			d += om * inv * a.sz[i]
		} else {
			d += om
		}
		if d == 0 {
			d = 1 // an unused atom: zero row and column, zero right side
		}
		h.SetSym(i, i, d)
	}
	rhs := mat.NewDense(k, a.dim, nil)
	rhs.Scale(inv*a.WeightScale(), a.szx)
	var ch mat.Cholesky
	out := mat.NewDense(k, a.dim, nil)
	if ch.Factorize(h) {
		if err := ch.SolveTo(out, rhs); err == nil {
			return out
		}
	}
	// H is positive definite in exact arithmetic; fall back to a
	// least-squares solve if rounding says otherwise.
	if err := out.Solve(h, rhs); err != nil {
		out.Scale(a.WeightScale(), a.w)
	}
	return out
}
