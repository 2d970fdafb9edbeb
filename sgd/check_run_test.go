package sgd_test

import (
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"

	"gonum.org/v1/gonum/mat"

	"github.com/smtd/smtd/online"
	"github.com/smtd/smtd/record"
	"github.com/smtd/smtd/sgd"
)

// Check holds after every step of the online SMT on 300 recorded MNIST
// digits, for the statistics and for P, from the random start on.
func TestCheckAlongMNISTSMT(t *testing.T) {
	d := mnistCodes(t)
	const k, dim, batch = 64, 8, 10
	st := sgd.NewStats(sgd.StatsSettings{K: k, Range: 3, Memory: 2000})
	m := sgd.NewSMT(sgd.SMTSettings{K: k, Dim: dim, LearningRate: 0.1, Decay: 0.01}, rand.NewPCG(3, 4))
	if err := m.Check(); err != nil {
		t.Fatalf("random P: %v", err)
	}
	learnDigits(t, d, st, m, batch, 3, func(pass, i int) {
		if err := st.Check(); err != nil {
			t.Fatalf("pass %d, image %d: %v", pass, i, err)
		}
		if err := m.Check(); err != nil {
			t.Fatalf("pass %d, image %d: %v", pass, i, err)
		}
	})
}

// Check holds along ADMM on 300 recorded MNIST digits (pixels, as the
// daemon feeds it) with the daemon's defaults but fewer atoms, from a
// random W and from a k-means warm start.
func TestCheckAlongMNISTADMM(t *testing.T) {
	imgs, _ := readDigits(t, "mnist-train-1000.smtdrec", 300)
	const n, batch = 784, 32
	x := mat.NewDense(len(imgs), n, nil)
	for i, img := range imgs {
		x.SetRow(i, img)
	}
	for _, tc := range []struct {
		prior sgd.Prior
		warm  bool
	}{{sgd.PriorSparse, false}, {sgd.PriorSparse, true}, {sgd.PriorSimplex, true}} {
		s := sgd.ADMMSettings{K: 32, Prior: tc.prior, Lambda: 0.1, Omega: 1e-4, Rho: 0.5, LearningRate: 0.01, Iterations: 15, Passes: 1, Memory: 10000}
		warm := tc.warm
		a := sgd.NewADMM(s, n, rand.NewPCG(1, 2))
		if warm {
			km := online.NewKMeans(online.KMeansSettings{K: s.K, Dim: n}, rand.NewPCG(3, 4))
			km.Learn(x, nil)
			if err := a.WarmStart(km.Atoms()); err != nil {
				t.Fatal(err)
			}
		}
		if err := a.Check(); err != nil {
			t.Fatalf("warm start %v, before learning: %v", warm, err)
		}
		for pass := range 2 {
			for i := 0; i < len(imgs); i += batch {
				if err := a.Step(x.Slice(i, min(i+batch, len(imgs)), 0, n).(*mat.Dense)); err != nil {
					t.Fatal(err)
				}
				if err := a.Check(); err != nil {
					t.Fatalf("%v, warm start %v, pass %d, image %d: %v", tc.prior, warm, pass, i, err)
				}
			}
		}
		t.Logf("%v, warm start %v: running R² %.3f after %d steps", tc.prior, warm, a.R2(), a.Steps())
	}
}

// Check holds for the word statistics along the first 2000 sentences of
// the Brown Corpus, and for the word vectors of their solve.
func TestCheckAlongBrown(t *testing.T) {
	msgs, err := record.ReadFile(filepath.Join("..", "testdata", "streams", "brown-2000.smtdrec"))
	if err != nil {
		t.Fatal(err)
	}
	v := online.NewVocabulary(4096)
	st := sgd.NewWordStats(sgd.WordSettings{Words: 4096, Memory: 20000})
	var ids []int
	for first := 0; first < len(msgs); first += 100 {
		var tokens []string
		var lengths []int
		for _, m := range msgs[first:min(first+100, len(msgs))] {
			words := strings.Fields(string(m.Data))
			tokens = append(tokens, words...)
			lengths = append(lengths, len(words))
		}
		ids = st.AssignIDs(ids, v, tokens)
		st.Add(ids, lengths)
		if err := st.Check(); err != nil {
			t.Fatalf("sentence %d: %v", first, err)
		}
	}
	for _, w := range []sgd.PairWeighting{sgd.WeightPPMI, sgd.WeightCounts} {
		var p mat.Dense
		if _, err := st.Embed(&p, sgd.WordEmbedSettings{Dim: 16, MinCount: 5, Weighting: w}, rand.NewPCG(1, 1)); err != nil {
			t.Fatal(err)
		}
		wv := sgd.NewWordVectors(&p)
		if err := wv.Check(); err != nil {
			t.Errorf("%v: %v", w, err)
		}
		used := 0
		for id := range wv.Len() {
			if wv.Used(id) {
				used++
			}
		}
		t.Logf("%v: %d words of %d tokens have a vector", w, used, st.Tokens())
	}
}
