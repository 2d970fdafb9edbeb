package online

import (
	"math"

	"github.com/smtd/smtd/internal/parts"
)

// The fused scoring kernels compute, for a block of unit rows x_i and the
// unit atoms φ_j, the cosines
//
//	s_ij = Σ_l x_il·φ_jl    (float32, one fused multiply-add per l, l = 0…Dim−1)
//
// and reduce them as they are produced, so that the rows × K score matrix
// is never written out: either to the first atom of largest cosine of
// each row (the f_vq code, smt-minimalistic section 3 and App. D,
// Algorithm 1, line 10) or to the atoms with s_ij ≥ t (the f_gq code).
//
// The atoms are kept in float32 in panels of panelWidth atoms: panel p
// holds, for l = 0…Dim−1 in turn, coordinate l of atoms panelWidth·p …
// panelWidth·p + panelWidth − 1, so that one dimension of a panel is two
// AVX-512 or four AVX2 registers (which the AVX2 kernels take two at a
// time). Atoms not seeded yet and the padding of the last panel are NaN: a
// NaN score is neither larger than a running maximum nor ≥ any threshold,
// so they are never chosen without a test in the inner loop. The rows are
// packed in blocks of kernel.rows rows, one dimension of the block after
// the other, so that the broadcasts of one dimension read one cache line.
//
// Every lane accumulates its dot product in the same order, starting from
// zero, so the AVX-512 and AVX2 kernels give bit-identical scores; the
// portable kernel rounds the product and the sum separately (Go does not
// fuse float32 arithmetic on amd64) and may differ from them in the last
// bits. One process always uses one kernel (chosen once at start-up), so
// learning and coding agree and a resumed dictionary continues bit for
// bit on the same machine.
const panelWidth = 32

// kernel is one implementation of the fused scoring loops.
type kernel struct {
	name string
	rows int // rows per block

	// argmax keeps, for each of the blocks·rows rows and each lane a of a
	// panel, the largest score of the lane's atoms panelWidth·p + a over
	// the panels p < panels, in max[row·panelWidth + a], and the panel
	// that first reached it in idx[row·panelWidth + a]. max and idx hold
	// the running values on entry (−Inf and 0 to start).
	argmax func(x []float32, blocks, dim int, pack []float32, panels int, max []float32, idx []int32)

	// above writes, for each row, the atoms of the panels p < panels with
	// score ≥ t, in increasing order, with their scores: the hits of row
	// r go to idx[pos[r]…] and cos[pos[r]…] and pos[r] advances past them.
	// The kernel may write up to panelWidth/2 − 1 elements beyond the last
	// hit of a row.
	above func(x []float32, blocks, dim int, pack []float32, panels int, t float32, pos []int64, cos []float32, idx []int32)

	// reduce, if not nil, does firstMax for rows rows: best[i] is the
	// atom and cos[i] the score, −Inf if the row has none.
	reduce func(max []float32, idx []int32, rows int, best []int32, cos []float32)

	// pre, if not nil, is the int8 prefilter of argmax (prefilter.go).
	pre *prefilterOps
}

// generic is the portable kernel.
var generic = &kernel{name: "generic", rows: 4, argmax: argmaxGeneric, above: aboveGeneric}

// fused is the kernel this process uses: the fastest one the CPU runs.
var fused = bestKernel()

// KernelName returns the name of the fused scoring kernel that KMeans uses
// on this machine: "avx512-vnni" (AVX-512 with the int8 prefilter of
// prefilter.go for K ≥ 2048), "avx512", "avx2" or "generic".
func KernelName() string { return fused.name }

// packedAtoms is the float32 copy of a dictionary laid out for the
// kernels. It is derived from the float64 atoms, which stay the state of
// record: it is rebuilt on restore and refreshed atom by atom as they
// change.
type packedAtoms struct {
	dim  int
	data []float32 // panels(K)·Dim·panelWidth

	// quant is the int8 copy for the prefilter, when the kernel this
	// process uses has one and there are enough atoms for it to pay;
	// nil otherwise.
	quant *quantAtoms
}

func newPackedAtoms(k, dim int) packedAtoms {
	p := packedAtoms{dim: dim, data: make([]float32, panelsFor(k)*dim*panelWidth)}
	nan := float32(math.NaN())
	for i := range p.data {
		p.data[i] = nan
	}
	if fused.pre != nil && panelsFor(k) >= prefilterPanels {
		p.quant = newQuantAtoms(k, dim)
	}
	return p
}

