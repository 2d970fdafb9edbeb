package sgd

import (
	"fmt"
	"math"
	"slices"

	"gonum.org/v1/gonum/mat"

	"github.com/smtd/smtd/internal/finite"
	"github.com/smtd/smtd/internal/state"
	"github.com/smtd/smtd/online"
)

// StatsSettings configures Stats. K, Blank, Range, MultiHot and VOnly fix
// what the statistics mean and cannot change; Memory may be tuned live
// with SetSettings. A zero field means its documented default.
type StatsSettings struct {
	// K is the number of atoms of the dictionary the codes come from.
	// Required. The statistics have K atoms, K+1 with BlankAtom.
	K int
	// Blank is how blank patches enter the statistics. The zero value is
	// BlankAtom.
	Blank BlankMode
	// Range is the context range d of the first-order neighbour term, in
	// grid positions: two patches of one image are neighbours when their
	// grid rows and columns each differ by at most d (smt-minimalistic,
	// section 2 and App. G: n(ij) = {lm : |i−l| ≤ d, |j−m| ≤ d}). For
	// sequences (AddSequencesVQ) it is the window: tokens at most d apart
	// are neighbours. Zero means the whole image (or sequence): every two
	// patches of an image are neighbours, as is any d ≥ grid size − 1.
	// It must be >= 0.
	Range int
	// MultiHot keeps the off-diagonal part of V, which codes with more
	// than one atom per row (f_gq) need: n(n−1)/2 more float64s. Without
	// it V is diagonal and multi-hot codes panic.
	MultiHot bool
	// VOnly keeps only V and not the neighbour term ADDᵀAᵀ, saving its
	// n(n−1)/2 float64s (1.07 GB at K = 16384). The SGD step needs only V
	// (it computes the minibatch's neighbour term from the codes); the
	// closed-form solve (package spectral) needs both.
	VOnly bool
	// Memory is the number of counted rows (patches with a code) the
	// statistics average over once the stream is long: before each
	// minibatch of n counted rows every sum is multiplied by
	// exp(−n/Memory), so the statistics follow a dictionary that still
	// moves, with a memory that does not depend on how the stream is cut
	// into minibatches. Zero or +Inf means never forget; it must be >= 0.
	Memory float64
}

// Validate reports whether the settings are usable.
func (s StatsSettings) Validate() error {
	switch {
	case s.K < 1:
		return fmt.Errorf("sgd: stats K = %d: must be >= 1", s.K)
	case !s.Blank.valid():
		return fmt.Errorf("sgd: stats %v: want atom or skip", s.Blank)
	case s.Range < 0:
		return fmt.Errorf("sgd: stats range %d: must be >= 0 (0 means the whole image)", s.Range)
	case !(s.Memory >= 0):
		return fmt.Errorf("sgd: stats memory %v: must be >= 0 (0 means never forget)", s.Memory)
	}
	return nil
}

// renormBelow is the lazy forgetting factor below which the stored sums
// are rescaled (see Stats).
const renormBelow = 1e-150

