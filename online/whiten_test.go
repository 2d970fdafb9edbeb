package online

import (
	"bytes"
	"errors"
	"math"
	"math/rand/v2"
	"testing"

	"gonum.org/v1/gonum/mat"
)

// correlated returns n rows of z·A + offset with z standard normal and A a
// fixed random mixing matrix, so the rows have covariance AᵀA.
func correlated(rng *rand.Rand, n, dim int, a *mat.Dense, offset float64) *mat.Dense {
	z := mat.NewDense(n, dim, nil)
	for i := 0; i < n; i++ {
		for j := 0; j < dim; j++ {
			z.Set(i, j, rng.NormFloat64())
		}
	}
	var x mat.Dense
	x.Mul(z, a)
	for i := 0; i < n; i++ {
		for j := 0; j < dim; j++ {
			x.Set(i, j, x.At(i, j)+offset*float64(j+1))
		}
	}
	return &x
}

func randomMixing(rng *rand.Rand, dim int) *mat.Dense {
	a := mat.NewDense(dim, dim, nil)
	for i := 0; i < dim; i++ {
		for j := 0; j < dim; j++ {
			a.Set(i, j, rng.NormFloat64())
		}
		a.Set(i, i, a.At(i, i)+3)
	}
	return a
}

// directMoments computes the weighted mean and covariance Σ w_i (x_i−m)(x_i−m)ᵀ / Σ w_i.
func directMoments(rows [][]float64, w []float64) ([]float64, *mat.SymDense) {
	dim := len(rows[0])
	mean := make([]float64, dim)
	var tot float64
	for i, r := range rows {
		tot += w[i]
		for k, v := range r {
			mean[k] += w[i] * v
		}
	}
	for k := range mean {
		mean[k] /= tot
	}
	cov := mat.NewSymDense(dim, nil)
	for a := 0; a < dim; a++ {
		for b := a; b < dim; b++ {
			var s float64
			for i, r := range rows {
				s += w[i] * (r[a] - mean[a]) * (r[b] - mean[b])
			}
			cov.SetSym(a, b, s/tot)
		}
	}
	return mean, cov
}

func TestMomentsMatchDirect(t *testing.T) {
	const dim = 5
	for _, forget := range []float64{0, 0.3} {
		rng := rand.New(rand.NewPCG(7, 8))
		a := randomMixing(rng, dim)
		m := NewMoments(dim)
		var rows [][]float64
		var weights []float64
		for b := 0; b < 6; b++ {
			x := correlated(rng, 20+7*b, dim, a, 2)
			r, _ := x.Dims()
			skip := make([]bool, r)
			for i := range skip {
				skip[i] = i%5 == 0
			}
			for i := range weights {
				weights[i] *= 1 - forget
			}
			for i := 0; i < r; i++ {
				if !skip[i] {
					rows = append(rows, mat.Row(nil, i, x))
					weights = append(weights, 1)
				}
			}
			if n := m.Add(x, skip, forget); n != r-(r+4)/5 {
				t.Fatalf("Add merged %d rows, want %d", n, r-(r+4)/5)
			}
		}
		wantMean, wantCov := directMoments(rows, weights)
		var cov mat.SymDense
		m.Cov(&cov)
		if !mat.EqualApprox(&cov, wantCov, 1e-9) {
			t.Errorf("forget %v: covariance\n%v\nwant\n%v", forget, mat.Formatted(&cov), mat.Formatted(wantCov))
		}
		if got := m.Mean(nil); !mat.EqualApprox(mat.NewVecDense(dim, got), mat.NewVecDense(dim, wantMean), 1e-12) {
			t.Errorf("forget %v: mean %v, want %v", forget, got, wantMean)
		}
		var tot float64
		for _, w := range weights {
			tot += w
		}
		if math.Abs(m.Weight()-tot) > 1e-9 {
			t.Errorf("forget %v: weight %v, want %v", forget, m.Weight(), tot)
		}
	}
}

func TestWhitenMakesCovarianceIdentity(t *testing.T) {
	const dim = 8
	rng := rand.New(rand.NewPCG(9, 10))
	a := randomMixing(rng, dim)
	w := NewWhitener(dim, WhitenSettings{Lambda: 1e-12})
	var all []*mat.Dense
	for range 10 {
		x := correlated(rng, 500, dim, a, 1)
		if err := w.Observe(x, nil); err != nil {
			t.Fatal(err)
		}
		all = append(all, x)
	}
	if err := w.Refresh(); err != nil {
		t.Fatal(err)
	}
	m := NewMoments(dim)
	for _, x := range all {
		var y mat.Dense
		w.Whiten(&y, x)
		m.Add(&y, nil, 0)
	}
	var cov mat.SymDense
	m.Cov(&cov)
	id := mat.NewDiagDense(dim, nil)
	for i := 0; i < dim; i++ {
		id.SetDiag(i, 1)
	}
	if !mat.EqualApprox(&cov, id, 1e-8) {
		t.Errorf("covariance of whitened rows is not I:\n%v", mat.Formatted(&cov))
	}
	// W is symmetric bit for bit, and Unwhiten undoes Whiten.
	op := w.Operator()
	for i := 0; i < dim; i++ {
		for j := 0; j < dim; j++ {
			if op.At(i, j) != op.At(j, i) {
				t.Fatalf("W not symmetric at (%d,%d)", i, j)
			}
		}
	}
	var y, back mat.Dense
	w.Whiten(&y, all[0])
	w.Unwhiten(&back, &y)
	if !mat.EqualApprox(&back, all[0], 1e-9) {
		t.Error("Unwhiten(Whiten(x)) != x")
	}
}

