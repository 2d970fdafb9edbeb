package sgd

import (
	"fmt"
	"math"

	"github.com/smtd/smtd/online"
	"gonum.org/v1/gonum/mat"
)

// PoolSettings configures the spatial average pooling of patch
// embeddings into an image vector (smt-minimalistic, section 3 and
// Figure 3). A zero field means its documented default.
type PoolSettings struct {
	// Kernel is the side ks of the square pooling window, in grid
	// positions. Zero means 4.
	Kernel int
	// Stride is the step between pooling windows. Zero means 2.
	Stride int
}

func (p PoolSettings) kernel() int { return orDefault(p.Kernel, 4) }

func (p PoolSettings) stride() int { return orDefault(p.Stride, 2) }

// Validate reports whether the settings are usable.
func (p PoolSettings) Validate() error {
	if p.Kernel < 0 || p.Stride < 0 {
		return fmt.Errorf("sgd: pooling kernel %d, stride %d: must be >= 1 (0 means 4 and 2)", p.Kernel, p.Stride)
	}
	return nil
}

// Shape returns the number of pooled positions vertically and
// horizontally on grid, (Rows − ks)/stride + 1 by (Cols − ks)/stride + 1
// (no padding; a partial window at the far edge is dropped, like
// PyTorch's avg_pool2d). It returns 0, 0 if the kernel is larger than the
// grid.
func (p PoolSettings) Shape(grid online.PatchGrid) (rows, cols int) {
	k, s := p.kernel(), p.stride()
	if grid.Rows() < k || grid.Cols() < k {
		return 0, 0
	}
	return (grid.Rows()-k)/s + 1, (grid.Cols()-k)/s + 1
}

// Len returns the length of an image vector: the pooled positions times
// the embedding dimension dim.
func (p PoolSettings) Len(grid online.PatchGrid, dim int) int {
	r, c := p.Shape(grid)
	return r * c * dim
}

// embedScratch is the workspace of one embedding call.
type embedScratch struct {
	c    csr
	val  []float64 // coefficients of weighted codes
	beta []float64 // grid.Len()×Dim patch embeddings of one image
	hs   []float64 // Rows×pooled cols horizontal window sums
}

// EmbedPatchesVQ writes into the rows of dst the embedding of each f_vq
// code: β = Pα/‖Pα‖, for a 1-hot code the normalised column of P of its
// atom. A blank code (−1) gives the blank atom's column with BlankAtom
// and zero with BlankSkip. dst must be len(codes)×Dim or empty (then it is
// sized). It panics with mat.ErrShape on another shape, and if a code is
// out of range.
func (m *SMT) EmbedPatchesVQ(dst *mat.Dense, codes []int) {
	reuseAs(dst, len(codes), m.s.Dim)
	w := m.pool.Get().(*embedScratch)
	defer m.pool.Put(w)
	w.c.fromVQ(codes, m.s.K, m.s.Blank)
	dr := dst.RawMatrix()
	for i := range codes {
		m.patch(dr.Data[i*dr.Stride:i*dr.Stride+m.s.Dim], &w.c, i)
	}
}

// EmbedPatchesGQ is EmbedPatchesVQ for f_gq codes: β = Σ_{a∈α} p_a,
// normalised.
func (m *SMT) EmbedPatchesGQ(dst *mat.Dense, codes *online.SparseCodes) {
	reuseAs(dst, codes.Rows, m.s.Dim)
	w := m.pool.Get().(*embedScratch)
	defer m.pool.Put(w)
	w.c.fromGQ(codes, m.s.K, m.s.Blank)
	dr := dst.RawMatrix()
	for i := 0; i < codes.Rows; i++ {
		m.patch(dr.Data[i*dr.Stride:i*dr.Stride+m.s.Dim], &w.c, i)
	}
}

// patch writes the normalised embedding of row i of c into dst.
func (m *SMT) patch(dst []float64, c *csr, i int) {
	atoms := c.row(i)
	switch {
	case len(atoms) == 0:
		clear(dst)
	case len(atoms) == 1 && c.val == nil:
		copy(dst, m.unit.RawRowView(atoms[0]))
	default:
		clear(dst)
		for j, a := range atoms {
			w := 1.0
			if c.val != nil {
				w = c.val[c.ptr[i]+j]
			}
			axpy(dst, w, m.pt.RawRowView(a))
		}
		normalize(dst)
	}
}

func normalize(x []float64) {
	var ss float64
	for _, v := range x {
		ss += v * v
	}
	if ss == 0 {
		return
	}
	inv := 1 / math.Sqrt(ss)
	for i := range x {
		x[i] *= inv
	}
}

func reuseAs(dst *mat.Dense, r, c int) {
	if dst.IsEmpty() {
		dst.ReuseAs(r, c)
		return
	}
	if dr, dc := dst.Dims(); dr != r || dc != c {
		panic(mat.ErrShape)
	}
}

