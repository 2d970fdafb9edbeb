package online

import (
	"bytes"
	"cmp"
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"gonum.org/v1/gonum/floats/scalar"
	"gonum.org/v1/gonum/mat"

	"github.com/smtd/smtd/internal/state"
)

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
// row of every other batch as skipped, and makes every batch carry an
// outlier row (clipped by the bound, the median bound in the first batch)
// and a NaN row (rejected), and one batch all skipped.
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
		if r > 3 {
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

// seededKMeans returns a KMeans with settings s that has learned the
// first batches of xs until its dictionary was seeded.
func seededKMeans(s KMeansSettings, seed uint64, xs []*mat.Dense, blanks [][]bool) *KMeans {
	km, _ := newTestKMeans(s, seed)
	for i := 0; km.Seeded() < s.K; i++ {
		km.Learn(xs[i], blanks[i])
	}
	return km
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
	a := seededKMeans(s, 11, xs, blanks)
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
	a := seededKMeans(s, 15, xs, blanks)
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
	if !slices.IsSortedFunc(c.Keys, func(p, q float64) int { return cmp.Compare(q, p) }) {
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

// contributionSamples returns whitening and k-means contributions of every
// kind computed from MNIST patches: with rows, without rows, seeds, hits
// with candidates.
func contributionSamples(t testing.TB) ([]*WhitenContribution, []*KMeansContribution) {
	t.Helper()
	raw := rawMNISTPatches(t, 2)
	w := NewWhitener(36, WhitenSettings{})
	wc := []*WhitenContribution{new(WhitenContribution), new(WhitenContribution), new(WhitenContribution)}
	w.Contribute(wc[0], raw, nil)
	if err := w.Apply(wc[:1]); err != nil {
		t.Fatal(err)
	}
	w.Contribute(wc[1], raw.Slice(0, 100, 0, 36), nil)
	w.Contribute(wc[2], raw.Slice(0, 3, 0, 36), []bool{true, true, true})

	xs, blanks := kmeansStream(t, 4)
	km, _ := newTestKMeans(KMeansSettings{K: 48, Dim: 36, ReseedAfter: 1}, 17)
	kc := []*KMeansContribution{new(KMeansContribution), new(KMeansContribution), new(KMeansContribution), new(KMeansContribution)}
	km.Contribute(kc[0], nil, nil, xs[0], blanks[0], nil, 0)
	km.Apply(kc[:1])
	for i := 1; km.Seeded() < 48; i++ {
		km.Learn(xs[i], blanks[i])
	}
	km.Contribute(kc[1], nil, nil, xs[len(xs)-1], blanks[len(xs)-1], rand.NewPCG(1, 2), km.DeadWithin(2))
	km.Contribute(kc[2], nil, nil, xs[1], blanks[1], nil, 0)
	km.Contribute(kc[3], nil, nil, mat.NewDense(2, 36, nil), nil, nil, 5)
	if len(kc[0].Seeds) == 0 || len(kc[1].Keys) == 0 || kc[3].Rows != 0 {
		t.Fatalf("samples: %d seed values, %d candidates, %d blank rows", len(kc[0].Seeds), len(kc[1].Keys), kc[3].Rows)
	}
	return wc, kc
}

func upper(s []float64, n int) []float64 {
	u := make([]float64, len(s))
	for i := range n {
		copy(u[i*n+i:(i+1)*n], s[i*n+i:(i+1)*n])
	}
	return u
}

func TestContributionEncodingRoundTrip(t *testing.T) {
	wcs, kcs := contributionSamples(t)
	for i, c := range wcs {
		data := mustMarshal(t, c)
		var got WhitenContribution
		if err := got.UnmarshalBinary(data); err != nil {
			t.Fatalf("whiten contribution %d: %v", i, err)
		}
		if got.Rows != c.Rows || got.Clipped != c.Clipped || got.Rejected != c.Rejected {
			t.Errorf("whiten contribution %d: counts %+v, want %+v", i, got, c)
		}
		if c.Rows > 0 && (!slices.Equal(got.Mean, c.Mean) || !slices.Equal(got.Scatter, upper(c.Scatter, 36))) {
			t.Errorf("whiten contribution %d: moments differ", i)
		}
		if c.Rows == 0 && len(data) > 8 {
			t.Errorf("whiten contribution %d without rows takes %d bytes", i, len(data))
		}
		for _, bad := range [][]byte{data[:len(data)-1], append(slices.Clone(data), 0), {stateVersion, kindKMeansContribution}} {
			if err := got.UnmarshalBinary(bad); !errors.Is(err, ErrFormat) {
				t.Errorf("whiten contribution %d: UnmarshalBinary of %d bad bytes = %v, want ErrFormat", i, len(bad), err)
			}
			if got.Rows != 0 {
				t.Errorf("whiten contribution %d: %d rows left after an error", i, got.Rows)
			}
		}
	}
	for i, c := range kcs {
		data := mustMarshal(t, c)
		var got KMeansContribution
		if err := got.UnmarshalBinary(data); err != nil {
			t.Fatalf("k-means contribution %d: %v", i, err)
		}
		if got.Rows != c.Rows || !slices.Equal(got.Hits, c.Hits) || !slices.Equal(got.Sums, c.Sums) ||
			!slices.Equal(got.Seeds, c.Seeds) || !slices.Equal(got.Candidates, c.Candidates) || !slices.Equal(got.Keys, c.Keys) {
			t.Errorf("k-means contribution %d: round trip differs", i)
		}
		if len(c.Hits) > 0 {
			atoms := 0
			for _, h := range c.Hits {
				if h > 0 {
					atoms++
				}
			}
			if want := 64 + 8*(atoms*37+len(c.Keys)*37); len(data) > want {
				t.Errorf("k-means contribution %d with %d atoms hit takes %d bytes, want at most %d", i, atoms, len(data), want)
			}
		}
		for _, bad := range [][]byte{data[:len(data)-1], append(slices.Clone(data), 0), {stateVersion, kindWhitenContribution}} {
			if err := got.UnmarshalBinary(bad); !errors.Is(err, ErrFormat) {
				t.Errorf("k-means contribution %d: UnmarshalBinary of %d bad bytes = %v, want ErrFormat", i, len(bad), err)
			}
		}
	}
	// With float32 sums: the same but the sums rounded, in about half
	// the bytes when sums dominate.
	for i, c := range kcs {
		data, err := c.MarshalFloat32()
		if err != nil {
			t.Fatal(err)
		}
		var got KMeansContribution
		if err := got.UnmarshalBinary(data); err != nil {
			t.Fatalf("k-means contribution %d as float32: %v", i, err)
		}
		rounded := make([]float64, len(c.Sums))
		for j, v := range c.Sums {
			rounded[j] = float64(float32(v))
		}
		if got.Rows != c.Rows || !slices.Equal(got.Hits, c.Hits) || !slices.Equal(got.Sums, rounded) ||
			!slices.Equal(got.Seeds, c.Seeds) || !slices.Equal(got.Candidates, c.Candidates) || !slices.Equal(got.Keys, c.Keys) {
			t.Errorf("k-means contribution %d as float32: round trip differs", i)
		}
		hit := 0
		for _, h := range c.Hits {
			if h > 0 {
				hit++
			}
		}
		if full, want := mustMarshal(t, c), 0; len(c.Hits) > 0 {
			want = len(full) - 4*hit*len(c.Sums)/len(c.Hits) // 4 bytes less a value summed
			if len(data) != want {
				t.Errorf("k-means contribution %d: %d bytes as float32, want %d (%d as float64)", i, len(data), want, len(full))
			}
		}
		for _, bad := range [][]byte{data[:len(data)-1], append(slices.Clone(data), 0)} {
			if err := got.UnmarshalBinary(bad); !errors.Is(err, ErrFormat) {
				t.Errorf("k-means contribution %d as float32: UnmarshalBinary of %d bad bytes = %v, want ErrFormat", i, len(bad), err)
			}
		}
	}
	if err := new(KMeansContribution).UnmarshalBinary([]byte{9, kindKMeansContribution}); !errors.Is(err, ErrVersion) {
		t.Errorf("UnmarshalBinary of version 9 = %v, want ErrVersion", err)
	}

	// Inconsistent contributions do not encode.
	for _, c := range []*KMeansContribution{
		{Rows: 2, Hits: []float64{1, 0}, Sums: make([]float64, 6)},                         // hits do not add up
		{Rows: 1, Hits: []float64{1, 0}, Sums: make([]float64, 5)},                         // sums not K×Dim
		{Rows: 1, Hits: []float64{0.5, 0.5}, Sums: make([]float64, 6)},                     // fractional hits
		{Rows: 2, Seeds: make([]float64, 5)},                                               // seeds not Rows×Dim
		{Rows: 1, Seeds: make([]float64, 3), Keys: []float64{-1}},                          // a key without its row
		{Rows: 1, Seeds: make([]float64, 3), Hits: []float64{1}, Sums: []float64{0, 0, 0}}, // both
		{Rows: -1},
	} {
		if _, err := c.MarshalBinary(); !errors.Is(err, ErrFormat) {
			t.Errorf("MarshalBinary(%+v) = %v, want ErrFormat", c, err)
		}
	}
	for _, c := range []*WhitenContribution{
		{Rows: 2, Mean: make([]float64, 3), Scatter: make([]float64, 8)},
		{Rows: 2},
		{Rows: -1},
	} {
		if _, err := c.MarshalBinary(); !errors.Is(err, ErrFormat) {
			t.Errorf("MarshalBinary(%+v) = %v, want ErrFormat", c, err)
		}
	}
}

// TestContributionRefusesRowsNotOfUnitLength checks that a k-means
// contribution whose seed or candidate rows are not unit rows, as a
// corrupted value leaves them, is refused: the seeds are scored as
// cosines, and one value of 10³⁰⁰ made a float32 score that is not a
// number.
func TestContributionRefusesRowsNotOfUnitLength(t *testing.T) {
	_, kcs := contributionSamples(t)
	for _, tc := range []struct {
		name string
		c    *KMeansContribution
		rows []float64
	}{{"seeds", kcs[0], kcs[0].Seeds}, {"candidates", kcs[1], kcs[1].Candidates}} {
		for _, v := range []float64{1e300, 0.5, 1e-4} {
			saved := tc.rows[3]
			tc.rows[3] += v
			data := mustMarshal(t, tc.c)
			tc.rows[3] = saved
			var got KMeansContribution
			if err := got.UnmarshalBinary(data); !errors.Is(err, ErrFormat) {
				t.Errorf("%s with %v added to a value: UnmarshalBinary = %v, want ErrFormat", tc.name, v, err)
			}
		}
	}
}

// FuzzContributionUnmarshal checks that UnmarshalBinary never panics, that
// what it accepts is consistent (it encodes again to a contribution that
// decodes to the same), and that what it refuses is refused with one of
// the package's errors.
func FuzzContributionUnmarshal(f *testing.F) {
	wcs, kcs := contributionSamples(f)
	for _, c := range wcs {
		f.Add(mustMarshal(f, c))
	}
	for _, c := range kcs {
		f.Add(mustMarshal(f, c))
		data, err := c.MarshalFloat32()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte{stateVersion, kindKMeansContribution, 0xff, 0xff, 0xff, 0xff, 0x0f, 0xff, 0xff, 0x03, 1, contributionHits, 1, 1, 1})
	f.Fuzz(func(t *testing.T, data []byte) {
		// Shapes up to the bounds of UnmarshalBinary decode like small
		// ones but take a second each: keep the fuzzer fast.
		if h := state.NewDecoder(data); h.U8() == stateVersion && h.U8() == kindKMeansContribution {
			if K, dim := h.Uvarint(), h.Uvarint(); K*dim > 1<<16 && K <= maxContributionK && dim <= maxContributionDim {
				t.Skip()
			}
		}
		var w WhitenContribution
		if err := w.UnmarshalBinary(data); err != nil {
			if !errors.Is(err, ErrFormat) && !errors.Is(err, ErrVersion) {
				t.Fatalf("whiten: unexpected error %v", err)
			}
		} else {
			again := mustMarshal(t, &w)
			var w2 WhitenContribution
			if err := w2.UnmarshalBinary(again); err != nil || !bytes.Equal(mustMarshal(t, &w2), again) {
				t.Fatalf("whiten: accepted contribution does not round-trip: %v", err)
			}
		}
		var k KMeansContribution
		if err := k.UnmarshalBinary(data); err != nil {
			if !errors.Is(err, ErrFormat) && !errors.Is(err, ErrVersion) {
				t.Fatalf("k-means: unexpected error %v", err)
			}
			return
		}
		again := mustMarshal(t, &k)
		var k2 KMeansContribution
		if err := k2.UnmarshalBinary(again); err != nil || !bytes.Equal(mustMarshal(t, &k2), again) {
			t.Fatalf("k-means: accepted contribution does not round-trip: %v", err)
		}
		if K, dim, err := k.dims(); err == nil && K > 0 && dim > 0 && K*dim <= 1<<16 {
			km := NewKMeans(KMeansSettings{K: K, Dim: dim}, nil)
			if err := km.CheckContribution(&k); err != nil {
				t.Fatalf("k-means: accepted contribution does not fit its shape: %v", err)
			}
		}
	})
}

func TestContributionShapeErrors(t *testing.T) {
	w := NewWhitener(3, WhitenSettings{})
	bad := &WhitenContribution{Rows: 2, Mean: make([]float64, 2), Scatter: make([]float64, 4)}
	if err := w.Apply([]*WhitenContribution{bad}); !errors.Is(err, ErrFormat) {
		t.Errorf("Apply of a 2-dimensional contribution to a 3-dimensional whitener = %v, want ErrFormat", err)
	}
	if w.Batches() != 0 || w.Rows() != 0 {
		t.Error("a refused Apply changed the whitener")
	}
	// Frozen, Apply ignores contributions, as Observe ignores batches.
	fw := NewWhitener(3, WhitenSettings{FreezeAfter: 2})
	var c WhitenContribution
	x := mat.NewDense(2, 3, []float64{1, 2, 3, 3, 1, 2})
	fw.Contribute(&c, x, nil)
	if err := fw.Apply([]*WhitenContribution{&c}); err != nil || !fw.Frozen() {
		t.Fatalf("Apply = %v, frozen %v", err, fw.Frozen())
	}
	before := mustMarshal(t, fw)
	if err := fw.Apply([]*WhitenContribution{&c}); err != nil || !bytes.Equal(before, mustMarshal(t, fw)) {
		t.Errorf("Apply to a frozen whitener = %v, or changed it", err)
	}

	km := NewKMeans(KMeansSettings{K: 4, Dim: 3}, nil)
	for _, c := range []*KMeansContribution{
		{Rows: 1, Hits: make([]float64, 4), Sums: make([]float64, 8)},
		{Rows: 1, Hits: make([]float64, 3), Sums: make([]float64, 9)},
		{Rows: 1, Seeds: make([]float64, 4)},
		{Keys: []float64{-1}, Candidates: make([]float64, 2)},
	} {
		if err := km.CheckContribution(c); !errors.Is(err, ErrFormat) {
			t.Errorf("CheckContribution(%+v) = %v, want ErrFormat", c, err)
		}
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("Apply(%+v) did not panic", c)
				}
			}()
			km.Apply([]*KMeansContribution{c})
		}()
	}
}
