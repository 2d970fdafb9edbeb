package hebbian

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sync"

	"github.com/smtd/smtd/internal/finite"
	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas64"
	"gonum.org/v1/gonum/lapack/lapack64"
	"gonum.org/v1/gonum/mat"
)

// Settings configures a Network. Neurons, Dim and Kernel fix its shape
// and cannot change; the rest may be tuned live with SetSettings. A zero
// field means its documented default. The defaults are the half-moons
// rates of appendix A.6 (before annealing) and λ of section 2.
type Settings struct {
	// Neurons is n, the number of output neurons (rows of W). Required.
	Neurons int
	// Dim is the input dimension (columns of W). Required.
	Dim int
	// Kernel is the input similarity f. Required. With a homogeneous
	// kernel and no Mixing the regulatory terms q stay 1 and EtaQ is not
	// used (A.3).
	Kernel Kernel
	// Mixing makes the regulatory terms a full n×n matrix Q instead of
	// the paper's diagonal q: neuron i receives Σ_j Q_ij f(w_j, x) (see
	// Network). It is an extension of this package; false is the
	// network of the paper. It cannot change live.
	Mixing bool

	// Lambda is λ of eq. 8, the ridge (λ/2)‖y‖² on the responses that
	// keeps L + λI positive definite. Zero means 0.001 (the paper's).
	Lambda float64
	// EtaW is η_w of eq. 10, the rate of the rescaled gradient descent
	// on W. Zero means 0.01.
	EtaW float64
	// EtaQ is η_q of eq. 10, the rate of gradient descent on q. Zero
	// means 0.01.
	EtaQ float64
	// EtaL is η_l of eq. 10, the rate of gradient ascent on L, in
	// (0, 2]: L moves a fraction η_l/2 of the way to the response
	// correlation ⟨yyᵀ⟩ per step. It should be much larger than EtaW
	// and EtaQ (two time scales, section 3). Zero means 0.1.
	EtaL float64

	// AnnealEvery anneals the three rates in steps: after every
	// AnnealEvery learning steps (up to MaxAnneals times) they are
	// multiplied by AnnealFactor,
	//
	//	η(t) = η·AnnealFactor^min(⌊t/AnnealEvery⌋, MaxAnneals),
	//
	// t the number of steps taken. A.6 anneals once, by 10, after 10,000
	// steps; A.7 after 10,000. Zero means no annealing.
	AnnealEvery int64
	// AnnealFactor is the factor in (0, 1] of each anneal. Zero means
	// 0.1.
	AnnealFactor float64
	// MaxAnneals bounds the number of anneals, so that a network
	// learning from an endless stream keeps a usable rate. Zero means 1;
	// a negative value means no bound.
	MaxAnneals int

	// MaxLateral is the divergence threshold on the lateral weights: a
	// step that would make some |L_ij| larger is refused with a
	// *StepError. Zero means 1e8.
	MaxLateral float64
	// InitScale is the standard deviation of the initial W_ia ~ N(0, s²)
	// drawn by New (the paper uses 1). Zero means 1.
	InitScale float64
}

const (
	defaultLambda       = 0.001
	defaultEtaW         = 0.01
	defaultEtaQ         = 0.01
	defaultEtaL         = 0.1
	defaultAnnealFactor = 0.1
	defaultMaxLateral   = 1e8
)

func orDefault(v, d float64) float64 {
	if v == 0 {
		return d
	}
	return v
}

func (s Settings) lambda() float64       { return orDefault(s.Lambda, defaultLambda) }
func (s Settings) etaW() float64         { return orDefault(s.EtaW, defaultEtaW) }
func (s Settings) etaQ() float64         { return orDefault(s.EtaQ, defaultEtaQ) }
func (s Settings) etaL() float64         { return orDefault(s.EtaL, defaultEtaL) }
func (s Settings) annealFactor() float64 { return orDefault(s.AnnealFactor, defaultAnnealFactor) }
func (s Settings) maxLateral() float64   { return orDefault(s.MaxLateral, defaultMaxLateral) }
func (s Settings) initScale() float64    { return orDefault(s.InitScale, 1) }

// anneal returns the factor the rates are multiplied by at step t.
func (s Settings) anneal(t int64) float64 {
	if s.AnnealEvery <= 0 {
		return 1
	}
	k := t / s.AnnealEvery
	switch {
	case s.MaxAnneals == 0:
		k = min(k, 1)
	case s.MaxAnneals > 0:
		k = min(k, int64(s.MaxAnneals))
	}
	return math.Pow(s.annealFactor(), float64(k))
}

