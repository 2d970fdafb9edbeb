package sgd_test

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/smtd/smtd/online"
	"github.com/smtd/smtd/sgd"
	"gonum.org/v1/gonum/floats"
	"gonum.org/v1/gonum/floats/scalar"
	"gonum.org/v1/gonum/mat"
)

// randomVQ returns n f_vq codes in [0, k) with a fraction blank of −1.
func randomVQ(rng *rand.Rand, n, k int, blank float64) []int {
	c := make([]int, n)
	for i := range c {
		if rng.Float64() < blank {
			c[i] = -1
		} else {
			c[i] = rng.IntN(k)
		}
	}
	return c
}

// randomGQ returns n f_gq codes of up to three distinct atoms in [0, k),
// a fraction blank of them empty.
func randomGQ(rng *rand.Rand, n, k int, blank float64) *online.SparseCodes {
	c := &online.SparseCodes{Rows: n, Atoms: k, Ptr: []int{0}}
	for i := 0; i < n; i++ {
		if rng.Float64() >= blank {
			m := 1 + rng.IntN(3)
			seen := map[int]bool{}
			for len(seen) < min(m, k) {
				seen[rng.IntN(k)] = true
			}
			for a := 0; a < k; a++ {
				if seen[a] {
					c.Index = append(c.Index, a)
					c.Cos = append(c.Cos, 1)
				}
			}
		}
		c.Ptr = append(c.Ptr, len(c.Index))
	}
	return c
}

// brute accumulates V and L by forming the codes and the columns of D
// densely, the definitions of sgd.Stats.
type brute struct {
	n      int
	blank  sgd.BlankMode
	k      int
	v, l   *mat.Dense
	w, wp  float64
	memory float64
}

func newBrute(k int, blank sgd.BlankMode, memory float64) *brute {
	n := k
	if blank == sgd.BlankAtom {
		n++
	}
	return &brute{n: n, k: k, blank: blank, v: mat.NewDense(n, n, nil), l: mat.NewDense(n, n, nil), memory: memory}
}

// alpha returns the dense code of a row given its atoms (nil: blank).
func (b *brute) alpha(atoms []int) *mat.VecDense {
	a := mat.NewVecDense(b.n, nil)
	if len(atoms) == 0 && b.blank == sgd.BlankAtom {
		a.SetVec(b.k, 1)
	}
	for _, x := range atoms {
		a.SetVec(x, 1)
	}
	return a
}

// add adds a batch of rows (their atoms) and columns of D (as weights on
// rows).
func (b *brute) add(rows [][]int, cols []map[int]float64) {
	var alphas []*mat.VecDense
	counted := 0
	for _, r := range rows {
		a := b.alpha(r)
		alphas = append(alphas, a)
		if mat.Sum(a) > 0 {
			counted++
		}
	}
	if counted == 0 {
		return
	}
	if b.memory > 0 {
		f := math.Exp(-float64(counted) / b.memory)
		b.v.Scale(f, b.v)
		b.l.Scale(f, b.l)
		b.w *= f
		b.wp *= f
	}
	for _, a := range alphas {
		b.v.RankOne(b.v, 1, a, a)
	}
	b.w += float64(counted)
	for _, col := range cols {
		ad := mat.NewVecDense(b.n, nil)
		for i, wt := range col {
			ad.AddScaledVec(ad, wt, alphas[i])
		}
		b.l.RankOne(b.l, 1, ad, ad)
		b.wp++
	}
}

func (b *brute) V() *mat.Dense {
	var v mat.Dense
	v.Scale(1/b.w, b.v)
	return &v
}

func (b *brute) L() *mat.Dense {
	var l mat.Dense
	l.Scale(1/b.wp, b.l)
	return &l
}

// gridCols returns the columns e_i − e_j of D for the neighbour pairs of
// images of a grid within range d (0: whole image), skipping pairs with a
// blank end when skip.
func gridCols(rows [][]int, images, gr, gc, d int, blankSkip bool) []map[int]float64 {
	var cols []map[int]float64
	for img := 0; img < images; img++ {
		for i := 0; i < gr*gc; i++ {
			for j := i + 1; j < gr*gc; j++ {
				ri, ci, rj, cj := i/gc, i%gc, j/gc, j%gc
				if d > 0 && (abs(ri-rj) > d || abs(ci-cj) > d) {
					continue
				}
				a, b := img*gr*gc+i, img*gr*gc+j
				if blankSkip && (len(rows[a]) == 0 || len(rows[b]) == 0) {
					continue
				}
				cols = append(cols, map[int]float64{a: 1, b: -1})
			}
		}
	}
	return cols
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}