// copyInto returns a deep copy of p in the memory of dst where it fits.
func (p *packedAtoms) copyInto(dst packedAtoms) packedAtoms {
	dst.dim = p.dim
	dst.data = append(dst.data[:0], p.data...)
	if p.quant == nil {
		dst.quant = nil
	} else {
		dst.quant = p.quant.clone(dst.quant)
	}
	return dst
}

// panelsFor returns the number of panels that hold k atoms.
func panelsFor(k int) int { return (k + panelWidth - 1) / panelWidth }

// set stores atom j.
func (p *packedAtoms) set(j int, v []float64) {
	base := (j/panelWidth)*p.dim*panelWidth + j%panelWidth
	for l, x := range v {
		p.data[base+l*panelWidth] = float32(x)
	}
	if p.quant != nil {
		p.quant.set(j, p.data[base:])
	}
}

// reset marks atom j as absent (NaN).
func (p *packedAtoms) reset(j int) {
	base := (j/panelWidth)*p.dim*panelWidth + j%panelWidth
	nan := float32(math.NaN())
	for l := 0; l < p.dim; l++ {
		p.data[base+l*panelWidth] = nan
	}
	if p.quant != nil {
		p.quant.reset(j)
	}
}

// packRows writes the m rows of x (m×dim, row-major float64) in blocks of
// r rows into dst as float32, padding the last block with zero rows, and
// returns dst and the number of blocks.
func packRows(dst []float32, x []float64, m, dim, r int) ([]float32, int) {
	blocks := (m + r - 1) / r
	dst = grow(dst, blocks*r*dim)
	packBlocks(dst, x, m, dim, r, 0, blocks)
	return dst, blocks
}

// packBlocks is packRows for the blocks b0…b1−1 only, into dst of the
// length packRows gives it.
func packBlocks(dst []float32, x []float64, m, dim, r, b0, b1 int) {
	for b := b0; b < b1; b++ {
		blk := dst[b*r*dim : (b+1)*r*dim]
		for i := 0; i < r; i++ {
			row := b*r + i
			if row >= m {
				for l := 0; l < dim; l++ {
					blk[l*r+i] = 0
				}
				continue
			}
			for l, v := range x[row*dim : (row+1)*dim] {
				blk[l*r+i] = float32(v)
			}
		}
	}
}

// fusedScratch is the workspace of the fused kernels.
type fusedScratch struct {
	x    []float32 // rows packed in blocks
	max  []float32 // running maximum per row and lane
	idx  []int32   // its panel per row and lane; atom indices for above
	pos  []int64   // write positions of above, one per row
	cos  []float32 // scores of above; maxima of reduce
	best []int32   // atoms of reduce
	pre  prefilterScratch
}

// argmaxChunk bounds the multiply-adds (rows × atoms × Dim) of one call of
// the argmax kernel, about 0.1 ms of a core. Go cannot preempt a goroutine
// inside an assembly function, so a longer call would hold up every
// stop-the-world of the garbage collector, and with it every goroutine of
// the process: one call for a batch of 32 MNIST images against 4096 atoms
// (17,000 patches, 2.5 G multiply-adds) held sweep termination for up to
// 28 ms (GODEBUG=gctrace=1 during `smtd bench throughput -k 4096`), in
// the middle of the queries the daemon answers while it learns. The rows
// are independent, so the split changes no result.
const argmaxChunk = 1 << 22

