package daemon

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"

	"gonum.org/v1/gonum/mat"

	"github.com/smtd/smtd/config"
	"github.com/smtd/smtd/internal/state"
	"github.com/smtd/smtd/online"
)

// The image chain in worker mode (config.Workers). A worker codes a
// minibatch with the model version it holds and returns its contribution
// to the learner's sufficient statistics; the owner merges the
// contributions of a step in sequence order and learns from them as from
// one minibatch:
//
//   - whitening: the batch's bounded moments (n_b, m_b, M_b), merged by
//     online.Whitener.Apply;
//   - k-means (smt-minimalistic, Algorithm 1, lines 10-13): per-atom hits
//     h_j and sums Σ x_i of the rows coded j, re-seeding candidates, or
//     the rows themselves while the dictionary is being seeded, merged by
//     online.KMeans.Apply;
//   - SMT on images: the code of every patch (f_vq, or f_gq's atoms and
//     cosines), from which the owner adds the spatial co-occurrences to
//     the statistics, and with the SGD solver (f_vq) the minibatch's
//     gradient term (P L_b)ᵀ (sparse-manifold-transform eq. 5) computed
//     with the version's P, which the owner sums over the step and steps
//     with (sgd.SMT.StepGradient); the closed-form solver solves from the
//     statistics on the owner.
//   - SMT on video: the code of every patch and the stream and index of
//     every frame. The owner follows the streams with its frame tracker
//     in stream-sequence order, exactly as a single daemon does, so the
//     temporal triples (t−1, t, t+1) of eq. 8 are those of one daemon
//     whichever workers coded the frames of a stream, and a worker that
//     dies breaks no chain. It adds the triples to the statistics and,
//     with the SGD solver, takes the step on them: O(nnz·dim) per patch,
//     against the worker's O(K·patch dim) for scoring it.
//
// The costly parts, scoring every whitened patch against every atom and
// the spatial SMT gradient over every pair of neighbouring patches, are
// the workers'; the owner's step costs O(K·dim) per contribution plus
// O(1) per patch for the statistics (O(nnz·dim) per video patch).

// imageContribution is one minibatch's contribution.
type imageContribution struct {
	images int
	white  online.WhitenContribution
	km     online.KMeansContribution
	codes  []int32 // f_vq code of every patch (−1: blank); nil without SMT
	// varints is decode's scratch for the codes as sent (code+1).
	varints []uint64
	// sparse is the f_gq code of every patch with SMT and kmeans.code gq:
	// its atoms and their cosines, before a video pipeline softens them.
	sparse online.SparseCodes
	// frames are the stream and index of every frame coded, in order, in
	// video pipelines with SMT.
	frames []frameID
	// The SGD solver's gradient term (P L_b)ᵀ, K×dim, over pairs pairs;
	// stepped is false when no patch counted (no step).
	grad    mat.Dense
	pairs   int64
	stepped bool
	// gradShape, if set before decoding, is the K×dim a gradient must
	// have (noGradient: none may come): one of another shape is refused
	// before its memory is taken.
	gradShape [2]int
}

// frameID names a video frame: its stream and index.
type frameID struct {
	stream string
	index  uint64
}

// noGradient is the gradShape of a model that takes no SMT gradient.
var noGradient = [2]int{-1, -1}

// errContribution reports a contribution that does not fit the model.
var errContribution = errors.New("smtd: malformed contribution")

