package spectral_test

import (
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"gonum.org/v1/gonum/mat"
	"gonum.org/v1/gonum/stat"

	"github.com/smtd/smtd/spectral"
)

// strip returns about n points spread uniformly on the rectangle
// [0, l1]×[0, 1], one drawn in each cell of a grid of nearly square
// cells (stratified, as bench.MakeStrip: independent points perturb the
// graph enough to mix the strip's near-degenerate eigenfunctions).
func strip(n int, l1 float64, src rand.Source) *mat.Dense {
	rng := rand.New(src)
	rows := int(math.Round(math.Sqrt(float64(n) / l1)))
	cols := n / rows
	x := mat.NewDense(rows*cols, 2, nil)
	i := 0
	for r := 0; r < rows; r++ {
		for c := 0; c < cols; c++ {
			x.Set(i, 0, l1*(float64(c)+rng.Float64())/float64(cols))
			x.Set(i, 1, (float64(r)+rng.Float64())/float64(rows))
			i++
		}
	}
	return x
}

// spearman is the Pearson correlation of the ranks (no ties here).
func spearman(x, y []float64) float64 {
	rank := func(v []float64) []float64 {
		idx := make([]int, len(v))
		for i := range idx {
			idx[i] = i
		}
		slices.SortFunc(idx, func(a, b int) int {
			switch {
			case v[a] < v[b]:
				return -1
			case v[a] > v[b]:
				return 1
			}
			return 0
		})
		r := make([]float64, len(v))
		for k, i := range idx {
			r[i] = float64(k)
		}
		return r
	}
	return stat.Correlation(rank(x), rank(y), nil)
}

// TestStrip is Fig. 2 of the non-redundant paper: on a strip with
// L1 = 3.5·L2, LEM's second coordinate is a function of its first (a
// cosine of the long axis of twice the frequency), while the
// non-redundant second coordinate follows the short axis.
func TestStrip(t *testing.T) {
	const n = 1200
	x := strip(n, 3.5, rand.NewPCG(1, 2))
	ls := spectral.LEMSettings{LocalScale: -1}
	y, err := spectral.LEM(x, 4, ls, rand.NewPCG(3, 4))
	if err != nil {
		t.Fatal(err)
	}
	long, short := mat.Col(nil, 0, x), mat.Col(nil, 1, x)
	if r := spearman(mat.Col(nil, 0, y), long); math.Abs(r) < 0.99 {
		t.Errorf("LEM coordinate 1: |Spearman| with the long axis %.3f, want >= 0.99", r)
	}
	red := spectral.Redundancy(y, spectral.RedundancySettings{})
	if red[1] > 0.1 || red[2] > 0.2 {
		t.Errorf("LEM redundancy %.3f: coordinates 2 and 3 should be functions of 1", red)
	}
	if r := spearman(mat.Col(nil, 3, y), short); math.Abs(r) < 0.9 {
		t.Errorf("LEM coordinate 4: |Spearman| with the short axis %.3f, want >= 0.9", r)
	}

	z, res, err := spectral.NonRedundantLEM(x, 2, ls, spectral.NonRedundantSettings{}, rand.NewPCG(3, 4))
	if err != nil {
		t.Fatal(err)
	}
	if d := mat.Col(nil, 0, z); math.Abs(stat.Correlation(d, mat.Col(nil, 0, y), nil)) < 0.999 {
		t.Error("the first non-redundant coordinate is not LEM's first")
	}
	if e := spectral.Redundancy(z, spectral.RedundancySettings{})[1]; e < 0.8 {
		t.Errorf("non-redundant coordinate 2: regression error %.3f, want > 0.8", e)
	}
	if r := spearman(mat.Col(nil, 1, z), short); math.Abs(r) < 0.9 {
		t.Errorf("non-redundant coordinate 2: |Spearman| with the short axis %.3f, want >= 0.9", r)
	}
	if res.Ranks[0] != 0 || res.Ranks[1] < 2 || res.Values[1] > res.Values[0] {
		t.Errorf("result %+v", res)
	}
	for _, v := range z.RawMatrix().Data {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			t.Fatal("non-finite coordinate")
		}
	}
}

func TestLEMErrors(t *testing.T) {
	x := strip(50, 2, rand.NewPCG(5, 6))
	x.Set(7, 1, math.NaN())
	if _, err := spectral.LEM(x, 2, spectral.LEMSettings{}, nil); !errors.Is(err, spectral.ErrNotFinite) {
		t.Errorf("NaN: %v, want ErrNotFinite", err)
	}
	dup := mat.NewDense(50, 2, nil) // all points equal
	if _, err := spectral.LEM(dup, 2, spectral.LEMSettings{}, nil); !errors.Is(err, spectral.ErrDegenerate) {
		t.Errorf("duplicates: %v, want ErrDegenerate", err)
	}
	if _, _, err := spectral.NonRedundantLEM(dup, 2, spectral.LEMSettings{LocalScale: -1}, spectral.NonRedundantSettings{}, nil); !errors.Is(err, spectral.ErrDegenerate) {
		t.Errorf("duplicates, global σ: %v, want ErrDegenerate", err)
	}
}

func TestLEMSettingsValidate(t *testing.T) {
	for _, tc := range []struct {
		s  spectral.LEMSettings
		ok bool
	}{
		{spectral.LEMSettings{}, true},
		{spectral.LEMSettings{Neighbours: 5, Sigma: 0.5}, true},
		{spectral.LEMSettings{LocalScale: -1}, true},
		{spectral.LEMSettings{Neighbours: -1}, false},
		{spectral.LEMSettings{Sigma: -1}, false},
		{spectral.LEMSettings{Sigma: math.NaN()}, false},
		{spectral.LEMSettings{Sigma: 1, LocalScale: 3}, false},
		{spectral.LEMSettings{Lanczos: spectral.LanczosSettings{Tol: 2}}, false},
	} {
		if err := tc.s.Validate(); (err == nil) != tc.ok {
			t.Errorf("%+v: Validate() = %v, want ok = %v", tc.s, err, tc.ok)
		}
	}
	for _, tc := range []struct {
		s  spectral.NonRedundantSettings
		ok bool
	}{
		{spectral.NonRedundantSettings{}, true},
		{spectral.NonRedundantSettings{Alpha: 0.5, Neighbours: 10, Truncate: 0.1, MaxRank: 5, PowerIters: 1}, true},
		{spectral.NonRedundantSettings{Alpha: -0.1}, false},
		{spectral.NonRedundantSettings{Neighbours: -1}, false},
		{spectral.NonRedundantSettings{Truncate: 1}, false},
		{spectral.NonRedundantSettings{MaxRank: -1}, false},
		{spectral.NonRedundantSettings{PowerIters: -1}, false},
	} {
		if err := tc.s.Validate(); (err == nil) != tc.ok {
			t.Errorf("%+v: Validate() = %v, want ok = %v", tc.s, err, tc.ok)
		}
	}
}

func BenchmarkNonRedundantLEM(b *testing.B) {
	x := strip(1000, 3.5, rand.NewPCG(1, 2))
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := spectral.NonRedundantLEM(x, 3, spectral.LEMSettings{LocalScale: -1}, spectral.NonRedundantSettings{}, rand.NewPCG(3, 4)); err != nil {
			b.Fatal(err)
		}
	}
}
