package spectral_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"gonum.org/v1/gonum/mat"

	"github.com/smtd/smtd/spectral"
)

// TestRedundancy checks the measure on an embedding whose redundancy is
// known: y2 = cos(2πt) = 2y1² − 1 is a function of y1 = cos(πt), y3 is
// independent of both, y4 = y1·y3 is a function of (y1, y3), and y5 is
// constant.
func TestRedundancy(t *testing.T) {
	const n = 1500
	rng := rand.New(rand.NewPCG(1, 2))
	y := mat.NewDense(n, 5, nil)
	for a := 0; a < n; a++ {
		s, u := rng.Float64(), rng.Float64()
		y.SetRow(a, []float64{math.Cos(math.Pi * s), math.Cos(2 * math.Pi * s), u - 0.5, math.Cos(math.Pi*s) * (u - 0.5), 3})
	}
	got := spectral.Redundancy(y, spectral.RedundancySettings{})
	for _, tc := range []struct {
		i      int
		lo, hi float64
	}{
		{0, 1, 1},
		{1, 0, 0.1},
		{2, 0.9, 1.15},
		{3, 0, 0.3},
		{4, 0, 0},
	} {
		if got[tc.i] < tc.lo || got[tc.i] > tc.hi {
			t.Errorf("coordinate %d: redundancy error %.4f, want in [%g, %g]", tc.i+1, got[tc.i], tc.lo, tc.hi)
		}
	}
	// Scaling a coordinate changes nothing it is regressed on alone.
	y.Scale(10, y)
	if again := spectral.Redundancy(y, spectral.RedundancySettings{}); math.Abs(again[1]-got[1]) > 1e-9 {
		t.Errorf("scaled embedding: %.6f, want %.6f", again[1], got[1])
	}
}

func TestRedundancySettingsValidate(t *testing.T) {
	for _, tc := range []struct {
		s  spectral.RedundancySettings
		ok bool
	}{
		{spectral.RedundancySettings{}, true},
		{spectral.RedundancySettings{Alpha: 0.3, Neighbours: 20}, true},
		{spectral.RedundancySettings{Alpha: -1}, false},
		{spectral.RedundancySettings{Alpha: math.Inf(1)}, false},
		{spectral.RedundancySettings{Neighbours: -3}, false},
	} {
		if err := tc.s.Validate(); (err == nil) != tc.ok {
			t.Errorf("%+v: Validate() = %v, want ok = %v", tc.s, err, tc.ok)
		}
	}
}

// ExampleRedundancy measures a redundant and a non-redundant second
// coordinate: cos(2πt) is a function of cos(πt), an independent one is
// not.
func ExampleRedundancy() {
	const n = 1000
	rng := rand.New(rand.NewPCG(1, 2))
	y := mat.NewDense(n, 3, nil)
	for a := 0; a < n; a++ {
		s := rng.Float64()
		y.SetRow(a, []float64{math.Cos(math.Pi * s), math.Cos(2 * math.Pi * s), rng.Float64()})
	}
	e := spectral.Redundancy(y.Slice(0, n, 0, 2), spectral.RedundancySettings{})
	fmt.Printf("cos(2πt) on cos(πt): %.2f\n", e[1])
	e = spectral.Redundancy(y, spectral.RedundancySettings{})
	fmt.Printf("independent on both: %.1f\n", e[2])
	// Output:
	// cos(2πt) on cos(πt): 0.08
	// independent on both: 1.0
}
