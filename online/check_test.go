package online

import (
	"bytes"
	"errors"
	"image"
	"image/draw"
	"image/png"
	"math"
	"math/rand/v2"
	"testing"

	"gonum.org/v1/gonum/mat"

	"github.com/smtd/smtd/record"
)

// streamImages decodes the gray PNG images of a recorded stream in
// ../testdata/streams as pixels in [0, 1], with their width and height.
func streamImages(t testing.TB, name string) ([][]float64, int, int) {
	t.Helper()
	msgs, err := record.ReadFile("../testdata/streams/" + name)
	if err != nil {
		t.Fatal(err)
	}
	var imgs [][]float64
	var w, h int
	for _, m := range msgs {
		img, err := png.Decode(bytes.NewReader(m.Data))
		if err != nil {
			t.Fatal(err)
		}
		b := img.Bounds()
		g := image.NewGray(image.Rect(0, 0, b.Dx(), b.Dy()))
		draw.Draw(g, g.Bounds(), img, b.Min, draw.Src)
		w, h = b.Dx(), b.Dy()
		px := make([]float64, w*h)
		for y := range h {
			for x := range w {
				px[y*w+x] = float64(g.Pix[y*g.Stride+x]) / 255
			}
		}
		imgs = append(imgs, px)
	}
	return imgs, w, h
}

// patchBatches cuts imgs into batches of size images and returns the
// 6×6 patches of each batch with the daemon's default preprocessing
// (contextual mean, d = 3).
func patchBatches(imgs [][]float64, w, h, size int) []*mat.Dense {
	g := PatchGrid{Width: w, Height: h, Size: 6}
	pt := Patcher{Grid: g, Mean: MeanContextual, Context: 3}
	var out []*mat.Dense
	for i := 0; i < len(imgs); i += size {
		n := min(size, len(imgs)-i)
		x := mat.NewDense(n*g.Len(), g.Dim(), nil)
		for k := range n {
			pt.Extract(x.Slice(k*g.Len(), (k+1)*g.Len(), 0, g.Dim()).(*mat.Dense), imgs[i+k])
		}
		out = append(out, x)
	}
	return out
}

// Check holds, and the bound of Observe never clips, along the recorded
// MNIST and video streams in batches of 1 and 32 images (the daemon's
// default) at λ = 0.1 and 0.01.
func TestWhitenerCheckAlongStreams(t *testing.T) {
	if testing.Short() {
		t.Skip("whitens 600 000 patches")
	}
	for _, stream := range []string{"mnist-train-1000.smtdrec", "video-2x48.smtdrec"} {
		imgs, w, h := streamImages(t, stream)
		for _, size := range []int{1, 32} {
			bs := patchBatches(imgs, w, h, size)
			for _, lambda := range []float64{0.1, 0.01} {
				wh := NewWhitener(36, WhitenSettings{Lambda: lambda})
				for i, x := range bs {
					if err := wh.Observe(x, nil); err != nil {
						t.Fatal(err)
					}
					if err := wh.Check(); err != nil {
						t.Fatalf("%s, batches of %d, λ = %v: Check after batch %d: %v", stream, size, lambda, i, err)
					}
				}
				if wh.Clipped() != 0 || wh.Rejected() != 0 {
					t.Errorf("%s, batches of %d, λ = %v: %d rows clipped and %d rejected, want none",
						stream, size, lambda, wh.Clipped(), wh.Rejected())
				}
			}
		}
	}
}

// outlierImage returns 28×28 pixels of N(0,1)·scale computed in float32,
// as a raw float32 payload would carry them. At 10³⁸ a pixel overflows
// to ±Inf with probability 7·10⁻⁴; pixel 400 is made to.
func outlierImage(rng *rand.Rand, scale float32) []float64 {
	px := make([]float64, 784)
	for i := range px {
		px[i] = float64(float32(rng.NormFloat64()) * scale)
	}
	if scale == 1e38 {
		px[400] = float64(float32(4) * scale)
	}
	return px
}

// relDiff returns ‖a − b‖_F/‖b‖_F.
func relDiff(a, b mat.Matrix) float64 {
	var d mat.Dense
	d.Sub(a, b)
	return mat.Norm(&d, 2) / mat.Norm(b, 2)
}

// blankFraction whitens x with w and returns the fraction of rows whose
// norm falls below minNorm.
func blankFraction(w *Whitener, x *mat.Dense, minNorm float64) float64 {
	var y mat.Dense
	w.Whiten(&y, x)
	blank := NormalizeRows(&y, minNorm, nil)
	n := 0
	for _, b := range blank {
		if b {
			n++
		}
	}
	return float64(n) / float64(len(blank))
}

