package online

import (
	"math"
	"math/bits"

	"github.com/smtd/smtd/internal/parts"
)

// The int8 prefilter finds the f_vq code of a row (its first atom of
// largest float32 score, as the argmax kernel computes it) with a quarter
// of the kernel's multiply-add instructions, and the same answer bit for
// bit. With AVX-512 VNNI one instruction takes four int8 products per
// lane where a float32 FMA takes one.
//
// Each row x and each atom φ_j (float32, as the kernels see them) is
// quantized with a scale of its own, x ≈ s_x·q_x and φ_j ≈ s_j·q_j with
// q in [−127, 127]^Dim and s = max|coordinate|/127, and
//
//	a_j = s_x·s_j·(q_x·q_j)    (the dot product exact in int32)
//
// is the approximate score. Its error has a bound we know per row:
//
//	|x·φ_j − a_j| ≤ ‖x − s_x·q_x‖·‖φ_j‖ + ‖s_x·q_x‖·‖φ_j − s_j·q_j‖ ≤ e_x,
//
// with the atoms' largest norm and largest quantization error in place of
// ‖φ_j‖ and ‖φ_j − s_j·q_j‖. The float32 score f_j differs from x·φ_j by
// at most τ = fusedTol(Dim). So with m = max_j a_j, the atom J of largest
// f_J, and every atom that ties with it, has
//
//	a_J ≥ f_J − τ − e_x ≥ f_argmax(a) − τ − e_x ≥ m − 2(e_x + τ),
//
// and only the candidates with a_j ≥ m − 2(e_x + τ) need their float32
// score. They are scored by the argmax kernel itself, gathered into
// panels of their own in increasing order: each lane computes its chain
// of fused multiply-adds the same way wherever its atom sits, and the
// first largest score among increasing candidates is the first among all
// atoms. On whitened MNIST patches against 4096 atoms learned from them
// (BenchmarkArgmaxMNIST) a row had 7.9 candidates on average, 0.2% of the
// atoms, and a block of 8 rows 53 together: two panels rescored instead
// of 128.

// prefilterOps are the assembly parts of the prefilter.
type prefilterOps struct {
	// approx writes the approximate scores of one block of 8 quantized
	// rows against the panels of a quantAtoms to s, rows width floats
	// apart, and each row's largest per lane to top[16r…].
	approx func(x []int8, bias []int32, groups int, pack []uint8, scale []float32, panels int, s []float32, width int, top []float32)
	// sel writes, for each row of s, the columns with score ≥ t[r] to idx
	// from pos[r] on, in increasing order.
	sel func(s []float32, rows, width int, t []float32, pos []int64, idx []int32)
	// gather writes the n ≤ 16 atoms idx[:n] of the packed atoms pack to
	// dst as half a panel, NaN in the lanes from n on.
	gather func(pack []float32, dim int, idx []int32, n int, dst []float32)
}

// prefilterPanels is the fewest panels of atoms (here 2048 atoms) for
// which the prefilter is used: below it, the float32 kernel alone costs
// about what the prefilter, the rescoring and the upkeep of the int8
// atoms as the learner moves them cost (`smtd bench kmeans`: at K = 2048
// assignment 1.1 times faster and learning the same, at 4096 1.4 and 1.2
// times faster, at 16384 1.75 and 1.55).
const prefilterPanels = 64

// prefilterSlack covers the rounding of the float32 arithmetic that
// computes and compares the approximate scores (a relative 2^-24 or two
// of scores of size 1), with a wide margin.
const prefilterSlack = 1e-5

// quantAtoms is the int8 copy of a packedAtoms for the prefilter. Panel p
// holds, for each group g of four coordinates in turn, the 32 atoms'
// coordinates 4g…4g+3 as bytes q + 128 (zero past Dim), so one group of a
// panel is two AVX-512 registers of dwords.
type quantAtoms struct {
	dim, groups int       // Dim, ⌈Dim/4⌉
	data        []uint8   // panels·groups·4·panelWidth
	scale       []float32 // s_j, NaN for absent atoms
	// errMax and normMax bound ‖φ_j − s_j·q_j‖ and ‖φ_j‖ over the atoms
	// set so far. They only grow, so a bound can be stale but never too
	// small, and readers of a published copy never see them change.
	errMax, normMax float64
}