// contribute codes batch with the model (which it does not change) and
// returns the batch's contribution, encoded, and its outputs. The
// re-seeding candidates are drawn from src; ahead is how many versions
// past this one the contribution may be applied (online.KMeans.DeadWithin).
//
// The patches are whitened as learn whitens them: with the operator the
// model's whitener has once it has merged this minibatch's moments (and
// refreshed, when its schedule says so). With one minibatch per step and
// τ = 0, a contribution is thus exactly the minibatch's share of a single
// daemon's learning step.
func (m *imageModel) contribute(batch []sample, src rand.Source, ahead, precision int) ([]byte, []output) {
	m.extract(batch, false, 1)
	c := imageContribution{images: len(batch)}
	m.white.Contribute(&c.white, &m.x, nil)
	w := m.white.Clone()
	_ = w.Apply([]*online.WhitenContribution{&c.white}) // as in learn: a failed refresh keeps the operator
	m.whiten(w, 1)
	m.km.Contribute(&c.km, m.assign, nil, &m.w, m.blank, src, m.km.DeadWithin(ahead))
	coder := m.km
	if len(c.km.Seeds) > 0 {
		coder = m.seedLocally(src)
	}
	if m.code == config.CodeGQ {
		coder.CodesGQ(&m.codes, &m.w, m.thresh)
	}
	if m.smt != nil {
		if m.code == config.CodeVQ {
			c.codes = make([]int32, len(m.assign))
			for i, a := range m.assign {
				c.codes[i] = int32(a)
			}
		} else {
			c.sparse = m.codes // encoded below, before soften changes it
		}
		if m.video {
			c.frames = make([]frameID, len(batch))
			for i, s := range batch {
				c.frames[i] = frameID{s.stream, s.frame}
			}
		} else if m.solver == config.SolverSGD {
			c.pairs, c.stepped = m.smt.GradientImagesVQ(&c.grad, m.assign, len(batch), m.patcher.Grid, m.smtRange)
		}
	}
	enc := c.encode(precision == 32)
	if m.video && m.code == config.CodeGQ {
		m.soften()
	}
	if m.smt == nil {
		return enc, m.pooledCodes(batch)
	}
	return enc, m.embedded(batch)
}

// seedLocally codes the minibatch in m.w, whose rows are the seeds of a
// dictionary not yet complete, with a copy of the dictionary that learns
// from them, as a single daemon codes its first minibatch with the atoms
// it seeds from it; without it, codes and outputs of the first step would
// be blank. The copy takes as its missing atoms non-blank rows drawn
// uniformly from src (those equal to an atom aside), not by k-means++,
// whose cost grows as K times the rows (a minute for K = 4096 and 256
// MNIST images on one core, longer than a task may take); its atoms only
// code this minibatch. The owner seeds its own dictionary from the rows
// by k-means++, with its own source. It returns the copy, for the f_gq
// codes.
func (m *imageModel) seedLocally(src rand.Source) *online.KMeans {
	b, err := m.km.MarshalBinary()
	if err != nil {
		panic(err)
	}
	k := online.NewKMeans(m.km.Settings(), src)
	if err := k.UnmarshalBinary(b); err != nil {
		panic(err) // its own encoding
	}
	var rows []int
	for i, blank := range m.blank {
		if !blank {
			rows = append(rows, i)
		}
	}
	missing := min(k.Settings().K-k.Seeded(), len(rows))
	rng := rand.New(src)
	for i := range missing { // the first missing of a random permutation
		j := i + rng.IntN(len(rows)-i)
		rows[i], rows[j] = rows[j], rows[i]
	}
	if missing > 0 {
		rows = rows[:missing]
		slices.Sort(rows)
		_, dim := m.w.Dims()
		seeds := mat.NewDense(missing, dim, nil)
		for i, r := range rows {
			seeds.SetRow(i, m.w.RawRowView(r))
		}
		k.Learn(seeds, nil)
	}
	k.LearnAssign(m.assign, nil, &m.w, m.blank)
	return k
}

