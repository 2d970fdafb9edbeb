package daemon

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"

	"gonum.org/v1/gonum/mat"

	"github.com/smtd/smtd/config"
	"github.com/smtd/smtd/internal/parts"
	"github.com/smtd/smtd/online"
	"github.com/smtd/smtd/sgd"
	"github.com/smtd/smtd/spectral"
)

// imageModel is the image and video chain of smt-minimalistic (App. C, D,
// sections 2-3): TxT patches, mean removal, online whitening (λI+Σ)^(-1/2),
// L2 normalisation, an online spherical k-means dictionary, and optionally
// the sparse manifold transform of the codes.
//
// With SMT (smt.dim > 0) the output of an image is its pooled embedding:
// β = Pα/‖Pα‖ per patch, average-pooled over the patch grid and normalised
// per position (sgd.SMT.EmbedImagesVQ). Without it, the output is the
// pooled sparse code: the sum over the image's non-blank patches of their
// f_vq one-hot (or f_gq binary) codes, L2-normalised — a K-dimensional bag
// of atoms; an image whose patches are all blank gets the zero vector.
type imageModel struct {
	white   *online.Whitener
	km      *online.KMeans
	code    string  // config.CodeVQ or CodeGQ
	thresh  float64 // t of f_gq
	minNorm float64

	// The SMT stage; smt is nil when it is off. stats is nil in snapshots
	// (queries only embed).
	smt        *sgd.SMT
	smtRange   int // smt.context: neighbours within this many grid positions
	stats      *sgd.Stats
	pool       sgd.PoolSettings
	solver     string
	solveEvery int
	drop       int
	// nonRedundant chooses the closed-form rows by Alg. 1 of
	// non-redundant-spectral-dimensionality-reduction.
	nonRedundant bool
	sinceSolve   int         // closed solver: batches since the last solve
	src          rand.Source // the pipeline's, for the Lanczos start vector

	// frames follows the streams of a video pipeline with SMT: its
	// statistics and steps use the temporal triples of eq. 8 instead of
	// spatial neighbours. Nil otherwise and in snapshots.
	frames *frameTracker
	// video: f_gq codes are softened (see soften) and embedded weighted.
	video   bool
	vqCodes online.SparseCodes // f_vq codes as weighted codes, for frames
	// frameCounts are the tracker's counters in snapshots, for status.
	frameCounts *frameCounts

	// The workspaces of encode and learn; a reader of a snapshot has its
	// own (see reader).
	*imageWork
	p mat.Dense // closed-form P, a workspace of the learner
	// contribs are the contributions of the last step in worker mode, a
	// workspace of the owner's learner.
	contribs []imageContribution
	// frameBatch holds the frames of a step in worker mode, for the
	// tracker, a workspace of the owner's learner.
	frameBatch []sample
	// tookSeeds: the last step in worker mode took seeds, every row of
	// its minibatches (see online.KMeansContribution).
	tookSeeds bool

	// between is called between the stages of learn (stagedLearner);
	// nil in snapshots and readers.
	between func()
	// cores is how many cores the next learning step may use (learnOn):
	// its k-means scoring, the extraction and whitening of its patches
	// (prepare), its SMT gradient and its embeddings.
	cores int
}

func (m *imageModel) betweenStages(f func()) { m.between = f }

func (m *imageModel) learnOn(cores int) {
	m.km.SetCores(cores)
	if m.smt != nil {
		m.smt.SetCores(cores)
	}
	m.cores = cores
}

// yield calls between, if set.
func (m *imageModel) yield() {
	if m.between != nil {
		m.between()
	}
}

// yieldImages is how many images learn extracts between two yields (about
// 1 ms of one core for 28x28 images and 6x6 patches).
const yieldImages = 8

