package online

import (
	"errors"
	"fmt"
	"math"
	"slices"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas32"
	"gonum.org/v1/gonum/mat"
)

// KNNVote selects how the K nearest neighbours vote in a KNN.
type KNNVote int

const (
	// VoteExp weighs each neighbour by exp(cos/T): the weighted KNN of Wu
	// et al. (2018), which the self-supervised code bases smt-minimalistic
	// compares against evaluate with, and the reading of App. J in which
	// the temperature T matters. The default.
	VoteExp KNNVote = iota
	// VoteCosine weighs each neighbour by its cosine, App. J taken
	// literally: z_k = (1/K) Σ_{j∈n(x), y_j=k} cos(x_j, x), then
	// softmax(z/T), whose argmax does not depend on T.
	VoteCosine
)

var knnVoteNames = [...]string{VoteExp: "exp", VoteCosine: "cosine"}

// String returns "exp" or "cosine".
func (v KNNVote) String() string {
	if v >= 0 && int(v) < len(knnVoteNames) {
		return knnVoteNames[v]
	}
	return fmt.Sprintf("KNNVote(%d)", int(v))
}

// KNNSettings configures a KNN. A zero field means its documented
// default, those of smt-minimalistic, App. J.
type KNNSettings struct {
	// K is the number of neighbours. Zero means 30.
	K int
	// Temperature is T. Zero means 0.03; it must be >= 0.
	Temperature float64
	// Vote is how neighbours vote. The zero value is VoteExp.
	Vote KNNVote
}

func (s KNNSettings) k() int {
	if s.K == 0 {
		return 30
	}
	return s.K
}

func (s KNNSettings) temperature() float64 {
	if s.Temperature == 0 {
		return 0.03
	}
	return s.Temperature
}

// Validate reports whether the settings are usable.
func (s KNNSettings) Validate() error {
	switch {
	case s.K < 0:
		return fmt.Errorf("online: knn K = %d: must be >= 1 (0 means 30)", s.K)
	case !(s.Temperature >= 0) || math.IsInf(s.Temperature, 1):
		return fmt.Errorf("online: knn temperature %v: must be > 0 (0 means 0.03)", s.Temperature)
	case s.Vote != VoteExp && s.Vote != VoteCosine:
		return fmt.Errorf("online: unknown %v", s.Vote)
	}
	return nil
}

// Errors of KNN.Add.
var (
	// ErrLabel means a label is negative.
	ErrLabel = errors.New("online: knn label must be >= 0")
	// ErrNotFinite means an embedding holds NaN or Inf.
	ErrNotFinite = errors.New("online: knn embedding holds NaN or Inf")
)

// knnBlock bounds the scores computed per sgemm call: the rows of a
// block of queries against a block of stored rows, 2^20 float32s (4 MB).
const (
	knnQueryRows = 256
	knnTrainRows = 4096
)

// KNN is the soft K-nearest-neighbour classifier of smt-minimalistic,
// App. J, over cosine similarity: for a query x with neighbours n(x), the
// K stored rows of largest cos(x, x_j),
//
//	z_k = Σ_{j∈n(x), y_j = k} w(cos(x_j, x)),   ŷ = argmax_k z_k,
//
// with w(c) = exp(c/T) (VoteExp) or w(c) = c (VoteCosine); the softmax of
// App. J does not move the argmax. Ties go to the smaller class.
//
// Rows are stored scaled to unit norm in float32 (a zero row stays zero
// and has cosine 0 with everything), and the cosines of a block of
// queries with a block of stored rows are one blas32 sgemm, which runs at
// about twice the speed of dgemm with gonum's pure-Go BLAS: 60,000
// stored rows of 3,200 values take 768 MB, and classifying 10,000 queries
// against them is 3.8·10¹² flops. Rounding of the float32 cosines (below
// 10⁻⁶) can only swap neighbours whose cosines are that close.
//
// Add modifies the KNN; Classify only reads it.
type KNN struct {
	s       KNNSettings
	dim     int
	rows    []float32 // stored unit rows
	labels  []int
	classes int
}

