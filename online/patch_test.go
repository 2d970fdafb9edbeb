package online

import (
	"errors"
	"math/rand/v2"
	"os"
	"testing"

	"gonum.org/v1/gonum/floats/scalar"
	"gonum.org/v1/gonum/mat"
)

func TestPatchGridShape(t *testing.T) {
	for _, tc := range []struct {
		g                    PatchGrid
		rows, cols, len, dim int
	}{
		{PatchGrid{Width: 28, Height: 28, Size: 6}, 23, 23, 529, 36},
		{PatchGrid{Width: 28, Height: 28, Size: 6, Stride: 2}, 12, 12, 144, 36},
		{PatchGrid{Width: 32, Height: 24, Channels: 3, Size: 5, Stride: 3}, 7, 10, 70, 75},
		{PatchGrid{Width: 6, Height: 6, Size: 6}, 1, 1, 1, 36},
		{PatchGrid{Width: 7, Height: 5, Size: 1}, 5, 7, 35, 1},
	} {
		if err := tc.g.Validate(); err != nil {
			t.Errorf("%+v: Validate: %v", tc.g, err)
		}
		if r, c, n, d := tc.g.Rows(), tc.g.Cols(), tc.g.Len(), tc.g.Dim(); r != tc.rows || c != tc.cols || n != tc.len || d != tc.dim {
			t.Errorf("%+v: rows, cols, len, dim = %d %d %d %d, want %d %d %d %d", tc.g, r, c, n, d, tc.rows, tc.cols, tc.len, tc.dim)
		}
	}
}

func TestPatchGridValidate(t *testing.T) {
	for _, g := range []PatchGrid{
		{},
		{Width: 28, Height: 28},
		{Width: 5, Height: 28, Size: 6},
		{Width: 28, Height: 5, Size: 6},
		{Width: 28, Height: 28, Size: 6, Stride: -1},
		{Width: 28, Height: 28, Size: 6, Channels: -3},
		{Width: -28, Height: 28, Size: 6},
	} {
		if err := g.Validate(); !errors.Is(err, ErrGrid) {
			t.Errorf("%+v: Validate = %v, want ErrGrid", g, err)
		}
	}
}

func TestExtractPatchesPositions(t *testing.T) {
	g := PatchGrid{Width: 9, Height: 7, Channels: 2, Size: 3, Stride: 2}
	img := make([]float64, g.Pixels())
	for i := range img {
		img[i] = float64(i) // the value is the index, so positions can be read back
	}
	var p mat.Dense
	ExtractPatches(&p, img, g)
	if r, c := p.Dims(); r != g.Len() || c != g.Dim() {
		t.Fatalf("dims %dx%d, want %dx%d", r, c, g.Len(), g.Dim())
	}
	for i := 0; i < g.Rows(); i++ {
		for j := 0; j < g.Cols(); j++ {
			for dy := 0; dy < g.Size; dy++ {
				for dx := 0; dx < g.Size; dx++ {
					for ch := 0; ch < g.Channels; ch++ {
						y, x := i*g.Stride+dy, j*g.Stride+dx
						want := float64((y*g.Width+x)*g.Channels + ch)
						got := p.At(i*g.Cols()+j, (dy*g.Size+dx)*g.Channels+ch)
						if got != want {
							t.Fatalf("patch (%d,%d) pixel (%d,%d,%d) = %v, want %v", i, j, dy, dx, ch, got, want)
						}
					}
				}
			}
		}
	}
}

func TestExtractPatchesPanics(t *testing.T) {
	g := PatchGrid{Width: 8, Height: 8, Size: 3}
	for name, f := range map[string]func(){
		"short image": func() { ExtractPatches(&mat.Dense{}, make([]float64, 63), g) },
		"wrong dst":   func() { ExtractPatches(mat.NewDense(36, 10, nil), make([]float64, 64), g) },
		"bad grid":    func() { ExtractPatches(&mat.Dense{}, make([]float64, 64), PatchGrid{Width: 8, Height: 8, Size: 9}) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: no panic", name)
				}
			}()
			f()
		}()
	}
}

// naiveContextual is the O(d²)-per-patch definition of App. C.
func naiveContextual(p *mat.Dense, g PatchGrid, d int) *mat.Dense {
	out := mat.DenseCopyOf(p)
	rows, cols := g.Rows(), g.Cols()
	for i := 0; i < rows; i++ {
		for j := 0; j < cols; j++ {
			mu := make([]float64, g.Dim())
			n := 0
			for l := 0; l < rows; l++ {
				for m := 0; m < cols; m++ {
					if abs(i-l) <= d && abs(j-m) <= d {
						n++
						for k := range mu {
							mu[k] += p.At(l*cols+m, k)
						}
					}
				}
			}
			for k := range mu {
				out.Set(i*cols+j, k, p.At(i*cols+j, k)-mu[k]/float64(n))
			}
		}
	}
	return out
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}

