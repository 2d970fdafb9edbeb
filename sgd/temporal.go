package sgd

import (
	"fmt"
	"math"

	"gonum.org/v1/gonum/mat"

	"github.com/smtd/smtd/online"
)

// The second-order temporal term of sparse-manifold-transform, eq. 7-8,
// for the frames of a video stream (or any sequence of codes of the same
// positions): D has one column per frame t that has both neighbours,
// with D_{t−1,t} = −½, D_{t,t} = 1, D_{t+1,t} = −½, so each patch
// position p of frame t gives the column
//
//	A·d = α_t,p − ½α_{t−1,p} − ½α_{t+1,p},
//
// zero when the code moves linearly in time (eq. 7: Pα_t ≈ ½Pα_{t−1} +
// ½Pα_{t+1}). The caller keeps the codes of the last two frames of each
// stream and passes the triple once the third frame has arrived; the
// positions of several frames (or of several streams) may be laid end to
// end in one call, since each row only meets the same row of the other
// two frames.

// AddTemporalVQ adds the second-order temporal term of one frame of a
// video stream (sparse-manifold-transform, eq. 7-8): prev, cur and next
// hold the f_vq codes of the same patch positions in frames t−1, t and
// t+1, and each position p adds the column
//
//	A·d = α_t,p − ½α_{t−1,p} − ½α_{t+1,p}
//
// to L, and α_t,p to V. With BlankSkip a position where any of the three
// codes is blank adds nothing to L. The caller keeps the codes of the
// last two frames of each stream and calls this once per frame that has
// both neighbours.
//
// It panics with mat.ErrShape if the three slices differ in length.
func (st *Stats) AddTemporalVQ(prev, cur, next []int) {
	n := len(cur)
	if len(prev) != n || len(next) != n {
		panic(mat.ErrShape)
	}
	st.cat = append(append(append(st.cat[:0], prev...), cur...), next...)
	st.c.fromVQ(st.cat, st.s.K, st.s.Blank)
	counted := 0
	for p := 0; p < n; p++ {
		if !st.c.empty(n + p) {
			counted++
		}
	}
	if counted == 0 {
		return
	}
	st.forget(counted)
	st.resetDegrees()
	inv := 1 / st.g
	for p := 0; p < n; p++ {
		st.addV(n+p, inv)
	}
	if !st.s.VOnly {
		for p := 0; p < n; p++ {
			if st.c.empty(p) || st.c.empty(n+p) || st.c.empty(2*n+p) {
				continue
			}
			st.u.reset()
			st.u.addRow(st.c.row(n+p), 1, &st.tmp)
			st.u.addRow(st.c.row(p), -0.5, &st.tmp)
			st.u.addRow(st.c.row(2*n+p), -0.5, &st.tmp)
			st.addOuter(&st.u, inv)
			st.bp++
		}
	}
	st.commit(counted, inv)
}

// AddTemporalGQ is AddTemporalVQ for weighted sparse codes: prev, cur and
// next hold one code per patch position of frames t−1, t and t+1, and
// the values in Cos are the code's coefficients,
//
//	α_p = Σ_k Cos[k]·e_{Index[k]},   k in [Ptr[p], Ptr[p+1]),
//
// so that, unlike AddImagesGQ, which treats f_gq codes as binary, the
// statistics are
//
//	V += α_t,p α_t,pᵀ   (V_aa = E[α_a²], E[α_a] for binary codes)
//	L += u uᵀ,   u = α_t,p − ½α_{t−1,p} − ½α_{t+1,p}.
//
// Local interpolation codes (non-negative weights summing to one, as in
// the unit-disc demonstration of sparse-manifold-transform, section 2;
// `smtd bench disc`) and the cosines of online.KMeans.CodesGQ (a graded
// f_gq) are both meant; binary f_gq codes need their Cos set to one. An empty code is blank: the blank atom with coefficient 1 under
// BlankAtom; under BlankSkip it is not counted in V and a position where
// any of the three codes is blank adds nothing to L. Codes with more than
// one atom need MultiHot statistics.
//
// It panics with mat.ErrShape if the three codes differ in Rows, have
// Atoms != K or fewer Ptr, Index or Cos entries than Rows needs, and if
// an atom is out of range, the atoms of a code are not increasing, a
// coefficient is not finite, or a code has several atoms without
// MultiHot.
func (st *Stats) AddTemporalGQ(prev, cur, next *online.SparseCodes) {
	n := checkTemporalGQ(prev, cur, next, st.s.K)
	k, blank := st.s.K, st.s.Blank
	counted := 0
	for p := 0; p < n; p++ {
		atoms, _ := cur.Row(p)
		if len(atoms) > 1 && !st.s.MultiHot {
			panic("sgd: multi-hot codes need StatsSettings.MultiHot")
		}
		if len(atoms) > 0 || blank == BlankAtom {
			counted++
		}
	}
	if counted == 0 {
		return
	}
	st.forget(counted)
	st.resetDegrees()
	inv := 1 / st.g
	for p := 0; p < n; p++ {
		var b blankCode
		atoms, vals := b.row(cur, p, k, blank)
		for i, a := range atoms {
			wa := vals[i] * inv
			st.vd[a] += wa * vals[i]
			for j := i + 1; j < len(atoms); j++ {
				st.vo.v[st.vo.at(a, atoms[j])] += wa * vals[j]
			}
		}
	}
	if !st.s.VOnly {
		for p := 0; p < n; p++ {
			if !temporalColumnGQ(&st.u, &st.tmp, prev, cur, next, p, k, blank) {
				continue
			}
			st.addOuter(&st.u, inv)
			st.bp++
		}
	}
	st.commit(counted, inv)
}

