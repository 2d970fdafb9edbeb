package online

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"testing"

	"gonum.org/v1/gonum/mat"
)

// knnClusters returns n rows drawn around nc random centres (centre +
// spread·N(0, I)) and the cluster of each.
func knnClusters(rng *rand.Rand, nc, dim, n int, spread float64) (*mat.Dense, []int) {
	centres := make([][]float64, nc)
	for c := range centres {
		centres[c] = make([]float64, dim)
		for l := range centres[c] {
			centres[c][l] = rng.NormFloat64()
		}
	}
	x := mat.NewDense(n, dim, nil)
	label := make([]int, n)
	for i := 0; i < n; i++ {
		c := rng.IntN(nc)
		label[i] = c
		for l := 0; l < dim; l++ {
			x.Set(i, l, centres[c][l]+spread*rng.NormFloat64())
		}
	}
	return x, label
}

// bruteKNN is the soft KNN of App. J computed directly in float64.
func bruteKNN(train *mat.Dense, labels []int, test *mat.Dense, s KNNSettings) []int {
	n, _ := train.Dims()
	r, _ := test.Dims()
	classes := 0
	for _, l := range labels {
		classes = max(classes, l+1)
	}
	cos := func(a, b []float64) float64 {
		var d, na, nb float64
		for i := range a {
			d += a[i] * b[i]
			na += a[i] * a[i]
			nb += b[i] * b[i]
		}
		if na == 0 || nb == 0 {
			return 0
		}
		return d / math.Sqrt(na*nb)
	}
	out := make([]int, r)
	for q := 0; q < r; q++ {
		idx := make([]int, n)
		c := make([]float64, n)
		for j := range idx {
			idx[j] = j
			c[j] = cos(test.RawRowView(q), train.RawRowView(j))
		}
		sort.SliceStable(idx, func(a, b int) bool { return c[idx[a]] > c[idx[b]] })
		z := make([]float64, classes)
		for _, j := range idx[:min(s.k(), n)] {
			w := c[j]
			if s.Vote == VoteExp {
				w = math.Exp(w / s.temperature())
			}
			z[labels[j]] += w
		}
		best := 0
		for k, v := range z {
			if v > z[best] {
				best = k
			}
		}
		out[q] = best
	}
	return out
}

func TestKNNMatchesDefinition(t *testing.T) {
	for _, tc := range []struct {
		n, r, dim, classes int
		s                  KNNSettings
	}{
		{200, 50, 5, 3, KNNSettings{}},
		{200, 50, 5, 3, KNNSettings{Vote: VoteCosine}},
		{9000, 300, 4, 4, KNNSettings{K: 7, Temperature: 0.1}}, // several blocks of both
		{10, 20, 3, 2, KNNSettings{K: 30}},                     // K larger than the stored rows
	} {
		t.Run(fmt.Sprintf("n=%d/r=%d/%+v", tc.n, tc.r, tc.s), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(tc.n), 3))
			all, cluster := knnClusters(rng, tc.classes, tc.dim, tc.n+tc.r, 0.6)
			x := mat.DenseCopyOf(all.Slice(0, tc.n, 0, tc.dim))
			y := mat.DenseCopyOf(all.Slice(tc.n, tc.n+tc.r, 0, tc.dim))
			labels, truth := cluster[:tc.n], cluster[tc.n:]
			want := bruteKNN(x, labels, y, tc.s)
			got := make([]int, tc.r)
			if err := SoftKNN(got, x, labels, y, tc.s); err != nil {
				t.Fatal(err)
			}
			diff := 0
			for i := range got {
				if got[i] != want[i] {
					diff++
				}
			}
			// float32 cosines may swap neighbours within 1e-6 of each
			// other; with continuous data that is rare.
			if diff > tc.r/100 {
				t.Errorf("%d of %d predictions differ from the float64 definition", diff, tc.r)
			}
			if acc := Top1(got, truth); tc.n >= 100 && acc < 0.5 {
				t.Errorf("top-1 %.2f on well separated clusters", acc)
			}
		})
	}
}

// TestKNNVotes checks a case where the two votes disagree: one very close
// neighbour of class 1 against two farther ones of class 0.
func TestKNNVotes(t *testing.T) {
	train := mat.NewDense(3, 2, []float64{
		1, 0.01, // class 1, cosine ≈ 1 with the query
		1, 0.5, // class 0, cosine 0.89
		1, -0.5, // class 0, cosine 0.89
	})
	labels := []int{1, 0, 0}
	query := mat.NewDense(1, 2, []float64{1, 0})
	got := make([]int, 1)
	for _, tc := range []struct {
		vote KNNVote
		want int
	}{
		{VoteExp, 1},    // e^(1/0.03) ≫ 2·e^(0.89/0.03)
		{VoteCosine, 0}, // 1 < 0.89 + 0.89
	} {
		if err := SoftKNN(got, train, labels, query, KNNSettings{K: 3, Vote: tc.vote}); err != nil {
			t.Fatal(err)
		}
		if got[0] != tc.want {
			t.Errorf("%v vote: class %d, want %d", tc.vote, got[0], tc.want)
		}
	}
}

