package sgd

import (
	"container/heap"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"

	"gonum.org/v1/gonum/blas/blas64"
	"gonum.org/v1/gonum/mat"

	"github.com/smtd/smtd/spectral"
)

// Defaults of WordEmbedSettings.
const (
	DefaultWordDim      = 128
	DefaultWordMinCount = 10
	DefaultWordTol      = 1e-6
	DefaultWordKeep     = 8
)

// PairWeighting selects the weight of an edge of the co-occurrence graph
// in WordStats.Embed.
type PairWeighting int

const (
	// WeightPPMI (the default) weights the edge {a, b} by the positive
	// pointwise mutual information of the pair,
	//
	//	W_ab = max(0, log(C_ab·T / (d_a·d_b))),  d_a = Σ_b C_ab,  T = Σ_a d_a,
	//
	// and normalises by the weighted degrees, V = diag(W·1)/ΣW: the
	// normalised spectral embedding of the PPMI graph (Shi and Malik's
	// normalised cut), eigenvalues in [0, 2]. With raw counts the
	// frequent words dominate C (the, of, and meet everything), and the
	// words a word meets more often than chance are what makes two
	// neighbourhoods alike (Levy and Goldberg 2014). For W = C the
	// degree d_a is 2·Window·c_a up to sentence ends and repeated words,
	// so this V is then the paper's.
	WeightPPMI PairWeighting = iota
	// WeightCounts is the paper's problem as it stands (smt-minimalistic
	// App. B): W = C, V = diag(c)/N, L = (diag(C·1) − C)/M, the pencil of
	// WordStats itself, restricted to the words kept.
	WeightCounts
)

var weightingNames = [...]string{WeightPPMI: "ppmi", WeightCounts: "counts"}

// String returns "ppmi" or "counts".
func (w PairWeighting) String() string {
	if w >= 0 && int(w) < len(weightingNames) {
		return weightingNames[w]
	}
	return fmt.Sprintf("PairWeighting(%d)", int(w))
}

// ParsePairWeighting returns the weighting named "ppmi" or "counts".
func ParsePairWeighting(name string) (PairWeighting, error) {
	for w, n := range weightingNames {
		if n == name {
			return PairWeighting(w), nil
		}
	}
	return 0, fmt.Errorf("sgd: pair weighting %q: want ppmi or counts", name)
}

// WordEmbedSettings configures WordStats.Embed. A zero field means its
// documented default.
//
// Measured on the Brown corpus (`smtd bench words`, BENCHMARKS.md): the
// weighting matters most. With WeightCounts the neighbour lists are
// mostly noise (monday: sunday, saturday, ballot, vice, stickney, ...;
// mother: nephew, stuffed, hitting, ...) whatever the other settings,
// with WeightPPMI they are mostly semantic (monday: tuesday, saturday,
// friday, thursday, ...; church: presbyterian, catholic, methodist,
// ...). MinCount 10 instead of 5 removes most of the remaining noise,
// rare words with a few strong pairs (monday: ..., plantations,
// proclaim; three: ..., sixty-one, bull's-eyes), and leaves 8,471 of the
// 14,140 words seen 5 times or more. At MinCount 5, dropping 8 more
// eigenvectors, or 64 dimensions instead of 128, made the lists worse,
// and context distribution smoothing (d_b^0.75) changed little.
type WordEmbedSettings struct {
	// Dim is the embedding dimension, the rows of P. Zero means
	// DefaultWordDim (128).
	Dim int
	// Drop is the number of smallest eigenvectors skipped after the first
	// one, which is always skipped: it is the constant function
	// (eigenvalue 0, L is a graph Laplacian), the same for every word, so
	// it only adds a common offset that pulls every cosine towards 1.
	// The next ones are indicators of the (nearly) disconnected parts of
	// the co-occurrence graph (a foreign phrase, a table of names),
	// localised on a handful of words. Zero keeps them; it must be >= 0.
	Drop int
	// MinCount is the count c_a (after forgetting) below which a word is
	// left out of the problem, with its pairs: it gets a zero column. The
	// co-occurrences of rarer words are too few to place them. Zero means
	// DefaultWordMinCount (10); it must be >= 0 and finite, and any count
	// up to 1 keeps every word seen.
	MinCount float64
	// Weighting is the weight of the pairs. The zero value is WeightPPMI.
	Weighting PairWeighting
	// Lanczos configures the eigensolver; a zero Tol means
	// DefaultWordTol (1e-6), looser than spectral's default, which the
	// neighbour lists do not need, and a zero Keep means DefaultWordKeep
	// (8): the wanted end of the spectrum is a dense cluster (on the Brown
	// corpus the 129 smallest eigenvalues lie in [0, 0.790], the next 70
	// below 0.800, the top near 1.2), which the Krylov space resolves
	// only after about 1,100 steps whatever is kept at a restart, so the
	// thick restarts should be few and cheap (spectral.LanczosSettings.Keep).
	// Embed always sets Partial, which orthogonalises about one step in
	// four of those 1,100 against the whole basis instead of every one.
	Lanczos spectral.LanczosSettings
}

