package gemm

import (
	"runtime"
	"sync"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/gonum"
)

// parGemv is the number of elements of A that each goroutine of a split
// Dgemv reads at least: 512 KiB, about 25 µs of one core streaming from
// the L3 cache, so that starting a goroutine (a microsecond) costs a few
// percent at most.
const parGemv = 1 << 16

// gemvRows and gemvCols are the multiples at which a split Dgemv cuts A:
// gonum's kernels take the rows of A by fours (NoTrans) and its columns
// by up to eight (Trans), so cutting at these multiples leaves every
// element of y computed by the same operations in the same order as
// without the split.
const (
	gemvRows = 4
	gemvCols = 8
)

// Dgemv computes
//
//	y = α·A·x + β·y   if tA == blas.NoTrans,
//	y = α·Aᵀ·x + β·y  otherwise,
//
// with A m×n row-major, as gonum's Dgemv does and to the same bits: a
// product that reads at least 2·parGemv elements of A, with unit
// increments, is split over up to GOMAXPROCS goroutines by blocks of y
// (rows of A for NoTrans, columns for Trans), each computed by gonum's
// Dgemv. Such products are reads of megabytes, bound by memory: on the
// two-core AMD EPYC (Zen 5, 16 MB L3) of BENCHMARKS.md a pass over a
// Lanczos basis of 278 × 8,471 (BenchmarkDgemvBasis, 18.8 MB, more than
// the L3 holds) takes 1.4 instead of 2.5 ms on both cores, while one of
// 137 rows (9.3 MB) takes as long split as not.
// Arguments gonum rejects go to gonum's Dgemv, which panics with its
// messages.
func (Implementation) Dgemv(tA blas.Transpose, m, n int, alpha float64, a []float64, lda int, x []float64, incX int, beta float64, y []float64, incY int) {
	dgemv(runtime.GOMAXPROCS(0), tA, m, n, alpha, a, lda, x, incX, beta, y, incY)
}

// dgemv is Dgemv on at most procs goroutines.
func dgemv(procs int, tA blas.Transpose, m, n int, alpha float64, a []float64, lda int, x []float64, incX int, beta float64, y []float64, incY int) {
	lenX, lenY, unit := n, m, gemvRows
	if tA != blas.NoTrans {
		lenX, lenY, unit = m, n, gemvCols
	}
	workers := min(procs, m*n/parGemv)
	step := roundUp((lenY+workers-1)/max(workers, 1), unit)
	if workers < 2 || step >= lenY || incX != 1 || incY != 1 || alpha == 0 ||
		(tA != blas.NoTrans && tA != blas.Trans && tA != blas.ConjTrans) ||
		lda < max(1, n) || len(a) < lda*(m-1)+n || len(x) < lenX || len(y) < lenY {
		gonum.Implementation{}.Dgemv(tA, m, n, alpha, a, lda, x, incX, beta, y, incY)
		return
	}
	block := func(lo int) {
		hi := min(lenY, lo+step)
		if tA == blas.NoTrans {
			gonum.Implementation{}.Dgemv(tA, hi-lo, n, alpha, a[lo*lda:], lda, x, 1, beta, y[lo:hi], 1)
		} else {
			gonum.Implementation{}.Dgemv(tA, m, hi-lo, alpha, a[lo:], lda, x, 1, beta, y[lo:hi], 1)
		}
	}
	var wg sync.WaitGroup
	for lo := step; lo < lenY; lo += step {
		wg.Go(func() { block(lo) })
	}
	block(0)
	wg.Wait()
}
