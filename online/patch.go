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
	var work meanWork
	removeMean(patches, g, mode, d, &work)
}

func removeMean(patches *mat.Dense, g PatchGrid, mode MeanMode, d int, work *meanWork) {
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
		contextualMean(patches.RawMatrix(), g, d, work)
	default:
		panic(fmt.Sprintf("online: unknown %v", mode))
	}
}

// contextualMean subtracts from each row of p (the patches of grid g) the
// mean of the rows within range d, with a separable box filter: first the
// sums over each horizontal window, then sums of those over each vertical
// window. Prefix sums (a summed-area table) would cost O(dim) per patch
// whatever d, but their differences leave rounding residues of order 1e-17
// where a whole neighbourhood is background; direct sums keep such patches
// exactly zero, so that NormalizeRows sees them as blank instead of
// blowing noise up to unit norm.
//
// The sums are taken over image rows rather than patches. Patch rows that
// overlap hold the same pixels: with stride 1, patch (i, j)'s row dy is
// image row i+dy, shared by Size patch rows. So the horizontal window sums
// are formed once per image row (h), and the vertical sums once per run
// of image rows (v): about 5 times fewer additions than summing patch by
// patch for 6×6 patches with d = 3. Every sum adds the same values in the
// same order as the patch-by-patch filter, so the result is the same to
// the last bit.
func contextualMean(p blas64.General, g PatchGrid, d int, work *meanWork) {
	rows, cols, st := g.Rows(), g.Cols(), g.stride()
	size := g.Size
	run := size * g.channels() // one row of a patch: (dx, c)
	line := cols * run         // one image row's window sums, every j
	height := (rows-1)*st + size

	work.h = grow(work.h, height*line)
	h := work.h
	// Horizontal sums of image row y, for each grid column j: the run of
	// row y of the patches j1..j2, read from a patch whose row dy is y.
	for y := 0; y < height; y++ {
		i := min(y/st, rows-1)
		dy := y - i*st
		if dy >= size {
			continue // a gap between patches (stride > size)
		}
		seg := func(m int) []float64 {
			off := (i*cols+m)*p.Stride + dy*run
			return p.Data[off : off+run]
		}
		for j := 0; j < cols; j++ {
			out := h[y*line+j*run : y*line+(j+1)*run]
			j1, j2 := max(0, j-d), min(cols-1, j+d)
			copy(out, seg(j1))
			for m := j1 + 1; m <= j2; m++ {
				for k, v := range seg(m) {
					out[k] += v
				}
			}
		}
	}

	// Vertical sums over the image rows s, s+st, …, s+(n−1)·st: the sum
	// of n rows extends the one of n−1 with the same start in the same
	// order, so each start's sums are one chain. longest[s] is the
	// longest run any patch row needs; the chains are laid out one after
	// another in v, start[s] the offset of s's.
	work.slot = grow(work.slot, 2*height)
	longest, start := work.slot[:height], work.slot[height:]
	clear(longest)
	for i := 0; i < rows; i++ {
		i1, i2 := max(0, i-d), min(rows-1, i+d)
		for dy := 0; dy < size; dy++ {
			s := i1*st + dy
			longest[s] = max(longest[s], i2-i1+1)
		}
	}
	n := 0
	for s, l := range longest {
		start[s] = n
		n += l * line
	}
	work.v = grow(work.v, n)
	v := work.v
	for s, l := range longest {
		if l == 0 {
			continue
		}
		prev := v[start[s]:][:line]
		copy(prev, h[s*line:(s+1)*line])
		for r := 1; r < l; r++ {
			out := v[start[s]+r*line:][:line]
			for k, x := range h[(s+r*st)*line:][:line] {
				out[k] = prev[k] + x
			}
			prev = out
		}
	}
	work.inv = grow(work.inv, cols)
	inv := work.inv
	for i := 0; i < rows; i++ {
		i1, i2 := max(0, i-d), min(rows-1, i+d)
		for j := range inv {
			j1, j2 := max(0, j-d), min(cols-1, j+d)
			inv[j] = 1 / float64((i2-i1+1)*(j2-j1+1))
		}
		for dy := 0; dy < size; dy++ {
			s := i1*st + dy
			acc := v[start[s]+(i2-i1)*line:][:line]
			for j, w := range inv {
				off := (i*cols+j)*p.Stride + dy*run
				x := p.Data[off : off+run]
				for k, a := range acc[j*run : (j+1)*run] {
					x[k] -= a * w
				}
			}
		}
	}
}

// meanWork is the workspace of contextualMean.
type meanWork struct {
	h, v, inv []float64
	slot      []int
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

	work meanWork
}

// Extract writes the centred patches of img into dst, which must be
// Grid.Len()×Grid.Dim() or empty: ExtractPatches followed by RemoveMean.
func (p *Patcher) Extract(dst *mat.Dense, img []float64) {
	ExtractPatches(dst, img, p.Grid)
	removeMean(dst, p.Grid, p.Mean, p.Context, &p.work)
}
