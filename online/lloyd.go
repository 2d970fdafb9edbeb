package online

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"

	"gonum.org/v1/gonum/blas/blas64"
	"gonum.org/v1/gonum/mat"
)

// ErrTooFewRows is returned by Lloyd when x has fewer usable rows than
// there are atoms to seed.
var ErrTooFewRows = errors.New("online: fewer non-blank rows than atoms")

// Lloyd runs batch spherical k-means (Dhillon and Modha, 2001) on the rows
// of x that blank does not flag (blank may be nil) and that are not zero,
// each scaled to unit norm, and leaves the K unit-norm atoms in the rows
// of atoms (K×Dim). Each iteration assigns every row to its atom of
// largest cosine and replaces each atom by the normalised sum of its rows:
//
//	φ_j ← Σ_{i: j*(i)=j} x_i / ‖Σ_{i: j*(i)=j} x_i‖.
//
// An atom left without rows takes the worst-fitting row (smallest best
// cosine) not yet taken in that iteration. It stops after iters iterations
// or when no assignment changes, and returns the number of iterations
// that updated the atoms (fewer than iters means it converged). It is the reference the online KMeans is measured against.
//
// If src is nil the iterations start from the given atoms (zero rows of
// atoms count as empty clusters); otherwise atoms are first set to K
// distinct random rows of x drawn from src, and ErrTooFewRows is returned
// if there are fewer than K usable rows.
//
// It panics with mat.ErrShape if the columns of atoms and x differ or
// blank is non-nil and not one flag per row of x.
func Lloyd(atoms *mat.Dense, x mat.Matrix, blank []bool, iters int, src rand.Source) (int, error) {
	K, dim := atoms.Dims()
	r, c := x.Dims()
	if c != dim || (blank != nil && len(blank) != r) {
		panic(mat.ErrShape)
	}
	var w scratch
	m := w.compact(x, blank, 1)
	raw := atoms.RawMatrix()
	if src != nil {
		if m < K {
			return 0, fmt.Errorf("%w: %d rows for %d atoms", ErrTooFewRows, m, K)
		}
		rng := rand.New(src)
		perm := make([]int, m)
		for i := range perm {
			perm[i] = i
		}
		for j := 0; j < K; j++ {
			p := j + rng.IntN(m-j)
			perm[j], perm[p] = perm[p], perm[j]
			copy(raw.Data[j*raw.Stride:j*raw.Stride+dim], w.x[perm[j]*dim:(perm[j]+1)*dim])
		}
	}
	normalizeAtoms(raw)
	atomsT := make([]float64, dim*K)
	prev := make([]int, m)
	for i := range prev {
		prev[i] = -1
	}
	sums := make([]float64, K*dim)
	hits := make([]int, K)
	var worst []int
	for it := 0; it < iters; it++ {
		transposeInto(atomsT, raw)
		w.argmax(blas64.General{Rows: dim, Cols: K, Stride: K, Data: atomsT}, m)
		if slices.Equal(prev, w.best[:m]) {
			return it, nil
		}
		copy(prev, w.best[:m])
		clear(sums)
		clear(hits)
		for i := 0; i < m; i++ {
			j := w.best[i]
			hits[j]++
			sum := sums[j*dim : (j+1)*dim]
			for l, v := range w.x[i*dim : (i+1)*dim] {
				sum[l] += v
			}
		}
		sorted := false
		for j := 0; j < K; j++ {
			phi := raw.Data[j*raw.Stride : j*raw.Stride+dim]
			sum := sums[j*dim : (j+1)*dim]
			var ss float64
			for _, v := range sum {
				ss += v * v
			}
			if hits[j] > 0 && ss > 0 {
				inv := 1 / math.Sqrt(ss)
				for l, v := range sum {
					phi[l] = v * inv
				}
				continue
			}
			if !sorted {
				worst, sorted = worstRows(worst, w.cos[:m]), true
			}
			if len(worst) == 0 {
				continue // more empty atoms than rows: leave it
			}
			copy(phi, w.x[worst[0]*dim:(worst[0]+1)*dim])
			worst = worst[1:]
		}
	}
	return iters, nil
}

// worstRows returns the row numbers ordered by increasing cosine.
func worstRows(dst []int, cos []float64) []int {
	dst = dst[:0]
	for i := range cos {
		dst = append(dst, i)
	}
	slices.SortStableFunc(dst, func(a, b int) int { return cmp.Compare(cos[a], cos[b]) })
	return dst
}

// normalizeAtoms scales the nonzero rows of a to unit norm.
func normalizeAtoms(a blas64.General) {
	for j := 0; j < a.Rows; j++ {
		phi := a.Data[j*a.Stride : j*a.Stride+a.Cols]
		var ss float64
		for _, v := range phi {
			ss += v * v
		}
		if ss > 0 {
			inv := 1 / math.Sqrt(ss)
			for l := range phi {
				phi[l] *= inv
			}
		}
	}
}

// Distortion returns the mean, over the rows of x that blank does not flag
// (blank may be nil) and that are not zero, of 1 − max_j cos(x_i, φ_j),
// the spherical k-means objective; atoms holds one atom per row and its
// zero rows are ignored. It returns NaN if no row or no atom counts.
//
// It panics with mat.ErrShape if the columns of atoms and x differ or
// blank is non-nil and not one flag per row of x.
func Distortion(atoms mat.Matrix, x mat.Matrix, blank []bool) float64 {
	K, dim := atoms.Dims()
	r, c := x.Dims()
	if c != dim || (blank != nil && len(blank) != r) {
		panic(mat.ErrShape)
	}
	unit := mat.NewDense(K, dim, nil)
	n := 0
	for j := 0; j < K; j++ {
		row := unit.RawRowView(n)
		mat.Row(row, j, atoms)
		var ss float64
		for _, v := range row {
			ss += v * v
		}
		if ss > 0 {
			n++
		}
	}
	if n == 0 {
		return math.NaN()
	}
	sub := unit.Slice(0, n, 0, dim).(*mat.Dense).RawMatrix()
	normalizeAtoms(sub)
	atomsT := make([]float64, dim*n)
	transposeInto(atomsT, sub)
	var w scratch
	m := w.compact(x, blank, 1)
	if m == 0 {
		return math.NaN()
	}
	w.argmax(blas64.General{Rows: dim, Cols: n, Stride: n, Data: atomsT}, m)
	var sum float64
	for _, v := range w.cos[:m] {
		sum += 1 - v
	}
	return sum / float64(m)
}