// imageWork is the memory an image model encodes in, reused between
// batches. The patcher's Grid, Mean and Context are the model's; its
// buffer belongs to the workspace.
type imageWork struct {
	patcher online.Patcher
	// helpers are the patchers of workers 1, 2, … of a batch extracted
	// on several goroutines (prepare); worker 0 uses patcher. Grown as
	// needed.
	helpers []online.Patcher
	x       mat.Dense // all patches of a batch, one per row
	w       mat.Dense // whitened and normalised
	blank   []bool
	assign  []int
	codes   online.SparseCodes
	emb     mat.Dense // image embeddings, one per row
	// vectors holds a reader's last output vectors (reader): a query
	// worker encodes one image after the other and publishes each reply
	// before the next, so the memory of 500 replies a second need not
	// be new. Nil in the learner's workspaces, whose outputs outlive
	// the batch.
	vectors []float32
	reader  bool
}

// outputVectors returns the memory for n output vectors of dim values:
// a reader's own, new memory otherwise.
func (w *imageWork) outputVectors(n, dim int) []float32 {
	if !w.reader {
		return make([]float32, n*dim)
	}
	w.vectors = slices.Grow(w.vectors[:0], n*dim)[:n*dim]
	clear(w.vectors)
	return w.vectors
}

func newImageModel(p *config.Pipeline, src rand.Source) *imageModel {
	g := online.PatchGrid{Width: p.Image.Width, Height: p.Image.Height, Channels: p.Image.Channels, Size: p.Patches.Size, Stride: p.Patches.Stride}
	mean, err := online.ParseMeanMode(p.Patches.Mean)
	if err != nil {
		panic(err) // validated by config
	}
	m := &imageModel{
		video:     p.Modality == config.Video,
		imageWork: &imageWork{patcher: online.Patcher{Grid: g, Mean: mean, Context: p.Patches.Context}},
		white:     online.NewWhitener(g.Dim(), whitenSettings(p)),
		km:        online.NewKMeans(kmeansSettings(p, g.Dim()), src),
		src:       src,
	}
	if p.SMT.Dim > 0 {
		blank, err := sgd.ParseBlankMode(p.SMT.Blank)
		if err != nil {
			panic(err) // validated by config
		}
		m.solver, m.drop, m.nonRedundant = p.SMT.Solver, p.SMT.Drop, p.SMT.NonRedundant
		m.pool = sgd.PoolSettings{Kernel: p.SMT.PoolKernel, Stride: p.SMT.PoolStride}
		m.stats = sgd.NewStats(sgd.StatsSettings{
			K: p.KMeans.Atoms, Blank: blank, Range: p.SMT.Context, Memory: p.SMT.Memory,
			MultiHot: p.KMeans.Code == config.CodeGQ,
			VOnly:    p.SMT.Solver == config.SolverSGD, // the SGD step needs only V
		})
		m.smt = sgd.NewSMT(smtSettings(p, blank), src)
		m.smtRange = p.SMT.Context
		if p.Modality == config.Video {
			m.frames = newFrameTracker(p.Video.MaxStreams, p.Video.Reorder, p.KMeans.Atoms)
			m.frames.maxJump = uint64(p.Video.MaxFrameJump)
		}
	}
	m.tune(p)
	return m
}

func whitenSettings(p *config.Pipeline) online.WhitenSettings {
	return online.WhitenSettings{Lambda: p.Whiten.Lambda, RefreshEvery: p.Whiten.RefreshEvery, FreezeAfter: p.Whiten.FreezeAfter}
}

func kmeansSettings(p *config.Pipeline, dim int) online.KMeansSettings {
	return online.KMeansSettings{
		K: p.KMeans.Atoms, Dim: dim, LearningRate: p.KMeans.LearningRate,
		Decay: p.KMeans.Decay, Memory: p.KMeans.Memory, ReseedAfter: p.KMeans.ReseedAfter,
	}
}

func smtSettings(p *config.Pipeline, blank sgd.BlankMode) sgd.SMTSettings {
	return sgd.SMTSettings{
		K: p.KMeans.Atoms, Blank: blank, Dim: p.SMT.Dim, LearningRate: p.SMT.LearningRate,
		Decay: p.SMT.Decay, Gamma0: p.SMT.Gamma0, Gamma1: p.SMT.Gamma1,
		DropConstant: p.SMT.Solver == config.SolverSGD && p.SMT.Drop == 1,
	}
}