// Stats accumulates, one minibatch at a time, the two matrices of the
// sparse manifold transform (sparse-manifold-transform, eq. 8;
// smt-minimalistic, eq. 3), as averages:
//
//	V = (1/N) A Aᵀ = E[ααᵀ]
//	L = (1/M) A D Dᵀ Aᵀ = (1/M) Σ_k (A d_k)(A d_k)ᵀ
//
// where the columns α of A are the codes of the N counted rows (patches
// with a code; see BlankMode) and d_k are the M columns of the
// differential operator D. For first-order (spatial or window) neighbours
// D has one column per unordered pair {i, j} of neighbouring rows,
// d = e_i − e_j, so
//
//	L = (1/M) Σ_{i<j neighbours} (α_i − α_j)(α_i − α_j)ᵀ,
//
// the mean squared difference of neighbouring codes. The papers leave the
// scale of ADDᵀAᵀ open (it does not change the eigenvectors); dividing by
// the number of pairs M keeps the spectrum of V⁻¹L of order one whatever
// the context range (at most about 2·max_a deg_a/mean deg for 1-hot
// codes, deg_a the mean number of neighbours of a patch of atom a), so
// one SGD learning rate suits every range. The objective tr(PLPᵀ) is the
// mean squared distance between the embeddings of neighbours.
//
// for second-order temporal neighbours (AddTemporalVQ) one column per
// frame t, with d = −½e_{t−1} + e_t − ½e_{t+1}. With 1-hot f_vq codes no
// dense product is needed: V is diagonal (the atom frequencies) and L is
// the Laplacian of the atom co-occurrence graph, so a pair of patches with
// atoms a ≠ b adds 1 to L_aa and L_bb and −1 to L_ab (a pair with a = b
// adds nothing). When the whole image is the context the pairs of an image
// with n counted rows, atom histogram s and Σα_iα_iᵀ = H are summed in
// closed form, n·H − s·sᵀ, from the histogram.
//
// Storage: the diagonals are n-vectors; the off-diagonal parts of L (and
// of V with MultiHot) are strict upper triangles, n(n−1)/2 float64s each
// (n = K or K+1): 67 MB at K = 4096, 1.07 GB at K = 16384, bounded
// whatever the length of the stream. float32 would halve that but stalls:
// a count above 2^24 no longer grows by 1, which a long stream without
// forgetting reaches; a sparse hash of pairs costs 2-3 times more per
// entry than the triangle once a fifth of the pairs occur, which MNIST
// reaches. Serialisation writes only the non-zero entries.
//
// Forgetting is lazy: the stored sums are the true sums divided by a
// factor g that shrinks at each minibatch, so a minibatch costs only its
// own updates; the stored sums are rescaled when g gets tiny.
//
// The Add methods, SetSettings and UnmarshalBinary modify the statistics;
// the other methods only read them and may run concurrently with each
// other (MulL and MulV allocate nothing shared).
type Stats struct {
	s StatsSettings
	n int

	g  float64   // true sums = stored sums · g
	w  float64   // stored weight: counted rows
	wp float64   // stored weight: columns of D
	vd []float64 // stored diag of A Aᵀ
	vo tri       // stored off-diagonal of A Aᵀ (MultiHot)
	ld []float64 // stored diag of A D Dᵀ Aᵀ
	lo tri       // stored off-diagonal of A D Dᵀ Aᵀ (unless VOnly)

	rows    int64 // counted rows added
	pairs   int64 // columns of D added
	bp      int64 // columns of D of the minibatch being added
	batches int64 // minibatches with at least one counted row

	// Each atom's neighbour pairs in the last minibatch of 1-hot image or
	// sequence codes, and their number (BatchDegrees). Not serialised:
	// every SGD step follows the Add of its minibatch.
	lastDeg   []float64
	lastPairs int64
	sat       []int // workspace: summed-area table of the coded rows

	c       csr       // workspace: codes of the batch
	cnt     []float64 // workspace: per-atom histogram, zero between uses
	touched []int     // workspace: atoms with cnt ≠ 0
	u, tmp  spvec     // workspace: a column A·d
	seg     []segment // workspace
	cat     []int     // workspace: the three frames of AddTemporalVQ
}

// NewStats returns empty statistics. It allocates the triangles at once
// (see Stats for their size). It panics if the settings are invalid.
func NewStats(s StatsSettings) *Stats {
	if err := s.Validate(); err != nil {
		panic(err)
	}
	n := s.Blank.atoms(s.K)
	st := &Stats{s: s, n: n, g: 1, vd: make([]float64, n), ld: make([]float64, n), cnt: make([]float64, n)}
	if s.MultiHot {
		st.vo = newTri(n)
	}
	if !s.VOnly {
		st.lo = newTri(n)
	}
	return st
}

// Settings returns the current settings.
func (st *Stats) Settings() StatsSettings { return st.s }

