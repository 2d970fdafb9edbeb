package spectral

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas64"
	"gonum.org/v1/gonum/lapack/lapack64"
	"gonum.org/v1/gonum/mat"
)

// Operator is a symmetric linear operator on R^n, given only by its
// products, so that a large sparse or packed matrix never has to be
// formed.
type Operator interface {
	// Size returns n.
	Size() int
	// Apply sets dst = A·x. dst and x have length n and do not alias.
	Apply(dst, x []float64)
}

// LanczosSettings configures Smallest. A zero field means its documented
// default.
type LanczosSettings struct {
	// Basis is the size m of the Krylov basis kept between restarts. It
	// must exceed the number of eigenpairs wanted; the deflation check
	// (see Smallest) runs in the m − nev rows beyond them, so m is at
	// least nev + 10. Zero means max(2·nev + 20, nev + 40). It is at
	// most n.
	Basis int
	// Tol is the residual at which a Ritz pair (θ, y) counts as
	// converged: ‖A y − θ y‖ ≤ Tol·‖A‖, with ‖A‖ estimated by the largest
	// Ritz value in magnitude seen. Zero means 1e-9.
	Tol float64
	// MaxApply bounds the number of operator applications. Zero means
	// 20·n + 1000.
	MaxApply int
	// Keep is the number of Ritz vectors beyond the nev wanted that a
	// thick restart keeps: a restart keeps k = nev + Keep of the m basis
	// vectors, at most m − 1, and extends the basis by m − k vectors
	// before the next. Zero means (m − nev)/2, the choice of Wu and Simon
	// (2000). A restart costs 2·k·m·n flops to form the Ritz vectors, and
	// each step of the extension 4·j·n to reorthogonalise against the j
	// basis vectors; a smaller Keep makes the restarts fewer and cheaper
	// and the basis smaller on average, at the price of the spectral
	// information of the Ritz vectors dropped, so a few more steps. On
	// the SMT pencil of the Brown corpus (nev = 129, m = 278), with full
	// reorthogonalisation and before the deflation check, Keep = 8 took
	// 1,124 products and 6 restarts instead of 1,103 and 11, and 18.5
	// instead of 26.6 Gflop of reorthogonalisation and restarts; with
	// Partial, the check and the verification, 1,467 products, 8
	// restarts and 296 passes instead of 1,446, 13 and 433. It must be
	// >= 0.
	Keep int
	// OnePass, if set, orthogonalises each new vector w = A q_j first
	// against q_j and q_{j−1}, the components the three-term recurrence
	// of Lanczos predicts (most of w), then once against the whole basis,
	// and a second time only if that pass shortened w below 1/√2 of its
	// length (the criterion of Daniel, Gragg, Kaufman and Stewart, 1976):
	// after the local step the full pass removes rounding errors only,
	// without cancellation, except on the first step after a restart,
	// where w couples to every kept Ritz vector. The default, unset,
	// always makes the two full passes ("twice is enough"); OnePass
	// halves the reorthogonalisation, which dominates a solve for many
	// eigenpairs (on the SMT pencil of the Brown corpus 7.3 instead of
	// 14.6 Gflop, the same 1,124 products and residuals, before the
	// deflation check).
	OnePass bool
	// Partial, if set, keeps the basis semi-orthogonal instead of
	// orthogonal to rounding: partial reorthogonalisation (Simon, "The
	// Lanczos algorithm with partial reorthogonalization", Math. Comp.
	// 42, 1984). Each step is the plain recurrence with the coefficients
	// T already holds,
	//
	//	w = A q_j − β_{j−1} q_{j−1} − α_j q_j   (after a thick restart, A q_k − Σ σ_i y_i − α_k q_k),
	//
	// while Simon's recurrence (his eq. 3.2, here with T's arrow)
	//
	//	β_j ω_{j+1,i} = (T ω_j)_i − α_j ω_{j,i} − β_{j−1} ω_{j−1,i} ± ε₁‖A‖,  ε₁ = u√n/2,
	//
	// (u = 2⁻⁵³, the unit roundoff; ± a fixed pseudo-random sign per
	// entry) estimates ω_{j+1,i} ≈ q_{j+1}ᵀq_i for the vectors of the
	// current extension. The overlaps with the k
	// Ritz vectors kept at a restart are measured instead (one product
	// with those k rows a step): formed from a semi-orthogonal basis,
	// they satisfy A y_i = θ_i y_i + σ_i q_k only to about √u‖A‖, which
	// the recurrence cannot see, and estimating them let orthogonality
	// drift from restart to restart until the solve diverged. Only when
	// some overlap exceeds √u does w get a pass over the whole basis
	// (twice if it cancelled), and so does the next vector; the first
	// step after a restart always gets two. A pass leaves overlaps of
	// about ε₁‖A‖/β_j, which the estimates then start from. The
	// coefficients of those passes, of the order of the loss of
	// orthogonality, are left out of T. The returned vectors are made
	// orthonormal to rounding by one Cholesky QR step, a rotation of
	// order √u, and verified by their own residuals (nev more products),
	// which are the Residuals reported. The estimates can still fall
	// behind the true overlaps, near a breakdown of the recurrence on a
	// spectrum of many scales: if a residual exceeds (Tol + 50√u)·‖A‖,
	// the vectors are far from orthonormal or the projected matrix is
	// not finite, the solve is redone with full reorthogonalisation
	// (LanczosResult.Redone). Partial suits tolerances of 1e-7 and
	// above: the vectors' own residuals exceed the recurrence's by up to
	// tens of √u‖A‖. On the SMT pencil of the Brown corpus it took the
	// same 1,124 products as OnePass and 233 passes instead of 1,124,
	// besides the products with the kept vectors, before the deflation
	// check (with it and the verification, 1,467 products, 129 of them
	// verifying the pairs, and 296 passes). Partial overrides OnePass.
	Partial bool
}