func TestRemoveMeanContextualMatchesNaive(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, tc := range []struct {
		g PatchGrid
		d int
	}{
		{PatchGrid{Width: 9, Height: 7, Channels: 2, Size: 3}, 1},
		{PatchGrid{Width: 9, Height: 7, Channels: 2, Size: 3}, 2},
		{PatchGrid{Width: 9, Height: 7, Channels: 2, Size: 3}, 10},
		{PatchGrid{Width: 12, Height: 10, Size: 4, Stride: 2}, 1},
		{PatchGrid{Width: 28, Height: 28, Size: 6}, 3},
	} {
		img := make([]float64, tc.g.Pixels())
		for i := range img {
			img[i] = rng.Float64()
		}
		var p mat.Dense
		ExtractPatches(&p, img, tc.g)
		want := naiveContextual(&p, tc.g, tc.d)
		RemoveMean(&p, tc.g, MeanContextual, tc.d)
		if !mat.EqualApprox(&p, want, 1e-12) {
			t.Errorf("%+v d=%d: contextual mean differs from the naive definition", tc.g, tc.d)
		}
	}
}

// separableContextual is the contextual mean summed patch by patch: the
// horizontal window sums of each patch, then the vertical sums of those.
// contextualMean sums over image rows instead and must add the same
// values in the same order.
func separableContextual(p *mat.Dense, g PatchGrid, d int) {
	raw := p.RawMatrix()
	rows, cols, dim := g.Rows(), g.Cols(), g.Dim()
	row := func(i, j int) []float64 { return raw.Data[(i*cols+j)*raw.Stride:][:dim] }
	h := make([]float64, rows*cols*dim)
	for i := 0; i < rows; i++ {
		for j := 0; j < cols; j++ {
			out := h[(i*cols+j)*dim:][:dim]
			copy(out, row(i, max(0, j-d)))
			for m := max(0, j-d) + 1; m <= min(cols-1, j+d); m++ {
				for k, v := range row(i, m) {
					out[k] += v
				}
			}
		}
	}
	acc := make([]float64, dim)
	for i := 0; i < rows; i++ {
		i1, i2 := max(0, i-d), min(rows-1, i+d)
		for j := 0; j < cols; j++ {
			j1, j2 := max(0, j-d), min(cols-1, j+d)
			inv := 1 / float64((i2-i1+1)*(j2-j1+1))
			copy(acc, h[(i1*cols+j)*dim:][:dim])
			for l := i1 + 1; l <= i2; l++ {
				for k, v := range h[(l*cols+j)*dim:][:dim] {
					acc[k] += v
				}
			}
			for k, x := range row(i, j) {
				row(i, j)[k] = x - acc[k]*inv
			}
		}
	}
}

// The contextual mean over image rows is bit for bit the one summed
// patch by patch, so models learned before and after agree exactly.
func TestRemoveMeanContextualSumsInOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, tc := range []struct {
		g PatchGrid
		d int
	}{
		{PatchGrid{Width: 28, Height: 28, Size: 6}, 1},
		{PatchGrid{Width: 28, Height: 28, Size: 6}, 2},
		{PatchGrid{Width: 28, Height: 28, Size: 6}, 3},
		{PatchGrid{Width: 28, Height: 28, Size: 6}, 30},
		{PatchGrid{Width: 9, Height: 7, Channels: 3, Size: 3}, 2},
		{PatchGrid{Width: 12, Height: 10, Size: 4, Stride: 2}, 1},
		{PatchGrid{Width: 17, Height: 13, Size: 3, Stride: 5}, 2}, // gaps between patches
		{PatchGrid{Width: 5, Height: 5, Size: 5}, 1},              // one patch
	} {
		img := make([]float64, tc.g.Pixels())
		for i := range img {
			img[i] = rng.Float64()
		}
		var got, want mat.Dense
		ExtractPatches(&got, img, tc.g)
		ExtractPatches(&want, img, tc.g)
		separableContextual(&want, tc.g, tc.d)
		pt := Patcher{Grid: tc.g, Mean: MeanContextual, Context: tc.d}
		for range 2 { // the second time on a reused workspace
			pt.Extract(&got, img)
			if !mat.Equal(&got, &want) {
				t.Fatalf("%+v d=%d: contextual mean differs from the patch-by-patch sums", tc.g, tc.d)
			}
		}
	}
}

func TestRemoveMeanContextualKeepsBlankZero(t *testing.T) {
	// A stroke in one corner: patches whose whole neighbourhood is
	// background must stay exactly zero (no rounding residue).
	g := PatchGrid{Width: 28, Height: 28, Size: 6}
	img := make([]float64, g.Pixels())
	for y := 2; y < 6; y++ {
		for x := 3; x < 5; x++ {
			img[y*28+x] = 0.7 + 0.01*float64(x*y)
		}
	}
	var p mat.Dense
	ExtractPatches(&p, img, g)
	RemoveMean(&p, g, MeanContextual, 1)
	for i := 10; i < g.Rows(); i++ {
		for j := 10; j < g.Cols(); j++ {
			for k := 0; k < g.Dim(); k++ {
				if v := p.At(i*g.Cols()+j, k); v != 0 {
					t.Fatalf("background patch (%d,%d) has value %v", i, j, v)
				}
			}
		}
	}
}

