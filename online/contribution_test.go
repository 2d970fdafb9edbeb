package online

import (
	"bytes"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"gonum.org/v1/gonum/floats/scalar"
	"gonum.org/v1/gonum/mat"
)

// rawMNISTPatches returns the mean-removed 6×6 patches (contextual mean,
// d = 1) of the first n test images, not whitened: the rows a Whitener
// observes.
func rawMNISTPatches(t testing.TB, n int) *mat.Dense {
	t.Helper()
	g := PatchGrid{Width: 28, Height: 28, Size: 6}
	pt := Patcher{Grid: g, Mean: MeanContextual, Context: 1}
	all := mat.NewDense(n*g.Len(), g.Dim(), nil)
	for i, img := range mnistImages(t, n) {
		pt.Extract(all.Slice(i*g.Len(), (i+1)*g.Len(), 0, g.Dim()).(*mat.Dense), img)
	}
	return all
}

func mustMarshal(t testing.TB, m interface{ MarshalBinary() ([]byte, error) }) []byte {
	t.Helper()
	b, err := m.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// whitenBatch is one minibatch of a Whitener test stream.
type whitenBatch struct {
	x    *mat.Dense
	skip []bool
}

// whitenStream cuts rows into minibatches of n rows, flagging every 7th
// row of every other batch as skipped, and makes the batches after the
// first carry an outlier row (clipped by the bound) and a NaN row
// (rejected), and one batch all skipped.
func whitenStream(rows *mat.Dense, n int) []whitenBatch {
	var out []whitenBatch
	for i, b := range batches(rows, n) {
		x := mat.DenseCopyOf(b)
		r, c := x.Dims()
		var skip []bool
		if i%2 == 1 {
			skip = make([]bool, r)
			for k := 0; k < r; k += 7 {
				skip[k] = true
			}
		}
		if i > 0 && r > 3 {
			for j := range c {
				x.Set(1, j, 1e6*float64(j+1))
			}
			x.Set(2, c/2, math.NaN())
		}
		if i == 3 {
			skip = make([]bool, r)
			for k := range skip {
				skip[k] = true
			}
		}
		out = append(out, whitenBatch{x, skip})
	}
	return out
}

func TestWhitenContributeApplyEqualsObserve(t *testing.T) {
	rng := rand.New(rand.NewPCG(71, 72))
	mnist := rawMNISTPatches(t, 12) // 12×529 rows of 36
	random := correlated(rng, 2000, 5, randomMixing(rng, 5), 0.5)
	for _, tc := range []struct {
		name string
		rows *mat.Dense
		n    int
		s    WhitenSettings
	}{
		{"mnist", mnist, 529, WhitenSettings{Lambda: 0.01, RefreshEvery: 4}},
		{"mnist forget freeze", mnist, 400, WhitenSettings{Forget: 0.1, FreezeAfter: 3000, RefreshEvery: 2}},
		{"random", random, 150, WhitenSettings{Clip: 3}},
		{"random no bound", random, 90, WhitenSettings{Clip: math.Inf(1), Forget: 0.01}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, dim := tc.rows.Dims()
			a := NewWhitener(dim, tc.s)
			b := NewWhitener(dim, tc.s)
			var c WhitenContribution
			frozen := 0
			for i, bt := range whitenStream(tc.rows, tc.n) {
				if a.Frozen() {
					frozen++
				}
				errA := a.Observe(bt.x, bt.skip)
				before := mustMarshal(t, b)
				b.Contribute(&c, bt.x, bt.skip)
				if !bytes.Equal(before, mustMarshal(t, b)) {
					t.Fatalf("batch %d: Contribute changed the whitener", i)
				}
				if b.Frozen() && c.Rows != 0 {
					t.Fatalf("batch %d: a frozen whitener contributed %d rows", i, c.Rows)
				}
				errB := b.Apply([]*WhitenContribution{&c})
				if (errA == nil) != (errB == nil) {
					t.Fatalf("batch %d: Observe = %v, Apply = %v", i, errA, errB)
				}
				if !bytes.Equal(mustMarshal(t, a), mustMarshal(t, b)) {
					t.Fatalf("batch %d: Observe and Contribute+Apply differ", i)
				}
			}
			if a.Refreshes() < 3 || a.Rejected() == 0 || (a.Clipped() == 0) != math.IsInf(tc.s.Clip, 1) {
				t.Errorf("stream too tame: %d refreshes, %d clipped, %d rejected", a.Refreshes(), a.Clipped(), a.Rejected())
			}
			if tc.s.FreezeAfter > 0 && frozen == 0 {
				t.Error("no batch reached a frozen whitener")
			}
		})
	}
}