// tune applies the live fields; config validation guarantees they fit.
func (m *imageModel) tune(p *config.Pipeline) {
	m.code, m.thresh, m.minNorm = p.KMeans.Code, p.KMeans.Threshold, p.Patches.MinNorm
	mustTune(m.white.SetSettings(whitenSettings(p)))
	mustTune(m.km.SetSettings(kmeansSettings(p, m.patcher.Grid.Dim())))
	if m.smt == nil {
		return
	}
	m.solveEvery = p.SMT.SolveEvery
	mustTune(m.smt.SetSettings(smtSettings(p, m.smt.Settings().Blank)))
	if m.stats != nil {
		st := m.stats.Settings()
		st.Memory = p.SMT.Memory
		mustTune(m.stats.SetSettings(st))
	}
}

func mustTune(err error) {
	if err != nil {
		panic(err) // validated by config: a bug if it happens
	}
}

// prepare extracts, centres, whitens and normalises the patches of batch
// into m.w and flags the blank ones; with observe it first updates the
// whitening statistics. A learning batch (observe) is extracted and
// whitened on up to m.cores goroutines (batchParts), which take its images
// in turn; every patch is computed as on one core, so the bits do not
// depend on the split nor on which goroutine took an image. Encoding, for
// a query or a reader, stays on the caller's core.
func (m *imageModel) prepare(batch []sample, observe bool) {
	split := 1
	if observe {
		split = batchParts(len(batch), m.cores)
	}
	m.extract(batch, observe, split)
	if observe {
		m.yield()
		// A failed refresh keeps the previous operator; it is retried at
		// the next refresh.
		_ = m.white.Observe(&m.x, nil)
		m.yield()
	}
	m.whiten(m.white, split)
}

// batchParts is how many goroutines share the images of a learning batch
// of n images on cores cores (prepare, embedded): at most one for each
// yieldImages images (about 1 ms of one core for 28x28 images), against
// the tens of µs an idle core of a virtual machine can take to pick up a
// goroutine.
func batchParts(n, cores int) int {
	return max(1, min(cores, n/yieldImages))
}

// extract writes the centred patches of batch into m.x on split
// goroutines that take its images one at a time as each finishes the last
// (parts.Share): worker w > 0 with helper patcher w−1. Worker 0, the
// caller, yields between groups of images when the model learns. One
// part is extracted without a closure: the query path does not allocate.
func (m *imageModel) extract(batch []sample, learning bool, split int) {
	g := m.patcher.Grid
	resize(&m.x, len(batch)*g.Len(), g.Dim())
	if split == 1 {
		m.extractImages(batch, learning, 0, 0, len(batch))
		return
	}
	for len(m.helpers) < split-1 {
		m.helpers = append(m.helpers, online.Patcher{Grid: g, Mean: m.patcher.Mean, Context: m.patcher.Context})
	}
	parts.Share(len(batch), split, 1, func(worker, lo, hi int) { m.extractImages(batch, learning, worker, lo, hi) })
}

// extractImages is extract's images lo…hi−1 on worker worker.
func (m *imageModel) extractImages(batch []sample, learning bool, worker, lo, hi int) {
	p := &m.patcher
	if worker > 0 {
		p = &m.helpers[worker-1]
	}
	g := p.Grid
	n := g.Len()
	for i := lo; i < hi; i++ {
		if learning && worker == 0 && i > 0 && i%yieldImages == 0 {
			m.yield()
		}
		p.Extract(rowRange(&m.x, i*n, (i+1)*n), batch[i].pixels)
	}
}

