package gemm

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/gonum"
)

// triangular returns a k×k triangular matrix with stride ld, NaN in the
// other triangle and the padding (neither may be read), off-diagonal
// values of order 1/k and a diagonal in [1, 2]: well conditioned, so that
// two solvers agree to a small multiple of the rounding.
func triangular(rng *rand.Rand, k, ld int, upper bool) []float64 {
	a := make([]float64, max(1, k*ld))
	for i := range a {
		a[i] = math.NaN()
	}
	for i := range k {
		for j := range k {
			switch {
			case i == j:
				a[i*ld+j] = 1 + rng.Float64()
			case (j > i) == upper:
				a[i*ld+j] = rng.NormFloat64() / float64(k)
			}
		}
	}
	return a
}

// agreeWithGonum fails t unless got is want to within tol·(1 + |want|)
// everywhere, and exactly where want holds the sentinel: the padding and
// whatever else gonum's routine leaves alone.
func agreeWithGonum(t *testing.T, name string, got, want []float64, tol float64) {
	t.Helper()
	for i := range want {
		if want[i] == sentinel {
			if got[i] != sentinel {
				t.Fatalf("%s: %d, which gonum leaves alone, is %g", name, i, got[i])
			}
			continue
		}
		if !(math.Abs(got[i]-want[i]) <= tol*(1+math.Abs(want[i]))) {
			t.Fatalf("%s: %d is %g, gonum %g", name, i, got[i], want[i])
		}
	}
}

// Dtrsm solves every kind of triangular system as gonum's Dtrsm does, to
// within a few units of rounding, for orders below, at and above the
// recursion's leaf, on padded operands whose padding it leaves alone.
func TestDtrsmAgreesWithGonum(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, s := range []blas.Side{blas.Left, blas.Right} {
		for _, ul := range []blas.Uplo{blas.Upper, blas.Lower} {
			for _, tA := range transposes {
				for _, d := range []blas.Diag{blas.NonUnit, blas.Unit} {
					for _, k := range []int{1, 17, trsmLeaf, trsmLeaf + 1, 150, 301} {
						for _, other := range []int{1, 7, 64} {
							for _, alpha := range []float64{1, -0.5, 0} {
								m, n := k, other
								if s == blas.Right {
									m, n = other, k
								}
								lda, ldb := k+rng.IntN(3), n+rng.IntN(3)
								a := triangular(rng, k, lda, ul == blas.Upper)
								b := padded(rng, m, n, ldb, sentinel)
								want := append([]float64(nil), b...)
								gonum.Implementation{}.Dtrsm(s, ul, tA, d, m, n, alpha, a, lda, want, ldb)
								got := append([]float64(nil), b...)
								Implementation{}.Dtrsm(s, ul, tA, d, m, n, alpha, a, lda, got, ldb)
								agreeWithGonum(t, fmt.Sprintf("side %c uplo %c trans %c diag %c m %d n %d alpha %g", s, ul, tA, d, m, n, alpha), got, want, 1e-12)
							}
						}
					}
				}
			}
		}
	}
}

// Dtrsm panics on bad arguments as gonum's Dtrsm does.
func TestDtrsmPanics(t *testing.T) {
	l, r, u, nt, nu := blas.Left, blas.Right, blas.Upper, blas.NoTrans, blas.NonUnit
	s := make([]float64, 100)
	for _, tc := range []struct {
		name string
		call func(blas.Float64)
	}{
		{"side", func(impl blas.Float64) { impl.Dtrsm('X', u, nt, nu, 2, 2, 1, s, 2, s, 2) }},
		{"uplo", func(impl blas.Float64) { impl.Dtrsm(l, 'X', nt, nu, 2, 2, 1, s, 2, s, 2) }},
		{"transpose", func(impl blas.Float64) { impl.Dtrsm(l, u, 'X', nu, 2, 2, 1, s, 2, s, 2) }},
		{"diag", func(impl blas.Float64) { impl.Dtrsm(l, u, nt, 'X', 2, 2, 1, s, 2, s, 2) }},
		{"m", func(impl blas.Float64) { impl.Dtrsm(l, u, nt, nu, -1, 2, 1, s, 2, s, 2) }},
		{"n", func(impl blas.Float64) { impl.Dtrsm(l, u, nt, nu, 2, -1, 1, s, 2, s, 2) }},
		{"lda", func(impl blas.Float64) { impl.Dtrsm(l, u, nt, nu, 3, 2, 1, s, 2, s, 2) }},
		{"ldb", func(impl blas.Float64) { impl.Dtrsm(r, u, nt, nu, 2, 3, 1, s, 3, s, 2) }},
		{"short a", func(impl blas.Float64) { impl.Dtrsm(l, u, nt, nu, 11, 2, 1, s, 11, s, 2) }},
		{"short b", func(impl blas.Float64) { impl.Dtrsm(r, u, nt, nu, 70, 2, 1, s, 2, s, 2) }},
	} {
		panicsAsGonum(t, tc.name, tc.call)
	}
}

