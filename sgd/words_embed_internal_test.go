package sgd

import (
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"testing"

	"gonum.org/v1/gonum/floats/scalar"
	"gonum.org/v1/gonum/mat"

	"github.com/smtd/smtd/spectral"
)

// randomWordStats returns statistics of random sentences over words
// slots, some of them never used (id −1 is a word out of the vocabulary).
func randomWordStats(seed uint64, words int) *WordStats {
	rng := rand.New(rand.NewPCG(seed, 1))
	st := NewWordStats(WordSettings{Words: words, Window: 2})
	for range 40 {
		var ids, lengths []int
		for range 10 {
			l := rng.IntN(9)
			lengths = append(lengths, l)
			for range l {
				ids = append(ids, rng.IntN(words*3/4+1)-1)
			}
		}
		st.Add(ids, lengths)
	}
	return st
}

// pencilOnly hides the Restrictor of a pencil, so that SolveSMT takes
// its matrix-free path through MulL.
type pencilOnly struct{ spectral.Pencil }

// TestWordPencilRestrict checks Q from Restrict against the scattered
// product with L, V^(−1/2) L V^(−1/2) x on the used words, and the
// solutions of SolveSMT through either.
func TestWordPencilRestrict(t *testing.T) {
	const words = 60
	for _, wt := range []PairWeighting{WeightPPMI, WeightCounts} {
		st := randomWordStats(3, words)
		pb := newWordPencil(st, 4, wt)
		v := pb.DiagV(nil)
		var used []int
		var scale []float64
		for a, x := range v {
			if x > 0 {
				used = append(used, a)
				scale = append(scale, 1/math.Sqrt(x))
			}
		}
		if len(used) < 12 || len(used) == words {
			t.Fatalf("%v: %d of %d words used, want a few left out", wt, len(used), words)
		}
		op := pb.Restrict(used, scale)
		if op.Size() != len(used) {
			t.Fatalf("%v: Size = %d, want %d", wt, op.Size(), len(used))
		}
		rng := rand.New(rand.NewPCG(5, 6))
		x := make([]float64, len(used))
		for i := range x {
			x[i] = rng.NormFloat64()
		}
		got := make([]float64, len(used))
		op.Apply(got, x)
		xf := mat.NewDense(words, 1, nil)
		for i, a := range used {
			xf.Set(a, 0, x[i]*scale[i])
		}
		var yf mat.Dense
		pb.MulL(&yf, xf)
		for i, a := range used {
			if want := yf.At(a, 0) * scale[i]; !scalar.EqualWithinAbsOrRel(got[i], want, 1e-12, 1e-12) {
				t.Errorf("%v: (Q x)_%d = %v, want %v", wt, i, got[i], want)
			}
		}

		s := spectral.Settings{Dim: 4, Drop: 1, Method: spectral.Lanczos}
		var p, pm mat.Dense
		res, err := spectral.SolveSMT(&p, pb, s, nil)
		if err != nil {
			t.Fatalf("%v: through Restrict: %v", wt, err)
		}
		resm, err := spectral.SolveSMT(&pm, pencilOnly{pb}, s, nil)
		if err != nil {
			t.Fatalf("%v: through MulL: %v", wt, err)
		}
		for i, x := range resm.Values {
			if !scalar.EqualWithinAbsOrRel(res.Values[i], x, 1e-9, 1e-9) {
				t.Errorf("%v: eigenvalue %d = %v through Restrict, %v through MulL", wt, i, res.Values[i], x)
			}
		}
		if !mat.EqualApprox(&p, &pm, 1e-6) {
			t.Errorf("%v: P differs through Restrict and through MulL", wt)
		}
	}
}

// TestNewWordVectorsDense checks that the transpose of a *mat.Dense P
// gives the vectors of any other mat.Matrix holding it.
func TestNewWordVectorsDense(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	p := mat.NewDense(3, 7, nil)
	for r := range 3 {
		for a := range 7 {
			if a != 2 && a != 5 {
				p.Set(r, a, rng.NormFloat64())
			}
		}
	}
	got := NewWordVectors(p)
	want := NewWordVectors(mat.Transpose{Matrix: mat.Transpose{Matrix: p}})
	if !mat.Equal(got.unit, want.unit) {
		t.Errorf("unit vectors\n%v\nwant\n%v", mat.Formatted(got.unit), mat.Formatted(want.unit))
	}
	for a := range 7 {
		if got.Used(a) != want.Used(a) || got.Used(a) == (a == 2 || a == 5) {
			t.Errorf("Used(%d) = %v, want %v", a, got.Used(a), a != 2 && a != 5)
		}
	}
}

