package online

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"gonum.org/v1/gonum/mat"
)

// scoreCase is one set of unit rows and unit atoms for the kernel tests,
// with the float64 cosines as reference.
type scoreCase struct {
	m, k, dim int
	x         []float64 // m×dim unit rows
	atoms     *mat.Dense
	pack      packedAtoms
	want      []float64 // m×k float64 cosines of the float32-rounded inputs
}

// newScoreCase draws m rows and k atoms of dimension dim around nc
// centres (so that argmax has a clear winner most of the time and f_gq
// codes are not empty).
func newScoreCase(rng *rand.Rand, m, k, dim int) *scoreCase {
	nc := max(1, k/4)
	all, _, _ := sphereClusters(rng, nc, dim, m+k, 0.3)
	return scoreCaseOf(all.RawMatrix().Data[:m*dim], all.Slice(m, m+k, 0, dim))
}

// scoreCaseOf returns the case of the unit rows x (row-major) and the unit
// atoms.
func scoreCaseOf(x []float64, atoms mat.Matrix) *scoreCase {
	k, dim := atoms.Dims()
	m := len(x) / dim
	c := &scoreCase{m: m, k: k, dim: dim}
	c.x = slices.Clone(x)
	c.atoms = mat.DenseCopyOf(atoms)
	c.pack = newPackedAtoms(k, dim)
	for j := 0; j < k; j++ {
		c.pack.set(j, c.atoms.RawRowView(j))
	}
	c.want = make([]float64, m*k)
	for i := 0; i < m; i++ {
		for j := 0; j < k; j++ {
			var s float64
			for l := 0; l < dim; l++ {
				s += float64(float32(c.x[i*dim+l])) * float64(float32(c.atoms.At(j, l)))
			}
			c.want[i*k+j] = s
		}
	}
	return c
}

// scoreTol is the tolerance of the kernels' scores against float64.
func scoreTol(dim int) float64 { return fusedTol(dim) }

// checkArgmaxKernel runs kn's argmax on c through scratch.argmaxFused and
// compares with the float64 reference: the cosine within scoreTol, and the
// same atom unless the reference's best and the chosen atom are within
// 2·scoreTol (a near-tie float32 cannot resolve).
func checkArgmaxKernel(t *testing.T, kn *kernel, c *scoreCase, seeded int) {
	t.Helper()
	var s scratch
	s.x = c.x
	s.argmaxFused(kn, &c.pack, seeded, c.m, 1)
	tol := scoreTol(c.dim)
	for i := 0; i < c.m; i++ {
		if seeded == 0 {
			if s.best[i] != -1 || s.cos[i] != 0 {
				t.Fatalf("%s: row %d: got %d, %v with no atom, want -1, 0", kn.name, i, s.best[i], s.cos[i])
			}
			continue
		}
		row := c.want[i*c.k : i*c.k+seeded]
		want := 0
		for j, v := range row {
			if v > row[want] {
				want = j
			}
		}
		got := s.best[i]
		if got < 0 || got >= seeded {
			t.Fatalf("%s m=%d k=%d dim=%d seeded=%d: row %d: atom %d out of range", kn.name, c.m, c.k, c.dim, seeded, i, got)
		}
		if math.Abs(s.cos[i]-row[got]) > tol {
			t.Fatalf("%s m=%d k=%d dim=%d: row %d: cosine %v of atom %d, want %v ± %v", kn.name, c.m, c.k, c.dim, i, s.cos[i], got, row[got], tol)
		}
		if got != want && row[want]-row[got] > 2*tol {
			t.Fatalf("%s m=%d k=%d dim=%d: row %d: atom %d (cos %v), want %d (cos %v)", kn.name, c.m, c.k, c.dim, i, got, row[got], want, row[want])
		}
	}
}

