package sgd

import (
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/smtd/smtd/internal/finite"
	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas64"
	"gonum.org/v1/gonum/mat"
)

// Reasons of a failed Check. Every error of a Check method is a
// *CheckError wrapping one of them.
var (
	// ErrNonFinite means a value is NaN or ±Inf.
	ErrNonFinite = errors.New("sgd: NaN or Inf")
	// ErrNegative means a count, a weight or a sum of squares is
	// negative.
	ErrNegative = errors.New("sgd: negative")
	// ErrNotUnit means a vector that must have unit norm (or be zero)
	// does not.
	ErrNotUnit = errors.New("sgd: not of unit norm")
	// ErrCollapsed means the learner still holds finite numbers but has
	// degenerated: its output no longer depends on its input.
	ErrCollapsed = errors.New("sgd: collapsed")
)

// CheckError reports the part of a learner's state that Check found
// degenerate, in the manner of gonum's optimize.ErrGrad: which learner,
// which part, the first offending index and why.
type CheckError struct {
	Learner string // "stats", "SMT", "word stats", "word vectors" or "ADMM"
	Part    string // e.g. "V", "L", "weights", "P", "W", "sums", "dictionary"
	Index   int    // the first offending element or row; −1 for the part as a whole
	Err     error  // ErrNonFinite, ErrNegative, ErrNotUnit or ErrCollapsed
	Detail  string // the numbers behind Err, if any
}

func (e *CheckError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "sgd: %s %s", e.Learner, e.Part)
	if e.Index >= 0 {
		fmt.Fprintf(&b, " at %d", e.Index)
	}
	fmt.Fprintf(&b, ": %s", strings.TrimPrefix(e.Err.Error(), "sgd: "))
	if e.Detail != "" {
		fmt.Fprintf(&b, " (%s)", e.Detail)
	}
	return b.String()
}

// Unwrap returns the reason, one of the sentinel errors above.
func (e *CheckError) Unwrap() error { return e.Err }

// checker builds the errors of one learner's Check.
type checker string

func (c checker) fail(part string, i int, err error, detail string) error {
	return &CheckError{Learner: string(c), Part: part, Index: i, Err: err, Detail: detail}
}

// finiteAll checks that s is finite.
func (c checker) finiteAll(part string, s []float64) error {
	if i := finite.Index(s); i >= 0 {
		return c.fail(part, i, ErrNonFinite, "")
	}
	return nil
}

// counts checks that s is finite and non-negative.
func (c checker) counts(part string, s []float64) error {
	switch i, negative := finite.NonNegative(s); {
	case negative:
		return c.fail(part, i, ErrNegative, fmt.Sprintf("%g", s[i]))
	case i >= 0:
		return c.fail(part, i, ErrNonFinite, "")
	}
	return nil
}

// scalars checks named weights that must be finite and non-negative;
// the part is named by the weight that fails.
func (c checker) scalars(names []string, vals ...float64) error {
	for i, v := range vals {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return c.fail(names[i], -1, ErrNonFinite, "")
		}
		if v < 0 {
			return c.fail(names[i], -1, ErrNegative, fmt.Sprintf("%g", v))
		}
	}
	return nil
}

// factor checks the lazy forgetting factor g, finite and positive.
func (c checker) factor(g float64) error {
	switch {
	case math.IsNaN(g) || math.IsInf(g, 0):
		return c.fail("weights", -1, ErrNonFinite, "forgetting factor")
	case g <= 0:
		return c.fail("weights", -1, ErrNegative, fmt.Sprintf("forgetting factor %g", g))
	}
	return nil
}

// Check reports whether the statistics are finite and consistent; it
// returns nil or a *CheckError naming the part that is not:
//
//   - the lazy forgetting factor g is not finite and positive, or a
//     weight (counted rows, columns of D) is NaN, ±Inf or negative
//     (Part "weights");
//   - V = A Aᵀ or L = A D Dᵀ Aᵀ (sparse-manifold-transform, eq. 12, in
//     the normalisation of Stats) holds NaN or ±Inf, or a diagonal entry
//     of either is negative: diag V counts the uses of each atom and
//     diag L is Σ (A d)², both sums of non-negative terms (Parts "V" and
//     "L", Index into the diagonal, or into the packed strict upper
//     triangle for the off-diagonal entries).
//
// Check costs one pass over the stored triangles, O(Size()²), the memory
// the statistics occupy; at K = 4096 with multi-hot codes about 17 M
// float64s, which is of the order of one dense MulV.
func (st *Stats) Check() error {
	c := checker("stats")
	if err := c.factor(st.g); err != nil {
		return err
	}
	if err := c.scalars([]string{"weights", "weights"}, st.w, st.wp); err != nil {
		return err
	}
	if err := c.counts("V", st.vd); err != nil {
		return err
	}
	if err := c.finiteAll("V", st.vo.v); err != nil {
		return err
	}
	if err := c.counts("L", st.ld); err != nil {
		return err
	}
	return c.finiteAll("L", st.lo.v)
}

