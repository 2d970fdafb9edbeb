package online

import (
	"math"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas64"
	"gonum.org/v1/gonum/mat"

	"github.com/smtd/smtd/internal/parts"
)

// blockScores bounds the number of scores (rows × atoms) that one dgemm
// call produces, and maxBlockRows the rows. A block of 2^19 scores (4 MiB)
// gives gonum's parallel dgemm many 64×64 tiles to share among cores while
// staying in the last-level cache for the argmax or threshold scan that
// follows. On the 2-core EPYC this was tuned on, 2^16 was 25% slower and
// 2^17 to 2^20 were equal within the noise of a shared machine.
const (
	blockScores  = 1 << 19
	maxBlockRows = 512
)

// blockRows returns the number of rows scored per dgemm call against k
// atoms.
func blockRows(k int) int {
	return max(1, min(maxBlockRows, blockScores/max(k, 1)))
}

// scratch is the workspace of one scoring pass. It holds the compacted
// rows (blank and zero rows removed, the rest scaled to unit norm) and the
// per-row results.
type scratch struct {
	x      []float64 // m×dim compacted unit rows
	rows   []int     // rows[c] is the row of x that compacted row c came from
	norms  []float64 // the squared norm of each row of x (compactShared)
	best   []int     // argmax atom of each compacted row
	cos    []float64 // its cosine
	scores []float64 // one block of scores
	keys   []float64 // reseeding keys, one per compacted row
	order  []int     // reseeding order

	rowAtoms packedAtoms // the compacted rows as atoms, for seeding
	candRow  []int       // the compacted row of each seeding candidate
	candX    []float64   // those rows
	seeds    []seedPart  // parts 1, 2, … of a seeding step's candidates

	fused fusedScratch
	codes []codesPart        // the parts of codesFused
	pre   []prefilterScratch // parts 1, 2, … of argmaxPrefiltered
}

// seedPart is the workspace of one part of the candidates of a seeding
// step (KMeans.seed) after the first, which uses the scratch's own.
type seedPart struct {
	fused fusedScratch
	candX []float64
}

func grow[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}

// compact copies into s.x, scaled to unit norm, the rows of x that skip
// does not flag (skip may be nil) and whose norm is positive and finite,
// and returns how many it copied. Zero rows are the blank rows of
// NormalizeRows, so they are recognised even without flags. A dense x of
// at least compactShareRows rows is compacted on up to cores goroutines
// (compactShared); every row is scaled by the same arithmetic either way.
func (s *scratch) compact(x mat.Matrix, skip []bool, cores int) (m int) {
	r, dim := x.Dims()
	s.x = grow(s.x, r*dim)
	s.rows = grow(s.rows, r)
	var raw blas64.General
	rm, isRaw := x.(mat.RawMatrixer)
	if isRaw {
		raw = rm.RawMatrix()
		if cores > 1 && r >= compactShareRows {
			return s.compactShared(raw, skip, cores)
		}
	}
	for i := 0; i < r; i++ {
		if skip != nil && skip[i] {
			continue
		}
		dst := s.x[m*dim : (m+1)*dim]
		if isRaw {
			copy(dst, raw.Data[i*raw.Stride:i*raw.Stride+dim])
		} else {
			mat.Row(dst, i, x)
		}
		ss := sumSquares(dst)
		if !usableNorm(ss) {
			continue
		}
		scaleToUnit(dst, ss)
		s.rows[m] = i
		m++
	}
	return m
}

// compactShareRows is the fewest rows compact shares between goroutines,
// and compactChunk the rows one of them takes at a time: a row of 36
// numbers takes tens of ns to check and scale, so a chunk is some tens
// of µs and a batch of 32 MNIST images (16,928 rows) about a millisecond
// of one core.
const (
	compactShareRows = 4096
	compactChunk     = 1024
)

// compactShared is compact of a dense x on up to cores goroutines
// (parts.Share): the squared norms of the rows in ranges, the rows kept
// in order on the caller, then the kept rows copied and scaled in ranges.
func (s *scratch) compactShared(x blas64.General, skip []bool, cores int) (m int) {
	r, dim := x.Rows, x.Cols
	s.norms = grow(s.norms, r)
	parts.Share(r, cores, compactChunk, func(_, lo, hi int) {
		for i := lo; i < hi; i++ {
			if skip != nil && skip[i] {
				s.norms[i] = 0 // not usable: left out
				continue
			}
			s.norms[i] = sumSquares(x.Data[i*x.Stride : i*x.Stride+dim])
		}
	})
	for i, ss := range s.norms[:r] {
		if usableNorm(ss) {
			s.rows[m] = i
			m++
		}
	}
	parts.Share(m, cores, compactChunk, func(_, lo, hi int) {
		for c := lo; c < hi; c++ {
			i := s.rows[c]
			dst := s.x[c*dim : (c+1)*dim]
			copy(dst, x.Data[i*x.Stride:i*x.Stride+dim])
			scaleToUnit(dst, s.norms[i])
		}
	})
	return m
}

