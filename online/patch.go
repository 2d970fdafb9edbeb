package online

import (
	"errors"
	"fmt"

	"gonum.org/v1/gonum/blas/blas64"
	"gonum.org/v1/gonum/mat"
)

// ErrGrid is wrapped by the errors of PatchGrid.Validate.
var ErrGrid = errors.New("online: bad patch grid")

// PatchGrid describes the square patches of one image: every Size×Size
// window whose top-left corner lies on a grid of step Stride. The image is
// Height×Width pixels of Channels interleaved values, row-major, so pixel
// (y, x) channel c is at index (y·Width + x)·Channels + c.
//
// A patch is flattened in the same order (dy, dx, c), which makes each of
// its Size rows one contiguous run of the image. Patch positions are
// numbered row-major on the Rows()×Cols() grid: the patch at grid position
// (i, j) has its top-left pixel at (i·Stride, j·Stride) and is row
// i·Cols()+j of the patch matrix.
type PatchGrid struct {
	// Width and Height of the image in pixels. Required.
	Width, Height int
	// Channels per pixel. Zero means 1.
	Channels int
	// Size is the side T of the T×T patches. Required.
	Size int
	// Stride is the step between patch positions in pixels. Zero means 1.
	Stride int
}

func (g PatchGrid) channels() int {
	if g.Channels == 0 {
		return 1
	}
	return g.Channels
}

func (g PatchGrid) stride() int {
	if g.Stride == 0 {
		return 1
	}
	return g.Stride
}

// Validate reports whether g describes at least one patch.
func (g PatchGrid) Validate() error {
	switch {
	case g.Width < 1 || g.Height < 1:
		return fmt.Errorf("%w: image %dx%d", ErrGrid, g.Width, g.Height)
	case g.Channels < 0:
		return fmt.Errorf("%w: %d channels", ErrGrid, g.Channels)
	case g.Stride < 0:
		return fmt.Errorf("%w: stride %d", ErrGrid, g.Stride)
	case g.Size < 1:
		return fmt.Errorf("%w: patch size %d", ErrGrid, g.Size)
	case g.Size > g.Width || g.Size > g.Height:
		return fmt.Errorf("%w: %dx%d patch larger than %dx%d image", ErrGrid, g.Size, g.Size, g.Width, g.Height)
	}
	return nil
}

// Rows returns the number of patch positions vertically,
// (Height−Size)/Stride + 1.
func (g PatchGrid) Rows() int { return (g.Height-g.Size)/g.stride() + 1 }

// Cols returns the number of patch positions horizontally,
// (Width−Size)/Stride + 1.
func (g PatchGrid) Cols() int { return (g.Width-g.Size)/g.stride() + 1 }

// Len returns the number of patches of one image, Rows()·Cols().
func (g PatchGrid) Len() int { return g.Rows() * g.Cols() }

// Dim returns the length of a flattened patch, Size·Size·Channels.
func (g PatchGrid) Dim() int { return g.Size * g.Size * g.channels() }

// Pixels returns the number of values of one image,
// Width·Height·Channels.
func (g PatchGrid) Pixels() int { return g.Width * g.Height * g.channels() }

// reuseAs sizes an empty dst to r×c and panics with mat.ErrShape if a
// non-empty dst has another shape.
func reuseAs(dst *mat.Dense, r, c int) {
	if dst.IsEmpty() {
		dst.ReuseAs(r, c)
		return
	}
	if dr, dc := dst.Dims(); dr != r || dc != c {
		panic(mat.ErrShape)
	}
}

// ExtractPatches writes every patch of img into the rows of dst, which must
// be g.Len()×g.Dim() or empty (then it is sized). It panics with
// mat.ErrShape if len(img) != g.Pixels() or dst has another shape, and if g
// is invalid.
func ExtractPatches(dst *mat.Dense, img []float64, g PatchGrid) {
	if err := g.Validate(); err != nil {
		panic(err)
	}
	if len(img) != g.Pixels() {
		panic(mat.ErrShape)
	}
	reuseAs(dst, g.Len(), g.Dim())
	raw := dst.RawMatrix()
	c, s, st := g.channels(), g.Size, g.stride()
	run := s * c // one patch row is contiguous in the image
	rows, cols := g.Rows(), g.Cols()
	for i := 0; i < rows; i++ {
		for j := 0; j < cols; j++ {
			p := raw.Data[(i*cols+j)*raw.Stride:]
			for dy := 0; dy < s; dy++ {
				src := ((i*st+dy)*g.Width + j*st) * c
				copy(p[dy*run:(dy+1)*run], img[src:src+run])
			}
		}
	}
}

// MeanMode selects how RemoveMean centres patches.
type MeanMode int

const (
	// MeanNone leaves patches unchanged.
	MeanNone MeanMode = iota
	// MeanPatch subtracts from each patch the scalar mean of its own
	// values (over all pixels and channels).
	MeanPatch
	// MeanContextual subtracts from each patch the vector mean of the
	// patches within grid range d of it, itself included
	// (smt-minimalistic, App. C):
	//
	//	x̄_ij = x_ij − μ_ij,
	//	μ_ij = (1/|N_ij|) Σ_{lm∈N_ij} x_lm,
	//	N_ij = {lm : |i−l| ≤ d, |j−m| ≤ d, lm on the grid}.
	//
	// Near the border of the image N_ij is clipped to the grid, so |N_ij|
	// varies. d is counted in grid positions (pixels when Stride is 1).
	MeanContextual
)

