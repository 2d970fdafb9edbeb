package sgd_test

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"gonum.org/v1/gonum/floats/scalar"
	"gonum.org/v1/gonum/mat"

	"github.com/smtd/smtd/online"
	"github.com/smtd/smtd/sgd"
	"github.com/smtd/smtd/spectral"
)

// wordRef is a dense reference of the word statistics: counts c, pair
// counts C (symmetric, zero diagonal), N and M, each minibatch weighted
// by the forgetting factor.
type wordRef struct {
	c    []float64
	cc   *mat.Dense
	n, m float64
}

func newWordRef(words int) *wordRef {
	return &wordRef{c: make([]float64, words), cc: mat.NewDense(words, words, nil)}
}

func (r *wordRef) add(ids, lengths []int, window int, memory float64) {
	counted := 0
	for _, id := range ids {
		if id >= 0 {
			counted++
		}
	}
	if counted == 0 {
		return
	}
	if memory > 0 {
		f := math.Exp(-float64(counted) / memory)
		floatsScale(f, r.c)
		r.cc.Scale(f, r.cc)
		r.n *= f
		r.m *= f
	}
	first := 0
	for _, l := range lengths {
		s := ids[first : first+l]
		first += l
		for i, a := range s {
			if a < 0 {
				continue
			}
			r.c[a]++
			r.n++
			for j := i + 1; j < l && j <= i+window; j++ {
				b := s[j]
				if b < 0 {
					continue
				}
				r.m++
				if a != b {
					r.cc.Set(a, b, r.cc.At(a, b)+1)
					r.cc.Set(b, a, r.cc.At(b, a)+1)
				}
			}
		}
	}
}

func floatsScale(f float64, s []float64) {
	for i := range s {
		s[i] *= f
	}
}

// vl returns the dense V = diag(c)/N and L = (diag(C·1) − C)/M.
func (r *wordRef) vl() (v, l *mat.Dense) {
	n := len(r.c)
	v, l = mat.NewDense(n, n, nil), mat.NewDense(n, n, nil)
	for a := range n {
		v.Set(a, a, r.c[a]/r.n)
		deg := 0.0
		for b := range n {
			deg += r.cc.At(a, b)
			l.Set(a, b, -r.cc.At(a, b)/r.m)
		}
		l.Set(a, a, deg/r.m)
	}
	return v, l
}

// randomSentences returns a minibatch of sentences of ids in [−1, words).
func randomSentences(rng *rand.Rand, words, sentences int) (ids, lengths []int) {
	for range sentences {
		l := rng.IntN(9)
		lengths = append(lengths, l)
		for range l {
			id := rng.IntN(words+1) - 1
			ids = append(ids, id)
		}
	}
	return ids, lengths
}

func equalDense(t *testing.T, name string, got, want mat.Matrix, tol float64) {
	t.Helper()
	r, c := want.Dims()
	for i := range r {
		for j := range c {
			if g, w := got.At(i, j), want.At(i, j); !scalar.EqualWithinAbsOrRel(g, w, tol, tol) {
				t.Fatalf("%s[%d,%d] = %v, want %v", name, i, j, g, w)
			}
		}
	}
}