func newQuantAtoms(k, dim int) *quantAtoms {
	g := (dim + 3) / 4
	q := &quantAtoms{
		dim:    dim,
		groups: g,
		data:   make([]uint8, panelsFor(k)*g*4*panelWidth),
		scale:  make([]float32, panelsFor(k)*panelWidth),
	}
	for j := range q.scale {
		if j < k {
			q.reset(j)
		} else {
			q.scale[j] = float32(math.NaN())
		}
	}
	return q
}

// clone returns a deep copy of q in the memory of dst, if not nil.
func (q *quantAtoms) clone(dst *quantAtoms) *quantAtoms {
	if dst == nil {
		dst = new(quantAtoms)
	}
	*dst = quantAtoms{
		dim:     q.dim,
		groups:  q.groups,
		data:    append(dst.data[:0], q.data...),
		scale:   append(dst.scale[:0], q.scale...),
		errMax:  q.errMax,
		normMax: q.normMax,
	}
	return dst
}

// base is the offset in data of atom j's first coordinate.
func (q *quantAtoms) base(j int) int {
	return (j/panelWidth)*q.groups*4*panelWidth + (j%panelWidth)*4
}

// set quantizes atom j, whose float32 coordinates are v[l·panelWidth].
// The learner calls it for every atom it moves, so it is a single pass
// after the largest coordinate: rounding as quantize does, and the exact
// error accumulated in float64.
func (q *quantAtoms) set(j int, v []float32) {
	dim := q.dim
	var bits uint32
	for l := 0; l < dim; l++ {
		if a := math.Float32bits(v[l*panelWidth]) &^ (1 << 31); a > bits {
			bits = a
		}
	}
	top := math.Float32frombits(bits)
	s, inv := top/127, float32(0)
	if top > 0 {
		inv = 127 / top
	}
	data := q.data[q.base(j):]
	var err2, norm2 float64
	for l := 0; l < dim; l++ {
		c := v[l*panelWidth]
		n := int32(c*inv+128.5) - 128
		data[(l/4)*4*panelWidth+l%4] = uint8(n + 128)
		d := float64(c) - float64(n)*float64(s)
		err2 += d * d
		norm2 += float64(c) * float64(c)
	}
	q.scale[j] = s
	q.errMax = max(q.errMax, math.Sqrt(err2))
	q.normMax = max(q.normMax, math.Sqrt(norm2))
}

// reset marks atom j as absent: a NaN scale makes its scores NaN, which
// the selection never keeps.
func (q *quantAtoms) reset(j int) {
	base := q.base(j)
	for g := 0; g < q.groups; g++ {
		for k := 0; k < 4; k++ {
			q.data[base+g*4*panelWidth+k] = 128
		}
	}
	q.scale[j] = float32(math.NaN())
}

// prefilterRows is the rows of a block of the prefilter, the AVX-512
// kernel's.
const prefilterRows = 8

// prefilterScratch is the prefilter's workspace, in fusedScratch.
type prefilterScratch struct {
	xq     []int8    // one block of rows, quantized
	bias   []int32   // −128·Σ q_x of each row of the block
	margin []float32 // 2(e_x + τ) + slack over s_x, per row
	s      []float32 // approximate scores of the block, rows × width
	top    []float32 // each row's largest approximate score, per lane
	t      []float32 // each row's threshold
	pos    []int64   // candidate output positions, per row
	cand   []int32   // candidates of each row
	seen   []uint64  // the block's candidates, a bit per atom
	union  []int32   // the block's candidates, increasing
	mini   []float32 // their float32 coordinates, in panels
	max    []float32 // argmax kernel running values for the block
	idx    []int32

	// The workspace's counts since it was made, for tests and
	// benchmarks: blocks of rows, those the plain kernel scored instead,
	// and over the others the rows' candidates and the atoms rescored.
	blocks, fallbacks, candidates, rescored int
}