// Validate reports whether the settings are usable.
func (s LanczosSettings) Validate() error {
	switch {
	case s.Basis < 0:
		return fmt.Errorf("spectral: lanczos basis %d: must be >= 0", s.Basis)
	case !(s.Tol >= 0 && s.Tol < 1):
		return fmt.Errorf("spectral: lanczos tolerance %v: must be in [0, 1) (0 means 1e-9)", s.Tol)
	case s.MaxApply < 0:
		return fmt.Errorf("spectral: lanczos max applications %d: must be >= 0", s.MaxApply)
	case s.Keep < 0:
		return fmt.Errorf("spectral: lanczos restart keep %d: must be >= 0", s.Keep)
	}
	return nil
}

// LanczosResult is what Smallest found.
type LanczosResult struct {
	// Values are the nev smallest eigenvalues, ascending.
	Values []float64
	// Vectors is n×nev: column i is the unit eigenvector of Values[i].
	Vectors *mat.Dense
	// Residuals are ‖A y_i − θ_i y_i‖ of each pair.
	Residuals []float64
	LanczosCounts
}

// LanczosCounts is the work of one or more Lanczos solves.
type LanczosCounts struct {
	// Applies and Restarts count the operator applications and the
	// thick restarts, those of the deflation check included; Passes the
	// sweeps of orthogonalisation over the whole basis (two a step by
	// default, about one with OnePass, fewer than one with Partial).
	Applies, Restarts, Passes int
	// Redone is set when Partial lost its way (its pairs failed their
	// verification, its Ritz vectors were far from orthonormal, or its
	// projected matrix could not be diagonalised) and the solve was
	// redone with full reorthogonalisation; the counts include both
	// solves.
	Redone bool
}

// add adds the counts of o to c's; c is Redone if either was.
func (c *LanczosCounts) add(o LanczosCounts) {
	c.Applies += o.Applies
	c.Restarts += o.Restarts
	c.Passes += o.Passes
	c.Redone = c.Redone || o.Redone
}

// ErrNoConvergence is wrapped by the error of Smallest when MaxApply
// applications did not bring every wanted pair below the tolerance, or
// did not finish the deflation check. The result holds the best pairs
// found.
var ErrNoConvergence = errors.New("spectral: lanczos did not converge")