// checkAboveKernel runs kn's threshold kernel on c through
// scratch.codesFused and compares with the float64 reference: increasing
// atoms, cosines within scoreTol, and the same set except for atoms within
// scoreTol of the threshold.
func checkAboveKernel(t *testing.T, kn *kernel, c *scoreCase, seeded int, thr float64) {
	t.Helper()
	var s scratch
	s.x = c.x
	s.rows = make([]int, c.m)
	for i := range s.rows {
		s.rows[i] = i
	}
	var codes SparseCodes
	s.codesFused(&codes, kn, &c.pack, seeded, c.m, c.m, thr, 1)
	tol := scoreTol(c.dim)
	for i := 0; i < c.m; i++ {
		atoms, cos := codes.Row(i)
		row := c.want[i*c.k : i*c.k+max(seeded, 0)]
		got := make(map[int]bool)
		for n, j := range atoms {
			if j < 0 || j >= seeded || (n > 0 && j <= atoms[n-1]) {
				t.Fatalf("%s m=%d k=%d dim=%d: row %d: atoms %v not increasing in [0, %d)", kn.name, c.m, c.k, c.dim, i, atoms, seeded)
			}
			if cos[n] < thr || math.Abs(cos[n]-row[j]) > tol {
				t.Fatalf("%s: row %d atom %d: cosine %v, want %v ± %v and ≥ %v", kn.name, i, j, cos[n], row[j], tol, thr)
			}
			got[j] = true
		}
		for j, v := range row {
			if v >= thr+tol && !got[j] {
				t.Fatalf("%s m=%d k=%d dim=%d: row %d: atom %d (cos %v) missing at t = %v", kn.name, c.m, c.k, c.dim, i, j, v, thr)
			}
		}
	}
}

func TestFusedKernelsRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(71, 72))
	for _, kn := range kernels() {
		for _, sz := range []struct{ m, k, dim int }{
			{1, 1, 1}, {7, 33, 36}, {64, 256, 36}, {25, 100, 3}, {9, 1000, 108}, {17, 65, 300},
			{701, 1000, 36}, // several calls of argmaxChunk
		} {
			t.Run(fmt.Sprintf("%s/m=%d,k=%d,dim=%d", kn.name, sz.m, sz.k, sz.dim), func(t *testing.T) {
				c := newScoreCase(rng, sz.m, sz.k, sz.dim)
				for _, seeded := range []int{sz.k, sz.k / 2, 1, 0} {
					for j := 0; j < sz.k; j++ {
						if j < seeded {
							c.pack.set(j, c.atoms.RawRowView(j))
						} else {
							c.pack.reset(j) // atoms not seeded are NaN
						}
					}
					checkArgmaxKernel(t, kn, c, seeded)
					for _, thr := range []float64{-2, 0, 0.3, 0.9} {
						checkAboveKernel(t, kn, c, seeded, thr)
					}
				}
			})
		}
	}
}

// BenchmarkScore measures the kernels alone on packed rows: 1024 rows of
// dimension 36 against K atoms, reported as rows/s and GFLOP/s (2·K·36
// flops per row).
func BenchmarkScore(b *testing.B) {
	const m, dim = 1024, 36
	rng := rand.New(rand.NewPCG(73, 74))
	for _, k := range []int{256, 1024, 4096} {
		c := newScoreCase(rng, m, k, dim)
		for _, kn := range kernels() {
			for _, op := range []string{"argmax", "above"} {
				b.Run(fmt.Sprintf("%s/%s/K=%d", op, kn.name, k), func(b *testing.B) {
					var s scratch
					s.x = c.x
					s.rows = make([]int, m)
					for i := range s.rows {
						s.rows[i] = i
					}
					var codes SparseCodes
					run := func() {
						if op == "argmax" {
							s.argmaxFused(kn, &c.pack, k, m, 1)
						} else {
							s.codesFused(&codes, kn, &c.pack, k, m, m, 0.5, 1)
						}
					}
					run() // grow the workspaces
					b.ReportAllocs()
					i := 0
					for b.Loop() {
						run()
						i++
					}
					rate := float64(i*m) / b.Elapsed().Seconds()
					b.ReportMetric(rate, "rows/s")
					b.ReportMetric(rate*2*float64(k*dim)/1e9, "GFLOP/s")
				})
			}
		}
	}
}