// smtRank is the bound below which λ_min(PPᵀ)/λ_max(PPᵀ) counts as
// rank-collapsed: the singular values of P then span more than six
// orders of magnitude, beyond the spread √(max V_jj/min V_jj) the
// constraint PVPᵀ = I allows on any stream we measured (a few hundred).
const smtRank = 1e-12

// Check reports whether P is finite and of full rank; it returns nil or a
// *CheckError (Part "P") saying why not:
//
//   - an entry of P holds NaN or ±Inf (Index the atom, a column of P);
//   - P is zero: every patch would embed to zero;
//   - P is rank-collapsed: the Dim×Dim Gram matrix PPᵀ has
//     λ_min ≤ 10⁻¹² λ_max, so the embeddings of all atoms lie (to double
//     precision) in fewer than Dim dimensions, at worst all parallel.
//     The constraint PVPᵀ = I of sparse-manifold-transform, eq. 12, holds
//     after every step and keeps P of rank Dim; a P that loses it embeds
//     every patch along the same few directions.
//
// Check costs O(Size()·Dim²) for PPᵀ and O(Dim³) for its eigenvalues:
// at K = 4096 and Dim = 32 about 4 M multiply-adds, less than the
// orthogonalisation of one step, which forms PVPᵀ.
func (m *SMT) Check() error {
	c := checker("SMT")
	raw := m.pt.RawMatrix()
	for a := range m.n {
		if finite.Index(raw.Data[a*raw.Stride:a*raw.Stride+m.s.Dim]) >= 0 {
			return c.fail("P", a, ErrNonFinite, "")
		}
	}
	var gram mat.SymDense
	gram.ReuseAsSym(m.s.Dim)
	g := gram.RawSymmetric()
	blas64.Syrk(blas.Trans, 1, raw, 0, g)
	if mat.Trace(&gram) == 0 {
		return c.fail("P", -1, ErrCollapsed, "P is zero")
	}
	var eig mat.EigenSym
	if !eig.Factorize(&gram, false) {
		return c.fail("P", -1, ErrNonFinite, "eigenvalues of PPᵀ")
	}
	vals := eig.Values(nil)
	lo, hi := vals[0], vals[len(vals)-1]
	if lo <= smtRank*hi {
		return c.fail("P", -1, ErrCollapsed,
			fmt.Sprintf("PPᵀ has eigenvalues from %.3g to %.3g: rank below %d", lo, hi, m.s.Dim))
	}
	return nil
}

// Check reports whether the word statistics are finite and consistent;
// it returns nil or a *CheckError naming the part that is not:
//
//   - the forgetting factor g is not finite and positive, or a weight
//     (counted tokens, neighbouring pairs) is NaN, ±Inf or negative
//     (Part "weights");
//   - a slot's count c_a, the diagonal of V, is NaN, ±Inf or negative
//     (Part "V", Index the slot);
//   - a stored co-occurrence C_ab, an entry of the neighbour term, is
//     NaN, ±Inf or negative (Part "pairs", Index the table slot).
//
// Check costs one pass over the counts and the pair table, O(Words +
// table size): the memory the statistics occupy.
func (ws *WordStats) Check() error {
	c := checker("word stats")
	if err := c.factor(ws.g); err != nil {
		return err
	}
	if err := c.scalars([]string{"weights", "weights"}, ws.w, ws.wp); err != nil {
		return err
	}
	if err := c.counts("V", ws.vd); err != nil {
		return err
	}
	for i := range ws.tab {
		p := &ws.tab[i]
		if p.key == 0 {
			continue
		}
		if math.IsNaN(p.w) || math.IsInf(p.w, 0) {
			return c.fail("pairs", i, ErrNonFinite, "")
		}
		if p.w < 0 {
			return c.fail("pairs", i, ErrNegative, fmt.Sprintf("%g", p.w))
		}
	}
	return nil
}

// wordUnit is the tolerance of ‖v‖² = 1 for a used word vector.
const wordUnit = 1e-9

// wordCollapse bounds the mean cosine between distinct used word vectors
// of a healthy solve (see WordVectors.Check).
const wordCollapse = 1 - 1e-6