// Rates returns the learning rates η_w, η_q, η_l in force at step t
// (after t steps), annealing included; η_q is 0 for a homogeneous kernel
// without Mixing.
func (s Settings) Rates(t int64) (etaW, etaQ, etaL float64) {
	a := s.anneal(t)
	etaW, etaL = a*s.etaW(), a*s.etaL()
	if s.Mixing || (s.Kernel != nil && !s.Kernel.Homogeneous()) {
		etaQ = a * s.etaQ()
	}
	return etaW, etaQ, etaL
}

func positiveOrZero(v float64) bool { return v >= 0 && !math.IsInf(v, 1) }

// Validate reports whether the settings are usable.
func (s Settings) Validate() error {
	switch {
	case s.Neurons < 1:
		return fmt.Errorf("hebbian: %d neurons: must be >= 1", s.Neurons)
	case s.Dim < 1:
		return fmt.Errorf("hebbian: input dimension %d: must be >= 1", s.Dim)
	case s.Kernel == nil:
		return errors.New("hebbian: no kernel")
	case !positiveOrZero(s.Lambda):
		return fmt.Errorf("hebbian: λ = %v: must be > 0 (0 means %v)", s.Lambda, defaultLambda)
	case !positiveOrZero(s.EtaW):
		return fmt.Errorf("hebbian: η_w = %v: must be > 0 (0 means %v)", s.EtaW, defaultEtaW)
	case !positiveOrZero(s.EtaQ):
		return fmt.Errorf("hebbian: η_q = %v: must be > 0 (0 means %v)", s.EtaQ, defaultEtaQ)
	case !(s.EtaL >= 0 && s.EtaL <= 2):
		return fmt.Errorf("hebbian: η_l = %v: must be in (0, 2] (0 means %v)", s.EtaL, defaultEtaL)
	case s.AnnealEvery < 0:
		return fmt.Errorf("hebbian: anneal every %d steps: must be >= 0", s.AnnealEvery)
	case !(s.AnnealFactor >= 0 && s.AnnealFactor <= 1):
		return fmt.Errorf("hebbian: anneal factor %v: must be in (0, 1] (0 means %v)", s.AnnealFactor, defaultAnnealFactor)
	case !positiveOrZero(s.MaxLateral):
		return fmt.Errorf("hebbian: max lateral weight %v: must be > 0 (0 means %v)", s.MaxLateral, defaultMaxLateral)
	case !positiveOrZero(s.InitScale):
		return fmt.Errorf("hebbian: initial weight scale %v: must be > 0 (0 means 1)", s.InitScale)
	}
	if err := s.Kernel.Validate(); err != nil {
		return err
	}
	return nil
}

// ErrDiverged is wrapped by every *StepError.
var ErrDiverged = errors.New("hebbian: diverged")

// ErrNonFinite is returned (wrapped, with the row) by Step for an input
// holding NaN or ±Inf. Such a minibatch is bad data, not a divergence.
var ErrNonFinite = errors.New("hebbian: non-finite input")

// StepError reports a learning step that was refused because it would
// have made the network diverge: non-finite responses or parameters, a
// lateral weight beyond Settings.MaxLateral, or L + λI no longer
// positive definite. The network is left as it was before the step, so
// the caller may skip the minibatch, lower the rates or restore a
// checkpoint. errors.Is(err, ErrDiverged) holds.
type StepError struct {
	Step   int64 // the number of steps taken before the refused one
	Reason string
}

func (e *StepError) Error() string {
	return fmt.Sprintf("hebbian: step %d refused: %s (network unchanged)", e.Step+1, e.Reason)
}

// Unwrap returns ErrDiverged.
func (e *StepError) Unwrap() error { return ErrDiverged }