// Smallest returns the nev smallest eigenpairs of the symmetric operator
// op by the thick-restart Lanczos method (Wu and Simon, 2000) with full
// reorthogonalisation:
//
//	w = A q_j,  h = Qᵀw,  w ← w − Qh (twice),  T_{:j} = h,
//	β_j = ‖w‖,  q_{j+1} = w/β_j                     (j = k, ..., m−1)
//	T = S Θ Sᵀ;  residual of Ritz pair i = |β_{m−1} S_{m−1,i}|
//
// and, until the nev smallest pairs have converged, a restart that keeps
// the k smallest Ritz vectors Q·S_{:,<k} and q_m, so the basis never
// exceeds m vectors: memory (m+1)·n and O(n·m) work per step besides the
// product (with OnePass, the first pass is local and the second is the
// one over the basis, repeated only when it cancels; with Partial, the
// pass over the basis is made only when an overlap is estimated or
// measured above √u). Full reorthogonalisation keeps the basis
// orthonormal to rounding, Partial semi-orthogonal, so no spurious
// copies of converged eigenvalues appear; an invariant subspace (β ≈ 0:
// a repeated eigenvalue, a disconnected component) is left by
// continuing with a fresh random vector.
//
// A single Krylov space holds one vector of each eigenspace, so the
// other copies of a repeated eigenvalue enter the basis only by such a
// breakdown or by rounding: on the Laplacian of four disjoint rings the
// iteration above converges with one zero of four. So once the nev
// pairs have converged, a deflation check locks them, Y, and runs
// Lanczos from a fresh random vector orthogonal to them, which is
// Lanczos on the deflated operator (I − YYᵀ) A (I − YYᵀ) restricted to
// Yᵀx = 0 (the locked pairs' residuals, below Tol·‖A‖, are its only
// coupling to Y). Every 5 steps (checkEvery) the smallest Ritz value θ′
// of that extension is computed. If θ′ falls below θ_{nev−1} − Tol·‖A‖,
// the converged set missed an eigenvalue: the extension goes on as a
// normal one, restarts follow, and a new check follows the next
// convergence. If θ′ converges (residual below Tol·‖A‖) above that, the
// locked pairs are returned as they were: the check changes no bit of a
// result it confirms. Until then the check's extension is thick-restarted
// behind the locked rows like the solve's own, keeping 1 + Keep of its
// Ritz vectors (by default half). A check costs what converging the
// smallest eigenvalue of the deflated operator takes: on the SMT pencil
// of the Brown corpus 214 products after the solve's 1,124, about a
// fifth of its time. (A looser stop, θ′ less its residual above
// θ_{nev−1}, took half that, and returned wrong values on rings and
// clustered spectra.) If MaxApply runs out during a check, the locked
// pairs are returned with an error wrapping ErrNoConvergence. Like any
// Lanczos run, a check can converge before an eigenvector whose
// component in its random start is tiny has grown into the basis: it
// makes a missed eigenvalue improbable, not impossible. The start vector
// and the fresh vectors are drawn from src.
//
// It panics if nev < 1 or nev > op.Size(), and if the settings are
// invalid. If the tolerance is not reached within MaxApply applications it
// returns the best pairs found and an error wrapping ErrNoConvergence.
func Smallest(op Operator, nev int, s LanczosSettings, src rand.Source) (LanczosResult, error) {
	if err := s.Validate(); err != nil {
		panic(err)
	}
	n := op.Size()
	if nev < 1 || nev > n {
		panic(fmt.Sprintf("spectral: %d eigenpairs of a %d×%d operator", nev, n, n))
	}
	m := s.Basis
	if m == 0 {
		m = max(2*nev+20, nev+40)
	}
	m = min(m, n)
	if m <= nev && m < n {
		panic(fmt.Sprintf("spectral: lanczos basis %d must exceed the %d eigenpairs wanted", m, nev))
	}
	m = min(max(m, nev+minCheckRows), n)
	rng := rand.New(src)
	res, err := thickRestart(op, nev, m, s, rng)
	if !errors.Is(err, errPartialLost) {
		return res, err
	}
	s.Partial = false
	full, err := thickRestart(op, nev, m, s, rng)
	full.add(res.LanczosCounts)
	full.Redone = true
	return full, err
}

// errPartialLost is returned by thickRestart when Partial's basis lost
// more orthogonality than its estimates allow for.
var errPartialLost = errors.New("spectral: partial reorthogonalisation lost orthogonality")