// BenchmarkDtrsm solves X·U = B for X (64×k) against an upper triangular U
// of order k, as the Hebbian network solves a minibatch against the
// Cholesky factor of L + λI, and reports GFLOP/s at m·k² flops.
func BenchmarkDtrsm(b *testing.B) {
	for _, k := range []int{100, 400, 800} {
		const m = 64
		rng := rand.New(rand.NewPCG(1, 1))
		a := triangular(rng, k, k, true)
		rhs := padded(rng, m, k, k, 0)
		x := make([]float64, len(rhs))
		for _, impl := range []struct {
			name  string
			dtrsm func(blas.Side, blas.Uplo, blas.Transpose, blas.Diag, int, int, float64, []float64, int, []float64, int)
		}{{"gemm", Implementation{}.Dtrsm}, {"gonum", gonum.Implementation{}.Dtrsm}} {
			b.Run(fmt.Sprintf("%dx%d/%s", m, k, impl.name), func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					copy(x, rhs)
					impl.dtrsm(blas.Right, blas.Upper, blas.NoTrans, blas.NonUnit, m, k, 1, a, k, x, k)
				}
				b.ReportMetric(float64(m)*float64(k)*float64(k)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
			})
		}
	}
}

// Dsyrk updates the requested triangle of C as gonum's Dsyrk does, to
// within a few units of rounding, for orders below, at and above the
// recursion's leaf, and leaves the other triangle and the padding alone.
func TestDsyrkAgreesWithGonum(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for _, ul := range []blas.Uplo{blas.Upper, blas.Lower} {
		for _, tA := range transposes {
			for _, n := range []int{1, 17, 36, syrkLeaf, syrkLeaf + 1, 150, 301} {
				for _, k := range []int{1, 7, 64, 2000} {
					for _, ab := range [][2]float64{{1, 0}, {-0.7, 1}, {0.5, 0.5}, {0, 2}} {
						alpha, beta := ab[0], ab[1]
						ar, ac := n, k
						if tA != blas.NoTrans {
							ar, ac = k, n
						}
						lda, ldc := ac+rng.IntN(3), n+rng.IntN(3)
						a := padded(rng, ar, ac, lda, math.NaN())
						c := padded(rng, n, n, ldc, sentinel)
						for i := range n {
							for j := range n {
								if (j > i && ul == blas.Lower) || (j < i && ul == blas.Upper) {
									c[i*ldc+j] = sentinel // the other triangle
								}
							}
						}
						want := append([]float64(nil), c...)
						gonum.Implementation{}.Dsyrk(ul, tA, n, k, alpha, a, lda, beta, want, ldc)
						got := append([]float64(nil), c...)
						Implementation{}.Dsyrk(ul, tA, n, k, alpha, a, lda, beta, got, ldc)
						agreeWithGonum(t, fmt.Sprintf("uplo %c trans %c n %d k %d alpha %g beta %g", ul, tA, n, k, alpha, beta), got, want, 1e-13*float64(k))
					}
				}
			}
		}
	}
}