// equalWithin reports whether a and b have the same length and agree
// within tol relative to the largest magnitude of a.
func equalWithin(a, b []float64, tol float64) bool {
	if len(a) != len(b) {
		return false
	}
	scale := 0.0
	for _, v := range a {
		scale = max(scale, math.Abs(v))
	}
	for i := range a {
		if !scalar.EqualWithinAbs(a[i], b[i], tol*max(scale, 1e-300)) {
			return false
		}
	}
	return true
}

func TestWhitenApplyMergesLikeOneBatch(t *testing.T) {
	rng := rand.New(rand.NewPCG(73, 74))
	mnist := rawMNISTPatches(t, 8)
	random := correlated(rng, 1200, 6, randomMixing(rng, 6), 2)
	for _, tc := range []struct {
		name string
		rows *mat.Dense
		s    WhitenSettings
	}{
		{"mnist", mnist, WhitenSettings{Lambda: 0.01}},
		{"random forget", random, WhitenSettings{Forget: 0.2, RefreshEvery: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, dim := tc.rows.Dims()
			q := r / 4
			parts := batches(tc.rows, q) // warm-up, then three contributions
			a := NewWhitener(dim, tc.s)
			if err := a.Observe(parts[0], nil); err != nil {
				t.Fatal(err)
			}
			b := a.Clone()
			cs := make([]*WhitenContribution, 4)
			for i := range cs {
				cs[i] = new(WhitenContribution)
			}
			b.Contribute(cs[0], parts[1], nil)
			b.Contribute(cs[1], parts[2], nil)
			all := make([]bool, q) // a contribution of skipped rows only
			for k := range all {
				all[k] = true
			}
			b.Contribute(cs[2], parts[2], all)
			b.Contribute(cs[3], parts[3], nil)
			if err := b.Apply(cs); err != nil {
				t.Fatal(err)
			}
			if err := a.Observe(tc.rows.Slice(q, 4*q, 0, dim), nil); err != nil {
				t.Fatal(err)
			}
			if a.Clipped() != 0 || b.Clipped() != 0 {
				t.Fatalf("the bound fired: %d, %d rows clipped", a.Clipped(), b.Clipped())
			}
			if a.Batches() != 2 || b.Batches() != 2 || a.Rows() != b.Rows() || a.Refreshes() != b.Refreshes() {
				t.Errorf("batches %d, %d, rows %d, %d, refreshes %d, %d; want 2 batches and the same rows and refreshes",
					a.Batches(), b.Batches(), a.Rows(), b.Rows(), a.Refreshes(), b.Refreshes())
			}
			if wa, wb := a.Moments().Weight(), b.Moments().Weight(); !scalar.EqualWithinRel(wa, wb, 1e-12) {
				t.Errorf("weight %v, want %v", wb, wa)
			}
			if ma, mb := a.Moments().Mean(nil), b.Moments().Mean(nil); !equalWithin(ma, mb, 1e-12) {
				t.Errorf("mean %v, want %v", mb, ma)
			}
			var ca, cb mat.SymDense
			a.Moments().Cov(&ca)
			b.Moments().Cov(&cb)
			if !equalWithin(ca.RawSymmetric().Data, cb.RawSymmetric().Data, 1e-12) {
				t.Error("covariances differ by more than 1e-12")
			}
			if !mat.EqualApprox(a.Operator(), b.Operator(), 1e-9) {
				t.Error("operators differ by more than 1e-9")
			}
		})
	}
}

