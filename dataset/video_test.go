package dataset

import (
	"bytes"
	"image"
	"image/color"
	"image/jpeg"
	"image/png"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
)

func TestLoadGray(t *testing.T) {
	dir := t.TempDir()
	rgb := image.NewRGBA(image.Rect(0, 0, 4, 1))
	for x, c := range []color.RGBA{{255, 0, 0, 255}, {0, 255, 0, 255}, {0, 0, 255, 255}, {255, 255, 255, 255}} {
		rgb.SetRGBA(x, 0, c)
	}
	var b bytes.Buffer
	png.Encode(&b, rgb)
	os.WriteFile(filepath.Join(dir, "rgb.png"), b.Bytes(), 0o644)

	gray := image.NewGray(image.Rect(0, 0, 8, 8))
	for i := range gray.Pix {
		gray.Pix[i] = 128
	}
	b.Reset()
	jpeg.Encode(&b, gray, &jpeg.Options{Quality: 95})
	os.WriteFile(filepath.Join(dir, "gray.jpg"), b.Bytes(), 0o644)
	os.WriteFile(filepath.Join(dir, "junk.png"), []byte("not an image"), 0o644)

	g, err := LoadGray(filepath.Join(dir, "rgb.png"))
	if err != nil {
		t.Fatal(err)
	}
	if want := []uint8{76, 150, 29, 255}; !bytes.Equal(g.Pix, want) { // BT.601 luma of red, green, blue, white
		t.Errorf("rgb.png luma = %v, want %v", g.Pix, want)
	}
	g, err = LoadGray(filepath.Join(dir, "gray.jpg"))
	if err != nil {
		t.Fatal(err)
	}
	if g.Bounds() != image.Rect(0, 0, 8, 8) || g.Pix[27] < 126 || g.Pix[27] > 130 {
		t.Errorf("gray.jpg = %v %v", g.Bounds(), g.Pix)
	}
	if _, err := LoadGray(filepath.Join(dir, "junk.png")); err == nil {
		t.Error("junk.png: no error")
	}
	if _, err := LoadGray(filepath.Join(dir, "missing.png")); err == nil {
		t.Error("missing.png: no error")
	}
}

// ramp returns a size x size image whose value is ⌊x/2⌋ at column x.
func ramp(size int) *image.Gray {
	g := image.NewGray(image.Rect(0, 0, size, size))
	for y := range size {
		for x := range size {
			g.Pix[y*g.Stride+x] = uint8(x / 2)
		}
	}
	return g
}

func mean(g *image.Gray) float64 {
	var s float64
	for _, v := range g.Pix {
		s += float64(v)
	}
	return s / float64(len(g.Pix))
}

func meanAbsDiff(a, b *image.Gray) float64 {
	var s float64
	for i := range a.Pix {
		s += math.Abs(float64(a.Pix[i]) - float64(b.Pix[i]))
	}
	return s / float64(len(a.Pix))
}

func TestPanDeterministic(t *testing.T) {
	img := ramp(128)
	a := Pan(img, 16, 12, 5, rand.NewPCG(1, 2))
	b := Pan(img, 16, 12, 5, rand.NewPCG(1, 2))
	c := Pan(img, 16, 12, 5, rand.NewPCG(3, 4))
	if len(a) != 5 || a[0].Bounds() != image.Rect(0, 0, 16, 12) {
		t.Fatalf("got %d frames of %v", len(a), a[0].Bounds())
	}
	same := true
	for i := range a {
		if !bytes.Equal(a[i].Pix, b[i].Pix) {
			t.Fatalf("frame %d differs for the same seed", i)
		}
		same = same && bytes.Equal(a[i].Pix, c[i].Pix)
	}
	if same {
		t.Error("different seeds gave the same video")
	}
}

// TestPanMotion checks the motion model on a horizontal ramp, on which the
// mean of a frame measures the window centre: value = x/2, so centre x is
// about 2·mean (a rotated, scaled window inside the photo is symmetric about
// its centre).
func TestPanMotion(t *testing.T) {
	const size, w, frames = 256, 16, 200
	img := ramp(size)
	s0 := 0.25 * size / w // 4 source pixels per output pixel
	for seed := range uint64(5) {
		video := Pan(img, w, w, frames, rand.NewPCG(seed, 7))
		reach := s0*math.Exp(0.2)*0.5*math.Hypot(w, w) + 1
		var steps []float64
		for i, f := range video {
			cx := 2 * mean(f)
			if cx < reach-2 || cx > size-reach+2 {
				t.Fatalf("seed %d frame %d: centre x ≈ %.1f leaves [%.1f, %.1f]", seed, i, cx, reach, size-reach)
			}
			if i > 0 {
				steps = append(steps, math.Abs(cx-2*mean(video[i-1])))
			}
		}
		var maxStep, sum float64
		for _, s := range steps {
			maxStep = max(maxStep, s)
			sum += s
		}
		// At most 1.125·s0 source pixels per frame, plus rounding of the means.
		if maxStep > 1.125*s0+0.5 {
			t.Errorf("seed %d: largest step %.2f source pixels, want <= %.2f", seed, maxStep, 1.125*s0)
		}
		if avg := sum / float64(len(steps)); avg < 0.1*s0 {
			t.Errorf("seed %d: mean step %.2f source pixels: camera hardly moves", seed, avg)
		}
	}
}

// TestPanSmooth checks that consecutive frames of a textured photo are much
// closer than frames far apart in time.
func TestPanSmooth(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 5))
	img := image.NewGray(image.Rect(0, 0, 200, 160))
	// Smooth random texture: a sum of random plane waves.
	type wave struct{ kx, ky, ph float64 }
	waves := make([]wave, 12)
	for i := range waves {
		waves[i] = wave{rng.NormFloat64() * 0.08, rng.NormFloat64() * 0.08, rng.Float64() * 6.3}
	}
	for y := range 160 {
		for x := range 200 {
			v := 0.0
			for _, wv := range waves {
				v += math.Sin(wv.kx*float64(x) + wv.ky*float64(y) + wv.ph)
			}
			img.Pix[y*img.Stride+x] = uint8(128 + 30*v)
		}
	}
	video := Pan(img, 20, 20, 48, rand.NewPCG(9, 9))
	var near float64
	for i := 1; i < len(video); i++ {
		near += meanAbsDiff(video[i], video[i-1])
	}
	near /= float64(len(video) - 1)
	far := meanAbsDiff(video[0], video[47])
	if near*4 > far {
		t.Errorf("consecutive frames differ by %.2f, frames 47 apart by %.2f: not smooth", near, far)
	}
}

func TestPanPanics(t *testing.T) {
	for _, tt := range []struct {
		name          string
		img           *image.Gray
		w, h, nframes int
	}{
		{"zero width", ramp(8), 0, 4, 1},
		{"zero frames", ramp(8), 4, 4, 0},
		{"empty image", image.NewGray(image.Rectangle{}), 4, 4, 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Fatal("no panic")
				}
			}()
			Pan(tt.img, tt.w, tt.h, tt.nframes, rand.NewPCG(1, 1))
		})
	}
}

func BenchmarkPan(b *testing.B) {
	img := ramp(512)
	b.ReportAllocs()
	for b.Loop() {
		Pan(img, 32, 32, 48, rand.NewPCG(1, 2))
	}
}