// Validate reports whether the settings are usable.
func (s WordEmbedSettings) Validate() error {
	switch {
	case s.Dim < 0:
		return fmt.Errorf("sgd: word embedding dimension %d: must be >= 0 (0 means %d)", s.Dim, DefaultWordDim)
	case s.Drop < 0:
		return fmt.Errorf("sgd: word embedding drop %d: must be >= 0", s.Drop)
	case !(s.MinCount >= 0) || math.IsInf(s.MinCount, 1):
		return fmt.Errorf("sgd: word embedding min count %v: must be >= 0 and finite", s.MinCount)
	case s.Weighting < WeightPPMI || s.Weighting > WeightCounts:
		return fmt.Errorf("sgd: unknown %v", s.Weighting)
	}
	return s.Lanczos.Validate()
}

func (s WordEmbedSettings) withDefaults() WordEmbedSettings {
	if s.Dim == 0 {
		s.Dim = DefaultWordDim
	}
	if s.MinCount == 0 {
		s.MinCount = DefaultWordMinCount
	}
	if s.Lanczos.Tol == 0 {
		s.Lanczos.Tol = DefaultWordTol
	}
	if s.Lanczos.Keep == 0 {
		s.Lanczos.Keep = DefaultWordKeep
	}
	s.Lanczos.Partial = true
	return s
}

// Embed writes into dst (Dim×Words, or empty) the word embeddings: the
// closed-form SMT solution (spectral.SolveSMT) on the co-occurrence graph
// of the words counted at least MinCount times, the pairs weighted by
// Weighting,
//
//	P = Uᵀ V^(−1/2),  U the eigenvectors 2 ... Dim+Drop+1 (ascending)
//	                  of V^(−1/2) L V^(−1/2),  L = (diag(W·1) − W)/ΣW
//
// (WeightCounts: L = (diag(C·1) − C)/M, V = diag(c)/N), so that column a
// of P is the embedding of slot a (smt-minimalistic App. B: β = P e_a).
// Other slots get zero columns, and so do words whose every pair has a
// zero weight. This is the normalised spectral embedding of the graph:
// two words are close when their neighbourhoods are, whether or not they
// meet each other. The cosine of two columns does not depend on the
// V^(−1/2) factor, only on the rows of U.
//
// The product with L runs on a compressed copy of the restricted pairs
// (12 bytes per pair, half as much as the table), made once per call. The Result's Dropped include the skipped first
// eigenvector. It returns the errors of spectral.SolveSMT, and panics if
// the settings are invalid or dst has another shape.
func (ws *WordStats) Embed(dst *mat.Dense, s WordEmbedSettings, src rand.Source) (spectral.Result, error) {
	if err := s.Validate(); err != nil {
		panic(err)
	}
	s = s.withDefaults()
	pb := newWordPencil(ws, s.MinCount, s.Weighting)
	return spectral.SolveSMT(dst, pb, spectral.Settings{Dim: s.Dim, Drop: s.Drop + 1, Lanczos: s.Lanczos}, src)
}

