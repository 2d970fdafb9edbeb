package daemon

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"

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
//   - SMT: the f_vq code of every patch, from which the owner adds the
//     spatial co-occurrences to the statistics and takes the SGD step (or
//     the closed-form solve) exactly as a single daemon does.
//
// The costly part, scoring every whitened patch against every atom, is
// the workers'; the owner's step costs O(K·dim) per contribution plus the
// SMT statistics and step of the codes.

// imageContribution is one minibatch's contribution.
type imageContribution struct {
	images int
	white  online.WhitenContribution
	km     online.KMeansContribution
	codes  []int32 // f_vq code of every patch (−1: blank); nil without SMT
}

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
func (m *imageModel) contribute(batch []sample, src rand.Source, ahead int) ([]byte, []output) {
	m.extract(batch, false)
	c := imageContribution{images: len(batch)}
	m.white.Contribute(&c.white, &m.x, nil)
	w := m.white.Clone()
	_ = w.Apply([]*online.WhitenContribution{&c.white}) // as in learn: a failed refresh keeps the operator
	m.whiten(w)
	m.km.Contribute(&c.km, m.assign, nil, &m.w, m.blank, src, m.km.DeadWithin(ahead))
	var outs []output
	if m.smt == nil {
		outs = m.pooledCodes(batch)
	} else {
		c.codes = make([]int32, len(m.assign))
		for i, a := range m.assign {
			c.codes[i] = int32(a)
		}
		outs = m.embedded(batch)
	}
	return c.encode(), outs
}

// applyContributions takes one learning step from the encoded
// contributions, in order: the whitening moments, the k-means step, then
// the SMT statistics and step of their codes, as learn does for one
// minibatch of all their images. A contribution that does not decode or
// does not fit the model is refused before anything changes.
func (m *imageModel) applyContributions(enc [][]byte) error {
	cs := make([]imageContribution, len(enc))
	g := m.patcher.Grid
	images := 0
	for i, b := range enc {
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
	m.yield()
	if m.smt == nil {
		return nil
	}
	m.assign = m.assign[:0]
	for i := range cs {
		for _, a := range cs[i].codes {
			m.assign = append(m.assign, int(a))
		}
	}
	if len(m.assign) != images*g.Len() {
		panic("smtd: contribution codes checked above")
	}
	if err := m.learnSpatial(images); err != nil {
		return err
	}
	m.yield()
	return m.solveOnSchedule()
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
	if m.smt == nil {
		return nil
	}
	if len(c.codes) != c.images*g.Len() {
		return fmt.Errorf("%w: %d codes for %d images of %d patches", errContribution, len(c.codes), c.images, g.Len())
	}
	for _, a := range c.codes {
		if a < -1 || int(a) >= k.K {
			return fmt.Errorf("%w: code %d outside -1..%d", errContribution, a, k.K-1)
		}
	}
	return nil
}

// encode writes the contribution as: images, then the whitening and
// k-means contributions and the codes, each preceded by its length
// (uvarints); codes are stored as uvarints of code+1.
func (c *imageContribution) encode() []byte {
	wb, err := c.white.MarshalBinary()
	if err != nil {
		panic(err)
	}
	kb, err := c.km.MarshalBinary()
	if err != nil {
		panic(err)
	}
	b := make([]byte, 0, 16+len(wb)+len(kb)+2*len(c.codes))
	b = binary.AppendUvarint(b, uint64(c.images))
	b = binary.AppendUvarint(b, uint64(len(wb)))
	b = append(b, wb...)
	b = binary.AppendUvarint(b, uint64(len(kb)))
	b = append(b, kb...)
	b = binary.AppendUvarint(b, uint64(len(c.codes)))
	for _, a := range c.codes {
		b = binary.AppendUvarint(b, uint64(a+1))
	}
	return b
}

func (c *imageContribution) decode(b []byte) error {
	r := byteReader{b: b}
	images := r.uvarint()
	white := r.bytes()
	km := r.bytes()
	n := r.uvarint()
	if r.err != nil || n > uint64(len(r.b)) || images > 1<<31 {
		return fmt.Errorf("%w: truncated", errContribution)
	}
	c.images = int(images)
	if err := c.white.UnmarshalBinary(white); err != nil {
		return fmt.Errorf("%w: whitening: %w", errContribution, err)
	}
	if err := c.km.UnmarshalBinary(km); err != nil {
		return fmt.Errorf("%w: k-means: %w", errContribution, err)
	}
	c.codes = make([]int32, 0, n)
	for range n {
		v := r.uvarint()
		if r.err != nil || v > 1<<31 {
			return fmt.Errorf("%w: codes", errContribution)
		}
		c.codes = append(c.codes, int32(v)-1)
	}
	if len(r.b) != 0 {
		return fmt.Errorf("%w: %d trailing bytes", errContribution, len(r.b))
	}
	if n == 0 {
		c.codes = nil
	}
	return nil
}

// byteReader reads uvarints and length-prefixed byte strings, keeping the
// first error.
type byteReader struct {
	b   []byte
	err error
}

func (r *byteReader) uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.err = errContribution
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *byteReader) bytes() []byte {
	n := r.uvarint()
	if r.err != nil || n > uint64(len(r.b)) {
		r.err = errContribution
		return nil
	}
	b := r.b[:n]
	r.b = r.b[n:]
	return b
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

// workerSections returns what a worker needs of the model to code and
// embed.
func (m *imageModel) workerSections() ([]Section, error) {
	var secs []Section
	for _, p := range workerParts(m) {
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
func (m *imageModel) withWorkerSections(secs []Section) (*imageModel, error) {
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
	return s, nil
}
