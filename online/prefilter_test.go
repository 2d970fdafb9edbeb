package online

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"gonum.org/v1/gonum/mat"
)

// prefilterKernels returns the kernels with a prefilter this CPU runs.
func prefilterKernels(t testing.TB) []*kernel {
	var ks []*kernel
	for _, kn := range kernels() {
		if kn.pre != nil {
			ks = append(ks, kn)
		}
	}
	if len(ks) == 0 {
		t.Skip("no kernel with a prefilter on this CPU")
	}
	return ks
}

// The selection kernel keeps, in increasing order, exactly the columns
// whose score is at least the row's threshold, never a NaN, for widths
// that are and are not multiples of its 64-score stride, with candidates
// sparse (its fast path skips 64 at a time) and dense.
func TestPrefilterSelect(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, kn := range prefilterKernels(t) {
		for _, width := range []int{16, 32, 48, 64, 80, 112, 128, 208, 4096} {
			for _, keep := range []float64{0, 0.002, 0.05, 0.5, 1} {
				const rows = 3
				s := make([]float32, rows*width)
				th := make([]float32, rows)
				var want [rows][]int32
				for r := range rows {
					th[r] = float32(rng.NormFloat64())
					for c := range width {
						v := th[r] - 1 - float32(rng.Float64())
						switch u := rng.Float64(); {
						case u < keep/2:
							v = th[r] // exactly at the threshold
						case u < keep:
							v = th[r] + float32(rng.Float64())
						case u < keep+0.01:
							v = float32(math.NaN())
						}
						s[r*width+c] = v
						if v >= th[r] {
							want[r] = append(want[r], int32(c))
						}
					}
				}
				idx := make([]int32, rows*(width+16))
				pos := make([]int64, rows)
				for r := range rows {
					pos[r] = int64(r * (width + 16))
				}
				kn.pre.sel(s, rows, width, th, pos, idx)
				for r := range rows {
					from := int64(r * (width + 16))
					if got := idx[from:pos[r]]; !slices.Equal(got, want[r]) {
						t.Fatalf("%s width %d keep %v row %d: selected %v, want %v", kn.name, width, keep, r, got, want[r])
					}
				}
			}
		}
	}
}

// withQuant gives c's atoms the int8 copy whatever their number.
func withQuant(c *scoreCase) *scoreCase {
	c.pack.quant = newQuantAtoms(c.k, c.dim)
	for j := range c.k {
		c.pack.set(j, c.atoms.RawRowView(j))
	}
	return c
}

// checkPrefilter runs the prefilter path of kn on c whatever its K, on
// one goroutine and in three parts, and the kernel's own argmax over
// every atom, and requires the same codes and the same float32 cosines,
// bit for bit.
func checkPrefilter(t *testing.T, kn *kernel, c *scoreCase, seeded int) {
	t.Helper()
	var full scratch
	full.x = c.x
	plain := *kn
	plain.pre = nil
	full.argmaxFused(&plain, &c.pack, seeded, c.m, 1)
	if seeded == 0 || c.m == 0 {
		return // argmaxFused answers before any kernel runs
	}
	for _, cores := range []int{1, 3} {
		var pre scratch
		pre.x = c.x
		pre.best = grow(pre.best, c.m)
		pre.cos = grow(pre.cos, c.m)
		pre.argmaxPrefiltered(kn, &c.pack, seeded, c.m, cores)
		for i := range c.m {
			if pre.best[i] != full.best[i] || math.Float64bits(pre.cos[i]) != math.Float64bits(full.cos[i]) {
				t.Fatalf("%s m=%d k=%d dim=%d seeded=%d cores=%d: row %d: prefilter %d (%v), kernel %d (%v)",
					kn.name, c.m, c.k, c.dim, seeded, cores, i, pre.best[i], pre.cos[i], full.best[i], full.cos[i])
			}
		}
	}
}