func rowsOfVQ(codes []int) [][]int {
	rows := make([][]int, len(codes))
	for i, a := range codes {
		if a >= 0 {
			rows[i] = []int{a}
		}
	}
	return rows
}

func rowsOfGQ(c *online.SparseCodes) [][]int {
	rows := make([][]int, c.Rows)
	for i := range rows {
		a, _ := c.Row(i)
		rows[i] = append([]int(nil), a...)
	}
	return rows
}

func denseOfSym(s *sgd.Stats, l bool) *mat.Dense {
	var m mat.SymDense
	if l {
		s.LTo(&m)
	} else {
		s.VTo(&m)
	}
	return mat.DenseCopyOf(&m)
}

func equalApprox(t *testing.T, what string, got, want mat.Matrix, tol float64) {
	t.Helper()
	r, c := want.Dims()
	if gr, gc := got.Dims(); gr != r || gc != c {
		t.Fatalf("%s: got %dx%d, want %dx%d", what, gr, gc, r, c)
	}
	for i := 0; i < r; i++ {
		for j := 0; j < c; j++ {
			if g, w := got.At(i, j), want.At(i, j); !scalar.EqualWithinAbsOrRel(g, w, tol, tol) {
				t.Fatalf("%s[%d,%d] = %v, want %v", what, i, j, g, w)
			}
		}
	}
}

func TestStatsMatchDefinition(t *testing.T) {
	grid := online.PatchGrid{Width: 7, Height: 6, Size: 2} // 5×6 patch grid
	gr, gc := grid.Rows(), grid.Cols()
	for _, tc := range []struct {
		name   string
		blank  sgd.BlankMode
		rng    int
		multi  bool
		memory float64
	}{
		{"vq/atom/d=1", sgd.BlankAtom, 1, false, 0},
		{"vq/skip/d=1", sgd.BlankSkip, 1, false, 0},
		{"vq/atom/d=2", sgd.BlankAtom, 2, false, 0},
		{"vq/skip/whole", sgd.BlankSkip, 0, false, 0},
		{"vq/atom/whole", sgd.BlankAtom, 0, false, 0},
		{"vq/atom/d=grid", sgd.BlankAtom, 5, false, 0},
		{"vq/skip/d=1/memory", sgd.BlankSkip, 1, false, 50},
		{"gq/atom/d=1", sgd.BlankAtom, 1, true, 0},
		{"gq/skip/d=2", sgd.BlankSkip, 2, true, 0},
		{"gq/skip/whole", sgd.BlankSkip, 0, true, 0},
		{"gq/atom/whole/memory", sgd.BlankAtom, 0, true, 80},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const k, images = 6, 3
			rng := rand.New(rand.NewPCG(1, 2))
			st := sgd.NewStats(sgd.StatsSettings{K: k, Blank: tc.blank, Range: tc.rng, MultiHot: tc.multi, Memory: tc.memory})
			b := newBrute(k, tc.blank, tc.memory)
			for batch := 0; batch < 4; batch++ {
				n := images * grid.Len()
				var rows [][]int
				if tc.multi {
					c := randomGQ(rng, n, k, 0.3)
					st.AddImagesGQ(c, images, grid)
					rows = rowsOfGQ(c)
				} else {
					c := randomVQ(rng, n, k, 0.3)
					st.AddImagesVQ(c, images, grid)
					rows = rowsOfVQ(c)
				}
				b.add(rows, gridCols(rows, images, gr, gc, tc.rng, tc.blank == sgd.BlankSkip))
			}
			equalApprox(t, "V", denseOfSym(st, false), b.V(), 1e-12)
			equalApprox(t, "L", denseOfSym(st, true), b.L(), 1e-12)
			if st.Weight() != b.w && !scalar.EqualWithinRel(st.Weight(), b.w, 1e-12) {
				t.Errorf("weight %v, want %v", st.Weight(), b.w)
			}
			// Products agree with the dense matrices.
			x := mat.NewDense(st.Size(), 3, nil)
			for i := range x.RawMatrix().Data {
				x.RawMatrix().Data[i] = rng.NormFloat64()
			}
			var got, want mat.Dense
			st.MulL(&got, x)
			want.Mul(b.L(), x)
			equalApprox(t, "L·x", &got, &want, 1e-11)
			got.Reset()
			st.MulV(&got, x)
			want.Mul(b.V(), x)
			equalApprox(t, "V·x", &got, &want, 1e-11)
			diag := st.DiagV(nil)
			for a, v := range diag {
				if !scalar.EqualWithinAbsOrRel(v, b.V().At(a, a), 1e-12, 1e-12) {
					t.Fatalf("DiagV[%d] = %v, want %v", a, v, b.V().At(a, a))
				}
			}
		})
	}
}

