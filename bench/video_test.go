package bench

import (
	"context"
	"image"
	"image/png"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// writePhoto writes a 160×160 gray PNG of random smooth blobs and edges,
// a stand-in photo for the video benchmark.
func writePhoto(t *testing.T, path string, seed uint64) {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 1))
	const side = 160
	img := image.NewGray(image.Rect(0, 0, side, side))
	type blob struct{ x, y, r, a float64 }
	var blobs []blob
	for i := 0; i < 40; i++ {
		blobs = append(blobs, blob{side * rng.Float64(), side * rng.Float64(), 4 + 12*rng.Float64(), 2*rng.Float64() - 1})
	}
	for y := 0; y < side; y++ {
		for x := 0; x < side; x++ {
			v := 0.5
			for _, b := range blobs {
				d := math.Hypot(float64(x)-b.x, float64(y)-b.y)
				v += 0.4 * b.a / (1 + math.Exp((d-b.r)/1.5)) // a disc with a soft edge
			}
			img.Pix[y*img.Stride+x] = uint8(255 * min(max(v, 0), 1))
		}
	}
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := png.Encode(f, img); err != nil {
		t.Fatal(err)
	}
}

// TestVideoSmall runs the benchmark on synthetic photos at a small size
// and checks that the SMT straightens the held-out clips more than the
// codes themselves and that the SGD reaches the closed form.
func TestVideoSmall(t *testing.T) {
	dir := t.TempDir()
	for i, name := range []string{"a.png", "b.png", "c.png"} {
		writePhoto(t, filepath.Join(dir, name), uint64(i))
	}
	args := []string{"-images", dir, "-test", "c.png", "-size", "24", "-frames", "20", "-clips", "4", "-test-clips", "2",
		"-k", "32", "-dim", "8", "-epochs", "15", "-kmeans-epochs", "2"}
	got := figures(t, Video, args...)
	for _, prefix := range []string{"video_", "video_newclips_"} {
		codes, smt := got[prefix+"codes_ratio"], got[prefix+"smt_closed_ratio"]
		if !(smt > 0 && smt < codes) {
			t.Errorf("%s: SMT ratio %v, codes %v: want the SMT straighter", prefix, smt, codes)
		}
	}
	if r := got["video_sgd_objective_ratio"]; !(r >= 0.999 && r < 1.2) {
		t.Errorf("SGD objective %v times the closed form's", r)
	}
	if got["video_train_clips"] != 8 || got["video_test_clips"] != 2 {
		t.Errorf("%v training and %v test clips, want 8 and 2", got["video_train_clips"], got["video_test_clips"])
	}
}

func TestVideoFlags(t *testing.T) {
	dir := t.TempDir()
	writePhoto(t, filepath.Join(dir, "a.png"), 1)
	for _, args := range [][]string{
		{"-images", dir, "-test", "missing.png"},
		{"-images", dir, "-test", "a.png"}, // nothing left to train on
		{"-images", dir, "-codes", "lca"},
		{"-images", dir, "-threshold", "1"},
		{"-images", dir, "-frames", "2"},
		{"-images", dir, "-patch", "64"},
		{"-images", filepath.Join(dir, "none")},
	} {
		if err := Video(context.Background(), &strings.Builder{}, args); err == nil {
			t.Errorf("%v: no error", args)
		}
	}
}