// StepTemporalVQ takes one SGD step with the second-order temporal term
// of one frame, the codes laid out as for Stats.AddTemporalVQ. Add the
// frame to st first, so that V includes it.
//
// It returns a *StepError, leaving P unchanged, if the step would make P
// non-finite or PVPᵀ singular. It panics with mat.ErrShape if the three
// slices differ in length, and if st has another K or Blank or a code is
// out of range.
func (m *SMT) StepTemporalVQ(st *Stats, prev, cur, next []int) error {
	m.checkStats(st)
	n := len(cur)
	if len(prev) != n || len(next) != n {
		panic(mat.ErrShape)
	}
	m.cat = append(append(append(m.cat[:0], prev...), cur...), next...)
	m.c.fromVQ(m.cat, m.s.K, m.s.Blank)
	m.startGradient()
	var cols int64
	for p := 0; p < n; p++ {
		if m.c.empty(p) || m.c.empty(n+p) || m.c.empty(2*n+p) {
			continue
		}
		m.u.reset()
		m.u.addRow(m.c.row(n+p), 1, &m.tmp)
		m.u.addRow(m.c.row(p), -0.5, &m.tmp)
		m.u.addRow(m.c.row(2*n+p), -0.5, &m.tmp)
		m.addColumnGradient()
		cols++
	}
	return m.finishStep(st, cols)
}

// StepTemporalGQ takes one SGD step with the second-order temporal term
// of weighted sparse codes, laid out and weighted as for
// Stats.AddTemporalGQ: with u_p = α_t,p − ½α_{t−1,p} − ½α_{t+1,p},
//
//	P L_b = (1/M) Σ_p (P u_p) u_pᵀ,
//
// M the number of positions with a column, computed from the codes in
// O(Dim·nnz(u_p)) per position. Add the frame to st first, so that V
// includes it. Codes with more than one atom need MultiHot statistics (V
// is then factorised at every step, see SMT).
//
// It returns a *StepError, leaving P unchanged, if the step would make P
// non-finite or PVPᵀ singular. It panics as Stats.AddTemporalGQ does on
// bad codes, and if st has another K or Blank.
func (m *SMT) StepTemporalGQ(st *Stats, prev, cur, next *online.SparseCodes) error {
	m.checkStats(st)
	n := checkTemporalGQ(prev, cur, next, m.s.K)
	if !st.s.MultiHot {
		for _, c := range [...]*online.SparseCodes{prev, cur, next} {
			for p := 0; p < n; p++ {
				if c.Ptr[p+1]-c.Ptr[p] > 1 {
					panic("sgd: multi-hot codes need StatsSettings.MultiHot")
				}
			}
		}
	}
	m.startGradient()
	var cols int64
	for p := 0; p < n; p++ {
		if !temporalColumnGQ(&m.u, &m.tmp, prev, cur, next, p, m.s.K, m.s.Blank) {
			continue
		}
		m.addColumnGradient()
		cols++
	}
	return m.finishStep(st, cols)
}