// wordPencil is the SMT pencil of a WordStats restricted to the words
// counted at least minCount times, with the weights W (symmetric) in
// compressed sparse rows of its strict upper triangle, each pair once:
//
//	V = diag(v),  L x = scal·(diag(deg) − W) x.
type wordPencil struct {
	v    []float64 // diagonal of V (zero for words left out)
	deg  []float64 // Σ_b W_ab
	ptr  []int     // row a of W above the diagonal is col[ptr[a]:ptr[a+1]], val[...], columns ascending
	col  []int32
	val  []float64
	scal float64
}

func newWordPencil(ws *WordStats, minCount float64, weighting PairWeighting) *wordPencil {
	n := ws.s.Words
	pb := &wordPencil{v: make([]float64, n), deg: make([]float64, n), ptr: make([]int, n+1)}
	keep := make([]bool, n)
	for a, c := range ws.vd {
		keep[a] = c > 0 && c*ws.g >= minCount
	}
	// live reports the slots a < b of a pair to keep.
	live := func(p *wordPair) (a, b int, ok bool) {
		if p.key == 0 || ws.stale(p) {
			return 0, 0, false
		}
		a, b = pairSlots(p.key)
		return a, b, keep[a] && keep[b]
	}
	for i := range ws.tab {
		if a, _, ok := live(&ws.tab[i]); ok {
			pb.ptr[a+1]++
		}
	}
	for a := range n {
		pb.ptr[a+1] += pb.ptr[a]
	}
	pb.col = make([]int32, pb.ptr[n])
	pb.val = make([]float64, pb.ptr[n])
	next := slices.Clone(pb.ptr[:n])
	for i := range ws.tab {
		p := &ws.tab[i]
		a, b, ok := live(p)
		if !ok {
			continue
		}
		pb.col[next[a]], pb.val[next[a]] = int32(b), p.w
		next[a]++
	}
	// Rows sorted by column: the products then do not depend on the
	// layout of the table. The columns of a row are distinct, so the
	// row sorts as the keys col<<32 | position, plain integers that
	// slices.Sort orders without a comparison function (three times as
	// fast on the Brown corpus).
	var keys []uint64
	var vals []float64
	for a := range n {
		lo, hi := pb.ptr[a], pb.ptr[a+1]
		keys, vals = keys[:0], append(vals[:0], pb.val[lo:hi]...)
		for k := lo; k < hi; k++ {
			keys = append(keys, uint64(pb.col[k])<<32|uint64(k-lo))
		}
		slices.Sort(keys)
		for k, key := range keys {
			pb.col[lo+k], pb.val[lo+k] = int32(key>>32), vals[key&math.MaxUint32]
		}
	}
	pb.sumDegrees()

	switch weighting {
	case WeightCounts:
		// V = c/N and L = (diag(C·1) − C)/M, in stored units.
		var inv float64
		if ws.w != 0 {
			inv = 1 / ws.w
		}
		for a, c := range ws.vd {
			if keep[a] {
				pb.v[a] = c * inv
			}
		}
		if ws.wp != 0 {
			pb.scal = 1 / ws.wp
		}
	default:
		t := 0.0
		for _, d := range pb.deg {
			t += d
		}
		for a := range n {
			for k := pb.ptr[a]; k < pb.ptr[a+1]; k++ {
				pb.val[k] = max(0, math.Log(pb.val[k]*t/(pb.deg[a]*pb.deg[pb.col[k]])))
			}
		}
		pb.sumDegrees()
		tw := 0.0
		for _, d := range pb.deg {
			tw += d
		}
		if tw > 0 {
			pb.scal = 1 / tw
			for a, d := range pb.deg {
				pb.v[a] = d / tw
			}
		}
	}
	return pb
}

