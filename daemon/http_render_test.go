package daemon

import (
	"bytes"
	"errors"
	"image/png"
	"math/rand/v2"
	"testing"

	"github.com/smtd/smtd/config"
)

// Every image learner draws one sheet of its atoms, laid out by its input
// shape: k-means atoms as patches, KSM rows of W and ADMM atoms as the
// cropped image; colour images in colour; text models have no picture.
func TestModelPictures(t *testing.T) {
	kmeans := digitsPipeline("digits", "x", 16) // 6x6 patches, drawn 5x
	colour := digitsPipeline("colour", "x", 10)
	colour.Image = config.ImageShape{Width: 16, Height: 16, Channels: 3}
	colour.Patches.Size = 4 // drawn 8x
	colour.SMT.Dim = 0
	ksm := digitsPipeline("ksm", "x", 16)
	ksm.Learner, ksm.KSM.Neurons, ksm.KSM.Crop = config.LearnerKSM, 5, 2 // 24x24, drawn 1x
	admm := digitsPipeline("admm", "x", 16)
	admm.Learner, admm.ADMM.Atoms, admm.ADMM.Crop = config.LearnerADMM, 9, 4 // 20x20, drawn 1x
	for _, tc := range []struct {
		p    config.Pipeline
		w, h int // of the sheet
	}{
		{kmeans, 4*31 + 1, 4*31 + 1},
		{colour, 4*33 + 1, 3*33 + 1},
		{ksm, 3*25 + 1, 2*25 + 1},
		{admm, 3*21 + 1, 3*21 + 1},
	} {
		t.Run(tc.p.Name, func(t *testing.T) {
			cfg := testConfig(t, tc.p)
			if err := cfg.Validate(); err != nil {
				t.Fatal(err)
			}
			pics, err := modelPictures(newModel(&cfg.Pipelines[0], rand.NewPCG(1, 2)))
			if err != nil || len(pics) != 1 || pics[0].Name != "atoms" || pics[0].Title == "" {
				t.Fatalf("pictures %v, %v", pics, err)
			}
			img, err := png.Decode(bytes.NewReader(pics[0].PNG))
			if err != nil {
				t.Fatal(err)
			}
			if b := img.Bounds(); b.Dx() != tc.w || b.Dy() != tc.h {
				t.Errorf("sheet %v, want %dx%d", b, tc.w, tc.h)
			}
		})
	}
	words := wordsPipeline()
	if _, err := modelPictures(newModel(&words, rand.NewPCG(1, 2))); !errors.Is(err, ErrNoPicture) {
		t.Errorf("text model: %v, want ErrNoPicture", err)
	}
}
