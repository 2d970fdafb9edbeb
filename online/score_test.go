package online

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"gonum.org/v1/gonum/mat"
)

// TestCompactSharedSameBits checks that compact on several goroutines
// keeps the same rows, in the same order, scaled to the same bits as on
// one: a batch past compactShareRows with flagged rows, zero rows, rows
// with a NaN or an infinity, rows of norm exactly 1 and rows to scale.
func TestCompactSharedSameBits(t *testing.T) {
	const r, dim = compactShareRows + 3*compactChunk/2 + 7, 36
	rng := rand.New(rand.NewPCG(3, 4))
	x := mat.NewDense(r, dim, nil)
	skip := make([]bool, r)
	kept := r
	for i := range r {
		row := x.RawRowView(i)
		for j := range row {
			row[j] = rng.NormFloat64()
		}
		if c := i % 11; c >= 1 && c <= 4 {
			kept-- // flagged, zero or not finite
		}
		switch i % 11 {
		case 1:
			skip[i] = true
		case 2:
			clear(row)
		case 3:
			row[dim/2] = math.NaN()
		case 4:
			row[0] = math.Inf(-1)
		case 5:
			clear(row)
			row[dim-1] = 1
		}
	}
	var one scratch
	m1 := one.compact(x, skip, 1)
	if m1 != kept {
		t.Fatalf("one goroutine kept %d of %d rows, want %d", m1, r, kept)
	}
	for _, cores := range []int{2, 3} {
		var s scratch
		m := s.compact(x, skip, cores)
		if m != m1 || !slices.Equal(s.rows[:m], one.rows[:m1]) {
			t.Fatalf("%d goroutines kept %d rows, one kept %d (or in another order)", cores, m, m1)
		}
		for i, v := range s.x[:m*dim] {
			if math.Float64bits(v) != math.Float64bits(one.x[i]) {
				t.Fatalf("%d goroutines: compacted value %d is %v, one goroutine's %v", cores, i, v, one.x[i])
			}
		}
	}
}