// kmeansStream returns the whitened, normalised MNIST patches of n images
// cut into minibatches: first small ones, so that seeding takes several,
// then one image per batch.
func kmeansStream(t testing.TB, n int) (xs []*mat.Dense, blanks [][]bool) {
	t.Helper()
	x, blank := mnistPatches(t, n)
	r, _ := x.Dims()
	for i, size := 0, 0; i < r; i += size {
		size = 529
		if len(xs) < 4 {
			size = 40
		}
		size = min(size, r-i)
		xs = append(xs, x.Slice(i, i+size, 0, x.RawMatrix().Cols).(*mat.Dense))
		blanks = append(blanks, blank[i:i+size])
	}
	return xs, blanks
}

func TestKMeansContributeApplyEqualsLearnAssign(t *testing.T) {
	xs, blanks := kmeansStream(t, 12)
	s := KMeansSettings{K: 64, Dim: 36, ReseedAfter: -1, Decay: 0.1, Memory: 50}
	a, _ := newTestKMeans(s, 9)
	b, _ := newTestKMeans(s, 9) // its own source in the same state
	var c, wire KMeansContribution
	seeding := 0
	for i, x := range xs {
		r, _ := x.Dims()
		da, ca := make([]int, r), make([]float64, r)
		db, cb := make([]int, r), make([]float64, r)
		seeded := b.Seeded() == s.K
		a.LearnAssign(da, ca, x, blanks[i])
		before := mustMarshal(t, b)
		b.Contribute(&c, db, cb, x, blanks[i], nil, 0)
		if !bytes.Equal(before, mustMarshal(t, b)) {
			t.Fatalf("batch %d: Contribute changed the dictionary", i)
		}
		if (len(c.Seeds) > 0) == seeded {
			t.Fatalf("batch %d: %d seed values from a dictionary with %d atoms seeded", i, len(c.Seeds), b.Seeded())
		}
		if !seeded {
			seeding++
		}
		if i%2 == 1 { // through the encoding
			if err := wire.UnmarshalBinary(mustMarshal(t, &c)); err != nil {
				t.Fatal(err)
			}
			b.Apply([]*KMeansContribution{&wire})
		} else {
			b.Apply([]*KMeansContribution{&c})
		}
		if !bytes.Equal(mustMarshal(t, a), mustMarshal(t, b)) {
			t.Fatalf("batch %d: LearnAssign and Contribute+Apply differ", i)
		}
		if !slices.Equal(a.Idle(nil), b.Idle(nil)) || !slices.Equal(a.Counts(nil), b.Counts(nil)) ||
			a.Batches() != b.Batches() || a.Samples() != b.Samples() {
			t.Fatalf("batch %d: counters differ", i)
		}
		// While seeding, LearnAssign codes with the atoms it seeds from
		// the batch, Contribute with those seeded before it.
		if seeded && (!slices.Equal(da, db) || !slices.Equal(ca, cb)) {
			t.Fatalf("batch %d: assignments differ", i)
		}
	}
	if seeding < 2 || a.Seeded() != s.K {
		t.Errorf("%d seeding batches, %d atoms seeded; want at least 2 and %d", seeding, a.Seeded(), s.K)
	}
}

