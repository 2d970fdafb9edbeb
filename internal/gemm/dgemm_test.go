package gemm

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/gonum"
)

var transposes = []blas.Transpose{blas.NoTrans, blas.Trans, blas.ConjTrans}

// gemmCase is one product with padded operands: the padding of A and B is
// NaN (so reading it spoils the result) and C's is a sentinel that must
// survive.
type gemmCase struct {
	tA, tB        blas.Transpose
	m, n, k       int
	alpha, beta   float64
	lda, ldb, ldc int
	a, b, c       []float64
}

const sentinel = -1234.5

func newGemmCase(rng *rand.Rand, tA, tB blas.Transpose, m, n, k int, alpha, beta float64, pad int) *gemmCase {
	g := &gemmCase{tA: tA, tB: tB, m: m, n: n, k: k, alpha: alpha, beta: beta}
	ar, ac := m, k
	if tA != blas.NoTrans {
		ar, ac = k, m
	}
	br, bc := k, n
	if tB != blas.NoTrans {
		br, bc = n, k
	}
	g.lda = max(1, ac) + rng.IntN(pad+1)
	g.ldb = max(1, bc) + rng.IntN(pad+1)
	g.ldc = max(1, n) + rng.IntN(pad+1)
	g.a = padded(rng, ar, ac, g.lda, math.NaN())
	g.b = padded(rng, br, bc, g.ldb, math.NaN())
	g.c = padded(rng, m, n, g.ldc, sentinel)
	if beta == 0 {
		for i := 0; i < m; i++ {
			for j := 0; j < n; j++ {
				g.c[i*g.ldc+j] = math.NaN()
			}
		}
	}
	return g
}

// padded returns a rows×cols matrix of normal values with stride ld, and
// fill in the padding.
func padded(rng *rand.Rand, rows, cols, ld int, fill float64) []float64 {
	s := make([]float64, rows*ld)
	for i := range s {
		if i%ld < cols {
			s[i] = rng.NormFloat64()
		} else {
			s[i] = fill
		}
	}
	return s
}

// want returns gonum's C and the bound on the error of a different
// summation order: 1e-13·(|α|·|op(A)|·|op(B)| + |β·C|) + 1e-300.
func (g *gemmCase) want() (c, tol []float64) {
	c = append([]float64(nil), g.c...)
	gonum.Implementation{}.Dgemm(g.tA, g.tB, g.m, g.n, g.k, g.alpha, g.a, g.lda, g.b, g.ldb, g.beta, c, g.ldc)
	abs := func(s []float64) []float64 {
		r := make([]float64, len(s))
		for i, v := range s {
			r[i] = math.Abs(v)
		}
		return r
	}
	tol = abs(g.c)
	gonum.Implementation{}.Dgemm(g.tA, g.tB, g.m, g.n, g.k, math.Abs(g.alpha), abs(g.a), g.lda, abs(g.b), g.ldb, math.Abs(g.beta), tol, g.ldc)
	for i := range tol {
		tol[i] = 1e-13*tol[i] + 1e-300
	}
	return c, tol
}

func (g *gemmCase) String() string {
	return fmt.Sprintf("%v%v m=%d n=%d k=%d α=%v β=%v ld=%d,%d,%d", g.tA, g.tB, g.m, g.n, g.k, g.alpha, g.beta, g.lda, g.ldb, g.ldc)
}

// run computes g on kn (no gonum fallback, up to procs goroutines) and
// returns C.
func (g *gemmCase) run(kn *kernel, procs int) []float64 {
	c := append([]float64(nil), g.c...)
	dgemm(kn, procs, false, g.tA, g.tB, g.m, g.n, g.k, g.alpha, g.a, g.lda, g.b, g.ldb, g.beta, c, g.ldc)
	return c
}

// check compares got with gonum's result within the tolerance, and the
// padding of C with the sentinel, bit for bit.
func (g *gemmCase) check(t testing.TB, name string, got []float64) {
	t.Helper()
	want, tol := g.want()
	for i := range got {
		if i%g.ldc >= g.n || i/g.ldc >= g.m {
			if got[i] != sentinel {
				t.Fatalf("%s %v: C[%d] outside the window: got %v, want it untouched", name, g, i, got[i])
			}
			continue
		}
		if d := math.Abs(got[i] - want[i]); !(d <= tol[i]) {
			t.Fatalf("%s %v: C[%d,%d] = %v, want %v ± %v", name, g, i/g.ldc, i%g.ldc, got[i], want[i], tol[i])
		}
	}
}