// thickRestart is Smallest with a basis of m vectors, drawing its random
// vectors from rng.
func thickRestart(op Operator, nev, m int, s LanczosSettings, rng *rand.Rand) (LanczosResult, error) {
	n := op.Size()
	tol := s.Tol
	if tol == 0 {
		tol = 1e-9
	}
	maxApply := s.MaxApply
	if maxApply == 0 {
		maxApply = 20*n + 1000
	}
	eps1 := math.Sqrt(float64(n)) * 0x1p-53 / 2 // Partial's rounding per step

	var res LanczosResult
	q := make([]float64, (m+1)*n) // basis vectors, one per row
	basis := func(rows int) blas64.General {
		return blas64.General{Rows: rows, Cols: n, Stride: n, Data: q[:rows*n]}
	}
	vec := func(j int) blas64.Vector { return blas64.Vector{N: n, Inc: 1, Data: q[j*n : (j+1)*n]} }
	t := mat.NewSymDense(m, nil)
	h := make([]float64, m+1)
	h2 := make([]float64, m+1)
	// w is the vector being formed, in place in the basis row it is to
	// become (within row j+1 while step j extends the basis), so that no
	// copy puts it there.
	var w []float64
	var wv blas64.Vector
	wAt := func(row int) {
		w = q[row*n : (row+1)*n]
		wv = blas64.Vector{N: n, Inc: 1, Data: w}
	}

	// orthogonalize removes from w its components along the first j
	// basis vectors, twice ("twice is enough"), accumulating them in h.
	orthogonalize := func(j int) {
		if j == 0 {
			return
		}
		res.Passes += 2
		b := basis(j)
		hv := blas64.Vector{N: j, Inc: 1, Data: h[:j]}
		h2v := blas64.Vector{N: j, Inc: 1, Data: h2[:j]}
		blas64.Gemv(blas.NoTrans, 1, b, wv, 0, hv)
		blas64.Gemv(blas.Trans, -1, b, hv, 1, wv)
		blas64.Gemv(blas.NoTrans, 1, b, wv, 0, h2v)
		blas64.Gemv(blas.Trans, -1, b, h2v, 1, wv)
		for i := 0; i < j; i++ {
			h[i] += h2[i]
		}
	}
	// pass orthogonalises w against basis rows 0..rows−1 once, and a
	// second time if the first shortened it below 1/√2 of its length
	// (the criterion of Daniel, Gragg, Kaufman and Stewart), or always
	// twice if asked, setting h to the coefficients.
	pass := func(rows int, twice bool, h []float64) {
		res.Passes++
		b := basis(rows)
		hv := blas64.Vector{N: rows, Inc: 1, Data: h[:rows]}
		h2v := blas64.Vector{N: rows, Inc: 1, Data: h2[:rows]}
		before := blas64.Nrm2(wv)
		blas64.Gemv(blas.NoTrans, 1, b, wv, 0, hv)
		blas64.Gemv(blas.Trans, -1, b, hv, 1, wv)
		if twice || blas64.Nrm2(wv) < before/math.Sqrt2 {
			res.Passes++
			blas64.Gemv(blas.NoTrans, 1, b, wv, 0, h2v)
			blas64.Gemv(blas.Trans, -1, b, h2v, 1, wv)
			for i := 0; i < rows; i++ {
				h[i] += h2[i]
			}
		}
	}
	// extend orthogonalises w = A q_j against basis rows 0..j,
	// accumulating the coefficients in h: two full passes, or with
	// OnePass the local step of the recurrence (against q_j and
	// q_{j−1}) and then one full pass, repeated only if it cancelled.
	extend := func(j int) {
		if !s.OnePass {
			orthogonalize(j + 1)
			return
		}
		var local [2]float64
		for d := 0; d < 2 && j-d >= 0; d++ {
			local[d] = blas64.Dot(vec(j-d), wv)
			blas64.Axpy(-local[d], vec(j-d), wv)
		}
		pass(j+1, false, h)
		for d := 0; d < 2 && j-d >= 0; d++ {
			h[j-d] += local[d]
		}
	}
	// recur is Partial's step: it removes from w = A q_j the components
	// the recurrence predicts with the coefficients T already holds,
	//
	//	w ← w − T_{j−1,j} q_{j−1} − α_j q_j,  α_j = q_jᵀ(w − T_{j−1,j} q_{j−1}),
	//
	// or, on the first step after a thick restart (j = k > 0),
	// w ← w − Σ_{i<k} σ_i y_i − α_k q_k with the arrow σ_i = T_{ik}, so
	// that A Q = Q T + β q eᵀ holds to rounding with T symmetric, as the
	// ω-recurrence assumes; then, if whole, one pass over the basis
	// (twice if asked), whose coefficients, of the order of the loss of
	// orthogonality, are left out of T (Simon, 1984). It sets h to
	// column j of T.
	var arrow, dropped []float64 // Partial's arrow of T and the coefficients left out of it
	if s.Partial {
		arrow, dropped = make([]float64, m), make([]float64, m+1)
	}
	recur := func(j, k int, prev float64, whole, twice bool) {
		if j == k && k > 0 {
			for i := 0; i < k; i++ {
				arrow[i] = t.At(i, k)
			}
			blas64.Gemv(blas.Trans, -1, basis(k), blas64.Vector{N: k, Inc: 1, Data: arrow[:k]}, 1, wv)
		} else if j > 0 {
			blas64.Axpy(-prev, vec(j-1), wv)
		}
		alpha := blas64.Dot(vec(j), wv)
		blas64.Axpy(-alpha, vec(j), wv)
		if whole {
			pass(j+1, twice, dropped)
		}
		clear(h[:j+1])
		if j == k && k > 0 {
			copy(h[:k], arrow[:k])
		} else if j > 0 {
			h[j-1] = prev
		}
		h[j] = alpha
	}
	// fresh fills basis row j with a random unit vector orthogonal to
	// rows 0..j−1; it reports false if none exists (j = n).
	fresh := func(j int) bool {
		wAt(j)
		for try := 0; try < 5; try++ {
			for i := range w {
				w[i] = rng.NormFloat64()
			}
			orthogonalize(j)
			if nrm := blas64.Nrm2(wv); nrm > 1e-8*math.Sqrt(float64(n)) {
				blas64.Scal(1/nrm, wv)
				return true
			}
		}
		return false
	}
	fresh(0)

	var eig mat.EigenSym
	var sv mat.Dense
	var ritzWork []float64 // workspace of ritzInPlace
	tuData := make([]float64, m*m)
	anorm := 0.0
	k := 0 // basis vectors kept from the last restart
	// The deflation check: checking is set while the basis beyond the
	// nev locked rows is a Lanczos run on the deflated operator, the
	// locked pairs having converged with θ_{nev−1} = checkTheta and
	// residuals checkResiduals. checkEig holds the eigendecomposition of
	// that run's block of T, rows nev..j, after checkBlock(j).
	checking := false
	var checkTheta float64
	var checkValues, checkResiduals []float64
	var checkEig mat.EigenSym
	var checkVectors mat.Dense
	// checkBlock reports whether the check's block of T, rows nev..j,
	// has a Ritz value below checkTheta, and whether its smallest has
	// converged (β_j = beta).
	checkBlock := func(j int, beta float64) (lower, converged bool) {
		b := j - nev + 1
		block := mat.NewSymDense(b, tuData[:b*b])
		for r := 0; r < b; r++ {
			for c := r; c < b; c++ {
				block.SetSym(r, c, t.At(nev+r, nev+c))
			}
		}
		if !checkEig.Factorize(block, true) {
			return false, false
		}
		checkVectors.Reset()
		checkEig.VectorsTo(&checkVectors)
		lowest := checkEig.Values(nil)[0]
		return lowest < checkTheta-tol*anorm, math.Abs(beta*checkVectors.At(b-1, 0)) <= tol*anorm
	}
	// keepRitz is how many of the smallest Ritz vectors a thick restart
	// keeps of a block of rows basis vectors of which want are wanted:
	// want + Keep, or by default want + (rows − want)/2, at most rows − 1.
	keepRitz := func(want, rows int) int {
		c := want + (rows-want)/2
		if s.Keep > 0 {
			c = want + s.Keep
		}
		return min(c, rows-1)
	}
	// restart is a thick restart of the b basis rows from row first on:
	// they are replaced by their c smallest Ritz vectors Q·S_{:,<c}
	// (values theta, S = sv) followed by q_m, and T by their block:
	// diagonal, and with Partial the arrow A y_i = θ_i y_i + σ_i q_m,
	// σ_i = β_{m−1} S_{b−1,i} (beta = β_{m−1}), coupling it to q_m (with
	// full reorthogonalisation the extension measures it). Rows before
	// first are left as they are.
	restart := func(first, c, b int, theta []float64, sv *mat.Dense, beta float64) {
		ritzWork = ritzInPlace(q[first*n:], n, b, sv, c, ritzWork)
		copy(q[(first+c)*n:(first+c+1)*n], q[m*n:(m+1)*n])
		for i := first; i < m; i++ {
			for j := i; j < m; j++ {
				t.SetSym(i, j, 0)
			}
		}
		for i := 0; i < c; i++ {
			t.SetSym(first+i, first+i, theta[i])
			if s.Partial {
				t.SetSym(first+i, first+c, beta*sv.At(b-1, i))
			}
		}
		k = first + c
		res.Restarts++
	}
	// finish returns the nev Ritz vectors in the first rows of q as the
	// result, with err; with Partial, converged pairs are verified.
	finish := func(converged bool, err error) (LanczosResult, error) {
		if s.Partial && !orthonormalizeRows(q[:nev*n], nev, n, tuData[:nev*nev]) {
			return res, fmt.Errorf("%w: the %d Ritz vectors found are far from orthonormal", errPartialLost, nev)
		}
		if s.Partial && converged {
			// Verify: the residuals of the vectors themselves, formed in
			// row m (no longer needed).
			bound := (tol + 50*sqrtEps) * anorm
			wAt(m)
			for i := range nev {
				op.Apply(w, q[i*n:(i+1)*n])
				res.Applies++
				blas64.Axpy(-res.Values[i], vec(i), wv)
				res.Residuals[i] = blas64.Nrm2(wv)
				if !(res.Residuals[i] <= bound) {
					return res, fmt.Errorf("%w: pair %d has residual %.3g·‖A‖", errPartialLost, i, res.Residuals[i]/anorm)
				}
			}
		}
		res.Vectors = mat.DenseCopyOf(mat.NewDense(nev, n, q[:nev*n]).T())
		return res, err
	}
	// Partial's estimates: om[i] ≈ q_jᵀq_i, omPrev the same for q_{j−1},
	// omNext for the vector being formed.
	var om, omPrev, omNext []float64
	reorthNext := false // Partial: the next vector gets a full pass
	if s.Partial {
		om, omPrev, omNext = make([]float64, m+1), make([]float64, m+1), make([]float64, m+1)
		om[0] = 1
	}
	for {
		// Extend the basis from k to m vectors.
		last := 0.0 // β of the last step: the coupling to q_m
		used := m
		lostBeta := 0.0 // Partial: largest β left out of T at a breakdown
		for j := k; j < m; j++ {
			wAt(j + 1)
			op.Apply(w, q[j*n:(j+1)*n])
			res.Applies++
			var beta float64
			if !s.Partial {
				extend(j)
				beta = blas64.Nrm2(wv)
				anorm = max(anorm, math.Abs(h[j]), beta)
			} else {
				// After a thick restart the kept Ritz vectors are only as
				// orthogonal as the semi-orthogonal basis they came from,
				// and one pass leaves w that defect times its coupling to
				// them: a second pass squares it.
				whole := j == k || reorthNext
				recur(j, k, last, whole, j == k && k > 0)
				beta = blas64.Nrm2(wv)
				anorm = max(anorm, math.Abs(h[j]), beta)
				triggered := false
				if !whole {
					estimateOverlaps(omNext, om, omPrev, t, h, j, beta, eps1*anorm+lostBeta, h2)
					triggered = exceeds(omNext[k:j+1], sqrtEps)
					if !triggered && k > 0 {
						// The kept Ritz vectors satisfy A y_i = θ_i y_i +
						// σ_i q_k only to the loss of orthogonality of
						// the basis they came from, which the recurrence
						// cannot see: their overlaps are measured
						// instead, half a pass over the k kept rows.
						// (Not when the rows after them already call for
						// a pass: it resets every estimate.)
						kept := blas64.Vector{N: k, Inc: 1, Data: omNext[:k]}
						blas64.Gemv(blas.NoTrans, 1/beta, basis(k), wv, 0, kept)
						triggered = exceeds(omNext[:k], sqrtEps)
					}
				}
				if triggered {
					pass(j+1, false, dropped)
					beta = blas64.Nrm2(wv)
				}
				reorthNext = triggered
				if whole || triggered {
					// A pass leaves overlaps of rounding size relative to
					// what it removed: eps1·‖A‖/β_j, large when w
					// nearly vanished (the Krylov space of the start
					// vector nearly exhausted).
					reset := max(eps1, eps1*anorm/beta)
					for i := 0; i <= j; i++ {
						omNext[i] = reset * roundingSign(i, j, resetSalt)
					}
				}
				omNext[j+1] = 1
				omPrev, om, omNext = om, omNext, omPrev
			}
			for i := 0; i <= j; i++ {
				t.SetSym(i, j, h[i])
			}
			breakdown := beta <= 1e-12*max(anorm, 1e-300)
			if checking && ((j-k+1)%checkEvery == 0 || j+1 == m || j+1 == n || breakdown) {
				lower, converged := checkBlock(j, beta)
				switch {
				case lower:
					// An eigenvalue the converged set missed: go on as
					// a normal extension, and check again after the
					// next convergence, whatever θ_{nev−1} then is (it
					// need not fall if a copy was already in the set).
					checking = false
				case converged || j+1 == n:
					res.Values, res.Residuals = checkValues, checkResiduals
					return finish(true, nil)
				case res.Applies >= maxApply:
					res.Values, res.Residuals = checkValues, checkResiduals
					return finish(true, fmt.Errorf("%w after %d applications: the pairs converged, but the check for eigenvalues they missed did not", ErrNoConvergence, res.Applies))
				}
			}
			if j+1 == n {
				used, last = n, 0
				break
			}
			if breakdown {
				// Invariant subspace: continue with a fresh direction,
				// uncoupled from the basis so far.
				lostBeta = max(lostBeta, beta)
				if !fresh(j + 1) {
					used, last = j+1, 0
					break
				}
				if s.Partial {
					for i := 0; i <= j; i++ {
						om[i] = eps1
					}
					reorthNext = true
				}
				last = 0
				continue
			}
			blas64.Scal(1/beta, wv)
			last = beta
		}

		if checking {
			// The check's extension reached m without a verdict:
			// restart it, keeping the smallest Ritz vectors of its block
			// (its eigendecomposition, from checkBlock at j = m−1, is in
			// checkEig) and q_m, behind the locked rows.
			b := m - nev
			restart(nev, keepRitz(1, b), b, checkEig.Values(nil), &checkVectors, last)
			continue
		}

		// Rayleigh–Ritz on the basis.
		tu := mat.NewSymDense(used, tuData[:used*used])
		for i := 0; i < used; i++ {
			for j := i; j < used; j++ {
				tu.SetSym(i, j, t.At(i, j))
			}
		}
		if !eig.Factorize(tu, true) {
			err := fmt.Errorf("spectral: eigendecomposition of the %d×%d projected matrix failed", used, used)
			if s.Partial {
				err = fmt.Errorf("%w: %w", errPartialLost, err)
			}
			return res, err
		}
		theta := eig.Values(nil)
		eig.VectorsTo(&sv)
		anorm = max(anorm, math.Abs(theta[0]), math.Abs(theta[used-1]))
		res.Residuals = make([]float64, nev)
		done := true
		for i := 0; i < nev; i++ {
			res.Residuals[i] = math.Abs(last * sv.At(used-1, i))
			if res.Residuals[i] > tol*anorm {
				done = false
			}
		}
		// The basis spans R^n (used = n, or no fresh vector was left):
		// the pairs are exact, and nothing is left to check.
		spansAll := used < m || used == n
		check := done && !spansAll && res.Applies < maxApply
		if (done && !check) || res.Applies >= maxApply || spansAll {
			res.Values = theta[:nev]
			ritzInPlace(q, n, used, &sv, nev, ritzWork)
			if !done && !spansAll {
				worst := 0.0
				for _, r := range res.Residuals {
					worst = max(worst, r/anorm)
				}
				return finish(false, fmt.Errorf("%w after %d applications: relative residual %.3g > %.3g", ErrNoConvergence, res.Applies, worst, tol))
			}
			return finish(true, nil)
		}

		// Thick restart: keep the kk smallest Ritz vectors and q_m. A
		// deflation check keeps (locks) the nev converged ones, uncoupled,
		// and draws a fresh vector orthogonal to them in q_m's place.
		kk := keepRitz(nev, m)
		if check {
			kk = nev
			last = 0 // the locked pairs do not couple to the fresh vector
		}
		restart(0, kk, used, theta, &sv, last)
		if check {
			if !fresh(kk) {
				// The nev vectors span R^n.
				res.Values = theta[:nev]
				return finish(true, nil)
			}
			checking, checkTheta = true, theta[nev-1]
			checkValues, checkResiduals = append(checkValues[:0], theta[:nev]...), res.Residuals
		}
	}
}