func TestStatsSequencesAndTemporal(t *testing.T) {
	const k = 5
	rng := rand.New(rand.NewPCG(3, 4))
	for _, blank := range []sgd.BlankMode{sgd.BlankAtom, sgd.BlankSkip} {
		t.Run("sequences/"+blank.String(), func(t *testing.T) {
			st := sgd.NewStats(sgd.StatsSettings{K: k, Blank: blank, Range: 2})
			b := newBrute(k, blank, 0)
			lengths := []int{4, 0, 7, 1, 3}
			codes := randomVQ(rng, 15, k, 0.2)
			st.AddSequencesVQ(codes, lengths)
			rows := rowsOfVQ(codes)
			var cols []map[int]float64
			first := 0
			for _, l := range lengths {
				for i := first; i < first+l; i++ {
					for j := i + 1; j <= min(i+2, first+l-1); j++ {
						if blank == sgd.BlankSkip && (len(rows[i]) == 0 || len(rows[j]) == 0) {
							continue
						}
						cols = append(cols, map[int]float64{i: 1, j: -1})
					}
				}
				first += l
			}
			b.add(rows, cols)
			equalApprox(t, "V", denseOfSym(st, false), b.V(), 1e-12)
			equalApprox(t, "L", denseOfSym(st, true), b.L(), 1e-12)
		})
		t.Run("temporal/"+blank.String(), func(t *testing.T) {
			st := sgd.NewStats(sgd.StatsSettings{K: k, Blank: blank})
			b := newBrute(k, blank, 0)
			frames := [][]int{randomVQ(rng, 9, k, 0.2)}
			for f := 1; f < 6; f++ {
				frames = append(frames, randomVQ(rng, 9, k, 0.2))
			}
			for f := 1; f+1 < len(frames); f++ {
				st.AddTemporalVQ(frames[f-1], frames[f], frames[f+1])
				all := append(append(append([]int(nil), frames[f-1]...), frames[f]...), frames[f+1]...)
				rows := rowsOfVQ(all)
				var cols []map[int]float64
				for p := 0; p < 9; p++ {
					if blank == sgd.BlankSkip && (len(rows[p]) == 0 || len(rows[9+p]) == 0 || len(rows[18+p]) == 0) {
						continue
					}
					cols = append(cols, map[int]float64{p: -0.5, 9 + p: 1, 18 + p: -0.5})
				}
				// V counts only the current frame.
				cur := make([][]int, len(rows))
				for p := 0; p < 9; p++ {
					cur[9+p] = rows[9+p]
				}
				bb := newBrute(k, blank, 0)
				bb.add(cur[9:18], nil)
				b.v.Add(b.v, bb.v)
				b.w += bb.w
				b.addL(rows, cols)
			}
			equalApprox(t, "V", denseOfSym(st, false), b.V(), 1e-12)
			equalApprox(t, "L", denseOfSym(st, true), b.L(), 1e-12)
		})
	}
}

// addL adds only the columns of D (no V, no forgetting).
func (b *brute) addL(rows [][]int, cols []map[int]float64) {
	for _, col := range cols {
		ad := mat.NewVecDense(b.n, nil)
		for i, wt := range col {
			ad.AddScaledVec(ad, wt, b.alpha(rows[i]))
		}
		b.l.RankOne(b.l, 1, ad, ad)
		b.wp++
	}
}