// SetSettings replaces Memory for live tuning. It refuses any other
// change.
func (st *Stats) SetSettings(s StatsSettings) error {
	if err := s.Validate(); err != nil {
		return err
	}
	if s.K != st.s.K || s.Blank != st.s.Blank || s.Range != st.s.Range || s.MultiHot != st.s.MultiHot || s.VOnly != st.s.VOnly {
		return fmt.Errorf("sgd: stats K, blank, range, multi-hot and V-only cannot change live")
	}
	st.s = s
	return nil
}

// Size returns the number of atoms n of the statistics: K, or K+1 with
// BlankAtom (the blank atom is the last).
func (st *Stats) Size() int { return st.n }

// Weight returns the number of counted rows the statistics hold, after
// forgetting.
func (st *Stats) Weight() float64 { return st.w * st.g }

// Rows returns the number of counted rows added.
func (st *Stats) Rows() int64 { return st.rows }

// Pairs returns the number of columns of D added (neighbour pairs, or
// frames for the temporal form).
func (st *Stats) Pairs() int64 { return st.pairs }

// Batches returns the number of minibatches added (those without a
// counted row are not counted).
func (st *Stats) Batches() int64 { return st.batches }

// DiagonalV reports whether V is diagonal, that is, whether the
// statistics were made for 1-hot codes (not MultiHot).
func (st *Stats) DiagonalV() bool { return !st.s.MultiHot }

// HasL reports whether the neighbour term L is kept (not VOnly).
func (st *Stats) HasL() bool { return !st.s.VOnly }

// DiagV writes the diagonal of V, the frequency of each atom per counted
// row, into dst if it has length Size() (else into a new slice). It is
// zero before any row is added.
func (st *Stats) DiagV(dst []float64) []float64 { return normalised(dst, st.vd, st.w) }

// DiagL writes the diagonal of L into dst if it has length Size() (else
// into a new slice): for 1-hot codes the fraction of neighbour pairs in
// which each atom meets another atom. It is zero with VOnly.
func (st *Stats) DiagL(dst []float64) []float64 { return normalised(dst, st.ld, st.wp) }

// normalised writes sums/weight into dst, or into a new slice if dst has
// another length; zero weight (nothing added yet) gives zeros.
func normalised(dst, sums []float64, weight float64) []float64 {
	if len(dst) != len(sums) {
		dst = make([]float64, len(sums))
	}
	if weight == 0 {
		clear(dst)
		return dst
	}
	inv := 1 / weight
	for a, v := range sums {
		dst[a] = v * inv
	}
	return dst
}

// MulV writes V·x into dst for a Size()×c matrix x; dst must have the
// same shape, or be empty (then it is sized), and must not alias x.
func (st *Stats) MulV(dst *mat.Dense, x mat.Matrix) {
	st.mulSym(dst, x, st.vd, &st.vo, st.s.MultiHot, st.w)
}

// MulL writes L·x into dst for a Size()×c matrix x; dst must have the
// same shape, or be empty (then it is sized), and must not alias x. It
// panics if the statistics are VOnly.
func (st *Stats) MulL(dst *mat.Dense, x mat.Matrix) {
	if st.s.VOnly {
		panic("sgd: Stats.MulL on V-only statistics")
	}
	st.mulSym(dst, x, st.ld, &st.lo, true, st.wp)
}

func (st *Stats) mulSym(dst *mat.Dense, x mat.Matrix, diag []float64, off *tri, hasOff bool, w float64) {
	r, c := x.Dims()
	if r != st.n {
		panic(mat.ErrShape)
	}
	if dst.IsEmpty() {
		dst.ReuseAs(r, c)
	} else if dr, dc := dst.Dims(); dr != r || dc != c {
		panic(mat.ErrShape)
	}
	xd := denseOf(x)
	xr, dr := xd.RawMatrix(), dst.RawMatrix()
	var inv float64
	if w != 0 {
		inv = 1 / w
	}
	for a := 0; a < r; a++ {
		d := diag[a] * inv
		for j := 0; j < c; j++ {
			dr.Data[a*dr.Stride+j] = d * xr.Data[a*xr.Stride+j]
		}
	}
	if hasOff && inv != 0 {
		off.mulAdd(dr, xr, inv)
	}
}

