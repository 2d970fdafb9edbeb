package sgd

import (
	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas64"
)

// tri is the strict upper triangle of a symmetric n×n matrix, packed row
// by row: entry (a, b), a < b, is at a·(2n−a−1)/2 + b−a−1, so that the
// entries (a, a+1), ..., (a, n−1) of row a are contiguous. It takes
// n(n−1)/2 float64s: 67 MB for n = 4097, 1.07 GB for n = 16385, half a
// dense matrix.
type tri struct {
	n int
	v []float64
}

func newTri(n int) tri { return tri{n: n, v: make([]float64, n*(n-1)/2)} }

// off returns the offset of row a.
func (t *tri) off(a int) int { return a * (2*t.n - a - 1) / 2 }

// at returns the offset of entry (a, b); a and b must differ.
func (t *tri) at(a, b int) int {
	if a > b {
		a, b = b, a
	}
	return t.off(a) + b - a - 1
}

// row returns the entries (a, a+1..n−1).
func (t *tri) row(a int) []float64 {
	o := t.off(a)
	return t.v[o : o+t.n-a-1]
}

// mulAdd adds s·T·x to dst, T the symmetric matrix with this strict upper
// triangle and a zero diagonal, for n×c blocks x and dst (row-major). Row a
// contributes row·x[a+1:] to dst[a] (a transposed gemv) and row⊗x[a] to
// dst[a+1:] (a rank-one update), so each packed entry is read once.
func (t *tri) mulAdd(dst, x blas64.General, s float64) {
	n, c := t.n, x.Cols
	for a := 0; a < n-1; a++ {
		row := t.row(a)
		m := len(row)
		xs := blas64.General{Rows: m, Cols: c, Stride: x.Stride, Data: x.Data[(a+1)*x.Stride:]}
		ds := blas64.General{Rows: m, Cols: c, Stride: dst.Stride, Data: dst.Data[(a+1)*dst.Stride:]}
		rv := blas64.Vector{N: m, Inc: 1, Data: row}
		da := blas64.Vector{N: c, Inc: 1, Data: dst.Data[a*dst.Stride:]}
		xa := blas64.Vector{N: c, Inc: 1, Data: x.Data[a*x.Stride:]}
		if c == 1 {
			// Vectors with a unit stride: a dot product and an axpy.
			xv := blas64.Vector{N: m, Inc: x.Stride, Data: xs.Data}
			dv := blas64.Vector{N: m, Inc: dst.Stride, Data: ds.Data}
			da.Data[0] += s * blas64.Dot(rv, xv)
			blas64.Axpy(s*xa.Data[0], rv, dv)
			continue
		}
		blas64.Gemv(blas.Trans, s, xs, rv, 1, da)
		blas64.Ger(s, rv, xa, ds)
	}
}