// TestStatsLaplacian checks the structure that 1-hot codes give L: a
// graph Laplacian, whose rows sum to zero, and a diagonal V of atom
// frequencies summing to one.
func TestStatsLaplacian(t *testing.T) {
	grid := online.PatchGrid{Width: 12, Height: 12, Size: 3}
	rng := rand.New(rand.NewPCG(5, 6))
	st := sgd.NewStats(sgd.StatsSettings{K: 20, Range: 3})
	for b := 0; b < 3; b++ {
		st.AddImagesVQ(randomVQ(rng, 4*grid.Len(), 20, 0.3), 4, grid)
	}
	ones := mat.NewDense(st.Size(), 1, nil)
	for a := 0; a < st.Size(); a++ {
		ones.Set(a, 0, 1)
	}
	var y mat.Dense
	st.MulL(&y, ones)
	for a := 0; a < st.Size(); a++ {
		if math.Abs(y.At(a, 0)) > 1e-12 {
			t.Fatalf("row %d of L sums to %v, want 0", a, y.At(a, 0))
		}
	}
	var sum float64
	for _, v := range st.DiagV(nil) {
		sum += v
	}
	if !scalar.EqualWithinAbs(sum, 1, 1e-12) {
		t.Errorf("atom frequencies sum to %v, want 1", sum)
	}
	if !st.DiagonalV() || !st.HasL() {
		t.Errorf("DiagonalV %v, HasL %v: want true, true", st.DiagonalV(), st.HasL())
	}
}

// TestStatsForgetRenormalises drives the lazy forgetting factor below its
// rescaling threshold and checks the statistics against the definition.
func TestStatsForgetRenormalises(t *testing.T) {
	grid := online.PatchGrid{Width: 6, Height: 6, Size: 2}
	rng := rand.New(rand.NewPCG(7, 8))
	const k = 4
	st := sgd.NewStats(sgd.StatsSettings{K: k, Range: 1, Memory: 0.5})
	b := newBrute(k, sgd.BlankAtom, 0.5)
	for i := 0; i < 12; i++ { // 25 rows per batch: a factor e^−50 per batch
		c := randomVQ(rng, grid.Len(), k, 0.2)
		st.AddImagesVQ(c, 1, grid)
		rows := rowsOfVQ(c)
		b.add(rows, gridCols(rows, 1, grid.Rows(), grid.Cols(), 1, false))
	}
	equalApprox(t, "V", denseOfSym(st, false), b.V(), 1e-9)
	equalApprox(t, "L", denseOfSym(st, true), b.L(), 1e-9)
}

func TestStatsMarshalExact(t *testing.T) {
	grid := online.PatchGrid{Width: 9, Height: 9, Size: 3}
	for _, s := range []sgd.StatsSettings{
		{K: 9, Range: 2, Memory: 300},
		{K: 9, Blank: sgd.BlankSkip, MultiHot: true},
		{K: 9, VOnly: true},
	} {
		t.Run(fmt.Sprintf("%+v", s), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(9, 10))
			feed := func(st *sgd.Stats) {
				if s.MultiHot {
					st.AddImagesGQ(randomGQ(rng, 2*grid.Len(), 9, 0.3), 2, grid)
				} else {
					st.AddImagesVQ(randomVQ(rng, 2*grid.Len(), 9, 0.3), 2, grid)
				}
			}
			a := sgd.NewStats(s)
			for i := 0; i < 3; i++ {
				feed(a)
			}
			data, err := a.MarshalBinary()
			if err != nil {
				t.Fatal(err)
			}
			b := sgd.NewStats(s)
			if err := b.UnmarshalBinary(data); err != nil {
				t.Fatal(err)
			}
			c := a.Clone()
			// The same batch into the original, the restored copy and the
			// clone gives the same bytes.
			seed := rng.Uint64()
			for _, st := range []*sgd.Stats{a, b, c} {
				rng = rand.New(rand.NewPCG(seed, 1))
				feed(st)
			}
			da, _ := a.MarshalBinary()
			db, _ := b.MarshalBinary()
			dc, _ := c.MarshalBinary()
			if !bytes.Equal(da, db) || !bytes.Equal(da, dc) {
				t.Fatal("restored or cloned statistics diverge from the original")
			}
			if err := b.UnmarshalBinary(data[:len(data)-1]); !errors.Is(err, sgd.ErrFormat) {
				t.Errorf("truncated state: error %v, want ErrFormat", err)
			}
			bad := append([]byte{9}, data[1:]...)
			if err := b.UnmarshalBinary(bad); !errors.Is(err, sgd.ErrVersion) {
				t.Errorf("version 9: error %v, want ErrVersion", err)
			}
			other := sgd.NewStats(sgd.StatsSettings{K: 8})
			if err := other.UnmarshalBinary(data); !errors.Is(err, sgd.ErrFormat) {
				t.Errorf("other K: error %v, want ErrFormat", err)
			}
			db2, _ := b.MarshalBinary()
			if !bytes.Equal(db, db2) {
				t.Error("a failed UnmarshalBinary changed the statistics")
			}
		})
	}
}