// addColumnGradient adds (P·u)uᵀ, transposed, to m.gt for the column
// u = m.u: β_u = Σ_k u_k p_k, added times u_k to row u_k of m.gt.
func (m *SMT) addColumnGradient() {
	pr, gr := m.pt.RawMatrix(), m.gt.RawMatrix()
	dim := m.s.Dim
	m.diff = grow(m.diff, dim)
	clear(m.diff)
	for k, a := range m.u.idx {
		axpy(m.diff, m.u.val[k], pr.Data[a*pr.Stride:a*pr.Stride+dim])
	}
	for k, a := range m.u.idx {
		axpy(gr.Data[a*gr.Stride:a*gr.Stride+dim], m.u.val[k], m.diff)
	}
}

// checkTemporalGQ panics unless prev, cur and next are valid codes of k
// atoms with the same number of rows, which it returns.
func checkTemporalGQ(prev, cur, next *online.SparseCodes, k int) int {
	n := cur.Rows
	for _, c := range [...]*online.SparseCodes{prev, cur, next} {
		if c.Rows != n || c.Atoms != k || len(c.Ptr) < n+1 {
			panic(mat.ErrShape)
		}
		if c.Ptr[0] != 0 || len(c.Index) < c.Ptr[n] || len(c.Cos) < c.Ptr[n] {
			panic(mat.ErrShape)
		}
		for p := 0; p < n; p++ {
			if c.Ptr[p+1] < c.Ptr[p] {
				panic(mat.ErrShape)
			}
			atoms, vals := c.Row(p)
			for i, a := range atoms {
				if a < 0 || a >= k || (i > 0 && a <= atoms[i-1]) {
					panic(fmt.Sprintf("sgd: code of row %d: atom %d out of range [0, %d) or not increasing", p, a, k))
				}
				if math.IsNaN(vals[i]) || math.IsInf(vals[i], 0) {
					panic(fmt.Sprintf("sgd: code of row %d: coefficient %v of atom %d is not finite", p, vals[i], a))
				}
			}
		}
	}
	return n
}

// blankCode holds the code of a blank row under BlankAtom, so that row
// needs no allocation.
type blankCode struct {
	idx [1]int
	val [1]float64
}

// row returns the atoms and coefficients of row p of c: its own, or the
// blank atom k with coefficient 1 for an empty code under BlankAtom
// (nothing under BlankSkip).
func (b *blankCode) row(c *online.SparseCodes, p, k int, blank BlankMode) ([]int, []float64) {
	atoms, vals := c.Row(p)
	if len(atoms) == 0 && blank == BlankAtom {
		b.idx[0], b.val[0] = k, 1
		return b.idx[:], b.val[:]
	}
	return atoms, vals
}

// temporalColumnGQ writes into u the column α_t,p − ½α_{t−1,p} − ½α_{t+1,p}
// of the weighted codes and reports whether position p has one (under
// BlankSkip, not if any of the three codes is blank).
func temporalColumnGQ(u, tmp *spvec, prev, cur, next *online.SparseCodes, p, k int, blank BlankMode) bool {
	var bp, bc, bn blankCode
	pa, pv := bp.row(prev, p, k, blank)
	ca, cv := bc.row(cur, p, k, blank)
	na, nv := bn.row(next, p, k, blank)
	if blank == BlankSkip && (len(pa) == 0 || len(ca) == 0 || len(na) == 0) {
		return false
	}
	u.reset()
	u.addScaled(ca, cv, 1, tmp)
	u.addScaled(pa, pv, -0.5, tmp)
	u.addScaled(na, nv, -0.5, tmp)
	return true
}

// addScaled adds w·α to v for the code with the given atoms (increasing)
// and coefficients (nil: all 1, a binary code), keeping the indices
// increasing and dropping entries that cancel to exactly zero.
func (v *spvec) addScaled(atoms []int, vals []float64, w float64, tmp *spvec) {
	coef := func(j int) float64 {
		if vals == nil {
			return w
		}
		return w * vals[j]
	}
	tmp.reset()
	i, j := 0, 0
	for i < len(v.idx) || j < len(atoms) {
		switch {
		case j == len(atoms) || (i < len(v.idx) && v.idx[i] < atoms[j]):
			tmp.idx = append(tmp.idx, v.idx[i])
			tmp.val = append(tmp.val, v.val[i])
			i++
		case i == len(v.idx) || atoms[j] < v.idx[i]:
			tmp.idx = append(tmp.idx, atoms[j])
			tmp.val = append(tmp.val, coef(j))
			j++
		default:
			if s := v.val[i] + coef(j); s != 0 {
				tmp.idx = append(tmp.idx, v.idx[i])
				tmp.val = append(tmp.val, s)
			}
			i++
			j++
		}
	}
	v.idx, tmp.idx = tmp.idx, v.idx
	v.val, tmp.val = tmp.val, v.val
}