// small returns a copy of kn with blocks of two tiles, so that small
// products cross the mc and nc block edges.
func small(kn *kernel) *kernel {
	s := *kn
	s.name += "-small-blocks"
	s.mc, s.nc = 2*kn.mr, 2*kn.nr
	return &s
}

// testKernels returns every kernel the machine runs, with its blocking
// and with small blocks.
func testKernels() []*kernel {
	var ks []*kernel
	for _, kn := range kernels() {
		ks = append(ks, kn, small(kn))
	}
	return ks
}

func TestDgemmShapes(t *testing.T) {
	dims := []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 11, 12, 13, 15, 16, 17, 23, 24, 25, 31, 33, 47, 49, 64, 97}
	deep := []int{255, 256, 257, 300, 513}
	alphas := []float64{0, 1, -0.5, 2.5}
	betas := []float64{0, 1, 0.3}
	for _, kn := range testKernels() {
		rng := rand.New(rand.NewPCG(1, 2))
		for trial := 0; trial < 300; trial++ {
			m, n, k := dims[rng.IntN(len(dims))], dims[rng.IntN(len(dims))], dims[rng.IntN(len(dims))]
			if trial%5 == 0 {
				k = deep[rng.IntN(len(deep))]
			}
			tA, tB := transposes[rng.IntN(3)], transposes[rng.IntN(3)]
			alpha, beta := alphas[rng.IntN(len(alphas))], betas[rng.IntN(len(betas))]
			g := newGemmCase(rng, tA, tB, m, n, k, alpha, beta, 3)
			g.check(t, kn.name, g.run(kn, 1+trial%2))
		}
	}
}

// TestDgemmAllCombinations runs every transpose, α and β on a shape with
// edge tiles on both sides and more than one block of k.
func TestDgemmAllCombinations(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, kn := range testKernels() {
		for _, tA := range transposes {
			for _, tB := range transposes {
				for _, alpha := range []float64{0, 1, -0.5, 2.5} {
					for _, beta := range []float64{0, 1, 0.3} {
						g := newGemmCase(rng, tA, tB, 2*kn.mr+1, 2*kn.nr+3, kc+5, alpha, beta, 2)
						g.check(t, kn.name, g.run(kn, 2))
					}
				}
			}
		}
	}
}

// TestDgemmLarge crosses the real mc and nc of the fastest kernel.
func TestDgemmLarge(t *testing.T) {
	if testing.Short() {
		t.Skip("large product")
	}
	rng := rand.New(rand.NewPCG(5, 6))
	kn := kernels()[0]
	g := newGemmCase(rng, blas.NoTrans, blas.Trans, kn.mc+kn.mr+1, kn.nc+kn.nr+1, 70, -0.5, 0.3, 1)
	g.check(t, kn.name, g.run(kn, 2))
}

// TestKernelsAgree checks that every kernel gives the same bits: each
// element is the same chain of FMAs.
func TestKernelsAgree(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for _, shape := range [][3]int{{1, 1, 1}, {13, 17, 19}, {50, 41, 300}, {100, 70, 600}} {
		g := newGemmCase(rng, blas.Trans, blas.NoTrans, shape[0], shape[1], shape[2], 1.5, 0.3, 2)
		want := g.run(generic, 1)
		for _, kn := range testKernels() {
			got := g.run(kn, 2)
			for i := range got {
				if math.Float64bits(got[i]) != math.Float64bits(want[i]) {
					t.Fatalf("%s %v: C[%d] = %v, generic gives %v", kn.name, g, i, got[i], want[i])
				}
			}
		}
	}
}