// mnistRows returns the non-blank whitened patches of the first n test
// images, row-major.
func mnistRows(t testing.TB, n int) []float64 {
	t.Helper()
	x, blank := mnistPatches(t, n)
	var rows []float64
	for i, b := range blank {
		if !b {
			rows = append(rows, x.RawRowView(i)...)
		}
	}
	return rows
}

// learnedMNIST returns mnistRows(t, n) and a dictionary of k atoms
// learned from them in minibatches of batch rows.
func learnedMNIST(t testing.TB, n, k, batch int, seed uint64) ([]float64, *KMeans) {
	t.Helper()
	rows := mnistRows(t, n)
	km, _ := newTestKMeans(KMeansSettings{K: k, Dim: 36}, seed)
	m := len(rows) / 36
	for i := 0; i < m; i += batch {
		n := min(batch, m-i)
		km.Learn(mat.NewDense(n, 36, rows[i*36:(i+n)*36]), nil)
	}
	return rows, km
}

// TestFusedKernelsMNIST checks every kernel on whitened MNIST patches
// against a dictionary learned from them, where many cosines are close.
func TestFusedKernelsMNIST(t *testing.T) {
	rows, km := learnedMNIST(t, 20, 300, 500, 5)
	if km.Seeded() != 300 {
		t.Fatalf("seeded %d atoms, want 300", km.Seeded())
	}
	c := scoreCaseOf(rows[:600*36], km.Atoms())
	for _, kn := range kernels() {
		checkArgmaxKernel(t, kn, c, c.k)
		for _, thr := range []float64{0.3, 0.6} {
			checkAboveKernel(t, kn, c, c.k, thr)
		}
	}
}

// TestFusedKernelsAgree checks that the vector kernels give bit-identical
// codes: each lane accumulates in the same order with fused
// multiply-adds.
func TestFusedKernelsAgree(t *testing.T) {
	ks := kernels()
	if len(ks) < 3 {
		t.Skip("fewer than two vector kernels on this machine")
	}
	rng := rand.New(rand.NewPCG(75, 76))
	c := newScoreCase(rng, 301, 517, 37)
	var ref scratch
	ref.x = c.x
	ref.argmaxFused(ks[0], &c.pack, c.k, c.m, 1)
	for _, kn := range ks[1 : len(ks)-1] {
		var s scratch
		s.x = c.x
		s.argmaxFused(kn, &c.pack, c.k, c.m, 1)
		if !slices.Equal(s.best, ref.best) || !slices.Equal(s.cos, ref.cos) {
			t.Errorf("%s and %s give different codes", kn.name, ks[0].name)
		}
	}
}

// FuzzScoreKernels checks every kernel on shapes across the block edges:
// row counts and K that are not multiples of the block or panel, and
// dimensions from 1 to 300.
func FuzzScoreKernels(f *testing.F) {
	f.Add(uint64(1), uint8(1), uint16(1), uint16(1), uint16(1), 0.5)
	f.Add(uint64(2), uint8(9), uint16(33), uint16(36), uint16(17), 0.2)
	f.Add(uint64(3), uint8(25), uint16(65), uint16(300), uint16(65), -1.0)
	f.Add(uint64(4), uint8(8), uint16(32), uint16(2), uint16(31), 0.99)
	f.Fuzz(func(t *testing.T, seed uint64, m uint8, k, dim, seeded uint16, thr float64) {
		mm, kk, dd := 1+int(m)%40, 1+int(k)%300, 1+int(dim)%300
		ss := int(seeded) % (kk + 1)
		if math.IsNaN(thr) || math.IsInf(thr, 0) {
			thr = 0.5
		}
		c := newScoreCase(rand.New(rand.NewPCG(seed, 77)), mm, kk, dd)
		for j := ss; j < kk; j++ {
			c.pack.reset(j)
		}
		for _, kn := range kernels() {
			checkArgmaxKernel(t, kn, c, ss)
			checkAboveKernel(t, kn, c, ss, thr)
		}
	})
}

