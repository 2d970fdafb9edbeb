package gemm

import (
	"sync"

	"gonum.org/v1/gonum/blas"
)

// syrkLeaf is the largest order of the symmetric updates Dsyrk computes
// as one block; larger ones are split in two.
const syrkLeaf = 64

// Dsyrk computes the ul triangle of
//
//	C = α·A·Aᵀ + β·C  (tA blas.NoTrans, A n×k)    or    C = α·Aᵀ·A + β·C  (A k×n)
//
// for the n×n symmetric C (row-major, leading dimension ldc); the other
// triangle is not referenced, and with β = 0 neither is C (NaNs in it do
// not propagate). It panics on bad arguments with gonum's
// messages, under the same rules as gonum's Dsyrk.
//
// An update of order n > syrkLeaf is split in two, C = [C₁₁ C₁₂; C₂₁ C₂₂]:
// the diagonal blocks are updates of half the order, recursively, and the
// block of the triangle off the diagonal is one Dgemm. An update of order
// n ≤ syrkLeaf is one Dgemm of the whole n×n block into a workspace, twice
// the flops of its triangle, of which the triangle is kept: on the packed
// kernels that is still faster than gonum's Dsyrk, which runs row by row
// (BenchmarkDsyrk; a whitening's 36×36 scatter of 16,928 patches,
// BenchmarkObserve in online; a Cholesky factorisation's diagonal blocks). α = 0, k = 0 and CPUs
// without the kernels go to gonum's Dsyrk. The result depends only on the
// sizes, as Dgemm's does.
func (impl Implementation) Dsyrk(ul blas.Uplo, tA blas.Transpose, n, k int, alpha float64, a []float64, lda int, beta float64, c []float64, ldc int) {
	if ul != blas.Lower && ul != blas.Upper {
		panic(badUplo)
	}
	if tA != blas.NoTrans && tA != blas.Trans && tA != blas.ConjTrans {
		panic(badTranspose)
	}
	if n < 0 {
		panic(nLT0)
	}
	if k < 0 {
		panic(kLT0)
	}
	row := k // the length of a row of A
	if tA != blas.NoTrans {
		row = n
	}
	if lda < max(1, row) {
		panic(badLdA)
	}
	if ldc < max(1, n) {
		panic(badLdC)
	}
	if n == 0 {
		return
	}
	if tA == blas.NoTrans {
		if len(a) < lda*(n-1)+k {
			panic(shortA)
		}
	} else if len(a) < lda*(k-1)+n {
		panic(shortA)
	}
	if len(c) < ldc*(n-1)+n {
		panic(shortC)
	}
	if best == nil || alpha == 0 || k == 0 {
		if beta == 0 {
			// β = 0 means C is not read, but gonum's Dsyrk (v0.17)
			// scales the lower triangle of a transposed update by β
			// instead of clearing it, so a NaN there would survive.
			clearTriangle(ul, n, c, ldc)
		}
		impl.Implementation.Dsyrk(ul, tA, n, k, alpha, a, lda, beta, c, ldc)
		return
	}
	impl.syrk(ul, tA != blas.NoTrans, n, k, alpha, a, lda, beta, c, ldc)
}

// syrk is Dsyrk on validated arguments with α ≠ 0 and k > 0: trans says
// A is k×n (C = α·Aᵀ·A + β·C).
func (impl Implementation) syrk(ul blas.Uplo, trans bool, n, k int, alpha float64, a []float64, lda int, beta float64, c []float64, ldc int) {
	if n <= syrkLeaf {
		impl.syrkBlock(ul, trans, n, k, alpha, a, lda, beta, c, ldc)
		return
	}
	// With C = α·B·Bᵀ + β·C (B = A, or Aᵀ), B₁ is the first n1 rows of B
	// and B₂ the others: C₁₁ and C₂₂ are updates of half the order, and
	// C₁₂ = α·B₁·B₂ᵀ + β·C₁₂ (upper) or C₂₁ = α·B₂·B₁ᵀ + β·C₂₁ (lower).
	n1 := roundUp(n/2, 16)
	n2 := n - n1
	a2 := a[n1:]
	if !trans {
		a2 = a[n1*lda:]
	}
	impl.syrk(ul, trans, n1, k, alpha, a, lda, beta, c, ldc)
	impl.syrk(ul, trans, n2, k, alpha, a2, lda, beta, c[n1*ldc+n1:], ldc)
	tFirst, tSecond := outerTransposes(trans)
	if ul == blas.Upper {
		impl.Dgemm(tFirst, tSecond, n1, n2, k, alpha, a, lda, a2, lda, beta, c[n1:], ldc)
		return
	}
	impl.Dgemm(tFirst, tSecond, n2, n1, k, alpha, a2, lda, a, lda, beta, c[n1*ldc:], ldc)
}

// syrkBlocks holds the workspaces of syrkBlock, syrkLeaf² values at most.
var syrkBlocks = sync.Pool{New: func() any { return new([]float64) }}

// syrkBlock is syrk for n ≤ syrkLeaf: S = α·B·Bᵀ by one Dgemm into a
// workspace, then the ul triangle of C set to S + β·C (to S for β = 0,
// without reading C).
func (impl Implementation) syrkBlock(ul blas.Uplo, trans bool, n, k int, alpha float64, a []float64, lda int, beta float64, c []float64, ldc int) {
	w := syrkBlocks.Get().(*[]float64)
	defer syrkBlocks.Put(w)
	*w = grow(*w, n*n)
	s := *w
	tFirst, tSecond := outerTransposes(trans)
	impl.Dgemm(tFirst, tSecond, n, n, k, alpha, a, lda, a, lda, 0, s, n)
	for i := range n {
		lo, hi := i, n
		if ul == blas.Lower {
			lo, hi = 0, i+1
		}
		dst, src := c[i*ldc+lo:i*ldc+hi], s[i*n+lo:i*n+hi]
		if beta == 0 {
			copy(dst, src)
			continue
		}
		for j, v := range src {
			dst[j] = v + beta*dst[j]
		}
	}
}

// outerTransposes returns the transposes that make Dgemm compute B·Bᵀ
// from A: (NoTrans, Trans) for B = A, n×k, and (Trans, NoTrans) for
// B = Aᵀ, A k×n.
func outerTransposes(trans bool) (blas.Transpose, blas.Transpose) {
	if trans {
		return blas.Trans, blas.NoTrans
	}
	return blas.NoTrans, blas.Trans
}

// clearTriangle sets the ul triangle of the n×n matrix c to zero.
func clearTriangle(ul blas.Uplo, n int, c []float64, ldc int) {
	for i := range n {
		if ul == blas.Upper {
			clear(c[i*ldc+i : i*ldc+n])
		} else {
			clear(c[i*ldc : i*ldc+i+1])
		}
	}
}