// checkProducts compares the pencil of st with the reference.
func checkProducts(t *testing.T, st *sgd.WordStats, ref *wordRef, rng *rand.Rand) {
	t.Helper()
	n := st.Size()
	v, l := ref.vl()
	x := mat.NewDense(n, 3, nil)
	for i := range n {
		for j := range 3 {
			x.Set(i, j, rng.NormFloat64())
		}
	}
	var got, want mat.Dense
	st.MulV(&got, x)
	want.Mul(v, x)
	equalDense(t, "V·x", &got, &want, 1e-12)
	got.Reset()
	st.MulL(&got, x)
	want.Mul(l, x)
	equalDense(t, "L·x", &got, &want, 1e-12)
	dv := st.DiagV(nil)
	for a := range n {
		if !scalar.EqualWithinAbsOrRel(dv[a], v.At(a, a), 1e-12, 1e-12) {
			t.Fatalf("DiagV[%d] = %v, want %v", a, dv[a], v.At(a, a))
		}
		if g := st.Count(a); !scalar.EqualWithinAbsOrRel(g, ref.c[a], 1e-12, 1e-12) {
			t.Fatalf("Count(%d) = %v, want %v", a, g, ref.c[a])
		}
		for b := range n {
			if g, w := st.Cooccurrence(a, b), ref.cc.At(a, b); !scalar.EqualWithinAbsOrRel(g, w, 1e-12, 1e-12) {
				t.Fatalf("Cooccurrence(%d, %d) = %v, want %v", a, b, g, w)
			}
		}
	}
	if !scalar.EqualWithinAbsOrRel(st.Weight(), ref.n, 1e-12, 1e-12) || !scalar.EqualWithinAbsOrRel(st.PairWeight(), ref.m, 1e-12, 1e-12) {
		t.Fatalf("N, M = %v, %v, want %v, %v", st.Weight(), st.PairWeight(), ref.n, ref.m)
	}
}

func TestWordStatsDense(t *testing.T) {
	for _, tc := range []struct {
		name           string
		words, window  int
		memory         float64
		batches, sents int
	}{
		{"window 1", 7, 1, 0, 5, 6},
		{"default window", 9, 0, 0, 5, 6},
		{"window 2, forgetting", 8, 2, 30, 8, 5},
		{"window beyond sentences", 5, 20, 0, 3, 4},
		{"forgetting with rescaling", 6, 3, 0.1, 6, 5}, // g falls below 1e-150
	} {
		t.Run(tc.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(1, uint64(tc.words)))
			st := sgd.NewWordStats(sgd.WordSettings{Words: tc.words, Window: tc.window, Memory: tc.memory})
			ref := newWordRef(tc.words)
			win := tc.window
			if win == 0 {
				win = sgd.DefaultWordWindow
			}
			var tokens int64
			for range tc.batches {
				ids, lengths := randomSentences(rng, tc.words, tc.sents)
				st.Add(ids, lengths)
				ref.add(ids, lengths, win, tc.memory)
				for _, id := range ids {
					if id >= 0 {
						tokens++
					}
				}
			}
			if st.Tokens() != tokens {
				t.Errorf("Tokens() = %d, want %d", st.Tokens(), tokens)
			}
			checkProducts(t, st, ref, rng)
		})
	}
}

// TestWordStatsForgetting checks the decay itself: a word seen only in
// the first minibatch keeps exp(−n/Memory) of its count per later
// minibatch of n counted tokens.
func TestWordStatsForgetting(t *testing.T) {
	st := sgd.NewWordStats(sgd.WordSettings{Words: 4, Memory: 10})
	st.Add([]int{0, 1}, []int{2})
	for range 3 {
		st.Add([]int{2, 3, -1, 2, 3}, []int{5})
	}
	want := math.Exp(-3 * 4.0 / 10)
	if got := st.Count(0); !scalar.EqualWithinAbsOrRel(got, want, 1e-14, 1e-14) {
		t.Errorf("Count(0) = %v, want %v", got, want)
	}
	if got := st.Cooccurrence(0, 1); !scalar.EqualWithinAbsOrRel(got, want, 1e-14, 1e-14) {
		t.Errorf("C_01 = %v, want %v", got, want)
	}
}

