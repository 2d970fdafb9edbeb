package gemm

import (
	"runtime"
	"sync"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas64"
	"gonum.org/v1/gonum/blas/gonum"
)

// Implementation is gonum's BLAS with Dgemm, Dtrsm and Dsyrk replaced by
// this package's, and Dgemv split over the cores (dgemv.go); all other
// routines are gonum's.
type Implementation struct{ gonum.Implementation }

var _ blas.Float64 = Implementation{}

// init installs Implementation as gonum's float64 BLAS (see the package
// comment).
func init() { blas64.Use(Implementation{}) }

// The panic messages of gonum's Dgemm (unexported there).
const (
	badTranspose = "blas: illegal transpose"
	mLT0         = "blas: m < 0"
	nLT0         = "blas: n < 0"
	kLT0         = "blas: k < 0"
	badLdA       = "blas: bad leading dimension of A"
	badLdB       = "blas: bad leading dimension of B"
	badLdC       = "blas: bad leading dimension of C"
	shortA       = "blas: insufficient length of a"
	shortB       = "blas: insufficient length of b"
	shortC       = "blas: insufficient length of c"
)

const (
	// smallWork is the m·n·k below which gonum's Dgemm is faster than
	// packing the operands (BenchmarkSmall on AVX-512: gonum wins at
	// 4×4×4 and 5×5×5, ties at 4×4×8 and loses from 6×6×6 on).
	smallWork = 128
	// parFlops is the work, in flops (2·m·n·k), that each goroutine of a
	// split product gets at least: about 0.1 ms of one core, so that
	// starting and waking a helper (microseconds) costs a few percent at
	// most.
	parFlops = 1e7
)

// best is the fastest kernel this CPU runs, nil if gonum's Dgemm is
// faster than any.
var best = bestKernel()

