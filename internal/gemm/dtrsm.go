package gemm

import "gonum.org/v1/gonum/blas"

// The panic messages of gonum's Dtrsm that Dgemm does not share.
const (
	badSide = "blas: illegal side"
	badUplo = "blas: illegal triangle"
	badDiag = "blas: illegal diagonal"
)

// trsmLeaf is the largest order of the triangular systems Dtrsm leaves to
// gonum's Dtrsm; larger ones are split in two. At 64 the diagonal blocks
// hold about 64/k of the flops of a system of order k (8% at k = 800).
const trsmLeaf = 64

// Dtrsm solves
//
//	op(A)·X = α·B  (side blas.Left)    or    X·op(A) = α·B  (side blas.Right)
//
// for X, which overwrites B (m×n, row-major with leading dimension ldb).
// A is triangular (upper or lower, unit or non-unit diagonal), of order m
// for side Left and n for side Right. It panics on bad arguments with
// gonum's messages, under the same rules as gonum's Dtrsm.
//
// A system of order k > trsmLeaf is split recursively, A = [A₁₁ A₁₂; 0
// A₂₂] (or its lower counterpart): one half of X is solved first, its
// contribution is taken off the other half of B by one Dgemm, and the
// other half is solved. Almost all of the flops then run in this package's
// product rather than in gonum's row-by-row substitution (Elmroth,
// Gustavson, Jonsson and Kågström, "Recursive blocked algorithms and
// hybrid data structures for dense matrix library software", SIAM Review
// 46(1), 2004). Smaller systems, and α = 0, go to gonum's Dtrsm. The
// result depends only on the sizes, as Dgemm's does.
func (impl Implementation) Dtrsm(s blas.Side, ul blas.Uplo, tA blas.Transpose, d blas.Diag, m, n int, alpha float64, a []float64, lda int, b []float64, ldb int) {
	if s != blas.Left && s != blas.Right {
		panic(badSide)
	}
	if ul != blas.Lower && ul != blas.Upper {
		panic(badUplo)
	}
	if tA != blas.NoTrans && tA != blas.Trans && tA != blas.ConjTrans {
		panic(badTranspose)
	}
	if d != blas.NonUnit && d != blas.Unit {
		panic(badDiag)
	}
	if m < 0 {
		panic(mLT0)
	}
	if n < 0 {
		panic(nLT0)
	}
	k := n
	if s == blas.Left {
		k = m
	}
	if lda < max(1, k) {
		panic(badLdA)
	}
	if ldb < max(1, n) {
		panic(badLdB)
	}
	if m == 0 || n == 0 {
		return
	}
	if len(a) < lda*(k-1)+k {
		panic(shortA)
	}
	if len(b) < ldb*(m-1)+n {
		panic(shortB)
	}
	if best == nil || k <= trsmLeaf || alpha == 0 {
		impl.Implementation.Dtrsm(s, ul, tA, d, m, n, alpha, a, lda, b, ldb)
		return
	}
	if alpha != 1 {
		scale(m, n, alpha, b, ldb)
	}
	impl.trsm(s, ul, tA, d, m, n, a, lda, b, ldb)
}

// trsm is Dtrsm with α = 1 on validated arguments.
func (impl Implementation) trsm(s blas.Side, ul blas.Uplo, tA blas.Transpose, d blas.Diag, m, n int, a []float64, lda int, b []float64, ldb int) {
	k := n
	if s == blas.Left {
		k = m
	}
	if k <= trsmLeaf {
		impl.Implementation.Dtrsm(s, ul, tA, d, m, n, 1, a, lda, b, ldb)
		return
	}
	upper, trans := ul == blas.Upper, tA != blas.NoTrans
	// A₁₁ is k1×k1, A₂₂ k2×k2; the off-diagonal block is A₁₂ (k1×k2,
	// upper) or A₂₁ (k2×k1, lower).
	k1 := roundUp(k/2, 16)
	k2 := k - k1
	a11, a22 := a, a[k1*lda+k1:]
	off := a[k1*lda:]
	if upper {
		off = a[k1:]
	}
	// The block of op(A) off its diagonal is op(off): A₁₂ or A₂₁ itself,
	// or its transpose.
	tOff := blas.NoTrans
	if trans {
		tOff = blas.Trans
	}
	if s == blas.Right {
		// X·op(A) = B by column blocks: [X₁ X₂]·op(A) = [B₁ B₂].
		b1, b2 := b, b[k1:]
		if upper != trans { // op(A) upper: X₁ first, B₂ −= X₁·op(A)₁₂
			impl.trsm(s, ul, tA, d, m, k1, a11, lda, b1, ldb)
			impl.Dgemm(blas.NoTrans, tOff, m, k2, k1, -1, b1, ldb, off, lda, 1, b2, ldb)
			impl.trsm(s, ul, tA, d, m, k2, a22, lda, b2, ldb)
			return
		}
		// op(A) lower: X₂ first, B₁ −= X₂·op(A)₂₁.
		impl.trsm(s, ul, tA, d, m, k2, a22, lda, b2, ldb)
		impl.Dgemm(blas.NoTrans, tOff, m, k1, k2, -1, b2, ldb, off, lda, 1, b1, ldb)
		impl.trsm(s, ul, tA, d, m, k1, a11, lda, b1, ldb)
		return
	}
	// op(A)·X = B by row blocks: op(A)·[X₁; X₂] = [B₁; B₂].
	b1, b2 := b, b[k1*ldb:]
	if upper == trans { // op(A) lower: X₁ first, B₂ −= op(A)₂₁·X₁
		impl.trsm(s, ul, tA, d, k1, n, a11, lda, b1, ldb)
		impl.Dgemm(tOff, blas.NoTrans, k2, n, k1, -1, off, lda, b1, ldb, 1, b2, ldb)
		impl.trsm(s, ul, tA, d, k2, n, a22, lda, b2, ldb)
		return
	}
	// op(A) upper: X₂ first, B₁ −= op(A)₁₂·X₂.
	impl.trsm(s, ul, tA, d, k2, n, a22, lda, b2, ldb)
	impl.Dgemm(tOff, blas.NoTrans, k1, n, k2, -1, off, lda, b2, ldb, 1, b1, ldb)
	impl.trsm(s, ul, tA, d, k1, n, a11, lda, b1, ldb)
}
