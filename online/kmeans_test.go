package online

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"

	"gonum.org/v1/gonum/floats/scalar"
	"gonum.org/v1/gonum/mat"
)

// sphereClusters returns n unit rows drawn around nc random unit centres
// (centre + spread·N(0, I), normalised), the centres, and each row's
// cluster.
func sphereClusters(rng *rand.Rand, nc, dim, n int, spread float64) (x, centres *mat.Dense, label []int) {
	centres = mat.NewDense(nc, dim, nil)
	for c := 0; c < nc; c++ {
		row := centres.RawRowView(c)
		for l := range row {
			row[l] = rng.NormFloat64()
		}
	}
	normalizeAtoms(centres.RawMatrix())
	x = mat.NewDense(n, dim, nil)
	label = make([]int, n)
	for i := 0; i < n; i++ {
		c := rng.IntN(nc)
		label[i] = c
		row := x.RawRowView(i)
		for l := range row {
			row[l] = centres.At(c, l) + spread*rng.NormFloat64()
		}
	}
	NormalizeRows(x, 0, nil)
	return x, centres, label
}

// batches cuts x into minibatch views of n rows.
func batches(x *mat.Dense, n int) []*mat.Dense {
	r, c := x.Dims()
	var out []*mat.Dense
	for i := 0; i < r; i += n {
		out = append(out, x.Slice(i, min(i+n, r), 0, c).(*mat.Dense))
	}
	return out
}

func newTestKMeans(s KMeansSettings, seed uint64) (*KMeans, *rand.PCG) {
	src := rand.NewPCG(seed, seed+1)
	return NewKMeans(s, src), src
}

func TestKMeansRecoversCentres(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 22))
	const nc, dim = 12, 36
	x, centres, _ := sphereClusters(rng, nc, dim, 6000, 0.02)
	km, _ := newTestKMeans(KMeansSettings{K: nc, Dim: dim}, 1)
	for range 3 {
		for _, b := range batches(x, 500) {
			km.Learn(b, nil)
		}
	}
	for c := 0; c < nc; c++ {
		best := -1.0
		for j := 0; j < nc; j++ {
			var d float64
			for l := 0; l < dim; l++ {
				d += centres.At(c, l) * km.Atoms().At(j, l)
			}
			best = math.Max(best, d)
		}
		if best < 0.995 {
			t.Errorf("centre %d: best atom cosine %.4f, want >= 0.995", c, best)
		}
	}
	if km.Samples() != 18000 || km.Batches() != 36 || km.Seeded() != nc {
		t.Errorf("samples, batches, seeded = %d, %d, %d", km.Samples(), km.Batches(), km.Seeded())
	}
	for j := 0; j < nc; j++ {
		if n := mat.Norm(km.Atoms().(readOnly).m.RowView(j), 2); math.Abs(n-1) > 1e-12 {
			t.Errorf("atom %d has norm %v", j, n)
		}
	}
}

// TestKMeansNearLloyd checks the online dictionary against batch spherical
// k-means on the same rows and K: the distortion must be within 2%.
func TestKMeansNearLloyd(t *testing.T) {
	rng := rand.New(rand.NewPCG(23, 24))
	synthetic, _, _ := sphereClusters(rng, 60, 16, 8000, 0.3)
	mnist, mnistBlank := mnistPatches(t, 40)
	for _, tc := range []struct {
		name   string
		x      *mat.Dense
		blank  []bool
		k      int
		epochs int
	}{
		{"synthetic", synthetic, nil, 24, 10},
		{"mnist", mnist, mnistBlank, 32, 5},
	} {
		_, dim := tc.x.Dims()
		km, _ := newTestKMeans(KMeansSettings{K: tc.k, Dim: dim}, 2)
		r, _ := tc.x.Dims()
		for range tc.epochs {
			for i := 0; i < r; i += 1000 {
				end := min(i+1000, r)
				var blank []bool
				if tc.blank != nil {
					blank = tc.blank[i:end]
				}
				km.Learn(tc.x.Slice(i, end, 0, dim), blank)
			}
		}
		online := Distortion(km.Atoms(), tc.x, tc.blank)
		atoms := mat.NewDense(tc.k, dim, nil)
		if _, err := Lloyd(atoms, tc.x, tc.blank, 100, rand.NewPCG(3, 4)); err != nil {
			t.Fatal(err)
		}
		lloyd := Distortion(atoms, tc.x, tc.blank)
		t.Logf("%s: distortion online %.5f, Lloyd %.5f (%+.2f%%)", tc.name, online, lloyd, 100*(online/lloyd-1))
		if online > 1.02*lloyd {
			t.Errorf("%s: online distortion %.5f more than 2%% above Lloyd's %.5f", tc.name, online, lloyd)
		}
	}
}

