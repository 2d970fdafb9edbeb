package online

import (
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/smtd/smtd/internal/finite"
	"gonum.org/v1/gonum/mat"
)

// Reasons of a failed Check. Every error of a Check method is a
// *CheckError wrapping one of them.
var (
	// ErrNonFinite means a value is NaN or ±Inf (KNN has its own ErrNotFinite).
	ErrNonFinite = errors.New("online: NaN or Inf")
	// ErrNegative means a value that is a sum of squares or a count is
	// negative.
	ErrNegative = errors.New("online: negative")
	// ErrAsymmetric means a matrix that is symmetric by construction is
	// not.
	ErrAsymmetric = errors.New("online: not symmetric")
	// ErrNotUnit means an atom that must have unit norm (or be zero) does
	// not.
	ErrNotUnit = errors.New("online: not of unit norm")
	// ErrCollapsed means the learner still holds finite numbers but has
	// degenerated: its output no longer depends on its input.
	ErrCollapsed = errors.New("online: collapsed")
)

// CheckError reports the part of a learner's state that Check found
// degenerate, in the manner of gonum's optimize.ErrGrad: which learner,
// which part, the first offending index and why.
type CheckError struct {
	Learner string // "whitener" or "k-means"
	Part    string // "moments", "operator", "inverse operator", "atoms" or "counts"
	Index   int    // the first offending element (row-major) or atom; −1 for the part as a whole
	Err     error  // ErrNonFinite, ErrNegative, ErrAsymmetric, ErrNotUnit or ErrCollapsed
	Detail  string // the numbers behind Err, if any
}

func (e *CheckError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "online: %s %s", e.Learner, e.Part)
	if e.Index >= 0 {
		fmt.Fprintf(&b, " at %d", e.Index)
	}
	fmt.Fprintf(&b, ": %s", strings.TrimPrefix(e.Err.Error(), "online: "))
	if e.Detail != "" {
		fmt.Fprintf(&b, " (%s)", e.Detail)
	}
	return b.String()
}

// Unwrap returns the reason, one of the sentinel errors above.
func (e *CheckError) Unwrap() error { return e.Err }

// Thresholds of Whitener.Check.
const (
	// whitenCollapse is the factor by which tr W may fall at one refresh.
	whitenCollapse = 100
	// whitenGrowth is the factor by which λ·dim + tr Σ may grow between
	// two refreshes: whitenCollapse², since W scales like (λ + e)^(−1/2).
	whitenGrowth = whitenCollapse * whitenCollapse
	// whitenSymmetry is the tolerance of W = Wᵀ relative to max |W_ij|;
	// Refresh makes W symmetric bit for bit.
	whitenSymmetry = 1e-12
)

// Check reports whether the whitener is finite and not degenerate; it
// returns nil or a *CheckError naming the part that is not:
//
//   - the moments (weight, mean, scatter M) hold NaN or ±Inf, the weight
//     is negative, or a diagonal entry of M, a sum of squares, is
//     negative;
//   - W or W⁻¹ holds NaN or ±Inf;
//   - W is not symmetric (|W_ij − W_ji| > 10⁻¹² max |W|) or has a
//     diagonal entry ≤ 0: W = U diag(1/√(λ+e_k)) Uᵀ is symmetric
//     positive definite;
//   - W collapsed at the last refresh: tr W fell by more than a factor
//     100 from the operator that refresh replaced (comparisons start at
//     the second refresh and restart after a change of λ). Every
//     eigenvalue of W is at most λ^(−1/2) and scales like (λ + e_k)^(−1/2),
//     so such a fall means Σ grew by four orders of magnitude in the
//     directions that carry the signal, and W now maps every normal row
//     to almost zero: all of them look blank after normalisation;
//   - Σ is about to collapse W: λ·dim + tr Σ grew by more than a factor
//     10⁴ since the last refresh (the same collapse, seen before the next
//     refresh makes it; this catches a snapshot taken between the
//     poisoning batch and the refresh).
//
// With the bound of Observe neither collapse can come from a few rows:
// one batch multiplies λ·dim + tr Σ by at most 1 + c², 65 with the
// default c = 8. On data the floor λ·dim is in the units of (pixels in
// [0, 1] with the default λ = 0.1), λ·dim + tr Σ can grow at most
// elevenfold, from a blank stream to patches of full contrast (tr Σ ≤
// dim); none of the thresholds fires on the recorded MNIST, video or
// photograph streams (TestWhitenerCheckAlongStreams). A λ far below the
// variance of the data (10⁻¹² for pixels in [0, 255], say) on a stream
// that starts flat can trip the growth criteria: choose λ in the units
// of Σ, as WhitenSettings.Lambda says.
//
// Check costs O(dim²), about one pass over W, W⁻¹ and Σ: nothing next to
// one Observe (O(rows·dim²)).
func (w *Whitener) Check() error {
	bad := func(part string, i int, err error, detail string) error {
		return &CheckError{Learner: "whitener", Part: part, Index: i, Err: err, Detail: detail}
	}
	n := w.mom.dim
	m := w.mom
	if math.IsNaN(m.weight) || math.IsInf(m.weight, 0) {
		return bad("moments", -1, ErrNonFinite, "weight")
	}
	if m.weight < 0 {
		return bad("moments", -1, ErrNegative, fmt.Sprintf("weight %g", m.weight))
	}
	if i := finite.Index(m.mean); i >= 0 {
		return bad("moments", i, ErrNonFinite, "mean")
	}
	if i := finite.Index(m.scatter); i >= 0 {
		return bad("moments", i, ErrNonFinite, "scatter")
	}
	var tr float64
	for j := range n {
		v := m.scatter[j*n+j]
		if v < 0 {
			return bad("moments", j*n+j, ErrNegative, fmt.Sprintf("scatter diagonal %g", v))
		}
		tr += v
	}
	op, inv := w.op.RawMatrix(), w.inv.RawMatrix()
	if i := finite.Index(op.Data); i >= 0 {
		return bad("operator", i, ErrNonFinite, "")
	}
	if i := finite.Index(inv.Data); i >= 0 {
		return bad("inverse operator", i, ErrNonFinite, "")
	}
	var big float64
	for _, v := range op.Data {
		big = max(big, math.Abs(v))
	}
	for i := range n {
		if d := op.Data[i*op.Stride+i]; !(d > 0) {
			return bad("operator", i*n+i, ErrCollapsed, fmt.Sprintf("diagonal %g: not positive definite", d))
		}
		for j := i + 1; j < n; j++ {
			if math.Abs(op.Data[i*op.Stride+j]-op.Data[j*op.Stride+i]) > whitenSymmetry*big {
				return bad("operator", i*n+j, ErrAsymmetric, "")
			}
		}
	}
	if t := mat.Trace(w.op); w.prevTrace > 0 && t < w.prevTrace/whitenCollapse {
		return bad("operator", -1, ErrCollapsed,
			fmt.Sprintf("tr W fell from %.4g to %.4g at refresh %d", w.prevTrace, t, w.refreshes))
	}
	if w.refScale > 0 && m.weight > 0 {
		now := w.s.lambda()*float64(n) + tr/m.weight
		if now > whitenGrowth*w.refScale {
			return bad("moments", -1, ErrCollapsed,
				fmt.Sprintf("λ·dim + tr Σ grew from %.4g to %.4g since the last refresh", w.refScale, now))
		}
	}
	return nil
}