// denseOf returns x as a *mat.Dense, copying only if it is not one.
func denseOf(x mat.Matrix) *mat.Dense {
	if d, ok := x.(*mat.Dense); ok {
		return d
	}
	return mat.DenseCopyOf(x)
}

// VTo writes V into dst, which must be Size()×Size() or empty. It is
// meant for small K (tests, dense reference solves).
func (st *Stats) VTo(dst *mat.SymDense) { st.symTo(dst, st.vd, &st.vo, st.s.MultiHot, st.w) }

// LTo writes L into dst, which must be Size()×Size() or empty. It panics
// if the statistics are VOnly.
func (st *Stats) LTo(dst *mat.SymDense) {
	if st.s.VOnly {
		panic("sgd: Stats.LTo on V-only statistics")
	}
	st.symTo(dst, st.ld, &st.lo, true, st.wp)
}

func (st *Stats) symTo(dst *mat.SymDense, diag []float64, off *tri, hasOff bool, w float64) {
	if dst.IsEmpty() {
		dst.ReuseAsSym(st.n)
	} else if dst.SymmetricDim() != st.n {
		panic(mat.ErrShape)
	}
	var inv float64
	if w != 0 {
		inv = 1 / w
	}
	for a := 0; a < st.n; a++ {
		dst.SetSym(a, a, diag[a]*inv)
		for b := a + 1; b < st.n; b++ {
			v := 0.0
			if hasOff {
				v = off.v[off.at(a, b)] * inv
			}
			dst.SetSym(a, b, v)
		}
	}
}

// segment is one image (or sequence) of a minibatch: its first row and
// its grid shape.
type segment struct{ first, rows, cols int }

// whole reports whether range d takes in the whole grid: 0, or as far as
// the grid reaches.
func (sg segment) whole(d int) bool { return d == 0 || d >= max(sg.rows, sg.cols)-1 }

// imageSegments returns in dst the grids of a minibatch of images laid
// out image after image. It panics with mat.ErrShape if n != images·grid.Len().
func imageSegments(dst []segment, n, images int, g online.PatchGrid) []segment {
	if err := g.Validate(); err != nil {
		panic(err)
	}
	if images < 0 || n != images*g.Len() {
		panic(mat.ErrShape)
	}
	dst = dst[:0]
	for i := 0; i < images; i++ {
		dst = append(dst, segment{first: i * g.Len(), rows: g.Rows(), cols: g.Cols()})
	}
	return dst
}

// sequenceSegments returns in dst the 1×l grids of sequences of the given
// lengths. It panics with mat.ErrShape if they do not sum to n.
func sequenceSegments(dst []segment, n int, lengths []int) []segment {
	dst = dst[:0]
	first := 0
	for _, l := range lengths {
		if l < 0 {
			panic(mat.ErrShape)
		}
		if l > 0 {
			dst = append(dst, segment{first: first, rows: 1, cols: l})
		}
		first += l
	}
	if first != n {
		panic(mat.ErrShape)
	}
	return dst
}

// AddImagesVQ adds a minibatch of images to the statistics: codes holds
// the f_vq code of every patch (online.KMeans.Assign: an atom in [0, K),
// or −1 for a blank patch), images·grid.Len() of them, image after image,
// each image's patches in row-major order of the grid. Neighbours are the
// patches of one image within Range (see StatsSettings).
//
// It panics with mat.ErrShape if len(codes) != images·grid.Len(), and if a
// code is out of range or the grid is invalid.
func (st *Stats) AddImagesVQ(codes []int, images int, grid online.PatchGrid) {
	st.seg = imageSegments(st.seg, len(codes), images, grid)
	st.c.fromVQ(codes, st.s.K, st.s.Blank)
	st.addGrid(st.seg)
}