func TestKMeansSameSeedSameResult(t *testing.T) {
	rng := rand.New(rand.NewPCG(25, 26))
	x, _, _ := sphereClusters(rng, 10, 8, 3000, 0.3)
	run := func(seed uint64) []byte {
		km, _ := newTestKMeans(KMeansSettings{K: 16, Dim: 8, ReseedAfter: 2}, seed)
		for _, b := range batches(x, 128) {
			km.Learn(b, nil)
		}
		blob, _ := km.MarshalBinary()
		return blob
	}
	a, b, c := run(5), run(5), run(6)
	if !bytes.Equal(a, b) {
		t.Error("same seed, different dictionaries")
	}
	if bytes.Equal(a, c) {
		t.Error("different seeds, same dictionary")
	}
}

func TestKMeansMarshalResume(t *testing.T) {
	rng := rand.New(rand.NewPCG(27, 28))
	x, _, _ := sphereClusters(rng, 20, 12, 4000, 0.4)
	bs := batches(x, 100)
	s := KMeansSettings{K: 32, Dim: 12, LearningRate: 0.8, Decay: 0.01, Memory: 50, ReseedAfter: 1}

	straight, _ := newTestKMeans(s, 9)
	for _, b := range bs {
		straight.Learn(b, nil)
	}

	first, src := newTestKMeans(s, 9)
	for _, b := range bs[:17] {
		first.Learn(b, nil)
	}
	blob, err := first.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	rngState, _ := src.MarshalBinary()

	var src2 rand.PCG
	if err := src2.UnmarshalBinary(rngState); err != nil {
		t.Fatal(err)
	}
	resumed := NewKMeans(KMeansSettings{K: 32, Dim: 12}, &src2)
	if err := resumed.UnmarshalBinary(blob); err != nil {
		t.Fatal(err)
	}
	if resumed.Settings() != s {
		t.Errorf("restored settings %+v, want %+v", resumed.Settings(), s)
	}
	again, _ := resumed.MarshalBinary()
	if !bytes.Equal(blob, again) {
		t.Fatal("marshal(unmarshal(b)) != b")
	}
	for _, b := range bs[17:] {
		resumed.Learn(b, nil)
	}
	want, _ := straight.MarshalBinary()
	got, _ := resumed.MarshalBinary()
	if !bytes.Equal(got, want) {
		t.Error("resumed dictionary differs from the uninterrupted one")
	}
	if straight.Reseeds() == 0 {
		t.Error("the test does not exercise re-seeding")
	}
}

