package daemon

import (
	"bytes"
	"errors"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"math"

	"gonum.org/v1/gonum/mat"

	"github.com/smtd/smtd/config"
)

// Picture is one image of what a model has learned, PNG-encoded.
type Picture struct {
	// Name is a short file-name-safe key: "atoms" for the dictionary
	// atoms of k-means and ADMM and the receptive fields of KSM.
	Name string
	// Title says what the picture shows, for captions.
	Title string
	PNG   []byte
}

// ErrNoPicture is returned for models that have nothing to draw: text
// models, whose parameters are word vectors.
var ErrNoPicture = errors.New("smtd: this model has no pictures")

// CheckpointPictures restores the model of a checkpoint, exactly as
// Describe does, and draws what it has learned: the same pictures the
// live page shows for a running pipeline.
func CheckpointPictures(c *Checkpoint) ([]Picture, error) {
	m, err := checkpointModel(c)
	if err != nil {
		return nil, err
	}
	return modelPictures(m)
}

// modelPictures draws the learned parameters of m, which must not change
// while it runs (a snapshot, or a model nobody else holds).
func modelPictures(m model) ([]Picture, error) {
	var (
		rows  *mat.Dense
		shape config.ImageShape
		title string
	)
	switch m := m.(type) {
	case *imageModel:
		// The atoms live in whitened space; multiplying by W⁻¹ =
		// (λI+Σ)^(1/2) takes them back to pixel space (smt-minimalistic
		// App. C), where they look like the edges and blobs of the data.
		g := m.patcher.Grid
		rows = new(mat.Dense)
		m.white.Unwhiten(rows, m.km.Atoms())
		shape = config.ImageShape{Width: g.Size, Height: g.Size, Channels: max(g.Channels, 1)}
		title = fmt.Sprintf("%d k-means atoms, %dx%d patches, unwhitened", m.km.Settings().K, g.Size, g.Size)
	case *ksmModel:
		rows = m.net.Weights()
		shape = cropped(m.shape, m.crop)
		title = fmt.Sprintf("%d KSM receptive fields (rows of W)", m.net.Neurons())
	case *admmModel:
		rows = m.admm.Dictionary()
		shape = cropped(m.shape, m.crop)
		title = fmt.Sprintf("%d ADMM dictionary atoms", m.admm.Settings().K)
	default:
		return nil, ErrNoPicture
	}
	var buf bytes.Buffer
	if err := png.Encode(&buf, atomSheet(rows, shape)); err != nil {
		return nil, err
	}
	return []Picture{{Name: "atoms", Title: title, PNG: buf.Bytes()}}, nil
}

// cropped is the shape of an image with crop pixels cut from each border,
// as flatten cuts them.
func cropped(s config.ImageShape, crop int) config.ImageShape {
	return config.ImageShape{Width: s.Width - 2*crop, Height: s.Height - 2*crop, Channels: max(s.Channels, 1)}
}

// atomSheet lays the rows of a out as tiles of the given shape on a
// near-square grid, one pixel of grey between tiles. Each row is shown
// stretched from its own minimum (black) to its maximum (white), since the
// scale of atoms is arbitrary; a constant row is mid-grey. Three channels
// are drawn in colour, any other count by its first channel.
func atomSheet(a *mat.Dense, shape config.ImageShape) image.Image {
	n, dim := a.Dims()
	w, h, ch := shape.Width, shape.Height, shape.Channels
	if w*h*ch != dim {
		panic(mat.ErrShape)
	}
	cols := int(math.Ceil(math.Sqrt(float64(n))))
	gridRows := (n + cols - 1) / max(cols, 1)
	scale := max(1, 32/max(w, h)) // small patches get big enough to see
	tw, th := w*scale, h*scale
	img := image.NewRGBA(image.Rect(0, 0, cols*(tw+1)+1, gridRows*(th+1)+1))
	for i := range img.Pix {
		img.Pix[i] = 0x80
	}
	for k := range n {
		row := a.RawRowView(k)
		lo, hi := math.Inf(1), math.Inf(-1)
		for _, v := range row {
			lo, hi = min(lo, v), max(hi, v)
		}
		level := func(v float64) uint8 {
			if !(hi > lo) {
				return 0x80
			}
			return uint8(math.Round(255 * (v - lo) / (hi - lo)))
		}
		x0, y0 := 1+(k%cols)*(tw+1), 1+(k/cols)*(th+1)
		for y := range th {
			for x := range tw {
				p := row[((y/scale)*w+x/scale)*ch:]
				c := color.RGBA{A: 0xff}
				c.R = level(p[0])
				c.G, c.B = c.R, c.R
				if ch == 3 {
					c.G, c.B = level(p[1]), level(p[2])
				}
				img.SetRGBA(x0+x, y0+y, c)
			}
		}
	}
	return img
}