// sumDegrees sets deg to the row sums of W, each over the columns in
// ascending order: row a's entries below the diagonal, stored in the
// earlier rows b < a, are added as those rows are passed, then its own.
func (pb *wordPencil) sumDegrees() {
	clear(pb.deg)
	for a := range pb.deg {
		d := pb.deg[a]
		for k := pb.ptr[a]; k < pb.ptr[a+1]; k++ {
			x := pb.val[k]
			d += x
			pb.deg[pb.col[k]] += x
		}
		pb.deg[a] = d
	}
}

func (pb *wordPencil) Size() int                     { return len(pb.v) }
func (pb *wordPencil) DiagonalV() bool               { return true }
func (pb *wordPencil) DiagV(dst []float64) []float64 { return normalised(dst, pb.v, 1) }

func (pb *wordPencil) MulV(dst *mat.Dense, x mat.Matrix) {
	xr, dr := pencilShapes(len(pb.v), dst, x)
	for a, f := range pb.v {
		for j := range xr.Cols {
			dr.Data[a*dr.Stride+j] = f * xr.Data[a*xr.Stride+j]
		}
	}
}

// MulL writes (L x)_a = scal·(deg_a x_a − Σ_b W_ab x_b), the sum over b
// ascending: the terms b < a come from the stored rows b, passed first,
// which add them to dst_a as it accumulates.
func (pb *wordPencil) MulL(dst *mat.Dense, x mat.Matrix) {
	xr, dr := pencilShapes(len(pb.v), dst, x)
	c := xr.Cols
	if c == 1 {
		// dst_a holds Σ_{b<a} W_ab x_b until row a is passed.
		for a := range pb.v {
			dr.Data[a*dr.Stride] = 0
		}
		for a := range pb.v {
			xa := xr.Data[a*xr.Stride]
			s := dr.Data[a*dr.Stride]
			for k := pb.ptr[a]; k < pb.ptr[a+1]; k++ {
				f, b := pb.val[k], int(pb.col[k])
				s += f * xr.Data[b*xr.Stride]
				dr.Data[b*dr.Stride] += f * xa
			}
			dr.Data[a*dr.Stride] = pb.scal * (pb.deg[a]*xa - s)
		}
		return
	}
	// dst_a holds deg_a x_a − Σ_{b<a} W_ab x_b until row a is passed.
	for a, d := range pb.deg {
		da := dr.Data[a*dr.Stride : a*dr.Stride+c]
		xa := xr.Data[a*xr.Stride : a*xr.Stride+c]
		for j := range da {
			da[j] = d * xa[j]
		}
	}
	for a := range pb.v {
		da := dr.Data[a*dr.Stride : a*dr.Stride+c]
		xa := xr.Data[a*xr.Stride : a*xr.Stride+c]
		for k := pb.ptr[a]; k < pb.ptr[a+1]; k++ {
			f, b := pb.val[k], int(pb.col[k])
			xb := xr.Data[b*xr.Stride : b*xr.Stride+c]
			db := dr.Data[b*dr.Stride : b*dr.Stride+c]
			for j := range da {
				da[j] -= f * xb[j]
				db[j] -= f * xa[j]
			}
		}
		for j := range da {
			da[j] *= pb.scal
		}
	}
}

var _ spectral.Restrictor = (*wordPencil)(nil)