// applyContributions takes one learning step from the encoded
// contributions, in order: the whitening moments, the k-means step, then
// the SMT statistics and step of their codes, as learn does for one
// minibatch of all their images. A contribution that does not decode or
// does not fit the model is refused before anything changes.
func (m *imageModel) applyContributions(enc [][]byte) error {
	// Decoded into the contributions of the last step, whose memory (MBs
	// each at K = 4096) is reused.
	for len(m.contribs) < len(enc) {
		m.contribs = append(m.contribs, imageContribution{})
	}
	cs := m.contribs[:len(enc)]
	images := 0
	m.tookSeeds = false
	// The SMT gradient a contribution may carry, checked before its
	// memory is taken; none without the sgd solver, and none for video,
	// whose steps the owner takes.
	shape := noGradient
	if m.smt != nil && m.solver == config.SolverSGD && m.frames == nil {
		shape = [2]int{m.smt.Size(), m.smt.Settings().Dim}
	}
	for i, b := range enc {
		cs[i].gradShape = shape
		if err := cs[i].decode(b); err != nil {
			return fmt.Errorf("%w: %w", errRefused, err)
		}
		if err := m.fits(&cs[i]); err != nil {
			return fmt.Errorf("%w: %w", errRefused, err)
		}
		images += cs[i].images
	}
	wcs := make([]*online.WhitenContribution, len(cs))
	kcs := make([]*online.KMeansContribution, len(cs))
	for i := range cs {
		wcs[i], kcs[i] = &cs[i].white, &cs[i].km
	}
	// A failed refresh keeps the previous operator, as in learn.
	_ = m.white.Apply(wcs)
	m.yield()
	m.km.Apply(kcs)
	for i := range cs {
		// Seeds come with the first steps only, tens of MB of rows each
		// at batch sizes in the hundreds: kept for reuse, they would
		// stay in the heap for good.
		if len(cs[i].km.Seeds) > 0 {
			m.tookSeeds = true
		}
		cs[i].km.Seeds = nil
	}
	m.yield()
	if m.smt == nil {
		return nil
	}
	if m.code == config.CodeVQ {
		m.assign = m.assign[:0]
		for i := range cs {
			for _, a := range cs[i].codes {
				m.assign = append(m.assign, int(a))
			}
		}
	} else {
		resetCodes(&m.codes, m.km.Settings().K)
		for i := range cs {
			appendRows(&m.codes, &cs[i].sparse, 0, cs[i].sparse.Rows)
		}
		if m.video {
			m.soften()
		}
	}
	if m.frames != nil {
		m.frameBatch = m.frameBatch[:0]
		for i := range cs {
			for _, f := range cs[i].frames {
				m.frameBatch = append(m.frameBatch, sample{stream: f.stream, frame: f.index})
			}
		}
		if err := m.learnTemporal(m.frameBatch); err != nil {
			return err
		}
		m.yield()
		return m.solveOnSchedule(len(cs))
	}
	m.addSpatial(images)
	if m.solver == config.SolverSGD { // f_vq codes only (config)
		// The gradients add up (sgd.SMT.GradientImagesVQ), in order.
		var sum *mat.Dense
		var pairs int64
		for i := range cs {
			if !cs[i].stepped {
				continue
			}
			if sum == nil {
				sum = &cs[i].grad
			} else {
				sum.Add(sum, &cs[i].grad)
			}
			pairs += cs[i].pairs
		}
		if sum != nil {
			m.yield()
			if err := m.smt.StepGradient(m.stats, sum, pairs); err != nil {
				return err
			}
		}
	}
	m.yield()
	return m.solveOnSchedule(len(cs))
}