func TestWordStatsPrune(t *testing.T) {
	const words, maxPairs = 40, 16
	st := sgd.NewWordStats(sgd.WordSettings{Words: words, Window: 1, MaxPairs: maxPairs})
	// Strong pairs (0,1) ... (8,9) met 50 times each, then many weak pairs
	// met once: the weak ones are pruned, the strong ones survive.
	var ids, lengths []int
	for range 50 {
		for a := 0; a < 10; a += 2 {
			ids = append(ids, a, a+1)
			lengths = append(lengths, 2)
		}
	}
	st.Add(ids, lengths)
	rng := rand.New(rand.NewPCG(3, 4))
	ids, lengths = ids[:0], lengths[:0]
	for range 200 {
		ids = append(ids, 10+rng.IntN(words-10), 10+rng.IntN(words-10))
		lengths = append(lengths, 2)
	}
	st.Add(ids, lengths)
	if st.Prunes() == 0 {
		t.Fatal("no pruning")
	}
	if st.StoredPairs() > maxPairs {
		t.Errorf("%d pairs stored, cap %d", st.StoredPairs(), maxPairs)
	}
	for a := 0; a < 10; a += 2 {
		if got := st.Cooccurrence(a, a+1); got != 50 {
			t.Errorf("C_%d,%d = %v after pruning, want 50", a, a+1, got)
		}
	}
	// L stays a Laplacian: symmetric, rows summing to zero.
	var l mat.Dense
	eye := mat.NewDense(words, words, nil)
	for a := range words {
		eye.Set(a, a, 1)
	}
	st.MulL(&l, eye)
	for a := range words {
		sum := 0.0
		for b := range words {
			sum += l.At(a, b)
			if l.At(a, b) != l.At(b, a) {
				t.Fatalf("L not symmetric at %d, %d", a, b)
			}
		}
		if math.Abs(sum) > 1e-12 {
			t.Fatalf("row %d of L sums to %v", a, sum)
		}
	}
	// A lower cap prunes at once.
	s := st.Settings()
	s.MaxPairs = 8
	if err := st.SetSettings(s); err != nil {
		t.Fatal(err)
	}
	if st.StoredPairs() > 8 {
		t.Errorf("%d pairs stored after lowering the cap to 8", st.StoredPairs())
	}
	s.Window = 2
	if err := st.SetSettings(s); err == nil {
		t.Error("SetSettings changed the window")
	}
}

func TestWordStatsReset(t *testing.T) {
	st := sgd.NewWordStats(sgd.WordSettings{Words: 5, Window: 1})
	st.Add([]int{0, 1, 2, 1, 3}, []int{5})
	st.Reset(1)
	if st.Count(1) != 0 || st.Cooccurrence(0, 1) != 0 || st.Cooccurrence(1, 2) != 0 {
		t.Fatalf("slot 1 not reset: count %v, C_01 %v, C_12 %v", st.Count(1), st.Cooccurrence(0, 1), st.Cooccurrence(1, 2))
	}
	if st.Count(2) != 1 || st.Cooccurrence(2, 3) != 0 {
		t.Fatalf("reset touched slot 2: count %v", st.Count(2))
	}
	// The new word of slot 1 counts from zero, pairs included.
	st.Add([]int{1, 2, 4}, []int{3})
	if st.Count(1) != 1 || st.Cooccurrence(1, 2) != 1 || st.Cooccurrence(2, 4) != 1 {
		t.Errorf("after reset: count %v, C_12 %v, C_24 %v, want 1, 1, 1", st.Count(1), st.Cooccurrence(1, 2), st.Cooccurrence(2, 4))
	}
	// The degree of slot 2 lost the stale pairs: (L·1)_2 = 0 and
	// (L e_2)_2 = (C_12 + C_23 + C_24)/M = 2/M.
	var y mat.Dense
	e := mat.NewDense(5, 1, nil)
	e.Set(2, 0, 1)
	st.MulL(&y, e)
	if got, want := y.At(2, 0), 2/st.PairWeight(); !scalar.EqualWithinAbsOrRel(got, want, 1e-14, 1e-14) {
		t.Errorf("L_22 = %v, want %v", got, want)
	}
}