// Restrict returns Q = V^(−1/2) L V^(−1/2) on the used words, its
// diagonal and its strict upper triangle in compressed sparse rows with
// the scaling folded in,
//
//	Q_ii = scal·deg_a·s_i²,  Q_ij = −scal·W_ab·s_i·s_j  (a = used[i], b = used[j], j > i),
//
// without the zero weights (PPMI clips the pairs that meet less often
// than chance to zero, most of the stored pairs of the frequent words).
// It is MulL between the scattering and the gathering of SolveSMT's
// matrix-free operator, up to the order of the floating-point products,
// on vectors of the used words only: on the Brown corpus 8,471 of 50,000
// slots, so the Lanczos vectors stay in cache. Q is symmetric, and its
// product, about 1,500 of which make a solve, costs in proportion to
// the stored entries (12 bytes each): storing each pair once, 706,579
// entries instead of 1,413,158 on the Brown corpus, makes it about twice
// as fast. Their bytes do not bound it: with float32 values (8 bytes an
// entry) it was no faster (BENCHMARKS.md).
func (pb *wordPencil) Restrict(used []int, scale []float64) spectral.Operator {
	idx := make([]int32, len(pb.v))
	for a := range idx {
		idx[a] = -1
	}
	for i, a := range used {
		idx[a] = int32(i)
	}
	upper := func(i, k int) (int32, bool) {
		j := idx[pb.col[k]]
		return j, pb.val[k] != 0 && j > int32(i)
	}
	op := &wordOperator{diag: make([]float64, len(used)), ptr: make([]int, len(used)+1)}
	for i, a := range used {
		for k := pb.ptr[a]; k < pb.ptr[a+1]; k++ {
			if _, ok := upper(i, k); ok {
				op.ptr[i+1]++
			}
		}
		op.ptr[i+1] += op.ptr[i]
	}
	op.col = make([]int32, op.ptr[len(used)])
	op.val = make([]float64, op.ptr[len(used)])
	for i, a := range used {
		si := scale[i]
		op.diag[i] = pb.scal * pb.deg[a] * si * si
		next := op.ptr[i]
		for k := pb.ptr[a]; k < pb.ptr[a+1]; k++ {
			j, ok := upper(i, k)
			if !ok {
				continue
			}
			op.col[next], op.val[next] = j, -pb.scal*pb.val[k]*si*scale[j]
			next++
		}
	}
	op.split()
	return op
}

// wordOperator is Q of a wordPencil on the used words (Restrict): a
// diagonal and the strict upper triangle in compressed sparse rows, row
// i col[ptr[i]:ptr[i+1]], val[...], columns ascending and above i.
//
// Apply splits the rows into operatorParts ranges of about as many
// entries each, lo[p] ≤ i < lo[p+1], run on up to GOMAXPROCS goroutines.
// Range p writes the rows it gathers and the rows above them it scatters
// to, lo[p] ≤ j < n, so each range but the first accumulates in a vector
// of its own, added in range order once all are done: the sums, and so
// the embeddings, are the same whatever the number of cores. On two Zen
// 2 cores BenchmarkWordOperatorApply, of the Brown corpus's shape, takes
// 0.60 ms against 1.14 on one, and the whole word solve about 0.8 of its
// time on one (BENCHMARKS.md).
type wordOperator struct {
	diag []float64
	ptr  []int
	col  []int32
	val  []float64
	lo   [operatorParts + 1]int
	acc  [operatorParts - 1][]float64 // accumulators of ranges 1, 2, …
}

// operatorParts is the number of row ranges of a wordOperator product:
// fixed, so that its rounding does not depend on the cores.
const operatorParts = 4

func (op *wordOperator) Size() int { return len(op.diag) }

// split sets the row ranges to about nnz/operatorParts entries each and
// makes their accumulators.
func (op *wordOperator) split() {
	n := len(op.diag)
	nnz := op.ptr[n]
	i := 0
	for p := 1; p < operatorParts; p++ {
		for i < n && op.ptr[i]*operatorParts < p*nnz {
			i++
		}
		op.lo[p] = i
		op.acc[p-1] = make([]float64, n)
	}
	op.lo[operatorParts] = n
}