// whiten whitens the patches m.x with w into m.w, normalises them and
// flags the blank ones, on split goroutines that take the rows of one
// image at a time (parts.Share).
func (m *imageModel) whiten(w *online.Whitener, split int) {
	r, c := m.x.Dims()
	resize(&m.w, r, c)
	m.blank = slices.Grow(m.blank[:0], r)[:r]
	m.assign = slices.Grow(m.assign[:0], r)[:r]
	if split == 1 {
		m.whitenRows(w, 0, r)
		return
	}
	n := m.patcher.Grid.Len()
	parts.Share(r/n, split, 1, func(_, lo, hi int) { m.whitenRows(w, lo*n, hi*n) })
}

// whitenRows is a part of whiten: rows lo…hi−1.
func (m *imageModel) whitenRows(w *online.Whitener, lo, hi int) {
	dst := rowRange(&m.w, lo, hi)
	whitenSerial(w, dst, rowRange(&m.x, lo, hi))
	online.NormalizeRows(dst, m.minNorm, m.blank[lo:hi])
}

// rowRange returns rows lo…hi−1 of a: a itself when they are all of its
// rows, else a view, which is allocated (on an embed query's path, a
// one-image batch is extracted, whitened and embedded without views).
func rowRange(a *mat.Dense, lo, hi int) *mat.Dense {
	if r, c := a.Dims(); lo > 0 || hi < r {
		return a.Slice(lo, hi, 0, c).(*mat.Dense)
	}
	return a
}

// whitenSerial is w.Whiten(dst, x) (dst x.Rows×Dim, not empty) on the
// calling goroutine. gonum's Dgemm multiplies an r×d by d×d product on
// as many goroutines as there are Ps, one per 64×64 block of the result,
// when the result spans 4 blocks or more; a batch's patches (32 MNIST
// images: 16928 rows) span hundreds. The learner would take every core
// for its whitening, and a query arriving meanwhile would wait for one,
// and for its own blocks queued behind the learner's. So the rows are
// whitened a slice of at most 3 blocks at a time (one block when d > 64;
// past d = 192 gonum multiplies in parallel all the same). gonum sums
// each row's product in the same order either way: the result is
// bitwise the same.
func whitenSerial(w *online.Whitener, dst, x *mat.Dense) {
	r, c := x.Dims()
	step := 64
	if c <= 64 {
		step = 3 * 64
	}
	for i := 0; i < r; i += step {
		j := min(i+step, r)
		w.Whiten(rowRange(dst, i, j), rowRange(x, i, j))
	}
}

// resize makes a workspace r×c, keeping its memory when it is large enough
// (batches vary in size: a timeout cuts a partial one).
func resize(a *mat.Dense, r, c int) {
	if !a.IsEmpty() {
		if ar, ac := a.Dims(); ar == r && ac == c {
			return
		}
		a.Reset()
	}
	a.ReuseAs(r, c)
}

func (m *imageModel) learn(batch []sample) ([]output, error) {
	m.prepare(batch, true)
	m.yield()
	// The codes published are those the learning step assigned (with the
	// atoms before its update): no assignment is computed twice.
	if m.code == config.CodeVQ {
		m.km.LearnAssign(m.assign, nil, &m.w, m.blank)
	} else {
		m.km.Learn(&m.w, m.blank)
		m.yield()
		m.km.CodesGQ(&m.codes, &m.w, m.thresh)
		if m.video {
			m.soften()
		}
	}
	m.yield()
	if m.smt == nil {
		return m.pooledCodes(batch), nil
	}
	var err error
	if m.frames != nil {
		err = m.learnTemporal(batch)
	} else {
		err = m.learnSpatial(len(batch))
	}
	m.yield()
	if err == nil {
		err = m.solveOnSchedule(1)
	}
	return m.embedded(batch), err
}

// solveOnSchedule counts batches more minibatches learned and re-solves a
// closed-form P once smt.solve_every have been since the last solve (in
// worker mode, at the end of the step that reaches them).
func (m *imageModel) solveOnSchedule(batches int) error {
	if m.solver != config.SolverClosed {
		return nil
	}
	if m.sinceSolve += batches; m.sinceSolve < m.solveEvery {
		return nil
	}
	err := m.solve()
	m.yield()
	return err
}