func TestWordStatsAssignIDs(t *testing.T) {
	v := online.NewVocabulary(3)
	st := sgd.NewWordStats(sgd.WordSettings{Words: 3, Window: 1})
	ids := st.AssignIDs(nil, v, []string{"a", "a", "b", "c"})
	st.Add(ids, []int{4})
	if !slices.Equal(ids, []int{0, 0, 1, 2}) {
		t.Fatalf("ids %v", ids)
	}
	// Space-Saving counts a:2 b:1 c:1. "c" makes c:2; "d" evicts b (the
	// rarest) and takes slot 1 with count 2; "b" comes back and evicts d
	// (count 2 like c, smaller slot), so the "d" before it no longer
	// names slot 1's word.
	ids = st.AssignIDs(ids, v, []string{"c", "d", "a", "b"})
	if !slices.Equal(ids, []int{2, -1, 0, 1}) {
		t.Fatalf("ids %v, want [2 -1 0 1]", ids)
	}
	if st.Count(0) != 2 || st.Count(1) != 0 || st.Count(2) != 1 || st.Cooccurrence(0, 1) != 0 || st.Cooccurrence(1, 2) != 0 {
		t.Fatalf("slot 1 not reset alone: counts %v %v %v, C_01 %v, C_12 %v",
			st.Count(0), st.Count(1), st.Count(2), st.Cooccurrence(0, 1), st.Cooccurrence(1, 2))
	}
	st.Add(ids, []int{4})
	if st.Count(1) != 1 || st.Count(2) != 2 || st.Cooccurrence(0, 1) != 1 || st.Cooccurrence(0, 2) != 0 {
		t.Errorf("counts %v %v, C_01 %v, C_02 %v", st.Count(1), st.Count(2), st.Cooccurrence(0, 1), st.Cooccurrence(0, 2))
	}
}

// A long word that evicts several words of a byte-bounded vocabulary
// resets each of their slots, and the earlier tokens of the message that
// named them are left out.
func TestWordStatsAssignIDsByteBound(t *testing.T) {
	const slot = online.VocabularySlotBytes
	v := online.NewBoundedVocabulary(4, 3*slot+5)
	st := sgd.NewWordStats(sgd.WordSettings{Words: 4, Window: 1})
	ids := st.AssignIDs(nil, v, []string{"a", "a", "b", "c"})
	st.Add(ids, []int{4})
	// "longword" (8 bytes) needs b and c to go: the two rarest.
	ids = st.AssignIDs(ids, v, []string{"c", "b", "a", "longword"})
	if !slices.Equal(ids, []int{-1, -1, 0, 2}) {
		t.Fatalf("ids %v, want [-1 -1 0 2]", ids)
	}
	if st.Count(1) != 0 || st.Count(2) != 0 || st.Cooccurrence(1, 2) != 0 || st.Count(0) != 2 {
		t.Errorf("slots 1 and 2 not reset: counts %v %v %v, C_12 %v", st.Count(0), st.Count(1), st.Count(2), st.Cooccurrence(1, 2))
	}
	if v.Bytes() > v.MaxBytes() {
		t.Errorf("vocabulary of %d bytes > %d", v.Bytes(), v.MaxBytes())
	}
}

func TestWordStatsPanics(t *testing.T) {
	st := sgd.NewWordStats(sgd.WordSettings{Words: 3})
	for _, tc := range []struct {
		name string
		f    func()
	}{
		{"lengths", func() { st.Add([]int{0, 1}, []int{3}) }},
		{"negative length", func() { st.Add([]int{0, 1}, []int{3, -1}) }},
		{"id", func() { st.Add([]int{0, 3}, []int{2}) }},
		{"reset", func() { st.Reset(3) }},
		{"shape", func() { st.MulL(&mat.Dense{}, mat.NewDense(2, 1, nil)) }},
		{"vocabulary", func() { st.AssignIDs(nil, online.NewVocabulary(4), []string{"a"}) }},
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: no panic", tc.name)
				}
			}()
			tc.f()
		}()
	}
	for _, s := range []sgd.WordSettings{{}, {Words: 2, Window: -1}, {Words: 2, MaxPairs: -1}, {Words: 2, Memory: math.NaN()}} {
		if s.Validate() == nil {
			t.Errorf("%+v valid", s)
		}
	}
}