// NewKNN returns an empty classifier of dim-vectors. It panics if dim < 1
// or the settings are invalid.
func NewKNN(s KNNSettings, dim int) *KNN {
	if err := s.Validate(); err != nil {
		panic(err)
	}
	if dim < 1 {
		panic(fmt.Sprintf("online: knn of dimension %d", dim))
	}
	return &KNN{s: s, dim: dim}
}

// Grow makes room for n more rows, so that adding a known number of rows
// (60,000 training images) allocates once instead of doubling.
func (k *KNN) Grow(n int) {
	if n > 0 {
		k.rows = slices.Grow(k.rows, n*k.dim)
		k.labels = slices.Grow(k.labels, n)
	}
}

// Len returns the number of stored rows.
func (k *KNN) Len() int { return len(k.labels) }

// Add stores the rows of x with their labels (one per row, >= 0). It
// returns an error wrapping ErrLabel or ErrNotFinite, storing nothing, if
// a label is negative or a row holds NaN or Inf, and panics with
// mat.ErrShape if x does not have dim columns or labels one per row.
func (k *KNN) Add(x mat.Matrix, labels []int) error {
	r, c := x.Dims()
	if c != k.dim || len(labels) != r {
		panic(mat.ErrShape)
	}
	for i, l := range labels {
		if l < 0 {
			return fmt.Errorf("%w: row %d has label %d", ErrLabel, i, l)
		}
	}
	start := len(k.rows)
	k.rows = slices.Grow(k.rows, r*c)[:start+r*c]
	if err := unitRows32(k.rows[start:], x); err != nil {
		k.rows = k.rows[:start]
		return err
	}
	for _, l := range labels {
		k.labels = append(k.labels, l)
		k.classes = max(k.classes, l+1)
	}
	return nil
}

// unitRows32 writes the rows of x, scaled to unit norm, into dst.
func unitRows32(dst []float32, x mat.Matrix) error {
	r, c := x.Dims()
	row := make([]float64, c)
	for i := 0; i < r; i++ {
		mat.Row(row, i, x)
		var ss float64
		for _, v := range row {
			ss += v * v
		}
		if math.IsNaN(ss) || math.IsInf(ss, 0) {
			return fmt.Errorf("%w: row %d", ErrNotFinite, i)
		}
		inv := 0.0
		if ss > 0 {
			inv = 1 / math.Sqrt(ss)
		}
		out := dst[i*c : (i+1)*c]
		for j, v := range row {
			out[j] = float32(v * inv)
		}
	}
	return nil
}

// neighbour is one candidate of a query's K nearest.
type neighbour struct {
	cos float32
	idx int
}

// worse orders neighbours: smaller cosine first, then larger index, so
// that among equal cosines the earlier stored row wins.
func worse(a, b neighbour) bool {
	return a.cos < b.cos || (a.cos == b.cos && a.idx > b.idx)
}