// minCheckRows is the least number of basis rows beyond the nev wanted:
// the deflation check thick-restarts them behind the locked pairs, and
// with two (keeping one Ritz vector and q_m) it crawled, running out of
// MaxApply on rings and clustered spectra where ten finish.
const minCheckRows = 10

// checkEvery is the number of steps of a deflation check between the
// eigensolves of its tridiagonal block.
const checkEvery = 5

// exceeds reports whether some |x_i| > t.
func exceeds(x []float64, t float64) bool {
	for _, v := range x {
		if math.Abs(v) > t {
			return true
		}
	}
	return false
}

// ritzBlock is the number of columns of the basis ritzInPlace takes at
// a time.
const ritzBlock = 512

// ritzInPlace overwrites the first c rows of q (rows of length n, at
// least used of them, c <= used) with the first c Ritz vectors, as rows,
//
//	y_i = Σ_l S_li q_l  (l < used),
//
// and returns work, grown if needed. Column j of the y_i depends only on
// column j of the q_l, so the product runs on blocks of ritzBlock
// columns, one Dgemm each, kept in work until the block is done: no
// n-long workspace, and the block of the basis (278×512 values, 1.1 MB,
// on the SMT pencil of the Brown corpus) stays in cache. On that pencil
// the products of a solve take at most 0.2 CPU-seconds this way, split
// over two cores, against 0.35 on one as one Gemv per vector (gonum's own
// Dgemm, whose 64-long axpys on 64×64 blocks spend more on loads and
// stores than on arithmetic, was slower still).
func ritzInPlace(q []float64, n, used int, s *mat.Dense, c int, work []float64) []float64 {
	if len(work) < c*ritzBlock {
		work = make([]float64, c*ritzBlock)
	}
	sr := s.RawMatrix()
	a := blas64.General{Rows: used, Cols: c, Stride: sr.Stride, Data: sr.Data}
	for lo := 0; lo < n; lo += ritzBlock {
		w := min(ritzBlock, n-lo)
		b := blas64.General{Rows: used, Cols: w, Stride: n, Data: q[lo : (used-1)*n+lo+w]}
		blas64.Gemm(blas.Trans, blas.NoTrans, 1, a, b, 0, blas64.General{Rows: c, Cols: w, Stride: ritzBlock, Data: work})
		for i := 0; i < c; i++ {
			copy(q[i*n+lo:i*n+lo+w], work[i*ritzBlock:i*ritzBlock+w])
		}
	}
	return work
}