// A table restored at any size grows into the same bytes as the one
// that was never stored, though its array has another capacity: a
// restart from a checkpoint resumes exactly while the table grows.
func TestWordStatsRestoredGrowsAlike(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	s := sgd.WordSettings{Words: 3000, Window: 4, MaxPairs: 1 << 20}
	st := sgd.NewWordStats(s)
	var restored []*sgd.WordStats
	for range 60 {
		ids, lengths := randomSentences(rng, 3000, 100)
		st.Add(ids, lengths)
		for _, r := range restored {
			r.Add(ids, lengths)
		}
		data, err := st.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		r := sgd.NewWordStats(s)
		if err := r.UnmarshalBinary(data); err != nil {
			t.Fatal(err)
		}
		restored = append(restored, r)
	}
	if st.StoredPairs() < 20000 {
		t.Fatalf("%d pairs stored: the test wants a table that grew from 1024 slots", st.StoredPairs())
	}
	want, _ := st.MarshalBinary()
	for i, r := range restored {
		if b, _ := r.MarshalBinary(); !slices.Equal(b, want) {
			t.Errorf("restored after minibatch %d: state differs after the same minibatches", i+1)
		}
	}
}

func TestWordStatsMarshal(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	s := sgd.WordSettings{Words: 30, Window: 2, MaxPairs: 40, Memory: 500}
	st := sgd.NewWordStats(s)
	for range 10 {
		ids, lengths := randomSentences(rng, 30, 8)
		st.Add(ids, lengths)
	}
	st.Reset(3)
	st.Reset(7)
	if st.Prunes() == 0 {
		t.Fatal("test wants a pruned table")
	}
	data, err := st.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	got := sgd.NewWordStats(sgd.WordSettings{Words: 30, Window: 2})
	if err := got.UnmarshalBinary(data); err != nil {
		t.Fatal(err)
	}
	if got.Settings() != s {
		t.Errorf("settings %+v, want %+v", got.Settings(), s)
	}
	clone := st.Clone()
	// The original, the restored copy and a clone continue identically,
	// bit for bit, pruning included.
	for range 10 {
		ids, lengths := randomSentences(rng, 30, 8)
		st.Add(ids, lengths)
		got.Add(ids, lengths)
		clone.Add(ids, lengths)
	}
	want, _ := st.MarshalBinary()
	for name, c := range map[string]*sgd.WordStats{"restored": got, "clone": clone} {
		b, _ := c.MarshalBinary()
		if !slices.Equal(b, want) {
			t.Errorf("%s state differs after the same minibatches", name)
		}
	}
	x := mat.NewDense(30, 1, nil)
	for i := range 30 {
		x.Set(i, 0, rng.NormFloat64())
	}
	var y1, y2 mat.Dense
	st.MulL(&y1, x)
	got.MulL(&y2, x)
	if !mat.Equal(&y1, &y2) {
		t.Error("restored MulL differs")
	}

	for _, tc := range []struct {
		name string
		data []byte
		want error
	}{
		{"empty", nil, sgd.ErrVersion},
		{"version", append([]byte{99}, data[1:]...), sgd.ErrVersion},
		{"kind", append([]byte{data[0], 'S'}, data[2:]...), sgd.ErrFormat},
		{"truncated", data[:len(data)-3], sgd.ErrFormat},
		{"trailing", append(slices.Clone(data), 0), sgd.ErrFormat},
	} {
		r := sgd.NewWordStats(sgd.WordSettings{Words: 30, Window: 2})
		before, _ := r.MarshalBinary()
		if err := r.UnmarshalBinary(tc.data); !errors.Is(err, tc.want) {
			t.Errorf("%s: error %v, want %v", tc.name, err, tc.want)
		}
		if after, _ := r.MarshalBinary(); !slices.Equal(before, after) {
			t.Errorf("%s: receiver changed by a failed UnmarshalBinary", tc.name)
		}
	}
	other := sgd.NewWordStats(sgd.WordSettings{Words: 30, Window: 3})
	if err := other.UnmarshalBinary(data); !errors.Is(err, sgd.ErrFormat) {
		t.Errorf("other window: error %v", err)
	}
}

// toyClasses are the words of toyCorpus that fill the slots.
var toyClasses = [][]string{
	{"monday", "tuesday", "wednesday", "thursday", "friday"},
	{"red", "green", "blue", "yellow", "white"},
	{"two", "three", "four", "five", "six"},
}

