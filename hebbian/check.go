package hebbian

import (
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/smtd/smtd/internal/finite"
)

// Reasons of a failed Check. Every error of Check is a *CheckError
// wrapping one of them.
var (
	// ErrNotFinite means a parameter is NaN or ±Inf (ErrNonFinite is for
	// inputs).
	ErrNotFinite = errors.New("hebbian: parameter is NaN or Inf")
	// ErrNotPositiveDefinite means L + λI is not positive definite, so
	// the responses of eq. 12 do not exist.
	ErrNotPositiveDefinite = errors.New("hebbian: L + λI is not positive definite")
	// ErrAsymmetric means the lateral weights L are not symmetric.
	ErrAsymmetric = errors.New("hebbian: L is not symmetric")
	// ErrCollapsed means the network still holds finite numbers but has
	// degenerated: some or all responses no longer depend on the input.
	ErrCollapsed = errors.New("hebbian: collapsed")
)

// CheckError reports the part of a Network that Check found degenerate,
// in the manner of gonum's optimize.ErrGrad: which part, the first
// offending index and why.
type CheckError struct {
	Part   string // "W", "q", "Q", "L" or "factor"
	Index  int    // the first offending element (row-major) or neuron; −1 for the part as a whole
	Err    error  // ErrNotFinite, ErrNotPositiveDefinite, ErrAsymmetric, ErrCollapsed or ErrDiverged
	Detail string // the numbers behind Err, if any
}

func (e *CheckError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "hebbian: network %s", e.Part)
	if e.Index >= 0 {
		fmt.Fprintf(&b, " at %d", e.Index)
	}
	fmt.Fprintf(&b, ": %s", strings.TrimPrefix(e.Err.Error(), "hebbian: "))
	if e.Detail != "" {
		fmt.Fprintf(&b, " (%s)", e.Detail)
	}
	return b.String()
}

// Unwrap returns the reason, one of the sentinel errors above or
// ErrDiverged.
func (e *CheckError) Unwrap() error { return e.Err }

// lateralSymmetry is the tolerance of L = Lᵀ relative to max |L_ij|. The
// step of eq. 15 adds the symmetric YᵀY/B to a symmetric L, so L stays
// symmetric to rounding.
const lateralSymmetry = 1e-12

// Check reports whether the network is finite and not degenerate; it
// returns nil or a *CheckError naming the part that is not:
//
//   - W, q (Q with Mixing) or L holds NaN or ±Inf, or so does a term
//     derived from W (‖w_i‖², f(w_i, w_i), the Cholesky factor);
//   - L is not symmetric (|L_ij − L_ji| > 10⁻¹² max |L|), or a lateral
//     weight exceeds Settings.MaxLateral, beyond which Step refuses to
//     go (ErrDiverged);
//   - L + λI is not positive definite (a fresh Cholesky factorisation
//     fails): the responses y = (L + λI)⁻¹(q∘f(W, x)) of eq. 12 do not
//     exist;
//   - a regulatory term q_i is zero: neuron i's drive q_i f(w_i, x) is
//     zero whatever x, and its W-step (eq. 10) divides by q_i² (Theorem 1
//     holds for all q, so only zero is degenerate, not a sign). With
//     Mixing, Q is zero: every response is zero.
//
// Check costs O(n·M + n²) to scan the parameters plus n³/3 for the
// Cholesky factorisation of L + λI, the same as the factorisation every
// Step makes; one Step costs O(B·n·M + B·n² + n³).
func (n *Network) Check() error {
	bad := func(part string, i int, err error, detail string) error {
		return &CheckError{Part: part, Index: i, Err: err, Detail: detail}
	}
	if i := finite.Index(n.w.RawMatrix().Data); i >= 0 {
		return bad("W", i, ErrNotFinite, "")
	}
	for _, s := range [][]float64{n.ww, n.self, n.h} {
		if i := finite.Index(s); i >= 0 {
			return bad("W", i, ErrNotFinite, "a term derived from W")
		}
	}
	qpart := "q"
	if n.s.Mixing {
		qpart = "Q"
	}
	if i := finite.Index(n.q); i >= 0 {
		return bad(qpart, i, ErrNotFinite, "")
	}
	if n.s.Mixing {
		zero := true
		for _, v := range n.q {
			if v != 0 {
				zero = false
				break
			}
		}
		if zero {
			return bad("Q", -1, ErrCollapsed, "Q is zero: every response is zero")
		}
	} else {
		for i, v := range n.q {
			if v == 0 {
				return bad("q", i, ErrCollapsed, "q_i = 0: the neuron ignores its input")
			}
		}
	}
	if i := finite.Index(n.l); i >= 0 {
		return bad("L", i, ErrNotFinite, "")
	}
	var big float64
	for _, v := range n.l {
		big = max(big, math.Abs(v))
	}
	if maxL := n.s.maxLateral(); big > maxL {
		return bad("L", -1, ErrDiverged, fmt.Sprintf("a lateral weight of magnitude %g, beyond %g", big, maxL))
	}
	N := n.n
	for i := range N {
		for j := i + 1; j < N; j++ {
			if math.Abs(n.l[i*N+j]-n.l[j*N+i]) > lateralSymmetry*big {
				return bad("L", i*N+j, ErrAsymmetric, "")
			}
		}
	}
	if i := finite.Index(n.fac); i >= 0 {
		return bad("factor", i, ErrNotFinite, "")
	}
	fac := make([]float64, N*N)
	if !factorize(fac, n.l, N, n.s.lambda()) {
		return bad("L", -1, ErrNotPositiveDefinite, fmt.Sprintf("λ = %g", n.s.lambda()))
	}
	return nil
}
