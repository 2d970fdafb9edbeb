package daemon

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"

	"gonum.org/v1/gonum/mat"

	"github.com/smtd/smtd/config"
	"github.com/smtd/smtd/online"
)

// imageModel is the image and video chain of smt-minimalistic (App. C, D):
// TxT patches, mean removal, online whitening (λI+Σ)^(-1/2), L2
// normalisation, and an online spherical k-means dictionary. The output
// of an image is its pooled sparse code: the sum over its non-blank
// patches of the patch codes (f_vq one-hot, or f_gq cosines), L2-normalised
// — a K-dimensional bag of atoms. An image whose patches are all blank
// gets the zero vector.
type imageModel struct {
	patcher online.Patcher
	white   *online.Whitener
	km      *online.KMeans
	code    string  // config.CodeVQ or CodeGQ
	thresh  float64 // t of f_gq
	minNorm float64

	// Workspaces, reused between batches; never shared with clones.
	x      mat.Dense // all patches of a batch, one per row
	w      mat.Dense // whitened and normalised
	blank  []bool
	assign []int
	codes  online.SparseCodes
}

func newImageModel(p *config.Pipeline, src rand.Source) *imageModel {
	g := online.PatchGrid{Width: p.Image.Width, Height: p.Image.Height, Channels: p.Image.Channels, Size: p.Patches.Size, Stride: p.Patches.Stride}
	mean, err := online.ParseMeanMode(p.Patches.Mean)
	if err != nil {
		panic(err) // validated by config
	}
	m := &imageModel{
		patcher: online.Patcher{Grid: g, Mean: mean, Context: p.Patches.Context},
		white:   online.NewWhitener(g.Dim(), whitenSettings(p)),
		km:      online.NewKMeans(kmeansSettings(p, g.Dim()), src),
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

func (m *imageModel) tune(p *config.Pipeline) {
	m.code, m.thresh, m.minNorm = p.KMeans.Code, p.KMeans.Threshold, p.Patches.MinNorm
	if err := m.white.SetSettings(whitenSettings(p)); err != nil {
		panic(err) // validated by config
	}
	if err := m.km.SetSettings(kmeansSettings(p, m.patcher.Grid.Dim())); err != nil {
		panic(err)
	}
}

// prepare extracts, centres, whitens and normalises the patches of batch
// into m.w and flags the blank ones; with observe it first updates the
// whitening statistics.
func (m *imageModel) prepare(batch []sample, observe bool) {
	g := m.patcher.Grid
	n := g.Len()
	resize(&m.x, len(batch)*n, g.Dim())
	for i, s := range batch {
		m.patcher.Extract(m.x.Slice(i*n, (i+1)*n, 0, g.Dim()).(*mat.Dense), s.pixels)
	}
	if observe {
		// A failed refresh keeps the previous operator; it is retried at
		// the next refresh.
		_ = m.white.Observe(&m.x, nil)
	}
	resize(&m.w, len(batch)*n, g.Dim())
	m.white.Whiten(&m.w, &m.x)
	m.blank = online.NormalizeRows(&m.w, m.minNorm, m.blank)
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

func (m *imageModel) learn(batch []sample) []output {
	m.prepare(batch, true)
	m.assign = slices.Grow(m.assign[:0], len(m.blank))[:len(m.blank)]
	if m.code == config.CodeVQ {
		// The codes published are the assignments the learning step
		// made (with the atoms before its update): no work twice.
		m.km.LearnAssign(m.assign, nil, &m.w, m.blank)
		return m.pooledVQ(batch)
	}
	m.km.Learn(&m.w, m.blank)
	return m.pooledGQ(batch)
}

func (m *imageModel) encode(batch []sample) []output {
	m.prepare(batch, false)
	if m.code == config.CodeVQ {
		m.assign = slices.Grow(m.assign[:0], len(m.blank))[:len(m.blank)]
		m.km.Assign(m.assign, nil, &m.w) // blank rows are zero: code −1
		return m.pooledVQ(batch)
	}
	return m.pooledGQ(batch)
}

// pooledVQ sums the one-hot codes m.assign of each image's patches.
func (m *imageModel) pooledVQ(batch []sample) []output {
	n := m.patcher.Grid.Len()
	k := m.km.Settings().K
	out := make([]output, len(batch))
	for i, s := range batch {
		v := make([]float32, k)
		for _, a := range m.assign[i*n : (i+1)*n] {
			if a >= 0 {
				v[a]++
			}
		}
		normalize32(v)
		out[i] = output{vector: v, source: s}
	}
	return out
}

// pooledGQ sums the f_gq codes (cosines >= t) of each image's patches.
func (m *imageModel) pooledGQ(batch []sample) []output {
	n := m.patcher.Grid.Len()
	k := m.km.Settings().K
	m.km.CodesGQ(&m.codes, &m.w, m.thresh) // blank rows are zero: empty code
	out := make([]output, len(batch))
	for i, s := range batch {
		v := make([]float32, k)
		for r := i * n; r < (i+1)*n; r++ {
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

func (m *imageModel) clone() model {
	return &imageModel{
		patcher: online.Patcher{Grid: m.patcher.Grid, Mean: m.patcher.Mean, Context: m.patcher.Context},
		white:   m.white.Clone(),
		km:      m.km.Clone(),
		code:    m.code, thresh: m.thresh, minNorm: m.minNorm,
	}
}

func (m *imageModel) finite() bool {
	return finiteMatrix(m.km.Atoms()) && finiteMatrix(m.white.Operator())
}

func finiteMatrix(a mat.Matrix) bool {
	r, c := a.Dims()
	for i := range r {
		for j := range c {
			if v := a.At(i, j); math.IsNaN(v) || math.IsInf(v, 0) {
				return false
			}
		}
	}
	return true
}

func (m *imageModel) sections() ([]Section, error) {
	w, err := m.white.MarshalBinary()
	if err != nil {
		return nil, err
	}
	k, err := m.km.MarshalBinary()
	if err != nil {
		return nil, err
	}
	return []Section{{Name: "whitener", Data: w}, {Name: "kmeans", Data: k}}, nil
}

func (m *imageModel) restore(secs []Section) error {
	wb, err := findSection(secs, "whitener")
	if err != nil {
		return err
	}
	kb, err := findSection(secs, "kmeans")
	if err != nil {
		return err
	}
	w, km := m.white.Clone(), m.km.Clone()
	if err := w.UnmarshalBinary(wb); err != nil {
		return fmt.Errorf("whitener: %w", err)
	}
	if err := km.UnmarshalBinary(kb); err != nil {
		return fmt.Errorf("k-means: %w", err)
	}
	m.white, m.km = w, km
	return nil
}

func (m *imageModel) describe() map[string]any {
	g := m.patcher.Grid
	return map[string]any{
		"image":               fmt.Sprintf("%dx%dx%d", g.Height, g.Width, g.Channels),
		"patch":               fmt.Sprintf("%dx%d stride %d, %d per image, dim %d", g.Size, g.Size, g.Stride, g.Len(), g.Dim()),
		"mean_removal":        m.patcher.Mean.String(),
		"whitening_patches":   m.white.Rows(),
		"whitening_refreshes": m.white.Refreshes(),
		"whitening_frozen":    m.white.Frozen(),
		"atoms":               m.km.Settings().K,
		"atoms_seeded":        m.km.Seeded(),
		"atoms_reseeded":      m.km.Reseeds(),
		"kmeans_patches":      m.km.Samples(),
		"code":                m.code,
	}
}