// orthonormalizeRows makes the r rows of length n in y orthonormal by
// one Cholesky QR step, G = Y Yᵀ = L Lᵀ, Y ← L⁻¹ Y, using g (r×r) as
// workspace: for rows already orthonormal to δ ≪ 1, as Partial's Ritz
// vectors are (δ ≈ √u), a Gram–Schmidt rotation of order δ that leaves
// them orthonormal to O(u) (Stathopoulos and Wu, 2002). It reports false,
// leaving y as it was, if G differs from the identity by more than 1e-4
// anywhere (orthogonality was lost, which Partial exists to prevent) or
// is not numerically positive definite.
func orthonormalizeRows(y []float64, r, n int, g []float64) bool {
	yr := blas64.General{Rows: r, Cols: n, Stride: n, Data: y}
	gs := blas64.Symmetric{N: r, Stride: r, Data: g, Uplo: blas.Lower}
	blas64.Syrk(blas.NoTrans, 1, yr, 0, gs)
	for i := range r {
		for j := range i + 1 {
			want := 0.0
			if i == j {
				want = 1
			}
			if math.Abs(g[i*r+j]-want) > 1e-4 {
				return false // far from semi-orthogonal: orthogonality was lost
			}
		}
	}
	l, ok := lapack64.Potrf(gs)
	if !ok {
		return false
	}
	blas64.Trsm(blas.Left, blas.NoTrans, 1, l, yr)
	return true
}