// learnSpatial adds the codes m.assign of a batch of images, patches
// within smt.context grid positions being neighbours, to the statistics,
// and takes an SGD step on them.
func (m *imageModel) learnSpatial(images int) error {
	m.addSpatial(images)
	if m.solver != config.SolverSGD {
		return nil
	}
	m.yield()
	// The statistics include this batch before the step, as the step's V
	// should (sgd.SMT.StepImagesVQ).
	return m.smt.StepImagesVQ(m.stats, m.assign, images, m.patcher.Grid)
}

// addSpatial adds the codes of a batch of images (m.assign for f_vq,
// m.codes for f_gq) to the statistics, patches within smt.context grid
// positions being neighbours.
func (m *imageModel) addSpatial(images int) {
	if m.code == config.CodeVQ {
		m.stats.AddImagesVQ(m.assign, images, m.patcher.Grid)
	} else {
		m.stats.AddImagesGQ(&m.codes, images, m.patcher.Grid)
	}
}

// learnTemporal adds the triples of frames (t−1, t, t+1) of one stream
// that the batch completed to the statistics (sparse-manifold-transform
// eq. 8: D_{t−1,t} = D_{t+1,t} = −½, D_{t,t} = 1, patch by patch), and
// takes an SGD step on them. A batch that completes no triple changes
// nothing.
func (m *imageModel) learnTemporal(batch []sample) error {
	codes := &m.codes // f_gq, softened
	if m.code == config.CodeVQ {
		codes = &m.vqCodes
		resetCodes(codes, m.km.Settings().K)
		for _, a := range m.assign {
			if a >= 0 {
				codes.Index = append(codes.Index, a)
				codes.Cos = append(codes.Cos, 1)
			}
			codes.Ptr = append(codes.Ptr, len(codes.Index))
			codes.Rows++
		}
	}
	m.frames.add(batch, codes, m.patcher.Grid.Len())
	f := m.frames
	if f.cur.Rows == 0 {
		return nil
	}
	m.stats.AddTemporalGQ(&f.prev, &f.cur, &f.next)
	if m.solver != config.SolverSGD {
		return nil
	}
	return m.smt.StepTemporalGQ(m.stats, &f.prev, &f.cur, &f.next)
}

// soften turns the binary f_gq codes of m.codes into the soft-thresholded
// cosines cos − t of their atoms, the weighted codes of video pipelines:
// they move continuously with the patch, where a binary or 1-hot code
// jumps (`smtd bench video`).
func (m *imageModel) soften() {
	for i := range m.codes.Cos {
		m.codes.Cos[i] -= m.thresh
	}
}

// solve sets P to the closed-form solution of the statistics so far.
func (m *imageModel) solve() error {
	m.sinceSolve = 0
	if m.p.IsEmpty() {
		m.p.ReuseAs(m.smt.Settings().Dim, m.smt.Size())
	}
	s := spectral.Settings{Dim: m.smt.Settings().Dim, Drop: m.drop}
	var err error
	if m.nonRedundant {
		_, err = spectral.SolveSMTNonRedundant(&m.p, m.stats, s, spectral.NonRedundantSettings{}, m.src)
	} else {
		_, err = spectral.SolveSMT(&m.p, m.stats, s, m.src)
	}
	if err != nil {
		return fmt.Errorf("smtd: closed-form SMT: %w", err)
	}
	return m.smt.SetP(&m.p)
}

// flush re-solves a closed-form P before a checkpoint, so that the
// checkpoint's P is the solution of the checkpoint's statistics.
func (m *imageModel) flush() error {
	if m.smt == nil || m.solver != config.SolverClosed || m.sinceSolve == 0 {
		return nil
	}
	return m.solve()
}

