package online

import (
	"errors"
	"math"
	"math/rand/v2"
	"testing"

	"gonum.org/v1/gonum/floats/scalar"
	"gonum.org/v1/gonum/mat"
)

func TestLloydDescendsToFixedPoint(t *testing.T) {
	rng := rand.New(rand.NewPCG(51, 52))
	x, _, _ := sphereClusters(rng, 30, 8, 3000, 0.4)
	atoms := mat.NewDense(12, 8, nil)
	if _, err := Lloyd(atoms, x, nil, 1, rand.NewPCG(1, 1)); err != nil {
		t.Fatal(err)
	}
	prev := Distortion(atoms, x, nil)
	converged := false
	for i := 0; i < 200 && !converged; i++ {
		before := mat.DenseCopyOf(atoms)
		if _, err := Lloyd(atoms, x, nil, 1, nil); err != nil {
			t.Fatal(err)
		}
		d := Distortion(atoms, x, nil)
		if d > prev+1e-12 {
			t.Fatalf("iteration %d: distortion rose from %v to %v", i, prev, d)
		}
		prev = d
		converged = mat.Equal(before, atoms)
	}
	if !converged {
		t.Fatal("Lloyd did not converge in 200 iterations")
	}
	for j := 0; j < 12; j++ {
		if n := mat.Norm(atoms.RowView(j), 2); math.Abs(n-1) > 1e-12 {
			t.Errorf("atom %d has norm %v", j, n)
		}
	}
	// A full run from the same start reaches the same fixed point.
	again := mat.NewDense(12, 8, nil)
	n, err := Lloyd(again, x, nil, 500, rand.NewPCG(1, 1))
	if err != nil || n >= 500 {
		t.Fatalf("Lloyd = %d, %v", n, err)
	}
	if !mat.EqualApprox(again, atoms, 1e-12) {
		t.Error("one run of many iterations differs from many runs of one")
	}
}

func TestLloydFillsEmptyClusters(t *testing.T) {
	rng := rand.New(rand.NewPCG(53, 54))
	x, _, _ := sphereClusters(rng, 5, 4, 500, 0.2)
	// Start with every atom equal: all but the first are empty.
	atoms := mat.NewDense(5, 4, nil)
	for j := 0; j < 5; j++ {
		atoms.SetRow(j, mat.Row(nil, 0, x))
	}
	if _, err := Lloyd(atoms, x, nil, 100, nil); err != nil {
		t.Fatal(err)
	}
	used := make(map[int]bool)
	cos := bruteCos(x, atoms)
	for i := 0; i < 500; i++ {
		best := 0
		for j := 1; j < 5; j++ {
			if cos.At(i, j) > cos.At(i, best) {
				best = j
			}
		}
		used[best] = true
	}
	if len(used) != 5 {
		t.Errorf("%d atoms in use after Lloyd, want 5", len(used))
	}
}

func TestLloydTooFewRows(t *testing.T) {
	x := mat.NewDense(4, 3, []float64{1, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 1})
	_, err := Lloyd(mat.NewDense(4, 3, nil), x, nil, 10, rand.NewPCG(1, 2))
	if !errors.Is(err, ErrTooFewRows) {
		t.Errorf("Lloyd with a zero row and K = rows: %v, want ErrTooFewRows", err)
	}
	if _, err := Lloyd(mat.NewDense(3, 3, nil), x, nil, 10, rand.NewPCG(1, 2)); err != nil {
		t.Errorf("Lloyd with K = usable rows: %v", err)
	}
}

func TestDistortion(t *testing.T) {
	rng := rand.New(rand.NewPCG(55, 56))
	atoms := mat.NewDense(6, 5, nil)
	for j := 0; j < 5; j++ { // atom 5 stays zero and must be ignored
		for l := 0; l < 5; l++ {
			atoms.Set(j, l, 3*rng.NormFloat64())
		}
	}
	x := mat.NewDense(40, 5, nil)
	for i := 0; i < 40; i++ {
		if i%9 == 4 {
			continue // zero row
		}
		for l := 0; l < 5; l++ {
			x.Set(i, l, rng.NormFloat64())
		}
	}
	blank := make([]bool, 40)
	blank[1], blank[2] = true, true
	unit := mat.DenseCopyOf(atoms.Slice(0, 5, 0, 5))
	normalizeAtoms(unit.RawMatrix())
	cos := bruteCos(x, unit)
	var sum float64
	n := 0
	for i := 0; i < 40; i++ {
		if blank[i] || i%9 == 4 {
			continue
		}
		sum += 1 - mat.Max(cos.RowView(i))
		n++
	}
	want := sum / float64(n)
	if got := Distortion(atoms, x, blank); !scalar.EqualWithinAbsOrRel(got, want, 1e-12, 1e-12) {
		t.Errorf("Distortion = %v, want %v", got, want)
	}
	if d := Distortion(mat.NewDense(2, 5, nil), x, nil); !math.IsNaN(d) {
		t.Errorf("Distortion with zero atoms = %v, want NaN", d)
	}
	if d := Distortion(atoms, mat.NewDense(3, 5, nil), nil); !math.IsNaN(d) {
		t.Errorf("Distortion of zero rows = %v, want NaN", d)
	}
}

func TestNormalizeRows(t *testing.T) {
	x := mat.NewDense(5, 2, []float64{
		3, 4, // norm 5
		0.03, 0.04, // norm 0.05: below minNorm
		0, 0, // zero
		math.NaN(), 1,
		-0.6, 0.8, // already unit
	})
	reuse := make([]bool, 5)
	blank := NormalizeRows(x, 0.1, reuse)
	if &blank[0] != &reuse[0] {
		t.Error("NormalizeRows did not reuse the flags slice")
	}
	want := mat.NewDense(5, 2, []float64{0.6, 0.8, 0, 0, 0, 0, 0, 0, -0.6, 0.8})
	if !mat.EqualApprox(x, want, 1e-15) {
		t.Errorf("rows\n%v\nwant\n%v", mat.Formatted(x), mat.Formatted(want))
	}
	for i, b := range []bool{false, true, true, true, false} {
		if blank[i] != b {
			t.Errorf("row %d blank = %v, want %v", i, blank[i], b)
		}
	}
	if got := NormalizeRows(mat.NewDense(2, 2, []float64{1, 0, 0, 0}), 0, nil); got[0] || !got[1] {
		t.Errorf("minNorm 0: flags %v, want [false true]", got)
	}
}