// With β = 0 Dsyrk does not read C: NaNs in its triangle do not survive,
// on every path (k = 0 and α = 0, which go to gonum, whose Dsyrk scales a
// transposed update's lower triangle by β, and the kernels' paths).
func TestDsyrkBetaZeroIgnoresC(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	for _, ul := range []blas.Uplo{blas.Upper, blas.Lower} {
		for _, tA := range transposes {
			for _, n := range []int{1, 17, syrkLeaf + 1} {
				for _, k := range []int{0, 1, 7, 100} {
					for _, alpha := range []float64{1, 0} {
						ar, ac := n, k
						if tA != blas.NoTrans {
							ar, ac = k, n
						}
						lda := max(1, ac)
						a := padded(rng, ar, ac, lda, math.NaN())
						zero := make([]float64, n*n)
						gonum.Implementation{}.Dsyrk(ul, tA, n, k, alpha, a, lda, 0, zero, n)
						nan := make([]float64, n*n)
						for i := range nan {
							nan[i] = math.NaN()
						}
						Implementation{}.Dsyrk(ul, tA, n, k, alpha, a, lda, 0, nan, n)
						for i := range n {
							for j := range n {
								if (j >= i) == (ul == blas.Upper) || i == j {
									if got, want := nan[i*n+j], zero[i*n+j]; !(math.Abs(got-want) <= 1e-13*float64(k+1)*(1+math.Abs(want))) {
										t.Fatalf("uplo %c trans %c n %d k %d alpha %g: C[%d,%d] = %g, want %g", ul, tA, n, k, alpha, i, j, got, want)
									}
								}
							}
						}
					}
				}
			}
		}
	}
}

// Dsyrk panics on bad arguments as gonum's Dsyrk does.
func TestDsyrkPanics(t *testing.T) {
	u, nt, tr := blas.Upper, blas.NoTrans, blas.Trans
	s := make([]float64, 100)
	for _, tc := range []struct {
		name string
		call func(blas.Float64)
	}{
		{"uplo", func(impl blas.Float64) { impl.Dsyrk('X', nt, 2, 2, 1, s, 2, 0, s, 2) }},
		{"transpose", func(impl blas.Float64) { impl.Dsyrk(u, 'X', 2, 2, 1, s, 2, 0, s, 2) }},
		{"n", func(impl blas.Float64) { impl.Dsyrk(u, nt, -1, 2, 1, s, 2, 0, s, 2) }},
		{"k", func(impl blas.Float64) { impl.Dsyrk(u, nt, 2, -1, 1, s, 2, 0, s, 2) }},
		{"lda", func(impl blas.Float64) { impl.Dsyrk(u, nt, 2, 3, 1, s, 2, 0, s, 2) }},
		{"lda trans", func(impl blas.Float64) { impl.Dsyrk(u, tr, 3, 2, 1, s, 2, 0, s, 3) }},
		{"ldc", func(impl blas.Float64) { impl.Dsyrk(u, nt, 3, 2, 1, s, 2, 0, s, 2) }},
		{"short a", func(impl blas.Float64) { impl.Dsyrk(u, nt, 11, 10, 1, s, 10, 0, s, 11) }},
		{"short a trans", func(impl blas.Float64) { impl.Dsyrk(u, tr, 70, 2, 1, s, 70, 0, s, 70) }},
		{"short c", func(impl blas.Float64) { impl.Dsyrk(u, nt, 11, 2, 1, s, 2, 0, s, 11) }},
	} {
		panicsAsGonum(t, tc.name, tc.call)
	}
}

// BenchmarkDsyrk is the Hebbian network's lateral update at the MNIST
// setting, C = α·YᵀY + β·C with Y 64×800 (upper triangle), and reports
// GFLOP/s at n²·k flops.
func BenchmarkDsyrk(b *testing.B) {
	const n, k = 800, 64
	rng := rand.New(rand.NewPCG(1, 1))
	a := padded(rng, k, n, n, 0)
	c := padded(rng, n, n, n, 0)
	for _, impl := range []struct {
		name  string
		dsyrk func(blas.Uplo, blas.Transpose, int, int, float64, []float64, int, float64, []float64, int)
	}{{"gemm", Implementation{}.Dsyrk}, {"gonum", gonum.Implementation{}.Dsyrk}} {
		b.Run(fmt.Sprintf("%dx%d/%s", n, k, impl.name), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				impl.dsyrk(blas.Upper, blas.Trans, n, k, 0.5, a, n, 0.9, c, n)
			}
			b.ReportMetric(float64(n)*float64(n)*float64(k)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		})
	}
}