func TestKMeansUnmarshalErrors(t *testing.T) {
	km, _ := newTestKMeans(KMeansSettings{K: 4, Dim: 3}, 1)
	km.Learn(mat.NewDense(5, 3, []float64{1, 0, 0, 0, 1, 0, 0, 0, 1, 1, 1, 0, 0, 1, 1}), nil)
	blob, _ := km.MarshalBinary()
	w, _ := NewWhitener(3, WhitenSettings{}).MarshalBinary()
	for name, tc := range map[string]struct {
		blob []byte
		want error
	}{
		"version":   {append([]byte{2}, blob[1:]...), ErrVersion},
		"whitener":  {w, ErrFormat},
		"truncated": {blob[:len(blob)-3], ErrFormat},
		"trailing":  {append(bytes.Clone(blob), 1), ErrFormat},
		"empty":     {nil, ErrVersion},
	} {
		if err := km.UnmarshalBinary(tc.blob); !errors.Is(err, tc.want) {
			t.Errorf("%s: UnmarshalBinary = %v, want %v", name, err, tc.want)
		}
	}
	for _, s := range []KMeansSettings{{K: 5, Dim: 3}, {K: 4, Dim: 2}} {
		other := NewKMeans(s, nil)
		if err := other.UnmarshalBinary(blob); !errors.Is(err, ErrFormat) {
			t.Errorf("%dx%d receiver: UnmarshalBinary = %v, want ErrFormat", s.K, s.Dim, err)
		}
	}
	after, _ := km.MarshalBinary()
	if !bytes.Equal(after, blob) {
		t.Error("failed UnmarshalBinary calls changed the dictionary")
	}
}

// bruteCos returns the cosines of the rows of x with the rows of atoms.
func bruteCos(x, atoms mat.Matrix) *mat.Dense {
	r, dim := x.Dims()
	k, _ := atoms.Dims()
	out := mat.NewDense(r, k, nil)
	for i := 0; i < r; i++ {
		var nx float64
		for l := 0; l < dim; l++ {
			nx += x.At(i, l) * x.At(i, l)
		}
		for j := 0; j < k; j++ {
			var d float64
			for l := 0; l < dim; l++ {
				d += x.At(i, l) * atoms.At(j, l)
			}
			if nx > 0 {
				out.Set(i, j, d/math.Sqrt(nx))
			}
		}
	}
	return out
}

func TestKMeansAssignAndCodesGQ(t *testing.T) {
	rng := rand.New(rand.NewPCG(29, 30))
	x, _, _ := sphereClusters(rng, 10, 6, 2000, 0.5)
	km, _ := newTestKMeans(KMeansSettings{K: 20, Dim: 6}, 3)
	for _, b := range batches(x, 250) {
		km.Learn(b, nil)
	}
	// A query batch with zero rows and rows that are not normalised.
	q := mat.DenseCopyOf(x.Slice(0, 300, 0, 6))
	for i := 0; i < 300; i += 7 {
		q.SetRow(i, make([]float64, 6))
	}
	for i := 3; i < 300; i += 11 {
		row := q.RawRowView(i)
		for l := range row {
			row[l] *= 4.5
		}
	}
	want := bruteCos(q, km.Atoms())
	dst := make([]int, 300)
	cos := make([]float64, 300)
	km.Assign(dst, cos, q)
	const thr = 0.6
	var codes SparseCodes
	km.CodesGQ(&codes, q, thr)
	if codes.Rows != 300 || codes.Atoms != 20 || len(codes.Ptr) != 301 {
		t.Fatalf("codes shape rows %d atoms %d ptr %d", codes.Rows, codes.Atoms, len(codes.Ptr))
	}
	for i := 0; i < 300; i++ {
		idx, cs := codes.Row(i)
		if i%7 == 0 {
			if dst[i] != -1 || cos[i] != 0 || len(idx) != 0 {
				t.Errorf("blank row %d: assign %d, cos %v, gq %v", i, dst[i], cos[i], idx)
			}
			continue
		}
		// The cosines are float32 sums (fused.go): they match the float64
		// ones within tol, the argmax may differ only on a near-tie and
		// the f_gq set only at the threshold's edge.
		tol := scoreTol(6)
		bj, bv := 0, want.At(i, 0)
		var gq []int
		for j := 0; j < 20; j++ {
			if v := want.At(i, j); v > bv {
				bj, bv = j, v
			}
			if v := want.At(i, j); v >= thr-tol && v < thr+tol {
				t.Fatalf("row %d atom %d: cosine %v at the threshold's edge, draw other data", i, j, v)
			}
			if want.At(i, j) >= thr {
				gq = append(gq, j)
			}
		}
		if dst[i] < 0 || want.At(i, dst[i]) < bv-2*tol || !scalar.EqualWithinAbs(cos[i], want.At(i, dst[i]), tol) {
			t.Errorf("row %d: assign %d (%v), brute force %d (%v)", i, dst[i], cos[i], bj, bv)
		}
		if fmt.Sprint(idx) != fmt.Sprint(gq) {
			t.Errorf("row %d: f_gq %v, brute force %v", i, idx, gq)
		}
		for n, j := range idx {
			if !scalar.EqualWithinAbs(cs[n], want.At(i, j), tol) {
				t.Errorf("row %d atom %d: cos %v, want %v", i, j, cs[n], want.At(i, j))
			}
		}
	}
}