func TestKMeansApplyMergesLikeOneBatch(t *testing.T) {
	xs, blanks := kmeansStream(t, 10)
	s := KMeansSettings{K: 64, Dim: 36, Decay: 0.05}
	a, _ := newTestKMeans(s, 11)
	for i := 0; a.Seeded() < s.K; i++ {
		a.Learn(xs[i], blanks[i])
	}
	b, _ := newTestKMeans(s, 11)
	if err := b.UnmarshalBinary(mustMarshal(t, a)); err != nil {
		t.Fatal(err)
	}
	n := len(xs)
	parts, flags := xs[n-3:], blanks[n-3:]
	cs := make([]*KMeansContribution, len(parts))
	var rows int
	for i, x := range parts {
		cs[i] = new(KMeansContribution)
		b.Contribute(cs[i], nil, nil, x, flags[i], nil, 0)
		rows += cs[i].Rows
	}
	b.Apply(cs)

	var all mat.Dense
	all.Stack(parts[0], parts[1])
	var all3 mat.Dense
	all3.Stack(&all, parts[2])
	a.Learn(&all3, slices.Concat(flags...))

	if a.Batches() != b.Batches() || a.Samples() != b.Samples() {
		t.Errorf("batches %d, %d, samples %d, %d", a.Batches(), b.Batches(), a.Samples(), b.Samples())
	}
	if !mat.EqualApprox(a.Atoms(), b.Atoms(), 1e-12) {
		t.Error("atoms differ by more than 1e-12")
	}
	if !equalWithin(a.Counts(nil), b.Counts(nil), 1e-12) || !slices.Equal(a.Idle(nil), b.Idle(nil)) {
		t.Error("counts or idle clocks differ")
	}
}

// unitRow returns a random unit row of dim values.
func unitRow(rng *rand.Rand, dim int) []float64 {
	v := make([]float64, dim)
	var ss float64
	for i := range v {
		v[i] = rng.NormFloat64()
		ss += v[i] * v[i]
	}
	for i := range v {
		v[i] /= math.Sqrt(ss)
	}
	return v
}

func TestKMeansApplyReseedsFromCandidates(t *testing.T) {
	rng := rand.New(rand.NewPCG(75, 76))
	const K, dim = 6, 4
	km, _ := newTestKMeans(KMeansSettings{K: K, Dim: dim, ReseedAfter: 2}, 13)
	seeds := mat.NewDense(K, dim, nil)
	for i := range K {
		seeds.SetRow(i, unitRow(rng, dim))
	}
	km.Learn(seeds, nil) // seeds all K atoms in batch 1
	if km.Seeded() != K || km.Batches() != 1 {
		t.Fatalf("%d atoms seeded in %d batches", km.Seeded(), km.Batches())
	}
	// Only atom 0 gets rows from now on.
	hitZero := func() *KMeansContribution {
		c := &KMeansContribution{Rows: 2, Hits: make([]float64, K), Sums: make([]float64, K*dim)}
		c.Hits[0] = 2
		for l := range dim {
			c.Sums[l] = 2 * km.Atoms().At(0, l)
		}
		return c
	}
	if got := km.DeadWithin(1); got != 0 {
		t.Errorf("DeadWithin(1) after batch 1 = %d, want 0", got)
	}
	if got := km.DeadWithin(2); got != K {
		t.Errorf("DeadWithin(2) after batch 1 = %d, want %d", got, K)
	}
	km.Apply([]*KMeansContribution{hitZero()}) // batch 2: nothing dead yet
	if km.Reseeds() != 0 || km.Batches() != 2 || km.Samples() != K+2 {
		t.Fatalf("after batch 2: %d reseeds, %d batches, %d samples", km.Reseeds(), km.Batches(), km.Samples())
	}
	if got := km.DeadWithin(1); got != K-1 {
		t.Fatalf("DeadWithin(1) after batch 2 = %d, want %d", got, K-1)
	}

	// Batch 3: atoms 1-5 are dead, and four candidates come in three
	// contributions, one of them only candidates.
	cand := make([][]float64, 4)
	for i := range cand {
		cand[i] = unitRow(rng, dim)
	}
	c1, c2 := hitZero(), hitZero()
	c1.Keys, c1.Candidates = []float64{-0.1, -0.5}, slices.Concat(cand[0], cand[1])
	c2.Keys, c2.Candidates = []float64{-0.5}, cand[2]
	c3 := &KMeansContribution{Keys: []float64{-0.05}, Candidates: cand[3]}
	last := mat.Row(nil, 5, km.Atoms())
	km.Apply([]*KMeansContribution{c1, c2, c3})
	// Largest key first; the tie at −0.5 goes to the first contribution.
	want := map[int][]float64{1: cand[3], 2: cand[0], 3: cand[1], 4: cand[2]}
	for j, row := range want {
		if got := mat.Row(nil, j, km.Atoms()); !slices.Equal(got, row) {
			t.Errorf("atom %d = %v, want candidate %v", j, got, row)
		}
	}
	if got := mat.Row(nil, 5, km.Atoms()); !slices.Equal(got, last) {
		t.Errorf("atom 5 = %v without a candidate left, want it unchanged %v", got, last)
	}
	idle, counts := km.Idle(nil), km.Counts(nil)
	for j := range K {
		wantIdle := int64(0)
		if j == 5 {
			wantIdle = 2
		}
		if idle[j] != wantIdle {
			t.Errorf("atom %d idle %d, want %d", j, idle[j], wantIdle)
		}
		if j >= 1 && j <= 4 && counts[j] != 0 {
			t.Errorf("re-seeded atom %d has count %v, want 0", j, counts[j])
		}
	}
	if km.Reseeds() != 4 || km.Batches() != 3 || km.Samples() != K+6 {
		t.Errorf("%d reseeds, %d batches, %d samples; want 4, 3, %d", km.Reseeds(), km.Batches(), km.Samples(), K+6)
	}
	if got := km.DeadWithin(1); got != 1 {
		t.Errorf("DeadWithin(1) after batch 3 = %d, want 1", got)
	}
}