// fits checks the shapes of a decoded contribution against the model.
func (m *imageModel) fits(c *imageContribution) error {
	g := m.patcher.Grid
	k := m.km.Settings()
	switch {
	case c.images < 1:
		return fmt.Errorf("%w: %d images", errContribution, c.images)
	case c.white.Rows > 0 && (len(c.white.Mean) != g.Dim() || len(c.white.Scatter) != g.Dim()*g.Dim()):
		return fmt.Errorf("%w: whitening moments of dimension %d, want %d", errContribution, len(c.white.Mean), g.Dim())
	}
	if err := m.km.CheckContribution(&c.km); err != nil {
		return err
	}
	// Besides: with SMT the f_vq or f_gq code of every patch, and the
	// frames of video; nothing else.
	vq, gq, frames := 0, 0, 0
	if m.smt != nil {
		if m.code == config.CodeVQ {
			vq = c.images * g.Len()
		} else {
			gq = c.images * g.Len()
		}
		if m.frames != nil {
			frames = c.images
		}
	}
	if len(c.codes) != vq || c.sparse.Rows != gq || len(c.frames) != frames {
		return fmt.Errorf("%w: %d f_vq codes, %d f_gq codes and %d frames for %d images; want %d, %d and %d",
			errContribution, len(c.codes), c.sparse.Rows, len(c.frames), c.images, vq, gq, frames)
	}
	if c.stepped {
		// readGradient refused one of another shape, or for a model
		// without the sgd solver on images (gradShape).
		if m.smt == nil || m.solver != config.SolverSGD || m.frames != nil || c.pairs < 0 {
			return fmt.Errorf("%w: an SMT gradient, which the model does not take", errContribution)
		}
		if r, cols := c.grad.Dims(); r != m.smt.Size() || cols != m.smt.Settings().Dim {
			return fmt.Errorf("%w: an SMT gradient of %dx%d, want %dx%d", errContribution, r, cols, m.smt.Size(), m.smt.Settings().Dim)
		}
	}
	for _, a := range c.codes {
		if a < -1 || int(a) >= k.K {
			return fmt.Errorf("%w: code %d outside -1..%d", errContribution, a, k.K-1)
		}
	}
	for _, a := range c.sparse.Index {
		if a >= k.K {
			return fmt.Errorf("%w: f_gq atom %d outside 0..%d", errContribution, a, k.K-1)
		}
	}
	return nil
}

// encode writes the contribution as: images, then the whitening and
// k-means contributions and the f_vq codes, each preceded by its length
// (uvarints; codes are stored as uvarints of code+1), the SMT gradient
// (appendGradient), and, when there are f_gq codes or frames, a byte of
// contribSparse and contribFrames flags followed by those sections
// (appendSparse, appendFrames). With f32 the k-means sums, the gradient
// and the cosines are sent as float32 (config.Workers.Precision).
func (c *imageContribution) encode(f32 bool) []byte {
	// A value beyond float32's range would arrive as an infinity, which
	// the owner refuses: such a contribution goes in float64.
	f32 = f32 && inFloat32Range(c.km.Sums) && (!c.stepped || inFloat32Range(c.grad.RawMatrix().Data))
	wb, err := c.white.MarshalBinary()
	if err != nil {
		panic(err)
	}
	kmMarshal := c.km.MarshalBinary
	if f32 {
		kmMarshal = c.km.MarshalFloat32
	}
	kb, err := kmMarshal()
	if err != nil {
		panic(err)
	}
	e := state.NewEncoder(make([]byte, 0, 16+len(wb)+len(kb)+2*len(c.codes)))
	e.Uvarint(uint64(c.images))
	appendPrefixed(e, wb)
	appendPrefixed(e, kb)
	e.Uvarint(uint64(len(c.codes)))
	for _, a := range c.codes {
		e.Uvarint(uint64(a + 1))
	}
	c.appendGradient(e, f32)
	var flags byte
	if c.sparse.Rows > 0 {
		flags |= contribSparse
	}
	if len(c.frames) > 0 {
		flags |= contribFrames
	}
	if flags != 0 {
		e.U8(flags)
	}
	if flags&contribSparse != 0 {
		c.appendSparse(e, f32)
	}
	if flags&contribFrames != 0 {
		c.appendFrames(e)
	}
	return e.Bytes()
}

// The sections an encoded contribution may have past its gradient.
const (
	contribSparse = 1 << iota // f_gq codes
	contribFrames             // video frames
)