func (m *imageModel) encode(batch []sample) []output {
	m.prepare(batch, false)
	if m.code == config.CodeVQ {
		m.km.Assign(m.assign, nil, &m.w) // blank rows are zero: code −1
	} else {
		m.km.CodesGQ(&m.codes, &m.w, m.thresh) // blank rows: empty code
		if m.video {
			m.soften()
		}
	}
	if m.smt == nil {
		return m.pooledCodes(batch)
	}
	return m.embedded(batch)
}

// embedded returns the pooled SMT embedding of each image of the batch.
func (m *imageModel) embedded(batch []sample) []output {
	g := m.patcher.Grid
	switch {
	case m.code == config.CodeVQ:
		// The images of a learning batch are embedded one at a time by
		// the goroutines prepare uses (a reader's m.cores is 0: one part,
		// and no closure).
		resize(&m.emb, len(batch), m.pool.Len(g, m.smt.Settings().Dim))
		if split := batchParts(len(batch), m.cores); split > 1 {
			parts.Share(len(batch), split, 1, func(_, lo, hi int) { m.embedImagesVQ(lo, hi) })
		} else {
			m.embedImagesVQ(0, len(batch))
		}
	case m.video:
		m.emb.Reset()
		m.smt.EmbedImagesWeighted(&m.emb, &m.codes, len(batch), g, m.pool)
	default:
		m.emb.Reset()
		m.smt.EmbedImagesGQ(&m.emb, &m.codes, len(batch), g, m.pool)
	}
	out := make([]output, len(batch))
	dim := m.emb.RawMatrix().Cols
	vecs := m.outputVectors(len(batch), dim)
	for i, s := range batch {
		row := m.emb.RawRowView(i)
		v := vecs[i*dim : (i+1)*dim : (i+1)*dim]
		for j, x := range row {
			v[j] = float32(x)
		}
		out[i] = output{vector: v, source: s}
	}
	return out
}

// embedImagesVQ writes the embeddings of images lo…hi−1 of the batch,
// coded by f_vq in m.assign, into their rows of m.emb.
func (m *imageModel) embedImagesVQ(lo, hi int) {
	g := m.patcher.Grid
	m.smt.EmbedImagesVQ(rowRange(&m.emb, lo, hi), m.assign[lo*g.Len():hi*g.Len()], hi-lo, g, m.pool)
}

// pooledCodes sums the codes of each image's patches (m.assign for f_vq,
// m.codes for f_gq) and normalises the sum.
func (m *imageModel) pooledCodes(batch []sample) []output {
	n := m.patcher.Grid.Len()
	k := m.km.Settings().K
	out := make([]output, len(batch))
	vecs := m.outputVectors(len(batch), k)
	for i, s := range batch {
		v := vecs[i*k : (i+1)*k : (i+1)*k]
		for r := i * n; r < (i+1)*n; r++ {
			if m.code == config.CodeVQ {
				if a := m.assign[r]; a >= 0 {
					v[a]++
				}
				continue
			}
			atoms, _ := m.codes.Row(r)
			for _, a := range atoms {
				v[a]++
			}
		}
		normalize32(v)
		out[i] = output{vector: v, source: s}
	}
	return out
}

func normalize32(v []float32) {
	var ss float64
	for _, x := range v {
		ss += float64(x) * float64(x)
	}
	if ss == 0 {
		return
	}
	inv := float32(1 / math.Sqrt(ss))
	for i := range v {
		v[i] *= inv
	}
}

// snapshot copies what encoding needs: not the SMT statistics, which can
// be large (packed K×K) and which queries never use.
func (m *imageModel) snapshot() model { return m.snapshotInto(nil) }

