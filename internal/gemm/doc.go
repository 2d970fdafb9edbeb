// Package gemm is a float64 matrix product for gonum,
//
//	C = α·op(A)·op(B) + β·C,    op(X) = X or Xᵀ,
//
// in Go assembly for amd64 (AVX-512, or AVX2 with FMA, chosen at run
// time). Implementation is a gonum BLAS implementation whose Dgemm is this
// product, whose Dtrsm (triangular solves) and Dsyrk (symmetric rank-k
// updates) put almost all of their flops on it by recursive blocking,
// whose Dgemv is gonum's, split over the cores for large products (the
// same bits), and whose other routines are gonum's.
// Importing the package installs it,
//
//	blas64.Use(gemm.Implementation{})
//
// so that every gonum float64 product of the program (mat.Dense.Mul and
// friends) runs on it: smtd's numerical packages (online, sgd, hebbian,
// spectral) import it, so that the daemon, its worker processes and the
// tests compute the same bits. A program that calls blas64.Use itself
// after the imports' initialisation (the openblas build of smtd,
// cmd/smtd/openblas.go) replaces it. Other architectures, the purego
// build tag and CPUs without FMA use gonum's Dgemm.
//
// The product follows Goto and van de Geijn, "Anatomy of high-performance
// matrix multiplication" (ACM TOMS 34(3), 2008), as BLIS lays it out (Van
// Zee and van de Geijn, ACM TOMS 41(3), 2015): blocks of op(A) and op(B)
// are copied into contiguous micro-panels (the copy absorbs transposes and
// leading dimensions), and an assembly micro-kernel computes one small tile
// of C from one micro-panel of each with its accumulators in registers.
// The blocking parameters are explained where they are set: kc in
// kernel.go, the tiles and mc, nc in gemm_amd64.go. Products too small to
// repay the copies go to gonum's Dgemm.
//
// Results are deterministic: every element of C is one FMA chain over l in
// order within each block of kc steps, the blocks are added to C in order,
// and large products are split over goroutines by blocks of C only, so the
// result depends neither on GOMAXPROCS nor on which kernel runs (the
// portable reference kernel uses math.FMA to give the same bits).
//
// Unlike gonum's and the reference BLAS, the kernels do not skip zero
// multipliers: where an operand holds an infinity, a product with zero
// gives NaN rather than leaving the term out (Dgemm, Dtrsm of order above
// 64, transposed Dsyrk). Finite operands give the same results to within
// rounding.
package gemm