func TestThreshold32(t *testing.T) {
	for _, v := range []float64{0, 0.1, 0.45, 1.0 / 3, -0.7, 1, 2e-40, math.Inf(-1)} {
		t32 := threshold32(v)
		if float64(t32) < v || (float64(math.Nextafter32(t32, float32(math.Inf(-1)))) >= v && !math.IsInf(v, 0)) {
			t.Errorf("threshold32(%v) = %v: not the smallest float32 >= t", v, t32)
		}
	}
}

// TestFusedKernelsTies checks that every kernel returns the first atom
// among exact ties, across lanes and panels.
func TestFusedKernelsTies(t *testing.T) {
	rng := rand.New(rand.NewPCG(79, 80))
	c := newScoreCase(rng, 19, 200, 36)
	for _, j := range []int{40, 150, 199} {
		c.pack.set(j, c.atoms.RawRowView(77))
	}
	same := newPackedAtoms(70, 36)
	for j := 0; j < 70; j++ {
		same.set(j, c.atoms.RawRowView(3))
	}
	for _, kn := range kernels() {
		var s scratch
		s.x = c.x
		s.argmaxFused(kn, &same, 70, c.m, 1)
		for i, j := range s.best[:c.m] {
			if j != 0 {
				t.Errorf("%s: row %d: atom %d among 70 equal atoms, want 0", kn.name, i, j)
			}
		}
		s.x = slices.Repeat(c.atoms.RawRowView(77), 9)
		s.argmaxFused(kn, &c.pack, 200, 9, 1)
		for i, j := range s.best[:9] {
			if j != 40 {
				t.Errorf("%s: row %d: atom %d, want 40, the first of the copies 40, 77, 150, 199", kn.name, i, j)
			}
		}
	}
}

// TestKMeansResumeWhileSeeding checks exact resume when the float32 copy
// of the atoms is rebuilt from a dictionary not yet fully seeded (its
// missing atoms must be NaN again, across several panels).
func TestKMeansResumeWhileSeeding(t *testing.T) {
	rng := rand.New(rand.NewPCG(81, 82))
	x, _, _ := sphereClusters(rng, 40, 12, 3000, 0.4)
	bs := batches(x, 30)
	s := KMeansSettings{K: 100, Dim: 12}
	straight, _ := newTestKMeans(s, 11)
	for _, b := range bs {
		straight.Learn(b, nil)
	}
	first, src := newTestKMeans(s, 11)
	for _, b := range bs[:2] {
		first.Learn(b, nil)
	}
	if first.Seeded() >= s.K || first.Seeded() <= panelWidth {
		t.Fatalf("seeded %d atoms: the test wants more than a panel and fewer than K", first.Seeded())
	}
	blob, _ := first.MarshalBinary()
	rngState, _ := src.MarshalBinary()
	var src2 rand.PCG
	if err := src2.UnmarshalBinary(rngState); err != nil {
		t.Fatal(err)
	}
	resumed := NewKMeans(s, &src2)
	if err := resumed.UnmarshalBinary(blob); err != nil {
		t.Fatal(err)
	}
	for _, b := range bs[2:] {
		resumed.Learn(b, nil)
	}
	want, _ := straight.MarshalBinary()
	got, _ := resumed.MarshalBinary()
	if !slices.Equal(got, want) {
		t.Error("resumed dictionary differs from the uninterrupted one")
	}
}