// AddImagesGQ is AddImagesVQ for f_gq codes (online.KMeans.CodesGQ, one
// code per patch, an empty code for a blank patch). Codes with more than
// one atom need MultiHot. The codes are binary: their cosines are not
// used.
//
// It panics with mat.ErrShape if codes.Rows != images·grid.Len() or
// codes.Atoms != K, and if a code has several atoms without MultiHot.
func (st *Stats) AddImagesGQ(codes *online.SparseCodes, images int, grid online.PatchGrid) {
	st.seg = imageSegments(st.seg, codes.Rows, images, grid)
	st.c.fromGQ(codes, st.s.K, st.s.Blank)
	st.addGrid(st.seg)
}

// AddSequencesVQ adds a minibatch of token sequences (sentences, say):
// codes holds the 1-hot code of every token (an atom in [0, K), or −1 for
// a token to leave out, which BlankAtom maps to the blank atom), the
// sequences one after the other with the given lengths. Tokens of one
// sequence at most Range apart are neighbours (Range zero: the whole
// sequence), the SMT word embedding of smt-minimalistic, App. B.
//
// It panics with mat.ErrShape if the lengths do not sum to len(codes).
func (st *Stats) AddSequencesVQ(codes []int, lengths []int) {
	st.seg = sequenceSegments(st.seg, len(codes), lengths)
	st.c.fromVQ(codes, st.s.K, st.s.Blank)
	st.addGrid(st.seg)
}

// BatchDegrees writes into dst (if it has length Size(), else into a new
// slice) each atom's share of the neighbour pairs of the last minibatch
// added, normalised per column of D as L is,
//
//	d_a = Σ_{rows i coded a} deg_i / pairs,   deg_i the coded neighbours of row i,
//
// for 1-hot image and sequence codes. d_a ≥ (L_b)_aa, the diag of the
// minibatch's L, with equality when no two neighbours share an atom. It
// is zero for other codes, for temporal statistics, and before any
// minibatch has been added since the statistics were made or decoded.
// It does not need the stored L: it is kept with VOnly too.
func (st *Stats) BatchDegrees(dst []float64) []float64 {
	if len(st.lastDeg) != st.n || st.lastPairs == 0 {
		if len(dst) != st.n {
			dst = make([]float64, st.n)
		}
		clear(dst)
		return dst
	}
	return normalised(dst, st.lastDeg, float64(st.lastPairs))
}

// resetDegrees forgets the last minibatch's degrees as another is added.
func (st *Stats) resetDegrees() {
	if len(st.lastDeg) != st.n {
		st.lastDeg = make([]float64, st.n)
	}
	clear(st.lastDeg)
	st.lastPairs = 0
}

// addDegrees counts the coded neighbours of each row of the 1-hot
// minibatch in st.c, whose rows form the given grids, for BatchDegrees:
// the whole grid, or the (2d+1)×(2d+1) window around the row, from a
// summed-area table of the coded rows (O(1) a row whatever d).
func (st *Stats) addDegrees(seg []segment) {
	c := &st.c
	for _, sg := range seg {
		d := st.s.Range
		if sg.whole(d) {
			n := 0
			for i := sg.first; i < sg.first+sg.rows*sg.cols; i++ {
				if !c.empty(i) {
					n++
				}
			}
			for i := sg.first; i < sg.first+sg.rows*sg.cols; i++ {
				if !c.empty(i) {
					st.lastDeg[c.first(i)] += float64(n - 1)
				}
			}
			st.lastPairs += int64(n * (n - 1) / 2)
			continue
		}
		w := sg.cols + 1
		st.sat = grow(st.sat, (sg.rows+1)*w)
		clear(st.sat[:w])
		for r := 0; r < sg.rows; r++ {
			st.sat[(r+1)*w] = 0
			for col := 0; col < sg.cols; col++ {
				coded := 0
				if !c.empty(sg.first + r*sg.cols + col) {
					coded = 1
				}
				st.sat[(r+1)*w+col+1] = coded + st.sat[r*w+col+1] + st.sat[(r+1)*w+col] - st.sat[r*w+col]
			}
		}
		var ends int64
		for r := 0; r < sg.rows; r++ {
			r0, r1 := max(0, r-d), min(sg.rows, r+d+1)
			for col := 0; col < sg.cols; col++ {
				i := sg.first + r*sg.cols + col
				if c.empty(i) {
					continue
				}
				c0, c1 := max(0, col-d), min(sg.cols, col+d+1)
				deg := st.sat[r1*w+c1] - st.sat[r0*w+c1] - st.sat[r1*w+c0] + st.sat[r0*w+c0] - 1
				st.lastDeg[c.first(i)] += float64(deg)
				ends += int64(deg)
			}
		}
		st.lastPairs += ends / 2
	}
}