func TestKMeansLearnAssignMatchesAssign(t *testing.T) {
	rng := rand.New(rand.NewPCG(31, 32))
	x, _, _ := sphereClusters(rng, 5, 4, 600, 0.3)
	km, _ := newTestKMeans(KMeansSettings{K: 8, Dim: 4}, 4)
	bs := batches(x, 100)
	km.Learn(bs[0], nil)
	blank := make([]bool, 100)
	blank[3], blank[50] = true, true
	want := make([]int, 100)
	km.Assign(want, nil, bs[1])
	want[3], want[50] = -1, -1
	got := make([]int, 100)
	km.LearnAssign(got, nil, bs[1], blank)
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("LearnAssign codes\n%v\nwant\n%v", got, want)
	}
	if km.Samples() != 198 {
		t.Errorf("samples = %d, want 198 (blank rows left out)", km.Samples())
	}
}

func TestKMeansSeedsAcrossBatches(t *testing.T) {
	rng := rand.New(rand.NewPCG(33, 34))
	x, _, _ := sphereClusters(rng, 50, 5, 200, 1)
	km, _ := newTestKMeans(KMeansSettings{K: 70, Dim: 5}, 5)
	dst := make([]int, 40)
	km.Assign(dst, nil, x.Slice(0, 40, 0, 5))
	for _, j := range dst {
		if j != -1 {
			t.Fatal("an empty dictionary assigned a row")
		}
	}
	for i, want := range []int{40, 70, 70} {
		km.Learn(x.Slice(40*i, 40*(i+1), 0, 5), nil)
		if km.Seeded() != want {
			t.Errorf("after batch %d: %d atoms seeded, want %d", i, km.Seeded(), want)
		}
	}
	// Seeds are distinct.
	a := km.Atoms()
	for i := 0; i < 70; i++ {
		for j := 0; j < i; j++ {
			if mat.Equal(mat.NewVecDense(5, mat.Row(nil, i, a)), mat.NewVecDense(5, mat.Row(nil, j, a))) {
				t.Fatalf("atoms %d and %d are equal", i, j)
			}
		}
	}
}