// TestWordEmbedLanczosSubspace checks that the Lanczos solve of Embed
// (its default restarts, DefaultWordKeep) finds the same invariant
// subspace as a dense reference solve of the word pencil: the largest
// principal angle between the rows of P·V^(1/2) on the used words, which
// are orthonormal (P V Pᵀ = I), is within what the residual allows.
func TestWordEmbedLanczosSubspace(t *testing.T) {
	const dim, drop = 8, 1
	st := randomWordStats(11, 400)
	pb := newWordPencil(st, 3, WeightPPMI)
	v := pb.DiagV(nil)
	var used []int
	for a, x := range v {
		if x > 0 {
			used = append(used, a)
		}
	}
	if len(used) < 100 {
		t.Fatalf("%d words used, want a larger problem", len(used))
	}
	s := WordEmbedSettings{Dim: dim, Drop: drop}.withDefaults()
	s.Lanczos.Tol = 1e-10
	var pl, pd mat.Dense
	rl, err := spectral.SolveSMT(&pl, pb, spectral.Settings{Dim: dim, Drop: drop + 1, Method: spectral.Lanczos, Lanczos: s.Lanczos}, rand.NewPCG(1, 2))
	if err != nil {
		t.Fatal(err)
	}
	rd, err := spectral.SolveSMT(&pd, pb, spectral.Settings{Dim: dim, Drop: drop + 1, Method: spectral.Dense}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i, x := range rd.Values {
		if !scalar.EqualWithinAbs(rl.Values[i], x, 1e-9) {
			t.Errorf("eigenvalue %d = %.12g, dense %.12g", i, rl.Values[i], x)
		}
	}
	// Rows of P·V^(1/2) on the used words, as the columns of u.
	rows := func(p *mat.Dense) *mat.Dense {
		u := mat.NewDense(len(used), dim, nil)
		for i, a := range used {
			for r := range dim {
				u.Set(i, r, p.At(r, a)*math.Sqrt(v[a]))
			}
		}
		return u
	}
	var c mat.Dense
	c.Mul(rows(&pl).T(), rows(&pd))
	var svd mat.SVD
	if !svd.Factorize(&c, mat.SVDNone) {
		t.Fatal("svd failed")
	}
	sv := svd.Values(nil)
	cmin := min(sv[len(sv)-1], 1)
	sine := math.Sqrt(1 - cmin*cmin)
	// The next eigenvalue after the subspace, for the Davis–Kahan bound.
	more, err := spectral.SolveSMT(new(mat.Dense), pb, spectral.Settings{Dim: dim + 1, Drop: drop + 1, Method: spectral.Dense}, nil)
	if err != nil {
		t.Fatal(err)
	}
	gap := more.Values[dim] - rd.Values[dim-1]
	// Davis–Kahan: sin θ ≤ ‖R‖_F/gap, each of the dim+drop+1 residuals
	// below Tol·‖Q‖ (up to the estimate), ‖Q‖ ≤ 2 (normalised Laplacian).
	if bound := 10 * s.Lanczos.Tol * 2 * math.Sqrt(dim+drop+1) / gap; sine > bound {
		t.Errorf("sin of the largest principal angle %.3g > %.3g (gap %.3g, %d restarts)", sine, bound, gap, rl.Restarts)
	}
	t.Logf("%d words, %d products, %d restarts, sin θ_max %.2g, gap %.3g", len(used), rl.Applies, rl.Restarts, sine, gap)
}

// randomWordOperator returns an operator of n words with about perRow
// stored entries a row on average, columns ascending above the diagonal.
func randomWordOperator(rng *rand.Rand, n, perRow int) *wordOperator {
	op := &wordOperator{diag: make([]float64, n), ptr: make([]int, n+1)}
	for i := range n {
		op.diag[i] = rng.Float64()
		seen := map[int32]bool{}
		var cols []int32
		for range min(2*perRow*(n-1-i)/n, n-1-i) {
			j := int32(i + 1 + rng.IntN(n-1-i))
			if !seen[j] {
				seen[j] = true
				cols = append(cols, j)
			}
		}
		slices.Sort(cols)
		for _, j := range cols {
			op.col = append(op.col, j)
			op.val = append(op.val, -rng.Float64())
		}
		op.ptr[i+1] = len(op.col)
	}
	op.split()
	return op
}

// TestWordOperatorApply checks the split product against the symmetric
// matrix's dense product, and that it gives the same bits on one core as
// on several.
func TestWordOperatorApply(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{1, 2, 3, 5, 40, 301} {
		op := randomWordOperator(rng, n, 7)
		x := make([]float64, n)
		for i := range x {
			x[i] = rng.NormFloat64()
		}
		want := make([]float64, n)
		for i := range n {
			want[i] += op.diag[i] * x[i]
			for k := op.ptr[i]; k < op.ptr[i+1]; k++ {
				j, v := int(op.col[k]), op.val[k]
				want[i] += v * x[j]
				want[j] += v * x[i]
			}
		}
		var got [2][]float64
		for c, procs := range []int{1, 2} {
			was := runtime.GOMAXPROCS(procs)
			got[c] = make([]float64, n)
			for i := range got[c] {
				got[c][i] = math.NaN() // overwritten, not read
			}
			op.Apply(got[c], x)
			runtime.GOMAXPROCS(was)
		}
		for i := range n {
			if math.Abs(got[0][i]-want[i]) > 1e-12*(1+math.Abs(want[i])) {
				t.Fatalf("n = %d: (Qx)_%d = %v, want %v", n, i, got[0][i], want[i])
			}
			if math.Float64bits(got[0][i]) != math.Float64bits(got[1][i]) {
				t.Fatalf("n = %d: (Qx)_%d = %v on one core, %v on two", n, i, got[0][i], got[1][i])
			}
		}
	}
}

// BenchmarkWordOperatorApply measures the product with Q on an operator
// of the shape of the Brown corpus's (8,471 words, 83 stored entries a
// row on average, columns ascending above the diagonal).
func BenchmarkWordOperatorApply(b *testing.B) {
	rng := rand.New(rand.NewPCG(3, 4))
	op := randomWordOperator(rng, 8471, 83)
	n := op.Size()
	x, dst := make([]float64, n), make([]float64, n)
	for i := range x {
		x[i] = rng.NormFloat64()
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		op.Apply(dst, x)
	}
}