// Apply sets dst = Q x, each stored entry Q_ij (j > i) used for both
// (Q x)_i += Q_ij x_j and (Q x)_j += Q_ij x_i. It is not safe for
// concurrent use: the ranges' accumulators are the operator's.
func (op *wordOperator) Apply(dst, x []float64) {
	n := len(op.diag)
	x, dst = x[:n], dst[:n]
	part := func(p int) {
		acc := dst
		if p > 0 {
			acc = op.acc[p-1]
		}
		op.applyRows(acc, x, op.lo[p], op.lo[p+1])
	}
	workers := min(runtime.GOMAXPROCS(0), operatorParts)
	var wg sync.WaitGroup
	for w := 1; w < workers; w++ {
		wg.Go(func() {
			for p := w; p < operatorParts; p += workers {
				part(p)
			}
		})
	}
	for p := 0; p < operatorParts; p += workers {
		part(p)
	}
	wg.Wait()
	for p := 1; p < operatorParts; p++ {
		acc := op.acc[p-1]
		for j := op.lo[p]; j < n; j++ {
			dst[j] += acc[j]
		}
	}
}

// applyRows sets acc_j, lo ≤ j < n, to the part of (Q x)_j of rows lo..hi−1:
// acc_i = Q_ii x_i + Σ_j Q_ij x_j for lo ≤ i < hi, plus Q_ij x_i for each
// stored entry, which is all acc_j holds for j ≥ hi.
func (op *wordOperator) applyRows(acc, x []float64, lo, hi int) {
	clear(acc[lo:])
	for i := lo; i < hi; i++ {
		xi := x[i]
		col, val := op.col[op.ptr[i]:op.ptr[i+1]], op.val[op.ptr[i]:op.ptr[i+1]]
		val = val[:len(col)]
		s := op.diag[i] * xi
		for k, j := range col {
			v := val[k]
			s += v * x[j]
			acc[j] += v * xi
		}
		acc[i] += s
	}
}

// pencilShapes checks x (n×c) and dst (the same, or empty: then sized)
// and returns their raw matrices.
func pencilShapes(n int, dst *mat.Dense, x mat.Matrix) (xr, dr blas64.General) {
	r, c := x.Dims()
	if r != n {
		panic(mat.ErrShape)
	}
	if dst.IsEmpty() {
		dst.ReuseAs(r, c)
	} else if dr, dc := dst.Dims(); dr != r || dc != c {
		panic(mat.ErrShape)
	}
	return denseOf(x).RawMatrix(), dst.RawMatrix()
}

// Neighbour is a word of a neighbour list and its cosine similarity to
// the query.
type Neighbour struct {
	ID     int
	Cosine float64
}

// WordVectors holds word embeddings normalised for cosine queries. It is
// immutable: its methods may run concurrently.
type WordVectors struct {
	// unit holds a row for each slot whose column of P is not zero, in
	// ascending slot order, scaled to unit length if the slot is used;
	// nil if there is none. Only those rows are stored: on the Brown
	// corpus 8,471 of 50,000 slots, so that a neighbour query reads a
	// sixth of what a row per slot would.
	unit  *mat.Dense
	slots []int   // slot of each row of unit
	row   []int32 // row of unit of each slot, −1 if none
	used  []bool  // slot has a unit vector
	dim   int
}

// NewWordVectors returns the word vectors of the columns of p (dim×words,
// as written by WordStats.Embed): column a, scaled to unit length, is the
// vector of slot a; zero columns are unused slots, never returned as
// neighbours.
func NewWordVectors(p mat.Matrix) *WordVectors {
	pd, ok := p.(*mat.Dense)
	if !ok {
		pd = mat.DenseCopyOf(p)
	}
	raw := pd.RawMatrix()
	dim, n := raw.Rows, raw.Cols
	wv := &WordVectors{row: make([]int32, n), used: make([]bool, n), dim: dim}
	written := wv.used // slots whose column is not zero; used is set below
	for r := range dim {
		for a, x := range raw.Data[r*raw.Stride : r*raw.Stride+n] {
			if x != 0 {
				written[a] = true
			}
		}
	}
	for a, w := range written {
		wv.row[a] = -1
		if w {
			wv.row[a] = int32(len(wv.slots))
			wv.slots = append(wv.slots, a)
		}
	}
	if len(wv.slots) == 0 {
		return wv
	}
	// The transpose of the written columns, row by row of p.
	wv.unit = mat.NewDense(len(wv.slots), dim, nil)
	ur := wv.unit.RawMatrix()
	for r := range dim {
		pr := raw.Data[r*raw.Stride : r*raw.Stride+n]
		for i, a := range wv.slots {
			ur.Data[i*ur.Stride+r] = pr[a]
		}
	}
	for i, a := range wv.slots {
		row := wv.unit.RawRowView(i)
		s := 0.0
		for _, x := range row {
			s += x * x
		}
		wv.used[a] = s > 0
		if s > 0 {
			f := 1 / math.Sqrt(s)
			for j := range row {
				row[j] *= f
			}
		}
	}
	return wv
}

