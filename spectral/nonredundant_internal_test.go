package spectral

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"gonum.org/v1/gonum/floats"
	"gonum.org/v1/gonum/mat"
)

// denseOp applies a dense symmetric matrix and counts the products.
type denseOp struct {
	a     *mat.SymDense
	calls int
}

func (o *denseOp) Size() int { return o.a.SymmetricDim() }
func (o *denseOp) Apply(dst, x []float64) {
	o.calls++
	mat.NewVecDense(len(dst), dst).MulVec(o.a, mat.NewVecDense(len(x), x))
}

// randomPSD returns a random n×n positive semi-definite matrix BBᵀ/n.
func randomPSD(rng *rand.Rand, n int) *mat.SymDense {
	b := mat.NewDense(n, n, nil)
	for i := 0; i < n; i++ {
		for j := 0; j < n; j++ {
			b.Set(i, j, rng.NormFloat64())
		}
	}
	var k mat.SymDense
	k.SymOuterK(1/float64(n), b)
	return &k
}

func randomDense(rng *rand.Rand, r, c int) *mat.Dense {
	m := mat.NewDense(r, c, nil)
	for i := 0; i < r; i++ {
		for j := 0; j < c; j++ {
			m.Set(i, j, rng.NormFloat64())
		}
	}
	return m
}

// TestProjectedMatchesDense checks the matrix-free K̃ = (I − CCᵀ)K(I − CCᵀ)
// of Alg. 1, step 7 against the formed matrix: its products, and the top
// eigenvector Lanczos finds through it against a dense eigensolver.
func TestProjectedMatchesDense(t *testing.T) {
	for _, tc := range []struct{ n, c int }{{50, 0}, {50, 1}, {80, 12}, {120, 40}} {
		rng := rand.New(rand.NewPCG(uint64(tc.n), uint64(tc.c)))
		k := randomPSD(rng, tc.n)
		var c *mat.Dense
		if tc.c > 0 {
			c = orthonormalize(nil, randomDense(rng, tc.n, tc.c))
		}
		op := newProjected(&denseOp{a: k}, c)

		// The formed reference −(I − CCᵀ) K (I − CCᵀ).
		proj := mat.NewDense(tc.n, tc.n, nil)
		for i := 0; i < tc.n; i++ {
			proj.Set(i, i, 1)
		}
		if c != nil {
			var cct mat.Dense
			cct.Mul(c, c.T())
			proj.Sub(proj, &cct)
		}
		var t1, ref mat.Dense
		t1.Mul(proj, k)
		ref.Mul(&t1, proj)
		ref.Scale(-1, &ref)

		x := make([]float64, tc.n)
		for i := range x {
			x[i] = rng.NormFloat64()
		}
		got := make([]float64, tc.n)
		op.Apply(got, x)
		want := mat.NewVecDense(tc.n, nil)
		want.MulVec(&ref, mat.NewVecDense(tc.n, x))
		for i := range got {
			if math.Abs(got[i]-want.AtVec(i)) > 1e-12 {
				t.Fatalf("n=%d c=%d: product entry %d = %v, dense %v", tc.n, tc.c, i, got[i], want.AtVec(i))
			}
		}

		sym := mat.NewSymDense(tc.n, nil)
		for i := 0; i < tc.n; i++ {
			for j := i; j < tc.n; j++ {
				sym.SetSym(i, j, -(ref.At(i, j)+ref.At(j, i))/2)
			}
		}
		var eig mat.EigenSym
		if !eig.Factorize(sym, true) {
			t.Fatal("dense eigendecomposition failed")
		}
		vals := eig.Values(nil)
		var vecs mat.Dense
		eig.VectorsTo(&vecs)
		lr, err := Smallest(op, 1, LanczosSettings{Tol: 1e-11}, rand.NewPCG(1, 2))
		if err != nil {
			t.Fatal(err)
		}
		if d := math.Abs(-lr.Values[0] - vals[tc.n-1]); d > 1e-9 {
			t.Errorf("n=%d c=%d: top eigenvalue %v, dense %v", tc.n, tc.c, -lr.Values[0], vals[tc.n-1])
		}
		dot := 0.0
		for i := 0; i < tc.n; i++ {
			dot += lr.Vectors.At(i, 0) * vecs.At(i, tc.n-1)
		}
		if math.Abs(math.Abs(dot)-1) > 1e-6 {
			t.Errorf("n=%d c=%d: |<lanczos, dense>| = %v, want 1", tc.n, tc.c, math.Abs(dot))
		}
	}
}