// EmbedImagesVQ writes into row i of dst the vector of image i of a
// minibatch coded by f_vq (codes laid out as for Stats.AddImagesVQ),
// following smt-minimalistic, section 3:
//
//	β_ij = P f(x_ij) / ‖P f(x_ij)‖          (each patch; blank: see BlankMode)
//	z    = L2_normalize_pw(avg_pool(B; ks, stride))
//
// The pooled map has pool.Shape(grid) positions; z holds, position after
// position in row-major order, the Dim-vector of each, scaled to unit
// norm (a position whose window holds only zero embeddings stays zero).
// The 1/ks² of the average is left out: the normalisation removes it.
//
// dst must be images×pool.Len(grid, Dim) or empty (then it is sized). It
// panics with mat.ErrShape on another shape or if len(codes) !=
// images·grid.Len(), and if the kernel is larger than the grid or a code
// is out of range. It only reads the SMT and may run concurrently with
// other embedding calls.
func (m *SMT) EmbedImagesVQ(dst *mat.Dense, codes []int, images int, grid online.PatchGrid, pool PoolSettings) {
	if images < 0 || len(codes) != images*grid.Len() {
		panic(mat.ErrShape)
	}
	w := m.pool.Get().(*embedScratch)
	defer m.pool.Put(w)
	w.c.fromVQ(codes, m.s.K, m.s.Blank)
	m.embedImages(dst, w, images, grid, pool)
}

// EmbedImagesGQ is EmbedImagesVQ for f_gq codes (laid out as for
// Stats.AddImagesGQ); the embedding of a patch is Σ_{a∈α} p_a, normalised.
func (m *SMT) EmbedImagesGQ(dst *mat.Dense, codes *online.SparseCodes, images int, grid online.PatchGrid, pool PoolSettings) {
	if images < 0 || codes.Rows != images*grid.Len() {
		panic(mat.ErrShape)
	}
	w := m.pool.Get().(*embedScratch)
	defer m.pool.Put(w)
	w.c.fromGQ(codes, m.s.K, m.s.Blank)
	m.embedImages(dst, w, images, grid, pool)
}

// EmbedImagesWeighted is EmbedImagesGQ for weighted codes, the codes'
// Cos being the coefficients of their atoms, as for
// Stats.AddTemporalGQ: the embedding of a patch is Σ_a α_a p_a,
// normalised.
func (m *SMT) EmbedImagesWeighted(dst *mat.Dense, codes *online.SparseCodes, images int, grid online.PatchGrid, pool PoolSettings) {
	if images < 0 || codes.Rows != images*grid.Len() {
		panic(mat.ErrShape)
	}
	w := m.pool.Get().(*embedScratch)
	defer m.pool.Put(w)
	w.val = w.c.fromWeighted(codes, m.s.K, m.s.Blank, w.val)
	m.embedImages(dst, w, images, grid, pool)
}

func (m *SMT) embedImages(dst *mat.Dense, w *embedScratch, images int, grid online.PatchGrid, pool PoolSettings) {
	if err := pool.Validate(); err != nil {
		panic(err)
	}
	pr, pc := pool.Shape(grid)
	if pr == 0 {
		panic(fmt.Sprintf("sgd: pooling kernel %d larger than the %dx%d patch grid", pool.kernel(), grid.Rows(), grid.Cols()))
	}
	dim := m.s.Dim
	reuseAs(dst, images, pr*pc*dim)
	k, s := pool.kernel(), pool.stride()
	rows, cols := grid.Rows(), grid.Cols()
	w.beta = grow(w.beta, rows*cols*dim)
	w.hs = grow(w.hs, rows*pc*dim)
	dr := dst.RawMatrix()
	for img := 0; img < images; img++ {
		first := img * rows * cols
		for i := 0; i < rows*cols; i++ {
			m.patch(w.beta[i*dim:(i+1)*dim], &w.c, first+i)
		}
		// Horizontal window sums, then vertical sums of those.
		clear(w.hs)
		for r := 0; r < rows; r++ {
			for oc := 0; oc < pc; oc++ {
				h := w.hs[(r*pc+oc)*dim : (r*pc+oc+1)*dim]
				for c := oc * s; c < oc*s+k; c++ {
					axpy(h, 1, w.beta[(r*cols+c)*dim:(r*cols+c+1)*dim])
				}
			}
		}
		out := dr.Data[img*dr.Stride : img*dr.Stride+pr*pc*dim]
		clear(out)
		for or := 0; or < pr; or++ {
			for oc := 0; oc < pc; oc++ {
				z := out[(or*pc+oc)*dim : (or*pc+oc+1)*dim]
				for r := or * s; r < or*s+k; r++ {
					axpy(z, 1, w.hs[(r*pc+oc)*dim:(r*pc+oc+1)*dim])
				}
				normalize(z)
			}
		}
	}
}