// commit adds the weights of a minibatch of counted rows and st.bp
// columns of D.
func (st *Stats) commit(counted int, inv float64) {
	st.w += float64(counted) * inv
	st.wp += float64(st.bp) * inv
	st.pairs += st.bp
	st.bp = 0
	st.rows += int64(counted)
	st.batches++
}

// forget multiplies the true sums by exp(−counted/Memory), lazily.
func (st *Stats) forget(counted int) {
	m := st.s.Memory
	if m == 0 || math.IsInf(m, 1) {
		return
	}
	st.g *= math.Exp(-float64(counted) / m)
	if st.g < renormBelow {
		g := st.g
		st.w *= g
		st.wp *= g
		for _, s := range [][]float64{st.vd, st.ld, st.vo.v, st.lo.v} {
			for i := range s {
				s[i] *= g
			}
		}
		st.g = 1
	}
}

// addV adds the code of row i to the stored A Aᵀ with weight inv.
func (st *Stats) addV(i int, inv float64) {
	atoms := st.c.row(i)
	for p, a := range atoms {
		st.vd[a] += inv
		if len(atoms) > 1 {
			if !st.s.MultiHot {
				panic("sgd: multi-hot codes need StatsSettings.MultiHot")
			}
			for _, b := range atoms[p+1:] {
				st.vo.v[st.vo.at(a, b)] += inv
			}
		}
	}
}

// addOuter adds inv·u·uᵀ to the stored A D Dᵀ Aᵀ.
func (st *Stats) addOuter(u *spvec, inv float64) {
	for k, a := range u.idx {
		uk := u.val[k] * inv
		st.ld[a] += uk * u.val[k]
		for l := k + 1; l < len(u.idx); l++ {
			st.lo.v[st.lo.at(a, u.idx[l])] += uk * u.val[l]
		}
	}
}

// addGrid adds the batch in st.c, whose rows form the given grids.
func (st *Stats) addGrid(seg []segment) {
	c := &st.c
	if c.counted == 0 {
		return
	}
	if !c.oneHot && !st.s.MultiHot {
		panic("sgd: multi-hot codes need StatsSettings.MultiHot")
	}
	st.forget(c.counted)
	st.resetDegrees()
	if c.oneHot {
		st.addDegrees(seg)
	}
	inv := 1 / st.g
	for i := 0; i < c.rows(); i++ {
		st.addV(i, inv)
	}
	if !st.s.VOnly {
		for _, sg := range seg {
			d := st.s.Range
			if sg.whole(d) {
				st.addWhole(sg, inv)
			} else if c.oneHot {
				st.addWindowOneHot(sg, d, inv)
			} else {
				st.addWindow(sg, d, inv)
			}
		}
	}
	st.commit(c.counted, inv)
}

// addWindowOneHot adds the pairs of 1-hot codes within range d of one
// grid: a pair with atoms a ≠ b adds 1 to L_aa and L_bb and −1 to L_ab.
func (st *Stats) addWindowOneHot(sg segment, d int, inv float64) {
	c := &st.c
	ld, lo := st.ld, &st.lo
	pair := func(a, j int) {
		if c.empty(j) {
			return
		}
		st.bp++
		if b := c.first(j); a != b {
			ld[a] += inv
			ld[b] += inv
			lo.v[lo.at(a, b)] -= inv
		}
	}
	for r := 0; r < sg.rows; r++ {
		for col := 0; col < sg.cols; col++ {
			i := sg.first + r*sg.cols + col
			if c.empty(i) {
				continue
			}
			a := c.first(i)
			for c2 := col + 1; c2 <= min(sg.cols-1, col+d); c2++ {
				pair(a, i+c2-col)
			}
			for r2 := r + 1; r2 <= min(sg.rows-1, r+d); r2++ {
				base := sg.first + r2*sg.cols
				for c2 := max(0, col-d); c2 <= min(sg.cols-1, col+d); c2++ {
					pair(a, base+c2)
				}
			}
		}
	}
}