// Classify writes the predicted class of each row of x into dst (one per
// row). With no stored rows every prediction is −1. It returns an error
// wrapping ErrNotFinite if a row of x holds NaN or Inf, and panics with
// mat.ErrShape if x does not have dim columns or dst one element per row.
func (k *KNN) Classify(dst []int, x mat.Matrix) error {
	r, c := x.Dims()
	if c != k.dim || len(dst) != r {
		panic(mat.ErrShape)
	}
	n := len(k.labels)
	if n == 0 {
		for i := range dst {
			dst[i] = -1
		}
		return nil
	}
	kk := min(k.s.k(), n)
	invT := 1 / k.s.temperature()
	bq, bt := min(knnQueryRows, r), min(knnTrainRows, n)
	query := make([]float32, bq*c)
	scores := make([]float32, bq*bt)
	heaps := make([]neighbour, bq*kk)
	sizes := make([]int, bq)
	z := make([]float64, k.classes)
	for q0 := 0; q0 < r; q0 += bq {
		nq := min(bq, r-q0)
		var block mat.Matrix = rowSlice{x, q0, nq}
		if d, ok := x.(*mat.Dense); ok {
			block = d.Slice(q0, q0+nq, 0, c)
		}
		if err := unitRows32(query[:nq*c], block); err != nil {
			return fmt.Errorf("%w (query %d)", err, q0)
		}
		clear(sizes)
		qm := blas32.General{Rows: nq, Cols: c, Stride: c, Data: query[:nq*c]}
		for t0 := 0; t0 < n; t0 += bt {
			nt := min(bt, n-t0)
			tm := blas32.General{Rows: nt, Cols: c, Stride: c, Data: k.rows[t0*c : (t0+nt)*c]}
			sm := blas32.General{Rows: nq, Cols: nt, Stride: nt, Data: scores[:nq*nt]}
			blas32.Gemm(blas.NoTrans, blas.Trans, 1, qm, tm, 0, sm)
			for i := 0; i < nq; i++ {
				h := heaps[i*kk : (i+1)*kk]
				size := sizes[i]
				for j, v := range sm.Data[i*nt : (i+1)*nt] {
					cand := neighbour{cos: v, idx: t0 + j}
					if size < kk {
						h[size] = cand
						size++
						siftUp(h, size-1)
						continue
					}
					if worse(h[0], cand) {
						h[0] = cand
						siftDown(h[:size], 0)
					}
				}
				sizes[i] = size
			}
		}
		for i := 0; i < nq; i++ {
			clear(z)
			for _, nb := range heaps[i*kk : i*kk+sizes[i]] {
				w := float64(nb.cos)
				if k.s.Vote == VoteExp {
					w = math.Exp((w - 1) * invT) // exp(cos/T) up to a common factor
				}
				z[k.labels[nb.idx]] += w
			}
			best := 0
			for cl, v := range z {
				if v > z[best] {
					best = cl
				}
			}
			dst[q0+i] = best
		}
	}
	return nil
}

// siftUp and siftDown keep h a min-heap under worse: h[0] is the worst
// of the K best so far.
func siftUp(h []neighbour, i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !worse(h[i], h[p]) {
			return
		}
		h[i], h[p] = h[p], h[i]
		i = p
	}
}

func siftDown(h []neighbour, i int) {
	for {
		l := 2*i + 1
		if l >= len(h) {
			return
		}
		m := l
		if r := l + 1; r < len(h) && worse(h[r], h[l]) {
			m = r
		}
		if !worse(h[m], h[i]) {
			return
		}
		h[i], h[m] = h[m], h[i]
		i = m
	}
}

// rowSlice is rows [r0, r0+n) of a matrix.
type rowSlice struct {
	m     mat.Matrix
	r0, n int
}

func (s rowSlice) Dims() (int, int)    { _, c := s.m.Dims(); return s.n, c }
func (s rowSlice) At(i, j int) float64 { return s.m.At(s.r0+i, j) }
func (s rowSlice) T() mat.Matrix       { return mat.Transpose{Matrix: s} }

// SoftKNN classifies the rows of test by the soft KNN over the rows of
// train with their labels (see KNN) and writes the predictions into dst,
// one per test row. It is NewKNN, Add and Classify in one call.
func SoftKNN(dst []int, train mat.Matrix, labels []int, test mat.Matrix, s KNNSettings) error {
	_, c := train.Dims()
	k := NewKNN(s, c)
	if err := k.Add(train, labels); err != nil {
		return err
	}
	return k.Classify(dst, test)
}

// Top1 returns the fraction of predictions equal to the truth. It panics
// with mat.ErrShape if the slices differ in length, and returns NaN for
// empty ones.
func Top1(pred, truth []int) float64 {
	if len(pred) != len(truth) {
		panic(mat.ErrShape)
	}
	if len(pred) == 0 {
		return math.NaN()
	}
	hit := 0
	for i, p := range pred {
		if p == truth[i] {
			hit++
		}
	}
	return float64(hit) / float64(len(pred))
}