// kmeansCollapse bounds the mean cosine between distinct atoms of a
// healthy dictionary: above 1 − 10⁻⁶ (all atoms within about 0.1° of
// each other) the dictionary is one direction repeated.
const kmeansCollapse = 1 - 1e-6

// kmeansUnit is the tolerance of ‖φ_j‖² = 1; Learn normalises each atom
// it moves, to within a few units of rounding.
const kmeansUnit = 1e-6

// Check reports whether the dictionary is finite and not degenerate; it
// returns nil or a *CheckError naming the part that is not:
//
//   - an atom holds NaN or ±Inf (Part "atoms", Index the atom);
//   - a seeded atom does not have unit norm (|‖φ_j‖² − 1| > 10⁻⁶), or an
//     atom not yet seeded is not zero: Algorithm 1 (lines 14-18) keeps
//     every atom on the sphere, and the codes are cosines only then;
//   - the atoms collapsed onto one direction: with s > 1 seeded atoms and
//     φ̄ their mean, the mean cosine between distinct atoms,
//     (s‖φ̄‖² − 1)/(s − 1), exceeds 1 − 10⁻⁶, so every patch gets the
//     same code. k-means++ seeds distinct rows and an atom only moves
//     towards the rows it wins, so this needs a stream of one repeated
//     patch;
//   - a count N_j is NaN, ±Inf or negative (Part "counts").
//
// Check costs O(K·Dim), one pass over the atoms: at K = 4096 and Dim =
// 36 about 150 000 multiply-adds, against K·Dim per row of a minibatch
// for Learn.
func (k *KMeans) Check() error {
	bad := func(part string, i int, err error, detail string) error {
		return &CheckError{Learner: "k-means", Part: part, Index: i, Err: err, Detail: detail}
	}
	raw := k.atoms.RawMatrix()
	d := k.s.Dim
	mean := make([]float64, d)
	for j := range k.s.K {
		row := raw.Data[j*raw.Stride : j*raw.Stride+d]
		if finite.Index(row) >= 0 {
			return bad("atoms", j, ErrNonFinite, "")
		}
		var ss float64
		for _, v := range row {
			ss += v * v
		}
		if j >= k.seeded {
			if ss != 0 {
				return bad("atoms", j, ErrNotUnit, fmt.Sprintf("atom not yet seeded has ‖φ‖² = %g", ss))
			}
			continue
		}
		if math.Abs(ss-1) > kmeansUnit {
			return bad("atoms", j, ErrNotUnit, fmt.Sprintf("‖φ‖² = %g", ss))
		}
		for i, v := range row {
			mean[i] += v
		}
	}
	if s := float64(k.seeded); k.seeded > 1 {
		var mm float64
		for _, v := range mean {
			mm += (v / s) * (v / s)
		}
		if c := (s*mm - 1) / (s - 1); c > kmeansCollapse {
			return bad("atoms", -1, ErrCollapsed, fmt.Sprintf("mean cosine between the %d atoms is %.9f", k.seeded, c))
		}
	}
	switch j, negative := finite.NonNegative(k.counts); {
	case negative:
		return bad("counts", j, ErrNegative, fmt.Sprintf("N = %g", k.counts[j]))
	case j >= 0:
		return bad("counts", j, ErrNonFinite, "")
	}
	return nil
}