func TestKMeansReseedsDeadAtoms(t *testing.T) {
	// Learn two clusters, then stream only a third: the atoms of the first
	// two go unused and must move to the third.
	rng := rand.New(rand.NewPCG(35, 36))
	const dim = 10
	x, centres, label := sphereClusters(rng, 3, dim, 9000, 0.1)
	var ab, c [][]float64
	for i, l := range label {
		if l == 2 {
			c = append(c, mat.Row(nil, i, x))
		} else {
			ab = append(ab, mat.Row(nil, i, x))
		}
	}
	toDense := func(rows [][]float64) *mat.Dense {
		m := mat.NewDense(len(rows), dim, nil)
		for i, r := range rows {
			m.SetRow(i, r)
		}
		return m
	}
	km, _ := newTestKMeans(KMeansSettings{K: 4, Dim: dim, ReseedAfter: 3}, 6)
	for _, b := range batches(mat.DenseCopyOf(toDense(ab).Slice(0, 1000, 0, dim)), 100) {
		km.Learn(b, nil)
	}
	if km.Reseeds() != 0 {
		t.Fatalf("%d reseeds while both clusters stream", km.Reseeds())
	}
	for _, b := range batches(mat.DenseCopyOf(toDense(c).Slice(0, 2000, 0, dim)), 100) {
		km.Learn(b, nil)
	}
	if km.Reseeds() == 0 {
		t.Fatal("no atom was re-seeded")
	}
	for j := 0; j < 4; j++ {
		var d float64
		for l := 0; l < dim; l++ {
			d += km.Atoms().At(j, l) * centres.At(2, l)
		}
		if d < 0.8 {
			t.Errorf("atom %d has cosine %.3f with the streaming cluster", j, d)
		}
	}
	idle := km.Idle(nil)
	for j, v := range idle {
		if v > 3 {
			t.Errorf("atom %d idle for %d batches", j, v)
		}
	}
}

func TestKMeansMemoryTracksDrift(t *testing.T) {
	// With a finite memory an atom follows its cluster when the cluster
	// moves; with an infinite one it stays at the mean of both.
	rng := rand.New(rand.NewPCG(37, 38))
	const dim = 6
	from, _, _ := sphereClusters(rng, 1, dim, 4000, 0.05)
	to, centres, _ := sphereClusters(rng, 1, dim, 4000, 0.05)
	for _, tc := range []struct {
		memory float64
		moved  bool
	}{{math.Inf(1), false}, {200, true}} {
		km, _ := newTestKMeans(KMeansSettings{K: 1, Dim: dim, Memory: tc.memory, ReseedAfter: -1}, 7)
		for _, b := range batches(from, 100) {
			km.Learn(b, nil)
		}
		for _, b := range batches(to, 100) {
			km.Learn(b, nil)
		}
		var d float64
		for l := 0; l < dim; l++ {
			d += km.Atoms().At(0, l) * centres.At(0, l)
		}
		if moved := d > 0.99; moved != tc.moved {
			t.Errorf("memory %v: cosine with the new centre %.3f", tc.memory, d)
		}
		// The steady state of N ← e^(−h/M)·N + h with h = 100 rows a batch.
		if n, want := km.Counts(nil)[0], 100/(1-math.Exp(-100/tc.memory)); !math.IsInf(tc.memory, 1) && math.Abs(n-want) > 1e-6*want {
			t.Errorf("memory %v: count %v, want %v", tc.memory, n, want)
		}
	}
}

func TestKMeansSettings(t *testing.T) {
	for _, s := range []KMeansSettings{
		{K: 0, Dim: 3},
		{K: 3, Dim: 0},
		{K: 3, Dim: 3, LearningRate: 1.5},
		{K: 3, Dim: 3, LearningRate: -1},
		{K: 3, Dim: 3, Decay: -1},
		{K: 3, Dim: 3, Decay: math.NaN()},
		{K: 3, Dim: 3, Memory: -1},
		{K: 3, Dim: 3, Memory: math.NaN()},
	} {
		if s.Validate() == nil {
			t.Errorf("%+v: Validate accepted it", s)
		}
	}
	km := NewKMeans(KMeansSettings{K: 3, Dim: 3}, nil)
	if err := km.SetSettings(KMeansSettings{K: 4, Dim: 3}); err == nil {
		t.Error("SetSettings changed K")
	}
	s := KMeansSettings{K: 3, Dim: 3, LearningRate: 0.5, Decay: 1}
	if err := km.SetSettings(s); err != nil || km.Settings() != s {
		t.Errorf("SetSettings(%+v) = %v, settings %+v", s, err, km.Settings())
	}
	defer func() {
		if recover() == nil {
			t.Error("Learn without a rand.Source did not panic")
		}
	}()
	km.Learn(mat.NewDense(1, 3, []float64{1, 0, 0}), nil)
}