// Network is the kernel similarity matching network of section 3: n
// neurons with feedforward weights W (n×M, Hebbian), regulatory terms q
// and lateral weights L (n×n, anti-Hebbian). For an input x the
// response is the minimiser of the per-sample energy (eq. 8),
//
//	y = (L + λI)⁻¹ (q ∘ f(W, x))                      (eq. 12)
//
// computed for a whole minibatch with a Cholesky factorisation of
// L + λI that is refreshed each time L changes (no explicit inverse).
// Learning (Step) is stochastic gradient descent-ascent on the minibatch
// energy e = (1/B) Σ_b e(y_b, x_b; W, q, L) at these responses,
//
//	w_i ← w_i − (η_w/q_i²) ∂e/∂w_i                   (eqs. 10, 13)
//	    = w_i + η_w [ (1/(q_i B)) Σ_b y_bi ∂f(w_i, x_b)/∂w_i − ½ ∂f(w_i, w_i)/∂w_i ]
//	q_i ← q_i − η_q ∂e/∂q_i                           (eqs. 10, 14)
//	    = q_i + η_q [ (1/B) Σ_b y_bi f(w_i, x_b) − q_i f(w_i, w_i) ]
//	L   ← L + η_l ∂e/∂L = L + (η_l/2) (YᵀY/B − L)      (eqs. 10, 15)
//
// all three from the same responses and the parameters before the step
// (the code of Fig. 7 divides by the updated q²; the difference is of
// order η_q), with the rates of Settings.Rates. With a homogeneous kernel q stays 1
// (A.3). A step that would diverge is refused with a *StepError and
// changes nothing.
//
// # Mixing
//
// Each neuron's term of the bound of eq. 3 replaces the kernel matrix by
// a rank-1 Nyström approximation with landmark w_i (A.1), which is loose
// for a kernel like the Gaussian: the responses match the kernel less
// well than Nyström with the same landmarks, and stop improving beyond
// about 16 neurons (section 4.1, Fig. 3). With Settings.Mixing the
// regulatory terms become a matrix Q and the bound of eq. 3 is taken
// with Σ_j Q_ij φ(w_j) in place of q_i φ(w_i); it is still the square
// of a norm, so still a bound, and its maximum over Q is the Nyström
// approximation with all n landmarks instead of one. With a ridge on Q
// the energy becomes
//
//	e = Σ_i [ −y_i (Q f(W, x))_i + ½ (Q G Qᵀ)_ii ] + ½ Σ_ij [L_ij y_i y_j − ½ L_ij²] + (λ/2)‖y‖² + (λ/2)‖Q‖²_F,
//
// G_jk = f(w_j, w_k), the response is y = (L + λI)⁻¹ Q f(W, x), and the
// rules, with u = Qᵀy and P = QᵀQ, are
//
//	Q   ← Q − η_q ∂e/∂Q (G + λI)⁻¹ = (1 − η_q) Q + η_q [(1/B) Σ_b y_b f(W, x_b)ᵀ] (G + λI)⁻¹
//	w_j ← w_j − (η_w/d_j) ∂e/∂w_j
//	    = w_j + (η_w/d_j) [ (1/B) Σ_b u_bj ∂f(w_j, x_b)/∂w_j − Σ_{k≠j} P_jk ∂f(w_j, w_k)/∂w_j − ½ P_jj ∂f(w_j, w_j)/∂w_j ]
//
// (L as above), d_j = max(P_jj, 0.01·mean_k P_kk). Q is Hebbian between
// output neuron i and kernel unit j, and kernel units read by the same
// neurons repel each other. The Q step is preconditioned by (G + λI)⁻¹
// (a Newton step on the quadratic in Q), without which Q converges at
// the rate of the smallest eigenvalue of G, far too slowly for close
// landmarks; d_j generalises the 1/q_i² rescaling of eq. 10 and its
// floor keeps a unit that no neuron reads from being thrown away. For
// fixed W the optimum of this bound over Q, L and y matches the Nyström
// kernel matrix of the landmarks W (as λ → 0), so the error of the
// responses is that of Nyström with the learned W, which keeps falling
// as n grows. Its steps cost O(n²M + n³) more than the paper's. From Q = I
// the first step moves W and L exactly as the paper's network does.
//
// W is drawn at random by New; q (or Q) starts at 1 (I) and L at I
// (section 3). The rand.Source is used only there: learning is
// deterministic, so the state of MarshalBinary is all a resume needs.
//
// Step, SetSettings, SetWeights and UnmarshalBinary modify the network;
// the other methods only read it and may run concurrently with each
// other (Transform takes its workspace from a pool), which makes a Clone
// a safe snapshot for concurrent queries. A zero Network is only good
// for UnmarshalBinary.
type Network struct {
	s Settings
	n int // neurons
	m int // input dimension

	w   *mat.Dense // n×m feedforward weights, one neuron per row
	q   []float64  // regulatory terms: n (diagonal) or n×n row-major (Mixing)
	l   []float64  // n×n lateral weights, row-major, symmetric
	fac []float64  // n×n upper Cholesky factor U of L + λI = UᵀU

	ww   []float64 // ‖w_i‖²
	self []float64 // f(w_i, w_i)
	h    []float64 // ½ ∂f(w_i, w_i)/∂w_i = h_i·w_i

	steps  int64
	energy float64 // minibatch energy of the last step, NaN before any

	work stepWork  // Step's workspace
	pool sync.Pool // *transformWork
}

// stepWork is the workspace of Step: the next parameters are built in
// it and swapped in when the step is accepted.
type stepWork struct {
	f, ds, dw, y, u []float64 // B×n
	xx              []float64 // B
	w               *mat.Dense
	q, l, fac       []float64
	ww, self, h     []float64
	yf, ydw, d      []float64 // n, or n×n for yf with Mixing
	g, gds, gdw     []float64 // n×n kernel among the units (Mixing)
	qg, p, gs, qt   []float64 // n×n (Mixing)
}

// rescaleFloor is the floor of the W-step rescaling of a unit with
// Mixing, relative to the mean over units: d_j = max(P_jj, 0.01·mean P).
const rescaleFloor = 0.01

