package online

import (
	"errors"
	"fmt"
	"math"
	"slices"

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
	if v.valid() {
		return knnVoteNames[v]
	}
	return fmt.Sprintf("KNNVote(%d)", int(v))
}

// UnmarshalText sets v to the vote named text, "exp" or "cosine".
func (v *KNNVote) UnmarshalText(text []byte) error {
	for i, name := range knnVoteNames {
		if string(text) == name {
			*v = KNNVote(i)
			return nil
		}
	}
	return fmt.Errorf("online: knn vote %q: must be exp or cosine", text)
}

func (v KNNVote) valid() bool { return v == VoteExp || v == VoteCosine }

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
	case !s.Vote.valid():
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

// The blocking of KNN.Classify: knnQueryRows queries (packed) are scored
// against knnTilePanels panels of stored rows (256 rows) at a time, into
// a tile of 256 × 256 float32s (256 KB) that is merged into the queries'
// heaps before the next one. The kernel sweeps the dimensions in slices
// of knnDimSlice, so that the slice of a panel (32 KB) and of a block of
// queries stay in L1 and the slices of the tile's panels (256 KB), of the
// queries (256 KB) and the tile stay in L2, whatever the dimension. The
// stored rows stream from memory once per knnQueryRows queries.
const (
	knnQueryRows  = 256
	knnTilePanels = 8
	knnDimSlice   = 256
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
// and has cosine 0 with everything), laid out in panels of 32 rows for
// the scoring kernels of knn_kernel.go (AVX-512, AVX2 or portable Go,
// chosen at start-up), which compute the cosines of a block of queries
// with 256 stored rows into a small tile that is merged into each
// query's K best at once: the queries × rows score
// matrix is never written. 60,000 stored rows of 3,200 values take 768 MB, and
// classifying 10,000 queries against them is 3.8·10¹² flops. A float32
// cosine is within fusedTol(dim) (4·(dim+2)·2⁻²⁴, 7.6·10⁻⁴ at 3,200
// dimensions, and typically far less) of the exact one, so the
// neighbours can differ from those of exact arithmetic only among rows
// whose cosines with the query are that close to the K-th largest.
//
// Add modifies the KNN; Classify only reads it.
type KNN struct {
	s       KNNSettings
	dim     int
	pack    []float32 // stored unit rows in panels (see knn_kernel.go); padding lanes are zero
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
		k.pack = slices.Grow(k.pack, panelsFor(len(k.labels)+n)*k.dim*panelWidth-len(k.pack))
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
	n0 := len(k.labels)
	old := len(k.pack)
	if size := panelsFor(n0+r) * c * panelWidth; size > old {
		k.pack = slices.Grow(k.pack, size-old)[:size]
		clear(k.pack[old:])
	}
	row := make([]float64, c)
	for i := 0; i < r; i++ {
		mat.Row(row, i, x)
		inv, ok := unitScale(row)
		if !ok {
			// Keep the padding lanes of the last old panel zero.
			k.pack = k.pack[:old]
			for j := n0; j < min(n0+i, panelsFor(n0)*panelWidth); j++ {
				base := (j/panelWidth)*c*panelWidth + j%panelWidth
				for l := 0; l < c; l++ {
					k.pack[base+l*panelWidth] = 0
				}
			}
			return fmt.Errorf("%w: row %d", ErrNotFinite, i)
		}
		k.setRow(n0+i, row, inv)
	}
	for _, l := range labels {
		k.labels = append(k.labels, l)
		k.classes = max(k.classes, l+1)
	}
	return nil
}

// setRow stores inv·v as row j of the panels.
func (k *KNN) setRow(j int, v []float64, inv float64) {
	base := (j/panelWidth)*k.dim*panelWidth + j%panelWidth
	for l, x := range v {
		k.pack[base+l*panelWidth] = float32(x * inv)
	}
}

// unitScale returns 1/‖v‖ (0 for the zero vector), and false if v holds
// NaN or Inf.
func unitScale(v []float64) (float64, bool) {
	var ss float64
	for _, x := range v {
		ss += x * x
	}
	if math.IsNaN(ss) || math.IsInf(ss, 0) {
		return 0, false
	}
	if ss == 0 {
		return 0, true
	}
	return 1 / math.Sqrt(ss), true
}

// packUnitQueries writes rows q0 … q0+n−1 of x, scaled to unit norm, into
// dst in blocks of r rows (dimension after dimension, as the kernels read
// them), padding the last block with zero rows. row is a dim workspace.
func packUnitQueries(dst []float32, x mat.Matrix, q0, n, r int, row []float64) error {
	dim := len(row)
	blocks := (n + r - 1) / r
	for i := 0; i < blocks*r; i++ {
		blk := dst[i/r*r*dim : (i/r+1)*r*dim]
		if i >= n {
			for l := 0; l < dim; l++ {
				blk[l*r+i%r] = 0
			}
			continue
		}
		mat.Row(row, q0+i, x)
		inv, ok := unitScale(row)
		if !ok {
			return fmt.Errorf("%w: row %d", ErrNotFinite, q0+i)
		}
		for l, v := range row {
			blk[l*r+i%r] = float32(v * inv)
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
	return k.ClassifyVotes([][]int{dst}, []KNNVote{k.s.Vote}, x)
}

// ClassifyVotes is Classify under each of votes, from one search for the
// neighbours: dst[v] gets the predictions under votes[v]. It panics if
// dst and votes differ in length or a vote is unknown.
func (k *KNN) ClassifyVotes(dst [][]int, votes []KNNVote, x mat.Matrix) error {
	r, c := x.Dims()
	if c != k.dim || len(dst) != len(votes) {
		panic(mat.ErrShape)
	}
	for v, d := range dst {
		if len(d) != r {
			panic(mat.ErrShape)
		}
		if !votes[v].valid() {
			panic(fmt.Sprintf("online: unknown %v", votes[v]))
		}
	}
	if len(k.labels) == 0 {
		for _, d := range dst {
			for i := range d {
				d[i] = -1
			}
		}
		return nil
	}
	invT := 1 / k.s.temperature()
	z := make([]float64, k.classes)
	return k.nearest(knnBest, x, func(q int, h []neighbour) {
		for v, vote := range votes {
			clear(z)
			for _, nb := range h {
				w := float64(nb.cos)
				if vote == VoteExp {
					w = math.Exp((w - 1) * invT) // exp(cos/T) up to a common factor
				}
				z[k.labels[nb.idx]] += w
			}
			best := 0
			for cl, zc := range z {
				if zc > z[best] {
					best = cl
				}
			}
			dst[v][q] = best
		}
	})
}

// nearest finds the min(K, Len) nearest stored rows of each row q of x
// with kernel kn and calls found(q, h) with them, in no particular order;
// h is reused after found returns. There must be stored rows.
func (k *KNN) nearest(kn *knnKernel, x mat.Matrix, found func(q int, h []neighbour)) error {
	r, c := x.Dims()
	n := len(k.labels)
	kk := min(k.s.k(), n)
	rows := kn.rows
	chunk := max(1, knnQueryRows/rows) * rows
	panels := panelsFor(n)
	tp := min(knnTilePanels, panels)
	query := make([]float32, chunk*c)
	tile := make([]float32, chunk*tp*panelWidth)
	heaps := make([]neighbour, chunk*kk)
	sizes := make([]int, chunk)
	row := make([]float64, c)
	for q0 := 0; q0 < r; q0 += chunk {
		nq := min(chunk, r-q0)
		blocks := (nq + rows - 1) / rows
		if err := packUnitQueries(query, x, q0, nq, rows, row); err != nil {
			return err
		}
		clear(sizes)
		for p0 := 0; p0 < panels; p0 += tp {
			np := min(tp, panels-p0)
			pack := k.pack[p0*c*panelWidth : (p0+np)*c*panelWidth]
			for l0 := 0; l0 < c; l0 += knnDimSlice {
				kn.scores(query, blocks, c, l0, min(c, l0+knnDimSlice), pack, np, tile)
			}
			for i := 0; i < nq; i++ {
				b, ri := i/rows, i%rows
				h := heaps[i*kk : (i+1)*kk]
				size := sizes[i]
				for p := 0; p < np; p++ {
					t0 := (p0 + p) * panelWidth
					o := ((b*np+p)*rows + ri) * panelWidth
					s := tile[o : o+min(panelWidth, n-t0)]
					a := 0
					for ; size < kk && a < len(s); a++ {
						h[size] = neighbour{cos: s[a], idx: t0 + a}
						size++
						siftUp(h, size-1)
					}
					if a == len(s) {
						continue
					}
					// The stored rows come in increasing index, so a
					// candidate displaces the worst only if its cosine is
					// strictly larger (see worse).
					worst := h[0].cos
					for ; a < len(s); a++ {
						if v := s[a]; v > worst {
							h[0] = neighbour{cos: v, idx: t0 + a}
							siftDown(h, 0)
							worst = h[0].cos
						}
					}
				}
				sizes[i] = size
			}
		}
		for i := 0; i < nq; i++ {
			found(q0+i, heaps[i*kk:i*kk+sizes[i]])
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