func TestStatsPanics(t *testing.T) {
	grid := online.PatchGrid{Width: 4, Height: 4, Size: 2}
	for _, tc := range []struct {
		name string
		f    func()
	}{
		{"length", func() { sgd.NewStats(sgd.StatsSettings{K: 3}).AddImagesVQ(make([]int, 8), 1, grid) }},
		{"code", func() { sgd.NewStats(sgd.StatsSettings{K: 3}).AddImagesVQ([]int{0, 1, 2, 0, 3, 2, 0, 1, 2}, 1, grid) }},
		{"multi-hot", func() {
			c := &online.SparseCodes{Rows: 9, Atoms: 3, Ptr: []int{0, 2, 2, 2, 2, 2, 2, 2, 2, 2}, Index: []int{0, 1}, Cos: []float64{1, 1}}
			sgd.NewStats(sgd.StatsSettings{K: 3}).AddImagesGQ(c, 1, grid)
		}},
		{"V-only L", func() { sgd.NewStats(sgd.StatsSettings{K: 3, VOnly: true}).MulL(&mat.Dense{}, mat.NewDense(4, 1, nil)) }},
		{"settings", func() { sgd.NewStats(sgd.StatsSettings{K: 0}) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Error("no panic")
				}
			}()
			tc.f()
		})
	}
}

func TestStatsSettings(t *testing.T) {
	for _, tc := range []struct {
		s  sgd.StatsSettings
		ok bool
	}{
		{sgd.StatsSettings{K: 1}, true},
		{sgd.StatsSettings{K: 4, Range: 3, Memory: math.Inf(1)}, true},
		{sgd.StatsSettings{K: 0}, false},
		{sgd.StatsSettings{K: 4, Range: -1}, false},
		{sgd.StatsSettings{K: 4, Memory: -1}, false},
		{sgd.StatsSettings{K: 4, Memory: math.NaN()}, false},
		{sgd.StatsSettings{K: 4, Blank: 7}, false},
	} {
		if err := tc.s.Validate(); (err == nil) != tc.ok {
			t.Errorf("%+v: Validate() = %v, want ok %v", tc.s, err, tc.ok)
		}
	}
	st := sgd.NewStats(sgd.StatsSettings{K: 4, Range: 2})
	if err := st.SetSettings(sgd.StatsSettings{K: 4, Range: 2, Memory: 100}); err != nil {
		t.Errorf("changing Memory: %v", err)
	}
	if err := st.SetSettings(sgd.StatsSettings{K: 4, Range: 3}); err == nil {
		t.Error("changing Range live was accepted")
	}
}