// Check reports whether the word vectors, the result of a solve of
// WordStats.Embed, are finite and not degenerate; it returns nil or a
// *CheckError (Part "vectors", Index the slot) saying why not:
//
//   - a vector holds NaN or ±Inf (a solve that diverged);
//   - a used vector does not have unit norm, or an unused one is not
//     zero;
//   - with Dim > 1 and more than one used slot, the vectors collapsed onto
//     one direction: the mean cosine between distinct used vectors,
//     (u‖v̄‖² − 1)/(u − 1) for u used vectors of mean v̄, exceeds
//     1 − 10⁻⁶, so every word has the same neighbours. The columns of
//     P of a generalized eigenproblem are V-orthonormal, which keeps the
//     rows (the words) apart on any real corpus.
//
// Check costs one pass over the vectors stored (of the slots whose
// column of P is not zero).
func (wv *WordVectors) Check() error {
	c := checker("word vectors")
	dim := wv.dim
	mean := make([]float64, dim)
	used := 0
	for i, a := range wv.slots {
		row := wv.unit.RawRowView(i)
		if finite.Index(row) >= 0 {
			return c.fail("vectors", a, ErrNonFinite, "")
		}
		var ss float64
		for _, v := range row {
			ss += v * v
		}
		switch {
		case !wv.used[a] && ss != 0:
			return c.fail("vectors", a, ErrNotUnit, fmt.Sprintf("unused slot has ‖v‖² = %g", ss))
		case wv.used[a] && math.Abs(ss-1) > wordUnit:
			return c.fail("vectors", a, ErrNotUnit, fmt.Sprintf("‖v‖² = %g", ss))
		}
		if wv.used[a] {
			used++
			for j, v := range row {
				mean[j] += v
			}
		}
	}
	if u := float64(used); dim > 1 && used > 1 {
		var mm float64
		for _, v := range mean {
			mm += (v / u) * (v / u)
		}
		if cos := (u*mm - 1) / (u - 1); cos > wordCollapse {
			return c.fail("vectors", -1, ErrCollapsed, fmt.Sprintf("mean cosine between the %d used vectors is %.9f", used, cos))
		}
	}
	return nil
}

// Check reports whether the learner is finite and not degenerate; it
// returns nil or a *CheckError naming the part that is not:
//
//   - W (eq. 6; its rows are the atoms) holds NaN or ±Inf (Part "W",
//     Index the atom), or is zero: every code would then be zero;
//   - G = WWᵀ or its largest eigenvalue L, from which the Z-step takes
//     its step 1/L, is NaN, ±Inf or negative (Part "G");
//   - a running sum of the implicit dictionary or of R² (Σ z, Σ z zᵀ,
//     Σ z xᵀ, Σ x, the weights T, Σ‖x‖² and Σ‖x − x̂‖²) holds NaN or
//     ±Inf, or a weight, a sum of squares or a diagonal entry of Σ z zᵀ
//     is negative (Part "sums");
//   - the implicit dictionary Aᵀ = H⁻¹ (Σ z xᵀ/T) is zero although
//     samples were learned (T > 0): every code the sums remember is
//     zero, so the sparse prior's threshold silences every atom (Part
//     "dictionary").
//
// Check costs O(K² + K·N), one pass over W, G and the sums: less than
// one W-step.
func (a *ADMM) Check() error {
	c := checker("ADMM")
	k, n := a.s.K, a.dim
	wr := a.w.RawMatrix()
	var ww float64
	for i := range k {
		row := wr.Data[i*wr.Stride : i*wr.Stride+n]
		if finite.Index(row) >= 0 {
			return c.fail("W", i, ErrNonFinite, "")
		}
		for _, v := range row {
			ww += v * v
		}
	}
	if ww == 0 {
		return c.fail("W", -1, ErrCollapsed, "W is zero")
	}
	if err := c.finiteAll("G", a.g.RawMatrix().Data); err != nil {
		return err
	}
	if math.IsNaN(a.lip) || math.IsInf(a.lip, 0) || a.lip < 0 {
		return c.fail("G", -1, ErrNonFinite, fmt.Sprintf("largest eigenvalue %g", a.lip))
	}
	names := []string{"sums", "sums", "sums", "sums"}
	if err := c.scalars(names, a.n, a.rn, a.rxx, a.rse); err != nil {
		return err
	}
	for _, s := range [][]float64{a.sz, a.rx, a.szz.RawMatrix().Data, a.szx.RawMatrix().Data} {
		if err := c.finiteAll("sums", s); err != nil {
			return err
		}
	}
	for i := range k {
		if v := a.szz.At(i, i); v < 0 {
			return c.fail("sums", i, ErrNegative, fmt.Sprintf("Σ z_i² = %g", v))
		}
	}
	if a.n > 0 {
		for _, v := range a.szx.RawMatrix().Data {
			if v != 0 {
				return nil
			}
		}
		return c.fail("dictionary", -1, ErrCollapsed, fmt.Sprintf("every code of %.4g samples is zero", a.n))
	}
	return nil
}