// argmaxFused sets s.best and s.cos for the m compacted rows of s.x,
// scored against the first seeded atoms of pack by kernel kn: the first
// atom of largest cosine and that cosine, or −1 and 0 with no atom. Up
// to cores goroutines take the rows a kernel call's worth at a time
// (parts.Share); each row's result is computed by the same kernel
// instructions either way.
func (s *scratch) argmaxFused(kn *kernel, pack *packedAtoms, seeded, m, cores int) {
	s.best = grow(s.best, m)
	s.cos = grow(s.cos, m)
	if m == 0 {
		return // every row blank: the kernels take at least one block
	}
	if seeded == 0 {
		for c := range s.best[:m] {
			s.best[c], s.cos[c] = -1, 0
		}
		return
	}
	f := &s.fused
	dim := pack.dim
	if kn.pre != nil && pack.quant != nil && panelsFor(seeded) >= prefilterPanels {
		s.argmaxPrefiltered(kn, pack, seeded, m, cores)
		return
	}
	blocks := (m + kn.rows - 1) / kn.rows
	f.x = grow(f.x, blocks*kn.rows*dim) // each part packs its blocks
	n := blocks * kn.rows * panelWidth
	f.max = grow(f.max, n)
	f.idx = grow(f.idx, n)
	if kn.reduce != nil {
		f.best = grow(f.best, m)
		f.cos = grow(f.cos, m)
	}
	panels := panelsFor(seeded)
	workers := partsFor(blocks, kn.rows*panels*panelWidth*dim, cores)
	if workers == 1 { // no closure: one goroutine allocates nothing
		s.argmaxBlocks(kn, pack, panels, m, 0, blocks)
		return
	}
	parts.Share(blocks, workers, argmaxStep(kn, panels, dim), func(_, b0, b1 int) { s.argmaxBlocks(kn, pack, panels, m, b0, b1) })
}

// argmaxStep is how many blocks of kn's rows one call of the argmax
// kernel scores against panels panels of dim: argmaxChunk multiply-adds,
// at least one block.
func argmaxStep(kn *kernel, panels, dim int) int {
	return max(1, argmaxChunk/(kn.rows*panels*panelWidth*dim))
}

// argmaxBlocks is argmaxFused for the blocks b0…b1−1 of the rows, which
// it packs into s.fused.x, against panels panels.
func (s *scratch) argmaxBlocks(kn *kernel, pack *packedAtoms, panels, m, b0, b1 int) {
	f := &s.fused
	dim := pack.dim
	packBlocks(f.x, s.x, m, dim, kn.rows, b0, b1)
	o0, o1 := b0*kn.rows*panelWidth, b1*kn.rows*panelWidth
	inf := float32(math.Inf(-1))
	for i := range f.max[o0:o1] {
		f.max[o0+i] = inf
	}
	clear(f.idx[o0:o1])
	step := argmaxStep(kn, panels, dim)
	for c0 := b0; c0 < b1; c0 += step {
		c1 := min(b1, c0+step)
		x0, q0 := c0*kn.rows*dim, c0*kn.rows*panelWidth
		kn.argmax(f.x[x0:], c1-c0, dim, pack.data, panels, f.max[q0:], f.idx[q0:])
	}
	r0, r1 := b0*kn.rows, min(m, b1*kn.rows)
	if kn.reduce != nil {
		kn.reduce(f.max[o0:], f.idx[o0:], r1-r0, f.best[r0:], f.cos[r0:])
		for c, v := range f.cos[r0:r1] {
			if math.IsInf(float64(v), -1) {
				s.best[r0+c], s.cos[r0+c] = -1, 0
			} else {
				s.best[r0+c], s.cos[r0+c] = int(f.best[r0+c]), float64(v)
			}
		}
		return
	}
	for c := r0; c < r1; c++ {
		s.best[c], s.cos[c] = firstMax(f.max[c*panelWidth:(c+1)*panelWidth], f.idx[c*panelWidth:(c+1)*panelWidth])
	}
}

// partWork is the fewest multiply-adds (rows × atoms × Dim) worth a
// goroutine of their own: 0.1-0.2 ms of a core, against the time it
// takes an idle core to pick the goroutine up. That is a microsecond
// when the other core is awake, but tens of µs on a 2-vCPU virtual
// machine whose idle vCPU the host has to wake: there (BenchmarkInParts)
// two parts of 84 µs each took 180 µs on two goroutines and 168 µs one
// after the other, two of 0.84 ms 1.0-1.1 ms against 1.7, and parts of
// 2²¹ multiply-adds (the first choice, 50 µs) made `smtd bench kmeans`
// at K = 256 slower on both cores than on one (BENCHMARKS.md).
const partWork = 1 << 23

// partsFor returns how many parts inParts should cut blocks blocks of
// work multiply-adds each into, or how many goroutines parts.Share
// should score them on: at most cores, and none for fewer than partWork
// multiply-adds.
func partsFor(blocks, work, cores int) int {
	return max(1, min(cores, blocks, blocks*work/partWork))
}