// argmaxPrefiltered is argmaxFused for kernels with a prefilter: up to
// cores goroutines (partsFor) take the blocks of rows a kernel call's
// worth at a time (parts.Share), each scoring them with a
// prefilterScratch of its own, whose counts are then added into
// s.fused.pre.
func (s *scratch) argmaxPrefiltered(kn *kernel, pack *packedAtoms, seeded, m, cores int) {
	const rows = prefilterRows
	if kn.rows != rows {
		panic("online: prefilter: kernel blocks are not 8 rows")
	}
	f := &s.fused
	blocks := (m + rows - 1) / rows
	f.x = grow(f.x, blocks*rows*pack.dim) // each part packs its blocks
	panels := panelsFor(seeded)
	workers := partsFor(blocks, rows*panels*panelWidth*pack.dim, cores)
	if workers == 1 { // no closure: one goroutine allocates nothing
		s.prefilterBlocks(&f.pre, kn, pack, panels, m, 0, blocks)
		return
	}
	if len(s.pre) < workers-1 {
		s.pre = append(s.pre, make([]prefilterScratch, workers-1-len(s.pre))...)
	}
	parts.Share(blocks, workers, argmaxStep(kn, panels, pack.dim), func(worker, b0, b1 int) {
		w := &f.pre
		if worker > 0 {
			w = &s.pre[worker-1]
		}
		s.prefilterBlocks(w, kn, pack, panels, m, b0, b1)
	})
	for i := range s.pre[:workers-1] {
		w := &s.pre[i]
		f.pre.blocks += w.blocks
		f.pre.fallbacks += w.fallbacks
		f.pre.candidates += w.candidates
		f.pre.rescored += w.rescored
		w.blocks, w.fallbacks, w.candidates, w.rescored = 0, 0, 0, 0
	}
}

// prefilterBlocks is argmaxPrefiltered for the blocks b0…b1−1 of the m
// rows, which it packs into s.fused.x, against panels panels, in the
// workspace w.
func (s *scratch) prefilterBlocks(w *prefilterScratch, kn *kernel, pack *packedAtoms, panels, m, b0, b1 int) {
	const rows = prefilterRows
	f := &s.fused
	q := pack.quant
	dim, groups := pack.dim, q.groups
	packBlocks(f.x, s.x, m, dim, rows, b0, b1)
	width := panels * panelWidth
	capacity := width + panelWidth/2
	w.xq = grow(w.xq, rows*groups*4)
	w.bias = grow(w.bias, rows)
	w.margin = grow(w.margin, rows)
	w.pos = grow(w.pos, rows)
	w.cand = grow(w.cand, rows*capacity)
	w.s = grow(w.s, rows*width)
	w.top = grow(w.top, rows*16)
	w.t = grow(w.t, rows)
	w.seen = grow(w.seen, width/64+1)
	clear(w.seen)
	w.max = grow(w.max, rows*panelWidth)
	w.idx = grow(w.idx, rows*panelWidth)
	tau := fusedTol(dim) * max(1, q.normMax)
	inf := float32(math.Inf(-1))
	for r0 := b0 * rows; r0 < min(m, b1*rows); r0 += rows {
		n := min(rows, m-r0)
		blk := f.x[r0*dim : (r0+rows)*dim]
		ok := w.quantize(blk, n, dim, q.errMax, q.normMax, tau)
		if ok {
			for r := range rows {
				w.pos[r] = int64(r * capacity)
			}
			kn.pre.approx(w.xq, w.bias, groups, q.data, q.scale, panels, w.s, width, w.top)
			ok = w.thresholds(n)
			if ok {
				kn.pre.sel(w.s, n, width, w.t, w.pos, w.cand)
				ok = w.unite(n, capacity, width/4)
			}
		}
		for i := range w.max {
			w.max[i] = inf
		}
		clear(w.idx)
		w.blocks++
		if !ok {
			w.fallbacks++
			kn.argmax(blk, 1, dim, pack.data, panels, w.max, w.idx)
			for r := range n {
				s.best[r0+r], s.cos[r0+r] = firstMax(w.max[r*panelWidth:], w.idx[r*panelWidth:])
			}
			continue
		}
		for r := range n {
			w.candidates += int(w.pos[r]) - r*capacity
		}
		w.rescored += len(w.union)
		w.gather(kn, pack)
		kn.argmax(blk, 1, dim, w.mini, panelsFor(len(w.union)), w.max, w.idx)
		for r := range n {
			k, cos := firstMax(w.max[r*panelWidth:], w.idx[r*panelWidth:])
			if k >= 0 {
				k = int(w.union[k])
			}
			s.best[r0+r], s.cos[r0+r] = k, cos
		}
	}
}