func TestOrthonormalize(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	base := orthonormalize(nil, randomDense(rng, 60, 5))
	// Columns: 3 new directions, one copy of a base column, one
	// combination of the new ones.
	m := randomDense(rng, 60, 5)
	for i := 0; i < 60; i++ {
		m.Set(i, 3, base.At(i, 2))
		m.Set(i, 4, m.At(i, 0)-2*m.At(i, 1))
	}
	mc := mat.DenseCopyOf(m)
	q := orthonormalize(base, m)
	if _, c := q.Dims(); c != 8 {
		t.Fatalf("%d columns, want 5 + 3", c)
	}
	var g mat.Dense
	g.Mul(q.T(), q)
	for i := 0; i < 8; i++ {
		for j := 0; j < 8; j++ {
			want := 0.0
			if i == j {
				want = 1
			}
			if math.Abs(g.At(i, j)-want) > 1e-12 {
				t.Fatalf("QᵀQ[%d,%d] = %v", i, j, g.At(i, j))
			}
		}
	}
	// Every input column lies in the span.
	var h, r mat.Dense
	h.Mul(q.T(), mc)
	r.Mul(q, &h)
	r.Sub(&r, mc)
	if e := mat.Norm(&r, 2); e > 1e-10 {
		t.Errorf("residual of the input columns %v", e)
	}
}

// TestTopRightSingular checks the randomised SVD of a smoother against a
// dense SVD: the same count above the cutoff and the same subspace.
func TestTopRightSingular(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	const n = 150
	y := mat.NewDense(n, 1, nil)
	for i := 0; i < n; i++ {
		y.Set(i, 0, rng.Float64())
	}
	p := nwSmoother(y, nil, bandwidth(y, nil, 0.1), n, true)
	dense := mat.NewDense(n, n, nil)
	for a := 0; a < n; a++ {
		row := 0.0
		for q := p.ptr[a]; q < p.ptr[a+1]; q++ {
			dense.Set(a, int(p.idx[q]), p.val[q])
			row += p.val[q]
		}
		if math.Abs(row-1) > 1e-12 {
			t.Fatalf("row %d sums to %v", a, row)
		}
	}
	var svd mat.SVD
	if !svd.Factorize(dense, mat.SVDFull) {
		t.Fatal("dense SVD failed")
	}
	sv := svd.Values(nil)
	want := 0
	for _, s := range sv {
		if s >= 0.03*sv[0] {
			want++
		}
	}
	v, _ := topRightSingular(p, 0.03, n, 3, 0, rng)
	_, r := v.Dims()
	if r < want-1 || r > want+1 {
		t.Fatalf("rank %d, dense %d", r, want)
	}
	// The leading singular vectors (well above the cutoff) are in the
	// subspace found.
	var vd mat.Dense
	svd.VTo(&vd)
	for j := 0; j < want/2; j++ {
		col := mat.Col(nil, j, &vd)
		proj := make([]float64, r)
		for k := 0; k < r; k++ {
			proj[k] = floats.Dot(col, mat.Col(nil, k, v))
		}
		if nrm := floats.Norm(proj, 2); nrm < 1-1e-6 {
			t.Errorf("singular vector %d (σ = %.3g) only %.6f in the subspace", j, sv[j], nrm)
		}
	}
}

func TestSelectSmallest(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for _, n := range []int{1, 2, 10, 100, 1000} {
		for _, k := range []int{1, n / 2, n} {
			if k < 1 {
				continue
			}
			c := make([]neighbour, n)
			for i := range c {
				c[i] = neighbour{float64(rng.IntN(50)), int32(i)}
			}
			all := make([]float64, n)
			for i, e := range c {
				all[i] = e.d
			}
			slices.Sort(all)
			selectSmallest(c, k)
			got := make([]float64, k)
			for i := range got {
				got[i] = c[i].d
			}
			slices.Sort(got)
			if !slices.Equal(got, all[:k]) {
				t.Fatalf("n=%d k=%d: selected %v, want %v", n, k, got, all[:k])
			}
		}
	}
}

// TestDenseSmootherMatchesSparse checks that newSmoother, dense when rows
// keep many neighbours and sparse otherwise, multiplies like the sparse
// nwSmoother with the same neighbours.
func TestDenseSmootherMatchesSparse(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	const n, l = 200, 5
	y := mat.NewDense(n, 2, nil)
	w := make([]float64, n)
	for i := 0; i < n; i++ {
		y.Set(i, 0, rng.NormFloat64())
		y.Set(i, 1, rng.NormFloat64())
		w[i] = rng.Float64()
	}
	x := mat.NewDense(n, l, nil)
	for i := range x.RawMatrix().Data {
		x.RawMatrix().Data[i] = rng.NormFloat64()
	}
	h := bandwidth(y, w, 0.3)
	for _, k := range []int{n / 8, n / 2, n} {
		sparse := nwSmoother(y, w, h, k, true)
		p := newSmoother(y, w, h, k)
		if _, isDense := p.(denseSmoother); isDense != (4*k >= n) {
			t.Errorf("k=%d: dense %v", k, isDense)
		}
		var got, want mat.Dense
		got.ReuseAs(n, l)
		want.ReuseAs(n, l)
		p.mulDense(&got, x)
		sparse.mulDense(&want, x)
		if !mat.EqualApprox(&got, &want, 1e-12) {
			t.Errorf("k=%d: P x differs", k)
		}
		p.mulTDense(&got, x)
		sparse.mulTDense(&want, x)
		if !mat.EqualApprox(&got, &want, 1e-12) {
			t.Errorf("k=%d: Pᵀ x differs", k)
		}
	}
}