// transformWork is the workspace of Transform.
type transformWork struct {
	xx []float64
	f  []float64
}

// New returns a network with W_ia ~ N(0, InitScale²) drawn from src,
// q = 1 (Q = I) and L = I. It panics if the settings are invalid or src
// is nil.
func New(s Settings, src rand.Source) *Network {
	if err := s.Validate(); err != nil {
		panic(err)
	}
	if src == nil {
		panic("hebbian: nil rand.Source")
	}
	rng := rand.New(src)
	sc := s.initScale()
	n := newNetwork(s)
	raw := n.w.RawMatrix()
	for i := range raw.Data {
		raw.Data[i] = sc * rng.NormFloat64()
	}
	for i := range n.n {
		n.l[i*n.n+i] = 1
		if s.Mixing {
			n.q[i*n.n+i] = 1
		} else {
			n.q[i] = 1
		}
	}
	if !n.refresh() {
		panic("hebbian: L + λI not positive definite at initialisation")
	}
	return n
}

// newNetwork allocates a network of the settings' shape with zero
// parameters.
func newNetwork(s Settings) *Network {
	n, m := s.Neurons, s.Dim
	nq := n
	if s.Mixing {
		nq = n * n
	}
	return &Network{
		s:      s,
		n:      n,
		m:      m,
		w:      mat.NewDense(n, m, nil),
		q:      make([]float64, nq),
		l:      make([]float64, n*n),
		fac:    make([]float64, n*n),
		energy: math.NaN(),
	}
}

// refresh recomputes the factor and the kernel self-terms from W and L
// and reports whether L + λI is positive definite.
func (n *Network) refresh() bool {
	n.ww, n.self, n.h = selfTerms(n.s.Kernel, n.ww, n.self, n.h, n.w)
	return factorize(n.fac, n.l, n.n, n.s.lambda())
}

// selfTerms returns ‖w_i‖², f(w_i, w_i) and h_i with
// ½ ∂f(w_i, w_i)/∂w_i = h_i·w_i, reusing the given slices.
func selfTerms(k Kernel, ww, self, h []float64, w *mat.Dense) ([]float64, []float64, []float64) {
	raw := w.RawMatrix()
	ww = sqNorms(ww, raw)
	self = grow(self, raw.Rows)
	h = grow(h, raw.Rows)
	var ds, dw [1]float64
	for i := range raw.Rows {
		k.Eval(self[i:i+1], ds[:], dw[:], ww[i:i+1], ww[i], ww[i:i+1])
		h[i] = ds[0] + 2*dw[0]
	}
	return ww, self, h
}

// factorize sets fac to the upper Cholesky factor of L + λI and reports
// whether L + λI is positive definite.
func factorize(fac, l []float64, n int, lambda float64) bool {
	copy(fac, l)
	for i := range n {
		fac[i*n+i] += lambda
	}
	_, ok := lapack64.Potrf(blas64.Symmetric{Uplo: blas.Upper, N: n, Data: fac, Stride: n})
	return ok
}

// solve overwrites the rows z_b of z (B×n) with z_b (L + λI)⁻¹ = z_b U⁻¹U⁻ᵀ.
func solve(z blas64.General, fac []float64, n int) {
	u := blas64.Triangular{Uplo: blas.Upper, Diag: blas.NonUnit, N: n, Data: fac, Stride: n}
	blas64.Trsm(blas.Right, blas.NoTrans, 1, u, z)
	blas64.Trsm(blas.Right, blas.Trans, 1, u, z)
}

// Settings returns the current settings.
func (n *Network) Settings() Settings { return n.s }

// SetSettings replaces the rates, the annealing schedule, λ and the
// divergence threshold for live tuning. It refuses another Neurons, Dim,
// Kernel or Mixing, and a λ with which L + λI is not positive definite;
// on error the network is unchanged.
func (n *Network) SetSettings(s Settings) error {
	if err := s.Validate(); err != nil {
		return err
	}
	if s.Neurons != n.s.Neurons || s.Dim != n.s.Dim {
		return fmt.Errorf("hebbian: network shape %dx%d cannot change to %dx%d", n.s.Neurons, n.s.Dim, s.Neurons, s.Dim)
	}
	if !kernelEqual(s.Kernel, n.s.Kernel) {
		return fmt.Errorf("hebbian: kernel %v cannot change to %v", n.s.Kernel, s.Kernel)
	}
	if s.Mixing != n.s.Mixing {
		return fmt.Errorf("hebbian: mixing %v cannot change to %v", n.s.Mixing, s.Mixing)
	}
	if s.lambda() != n.s.lambda() {
		fac := make([]float64, len(n.fac))
		if !factorize(fac, n.l, n.n, s.lambda()) {
			return fmt.Errorf("hebbian: λ = %v: L + λI is not positive definite", s.lambda())
		}
		n.fac = fac
	}
	n.s = s
	return nil
}