// TestKNNClassifyVotes checks that one search voted both ways predicts
// what a classifier of each vote predicts alone, on the case above where
// the votes disagree and on clusters.
func TestKNNClassifyVotes(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	all, cluster := knnClusters(rng, 4, 6, 1300, 0.9)
	for _, tc := range []struct {
		train, query *mat.Dense
		labels       []int
		k            int
	}{
		{mat.NewDense(3, 2, []float64{1, 0.01, 1, 0.5, 1, -0.5}), mat.NewDense(1, 2, []float64{1, 0}), []int{1, 0, 0}, 3},
		{mat.DenseCopyOf(all.Slice(0, 1000, 0, 6)), mat.DenseCopyOf(all.Slice(1000, 1300, 0, 6)), cluster[:1000], 30},
	} {
		r, c := tc.query.Dims()
		votes := []KNNVote{VoteExp, VoteCosine}
		got := [][]int{make([]int, r), make([]int, r)}
		k := NewKNN(KNNSettings{K: tc.k}, c)
		if err := k.Add(tc.train, tc.labels); err != nil {
			t.Fatal(err)
		}
		if err := k.ClassifyVotes(got, votes, tc.query); err != nil {
			t.Fatal(err)
		}
		for v, vote := range votes {
			want := make([]int, r)
			if err := SoftKNN(want, tc.train, tc.labels, tc.query, KNNSettings{K: tc.k, Vote: vote}); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got[v], want) {
				t.Errorf("%d queries, %v vote: ClassifyVotes and Classify differ", r, vote)
			}
		}
		if r == 1 && got[0][0] == got[1][0] {
			t.Errorf("the votes agree (%d) where they must not", got[0][0])
		}
	}
}

func TestKNNEdgeCases(t *testing.T) {
	k := NewKNN(KNNSettings{K: 2}, 2)
	pred := make([]int, 2)
	q := mat.NewDense(2, 2, []float64{1, 0, 0, 0})
	if err := k.Classify(pred, q); err != nil || pred[0] != -1 || pred[1] != -1 {
		t.Errorf("empty classifier: %v, %v; want [-1 -1]", pred, err)
	}
	if err := k.Add(mat.NewDense(1, 2, []float64{1, 0}), []int{-1}); !errors.Is(err, ErrLabel) {
		t.Errorf("negative label: %v, want ErrLabel", err)
	}
	if err := k.Add(mat.NewDense(2, 2, []float64{1, 0, math.NaN(), 0}), []int{0, 1}); !errors.Is(err, ErrNotFinite) {
		t.Errorf("NaN row: %v, want ErrNotFinite", err)
	}
	if k.Len() != 0 {
		t.Fatalf("%d rows stored after failed Adds", k.Len())
	}
	if err := k.Add(mat.NewDense(3, 2, []float64{0, 1, 0, 2, 0, 0}), []int{2, 2, 0}); err != nil {
		t.Fatal(err)
	}
	// The zero query has cosine 0 with every row: the two first rows by
	// index win the tie; the zero stored row never helps class 0.
	if err := k.Classify(pred, mat.NewDense(2, 2, []float64{0, 0, 0, -1})); err != nil {
		t.Fatal(err)
	}
	if pred[0] != 2 {
		t.Errorf("zero query: class %d, want 2", pred[0])
	}
	if err := k.Classify(pred, mat.NewDense(2, 2, []float64{math.Inf(1), 0, 0, 1})); !errors.Is(err, ErrNotFinite) {
		t.Errorf("Inf query: %v, want ErrNotFinite", err)
	}
	if acc := Top1([]int{1, 2, 3, 4}, []int{1, 0, 3, 0}); acc != 0.5 {
		t.Errorf("Top1 = %v, want 0.5", acc)
	}
	for _, s := range []KNNSettings{{K: -1}, {Temperature: -1}, {Vote: 5}} {
		if s.Validate() == nil {
			t.Errorf("%+v accepted", s)
		}
	}
}

func ExampleKNN() {
	// Two classes of 2-D embeddings; the queries lie near each.
	train := mat.NewDense(4, 2, []float64{1, 0.1, 1, -0.1, -0.1, 1, 0.1, 1})
	labels := []int{0, 0, 1, 1}
	k := NewKNN(KNNSettings{K: 3}, 2) // T = 0.03, exp(cos/T) votes
	if err := k.Add(train, labels); err != nil {
		fmt.Println(err)
		return
	}
	queries := mat.NewDense(3, 2, []float64{2, 0.3, 0.2, 3, 1, 1.1})
	pred := make([]int, 3)
	if err := k.Classify(pred, queries); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(pred, Top1(pred, []int{0, 1, 1}))
	// Output:
	// [0 1 1] 1
}

func BenchmarkKNNClassify(b *testing.B) {
	// MNIST-shaped image vectors: 10×10 positions of 32 values.
	const n, r, dim = 4096, 256, 3200
	rng := rand.New(rand.NewPCG(5, 6))
	x, labels := knnClusters(rng, 10, dim, n+r, 1)
	k := NewKNN(KNNSettings{}, dim)
	k.Grow(n)
	if err := k.Add(x.Slice(0, n, 0, dim), labels[:n]); err != nil {
		b.Fatal(err)
	}
	q := x.Slice(n, n+r, 0, dim)
	pred := make([]int, r)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if err := k.Classify(pred, q); err != nil {
			b.Fatal(err)
		}
		i++
	}
	b.ReportMetric(float64(i)*2*n*r*dim/b.Elapsed().Seconds()/1e9, "GFLOP/s")
}

// A vote's name reads back as the vote; other names are errors.
func TestKNNVoteNames(t *testing.T) {
	for _, want := range []KNNVote{VoteExp, VoteCosine} {
		var got KNNVote
		if err := got.UnmarshalText([]byte(want.String())); err != nil || got != want {
			t.Errorf("%q read back as %v, %v", want.String(), got, err)
		}
	}
	var v KNNVote
	if err := v.UnmarshalText([]byte("majority")); err == nil {
		t.Error(`"majority" read as a vote`)
	}
}