// sumSquares returns Σ v², summed in order.
func sumSquares(v []float64) float64 {
	var ss float64
	for _, a := range v {
		ss += a * a
	}
	return ss
}

// usableNorm reports whether a row of squared norm ss is compacted: ss
// positive and finite.
func usableNorm(ss float64) bool { return ss != 0 && !math.IsNaN(ss) && !math.IsInf(ss, 0) }

// scaleToUnit divides v, of squared norm ss, by its norm, unless ss is 1.
func scaleToUnit(v []float64, ss float64) {
	if ss == 1 {
		return
	}
	inv := 1 / math.Sqrt(ss)
	for k := range v {
		v[k] *= inv
	}
}

// scoreBlocks computes the cosines of the m compacted rows with the atoms
// whose transposes are the columns of atomsT (dim×k), one block of rows at
// a time, and calls scan with the first row of each block, its number of
// rows and its scores (rows × k, row-major).
func (s *scratch) scoreBlocks(atomsT blas64.General, m int, scan func(r0, n int, scores []float64)) {
	dim, k := atomsT.Rows, atomsT.Cols
	if m == 0 || k == 0 {
		return
	}
	br := min(blockRows(k), m)
	s.scores = grow(s.scores, br*k)
	for r0 := 0; r0 < m; r0 += br {
		n := min(br, m-r0)
		a := blas64.General{Rows: n, Cols: dim, Stride: dim, Data: s.x[r0*dim : (r0+n)*dim]}
		c := blas64.General{Rows: n, Cols: k, Stride: k, Data: s.scores[:n*k]}
		blas64.Gemm(blas.NoTrans, blas.NoTrans, 1, a, atomsT, 0, c)
		scan(r0, n, c.Data)
	}
}

// argmax sets s.best and s.cos for the m compacted rows: the first atom of
// largest cosine and that cosine. With no atoms every best is −1.
func (s *scratch) argmax(atomsT blas64.General, m int) {
	s.best = grow(s.best, m)
	s.cos = grow(s.cos, m)
	if atomsT.Cols == 0 {
		for c := range s.best {
			s.best[c], s.cos[c] = -1, 0
		}
		return
	}
	k := atomsT.Cols
	s.scoreBlocks(atomsT, m, func(r0, n int, scores []float64) {
		for i := 0; i < n; i++ {
			s.best[r0+i], s.cos[r0+i] = argmaxRow(scores[i*k : (i+1)*k])
		}
	})
}

// argmaxRow returns the index and value of the first largest element of a
// non-empty row. It finds the maximum with eight independent running
// maxima (no loop-carried dependency, and no index bookkeeping in the hot
// loop), then the first index holding it: about twice as fast as the
// one-pass loop on rows of thousands of scores.
func argmaxRow(row []float64) (int, float64) {
	m0 := row[0]
	m1, m2, m3, m4, m5, m6, m7 := m0, m0, m0, m0, m0, m0, m0
	n := len(row) &^ 7
	for j := 0; j < n; j += 8 {
		r := row[j : j+8 : j+8]
		if r[0] > m0 {
			m0 = r[0]
		}
		if r[1] > m1 {
			m1 = r[1]
		}
		if r[2] > m2 {
			m2 = r[2]
		}
		if r[3] > m3 {
			m3 = r[3]
		}
		if r[4] > m4 {
			m4 = r[4]
		}
		if r[5] > m5 {
			m5 = r[5]
		}
		if r[6] > m6 {
			m6 = r[6]
		}
		if r[7] > m7 {
			m7 = r[7]
		}
	}
	for _, v := range row[n:] {
		if v > m0 {
			m0 = v
		}
	}
	for _, m := range [...]float64{m1, m2, m3, m4, m5, m6, m7} {
		if m > m0 {
			m0 = m
		}
	}
	for j, v := range row {
		if v == m0 {
			return j, v
		}
	}
	return 0, row[0] // only if the maximum is NaN
}

// spread writes the compacted results into per-row outputs of length r:
// dst[i] = best atom or −1, cos[i] = its cosine or 0. Either may be nil.
func (s *scratch) spread(dst []int, cos []float64, r, m int) {
	c := 0
	for i := 0; i < r; i++ {
		if c < m && s.rows[c] == i {
			if dst != nil {
				dst[i] = s.best[c]
			}
			if cos != nil {
				cos[i] = s.cos[c]
			}
			c++
			continue
		}
		if dst != nil {
			dst[i] = -1
		}
		if cos != nil {
			cos[i] = 0
		}
	}
}

// transposeInto writes the rows of a (k×dim) as the columns of t (dim×k,
// row-major with stride k).
func transposeInto(t []float64, a blas64.General) {
	k, dim := a.Rows, a.Cols
	for j := 0; j < k; j++ {
		row := a.Data[j*a.Stride : j*a.Stride+dim]
		for l, v := range row {
			t[l*k+j] = v
		}
	}
}
