package finite

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestIndex puts NaN, +Inf and −Inf at every position of slices of every
// length up to 19 (the four chains and the tail), among finite values of
// every sign and size, and finds the first.
func TestIndex(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	finiteValues := []float64{0, math.Copysign(0, -1), 1, -1, math.MaxFloat64, -math.MaxFloat64, math.SmallestNonzeroFloat64, 1e300}
	for n := 0; n < 20; n++ {
		s := make([]float64, n)
		for i := range s {
			s[i] = finiteValues[rng.IntN(len(finiteValues))]
		}
		if got := Index(s); got != -1 {
			t.Fatalf("Index of %v = %d, want -1", s, got)
		}
		for _, bad := range []float64{math.NaN(), math.Inf(1), math.Inf(-1)} {
			for at := 0; at < n; at++ {
				c := append([]float64(nil), s...)
				c[at] = bad
				if at+2 < n {
					c[at+2] = math.NaN() // a later one must not be reported
				}
				if got := Index(c); got != at {
					t.Errorf("Index of %v = %d, want %d", c, got, at)
				}
				if All(c) {
					t.Errorf("All(%v) = true", c)
				}
			}
		}
	}
}

// TestNonNegative finds the first element that is negative or not
// finite, and tells which.
func TestNonNegative(t *testing.T) {
	nan := math.NaN()
	for _, tc := range []struct {
		s        []float64
		i        int
		isFinite bool
	}{
		{nil, -1, false},
		{[]float64{0, 1, math.Copysign(0, -1), 2}, -1, false},
		{[]float64{0, -1, nan}, 1, true},
		{[]float64{0, nan, -1}, 1, false},
		{[]float64{math.Inf(-1), -1}, 0, false},
		{[]float64{1, 2, 3, 4, 5, -0.5}, 5, true},
	} {
		if i, isFinite := NonNegative(tc.s); i != tc.i || isFinite != tc.isFinite {
			t.Errorf("NonNegative(%v) = %d, %v; want %d, %v", tc.s, i, isFinite, tc.i, tc.isFinite)
		}
	}
}

// BenchmarkIndex checks the 4096×32 entries of an SMT's P.
func BenchmarkIndex(b *testing.B) {
	s := make([]float64, 4096*32)
	for i := range s {
		s[i] = float64(i%97) * 0.01
	}
	b.SetBytes(int64(8 * len(s)))
	for b.Loop() {
		if Index(s) >= 0 {
			b.Fatal("finite data reported")
		}
	}
}