// appendSparse writes the f_gq codes to e: the width of the cosines in
// bytes (4 with f32, else 8), the number of rows, and for each its number
// of atoms, the atoms (uvarints) and their cosines. The cosines are
// float32s widened (online.KMeans.CodesGQ), so that f32 loses nothing.
func (c *imageContribution) appendSparse(e *state.Encoder, f32 bool) {
	width := byte(8)
	if f32 {
		width = 4
	}
	e.U8(width)
	e.Uvarint(uint64(c.sparse.Rows))
	for i := range c.sparse.Rows {
		atoms, cos := c.sparse.Row(i)
		e.Uvarint(uint64(len(atoms)))
		for _, a := range atoms {
			e.Uvarint(uint64(a))
		}
		if f32 {
			e.F32s(cos)
		} else {
			e.F64s(cos)
		}
	}
}

// readSparse reads what appendSparse wrote into c.sparse.
func (c *imageContribution) readSparse(r *state.Decoder) error {
	width, rows := r.U8(), r.Uvarint()
	if r.Bad() || (width != 4 && width != 8) || rows == 0 || rows > uint64(r.Len()) {
		return fmt.Errorf("%w: f_gq codes", errContribution)
	}
	sp := &c.sparse
	resetCodes(sp, 0) // the atoms are checked against K by fits
	for range rows {
		n := r.Uvarint()
		if r.Bad() || n > uint64(r.Len()) {
			return fmt.Errorf("%w: f_gq codes", errContribution)
		}
		prev := -1
		for range n {
			// Each code's atoms increase (online.SparseCodes), as the
			// statistics require; fits checks them against K.
			a := r.Uvarint()
			if r.Bad() || a > 1<<31 || int(a) <= prev {
				return fmt.Errorf("%w: f_gq atoms cut short, out of range or not increasing", errContribution)
			}
			prev = int(a)
			sp.Index = append(sp.Index, prev)
		}
		from := len(sp.Cos)
		sp.Cos = append(sp.Cos, make([]float64, n)...)
		r.FiniteFloats(sp.Cos[from:], width == 4) // the range check below refuses the rest
		if r.Bad() {
			return fmt.Errorf("%w: f_gq codes truncated", errContribution)
		}
		for _, v := range sp.Cos[from:] {
			if !(v >= -1.001 && v <= 1.001) {
				return fmt.Errorf("%w: an f_gq cosine of %g", errContribution, v)
			}
		}
		sp.Ptr = append(sp.Ptr, len(sp.Index))
		sp.Rows++
	}
	return nil
}

// appendFrames writes the frames to e: their number, then for each its
// stream (length and bytes) and index (uvarints).
func (c *imageContribution) appendFrames(e *state.Encoder) {
	e.Uvarint(uint64(len(c.frames)))
	for _, f := range c.frames {
		e.Uvarint(uint64(len(f.stream)))
		e.Raw([]byte(f.stream))
		e.Uvarint(f.index)
	}
}

// readFrames reads what appendFrames wrote into c.frames; a stream is
// named by 1 to maxStreamBytes bytes, as the input's Smtd-Stream.
func (c *imageContribution) readFrames(r *state.Decoder) error {
	n := r.Uvarint()
	if r.Bad() || n == 0 || n > uint64(r.Len()) {
		return fmt.Errorf("%w: frames", errContribution)
	}
	for range n {
		l := r.Uvarint()
		if r.Bad() || l == 0 || l > maxStreamBytes || l > uint64(r.Len()) {
			return fmt.Errorf("%w: a frame's stream", errContribution)
		}
		f := frameID{stream: string(r.Bytes(int(l))), index: r.Uvarint()}
		if r.Bad() {
			return fmt.Errorf("%w: frames truncated", errContribution)
		}
		c.frames = append(c.frames, f)
	}
	return nil
}

// Gradient flags of an encoded contribution.
const (
	gradientNone    = 0
	gradientFloat64 = 1
	gradientFloat32 = 2
)