// Dgemm computes
//
//	C = α·op(A)·op(B) + β·C
//
// where op(X) is X for blas.NoTrans and Xᵀ for blas.Trans or
// blas.ConjTrans, op(A) is m×k, op(B) is k×n and C is m×n, all row-major
// with leading dimensions lda, ldb and ldc. β = 0 means C is overwritten,
// not read (NaNs in it do not propagate). It panics on bad arguments with
// gonum's messages, under the same rules as gonum's Dgemm.
//
// Products of at least 2·parFlops flops are split over up to GOMAXPROCS
// goroutines by blocks of rows or columns of C; the result does not depend
// on the split. Products gonum does as fast (m·n·k < smallWork, a single
// row of C, or a CPU without FMA) go to gonum's Dgemm.
func (Implementation) Dgemm(tA, tB blas.Transpose, m, n, k int, alpha float64, a []float64, lda int, b []float64, ldb int, beta float64, c []float64, ldc int) {
	dgemm(best, runtime.GOMAXPROCS(0), true, tA, tB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}

// dgemm is Dgemm on the kernel kn with at most procs goroutines. With
// viaGonum, products that gonum does as fast (kn = nil, m·n·k <
// smallWork or m = 1) go to gonum's Dgemm.
func dgemm(kn *kernel, procs int, viaGonum bool, tA, tB blas.Transpose, m, n, k int, alpha float64, a []float64, lda int, b []float64, ldb int, beta float64, c []float64, ldc int) {
	switch tA {
	default:
		panic(badTranspose)
	case blas.NoTrans, blas.Trans, blas.ConjTrans:
	}
	switch tB {
	default:
		panic(badTranspose)
	case blas.NoTrans, blas.Trans, blas.ConjTrans:
	}
	if m < 0 {
		panic(mLT0)
	}
	if n < 0 {
		panic(nLT0)
	}
	if k < 0 {
		panic(kLT0)
	}
	aT := tA != blas.NoTrans
	bT := tB != blas.NoTrans
	if aT {
		if lda < max(1, m) {
			panic(badLdA)
		}
	} else if lda < max(1, k) {
		panic(badLdA)
	}
	if bT {
		if ldb < max(1, k) {
			panic(badLdB)
		}
	} else if ldb < max(1, n) {
		panic(badLdB)
	}
	if ldc < max(1, n) {
		panic(badLdC)
	}
	if m == 0 || n == 0 {
		return
	}
	if aT {
		if len(a) < (k-1)*lda+m {
			panic(shortA)
		}
	} else if len(a) < (m-1)*lda+k {
		panic(shortA)
	}
	if bT {
		if len(b) < (n-1)*ldb+k {
			panic(shortB)
		}
	} else if len(b) < (k-1)*ldb+n {
		panic(shortB)
	}
	if len(c) < (m-1)*ldc+n {
		panic(shortC)
	}

	if alpha == 0 || k == 0 {
		scale(m, n, beta, c, ldc)
		return
	}
	// A single row of C is a vector-matrix product, which gonum runs
	// with full-width vector kernels; tiles of mr rows would waste all
	// but one.
	work := float64(m) * float64(n) * float64(k)
	if viaGonum && (kn == nil || work < smallWork || m == 1) {
		gonum.Implementation{}.Dgemm(tA, tB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
		return
	}
	p := product{kn: kn, aT: aT, bT: bT, m: m, n: n, k: k, alpha: alpha, a: a, lda: lda, b: b, ldb: ldb, beta: beta, c: c, ldc: ldc}
	workers := min(procs, max(1, int(2*work/parFlops)))
	if workers < 2 {
		p.run()
		return
	}
	p.split(workers)
}

// scale sets C = β·C, or C = 0 if β = 0.
func scale(m, n int, beta float64, c []float64, ldc int) {
	if beta == 1 {
		return
	}
	for i := 0; i < m; i++ {
		row := c[i*ldc : i*ldc+n]
		if beta == 0 {
			clear(row)
			continue
		}
		for j := range row {
			row[j] *= beta
		}
	}
}

// product is one validated call of Dgemm, or a block of C of one, with
// α ≠ 0 and m, n, k > 0.
type product struct {
	kn      *kernel
	aT, bT  bool
	m, n, k int
	alpha   float64
	a       []float64
	lda     int
	b       []float64
	ldb     int
	beta    float64
	c       []float64
	ldc     int
	done    *sync.WaitGroup // a helper's block: Done when computed
}

// blockSet is the blocks of one split product.
type blockSet struct {
	blocks []product
	done   sync.WaitGroup
}

// workspace holds the packed blocks of one goroutine's product.
type workspace struct {
	a, b []float64 // packed op(A) (mc×kc) and op(B) (kc×nc)
	tile []float64 // an edge tile, mr×nr
}

var workspaces = sync.Pool{New: func() any { return new(workspace) }}

// grow returns s with length n, reallocated if it is too short.
func grow(s []float64, n int) []float64 {
	if cap(s) < n {
		return make([]float64, n)
	}
	return s[:n]
}

// run computes p on the calling goroutine by the loops of Goto's
// algorithm:
//
//	for each mc rows of op(A) and C:
//		for each kc steps of l:
//			pack the mc×kc block of op(A) (micro-panels of mr rows)
//			for each nc columns of op(B) and C:
//				pack the kc×nc block of op(B) (micro-panels of nr columns)
//				for each micro-panel of op(A):     (it stays in L1)
//					for each micro-panel of op(B): (the block stays in L2)
//						C tile = α·panel·panel + β·C tile   (β = 1 after the first kc)
//
// Each kernel call sums at most kc steps, a few microseconds.
func (p *product) run() {
	kn := p.kn
	mr, nr := kn.mr, kn.nr
	w := workspaces.Get().(*workspace)
	defer workspaces.Put(w)
	depth := min(kc, p.k)
	w.a = grow(w.a, roundUp(min(kn.mc, p.m), mr)*depth)
	w.b = grow(w.b, depth*roundUp(min(kn.nc, p.n), nr))
	w.tile = grow(w.tile, mr*nr)
	for ic := 0; ic < p.m; ic += kn.mc {
		mcb := min(kn.mc, p.m-ic)
		for pc := 0; pc < p.k; pc += kc {
			kcb := min(kc, p.k-pc)
			beta := p.beta
			if pc > 0 {
				beta = 1
			}
			packA(kn, w.a, p.aT, p.a, p.lda, ic, pc, mcb, kcb)
			for jc := 0; jc < p.n; jc += kn.nc {
				ncb := min(kn.nc, p.n-jc)
				packB(kn, w.b, p.bT, p.b, p.ldb, pc, jc, kcb, ncb)
				for ir := 0; ir < mcb; ir += mr {
					ap := w.a[ir*kcb : (ir+mr)*kcb]
					rows := min(mr, mcb-ir)
					for jr := 0; jr < ncb; jr += nr {
						cols := min(nr, ncb-jr)
						tk := kn
						if panelWidth(kn, cols) < nr {
							tk = kn.narrow
						}
						bp := w.b[jr*kcb : jr*kcb+tk.nr*kcb]
						ci := (ic+ir)*p.ldc + jc + jr
						switch {
						case rows == mr && cols == tk.nr:
							tk.tile(kcb, ap, bp, p.c[ci:], p.ldc, p.alpha, beta)
						case tk.edge != nil:
							tk.edge(kcb, ap, bp, p.c[ci:], p.ldc, p.alpha, beta, rows, cols)
						default:
							tk.tile(kcb, ap, bp, w.tile, tk.nr, 1, 0)
							for i := 0; i < rows; i++ {
								storeRow(p.c[ci+i*p.ldc:], w.tile[i*tk.nr:i*tk.nr+cols], p.alpha, beta)
							}
						}
					}
				}
			}
		}
	}
}

func roundUp(x, to int) int { return (x + to - 1) / to * to }

// split runs p on up to workers goroutines (the caller and helpers), each
// on a block of whole rows of C (or columns, if C is wider than tall) that
// is a multiple of the kernel's tile.
func (p *product) split(workers int) {
	byRows := p.m >= p.n
	size, unit := p.n, p.kn.nr
	if byRows {
		size, unit = p.m, p.kn.mr
	}
	step := roundUp((size+workers-1)/workers, unit)
	workers = (size + step - 1) / step
	if workers < 2 {
		p.run()
		return
	}
	s := splits.Get().(*blockSet)
	if cap(s.blocks) < workers {
		s.blocks = make([]product, workers)
	}
	s.blocks = s.blocks[:workers]
	for w := range s.blocks {
		b := &s.blocks[w]
		*b = *p
		b.done = &s.done
		lo := w * step
		hi := min(size, lo+step)
		if byRows {
			b.m = hi - lo
			b.c = p.c[lo*p.ldc:]
			if p.aT {
				b.a = p.a[lo:]
			} else {
				b.a = p.a[lo*p.lda:]
			}
		} else {
			b.n = hi - lo
			b.c = p.c[lo:]
			if p.bT {
				b.b = p.b[lo*p.ldb:]
			} else {
				b.b = p.b[lo:]
			}
		}
	}
	s.done.Add(workers - 1)
	for w := 1; w < workers; w++ {
		go helper()
		blocks <- &s.blocks[w]
	}
	s.blocks[0].run()
	s.done.Wait()
	clear(s.blocks)
	splits.Put(s)
}

var (
	// splits holds the block sets of split products for reuse.
	splits = sync.Pool{New: func() any { return new(blockSet) }}
	// blocks hands each helper the block it computes. A helper takes
	// no arguments (so starting it allocates nothing), takes one block,
	// computes it and exits; a split starts as many helpers as it sends
	// blocks. The buffer lets the caller go on to its own block at once.
	blocks = make(chan *product, 256)
)

func helper() {
	b := <-blocks
	b.run()
	b.done.Done()
}