// toyCorpus returns sentences of five words: a template of four words
// around a slot in the middle, filled by a word of the template's class.
// Each class has three templates of its own, so that the words of a
// class share all their contexts, never meet, and differ from every
// template word, whose contexts are one template. One word in five is
// replaced by a filler word, at random. The spectrum of the graph is
// then 0 (the constant), two small eigenvalues (the three classes),
// six near 1/2 (the templates of each class), and the rest.
func toyCorpus(rng *rand.Rand, sentences int) [][]string {
	templates := [][][]string{
		{{"we", "met", "on", "morning"}, {"closed", "every", "last", "night"}, {"arrives", "next", "before", "noon"}},
		{{"painted", "door", "bright", "today"}, {"wore", "her", "silk", "dress"}, {"sky", "turned", "at", "dusk"}},
		{{"bought", "dozen", "eggs", "cheap"}, {"scored", "goals", "in", "total"}, {"waited", "hours", "or", "more"}},
	}
	filler := []string{"the", "a", "and", "of", "then", "so"}
	out := make([][]string, sentences)
	for i := range out {
		// Every (template, word) combination equally often.
		c := i % 3
		t := templates[c][i/3%3]
		s := []string{t[0], t[1], toyClasses[c][i/9%5], t[2], t[3]}
		for j := range s {
			if rng.IntN(5) == 0 {
				s[j] = filler[rng.IntN(len(filler))]
			}
		}
		out[i] = s
	}
	return out
}

func TestWordEmbedNeighbours(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	corpus := toyCorpus(rng, 3000)
	v := online.NewVocabulary(64)
	st := sgd.NewWordStats(sgd.WordSettings{Words: 64})
	var ids []int
	for first := 0; first < len(corpus); first += 100 {
		var tokens []string
		var lengths []int
		for _, s := range corpus[first : first+100] {
			tokens = append(tokens, s...)
			lengths = append(lengths, len(s))
		}
		ids = st.AssignIDs(ids, v, tokens)
		st.Add(ids, lengths)
	}
	class := map[string]int{}
	for c, ws := range toyClasses {
		for _, w := range ws {
			class[w] = c + 1
		}
	}
	for _, w := range []sgd.PairWeighting{sgd.WeightPPMI, sgd.WeightCounts} {
		t.Run(w.String(), func(t *testing.T) {
			var p mat.Dense
			res, err := st.Embed(&p, sgd.WordEmbedSettings{Dim: 8, Weighting: w}, rand.NewPCG(1, 1))
			if err != nil {
				t.Fatal(err)
			}
			if res.Atoms != v.Len() || len(res.Dropped) != 1 || math.Abs(res.Dropped[0]) > 1e-9 {
				t.Fatalf("atoms %d of %d, dropped %v", res.Atoms, v.Len(), res.Dropped)
			}
			vecs := sgd.NewWordVectors(&p)
			queries := []string{"monday", "red", "three"}
			var qids []int
			for _, q := range queries {
				id, _ := v.Lookup(q)
				qids = append(qids, id)
			}
			for i, list := range vecs.Neighbours(nil, qids, 4) {
				for _, nb := range list {
					if class[v.Word(nb.ID)] != class[queries[i]] {
						t.Errorf("neighbours of %s include %s", queries[i], v.Word(nb.ID))
					}
				}
			}
		})
	}
}