// BatchDegrees counts, for each atom, the coded neighbours of its rows in
// the last minibatch alone (image windows, whole images, sequences), per
// pair of the minibatch: the brute-force count over the pairs, with and
// without VOnly, forgetting or not. It is zero for temporal statistics.
func TestStatsBatchDegrees(t *testing.T) {
	const k = 7
	grid := online.PatchGrid{Width: 7, Height: 7, Size: 2} // 6×6 grid
	rng := rand.New(rand.NewPCG(9, 10))
	// A minibatch: how it is added, its rows, and whether two of its rows
	// are neighbours.
	type batch struct {
		add        func(st *sgd.Stats, codes []int)
		n          int
		neighbours func(i, j int) bool
	}
	imageNeighbours := func(d int) func(i, j int) bool {
		return func(i, j int) bool {
			if i/grid.Len() != j/grid.Len() {
				return false
			}
			i, j = i%grid.Len(), j%grid.Len()
			ri, ci, rj, cj := i/grid.Cols(), i%grid.Cols(), j/grid.Cols(), j%grid.Cols()
			return d == 0 || max(ri-rj, rj-ri, ci-cj, cj-ci) <= d
		}
	}
	lengths := []int{8, 3, 9}
	sequence := func(i int) (int, int) { // sequence and position of token i
		for s, l := range lengths {
			if i < l {
				return s, i
			}
			i -= l
		}
		panic("out of range")
	}
	for _, tc := range []struct {
		name string
		ss   sgd.StatsSettings
		b    batch
	}{
		{"images/d=1", sgd.StatsSettings{K: k, Range: 1}, batch{func(st *sgd.Stats, c []int) { st.AddImagesVQ(c, 3, grid) }, 3 * grid.Len(), imageNeighbours(1)}},
		{"images/d=2/skip", sgd.StatsSettings{K: k, Range: 2, Blank: sgd.BlankSkip}, batch{func(st *sgd.Stats, c []int) { st.AddImagesVQ(c, 3, grid) }, 3 * grid.Len(), imageNeighbours(2)}},
		{"images/whole/skip", sgd.StatsSettings{K: k, Blank: sgd.BlankSkip}, batch{func(st *sgd.Stats, c []int) { st.AddImagesVQ(c, 3, grid) }, 3 * grid.Len(), imageNeighbours(0)}},
		{"sequences/d=2", sgd.StatsSettings{K: k, Range: 2}, batch{func(st *sgd.Stats, c []int) { st.AddSequencesVQ(c, lengths) }, 20, func(i, j int) bool {
			si, pi := sequence(i)
			sj, pj := sequence(j)
			return si == sj && max(pi-pj, pj-pi) <= 2
		}}},
	} {
		for _, vOnly := range []bool{false, true} {
			for _, memory := range []float64{0, 50} {
				t.Run(fmt.Sprintf("%s/v-only=%v/memory=%v", tc.name, vOnly, memory), func(t *testing.T) {
					ss := tc.ss
					ss.VOnly, ss.Memory = vOnly, memory
					st := sgd.NewStats(ss)
					if got := st.BatchDegrees(nil); !floats.Equal(got, make([]float64, st.Size())) {
						t.Errorf("before any minibatch: %v, want zeros", got)
					}
					tc.b.add(st, randomVQ(rng, tc.b.n, k, 0.2))
					codes := randomVQ(rng, tc.b.n, k, 0.2)
					tc.b.add(st, codes)

					coded := func(i int) bool { return codes[i] >= 0 || ss.Blank == sgd.BlankAtom }
					atom := func(i int) int {
						if codes[i] < 0 {
							return k // the blank atom
						}
						return codes[i]
					}
					want := make([]float64, st.Size())
					pairs := 0
					for i := range codes {
						for j := range codes {
							if i == j || !coded(i) || !coded(j) || !tc.b.neighbours(i, j) {
								continue
							}
							want[atom(i)]++
							if i < j {
								pairs++
							}
						}
					}
					floats.Scale(1/float64(pairs), want)
					if got := st.BatchDegrees(nil); !floats.EqualApprox(got, want, 1e-12) {
						t.Errorf("BatchDegrees %v, want %v", got, want)
					}
					if vOnly {
						return
					}
					for a, l := range st.Clone().BatchDegrees(nil) {
						if l != 0 {
							t.Fatalf("a clone's degree of atom %d: %v, want 0 (nothing added to it)", a, l)
						}
					}
				})
			}
		}
	}
	st := sgd.NewStats(sgd.StatsSettings{K: k})
	st.AddTemporalVQ(randomVQ(rng, 30, k, 0.1), randomVQ(rng, 30, k, 0.1), randomVQ(rng, 30, k, 0.1))
	if got := st.BatchDegrees(nil); !floats.Equal(got, make([]float64, st.Size())) {
		t.Errorf("temporal: %v, want zeros", got)
	}
}