// TestCandidateScoresNotFinite checks that a row whose float32 copy is
// not finite, which the kernels leave out, neither panics nor leaves
// stale scores: the candidates are scored by the plain loop, with a
// score that is not finite wherever the row meets a candidate (as a row
// or as the candidate itself), and the other scores within float32
// rounding of the kernel's on the same rows without the bad value.
func TestCandidateScoresNotFinite(t *testing.T) {
	rng := rand.New(rand.NewPCG(85, 86))
	const m, dim, bad = 100, 36, 17
	c := newScoreCase(rng, m, 1, dim)
	x := slices.Clone(c.x)
	x[bad*dim+5] = 1e300 // +Inf in float32
	cand := []int{3, bad, 40}
	for _, kn := range kernels() {
		var s, ref scratch
		s.x, ref.x = x, c.x
		s.packRowsAsAtoms(m, dim)
		ref.packRowsAsAtoms(m, dim)
		scores, stride := s.candidateScores(kn, m, cand, &s.fused, &s.candX)
		want, _ := ref.candidateScores(kn, m, cand, &ref.fused, &ref.candX)
		for k, row := range cand {
			for r := range m {
				got := float64(scores[k*stride+r])
				if r == bad || row == bad {
					if !math.IsNaN(got) && !math.IsInf(got, 0) {
						t.Errorf("%s: row %d, candidate %d (row %d): %v, want a score that is not finite", kn.name, r, k, row, got)
					}
				} else if math.Abs(got-float64(want[k*stride+r])) > 1e-5 {
					t.Fatalf("%s: row %d candidate %d: %v, want %v", kn.name, r, k, got, want[k*stride+r])
				}
			}
		}
	}
}

// TestCandidateScores checks the seeding scores of every kernel, the
// candidates scored against the rows as atoms: within float32 tolerance
// of the float64 cosines, and the same bits as the rows scored against
// the candidates as atoms (the way every other call scores a pair), for
// row counts that are not multiples of a panel or of the kernel's rows,
// and with rows split over several kernel calls (argmaxChunk).
func TestCandidateScores(t *testing.T) {
	rng := rand.New(rand.NewPCG(83, 84))
	for _, tc := range []struct{ m, n, dim int }{{1, 1, 36}, {7, 7, 36}, {33, 11, 25}, {1000, 10, 36}, {20000, 32, 36}} {
		c := newScoreCase(rng, tc.m, 1, tc.dim) // its rows; the atom is not used
		cand := make([]int, tc.n)
		for i := range cand {
			cand[i] = rng.IntN(tc.m)
		}
		for _, kn := range kernels() {
			var s scratch
			s.x = c.x
			s.packRowsAsAtoms(tc.m, tc.dim)
			scores, stride := s.candidateScores(kn, tc.m, cand, &s.fused, &s.candX)

			var ref scratch // the rows against a panel of candidates
			pack := newPackedAtoms(panelWidth, tc.dim)
			for t, r := range cand {
				pack.set(t, c.x[r*tc.dim:(r+1)*tc.dim])
			}
			blocks := (tc.m + kn.rows - 1) / kn.rows
			ref.fused.x, _ = packRows(nil, c.x, tc.m, tc.dim, kn.rows)
			capacity := panelWidth + panelWidth/2
			pos := make([]int64, blocks*kn.rows)
			for i := range pos {
				pos[i] = int64(i * capacity)
			}
			cos := make([]float32, len(pos)*capacity)
			idx := make([]int32, len(pos)*capacity)
			kn.above(ref.fused.x, blocks, tc.dim, pack.data, 1, -2, pos, cos, idx)

			for r := range tc.m {
				if int(pos[r])-r*capacity != tc.n {
					t.Fatalf("%s: reference row %d has %d scores", kn.name, r, int(pos[r])-r*capacity)
				}
				for k, row := range cand {
					got := scores[k*stride+r]
					var want float64
					for l := range tc.dim {
						want += float64(float32(c.x[r*tc.dim+l])) * float64(float32(c.x[row*tc.dim+l]))
					}
					if !(math.Abs(float64(got)-want) <= scoreTol(tc.dim)) {
						t.Fatalf("%s, %d×%d: row %d candidate %d: score %v, want %v", kn.name, tc.m, tc.n, r, k, got, want)
					}
					if ref := cos[r*capacity+k]; math.Float32bits(got) != math.Float32bits(ref) {
						t.Fatalf("%s, %d×%d: row %d candidate %d: %v as atoms, %v as rows", kn.name, tc.m, tc.n, r, k, got, ref)
					}
				}
			}
		}
	}
}