// TestWordEmbedCounts checks that WeightCounts solves the pencil of the
// statistics themselves when no word is left out.
func TestWordEmbedCounts(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	st := sgd.NewWordStats(sgd.WordSettings{Words: 25, Window: 2})
	for range 20 {
		ids, lengths := randomSentences(rng, 25, 10)
		st.Add(ids, lengths)
	}
	var got, want mat.Dense
	if _, err := st.Embed(&got, sgd.WordEmbedSettings{Dim: 4, Drop: 1, MinCount: 1, Weighting: sgd.WeightCounts}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := spectral.SolveSMT(&want, st, spectral.Settings{Dim: 4, Drop: 2}, nil); err != nil {
		t.Fatal(err)
	}
	equalDense(t, "P", &got, &want, 1e-8)
}

// TestWordEmbedPPMI checks the PPMI pencil against a dense computation:
// the embedding satisfies L pᵢ = λᵢ V pᵢ and P V Pᵀ = I with the weights
// W_ab = max(0, log(C_ab·T/(d_a·d_b))) of the words kept.
func TestWordEmbedPPMI(t *testing.T) {
	const words = 20
	rng := rand.New(rand.NewPCG(11, 12))
	st := sgd.NewWordStats(sgd.WordSettings{Words: words, Window: 2})
	for range 30 {
		ids, lengths := randomSentences(rng, words, 10)
		st.Add(ids, lengths)
	}
	const minCount = 8
	keep := make([]bool, words)
	for a := range words {
		keep[a] = st.Count(a) >= minCount
	}
	c := mat.NewDense(words, words, nil)
	d := make([]float64, words)
	total := 0.0
	for a := range words {
		for b := range words {
			if keep[a] && keep[b] {
				c.Set(a, b, st.Cooccurrence(a, b))
				d[a] += c.At(a, b)
				total += c.At(a, b)
			}
		}
	}
	wgt := mat.NewDense(words, words, nil)
	deg := make([]float64, words)
	tw := 0.0
	for a := range words {
		for b := range words {
			if x := c.At(a, b); x > 0 {
				wgt.Set(a, b, max(0, math.Log(x*total/(d[a]*d[b]))))
			}
			deg[a] += wgt.At(a, b)
		}
		tw += deg[a]
	}
	v, l := mat.NewDense(words, words, nil), mat.NewDense(words, words, nil)
	for a := range words {
		v.Set(a, a, deg[a]/tw)
		for b := range words {
			l.Set(a, b, -wgt.At(a, b)/tw)
		}
		l.Set(a, a, l.At(a, a)+deg[a]/tw)
	}
	var p mat.Dense
	res, err := st.Embed(&p, sgd.WordEmbedSettings{Dim: 3, MinCount: minCount}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for a := range words {
		if deg[a] == 0 && mat.Norm(p.ColView(a), 2) != 0 {
			t.Errorf("word %d left out has a non-zero column", a)
		}
	}
	var lp, vp, pvp mat.Dense
	lp.Mul(l, p.T())
	vp.Mul(v, p.T())
	for i, lambda := range res.Values {
		for a := range words {
			if g, w := lp.At(a, i), lambda*vp.At(a, i); math.Abs(g-w) > 1e-5 {
				t.Fatalf("row %d: (L p)_%d = %v, λ(V p)_%d = %v", i, a, g, a, w)
			}
		}
	}
	pvp.Mul(&p, &vp)
	for i := range 3 {
		for j := range 3 {
			want := 0.0
			if i == j {
				want = 1
			}
			if math.Abs(pvp.At(i, j)-want) > 1e-8 {
				t.Fatalf("(P V Pᵀ)_%d,%d = %v", i, j, pvp.At(i, j))
			}
		}
	}
}

func TestWordVectorsNeighbours(t *testing.T) {
	// Columns: 0 and 1 point the same way, 2 is orthogonal, 3 is unused,
	// 4 is opposite to 0, 5 is at 45° from 0.
	p := mat.NewDense(2, 6, []float64{
		1, 3, 0, 0, -1, 1,
		0, 0, 2, 0, 0, 1,
	})
	vecs := sgd.NewWordVectors(p)
	got := vecs.Neighbours(nil, []int{0, 3, 2}, 3)
	want := [][]sgd.Neighbour{
		{{1, 1}, {5, math.Sqrt(0.5)}, {2, 0}},
		{},
		{{5, math.Sqrt(0.5)}, {0, 0}, {1, 0}},
	}
	for i := range want {
		if len(got[i]) != len(want[i]) {
			t.Fatalf("query %d: %v, want %v", i, got[i], want[i])
		}
		for j := range want[i] {
			if got[i][j].ID != want[i][j].ID || math.Abs(got[i][j].Cosine-want[i][j].Cosine) > 1e-15 {
				t.Fatalf("query %d: %v, want %v", i, got[i], want[i])
			}
		}
	}
	if vecs.Used(3) || !vecs.Used(4) || vecs.Len() != 6 {
		t.Error("Used or Len wrong")
	}
	if v := vecs.Vector(3); len(v) != 2 || v[0] != 0 || v[1] != 0 {
		t.Errorf("Vector of the unused slot 3 = %v, want [0 0]", v)
	}
	if v := vecs.Vector(1); len(v) != 2 || v[0] != 1 || v[1] != 0 {
		t.Errorf("Vector(1) = %v, want [1 0]", v)
	}
	// No slot in use: every list is empty and every vector zero.
	none := sgd.NewWordVectors(mat.NewDense(2, 3, nil))
	if got := none.Neighbours(nil, []int{0, 2}, 3); len(got) != 2 || len(got[0]) != 0 || len(got[1]) != 0 {
		t.Errorf("no slot in use: neighbours %v", got)
	}
	if v := none.Vector(1); len(v) != 2 || v[0] != 0 || v[1] != 0 {
		t.Errorf("no slot in use: Vector(1) = %v, want [0 0]", v)
	}
	// k beyond the words in use gives them all.
	if all := vecs.Neighbours(got, []int{0}, 10); len(all) != 1 || len(all[0]) != 4 {
		t.Errorf("k = 10: %v", all)
	}
}

// ExampleWordStats embeds the words of a toy stream in which the days
// share their contexts without meeting each other.
func ExampleWordStats() {
	rng := rand.New(rand.NewPCG(1, 2))
	corpus := toyCorpus(rng, 2000)
	v := online.NewVocabulary(100)
	st := sgd.NewWordStats(sgd.WordSettings{Words: v.Size(), Window: 4})
	var ids []int
	for _, s := range corpus { // one sentence per minibatch
		ids = st.AssignIDs(ids, v, s)
		st.Add(ids, []int{len(s)})
	}
	var p mat.Dense
	if _, err := st.Embed(&p, sgd.WordEmbedSettings{Dim: 8}, nil); err != nil {
		fmt.Println(err)
		return
	}
	vecs := sgd.NewWordVectors(&p)
	monday, _ := v.Lookup("monday")
	for _, nb := range vecs.Neighbours(nil, []int{monday}, 4)[0] {
		fmt.Println(v.Word(nb.ID))
	}
	// Unordered output:
	// tuesday
	// wednesday
	// thursday
	// friday
}

func BenchmarkWordStatsAdd(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 2))
	// A Zipf-like stream of 20,000 words in sentences of 20 tokens.
	z := rand.NewZipf(rng, 1.1, 1, 19999)
	ids := make([]int, 20*256)
	lengths := make([]int, 256)
	for i := range lengths {
		lengths[i] = 20
	}
	st := sgd.NewWordStats(sgd.WordSettings{Words: 20000})
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		for i := range ids {
			ids[i] = int(z.Uint64())
		}
		b.StartTimer()
		st.Add(ids, lengths)
	}
	b.ReportMetric(float64(b.N*len(ids))/b.Elapsed().Seconds(), "tokens/s")
}

// BenchmarkWordVectorsNeighbours queries 8 words among the vectors of a
// solve shaped like the Brown corpus's: 8,471 of 50,000 slots used, at
// dimension 128.
func BenchmarkWordVectorsNeighbours(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 2))
	const slots, used = 50000, 8471
	p := mat.NewDense(128, slots, nil)
	for i := range 128 {
		for u := range used {
			p.Set(i, u*slots/used, rng.NormFloat64())
		}
	}
	vecs := sgd.NewWordVectors(p)
	queries := make([]int, 8)
	for u := range queries {
		queries[u] = u * slots / used
	}
	var dst [][]sgd.Neighbour
	b.ReportAllocs()
	for b.Loop() {
		dst = vecs.Neighbours(dst, queries, 10)
	}
}