// One image of N(0,1)·10⁶ (or 10³⁸, overflowing float32) published alone
// in the middle of 1000 MNIST digits streamed in batches of 32 barely
// moves the whitening operator, and Check stays nil; without the bound
// the operator collapses, every patch becomes blank, and Check says so.
// A restore from a checkpoint taken just after the outlier continues bit
// for bit.
func TestWhitenerOutlierImage(t *testing.T) {
	if testing.Short() {
		t.Skip("whitens 530 000 patches")
	}
	imgs, w, h := streamImages(t, "mnist-train-1000.smtdrec")
	bs := patchBatches(imgs, w, h, 32)
	run := func(s WhitenSettings, outlier *mat.Dense) (*Whitener, error) {
		wh := NewWhitener(36, s)
		var first error
		for i, x := range bs {
			if i == len(bs)/2 && outlier != nil {
				if err := wh.Observe(outlier, nil); err != nil {
					t.Fatal(err)
				}
				if err := wh.Check(); err != nil && first == nil {
					first = err
				}
				if s.Clip == 0 {
					// Exact resume across the outlier.
					blob, _ := wh.MarshalBinary()
					r := NewWhitener(36, WhitenSettings{})
					if err := r.UnmarshalBinary(blob); err != nil {
						t.Fatal(err)
					}
					for _, y := range bs[i:] {
						if err := wh.Observe(y, nil); err != nil {
							t.Fatal(err)
						}
						if err := r.Observe(y, nil); err != nil {
							t.Fatal(err)
						}
					}
					b1, _ := wh.MarshalBinary()
					b2, _ := r.MarshalBinary()
					if !bytes.Equal(b1, b2) {
						t.Error("a whitener restored after the outlier diverged from the original")
					}
					return wh, first
				}
			}
			if err := wh.Observe(x, nil); err != nil {
				t.Fatal(err)
			}
			if err := wh.Check(); err != nil && first == nil {
				first = err
			}
		}
		return wh, first
	}
	clean, err := run(WhitenSettings{}, nil)
	if err != nil {
		t.Fatalf("Check on clean MNIST: %v", err)
	}
	probe := bs[0]
	cleanBlank := blankFraction(clean, probe, 0.1)
	rng := rand.New(rand.NewPCG(5, 6))
	g := PatchGrid{Width: 28, Height: 28, Size: 6}
	pt := Patcher{Grid: g, Mean: MeanContextual, Context: 3}
	for _, scale := range []float32{1e6, 1e18, 1e38} {
		outlier := mat.NewDense(g.Len(), g.Dim(), nil)
		pt.Extract(outlier, outlierImage(rng, scale))

		guarded, err := run(WhitenSettings{}, outlier)
		if err != nil {
			t.Errorf("scale %g, bounded: Check = %v, want nil", scale, err)
		}
		if guarded.Clipped() == 0 || (scale == 1e38) != (guarded.Rejected() > 0) {
			t.Errorf("scale %g: the bound clipped %d rows and rejected %d", scale, guarded.Clipped(), guarded.Rejected())
		}
		if d := relDiff(guarded.Operator(), clean.Operator()); d > 0.08 {
			t.Errorf("scale %g, bounded: operator moved by %.3g of its norm, want <= 0.08", scale, d)
		}
		if b := blankFraction(guarded, probe, 0.1); math.Abs(b-cleanBlank) > 0.01 {
			t.Errorf("scale %g, bounded: %.3f of the patches blank, %.3f without the outlier", scale, b, cleanBlank)
		}

		t.Logf("scale %g, bounded: %d rows clipped, %d rejected, operator moved by %.4f of its norm, %.4f blank (%.4f without)",
			scale, guarded.Clipped(), guarded.Rejected(), relDiff(guarded.Operator(), clean.Operator()), blankFraction(guarded, probe, 0.1), cleanBlank)

		bare, err := run(WhitenSettings{Clip: math.Inf(1)}, outlier)
		t.Logf("scale %g, unbounded: Check = %v", scale, err)
		var ce *CheckError
		if !errors.As(err, &ce) || !errors.Is(err, ErrCollapsed) && !errors.Is(err, ErrNonFinite) {
			t.Errorf("scale %g, unbounded: Check = %v, want a collapse or NaN", scale, err)
		} else if ce.Learner != "whitener" {
			t.Errorf("scale %g, unbounded: Check names %q", scale, ce.Learner)
		}
		if err := bare.Refresh(); err == nil {
			t.Logf("scale %g, unbounded: %.4f blank, tr W %.3g (%.3g without)", scale, blankFraction(bare, probe, 0.1), mat.Trace(bare.op), mat.Trace(clean.op))
			if b := blankFraction(bare, probe, 0.1); b < 0.99 {
				t.Errorf("scale %g, unbounded: only %.3f of the patches blank: the test does not show the collapse", scale, b)
			}
		}
	}
}