// inParts runs score(part, b0, b1) over the blocks 0…blocks−1 cut into
// parts contiguous ranges (parts.Run). Its callers score one part
// themselves rather than build a closure for it: a closure that reaches
// a goroutine is allocated.
func inParts(blocks, n int, score func(part, b0, b1 int)) { parts.Run(blocks, n, score) }

// firstMax reduces the per-lane maxima of one row to the first atom of
// largest score: among the lanes holding the largest value, the smallest
// atom index panelWidth·idx[a] + a. It returns −1 and 0 if no lane holds
// a score.
func firstMax(maxs []float32, idx []int32) (int, float64) {
	maxs, idx = maxs[:panelWidth], idx[:panelWidth]
	// The largest value first, without branches (no lane holds NaN),
	// then the smallest atom holding it: usually a single lane.
	m0, m1, m2, m3 := maxs[0], maxs[1], maxs[2], maxs[3]
	for a := 4; a < panelWidth; a += 4 {
		m0, m1, m2, m3 = max(m0, maxs[a]), max(m1, maxs[a+1]), max(m2, maxs[a+2]), max(m3, maxs[a+3])
	}
	best := max(m0, m1, m2, m3)
	if math.IsInf(float64(best), -1) {
		return -1, 0
	}
	atom := math.MaxInt
	for a, v := range maxs {
		if v == best {
			atom = min(atom, int(idx[a])*panelWidth+a)
		}
	}
	return atom, float64(best)
}

// packRowsAsAtoms lays the m compacted rows of s.x out as the atoms of
// s.rowAtoms (the lanes past m absent, NaN, and no int8 copy), for
// candidateScores.
func (s *scratch) packRowsAsAtoms(m, dim int) {
	p := &s.rowAtoms
	p.dim, p.quant = dim, nil
	p.data = grow(p.data, panelsFor(m)*dim*panelWidth)
	for j := range m {
		p.set(j, s.x[j*dim:(j+1)*dim])
	}
	for j := m; j < panelsFor(m)*panelWidth; j++ {
		p.reset(j)
	}
}

// candidateScores returns the scores of the m rows laid out by
// packRowsAsAtoms against the rows cands of s.x, in the workspaces f and
// candX: candidate t's score of row c at scores[t*stride+c]. They are the
// float32 dot products every other kernel call computes for that pair,
// bit for bit: the kernels sum x_l·φ_l over l in the same order whichever
// of the two is the atom. Scoring the few candidates against the rows as
// atoms, rather than the rows against a panel of candidates, leaves no
// lanes of a panel empty. The scores are valid until f's next use. It
// writes only through f and candX, so that calls with workspaces of their
// own may run at once.
func (s *scratch) candidateScores(kn *kernel, m int, cands []int, f *fusedScratch, candX *[]float64) (scores []float32, stride int) {
	n := len(cands)
	dim := s.rowAtoms.dim
	*candX = grow(*candX, n*dim)
	for t, c := range cands {
		copy((*candX)[t*dim:(t+1)*dim], s.x[c*dim:(c+1)*dim])
	}
	var blocks int
	f.x, blocks = packRows(f.x, *candX, n, dim, kn.rows)
	rows := blocks * kn.rows
	panels := panelsFor(m)
	stride = panels*panelWidth + panelWidth/2 // the kernels' stores overhang
	f.pos = grow(f.pos, rows)
	f.cos = grow(f.cos, rows*stride)
	f.idx = grow(f.idx, rows*stride)
	for i := range f.pos {
		f.pos[i] = int64(i * stride)
	}
	// Scores of unit vectors are ≥ −1 (up to rounding) and the absent
	// atoms are NaN, so each candidate keeps its m scores, in row order,
	// over as many calls as argmaxChunk allows (pos carries on).
	step := max(1, argmaxChunk/(rows*panelWidth*dim))
	for p0 := 0; p0 < panels; p0 += step {
		kn.above(f.x, blocks, dim, s.rowAtoms.data[p0*dim*panelWidth:], min(step, panels-p0), -2, f.pos, f.cos, f.idx)
	}
	for t, r := range cands {
		if int(f.pos[t])-t*stride != m {
			// A score that is not a number, from a row whose float32
			// copy is not finite (unit rows never are): the kernel left
			// it out, so this candidate is scored by a plain loop.
			s.plainScores(f.cos[t*stride:t*stride+m], r, m, dim)
		}
	}
	return f.cos, stride
}