// TestPrefilterMatchesKernel checks the prefilter against the argmax
// kernel on random clusters, dimensions that are not a multiple of four,
// atoms not seeded or reset, and on whitened MNIST patches against a
// dictionary learned from them, where many cosines are close.
func TestPrefilterMatchesKernel(t *testing.T) {
	ks := prefilterKernels(t)
	rng := rand.New(rand.NewPCG(91, 92))
	rows, km := learnedMNIST(t, 40, 1024, 1000, 7)
	mnist := withQuant(scoreCaseOf(rows[:2000*36], km.Atoms()))
	for _, kn := range ks {
		checkPrefilter(t, kn, mnist, km.Seeded())
		for _, shape := range [][3]int{{301, 1500, 36}, {77, 2000, 37}, {9, 40, 5}, {8, 1024, 36}, {1, 33, 300}} {
			c := withQuant(newScoreCase(rng, shape[0], shape[1], shape[2]))
			checkPrefilter(t, kn, c, c.k)
			checkPrefilter(t, kn, c, c.k/2+1)
			for j := 3; j < c.k; j += 7 {
				c.pack.reset(j)
			}
			checkPrefilter(t, kn, c, c.k)
		}
	}
}

// TestPrefilterTies checks that the prefilter keeps the first of equal
// atoms, as the kernel does, across panels.
func TestPrefilterTies(t *testing.T) {
	ks := prefilterKernels(t)
	rng := rand.New(rand.NewPCG(93, 94))
	c := withQuant(newScoreCase(rng, 19, 4200, 36))
	for _, j := range []int{40, 150, 999, 4199} {
		c.pack.set(j, c.atoms.RawRowView(777))
	}
	c.x = slices.Concat(c.x, slices.Repeat(c.atoms.RawRowView(777), 9))
	c.m += 9
	for _, kn := range ks {
		checkPrefilter(t, kn, c, c.k)
		var s scratch
		s.x = c.x
		s.argmaxFused(kn, &c.pack, c.k, c.m, 1)
		for i := 19; i < c.m; i++ {
			if s.best[i] != 40 {
				t.Errorf("%s: row %d: atom %d, want 40, the first of the copies 40, 150, 777, 999, 4199", kn.name, i, s.best[i])
			}
		}
	}
}

// FuzzPrefilter checks the prefilter on shapes across the block and panel
// edges, with some atoms absent.
func FuzzPrefilter(f *testing.F) {
	f.Add(uint64(1), uint8(1), uint16(1), uint16(36), uint16(1))
	f.Add(uint64(2), uint8(9), uint16(33), uint16(37), uint16(17))
	f.Add(uint64(3), uint8(25), uint16(1100), uint16(3), uint16(1000))
	f.Fuzz(func(t *testing.T, seed uint64, m uint8, k, dim, seeded uint16) {
		ks := prefilterKernels(t)
		mm, kk, dd := 1+int(m)%40, 1+int(k)%1200, 1+int(dim)%100
		ss := int(seeded) % (kk + 1)
		c := withQuant(newScoreCase(rand.New(rand.NewPCG(seed, 95)), mm, kk, dd))
		for j := ss; j < kk; j++ {
			c.pack.reset(j)
		}
		for _, kn := range ks {
			checkPrefilter(t, kn, c, ss)
		}
	})
}