// A state written before the bound existed (without the extension
// block) is still read, and its Check compares the next refreshes only.
func TestWhitenerReadsStateWithoutBound(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	a := randomMixing(rng, 4)
	w := NewWhitener(4, WhitenSettings{Lambda: 0.5, Clip: 12})
	for range 3 {
		if err := w.Observe(correlated(rng, 30, 4, a, 1), nil); err != nil {
			t.Fatal(err)
		}
	}
	blob, _ := w.MarshalBinary()
	old := blob[:len(blob)-(1+5*8)]
	r := NewWhitener(4, WhitenSettings{})
	if err := r.UnmarshalBinary(old); err != nil {
		t.Fatal(err)
	}
	if r.Settings().Clip != 0 || r.refScale != 0 || r.prevTrace != 0 || r.Check() != nil {
		t.Errorf("old state read as clip %v, scale %v, trace %v, Check %v", r.Settings().Clip, r.refScale, r.prevTrace, r.Check())
	}
	if !mat.Equal(r.Operator(), w.Operator()) {
		t.Error("old state read with another operator")
	}
	bad := bytes.Clone(blob)
	bad[len(old)] = 'x'
	if err := r.UnmarshalBinary(bad); !errors.Is(err, ErrFormat) {
		t.Errorf("unknown extension tag: UnmarshalBinary = %v, want ErrFormat", err)
	}
	if err := (&WhitenSettings{Clip: 0.5}).Validate(); err == nil {
		t.Error("Validate accepted clip 0.5")
	}
}

// The bound keeps a first batch of normal rows as it is and pulls a
// far row in to c·√(λ·dim + s²) of the batch median.
func TestWhitenerBoundFirstBatch(t *testing.T) {
	const dim = 4
	rng := rand.New(rand.NewPCG(1, 2))
	x := mat.NewDense(101, dim, nil)
	for i := range 100 {
		for j := range dim {
			x.Set(i, j, rng.NormFloat64())
		}
	}
	for j := range dim {
		x.Set(100, j, 1e9)
	}
	w := NewWhitener(dim, WhitenSettings{Lambda: 1e-6, Clip: 8})
	if err := w.Observe(x, nil); err != nil {
		t.Fatal(err)
	}
	if w.Clipped() != 1 {
		t.Errorf("clipped %d rows, want 1", w.Clipped())
	}
	var cov mat.SymDense
	w.Moments().Cov(&cov)
	// The far row adds at most τ²/101 ≈ 64·4/101 ≈ 2.5 to tr Σ ≈ 4.
	if tr := mat.Trace(&cov); tr > 10 {
		t.Errorf("tr Σ = %v after one far row, want about 6", tr)
	}
}

func TestWhitenerCheck(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	a := randomMixing(rng, 5)
	healthy := NewWhitener(5, WhitenSettings{Lambda: 0.1})
	for range 4 {
		if err := healthy.Observe(correlated(rng, 50, 5, a, 1), nil); err != nil {
			t.Fatal(err)
		}
	}
	if healthy.Refreshes() < 2 {
		t.Fatal("the test wants two refreshes")
	}
	if err := healthy.Check(); err != nil {
		t.Fatalf("healthy whitener: %v", err)
	}
	for _, tc := range []struct {
		name    string
		corrupt func(w *Whitener)
		part    string
		want    error
	}{
		{"NaN in W", func(w *Whitener) { w.op.Set(1, 2, math.NaN()) }, "operator", ErrNonFinite},
		{"Inf in W⁻¹", func(w *Whitener) { w.inv.Set(0, 0, math.Inf(1)) }, "inverse operator", ErrNonFinite},
		{"NaN mean", func(w *Whitener) { w.mom.mean[3] = math.NaN() }, "moments", ErrNonFinite},
		{"Inf weight", func(w *Whitener) { w.mom.weight = math.Inf(1) }, "moments", ErrNonFinite},
		{"negative weight", func(w *Whitener) { w.mom.weight = -1 }, "moments", ErrNegative},
		{"negative variance", func(w *Whitener) { w.mom.scatter[2*5+2] = -1 }, "moments", ErrNegative},
		{"asymmetric W", func(w *Whitener) { w.op.Set(0, 1, w.op.At(0, 1)+1e-3) }, "operator", ErrAsymmetric},
		{"zero diagonal", func(w *Whitener) { w.op.Set(2, 2, 0) }, "operator", ErrCollapsed},
		{"W fell 1000-fold", func(w *Whitener) { w.op.Scale(1e-3, w.op) }, "operator", ErrCollapsed},
		{"Σ grew 10⁶-fold", func(w *Whitener) {
			for i := range w.mom.scatter {
				w.mom.scatter[i] *= 1e6
			}
		}, "moments", ErrCollapsed},
	} {
		w := healthy.Clone()
		tc.corrupt(w)
		err := w.Check()
		var ce *CheckError
		if !errors.As(err, &ce) || !errors.Is(err, tc.want) || ce.Part != tc.part || ce.Learner != "whitener" {
			t.Errorf("%s: Check = %v, want %v in the %s", tc.name, err, tc.want, tc.part)
		}
	}
	// A new λ rescales W on purpose.
	w := healthy.Clone()
	if err := w.SetSettings(WhitenSettings{Lambda: 1e4}); err != nil {
		t.Fatal(err)
	}
	if err := w.Check(); err != nil {
		t.Errorf("Check after λ 0.1 → 10⁴: %v", err)
	}
	if !healthy.Finite() {
		t.Error("Finite no longer holds on a healthy whitener")
	}
}