// Len returns the number of slots.
func (wv *WordVectors) Len() int { return len(wv.used) }

// Used reports whether slot id has a vector.
func (wv *WordVectors) Used(id int) bool { return wv.used[id] }

// Vector returns a copy of the unit vector of slot id (zero if unused).
func (wv *WordVectors) Vector(id int) []float64 {
	if i := wv.row[id]; i >= 0 {
		return slices.Clone(wv.unit.RawRowView(int(i)))
	}
	return make([]float64, wv.dim)
}

// Neighbours returns in dst (reused if it has the capacity) the k words
// nearest to each query word by cosine similarity, most similar first
// (ties by smaller id), the query itself and unused slots excluded:
// dst[i] is the list of ids[i], empty if that slot is unused. All
// similarities of the batch come from one product of the query vectors
// with the vector matrix. It panics if an id is out of range or k < 1.
func (wv *WordVectors) Neighbours(dst [][]Neighbour, ids []int, k int) [][]Neighbour {
	if k < 1 {
		panic(fmt.Sprintf("sgd: %d neighbours", k))
	}
	n := len(wv.used)
	for _, id := range ids {
		if id < 0 || id >= n {
			panic(fmt.Sprintf("sgd: word slot %d out of range [0, %d)", id, n))
		}
	}
	dst = grow(dst, len(ids))
	if len(ids) == 0 {
		return dst
	}
	var sims mat.Dense
	if wv.unit != nil {
		q := mat.NewDense(len(ids), wv.dim, nil)
		for i, id := range ids {
			if r := wv.row[id]; r >= 0 {
				q.SetRow(i, wv.unit.RawRowView(int(r)))
			}
		}
		sims.Mul(q, wv.unit.T())
	}
	var h neighbourHeap
	for i, id := range ids {
		h = h[:0]
		if wv.used[id] {
			for r, c := range sims.RawRowView(i) {
				b := wv.slots[r]
				if b == id || !wv.used[b] {
					continue
				}
				nb := Neighbour{ID: b, Cosine: c}
				if len(h) < k {
					heap.Push(&h, nb)
				} else if worse(h[0], nb) {
					h[0] = nb
					heap.Fix(&h, 0)
				}
			}
		}
		out := dst[i][:0]
		out = append(out, h...)
		slices.SortFunc(out, func(x, y Neighbour) int {
			if worse(x, y) {
				return 1
			}
			if worse(y, x) {
				return -1
			}
			return 0
		})
		dst[i] = out
	}
	return dst
}

// worse reports whether x ranks after y: lower cosine, or equal cosine
// and larger id.
func worse(x, y Neighbour) bool {
	return x.Cosine < y.Cosine || x.Cosine == y.Cosine && x.ID > y.ID
}

// neighbourHeap is a heap whose root is the worst neighbour kept.
type neighbourHeap []Neighbour

func (h neighbourHeap) Len() int           { return len(h) }
func (h neighbourHeap) Less(i, j int) bool { return worse(h[i], h[j]) }
func (h neighbourHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *neighbourHeap) Push(x any)        { *h = append(*h, x.(Neighbour)) }
func (h *neighbourHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