func TestWhitenerLambdaShrinks(t *testing.T) {
	// With λ far above the variances, W ≈ I/√λ.
	const dim = 4
	rng := rand.New(rand.NewPCG(11, 12))
	w := NewWhitener(dim, WhitenSettings{Lambda: 1e6})
	if err := w.Observe(correlated(rng, 200, dim, randomMixing(rng, dim), 0), nil); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < dim; i++ {
		for j := 0; j < dim; j++ {
			want := 0.0
			if i == j {
				want = 1e-3
			}
			if got := w.Operator().At(i, j); math.Abs(got-want) > 1e-7 {
				t.Errorf("W[%d,%d] = %v, want about %v", i, j, got, want)
			}
		}
	}
}

func TestWhitenerSchedule(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	a := randomMixing(rng, 3)
	for _, tc := range []struct {
		s       WhitenSettings
		batches int
		want    int64 // refreshes
	}{
		{WhitenSettings{RefreshEvery: 8}, 32, 7},                   // 1 2 4 8 16 24 32
		{WhitenSettings{RefreshEvery: 8}, 3, 2},                    // 1 2
		{WhitenSettings{}, 300, 10},                                // 1 2 4 8 16 32 64 128 192 256
		{WhitenSettings{RefreshEvery: -1}, 50, 0},                  // manual only
		{WhitenSettings{RefreshEvery: 1}, 5, 5},                    // every batch
		{WhitenSettings{RefreshEvery: 3}, 10, 5},                   // 1 2 4 7 10
		{WhitenSettings{RefreshEvery: -1, FreezeAfter: 25}, 10, 1}, // the freeze
	} {
		w := NewWhitener(3, tc.s)
		for range tc.batches {
			if err := w.Observe(correlated(rng, 10, 3, a, 0), nil); err != nil {
				t.Fatal(err)
			}
		}
		if got := w.Refreshes(); got != tc.want {
			t.Errorf("%+v after %d batches: %d refreshes, want %d", tc.s, tc.batches, got, tc.want)
		}
	}
}

func TestWhitenerIdentityBeforeRefresh(t *testing.T) {
	w := NewWhitener(3, WhitenSettings{RefreshEvery: -1})
	x := mat.NewDense(2, 3, []float64{1, 2, 3, 4, 5, 6})
	if err := w.Observe(x, nil); err != nil {
		t.Fatal(err)
	}
	var y mat.Dense
	w.Whiten(&y, x)
	if !mat.Equal(&y, x) {
		t.Errorf("Whiten before any refresh changed rows: %v", mat.Formatted(&y))
	}
}

func TestWhitenerFreeze(t *testing.T) {
	rng := rand.New(rand.NewPCG(15, 16))
	a := randomMixing(rng, 3)
	w := NewWhitener(3, WhitenSettings{FreezeAfter: 250, RefreshEvery: 1000})
	for b := 1; b <= 5; b++ {
		if err := w.Observe(correlated(rng, 100, 3, a, 0), nil); err != nil {
			t.Fatal(err)
		}
		if frozen := b >= 3; w.Frozen() != frozen {
			t.Fatalf("after batch %d Frozen() = %v", b, w.Frozen())
		}
	}
	if w.Rows() != 300 || w.Batches() != 3 {
		t.Errorf("rows, batches = %d, %d, want 300, 3", w.Rows(), w.Batches())
	}
	if w.Refreshes() != 3 { // batches 1, 2 (schedule) and 3 (freeze)
		t.Errorf("%d refreshes, want 3", w.Refreshes())
	}
	// Raising FreezeAfter unfreezes.
	if err := w.SetSettings(WhitenSettings{FreezeAfter: 1000, RefreshEvery: 1000}); err != nil {
		t.Fatal(err)
	}
	if err := w.Observe(correlated(rng, 100, 3, a, 0), nil); err != nil {
		t.Fatal(err)
	}
	if w.Rows() != 400 {
		t.Errorf("rows = %d after unfreezing, want 400", w.Rows())
	}
}