// TestDgemmDeterministic checks that the result does not depend on
// GOMAXPROCS, for products split by rows and by columns.
func TestDgemmDeterministic(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	for _, shape := range [][3]int{{300, 200, 600}, {40, 1000, 300}} {
		g := newGemmCase(rng, blas.NoTrans, blas.NoTrans, shape[0], shape[1], shape[2], 1, 0, 0)
		if 2*float64(g.m*g.n*g.k) < 2*parFlops {
			t.Fatalf("%v is too small to be split", g)
		}
		var runs [][]float64
		for _, procs := range []int{1, 2, 3} {
			runtime.GOMAXPROCS(procs)
			c := append([]float64(nil), g.c...)
			Implementation{}.Dgemm(g.tA, g.tB, g.m, g.n, g.k, g.alpha, g.a, g.lda, g.b, g.ldb, g.beta, c, g.ldc)
			runs = append(runs, c)
		}
		for _, c := range runs[1:] {
			for i := range c {
				if math.Float64bits(c[i]) != math.Float64bits(runs[0][i]) {
					t.Fatalf("%v: C[%d] = %v with more procs, %v with one", g, i, c[i], runs[0][i])
				}
			}
		}
		g.check(t, "Implementation", runs[1])
	}
}

// TestDgemmConcurrent runs split products from several goroutines at
// once: helpers may take any caller's blocks.
func TestDgemmConcurrent(t *testing.T) {
	rng := rand.New(rand.NewPCG(19, 20))
	var cases []*gemmCase
	for i := 0; i < 4; i++ {
		cases = append(cases, newGemmCase(rng, blas.NoTrans, blas.Trans, 200+i, 100, 520, 1, 0.3, 1))
	}
	if 2*float64(200*100*520) < 2*parFlops {
		t.Fatal("the products are too small to be split")
	}
	got := make([][]float64, len(cases))
	var wg sync.WaitGroup
	for i, g := range cases {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[i] = g.run(kernels()[0], 3)
		}()
	}
	wg.Wait()
	for i, g := range cases {
		g.check(t, "concurrent", got[i])
	}
}

// TestDgemmThroughGonum runs products that go to gonum's Dgemm.
func TestDgemmThroughGonum(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	for _, shape := range [][3]int{{1, 1, 1}, {3, 5, 7}, {4, 4, 7}, {1, 200, 50}} {
		g := newGemmCase(rng, blas.NoTrans, blas.Trans, shape[0], shape[1], shape[2], 2.5, 0, 1)
		c := append([]float64(nil), g.c...)
		Implementation{}.Dgemm(g.tA, g.tB, g.m, g.n, g.k, g.alpha, g.a, g.lda, g.b, g.ldb, g.beta, c, g.ldc)
		g.check(t, "Implementation", c)
	}
}

func TestDgemmPanics(t *testing.T) {
	nt, tr := blas.NoTrans, blas.Trans
	s := make([]float64, 100)
	for _, tc := range []struct {
		name          string
		tA, tB        blas.Transpose
		m, n, k       int
		a, b, c       []float64
		lda, ldb, ldc int
	}{
		{"transpose A", 'X', nt, 2, 2, 2, s, s, s, 2, 2, 2},
		{"transpose B", nt, 0, 2, 2, 2, s, s, s, 2, 2, 2},
		{"m", nt, nt, -1, 2, 2, s, s, s, 2, 2, 2},
		{"n", nt, nt, 2, -1, 2, s, s, s, 2, 2, 2},
		{"k", nt, nt, 2, 2, -1, s, s, s, 2, 2, 2},
		{"lda", nt, nt, 2, 2, 3, s, s, s, 2, 2, 2},
		{"lda trans", tr, nt, 3, 2, 2, s, s, s, 2, 2, 2},
		{"ldb", nt, nt, 2, 3, 2, s, s, s, 2, 2, 3},
		{"ldb trans", nt, tr, 2, 2, 3, s, s, s, 3, 2, 2},
		{"ldc", nt, nt, 2, 3, 2, s, s, s, 2, 3, 2},
		{"short a", nt, nt, 11, 2, 10, s, s, s, 10, 2, 2},
		{"short b", nt, tr, 2, 11, 10, s, s, s, 10, 10, 11},
		{"short c", nt, nt, 11, 10, 2, s, s, s, 2, 10, 10},
		{"ldc zero size", nt, nt, 0, 0, 0, nil, nil, nil, 1, 1, 0},
	} {
		panicsAsGonum(t, tc.name, func(impl blas.Float64) {
			impl.Dgemm(tc.tA, tc.tB, tc.m, tc.n, tc.k, 1, tc.a, tc.lda, tc.b, tc.ldb, 0, tc.c, tc.ldc)
		})
	}
}