// SetWeights replaces W (n×Dim, one neuron per row), for example by
// landmarks or data rows as a warm start; q and L are kept. It panics
// with mat.ErrShape on another shape and returns an error wrapping
// ErrNonFinite if w holds NaN or ±Inf (the network is then unchanged).
func (n *Network) SetWeights(w mat.Matrix) error {
	if r, c := w.Dims(); r != n.n || c != n.m {
		panic(mat.ErrShape)
	}
	for i := range n.n {
		for j := range n.m {
			if v := w.At(i, j); math.IsNaN(v) || math.IsInf(v, 0) {
				return fmt.Errorf("%w: weight %d,%d is %v", ErrNonFinite, i, j, v)
			}
		}
	}
	n.w.Copy(w)
	n.ww, n.self, n.h = selfTerms(n.s.Kernel, n.ww, n.self, n.h, n.w)
	return nil
}

// Neurons returns n.
func (n *Network) Neurons() int { return n.n }

// Dim returns the input dimension.
func (n *Network) Dim() int { return n.m }

// Steps returns the number of learning steps taken.
func (n *Network) Steps() int64 { return n.steps }

// Energy returns the minibatch energy e of eq. 8 (averaged over the
// minibatch, at the optimal responses) evaluated by the last successful
// step before its update, or NaN if no step was taken.
func (n *Network) Energy() float64 { return n.energy }

// Weights returns a copy of W (n×Dim), one neuron per row: the learned
// landmarks.
func (n *Network) Weights() *mat.Dense { return mat.DenseCopyOf(n.w) }

// Q returns a copy of the regulatory terms as an n×n matrix: diagonal
// (diag q) without Mixing.
func (n *Network) Q() *mat.Dense {
	q := mat.NewDense(n.n, n.n, nil)
	if n.s.Mixing {
		copy(q.RawMatrix().Data, n.q)
		return q
	}
	for i, v := range n.q {
		q.Set(i, i, v)
	}
	return q
}

// Lateral returns a copy of L (n×n).
func (n *Network) Lateral() *mat.SymDense {
	return mat.NewSymDense(n.n, slices.Clone(n.l))
}

// Finite reports whether every parameter (W, q, L) is finite.
func (n *Network) Finite() bool {
	return finite.All(n.w.RawMatrix().Data) && finite.All(n.q) && finite.All(n.l)
}

// firstNonFinite returns the first row of x holding NaN or ±Inf, or −1.
func firstNonFinite(x blas64.General) int {
	for i := range x.Rows {
		if !finite.All(x.Data[i*x.Stride : i*x.Stride+x.Cols]) {
			return i
		}
	}
	return -1
}

// general returns data[:r*c] as an r×c matrix, grown as needed.
func general(data *[]float64, r, c int) blas64.General {
	*data = grow(*data, r*c)
	return blas64.General{Rows: r, Cols: c, Stride: c, Data: *data}
}

// feedforward sets f (B×n) to f(x_b, w_i), and, if ds.Data is not nil,
// ds and dw to the partial derivatives of Kernel.Eval; xx holds ‖x_b‖².
func (n *Network) feedforward(f, ds, dw blas64.General, xx []float64, x blas64.General) {
	blas64.Gemm(blas.NoTrans, blas.Trans, 1, x, n.w.RawMatrix(), 0, f)
	for b := range x.Rows {
		row := f.Data[b*f.Stride : b*f.Stride+n.n]
		if ds.Data == nil {
			n.s.Kernel.Eval(row, nil, nil, row, xx[b], n.ww)
			continue
		}
		n.s.Kernel.Eval(row, ds.Data[b*ds.Stride:b*ds.Stride+n.n], dw.Data[b*dw.Stride:b*dw.Stride+n.n], row, xx[b], n.ww)
	}
}

// drive sets z (B×n) to the feedforward drive q∘f_b, or Q f_b with
// Mixing. z may be f without Mixing.
func (n *Network) drive(z, f blas64.General) {
	if n.s.Mixing {
		q := blas64.General{Rows: n.n, Cols: n.n, Stride: n.n, Data: n.q}
		blas64.Gemm(blas.NoTrans, blas.Trans, 1, f, q, 0, z)
		return
	}
	for b := range f.Rows {
		fr := f.Data[b*f.Stride : b*f.Stride+n.n]
		zr := z.Data[b*z.Stride : b*z.Stride+n.n]
		for i, qi := range n.q {
			zr[i] = qi * fr[i]
		}
	}
}