func TestWhitenerSetLambdaRefreshes(t *testing.T) {
	rng := rand.New(rand.NewPCG(17, 18))
	w := NewWhitener(3, WhitenSettings{Lambda: 1})
	if err := w.Observe(correlated(rng, 100, 3, randomMixing(rng, 3), 0), nil); err != nil {
		t.Fatal(err)
	}
	before := mat.DenseCopyOf(w.Operator())
	if err := w.SetSettings(WhitenSettings{Lambda: 2}); err != nil {
		t.Fatal(err)
	}
	if mat.Equal(before, w.Operator()) {
		t.Error("changing lambda did not recompute the operator")
	}
	if err := w.SetSettings(WhitenSettings{Lambda: -1}); err == nil {
		t.Error("SetSettings accepted lambda -1")
	}
}

// A row holding NaN is left out of Σ: merged, it would make every later
// refresh fail and keep the stream's whitening at the operator it had.
// A Σ that is not finite all the same fails the refresh with ErrEigen and
// leaves the operator as it was.
func TestWhitenerRejectsNaN(t *testing.T) {
	w := NewWhitener(2, WhitenSettings{})
	x := mat.NewDense(3, 2, []float64{1, math.NaN(), 3, 4, 2, 1})
	if err := w.Observe(x, nil); err != nil {
		t.Errorf("Observe(NaN) = %v, want nil", err)
	}
	if w.Rejected() != 1 || w.Moments().Weight() != 2 || w.Rows() != 2 {
		t.Errorf("rejected %d rows, merged weight %v and %d rows; want 1, 2 and 2", w.Rejected(), w.Moments().Weight(), w.Rows())
	}
	if err := w.Check(); err != nil {
		t.Errorf("Check after a NaN row = %v", err)
	}
	op := mat.DenseCopyOf(w.Operator())
	w.mom.scatter[0] = math.NaN()
	if err := w.Refresh(); !errors.Is(err, ErrEigen) {
		t.Errorf("Refresh(NaN Σ) = %v, want ErrEigen", err)
	}
	if !mat.Equal(w.Operator(), op) {
		t.Error("a failed refresh changed the operator")
	}
}

func TestWhitenerMarshalRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(19, 20))
	a := randomMixing(rng, 4)
	s := WhitenSettings{Lambda: 0.5, RefreshEvery: 4, Forget: 0.1, FreezeAfter: 10000}
	w := NewWhitener(4, s)
	for range 5 {
		if err := w.Observe(correlated(rng, 30, 4, a, 1), nil); err != nil {
			t.Fatal(err)
		}
	}
	blob, err := w.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	r := NewWhitener(4, WhitenSettings{})
	if err := r.UnmarshalBinary(blob); err != nil {
		t.Fatal(err)
	}
	if r.Settings() != s {
		t.Errorf("settings %+v, want %+v", r.Settings(), s)
	}
	again, _ := r.MarshalBinary()
	if !bytes.Equal(blob, again) {
		t.Fatal("marshal(unmarshal(b)) != b")
	}
	// Continuing gives bit-identical operators.
	for range 7 {
		x := correlated(rng, 30, 4, a, 1)
		if err := w.Observe(x, nil); err != nil {
			t.Fatal(err)
		}
		if err := r.Observe(x, nil); err != nil {
			t.Fatal(err)
		}
	}
	b1, _ := w.MarshalBinary()
	b2, _ := r.MarshalBinary()
	if !bytes.Equal(b1, b2) {
		t.Error("a restored whitener diverged from the original")
	}
	c := w.Clone()
	b3, _ := c.MarshalBinary()
	if !bytes.Equal(b1, b3) {
		t.Error("Clone differs from the original")
	}

	for name, tc := range map[string]struct {
		blob []byte
		want error
	}{
		"version":   {append([]byte{9}, blob[1:]...), ErrVersion},
		"kind":      {append([]byte{stateVersion, kindKMeans}, blob[2:]...), ErrFormat},
		"truncated": {blob[:len(blob)-1], ErrFormat},
		"trailing":  {append(bytes.Clone(blob), 0), ErrFormat},
		"empty":     {nil, ErrVersion},
	} {
		if err := r.UnmarshalBinary(tc.blob); !errors.Is(err, tc.want) {
			t.Errorf("%s: UnmarshalBinary = %v, want %v", name, err, tc.want)
		}
	}
	if err := NewWhitener(5, WhitenSettings{}).UnmarshalBinary(blob); !errors.Is(err, ErrFormat) {
		t.Errorf("other dimension: UnmarshalBinary = %v, want ErrFormat", err)
	}
	after, _ := r.MarshalBinary()
	if !bytes.Equal(after, b2) {
		t.Error("a failed UnmarshalBinary changed the whitener")
	}
}