// addWindow adds the pairs of multi-hot codes within range d of one grid:
// each pair adds (α_i − α_j)(α_i − α_j)ᵀ.
func (st *Stats) addWindow(sg segment, d int, inv float64) {
	c := &st.c
	pair := func(i, j int) {
		if c.empty(j) {
			return
		}
		st.bp++
		st.u.reset()
		st.u.addRow(c.row(i), 1, &st.tmp)
		st.u.addRow(c.row(j), -1, &st.tmp)
		st.addOuter(&st.u, inv)
	}
	for r := 0; r < sg.rows; r++ {
		for col := 0; col < sg.cols; col++ {
			i := sg.first + r*sg.cols + col
			if c.empty(i) {
				continue
			}
			for c2 := col + 1; c2 <= min(sg.cols-1, col+d); c2++ {
				pair(i, i+c2-col)
			}
			for r2 := r + 1; r2 <= min(sg.rows-1, r+d); r2++ {
				base := sg.first + r2*sg.cols
				for c2 := max(0, col-d); c2 <= min(sg.cols-1, col+d); c2++ {
					pair(i, base+c2)
				}
			}
		}
	}
}

// addWhole adds all pairs of one grid in closed form: with n counted
// rows, H = Σ_i α_iα_iᵀ and s = Σ_i α_i,
//
//	Σ_{i<j} (α_i − α_j)(α_i − α_j)ᵀ = n·H − s·sᵀ,
//
// which for 1-hot codes is n·diag(s) − s·sᵀ: O(u²) for u distinct atoms
// instead of O(n²) pairs.
func (st *Stats) addWhole(sg segment, inv float64) {
	c := &st.c
	n := 0
	st.touched = st.touched[:0]
	for i := sg.first; i < sg.first+sg.rows*sg.cols; i++ {
		if c.empty(i) {
			continue
		}
		n++
		for _, a := range c.row(i) {
			if st.cnt[a] == 0 {
				st.touched = append(st.touched, a)
			}
			st.cnt[a]++
		}
	}
	if n < 2 {
		for _, a := range st.touched {
			st.cnt[a] = 0
		}
		return
	}
	st.bp += int64(n * (n - 1) / 2)
	fn := float64(n) * inv
	if !c.oneHot {
		// n·H: the co-activations within each row.
		for i := sg.first; i < sg.first+sg.rows*sg.cols; i++ {
			atoms := c.row(i)
			for p, a := range atoms {
				for _, b := range atoms[p+1:] {
					st.lo.v[st.lo.at(a, b)] += fn
				}
			}
		}
	}
	for p, a := range st.touched {
		sa := st.cnt[a]
		st.ld[a] += (fn - sa*inv) * sa // n·H_aa − s_a², H_aa = s_a for binary codes
		for _, b := range st.touched[p+1:] {
			st.lo.v[st.lo.at(a, b)] -= sa * st.cnt[b] * inv
		}
	}
	for _, a := range st.touched {
		st.cnt[a] = 0
	}
}

// Clone returns a deep copy of the statistics that shares nothing with
// st. It copies the triangles: as much memory again.
func (st *Stats) Clone() *Stats {
	c := &Stats{
		s: st.s, n: st.n, g: st.g, w: st.w, wp: st.wp,
		vd: slices.Clone(st.vd), ld: slices.Clone(st.ld),
		vo:   tri{n: st.vo.n, v: slices.Clone(st.vo.v)},
		lo:   tri{n: st.lo.n, v: slices.Clone(st.lo.v)},
		rows: st.rows, pairs: st.pairs, batches: st.batches,
		cnt: make([]float64, st.n),
	}
	return c
}

