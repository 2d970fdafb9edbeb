package gemm

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/gonum"
)

// TestDgemvSplit checks that a split Dgemv gives gonum's bits, on shapes
// around the split's multiples and on both sides of its threshold.
func TestDgemvSplit(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	shapes := [][2]int{{3, 70000}, {4, 40000}, {17, 8471}, {278, 8471}, {129, 1025}, {8471, 17}, {40000, 3}, {1000, 1000}, {2, 2}}
	for _, sh := range shapes {
		m, n := sh[0], sh[1]
		for _, tA := range []blas.Transpose{blas.NoTrans, blas.Trans} {
			for _, beta := range []float64{0, 1, -0.5} {
				lda := n + rng.IntN(3)
				a := make([]float64, (m-1)*lda+n)
				for i := range a {
					a[i] = rng.NormFloat64()
				}
				lenX, lenY := n, m
				if tA == blas.Trans {
					lenX, lenY = m, n
				}
				x, y := make([]float64, lenX), make([]float64, lenY)
				for i := range x {
					x[i] = rng.NormFloat64()
				}
				for i := range y {
					y[i] = rng.NormFloat64()
				}
				want := slices.Clone(y)
				gonum.Implementation{}.Dgemv(tA, m, n, -1.5, a, lda, x, 1, beta, want, 1)
				for _, procs := range []int{1, 2, 3, 8} {
					got := slices.Clone(y)
					dgemv(procs, tA, m, n, -1.5, a, lda, x, 1, beta, got, 1)
					for i := range got {
						if math.Float64bits(got[i]) != math.Float64bits(want[i]) {
							t.Fatalf("%d×%d %v β=%v on %d goroutines: y[%d] = %v, gonum %v", m, n, tA, beta, procs, i, got[i], want[i])
						}
					}
				}
			}
		}
	}
}

// TestDgemvPanics checks that bad arguments reach gonum's checks.
func TestDgemvPanics(t *testing.T) {
	a := make([]float64, 300*300)
	x := make([]float64, 300)
	for _, c := range []struct {
		name string
		f    func()
	}{
		{"short y", func() { Implementation{}.Dgemv(blas.NoTrans, 300, 300, 1, a, 300, x, 1, 0, x[:299], 1) }},
		{"short a", func() { Implementation{}.Dgemv(blas.Trans, 300, 300, 1, a[:len(a)-1], 300, x, 1, 0, x, 1) }},
		{"bad lda", func() { Implementation{}.Dgemv(blas.NoTrans, 300, 300, 1, a, 299, x, 1, 0, x, 1) }},
		{"bad transpose", func() { Implementation{}.Dgemv('X', 300, 300, 1, a, 300, x, 1, 0, x, 1) }},
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: no panic", c.name)
				}
			}()
			c.f()
		}()
	}
}

// BenchmarkDgemvBasis measures a reorthogonalisation pass, h = B·w and
// w −= Bᵀ·h, over a Lanczos basis of the shape of the Brown corpus's word
// solve: the whole basis (278 rows) and the kept Ritz vectors (137).
func BenchmarkDgemvBasis(b *testing.B) {
	const n = 8471
	rng := rand.New(rand.NewPCG(7, 8))
	a, x, h := make([]float64, 278*n), make([]float64, n), make([]float64, 278)
	for i := range a {
		a[i] = rng.NormFloat64()
	}
	for i := range x {
		x[i] = rng.NormFloat64()
	}
	for _, m := range []int{278, 137} {
		for _, impl := range []struct {
			name string
			f    func(tA blas.Transpose, m, n int, alpha float64, a []float64, lda int, x []float64, incX int, beta float64, y []float64, incY int)
		}{{"gonum", gonum.Implementation{}.Dgemv}, {"split", Implementation{}.Dgemv}} {
			b.Run(fmt.Sprintf("rows=%d/%s", m, impl.name), func(b *testing.B) {
				for range b.N {
					impl.f(blas.NoTrans, m, n, 1, a, n, x, 1, 0, h, 1)
					impl.f(blas.Trans, m, n, -1e-3, a, n, h, 1, 1, x, 1)
				}
			})
		}
	}
}