func TestRemoveMeanPatch(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	g := PatchGrid{Width: 10, Height: 8, Channels: 3, Size: 4}
	img := make([]float64, g.Pixels())
	for i := range img {
		img[i] = rng.Float64()
	}
	var p mat.Dense
	ExtractPatches(&p, img, g)
	orig := mat.DenseCopyOf(&p)
	RemoveMean(&p, g, MeanNone, 0)
	if !mat.Equal(&p, orig) {
		t.Error("MeanNone changed the patches")
	}
	RemoveMean(&p, g, MeanPatch, 0)
	for i := 0; i < g.Len(); i++ {
		if s := mat.Sum(p.RowView(i)); !scalar.EqualWithinAbs(s, 0, 1e-12) {
			t.Errorf("patch %d sums to %v after MeanPatch", i, s)
		}
		d := orig.At(i, 0) - p.At(i, 0)
		for k := 1; k < g.Dim(); k++ {
			if !scalar.EqualWithinAbs(orig.At(i, k)-p.At(i, k), d, 1e-12) {
				t.Fatalf("patch %d: MeanPatch did not subtract one scalar", i)
			}
		}
	}
}

func TestPatcherMatchesFunctions(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	g := PatchGrid{Width: 28, Height: 28, Size: 6}
	pt := Patcher{Grid: g, Mean: MeanContextual, Context: 2}
	for range 3 { // reuse of the workspace
		img := make([]float64, g.Pixels())
		for i := range img {
			img[i] = rng.Float64()
		}
		var want, got mat.Dense
		ExtractPatches(&want, img, g)
		RemoveMean(&want, g, MeanContextual, 2)
		pt.Extract(&got, img)
		if !mat.Equal(&got, &want) {
			t.Fatal("Patcher.Extract differs from ExtractPatches+RemoveMean")
		}
	}
}

func TestMeanModeStrings(t *testing.T) {
	for _, m := range []MeanMode{MeanNone, MeanPatch, MeanContextual} {
		got, err := ParseMeanMode(m.String())
		if err != nil || got != m {
			t.Errorf("ParseMeanMode(%q) = %v, %v", m.String(), got, err)
		}
	}
	if _, err := ParseMeanMode("global"); err == nil {
		t.Error("ParseMeanMode accepted \"global\"")
	}
	if s := MeanMode(7).String(); s != "MeanMode(7)" {
		t.Errorf("MeanMode(7).String() = %q", s)
	}
}

// mnistImages reads the first n of the 100 MNIST training images in
// testdata, as pixels in [0, 1].
func mnistImages(t testing.TB, n int) [][]float64 {
	t.Helper()
	b, err := os.ReadFile("testdata/mnist-train-100.u8")
	if err != nil {
		t.Fatal(err)
	}
	if n > len(b)/784 {
		t.Fatalf("testdata has %d images, want %d", len(b)/784, n)
	}
	imgs := make([][]float64, n)
	for i := range imgs {
		imgs[i] = make([]float64, 784)
		for k, v := range b[i*784 : (i+1)*784] {
			imgs[i][k] = float64(v) / 255
		}
	}
	return imgs
}

// rawMNISTPatches returns the mean-removed 6×6 patches (contextual mean,
// d = 1) of the first n test images, not whitened.
func rawMNISTPatches(t testing.TB, n int) *mat.Dense {
	t.Helper()
	g := PatchGrid{Width: 28, Height: 28, Size: 6}
	pt := Patcher{Grid: g, Mean: MeanContextual, Context: 1}
	all := mat.NewDense(n*g.Len(), g.Dim(), nil)
	for i, img := range mnistImages(t, n) {
		pt.Extract(all.Slice(i*g.Len(), (i+1)*g.Len(), 0, g.Dim()).(*mat.Dense), img)
	}
	return all
}

// mnistPatches returns the whitened, normalised 6×6 patches of the first
// n test images (contextual mean, d = 1) and their blank flags.
func mnistPatches(t testing.TB, n int) (*mat.Dense, []bool) {
	t.Helper()
	all := rawMNISTPatches(t, n)
	w := NewWhitener(all.RawMatrix().Cols, WhitenSettings{Lambda: 0.01})
	if err := w.Observe(all, nil); err != nil {
		t.Fatal(err)
	}
	var x mat.Dense
	w.Whiten(&x, all)
	blank := NormalizeRows(&x, 0.1, nil)
	return &x, blank
}
