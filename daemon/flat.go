package daemon

import (
	"gonum.org/v1/gonum/mat"

	"github.com/smtd/smtd/config"
)

// flatten writes the pixels of each sample (rows, columns, channels), crop
// pixels cut from each border, as the rows of dst, the input of the
// learners that take a whole image as one vector (ksm, admm).
func flatten(dst *mat.Dense, batch []sample, shape config.ImageShape, crop int) *mat.Dense {
	w, h, ch, c := shape.Width, shape.Height, shape.Channels, crop
	cols := (w - 2*c) * ch
	resize(dst, len(batch), (h-2*c)*cols)
	raw := dst.RawMatrix()
	for i, s := range batch {
		row := raw.Data[i*raw.Stride : i*raw.Stride+raw.Cols]
		for r := c; r < h-c; r++ {
			off := (r*w + c) * ch
			copy(row[(r-c)*cols:(r-c+1)*cols], s.pixels[off:off+cols])
		}
	}
	return dst
}

// rowOutputs returns row i of y as the output of sample i.
func rowOutputs(y *mat.Dense, batch []sample) []output {
	out := make([]output, len(batch))
	raw := y.RawMatrix()
	for i, s := range batch {
		v := make([]float32, raw.Cols)
		for j, x := range raw.Data[i*raw.Stride : i*raw.Stride+raw.Cols] {
			v[j] = float32(x)
		}
		out[i] = output{vector: v, source: s}
	}
	return out
}

// rowWork is the memory a model of whole images (ksm, admm) encodes in:
// the batch's inputs x (flatten), one per row, and their outputs y.
type rowWork struct {
	x, y mat.Dense
}