// plainScores sets dst[c] to the float32 dot product of the float32
// copies of rows c and r of s.x, c < m, summed over the dimensions in
// order, for the rows the kernels cannot score.
func (s *scratch) plainScores(dst []float32, r, m, dim int) {
	cand := s.x[r*dim : (r+1)*dim]
	for c := range m {
		var sum float32
		for l, v := range s.x[c*dim : (c+1)*dim] {
			sum += float32(v) * float32(cand[l])
		}
		dst[c] = sum
	}
}

// aboveChunk bounds the rows × capacity of one call of the above kernel,
// whose output must have room for every atom of every row.
const aboveChunk = 1 << 17

// codesPart is the workspace of one part of codesFused: its rows'
// hits, one row after the other.
type codesPart struct {
	fused fusedScratch
	ends  []int // end of each row's hits in index and cos
	index []int32
	cos   []float32
}

// codesFused appends to dst the f_gq codes of the m compacted rows of s.x
// (the original rows are s.rows; r rows in all), scored against the first
// seeded atoms of pack by kernel kn, in up to cores parts at once
// (inParts) that are then appended in order.
func (s *scratch) codesFused(dst *SparseCodes, kn *kernel, pack *packedAtoms, seeded, m, r int, t float64, cores int) {
	dst.Ptr = grow(dst.Ptr, r+1)
	dst.Index, dst.Cos = dst.Index[:0], dst.Cos[:0]
	next := 0 // next row of x whose Ptr is unset
	if seeded > 0 && m > 0 {
		dim := pack.dim
		panels := panelsFor(seeded)
		blocks := (m + kn.rows - 1) / kn.rows
		parts := partsFor(blocks, kn.rows*panels*panelWidth*dim, cores)
		if len(s.codes) < parts {
			s.codes = append(s.codes, make([]codesPart, parts-len(s.codes))...)
		}
		t32 := threshold32(t)
		if parts == 1 { // no closure: one goroutine allocates nothing
			s.codes[0].above(kn, pack, s.x[:m*dim], panels, t32)
		} else {
			inParts(blocks, parts, func(p, b0, b1 int) {
				c0, c1 := b0*kn.rows, min(m, b1*kn.rows)
				s.codes[p].above(kn, pack, s.x[c0*dim:c1*dim], panels, t32)
			})
		}
		c := 0 // compacted row
		for _, o := range s.codes[:parts] {
			start := 0
			for _, end := range o.ends {
				for ; next <= s.rows[c]; next++ {
					dst.Ptr[next] = len(dst.Index)
				}
				for q := start; q < end; q++ {
					dst.Index = append(dst.Index, int(o.index[q]))
					dst.Cos = append(dst.Cos, float64(o.cos[q]))
				}
				start = end
				c++
			}
		}
	}
	for ; next <= r; next++ {
		dst.Ptr[next] = len(dst.Index)
	}
}

// above sets o's hits to the atoms of the first panels panels of pack
// with score ≥ t for each unit row of x (row-major, pack.dim columns),
// scored by kernel kn.
func (o *codesPart) above(kn *kernel, pack *packedAtoms, x []float64, panels int, t float32) {
	f := &o.fused
	dim := pack.dim
	m := len(x) / dim
	capacity := panels*panelWidth + panelWidth/2
	chunk := max(kn.rows, aboveChunk/capacity/kn.rows*kn.rows)
	o.ends, o.index, o.cos = o.ends[:0], o.index[:0], o.cos[:0]
	for c0 := 0; c0 < m; c0 += chunk {
		n := min(chunk, m-c0)
		var blocks int
		f.x, blocks = packRows(f.x, x[c0*dim:], n, dim, kn.rows)
		rows := blocks * kn.rows
		f.pos = grow(f.pos, rows)
		f.cos = grow(f.cos, rows*capacity)
		f.idx = grow(f.idx, rows*capacity)
		for i := range f.pos {
			f.pos[i] = int64(i * capacity)
		}
		kn.above(f.x, blocks, dim, pack.data, panels, t, f.pos, f.cos, f.idx)
		for i := 0; i < n; i++ {
			start, end := i*capacity, int(f.pos[i])
			o.index = append(o.index, f.idx[start:end]...)
			o.cos = append(o.cos, f.cos[start:end]...)
			o.ends = append(o.ends, len(o.index))
		}
	}
}