func TestKMeansCloneIsSnapshot(t *testing.T) {
	rng := rand.New(rand.NewPCG(39, 40))
	x, _, _ := sphereClusters(rng, 6, 8, 2000, 0.3)
	bs := batches(x, 200)
	km, _ := newTestKMeans(KMeansSettings{K: 8, Dim: 8}, 8)
	km.Learn(bs[0], nil)
	snap := km.Clone()
	before, _ := snap.MarshalBinary()
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			dst := make([]int, 200)
			var codes SparseCodes
			for i := 0; i < 5; i++ {
				snap.Assign(dst, nil, bs[1+g])
				snap.CodesGQ(&codes, bs[1+g], 0.5)
			}
		}()
	}
	for _, b := range bs[1:] {
		km.Learn(b, nil)
	}
	wg.Wait()
	after, _ := snap.MarshalBinary()
	if !bytes.Equal(before, after) {
		t.Error("learning on the original changed the clone")
	}
}

func TestKMeansSteadyStateAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are not meaningful under -race")
	}
	// Small enough that gonum's dgemm stays serial (its parallel path
	// starts goroutines, which allocate).
	rng := rand.New(rand.NewPCG(41, 42))
	x, _, _ := sphereClusters(rng, 6, 8, 64, 0.3)
	km, _ := newTestKMeans(KMeansSettings{K: 32, Dim: 8, ReseedAfter: -1}, 9)
	km.Learn(x, nil)
	dst := make([]int, 64)
	var codes SparseCodes
	km.CodesGQ(&codes, x, 0)
	for name, f := range map[string]func(){
		"Learn":   func() { km.Learn(x, nil) },
		"Assign":  func() { km.Assign(dst, nil, x) },
		"CodesGQ": func() { km.CodesGQ(&codes, x, 0.2) },
	} {
		if n := testing.AllocsPerRun(20, f); n != 0 {
			t.Errorf("%s: %v allocations per call", name, n)
		}
	}
	// A clone, a new snapshot, codes in the workspaces its original left:
	// coding with it allocates nothing beyond the copy itself.
	clone := testing.AllocsPerRun(20, func() { km.Clone() })
	cloneAndCode := testing.AllocsPerRun(20, func() { km.Clone().Assign(dst, nil, x) })
	if cloneAndCode != clone {
		t.Errorf("Clone then Assign: %v allocations, Clone alone %v", cloneAndCode, clone)
	}
}

func TestArgmaxRow(t *testing.T) {
	rng := rand.New(rand.NewPCG(43, 44))
	for n := 1; n < 40; n++ {
		row := make([]float64, n)
		for i := range row {
			row[i] = float64(rng.IntN(5)) // many ties
		}
		want := 0
		for j, v := range row {
			if v > row[want] {
				want = j
			}
		}
		if j, v := argmaxRow(row); j != want || v != row[want] {
			t.Errorf("argmaxRow(%v) = %d, %v, want %d", row, j, v, want)
		}
	}
}

// TestKMeansAssignAllBlank checks that a minibatch whose rows are all
// blank (zero, as NormalizeRows leaves them) gets no atom, before and
// after seeding, from every scoring path.
func TestKMeansAssignAllBlank(t *testing.T) {
	rng := rand.New(rand.NewPCG(27, 28))
	x, _, _ := sphereClusters(rng, 10, 8, 600, 0.3)
	km, _ := newTestKMeans(KMeansSettings{K: 16, Dim: 8}, 1)
	blank := mat.NewDense(5, 8, nil)
	for _, learned := range []bool{false, true} {
		if learned {
			km.Learn(x, nil)
		}
		dst := make([]int, 5)
		km.Assign(dst, nil, blank)
		for i, a := range dst {
			if a != -1 {
				t.Errorf("learned %v: blank row %d assigned to atom %d", learned, i, a)
			}
		}
		var codes SparseCodes
		km.CodesGQ(&codes, blank, 0.3)
		if len(codes.Index) != 0 {
			t.Errorf("learned %v: blank rows have f_gq codes %v", learned, codes.Index)
		}
		km.Learn(blank, nil)
	}
}