// appendGradient writes the SMT gradient to e: a flag (gradientNone if
// no step, else the width of its values), and with a step the pairs, K,
// dim, the number of non-zero rows and each as its index and dim
// float64s, or float32s with f32.
func (c *imageContribution) appendGradient(e *state.Encoder, f32 bool) {
	switch {
	case !c.stepped:
		e.U8(gradientNone)
		return
	case f32:
		e.U8(gradientFloat32)
	default:
		e.U8(gradientFloat64)
	}
	r, dim := c.grad.Dims()
	e.Uvarint(uint64(c.pairs))
	e.Uvarint(uint64(r))
	e.Uvarint(uint64(dim))
	raw := c.grad.RawMatrix()
	nz := 0
	for i := range r {
		if !allZero(raw.Data[i*raw.Stride : i*raw.Stride+dim]) {
			nz++
		}
	}
	e.Uvarint(uint64(nz))
	for i := range r {
		row := raw.Data[i*raw.Stride : i*raw.Stride+dim]
		if allZero(row) {
			continue
		}
		e.Uvarint(uint64(i))
		if f32 {
			e.F32s(row)
		} else {
			e.F64s(row)
		}
	}
}

// inFloat32Range reports whether every value of s is at most
// math.MaxFloat32 in magnitude.
func inFloat32Range(s []float64) bool {
	for _, v := range s {
		if math.Abs(v) > math.MaxFloat32 {
			return false
		}
	}
	return true
}

func allZero(s []float64) bool {
	for _, v := range s {
		if v != 0 {
			return false
		}
	}
	return true
}

// readGradient reads what appendGradient wrote.
func (c *imageContribution) readGradient(r *state.Decoder) error {
	flag := r.U8()
	if r.Bad() || flag > gradientFloat32 {
		return fmt.Errorf("%w: gradient", errContribution)
	}
	c.stepped = flag != gradientNone
	if !c.stepped {
		return nil
	}
	size := uint64(8)
	if flag == gradientFloat32 {
		size = 4
	}
	pairs, rows, dim, nz := r.Uvarint(), r.Uvarint(), r.Uvarint(), r.Uvarint()
	if r.Bad() || pairs > 1<<62 || rows == 0 || dim == 0 || rows > 1<<20 || dim > 1<<12 || nz > rows || nz*dim*size > uint64(r.Len()) {
		return fmt.Errorf("%w: gradient shape", errContribution)
	}
	if c.gradShape == noGradient {
		return fmt.Errorf("%w: an SMT gradient, which the model does not take", errContribution)
	}
	if c.gradShape != ([2]int{}) && (rows != uint64(c.gradShape[0]) || dim != uint64(c.gradShape[1])) {
		return fmt.Errorf("%w: an SMT gradient of %dx%d, want %dx%d", errContribution, rows, dim, c.gradShape[0], c.gradShape[1])
	}
	c.pairs = int64(pairs)
	if r, cols := c.grad.Dims(); c.grad.IsEmpty() || r != int(rows) || cols != int(dim) {
		c.grad.Reset()
		c.grad.ReuseAs(int(rows), int(dim))
	}
	c.grad.Zero()
	prev := -1
	for range nz {
		i := r.Uvarint()
		if r.Bad() || i >= rows || int(i) <= prev {
			return fmt.Errorf("%w: gradient rows", errContribution)
		}
		prev = int(i)
		if !r.FiniteFloats(c.grad.RawRowView(int(i)), size == 4) {
			if r.Bad() {
				return fmt.Errorf("%w: gradient truncated", errContribution)
			}
			return fmt.Errorf("%w: gradient not finite", errContribution)
		}
	}
	return nil
}