func TestKMeansCheck(t *testing.T) {
	x, blank := mnistPatches(t, 40)
	healthy, _ := newTestKMeans(KMeansSettings{K: 64, Dim: 36}, 3)
	const size = 2000
	for i, b := range batches(x, size) {
		r, _ := b.Dims()
		healthy.Learn(b, blank[i*size:i*size+r])
		if err := healthy.Check(); err != nil {
			t.Fatalf("Check while learning MNIST patches: %v", err)
		}
	}
	if healthy.Seeded() != 64 {
		t.Fatalf("seeded %d atoms, want 64", healthy.Seeded())
	}
	partial, _ := newTestKMeans(KMeansSettings{K: 8, Dim: 3}, 1)
	partial.Learn(mat.NewDense(3, 3, []float64{1, 0, 0, 0, 1, 0, 0, 0, 1}), nil)
	if partial.Seeded() != 3 {
		t.Fatalf("seeded %d atoms of 3 rows", partial.Seeded())
	}
	if err := partial.Check(); err != nil {
		t.Errorf("partly seeded dictionary: %v", err)
	}
	if err := NewKMeans(KMeansSettings{K: 4, Dim: 3}, nil).Check(); err != nil {
		t.Errorf("empty dictionary: %v", err)
	}
	for _, tc := range []struct {
		name    string
		km      *KMeans
		corrupt func(k *KMeans)
		part    string
		index   int
		want    error
	}{
		{"NaN atom", healthy, func(k *KMeans) { k.atoms.Set(5, 7, math.NaN()) }, "atoms", 5, ErrNonFinite},
		{"long atom", healthy, func(k *KMeans) {
			row := k.atoms.RawRowView(9)
			for j := range row {
				row[j] *= 1.01
			}
		}, "atoms", 9, ErrNotUnit},
		{"unseeded atom not zero", partial, func(k *KMeans) { k.atoms.Set(6, 0, 1) }, "atoms", 6, ErrNotUnit},
		{"collapsed atoms", healthy, func(k *KMeans) {
			for j := 1; j < k.s.K; j++ {
				k.atoms.SetRow(j, k.atoms.RawRowView(0))
			}
		}, "atoms", -1, ErrCollapsed},
		{"NaN count", healthy, func(k *KMeans) { k.counts[3] = math.NaN() }, "counts", 3, ErrNonFinite},
		{"negative count", healthy, func(k *KMeans) { k.counts[4] = -1 }, "counts", 4, ErrNegative},
		{"negative count before a NaN one", healthy, func(k *KMeans) { k.counts[2], k.counts[5] = -1, math.NaN() }, "counts", 2, ErrNegative},
		{"NaN count before a negative one", healthy, func(k *KMeans) { k.counts[2], k.counts[5] = math.NaN(), -1 }, "counts", 2, ErrNonFinite},
	} {
		k := tc.km.Clone()
		tc.corrupt(k)
		err := k.Check()
		var ce *CheckError
		if !errors.As(err, &ce) || !errors.Is(err, tc.want) || ce.Part != tc.part || ce.Index != tc.index || ce.Learner != "k-means" {
			t.Errorf("%s: Check = %v, want %v in the %s at %d", tc.name, err, tc.want, tc.part, tc.index)
		}
	}
	if !healthy.Finite() {
		t.Error("Finite no longer holds on a healthy dictionary")
	}
}

// BenchmarkCheck measures Check at the daemon's largest shapes: a
// dictionary of 4096 atoms of 6×6 patches and a 36-dimensional whitener.
func BenchmarkCheck(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 2))
	x, _, _ := sphereClusters(rng, 64, 36, 8192, 0.3)
	km, _ := newTestKMeans(KMeansSettings{K: 4096, Dim: 36}, 1)
	km.Learn(x, nil)
	if km.Seeded() != 4096 {
		b.Fatalf("seeded %d atoms", km.Seeded())
	}
	w := NewWhitener(36, WhitenSettings{})
	if err := w.Observe(x, nil); err != nil {
		b.Fatal(err)
	}
	b.Run("KMeans", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			if err := km.Check(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("Whitener", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			if err := w.Check(); err != nil {
				b.Fatal(err)
			}
		}
	})
}