// TestKMeansSeedCoresSameBits checks that seeding a dictionary from one
// large minibatch, its trials cut into parts (seedSplit), picks the same
// atoms on two and three goroutines as on one.
func TestKMeansSeedCoresSameBits(t *testing.T) {
	x, blank := mnistPatches(t, 40)
	_, dim := x.Dims()
	const k, batch = 300, 9000
	b := x.Slice(0, batch, 0, dim)
	rows := batch - countTrue(blank[:batch])
	if trials := 2 + int(math.Log(k)); seedSplit(rows, trials, 3) != 3 {
		t.Fatalf("seeding from %d rows is cut into %d parts; the test needs three", rows, seedSplit(rows, trials, 3))
	}
	var one []byte
	for cores := 1; cores <= 3; cores++ {
		km, _ := newTestKMeans(KMeansSettings{K: k, Dim: dim}, 29)
		km.SetCores(cores)
		km.Learn(b, blank[:batch])
		if km.Seeded() != k {
			t.Fatalf("%d atoms seeded of %d", km.Seeded(), k)
		}
		got, _ := km.MarshalBinary()
		if cores == 1 {
			one = got
		} else if !bytes.Equal(got, one) {
			t.Errorf("the dictionary seeded on %d goroutines differs from the one seeded on one", cores)
		}
	}
}

// TestSeedWeightAbove checks seedWeightAbove against the weight it
// stands for, seedWeight of the larger of the two cosines, on signed
// zeros, values about 1 ± tol, infinities, NaN scores and float32
// roundings, bit for bit.
func TestSeedWeightAbove(t *testing.T) {
	const tol = 1e-6
	inf := math.Inf(1)
	cs := []float64{0, math.Copysign(0, -1), 1, -1, 1 - tol, 1 - 2*tol, 1 + tol, 0.3, 0.7000001, inf, -inf}
	ss := []float32{0, float32(math.Copysign(0, -1)), 1, -1, 1 - tol, 1 - 2*tol, 0.3, 0.7000001, float32(inf), float32(-inf), float32(math.NaN())}
	for _, c := range cs {
		for _, s := range ss {
			want := seedWeight(max(c, float64(s)), tol)
			if got := seedWeightAbove(c, s, tol); math.Float64bits(got) != math.Float64bits(want) {
				t.Errorf("seedWeightAbove(%v, %v) = %v, want %v", c, s, got, want)
			}
		}
	}
}

// TestSeedPotentials checks the grouped sums of seedPotentials against
// one plain sum a trial, bit for bit, for 1 to 16 trials (groups of four,
// and a last group of five or six), with a NaN among the scores.
func TestSeedPotentials(t *testing.T) {
	const m, tol = 1001, 1e-6
	rng := rand.New(rand.NewPCG(3, 4))
	cos := make([]float64, m)
	for i := range cos {
		cos[i] = rng.Float64()*1.2 - 0.2
	}
	scores := make([][]float32, 16)
	for t := range scores {
		scores[t] = make([]float32, m)
		for i := range scores[t] {
			scores[t][i] = float32(rng.Float64()*2 - 1)
		}
	}
	scores[3][17] = float32(math.NaN())
	for n := 1; n <= len(scores); n++ {
		pot := make([]float64, n)
		seedPotentials(pot, cos, scores[:n], tol)
		for tr := range n {
			var want float64
			for c, cs := range cos {
				want += seedWeight(max(cs, float64(scores[tr][c])), tol)
			}
			if math.Float64bits(pot[tr]) != math.Float64bits(want) {
				t.Errorf("%d trials: potential %d = %v, want %v", n, tr, pot[tr], want)
			}
		}
	}
}