// TestKMeansContributeCandidates checks that the candidates of Contribute
// are the rows LearnAssign would re-seed with from the same draws.
func TestKMeansContributeCandidates(t *testing.T) {
	xs, blanks := kmeansStream(t, 6)
	s := KMeansSettings{K: 32, Dim: 36, ReseedAfter: 1}
	a, _ := newTestKMeans(s, 15)
	for i := 0; a.Seeded() < s.K; i++ {
		a.Learn(xs[i], blanks[i])
	}
	// Every atom without a row of the next batch is dead in it, so
	// LearnAssign draws its keys; Contribute draws from a copy of a's
	// source in the same state.
	state := mustMarshal(t, a)
	src := rand.NewPCG(0, 0)
	srcA := rand.NewPCG(0, 0)
	b := NewKMeans(s, srcA)
	if err := b.UnmarshalBinary(state); err != nil {
		t.Fatal(err)
	}
	x, blank := xs[len(xs)-1], blanks[len(xs)-1]
	var c KMeansContribution
	b.Contribute(&c, nil, nil, x, blank, src, s.K)
	if len(c.Keys) == 0 || len(c.Candidates) != len(c.Keys)*s.Dim {
		t.Fatalf("%d candidates of %d values", len(c.Keys), len(c.Candidates))
	}
	if !slices.IsSortedFunc(c.Keys, func(p, q float64) int { return -cmpFloat(p, q) }) {
		t.Error("candidate keys not decreasing")
	}
	dead := b.DeadWithin(1)
	b.LearnAssign(nil, nil, x, blank)
	if b.Reseeds() == 0 {
		t.Fatal("no atom re-seeded")
	}
	// The re-seeded atoms got the candidates in order.
	used := 0
	for j := range s.K {
		if b.Idle(nil)[j] != 0 || b.Counts(nil)[j] != 0 {
			continue
		}
		got := mat.Row(nil, j, b.Atoms())
		if !slices.Equal(got, c.Candidates[used*s.Dim:(used+1)*s.Dim]) {
			t.Errorf("re-seeded atom %d is not candidate %d", j, used)
		}
		used++
	}
	if used != int(b.Reseeds()) || used > dead {
		t.Errorf("%d atoms re-seeded from candidates, %d reseeds, %d dead predicted", used, b.Reseeds(), dead)
	}
}

func cmpFloat(p, q float64) int {
	switch {
	case p < q:
		return -1
	case p > q:
		return 1
	}
	return 0
}