// BenchmarkArgmaxMNIST measures argmaxFused with each kernel on whitened
// MNIST patches against K = 4096 atoms learned from them, the daemon's
// image pipeline at the paper's scale, where the prefilter is used:
// rows/s, and GFLOP/s as if every score were computed (2·K·36 flops a
// row).
func BenchmarkArgmaxMNIST(b *testing.B) {
	const k, dim, m = 4096, 36, 8192
	rows, km := learnedMNIST(b, 100, k, 1024, 7)
	if km.Seeded() != k {
		b.Fatalf("seeded %d atoms of %d", km.Seeded(), k)
	}
	for _, kn := range kernels() {
		b.Run(kn.name, func(b *testing.B) {
			var s scratch
			s.x = rows[:m*dim]
			s.argmaxFused(kn, &km.packed, km.seeded, m, 1) // grow the workspaces
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				s.argmaxFused(kn, &km.packed, km.seeded, m, 1)
				i++
			}
			rate := float64(i*m) / b.Elapsed().Seconds()
			b.ReportMetric(rate, "rows/s")
			b.ReportMetric(rate*2*k*dim/1e9, "GFLOP/s")
			if w := &s.fused.pre; w.blocks > w.fallbacks {
				b.ReportMetric(float64(w.candidates)/float64(8*(w.blocks-w.fallbacks)), "candidates/row")
				b.ReportMetric(float64(w.rescored)/float64(w.blocks-w.fallbacks), "rescored/block")
				b.ReportMetric(float64(w.fallbacks)/float64(w.blocks), "fallback/block")
			}
		})
	}
}

// TestPrefilterKeepsFewCandidates checks that on whitened MNIST patches
// against 4096 atoms learned from them the prefilter serves every block
// and leaves the float32 kernel under 1% of the atoms to score, the
// saving it exists for (BenchmarkArgmaxMNIST reports the figures). The
// rows are scored in three parts, whose counts must add up.
func TestPrefilterKeepsFewCandidates(t *testing.T) {
	if fused.pre == nil {
		t.Skip("no kernel with a prefilter on this CPU")
	}
	const k, m = 4096, 4096
	rows, km := learnedMNIST(t, 100, k, 1024, 7)
	if km.packed.quant == nil || km.Seeded() != k {
		t.Fatalf("int8 atoms %v, seeded %d of %d", km.packed.quant != nil, km.Seeded(), k)
	}
	var s scratch
	s.x = rows[:m*36]
	s.argmaxFused(fused, &km.packed, k, m, 3)
	w := &s.fused.pre
	if w.blocks != m/8 || w.fallbacks != 0 {
		t.Fatalf("%d blocks, %d scored by the plain kernel; want %d, 0", w.blocks, w.fallbacks, m/8)
	}
	if perRow := float64(w.candidates) / m; perRow >= 0.01*k {
		t.Errorf("%.1f candidates a row, want under 1%% of %d atoms", perRow, k)
	}
	if perBlock := float64(w.rescored) / float64(w.blocks); perBlock >= 0.01*k*8 {
		t.Errorf("%.1f atoms rescored a block of 8 rows, want under 1%% of %d each", perBlock, k)
	}
}

// TestKMeansLearnsAsWithoutPrefilter checks that a dictionary of 4096
// atoms, where KMeans uses the prefilter, learns exactly as with the
// float32 kernel alone on one core, on one core and on three (SetCores):
// the same atoms, bit for bit.
func TestKMeansLearnsAsWithoutPrefilter(t *testing.T) {
	ks := prefilterKernels(t)
	const k = 4096
	rows := mnistRows(t, 100)
	saved := fused
	defer func() { fused = saved }()
	learn := func(kn *kernel, cores int) *KMeans {
		fused = kn
		km, _ := newTestKMeans(KMeansSettings{K: k, Dim: 36}, 11)
		km.SetCores(cores)
		if (km.packed.quant != nil) != (kn.pre != nil) {
			t.Fatalf("%s: int8 atoms %v", kn.name, km.packed.quant != nil)
		}
		for i := 0; i+1024 <= len(rows)/36; i += 1024 {
			km.Learn(mat.NewDense(1024, 36, rows[i*36:(i+1024)*36]), nil)
		}
		return km
	}
	plain := *ks[0]
	plain.pre = nil
	want := learn(&plain, 1)
	for _, cores := range []int{1, 3} {
		got := learn(ks[0], cores)
		if got.Seeded() != k {
			t.Fatalf("seeded %d atoms of %d: the prefilter was not used", got.Seeded(), k)
		}
		if !slices.Equal(want.atoms.RawMatrix().Data, got.atoms.RawMatrix().Data) {
			t.Errorf("the dictionaries differ, the prefilter on %d cores", cores)
		}
	}
}