// Transform sets the rows of dst (B×n) to the responses of eq. 12 to the
// rows of x (B×Dim),
//
//	y_b = (L + λI)⁻¹ (q ∘ f(W, x_b))    (Q f(W, x_b) with Mixing),
//
// the steady state of the recurrent dynamics of eq. 11. It does not
// learn. dst must be empty or B×n and must not alias x. It panics with
// mat.ErrShape on another shape. Non-finite inputs give non-finite
// responses.
func (n *Network) Transform(dst *mat.Dense, x mat.Matrix) {
	b, m := x.Dims()
	if m != n.m {
		panic(mat.ErrShape)
	}
	reuseAs(dst, b, n.n)
	xd := denseOf(x).RawMatrix()
	tw, _ := n.pool.Get().(*transformWork)
	if tw == nil {
		tw = new(transformWork)
	}
	tw.xx = sqNorms(tw.xx, xd)
	y := dst.RawMatrix()
	if n.s.Mixing {
		f := general(&tw.f, b, n.n)
		n.feedforward(f, blas64.General{}, blas64.General{}, tw.xx, xd)
		n.drive(y, f)
	} else {
		n.feedforward(y, blas64.General{}, blas64.General{}, tw.xx, xd)
		n.drive(y, y)
	}
	solve(y, n.fac, n.n)
	n.pool.Put(tw)
}

// Step learns from one minibatch x (B×Dim, one sample per row): it
// computes the responses Y of eq. 12 with the current parameters and
// takes one step of eqs. 10 and 13-15 (see Network). If dst is not nil
// it receives Y (B×n; it must be empty or of that shape), the responses
// the step learned from.
//
// It returns an error wrapping ErrNonFinite, and learns nothing, if x
// holds NaN or ±Inf, and a *StepError if the step would diverge; in both
// cases the network is unchanged and dst unspecified. It panics with
// mat.ErrShape if x does not have Dim columns or dst has another shape.
func (n *Network) Step(dst *mat.Dense, x mat.Matrix) error {
	B, m := x.Dims()
	if m != n.m {
		panic(mat.ErrShape)
	}
	if dst != nil {
		reuseAs(dst, B, n.n)
	}
	xd := denseOf(x).RawMatrix()
	if r := firstNonFinite(xd); r >= 0 {
		return fmt.Errorf("%w: row %d", ErrNonFinite, r)
	}
	N := n.n
	wk := &n.work
	f, ds, dw := general(&wk.f, B, N), general(&wk.ds, B, N), general(&wk.dw, B, N)
	y := general(&wk.y, B, N)
	wk.xx = sqNorms(wk.xx, xd)
	n.feedforward(f, ds, dw, wk.xx, xd)
	n.drive(y, f)
	solve(y, n.fac, N)
	if !finite.All(wk.y[:B*N]) {
		return &StepError{Step: n.steps, Reason: "non-finite responses"}
	}

	etaW, etaQ, etaL := n.s.Rates(n.steps)
	if wk.w == nil {
		wk.w = mat.NewDense(N, n.m, nil)
	}
	wk.q = grow(wk.q, len(n.q))
	var e float64
	if n.s.Mixing {
		var ok bool
		if e, ok = n.stepMixing(xd, f, ds, dw, y, etaW, etaQ); !ok {
			return &StepError{Step: n.steps, Reason: "the kernel matrix of W plus λI is not positive definite"}
		}
	} else {
		e = n.stepDiagonal(xd, f, ds, dw, y, etaW, etaQ)
	}
	for _, v := range n.l {
		e -= 0.25 * v * v
	}

	// L' = (1 − η_l/2) L + (η_l/(2B)) YᵀY: upper triangle by Syrk, then
	// mirrored.
	wk.l = grow(wk.l, N*N)
	copy(wk.l, n.l)
	ln := blas64.Symmetric{Uplo: blas.Upper, N: N, Stride: N, Data: wk.l}
	blas64.Syrk(blas.Trans, 0.5*etaL/float64(B), y, 1-0.5*etaL, ln)
	maxL := n.s.maxLateral()
	bounded := true
	for i := range N {
		for j := i; j < N; j++ {
			v := wk.l[i*N+j]
			if !(math.Abs(v) <= maxL) {
				bounded = false
			}
			wk.l[j*N+i] = v
		}
	}
	if !bounded {
		return &StepError{Step: n.steps, Reason: fmt.Sprintf("a lateral weight is beyond %v or not finite", maxL)}
	}
	if !finite.All(wk.w.RawMatrix().Data) || !finite.All(wk.q) {
		return &StepError{Step: n.steps, Reason: "non-finite W or q"}
	}
	wk.fac = grow(wk.fac, N*N)
	if !factorize(wk.fac, wk.l, N, n.s.lambda()) {
		return &StepError{Step: n.steps, Reason: "L + λI is not positive definite"}
	}
	wk.ww, wk.self, wk.h = selfTerms(n.s.Kernel, wk.ww, wk.self, wk.h, wk.w)

	if dst != nil {
		copy2D(dst.RawMatrix(), y)
	}
	n.w, wk.w = wk.w, n.w
	n.q, wk.q = wk.q, n.q
	n.l, wk.l = wk.l, n.l
	n.fac, wk.fac = wk.fac, n.fac
	n.ww, wk.ww = wk.ww, n.ww
	n.self, wk.self = wk.self, n.self
	n.h, wk.h = wk.h, n.h
	n.steps++
	n.energy = e
	return nil
}