// quantize writes the quantized coordinates, biases and margins of the
// block blk of rows packed by packRows (n of them real, the rest zero).
// It reports false if a real row cannot be prefiltered (a zero row).
//
// A coordinate is rounded to the nearest multiple of s_x (within
// 0.50004·s_x, the float32 rounding of the scale and of the product
// included), so ‖x − s_x·q_x‖ ≤ 0.5001·s_x·√Dim and ‖s_x·q_x‖ ≤ ‖x‖ plus
// that, bounds that cost no pass over the errors.
func (w *prefilterScratch) quantize(blk []float32, n, dim int, errMax, normMax, tau float64) bool {
	const rows = prefilterRows
	// The largest |coordinate| of each row, compared as bits (which order
	// non-negative floats) so that the signs cost no branches.
	var bits [rows]uint32
	for l := 0; l < dim; l++ {
		v := blk[l*rows : l*rows+rows]
		for r := range rows {
			if a := math.Float32bits(v[r]) &^ (1 << 31); a > bits[r] {
				bits[r] = a
			}
		}
	}
	var top, inv [rows]float32
	for r := range rows {
		top[r] = math.Float32frombits(bits[r])
		if top[r] > 0 {
			inv[r] = 127 / top[r]
		}
	}
	var sum [rows]int32
	var sq [rows]float32
	clear(w.xq) // the coordinates past Dim
	for l := 0; l < dim; l++ {
		v := blk[l*rows : l*rows+rows]
		xq := w.xq[(l/4)*rows*4+l%4:]
		for r := range rows {
			nq := int32(v[r]*inv[r]+128.5) - 128 // |v·inv| ≤ 127 up to rounding
			xq[r*4] = int8(nq)
			sum[r] += nq
			sq[r] += v[r] * v[r]
		}
	}
	rootDim := math.Sqrt(float64(dim))
	for r := range rows {
		w.bias[r] = -128 * sum[r]
		if r >= n {
			w.margin[r] = 0
			continue
		}
		if top[r] == 0 {
			return false
		}
		sx := float64(top[r] / 127)
		ex := 0.5001 * sx * rootDim
		nx := math.Sqrt(float64(sq[r]))*(1+1e-5) + ex
		e := ex*normMax + nx*errMax
		w.margin[r] = float32((2*(e+tau) + prefilterSlack) / sx)
	}
	return true
}

// thresholds sets each row's threshold, its largest approximate score
// less its margin. It reports false if a row has no score (every atom
// absent: the argmax kernel says so).
func (w *prefilterScratch) thresholds(n int) bool {
	for r := range n {
		best := float32(math.Inf(-1))
		for _, v := range w.top[r*16 : r*16+16] {
			best = max(best, v)
		}
		if math.IsInf(float64(best), -1) {
			return false
		}
		w.t[r] = best - w.margin[r]
	}
	return true
}

// unite collects the candidates of the block's n rows into w.union, in
// increasing order. It reports false if there are more than most, when
// scoring every atom costs less, or none (only with a bound that is not
// a number, from atoms that are not finite: the kernel then decides).
func (w *prefilterScratch) unite(n, capacity, most int) bool {
	w.union = w.union[:0]
	for r := range n {
		for _, j := range w.cand[r*capacity : w.pos[r]] {
			w.seen[j/64] |= 1 << (j % 64)
		}
	}
	for i, word := range w.seen {
		if word == 0 {
			continue
		}
		w.seen[i] = 0
		for ; word != 0; word &= word - 1 {
			w.union = append(w.union, int32(i*64+bits.TrailingZeros64(word)))
		}
	}
	return len(w.union) > 0 && len(w.union) <= most
}

// gather copies the float32 coordinates of the atoms in w.union into
// w.mini, panels of their own in the packedAtoms layout, padded with NaN.
func (w *prefilterScratch) gather(kn *kernel, pack *packedAtoms) {
	dim, n := pack.dim, len(w.union)
	panels := panelsFor(n)
	w.mini = grow(w.mini, panels*dim*panelWidth)
	for h := 0; h < 2*panels; h++ { // half panels of 16 lanes
		dst := w.mini[(h/2)*dim*panelWidth+(h%2)*16:]
		first := min(16*h, n-1) // any valid address once past n
		kn.pre.gather(pack.data, dim, w.union[first:], max(0, min(16, n-16*h)), dst)
	}
}