var meanModeNames = [...]string{MeanNone: "none", MeanPatch: "patch", MeanContextual: "contextual"}

// String returns "none", "patch" or "contextual".
func (m MeanMode) String() string {
	if m >= 0 && int(m) < len(meanModeNames) {
		return meanModeNames[m]
	}
	return fmt.Sprintf("MeanMode(%d)", int(m))
}

// ParseMeanMode returns the MeanMode named s ("none", "patch" or
// "contextual").
func ParseMeanMode(s string) (MeanMode, error) {
	for m, name := range meanModeNames {
		if s == name {
			return MeanMode(m), nil
		}
	}
	return 0, fmt.Errorf("online: unknown mean mode %q: want none, patch or contextual", s)
}

// RemoveMean centres the patches of one image in place, as mode says.
// patches is g.Len()×g.Dim(), one patch per row as ExtractPatches writes
// them; d is the range of MeanContextual and is ignored by the other modes.
// It allocates a workspace for MeanContextual; a Patcher reuses one.
//
// It panics with mat.ErrShape if patches is not g.Len()×g.Dim(), and if
// mode is unknown or d < 1 with MeanContextual (with d = 0 every patch
// would be its own mean and become zero).
func RemoveMean(patches *mat.Dense, g PatchGrid, mode MeanMode, d int) {
	var work []float64
	removeMean(patches, g, mode, d, &work)
}

func removeMean(patches *mat.Dense, g PatchGrid, mode MeanMode, d int, work *[]float64) {
	if r, c := patches.Dims(); r != g.Len() || c != g.Dim() {
		panic(mat.ErrShape)
	}
	switch mode {
	case MeanNone:
	case MeanPatch:
		raw := patches.RawMatrix()
		for i := 0; i < raw.Rows; i++ {
			row := raw.Data[i*raw.Stride : i*raw.Stride+raw.Cols]
			var sum float64
			for _, v := range row {
				sum += v
			}
			mean := sum / float64(len(row))
			for k := range row {
				row[k] -= mean
			}
		}
	case MeanContextual:
		if d < 1 {
			panic(fmt.Sprintf("online: contextual mean range %d < 1", d))
		}
		contextualMean(patches.RawMatrix(), g.Rows(), g.Cols(), d, work)
	default:
		panic(fmt.Sprintf("online: unknown %v", mode))
	}
}

// contextualMean subtracts from each row of p (the patches of a rows×cols
// grid) the mean of the rows within range d, with a separable box filter:
// first the sums over each horizontal window, then sums of those over each
// vertical window, O(d·dim) per patch. Prefix sums (a summed-area table)
// would cost O(dim) per patch whatever d, but their differences leave
// rounding residues of order 1e-17 where a whole neighbourhood is
// background; direct sums keep such patches exactly zero, so that
// NormalizeRows sees them as blank instead of blowing noise up to unit
// norm.
func contextualMean(p blas64.General, rows, cols, d int, work *[]float64) {
	dim := p.Cols
	n := rows*cols*dim + dim
	if cap(*work) < n {
		*work = make([]float64, n)
	}
	h := (*work)[:rows*cols*dim] // horizontal window sums
	acc := (*work)[rows*cols*dim : n]
	row := func(i, j int) []float64 {
		return p.Data[(i*cols+j)*p.Stride : (i*cols+j)*p.Stride+dim]
	}
	for i := 0; i < rows; i++ {
		for j := 0; j < cols; j++ {
			out := h[(i*cols+j)*dim : (i*cols+j+1)*dim]
			copy(out, row(i, max(0, j-d)))
			for m := max(0, j-d) + 1; m <= min(cols-1, j+d); m++ {
				for k, v := range row(i, m) {
					out[k] += v
				}
			}
		}
	}
	for i := 0; i < rows; i++ {
		i1, i2 := max(0, i-d), min(rows-1, i+d)
		for j := 0; j < cols; j++ {
			j1, j2 := max(0, j-d), min(cols-1, j+d)
			inv := 1 / float64((i2-i1+1)*(j2-j1+1))
			copy(acc, h[(i1*cols+j)*dim:(i1*cols+j+1)*dim])
			for l := i1 + 1; l <= i2; l++ {
				for k, v := range h[(l*cols+j)*dim : (l*cols+j+1)*dim] {
					acc[k] += v
				}
			}
			x := row(i, j)
			for k := range x {
				x[k] -= acc[k] * inv
			}
		}
	}
}

// Patcher extracts and centres the patches of images of one shape,
// reusing its workspace between calls. The zero value is not usable; set
// Grid (and Mean and Context) first. A Patcher must not be used by two
// goroutines at once.
type Patcher struct {
	// Grid is the shape of the images and patches.
	Grid PatchGrid
	// Mean is the mean removal applied after extraction.
	Mean MeanMode
	// Context is the range d of MeanContextual.
	Context int

	work []float64
}

// Extract writes the centred patches of img into dst, which must be
// Grid.Len()×Grid.Dim() or empty: ExtractPatches followed by RemoveMean.
func (p *Patcher) Extract(dst *mat.Dense, img []float64) {
	ExtractPatches(dst, img, p.Grid)
	removeMean(dst, p.Grid, p.Mean, p.Context, &p.work)
}