// stepDiagonal writes the next W and q of the paper's network into the
// workspace and returns the energy terms −(1/2B) Σ_b y_b·(q∘f_b) +
// ½ Σ_i q_i² f(w_i, w_i). (At the optimum L y = q∘f − λy, which reduces
// the y-terms of eq. 8 to −½ y·(q∘f).) ds is overwritten.
func (n *Network) stepDiagonal(xd, f, ds, dw, y blas64.General, etaW, etaQ float64) float64 {
	N, B := n.n, y.Rows
	invB := 1 / float64(B)
	wk := &n.work
	// yf_i = Σ_b y_bi f_bi, ydw_i = Σ_b y_bi φ_b(b, i).
	wk.yf, wk.ydw = grow(wk.yf, N), grow(wk.ydw, N)
	yf, ydw := wk.yf, wk.ydw
	clear(yf)
	clear(ydw)
	for b := range B {
		yr, fr, dwr := y.Data[b*N:(b+1)*N], f.Data[b*N:(b+1)*N], dw.Data[b*N:(b+1)*N]
		for i, v := range yr {
			yf[i] += v * fr[i]
			ydw[i] += v * dwr[i]
		}
	}
	var e float64
	for i, qi := range n.q {
		e += -0.5*qi*yf[i]*invB + 0.5*qi*qi*n.self[i]
	}

	// W' = diag(1 + η_w[(2/(q_i B)) Σ_b y_bi φ_b − h_i]) W + Pᵀ X with
	// P_bi = η_w y_bi φ_s(b, i)/(q_i B).
	wn, wo := wk.w.RawMatrix(), n.w.RawMatrix()
	for i := range N {
		c := 1 + etaW*(2*ydw[i]*invB/n.q[i]-n.h[i])
		src := wo.Data[i*wo.Stride : i*wo.Stride+n.m]
		dr := wn.Data[i*wn.Stride : i*wn.Stride+n.m]
		for j, v := range src {
			dr[j] = c * v
		}
	}
	for b := range B {
		yr, dr := y.Data[b*N:(b+1)*N], ds.Data[b*N:(b+1)*N]
		for i, v := range yr {
			dr[i] = etaW * v * dr[i] * invB / n.q[i]
		}
	}
	blas64.Gemm(blas.Trans, blas.NoTrans, 1, ds, xd, 1, wn)

	for i, qi := range n.q {
		wk.q[i] = qi
		if etaQ != 0 {
			wk.q[i] += etaQ * (yf[i]*invB - qi*n.self[i])
		}
	}
	return e
}

