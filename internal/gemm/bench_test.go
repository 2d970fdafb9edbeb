package gemm

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/gonum"
)

// benchDgemm times f on an m×k by k×n product (op(B) = Bᵀ for tB =
// blas.Trans) and reports GFLOP/s at 2·m·n·k flops.
func benchDgemm(b *testing.B, dgemm func(tA, tB blas.Transpose, m, n, k int, alpha float64, a []float64, lda int, b []float64, ldb int, beta float64, c []float64, ldc int), tB blas.Transpose, m, n, k int) {
	rng := rand.New(rand.NewPCG(1, 1))
	a := padded(rng, m, k, k, 0)
	ldb := n
	if tB != blas.NoTrans {
		ldb = k
	}
	bm := padded(rng, k*n/ldb, ldb, ldb, 0)
	c := make([]float64, m*n)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		dgemm(blas.NoTrans, tB, m, n, k, 1, a, k, bm, ldb, 0, c, n)
	}
	b.ReportMetric(2*float64(m)*float64(n)*float64(k)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
}

func BenchmarkDgemm(b *testing.B) {
	for _, s := range []struct {
		m, n, k int
		tB      blas.Transpose
	}{
		{64, 64, 64, blas.NoTrans},
		{128, 256, 256, blas.NoTrans},
		{256, 256, 256, blas.NoTrans},
		{529, 36, 36, blas.NoTrans},
		{529, 36, 36, blas.Trans},
		{1000, 1000, 1000, blas.NoTrans},
		{4097, 32, 32, blas.NoTrans},
		{32, 4097, 32, blas.NoTrans},
		{800, 800, 64, blas.NoTrans},
	} {
		name := fmt.Sprintf("%dx%dx%d", s.m, s.n, s.k)
		if s.tB != blas.NoTrans {
			name += "T"
		}
		b.Run(name+"/gemm", func(b *testing.B) { benchDgemm(b, Implementation{}.Dgemm, s.tB, s.m, s.n, s.k) })
		b.Run(name+"/gonum", func(b *testing.B) { benchDgemm(b, gonum.Implementation{}.Dgemm, s.tB, s.m, s.n, s.k) })
	}
}

// BenchmarkSmall compares the packed product (without the gonum fallback)
// with gonum's on n×n×n products, to set smallWork.
func BenchmarkSmall(b *testing.B) {
	for _, n := range []int{4, 8, 12, 16, 20, 24, 32} {
		b.Run(fmt.Sprintf("%d/gemm", n), func(b *testing.B) {
			benchDgemm(b, func(tA, tB blas.Transpose, m, n, k int, alpha float64, a []float64, lda int, bm []float64, ldb int, beta float64, c []float64, ldc int) {
				dgemm(kernels()[0], 1, false, tA, tB, m, n, k, alpha, a, lda, bm, ldb, beta, c, ldc)
			}, blas.NoTrans, n, n, n)
		})
		b.Run(fmt.Sprintf("%d/gonum", n), func(b *testing.B) { benchDgemm(b, gonum.Implementation{}.Dgemm, blas.NoTrans, n, n, n) })
	}
}