func countTrue(b []bool) int {
	n := 0
	for _, v := range b {
		if v {
			n++
		}
	}
	return n
}

// TestKMeansCoresSameBits checks that a dictionary scoring on several
// goroutines (SetCores) learns and codes exactly as one on a single
// goroutine: whitened MNIST patches, K not a multiple of the panel width,
// minibatches of an odd number of rows with blank ones; the larger ones
// past compactShareRows, so that they are also compacted on several
// goroutines, once with the int8 prefilter's K (on CPUs that have it).
func TestKMeansCoresSameBits(t *testing.T) {
	x, blank := mnistPatches(t, 40)
	for _, tc := range []struct{ k, batch int }{{700, 2001}, {700, 6001}, {prefilterPanels*panelWidth + 52, 6001}} {
		t.Run(fmt.Sprintf("K=%d/batch=%d", tc.k, tc.batch), func(t *testing.T) {
			testKMeansCoresSameBits(t, x, blank, tc.k, tc.batch)
		})
	}
}

func testKMeansCoresSameBits(t *testing.T, x *mat.Dense, blank []bool, k, batch int) {
	r, dim := x.Dims()
	if parts := partsFor(batch/fused.rows, fused.rows*panelsFor(k)*panelWidth*dim, 3); parts < 3 {
		t.Fatalf("a minibatch is scored in %d parts; the test needs three", parts)
	}
	shared := false
	var learners [3]*KMeans
	for i := range learners {
		learners[i], _ = newTestKMeans(KMeansSettings{K: k, Dim: dim}, 17)
		learners[i].SetCores(i + 1)
	}
	var want []int
	for i := 0; i+batch <= r; i += batch {
		b := x.Slice(i, i+batch, 0, dim)
		kept := 0
		for _, b := range blank[i : i+batch] {
			if !b {
				kept++
			}
		}
		shared = shared || kept >= compactShareRows
		for c, km := range learners {
			got := make([]int, batch)
			km.LearnAssign(got, nil, b, blank[i:i+batch])
			if c == 0 {
				want = got
			} else if !slices.Equal(got, want) {
				t.Fatalf("rows %d…: the codes learned on %d goroutines differ from those on one", i, c+1)
			}
		}
	}
	if shared != (batch >= compactShareRows) {
		t.Fatalf("minibatches of %d rows: past compactShareRows once their blank rows are left out %v, want %v", batch, shared, !shared)
	}
	one, _ := learners[0].MarshalBinary()
	for c, km := range learners[1:] {
		if got, _ := km.MarshalBinary(); !bytes.Equal(got, one) {
			t.Errorf("the dictionary learned on %d goroutines differs from the one learned on one", c+2)
		}
	}
	var wantCodes SparseCodes
	wantAssign := make([]int, r)
	learners[0].Assign(wantAssign, nil, x)
	learners[0].CodesGQ(&wantCodes, x, 0.5)
	for c, km := range learners[1:] {
		got := make([]int, r)
		km.Assign(got, nil, x)
		if !slices.Equal(got, wantAssign) {
			t.Errorf("Assign on %d goroutines differs from one", c+2)
		}
		var codes SparseCodes
		km.CodesGQ(&codes, x, 0.5)
		if !slices.Equal(codes.Ptr, wantCodes.Ptr) || !slices.Equal(codes.Index, wantCodes.Index) || !slices.Equal(codes.Cos, wantCodes.Cos) {
			t.Errorf("CodesGQ on %d goroutines differs from one", c+2)
		}
	}
	if len(wantCodes.Index) == 0 {
		t.Error("no atom above the threshold: the f_gq comparison is empty")
	}
}