// fusedTol bounds the error of a score of the kernels, a float32 dot
// product of two unit vectors of dimension dim rounded to float32: dim
// roundings of at most 2^-24 relative each, with a factor 4 of margin.
func fusedTol(dim int) float64 { return 4 * float64(dim+2) * 0x1p-24 }

// threshold32 returns the smallest float32 t32 ≥ t, so that for a float32
// score s, s ≥ t32 exactly when float64(s) ≥ t.
func threshold32(t float64) float32 {
	t32 := float32(t)
	if float64(t32) < t {
		t32 = math.Nextafter32(t32, float32(math.Inf(1)))
	}
	return t32
}

// argmaxGeneric is the portable argmax kernel.
func argmaxGeneric(x []float32, blocks, dim int, pack []float32, panels int, maxs []float32, idx []int32) {
	const r = 4
	var acc [r][panelWidth]float32
	for b := 0; b < blocks; b++ {
		blk := x[b*r*dim : (b+1)*r*dim]
		for p := 0; p < panels; p++ {
			scoreGeneric(&acc, blk, pack[p*dim*panelWidth:(p+1)*dim*panelWidth])
			for i := range acc {
				row := (b*r + i) * panelWidth
				mx := maxs[row : row+panelWidth : row+panelWidth]
				ix := idx[row : row+panelWidth : row+panelWidth]
				for a, v := range acc[i] {
					if v > mx[a] {
						mx[a], ix[a] = v, int32(p)
					}
				}
			}
		}
	}
}

// aboveGeneric is the portable threshold kernel.
func aboveGeneric(x []float32, blocks, dim int, pack []float32, panels int, t float32, pos []int64, cos []float32, idx []int32) {
	const r = 4
	var acc [r][panelWidth]float32
	for b := 0; b < blocks; b++ {
		blk := x[b*r*dim : (b+1)*r*dim]
		for p := 0; p < panels; p++ {
			scoreGeneric(&acc, blk, pack[p*dim*panelWidth:(p+1)*dim*panelWidth])
			for i := range acc {
				q := pos[b*r+i]
				for a, v := range acc[i] {
					if v >= t {
						cos[q], idx[q] = v, int32(p*panelWidth+a)
						q++
					}
				}
				pos[b*r+i] = q
			}
		}
	}
}

// scoreGeneric computes the scores of a block of 4 rows (packed) with one
// panel, one atom at a time with the 4 rows' sums in registers.
func scoreGeneric(acc *[4][panelWidth]float32, blk, panel []float32) {
	dim := len(panel) / panelWidth
	blk = blk[:4*dim]
	for a := 0; a < panelWidth; a++ {
		var s0, s1, s2, s3 float32
		for l := 0; l < dim; l++ {
			v := panel[l*panelWidth+a]
			xs := blk[4*l : 4*l+4 : 4*l+4]
			s0 += xs[0] * v
			s1 += xs[1] * v
			s2 += xs[2] * v
			s3 += xs[3] * v
		}
		acc[0][a], acc[1][a], acc[2][a], acc[3][a] = s0, s1, s2, s3
	}
}

// checkArgmax panics unless the buffers hold what an argmax kernel with
// blocks of r rows reads and writes: the assembly does not check.
func checkArgmax(r int, x []float32, blocks, dim int, pack []float32, panels int, max []float32, idx []int32) {
	if blocks < 1 || dim < 1 || panels < 1 || len(x) < blocks*r*dim || len(pack) < panels*dim*panelWidth ||
		len(max) < blocks*r*panelWidth || len(idx) < blocks*r*panelWidth {
		panic("online: fused argmax kernel: buffers too short")
	}
}

// checkAbove panics unless the buffers hold what an above kernel with
// blocks of r rows reads and writes, every row's output having room for
// all the atoms of the panels and the overhang.
func checkAbove(r int, x []float32, blocks, dim int, pack []float32, panels int, pos []int64, cos []float32, idx []int32) {
	if blocks < 1 || dim < 1 || panels < 1 || len(x) < blocks*r*dim || len(pack) < panels*dim*panelWidth ||
		len(pos) < blocks*r {
		panic("online: fused threshold kernel: buffers too short")
	}
	for _, p := range pos[:blocks*r] {
		if p < 0 || int(p)+panels*panelWidth+panelWidth/2 > min(len(cos), len(idx)) {
			panic("online: fused threshold kernel: output too short")
		}
	}
}