// panicsAsGonum fails t unless call panics on gonum's implementation and
// with the same value on Implementation.
func panicsAsGonum(t *testing.T, name string, call func(blas.Float64)) {
	t.Helper()
	want := panicOf(func() { call(gonum.Implementation{}) })
	got := panicOf(func() { call(Implementation{}) })
	if want == nil || got != want {
		t.Errorf("%s: panic %v, gonum panics with %v", name, got, want)
	}
}

// panicOf returns what f panics with, nil if it returns.
func panicOf(f func()) (msg any) {
	defer func() { msg = recover() }()
	f()
	return nil
}

func TestDgemmAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	if best == nil {
		t.Skip("gonum's Dgemm does the products in this build")
	}
	rng := rand.New(rand.NewPCG(13, 14))
	for _, shape := range [][3]int{{64, 64, 64}, {300, 200, 300}} {
		g := newGemmCase(rng, blas.NoTrans, blas.NoTrans, shape[0], shape[1], shape[2], 1, 0, 0)
		allocs := testing.AllocsPerRun(50, func() {
			Implementation{}.Dgemm(g.tA, g.tB, g.m, g.n, g.k, g.alpha, g.a, g.lda, g.b, g.ldb, g.beta, g.c, g.ldc)
		})
		if allocs > 0.1 {
			t.Errorf("%v: %v allocations per call", g, allocs)
		}
	}
}

func FuzzDgemm(f *testing.F) {
	for _, s := range [][5]int{
		{0, 0, 1, 1, 1}, {1, 2, 0, 5, 3}, {2, 3, 7, 0, 2}, {3, 0, 13, 17, 0},
		{0, 1, 12, 16, 256}, {1, 1, 13, 17, 257}, {2, 2, 25, 33, 300}, {3, 3, 6, 8, 1},
		{0, 3, 1, 97, 64}, {1, 0, 97, 1, 64}, {2, 0, 11, 23, 511},
	} {
		f.Add(uint8(s[0]), uint16(s[2]), uint16(s[3]), uint16(s[4]), uint8(1), uint8(2), uint8(1), uint64(1))
	}
	alphas := []float64{0, 1, -0.5, 2.5}
	betas := []float64{0, 1, 0.3}
	f.Fuzz(func(t *testing.T, trans uint8, m, n, k uint16, alpha, beta, pad uint8, seed uint64) {
		rng := rand.New(rand.NewPCG(seed, 15))
		g := newGemmCase(rng, transposes[trans%3], transposes[trans/3%3],
			int(m%130), int(n%130), int(k%700), alphas[alpha%4], betas[beta%3], int(pad%4))
		for _, kn := range kernels() {
			g.check(t, kn.name, g.run(kn, 2))
		}
	})
}

// TestPacking checks the kernels' assembly packing against the Go loops.
func TestPacking(t *testing.T) {
	rng := rand.New(rand.NewPCG(17, 18))
	for _, kn := range kernels() {
		for _, f := range []struct {
			name      string
			w         int
			transpose bool
			pack      func(dst, src []float64, ld, depth int)
		}{
			{"transposeA", kn.mr, true, kn.transposeA},
			{"transposeB", kn.nr, true, kn.transposeB},
			{"copyA", kn.mr, false, kn.copyA},
			{"copyB", kn.nr, false, kn.copyB},
		} {
			if f.pack == nil {
				continue
			}
			for depth := 1; depth <= 40; depth++ {
				var src, want []float64
				ld := depth + rng.IntN(3)
				want = make([]float64, f.w*depth)
				if f.transpose {
					src = padded(rng, f.w, depth, ld, math.NaN())
					packRows(want, src, ld, 0, f.w, depth, f.w)
				} else {
					ld = f.w + rng.IntN(3)
					src = padded(rng, depth, f.w, ld, math.NaN())
					packCopy(want, src, ld, 0, f.w, depth, f.w)
				}
				got := make([]float64, f.w*depth)
				f.pack(got, src, ld, depth)
				for i := range got {
					if got[i] != want[i] {
						t.Fatalf("%s %s depth %d: dst[%d] = %v, want %v", kn.name, f.name, depth, i, got[i], want[i])
					}
				}
			}
		}
	}
}