// snapshotInto is snapshot with the dictionary and the SMT in the memory
// of those of retired, an earlier snapshot of m (see recycler).
func (m *imageModel) snapshotInto(retired model) model {
	var km *online.KMeans
	var smt *sgd.SMT
	if r, ok := retired.(*imageModel); ok {
		km, smt = r.km, r.smt
	}
	s := &imageModel{
		imageWork: &imageWork{patcher: online.Patcher{Grid: m.patcher.Grid, Mean: m.patcher.Mean, Context: m.patcher.Context}},
		white:     m.white.Clone(),
		km:        m.km.CloneInto(km),
		code:      m.code, thresh: m.thresh, minNorm: m.minNorm, video: m.video,
		pool: m.pool, solver: m.solver, solveEvery: m.solveEvery, drop: m.drop, smtRange: m.smtRange,
	}
	if m.smt != nil {
		s.smt = m.smt.CloneInto(smt)
	}
	if m.frames != nil {
		s.frameCounts = m.frames.counts()
	}
	return s
}

// reader shares the stages of the snapshot m, whose encoding only reads
// them (online.Whitener.Whiten, online.KMeans.Assign and CodesGQ,
// sgd.SMT.EmbedImagesVQ and the others draw their scratch from pools),
// and encodes in the workspaces of prev, or new ones.
func (m *imageModel) reader(prev model) model {
	ws := new(imageWork)
	if p, ok := prev.(*imageModel); ok {
		ws = p.imageWork
	}
	ws.patcher.Grid, ws.patcher.Mean, ws.patcher.Context = m.patcher.Grid, m.patcher.Mean, m.patcher.Context
	ws.reader = true
	r := &imageModel{
		imageWork: ws,
		white:     m.white, km: m.km, smt: m.smt,
		code: m.code, thresh: m.thresh, minNorm: m.minNorm, video: m.video,
		pool: m.pool, solver: m.solver, frameCounts: m.frameCounts,
	}
	return r
}

// rollback returns the parameters to those of a snapshot taken before a
// step that diverged; the statistics, sums of finite counts, are kept.
func (m *imageModel) rollback(to model) {
	s := to.(*imageModel)
	m.white, m.km = s.white.Clone(), s.km.Clone()
	if s.smt != nil {
		m.smt = s.smt.Clone()
	}
}

// check runs every stage's own check (online.Whitener.Check,
// online.KMeans.Check, sgd.Stats.Check, sgd.SMT.Check): finite and
// non-degenerate, e.g. a whitening operator that collapsed, atoms that
// are no longer unit norm or all alike, a P of lower rank.
func (m *imageModel) check() error {
	if err := stageError("whitening", m.white.Check()); err != nil {
		return err
	}
	if err := stageError("kmeans", m.km.Check()); err != nil {
		return err
	}
	if m.stats != nil {
		if err := stageError("smt statistics", m.stats.Check()); err != nil {
			return err
		}
	}
	if m.smt != nil {
		return stageError("smt", m.smt.Check())
	}
	return nil
}

// part is one serialisable stage of a model, stored as a checkpoint
// section of its name.
type part struct {
	name  string
	state interface {
		MarshalBinary() ([]byte, error)
		UnmarshalBinary([]byte) error
	}
}

// parts lists the stages of an image model in checkpoint order.
func imageParts(w *online.Whitener, km *online.KMeans, stats *sgd.Stats, smt *sgd.SMT) []part {
	ps := []part{{"whitener", w}, {"kmeans", km}}
	if smt != nil {
		ps = append(ps, part{"smt-stats", stats}, part{"smt", smt})
	}
	return ps
}

func (m *imageModel) sections() ([]Section, error) {
	var secs []Section
	for _, p := range imageParts(m.white, m.km, m.stats, m.smt) {
		b, err := p.state.MarshalBinary()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p.name, err)
		}
		secs = append(secs, Section{Name: p.name, Data: b})
	}
	if m.smt != nil {
		secs = append(secs, Section{Name: "smt-solver", Data: binary.AppendUvarint(nil, uint64(m.sinceSolve))})
	}
	if m.frames != nil {
		b, err := m.frames.MarshalBinary()
		if err != nil {
			return nil, err
		}
		secs = append(secs, Section{Name: "video-frames", Data: b})
	}
	return secs, nil
}