// MarshalBinary encodes the settings and the sums, float64s bit-exact;
// the triangles are written sparsely (only their non-zero entries).
func (st *Stats) MarshalBinary() ([]byte, error) {
	e := state.NewEncoder(make([]byte, 0, 128+16*st.n))
	e.U8(stateVersion)
	e.U8(kindStats)
	e.U64(uint64(st.s.K))
	e.U8(byte(st.s.Blank))
	e.U64(uint64(st.s.Range))
	e.U8(boolByte(st.s.MultiHot))
	e.U8(boolByte(st.s.VOnly))
	e.F64(st.s.Memory)
	e.F64(st.g)
	e.F64(st.w)
	e.F64(st.wp)
	e.I64(st.rows)
	e.I64(st.pairs)
	e.I64(st.batches)
	e.F64s(st.vd)
	e.F64s(st.ld)
	if st.s.MultiHot {
		e.Sparse(st.vo.v)
	}
	if !st.s.VOnly {
		e.Sparse(st.lo.v)
	}
	return e.Bytes(), nil
}

func boolByte(b bool) byte {
	if b {
		return 1
	}
	return 0
}

// UnmarshalBinary restores a state written by MarshalBinary, settings
// included, into st, which must have been made with the same K, Blank,
// Range, MultiHot and VOnly. On error st is unchanged.
func (st *Stats) UnmarshalBinary(data []byte) error {
	d := state.NewDecoder(data)
	if v := d.U8(); v != stateVersion {
		return fmt.Errorf("%w: stats state version %d, want %d", ErrVersion, v, stateVersion)
	}
	if kind := d.U8(); kind != kindStats {
		return fmt.Errorf("%w: not a stats state", ErrFormat)
	}
	s := StatsSettings{K: int(d.U64()), Blank: BlankMode(d.U8()), Range: int(d.U64())}
	s.MultiHot, s.VOnly = d.U8() == 1, d.U8() == 1
	s.Memory = d.F64()
	if d.Bad() || s.K != st.s.K || s.Blank != st.s.Blank || s.Range != st.s.Range || s.MultiHot != st.s.MultiHot || s.VOnly != st.s.VOnly {
		return fmt.Errorf("%w: stats state of K %d, blank %v, range %d, multi-hot %v, V-only %v does not match the receiver's %d, %v, %d, %v, %v",
			ErrFormat, s.K, s.Blank, s.Range, s.MultiHot, s.VOnly, st.s.K, st.s.Blank, st.s.Range, st.s.MultiHot, st.s.VOnly)
	}
	g, w, wp := d.F64(), d.F64(), d.F64()
	rows, pairs, batches := d.I64(), d.I64(), d.I64()
	vd, ld := make([]float64, st.n), make([]float64, st.n)
	d.F64s(vd)
	d.F64s(ld)
	var vo, lo tri
	if s.MultiHot {
		vo = newTri(st.n)
		d.Sparse(vo.v)
	}
	if !s.VOnly {
		lo = newTri(st.n)
		d.Sparse(lo.v)
	}
	if !d.Done() {
		return fmt.Errorf("%w: stats state of %d bytes is truncated or too long", ErrFormat, len(data))
	}
	if err := s.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrFormat, err)
	}
	if !(g > 0) || math.IsInf(g, 0) || !(w >= 0) || math.IsInf(w, 0) || !(wp >= 0) || math.IsInf(wp, 0) || rows < 0 || pairs < 0 || batches < 0 ||
		!finite.All(vd) || !finite.All(ld) || !finite.All(vo.v) || !finite.All(lo.v) {
		return fmt.Errorf("%w: stats values out of range", ErrFormat)
	}
	st.s = s
	st.g, st.w, st.wp = g, w, wp
	st.rows, st.pairs, st.batches = rows, pairs, batches
	st.vd, st.ld, st.vo, st.lo = vd, ld, vo, lo
	st.lastPairs = 0 // no minibatch added since (BatchDegrees)
	return nil
}