// estimateOverlaps sets next to Partial's estimate of q_{j+1}ᵀq_i,
// i < j (Simon, 1984, eq. 3.2, with T as built, thick-restart arrow
// included),
//
//	ω_{j+1,i} = ((T ω_j)_i − T_jj ω_{j,i} − T_{j−1,j} ω_{j−1,i} ± noise) / β_j,
//
// from cur = ω_j and prev = ω_{j−1}; h holds column j of T (only h[j]
// and h[j−1] are nonzero), t its columns before j, and work has room for
// j values. Entry j, the component the step has just removed, is set to
// noise/β_j; entry j−1 is not removed (the step subtracts T_{j−1,j} q_{j−1},
// not q_{j−1}ᵀA q_j) and follows the recurrence. The noise includes the
// β dropped at any breakdown of the extension: A q_j keeps that
// component along every later vector.
func estimateOverlaps(next, cur, prev []float64, t *mat.SymDense, h []float64, j int, beta, noise float64, work []float64) {
	next[j] = noise / beta
	if j < 1 {
		return
	}
	// (T ω_j)_i over the columns l < j written so far (T_ij is h[i] = 0
	// here for i < j−1).
	raw := t.RawSymmetric()
	raw.N = j
	tw := blas64.Vector{N: j, Inc: 1, Data: work[:j]}
	blas64.Symv(1, raw, blas64.Vector{N: j, Inc: 1, Data: cur[:j]}, 0, tw)
	for i := 0; i < j-1; i++ {
		x := work[i] - h[j]*cur[i] - h[j-1]*prev[i]
		next[i] = (x + roundingSign(i, j, noiseSalt)*noise) / beta
	}
	// i = j−1: the step subtracted T_{j−1,j} q_{j−1}, not q_{j−1}ᵀA q_j, so
	// this overlap is not removed: (α_{j−1} − α_j) ω_{j,j−1} + β_{j−2} ω_{j,j−2}
	// remains (ω_{j,j} = ω_{j−1,j−1} = 1).
	x := work[j-1] - h[j]*cur[j-1]
	next[j-1] = (x + roundingSign(j-1, j, noiseSalt)*noise) / beta
}

// The salts of roundingSign: the noise of a step, the values a pass
// leaves.
const (
	noiseSalt = 0x9e3779b97f4a7c15
	resetSalt = 0xc2b2ae3d27d4eb4f
)

// roundingSign is Partial's sign of the rounding error in entry (i, j)
// of the ω estimates: a fixed pseudo-random ±1, a hash of i, j and salt
// (the finaliser of SplitMix64), so that a solve is deterministic.
// Rounding errors have no preferred sign. A noise term of the estimate's
// own sign (the cautious choice: it always grows |ω|) and resets all of
// one sign excite a single mode of the recurrence, while rounding also grows the
// alternating one (about 3× a step against 2× on a Laplacian of 400
// vertices): overlaps of 1e-6 went unseen until the projected matrix
// held NaN.
func roundingSign(i, j int, salt uint64) float64 {
	z := uint64(i)<<32 ^ uint64(j) ^ salt
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	z ^= z >> 31
	if z&1 == 0 {
		return -1
	}
	return 1
}

// sqrtEps is √u, u = 2⁻⁵³ the unit roundoff: Partial's bound on the
// loss of orthogonality.
var sqrtEps = math.Sqrt(0x1p-53)