// restore reads every stage into fresh ones and swaps them in only when
// all have been read.
func (m *imageModel) restore(secs []Section) error {
	w, km := m.white.Clone(), m.km.Clone()
	var stats *sgd.Stats
	var smt *sgd.SMT
	if m.smt != nil {
		stats, smt = sgd.NewStats(m.stats.Settings()), sgd.NewSMT(m.smt.Settings(), m.src)
	}
	for _, p := range imageParts(w, km, stats, smt) {
		b, err := findSection(secs, p.name)
		if err != nil {
			return err
		}
		if err := p.state.UnmarshalBinary(b); err != nil {
			return fmt.Errorf("%s: %w", p.name, err)
		}
	}
	// shapeChanges found the config's smt.drop equal to the checkpoint's,
	// but a P learned before the SGD applied smt.drop 1 kept the constant
	// eigenvector: its state says which it is.
	if m.smt != nil {
		if got, want := smt.Settings().DropConstant, m.smt.Settings().DropConstant; got != want {
			return fmt.Errorf("smt: P was learned with smt.drop %d but the config has %d (before the SGD solver applied smt.drop, it kept the constant eigenvector whatever smt.drop said): set smt.drop: %d to resume it, or move the checkpoint away",
				dropped(got), dropped(want), dropped(got))
		}
	}
	var since uint64
	if m.smt != nil {
		b, err := findSection(secs, "smt-solver")
		if err != nil {
			return err
		}
		var n int
		if since, n = binary.Uvarint(b); n <= 0 {
			return errors.New("smt-solver: bad encoding")
		}
	}
	var frames *frameTracker
	if m.frames != nil {
		b, err := findSection(secs, "video-frames")
		if err != nil {
			return err
		}
		frames = newFrameTracker(m.frames.maxStreams, m.frames.reorder, m.frames.atoms)
		frames.maxJump = m.frames.maxJump
		if err := frames.UnmarshalBinary(b); err != nil {
			return err
		}
	}
	m.white, m.km, m.stats, m.smt, m.sinceSolve, m.frames = w, km, stats, smt, int(since), frames
	return nil
}

// dropped is the smt.drop of an SGD that does or does not drop the
// constant eigenvector.
func dropped(constant bool) int {
	if constant {
		return 1
	}
	return 0
}

func (m *imageModel) describe() map[string]any {
	g := m.patcher.Grid
	d := map[string]any{
		"image":               fmt.Sprintf("%dx%dx%d", g.Height, g.Width, g.Channels),
		"patch":               fmt.Sprintf("%dx%d stride %d, %d per image, dim %d", g.Size, g.Size, g.Stride, g.Len(), g.Dim()),
		"mean_removal":        m.patcher.Mean.String(),
		"whitening_patches":   m.white.Rows(),
		"whitening_refreshes": m.white.Refreshes(),
		"whitening_frozen":    m.white.Frozen(),
		"whitening_clipped":   m.white.Clipped(),
		"whitening_rejected":  m.white.Rejected(),
		"atoms":               m.km.Settings().K,
		"atoms_seeded":        m.km.Seeded(),
		"atoms_reseeded":      m.km.Reseeds(),
		"kmeans_patches":      m.km.Samples(),
		"code":                m.code,
	}
	if m.smt != nil {
		d["smt_dim"] = m.smt.Settings().Dim
		d["smt_solver"] = m.solver
		d["smt_steps"] = m.smt.Steps()
		d["smt_atom_steps_bounded"] = m.smt.BoundedAtomSteps()
		d["output_dim"] = m.pool.Len(g, m.smt.Settings().Dim)
		c := m.frameCounts
		if m.frames != nil {
			c = m.frames.counts()
		}
		if c != nil {
			d["video_streams"] = c.Streams
			d["video_frames_late"] = c.Late
			d["video_gaps"] = c.Gaps
			d["video_chain_restarts"] = c.ChainRestarts
			d["video_streams_forgotten"] = c.StreamsForgotten
		}
	} else {
		d["output_dim"] = m.km.Settings().K
	}
	return d
}