func (c *imageContribution) decode(b []byte) error {
	r := state.NewDecoder(b)
	images := r.Uvarint()
	white := prefixed(r)
	km := prefixed(r)
	n := r.Uvarint()
	if r.Bad() || n > uint64(r.Len()) || images > 1<<31 {
		return fmt.Errorf("%w: truncated", errContribution)
	}
	c.images = int(images)
	if err := c.white.UnmarshalBinary(white); err != nil {
		return fmt.Errorf("%w: whitening: %w", errContribution, err)
	}
	if err := c.km.UnmarshalBinary(km); err != nil {
		return fmt.Errorf("%w: k-means: %w", errContribution, err)
	}
	c.varints = slices.Grow(c.varints[:0], int(n))[:n]
	r.Uvarints(c.varints)
	if r.Bad() {
		return fmt.Errorf("%w: codes", errContribution)
	}
	c.codes = slices.Grow(c.codes[:0], int(n))[:n]
	for i, v := range c.varints {
		if v > 1<<31 {
			return fmt.Errorf("%w: codes", errContribution)
		}
		c.codes[i] = int32(v) - 1
	}
	if err := c.readGradient(r); err != nil {
		return err
	}
	resetCodes(&c.sparse, 0)
	c.frames = c.frames[:0]
	if r.Len() > 0 {
		flags := r.U8()
		if flags == 0 || flags&^(contribSparse|contribFrames) != 0 {
			return fmt.Errorf("%w: sections %#x", errContribution, flags)
		}
		if flags&contribSparse != 0 {
			if err := c.readSparse(r); err != nil {
				return err
			}
		}
		if flags&contribFrames != 0 {
			if err := c.readFrames(r); err != nil {
				return err
			}
		}
	}
	if r.Len() != 0 {
		return fmt.Errorf("%w: %d trailing bytes", errContribution, r.Len())
	}
	return nil
}

// workerParts are the stages a worker codes with: not the SMT statistics,
// which only the owner's step reads.
func workerParts(m *imageModel) []part {
	ps := []part{{"whitener", m.white}, {"kmeans", m.km}}
	if m.smt != nil {
		ps = append(ps, part{"smt", m.smt})
	}
	return ps
}

// codingState is the image model's own coding settings in a model
// version: patches.min_norm, below which a patch is blank, and
// kmeans.threshold, the t of f_gq codes (the stages carry their settings
// in their own sections). With it, workers code as the owner's config
// says, after a reload of the owner too.
type codingState struct{ m *imageModel }

const codingSection = "coding"

func (c codingState) MarshalBinary() ([]byte, error) {
	e := state.NewEncoder(nil)
	e.F64(c.m.minNorm)
	e.F64(c.m.thresh)
	return e.Bytes(), nil
}

// UnmarshalBinary reads the settings; versions of earlier builds carry
// min_norm only, and leave the threshold as it is.
func (c codingState) UnmarshalBinary(b []byte) error {
	d := state.NewDecoder(b)
	minNorm, thresh := d.F64(), c.m.thresh
	if d.Len() > 0 {
		thresh = d.F64()
	}
	if !d.Done() || !(minNorm >= 0) || !(thresh >= -1 && thresh <= 1) {
		return errors.New("smtd: the coding section of a model version does not decode")
	}
	c.m.minNorm, c.m.thresh = minNorm, thresh
	return nil
}

// workerSections returns what a worker needs of the model to code and
// embed.
func (m *imageModel) workerSections() ([]Section, error) {
	var secs []Section
	for _, p := range append(workerParts(m), part{codingSection, codingState{m}}) {
		b, err := p.state.MarshalBinary()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p.name, err)
		}
		secs = append(secs, Section{Name: p.name, Data: b})
	}
	return secs, nil
}

// withWorkerSections returns a snapshot of m whose stages are read from
// secs (workerSections of the owner's model).
func (m *imageModel) withWorkerSections(secs []Section) (workModel, error) {
	s := m.snapshot().(*imageModel)
	for _, p := range workerParts(s) {
		b, err := findSection(secs, p.name)
		if err != nil {
			return nil, err
		}
		if err := p.state.UnmarshalBinary(b); err != nil {
			return nil, fmt.Errorf("%s: %w", p.name, err)
		}
	}
	// Versions kept in checkpoints of earlier builds have no coding
	// section: those code with this daemon's setting.
	if b, err := findSection(secs, codingSection); err == nil {
		if err := (codingState{s}).UnmarshalBinary(b); err != nil {
			return nil, err
		}
	}
	return s, nil
}