// stepMixing writes the next W and Q of the network with Mixing into the
// workspace and returns the energy terms −(1/2B) Σ_b y_b·(Q f_b) +
// ½ tr(Q G Qᵀ) + (λ/2)‖Q‖²_F, and false if G + λI is not positive
// definite. ds is overwritten.
func (n *Network) stepMixing(xd, f, ds, dw, y blas64.General, etaW, etaQ float64) (float64, bool) {
	N, B := n.n, y.Rows
	invB := 1 / float64(B)
	wk := &n.work
	q := blas64.General{Rows: N, Cols: N, Stride: N, Data: n.q}
	wo := n.w.RawMatrix()

	// G_kj = f(w_k, w_j), with the derivatives of the pair (x = w_k, w = w_j).
	g, gds, gdw := general(&wk.g, N, N), general(&wk.gds, N, N), general(&wk.gdw, N, N)
	blas64.Gemm(blas.NoTrans, blas.Trans, 1, wo, wo, 0, g)
	for k := range N {
		row := g.Data[k*N : (k+1)*N]
		n.s.Kernel.Eval(row, gds.Data[k*N:(k+1)*N], gdw.Data[k*N:(k+1)*N], row, n.ww[k], n.ww)
	}
	yf := general(&wk.yf, N, N) // YᵀF
	blas64.Gemm(blas.Trans, blas.NoTrans, 1, y, f, 0, yf)
	qg := general(&wk.qg, N, N) // QG
	blas64.Gemm(blas.NoTrans, blas.NoTrans, 1, q, g, 0, qg)
	lambda := n.s.lambda()
	var e float64
	for i, qi := range n.q {
		e += -0.5*qi*yf.Data[i]*invB + 0.5*qi*qg.Data[i] + 0.5*lambda*qi*qi
	}
	// Q' = Q − η_q ∂e/∂Q (G + λI)⁻¹ = (1 − η_q) Q + η_q (YᵀF/B)(G + λI)⁻¹,
	// solved as (G + λI) Q'ᵀ = ..., with G + λI factorised in gs.
	gs := general(&wk.gs, N, N)
	copy(gs.Data, g.Data)
	for i := range N {
		gs.Data[i*N+i] += lambda
	}
	qt := general(&wk.qt, N, N)
	for i := range N {
		for j := range N {
			qt.Data[j*N+i] = yf.Data[i*N+j] * invB
		}
	}
	if _, ok := lapack64.Potrf(blas64.Symmetric{Uplo: blas.Upper, N: N, Data: gs.Data, Stride: N}); !ok {
		return e, false
	}
	lapack64.Potrs(blas64.Triangular{Uplo: blas.Upper, Diag: blas.NonUnit, N: N, Data: gs.Data, Stride: N}, qt)
	for i := range N {
		for j := range N {
			wk.q[i*N+j] = (1-etaQ)*n.q[i*N+j] + etaQ*qt.Data[j*N+i]
		}
	}

	// U = YQ (u_b = Qᵀy_b), P = QᵀQ, ydw_j = Σ_b u_bj φ_b(b, j).
	u := general(&wk.u, B, N)
	blas64.Gemm(blas.NoTrans, blas.NoTrans, 1, y, q, 0, u)
	p := general(&wk.p, N, N)
	blas64.Gemm(blas.Trans, blas.NoTrans, 1, q, q, 0, p)
	// The W step of unit j is rescaled by 1/d_j, d_j = P_jj floored at a
	// fraction of the mean: a unit that no neuron reads (P_jj → 0) then
	// stalls instead of being thrown away.
	wk.d = grow(wk.d, N)
	d := wk.d
	var meanP float64
	for j := range N {
		meanP += p.Data[j*N+j] / float64(N)
	}
	for j := range N {
		d[j] = max(p.Data[j*N+j], rescaleFloor*meanP)
	}
	wk.ydw = grow(wk.ydw, N)
	ydw := wk.ydw
	clear(ydw)
	for b := range B {
		ur, dwr, dsr := u.Data[b*N:(b+1)*N], dw.Data[b*N:(b+1)*N], ds.Data[b*N:(b+1)*N]
		for j, v := range ur {
			ydw[j] += v * dwr[j]
			dsr[j] = etaW * v * dsr[j] * invB / d[j]
		}
	}
	// W' = diag(c) W + (U∘Φ_s scaled)ᵀ X + R W, with
	//	R_jk = −η_w P_jk φ_s(w_k, w_j)/d_j (k ≠ j), R_jj = 0,
	//	c_j = 1 + (η_w/d_j)[2 ydw_j/B − 2 Σ_{k≠j} P_jk φ_b(w_k, w_j) − P_jj h_j].
	// R overwrites G, which is no longer needed.
	r := g
	wn := wk.w.RawMatrix()
	for j := range N {
		pjj, dj := p.Data[j*N+j], d[j]
		var rep float64
		for k := range N {
			if k == j {
				r.Data[j*N+k] = 0
				continue
			}
			pjk := p.Data[j*N+k]
			r.Data[j*N+k] = -etaW * pjk * gds.Data[k*N+j] / dj
			rep += pjk * gdw.Data[k*N+j]
		}
		c := 1 + etaW/dj*(2*ydw[j]*invB-2*rep-pjj*n.h[j])
		src := wo.Data[j*wo.Stride : j*wo.Stride+n.m]
		dr := wn.Data[j*wn.Stride : j*wn.Stride+n.m]
		for l, v := range src {
			dr[l] = c * v
		}
	}
	blas64.Gemm(blas.Trans, blas.NoTrans, 1, ds, xd, 1, wn)
	blas64.Gemm(blas.NoTrans, blas.NoTrans, 1, r, wo, 1, wn)
	return e, true
}

// copy2D copies src into dst of the same shape.
func copy2D(dst, src blas64.General) {
	for i := range src.Rows {
		copy(dst.Data[i*dst.Stride:i*dst.Stride+src.Cols], src.Data[i*src.Stride:i*src.Stride+src.Cols])
	}
}

// Clone returns a deep copy of the network that shares nothing mutable
// with n, for an immutable snapshot or a rollback point.
func (n *Network) Clone() *Network {
	c := newNetwork(n.s)
	c.w.Copy(n.w)
	copy(c.q, n.q)
	copy(c.l, n.l)
	copy(c.fac, n.fac)
	c.ww, c.self, c.h = slices.Clone(n.ww), slices.Clone(n.self), slices.Clone(n.h)
	c.steps, c.energy = n.steps, n.energy
	return c
}
