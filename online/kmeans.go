package online

import (
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sync"

	"gonum.org/v1/gonum/floats"
	"gonum.org/v1/gonum/mat"

	"github.com/smtd/smtd/internal/finite"
	"github.com/smtd/smtd/internal/parts"
	"github.com/smtd/smtd/internal/state"
)

// KMeansSettings configures a KMeans dictionary. K and Dim are its shape
// and cannot change; the rest may be tuned live with SetSettings. A zero
// field means its documented default.
type KMeansSettings struct {
	// K is the number of atoms. Required.
	K int
	// Dim is the dimension of the atoms and data rows. Required.
	Dim int
	// LearningRate is η of Algorithm 1, line 13, in (0, 1]. With η = 1,
	// no Decay and an infinite Memory, an atom is the normalised running
	// mean of every row ever assigned to it (mini-batch k-means). Zero
	// means 1.
	LearningRate float64
	// Decay anneals the rate: η_t = η/(1 + Decay·t), t the number of
	// minibatches learned before this one. Zero means no decay; it must
	// be >= 0.
	Decay float64
	// Memory is the number of assigned rows an atom averages over once
	// the stream is long: after a minibatch of n non-blank rows every
	// count decays, N_j ← N_j·exp(−n/(K·Memory)), so an atom of average
	// use keeps N_j ≈ Memory + h_j/2 and its step h_j/N_j stays near
	// h_j/Memory instead of shrinking like 1/t. The atoms then keep
	// converging at a steady pace and follow a drifting stream, with noise
	// of order 1/√Memory. The decay is per row, not per batch, so the dynamics do
	// not depend on how the stream is cut into minibatches. Zero means
	// 100; +Inf means never forget (Sculley's mini-batch k-means, whose
	// atoms are the means of every row ever assigned to them), which
	// converges much more slowly: with the default, one pass of the
	// daemon over 1000 MNIST digits ends within 0.4% of batch k-means
	// (daemon's TestStreamedKMeansMatchesLloyd; BENCHMARKS.md).
	Memory float64
	// ReseedAfter is the number of consecutive minibatches an atom may go
	// without any row assigned to it before it is re-seeded from a row of
	// the current minibatch. Zero means 100; a negative value disables
	// re-seeding.
	ReseedAfter int
}

const (
	defaultReseedAfter = 100
	defaultMemory      = 100
)

func (s KMeansSettings) memory() float64 {
	if s.Memory == 0 {
		return defaultMemory
	}
	return s.Memory
}

func (s KMeansSettings) learningRate() float64 {
	if s.LearningRate == 0 {
		return 1
	}
	return s.LearningRate
}

func (s KMeansSettings) reseedAfter() int {
	if s.ReseedAfter == 0 {
		return defaultReseedAfter
	}
	return s.ReseedAfter
}

// Validate reports whether the settings are usable.
func (s KMeansSettings) Validate() error {
	switch {
	case s.K < 1:
		return fmt.Errorf("online: k-means K = %d: must be >= 1", s.K)
	case s.Dim < 1:
		return fmt.Errorf("online: k-means Dim = %d: must be >= 1", s.Dim)
	case !(s.LearningRate >= 0 && s.LearningRate <= 1):
		return fmt.Errorf("online: k-means learning rate %v: must be in (0, 1] (0 means 1)", s.LearningRate)
	case !(s.Decay >= 0) || math.IsInf(s.Decay, 1):
		return fmt.Errorf("online: k-means decay %v: must be >= 0", s.Decay)
	case !(s.Memory >= 0):
		return fmt.Errorf("online: k-means memory %v: must be > 0 (0 means %v)", s.Memory, defaultMemory)
	}
	return nil
}

// KMeans is a dictionary of K unit-norm atoms learned by online spherical
// k-means, the 1-sparse dictionary learning of smt-minimalistic, App. D,
// Algorithm 1, applied one minibatch at a time. For a minibatch X with
// rows x_i scaled to unit norm (blank rows left out), Learn does
//
//	j*(i) = argmax_j ⟨x_i, φ_j⟩                       (line 10, f_vq)
//	h_j   = #{i : j*(i) = j},  m_j = (1/h_j) Σ_{i: j*(i)=j} x_i
//	N_j  ← e^(−n/(K·M))·N_j + h_j                       (counts, memory M)
//	η_t   = η/(1 + Decay·t)
//	φ_j  ← φ_j + η_t·(h_j/N_j)·(m_j − φ_j)   if h_j > 0 (line 13)
//	φ_j  ← φ_j/‖φ_j‖                                    (lines 14-18)
//
// Line 13 divides the summed residuals by the batch count h_j; scaling
// the step by h_j/N_j instead, with N_j the count over all batches so far,
// is the mini-batch k-means of Sculley (2010) and scikit-learn's
// MiniBatchKMeans: with η = 1 and M = +Inf each atom is exactly the
// normalised running mean of every row ever assigned to it, so the
// dictionary settles instead of jittering by a whole batch mean at each
// step. A finite memory M (n is the number of non-blank rows of the
// batch) makes each atom a running mean over about its last M rows, which
// converges much faster and tracks drift (see KMeansSettings.Memory).
//
// The dictionary starts empty. The first minibatches seed it with K
// distinct non-blank rows drawn by greedy k-means++ sampling (the rows of
// the batch that completes the dictionary are then learned from as
// usual). An atom left without rows for ReseedAfter consecutive
// minibatches is dead: it is re-seeded with a row of the current minibatch
// drawn with probability proportional to its distortion
// 1 − max_j cos(x, φ_j), so dead atoms move to where the dictionary fits
// the data worst. Its count restarts at zero.
//
// All randomness is drawn from the rand.Source given to NewKMeans, which
// the caller owns (and checkpoints); KMeans holds no other random state.
//
// The cosines are computed in float32 by the fused kernels of the package
// (see Performance in the package documentation), from a float32 copy of
// the atoms kept beside the float64 ones: the argmax and the f_gq set are
// those of the float64 cosines except between atoms (or at a threshold)
// within 4(Dim+2)·2⁻²⁴ of each other, and seeding counts a row that close
// to an atom as a copy of it.
//
// Learn, Apply, SetSettings and UnmarshalBinary modify the dictionary, and
// Contribute uses the workspace of Learn; the other
// methods only read it and may run concurrently with each other (Assign
// and CodesGQ take their workspaces from a pool), which makes a Clone a
// safe snapshot for concurrent queries.
type KMeans struct {
	s   KMeansSettings
	rng *rand.Rand // nil when the source is nil

	atoms  *mat.Dense  // K×Dim, one atom per row
	packed packedAtoms // float32 copy of the atoms for the fused kernels
	counts []float64   // N_j
	last   []int64     // minibatch in which atom j was last assigned or seeded
	seeded int         // atoms 0..seeded-1 are in use

	batches int64 // minibatches learned (with at least one non-blank row)
	samples int64 // non-blank rows learned
	reseeds int64 // atoms re-seeded

	cores int // goroutines one call may score on (SetCores)

	work scratch     // Learn's workspace
	sums []float64   // K×Dim per-atom sums of assigned rows
	hits []float64   // h_j
	dead []int       // atoms to re-seed
	prev []float64   // an atom before its step (Apply)
	cand []candidate // the re-seeding candidates of Apply
	// pool holds *scratch for the read-only methods. A dictionary and
	// its clones share it, so that coding with a new snapshot finds the
	// workspaces the previous one left.
	pool *sync.Pool
}

// NewKMeans returns an empty dictionary (no atom seeded yet). src is the
// only source of randomness of Learn; it may be nil for a dictionary that
// is only restored (UnmarshalBinary) and used for coding, in which case
// Learn panics. NewKMeans panics if the settings are invalid.
func NewKMeans(s KMeansSettings, src rand.Source) *KMeans {
	if err := s.Validate(); err != nil {
		panic(err)
	}
	k := &KMeans{
		s:      s,
		atoms:  mat.NewDense(s.K, s.Dim, nil),
		packed: newPackedAtoms(s.K, s.Dim),
		counts: make([]float64, s.K),
		last:   make([]int64, s.K),
	}
	if src != nil {
		k.rng = rand.New(src)
	}
	k.pool = &sync.Pool{New: func() any { return new(scratch) }}
	return k
}

// Settings returns the current settings.
func (k *KMeans) Settings() KMeansSettings { return k.s }

// SetCores lets each later call of Learn, LearnAssign, Contribute, Assign
// and CodesGQ score its rows on up to n goroutines at once (n ≤ 1: on the
// caller's alone, as a new KMeans does), in contiguous ranges of rows of
// at least partWork multiply-adds each. Every row is scored by the same
// kernel calls either way, so the codes and the learning step are bit for
// bit those of one goroutine; the int8 prefilter of AVX-512 VNNI machines
// (K ≥ 2048) splits its blocks of rows the same way. Seeding a new
// dictionary cuts each atom's k-means++ trials into parts instead (seed),
// again with the same bits. A Clone scores on one goroutine until its own
// SetCores.
func (k *KMeans) SetCores(n int) { k.cores = n }

// SetSettings replaces the rates (LearningRate, Decay, Memory,
// ReseedAfter) for live tuning. It refuses other K or Dim.
func (k *KMeans) SetSettings(s KMeansSettings) error {
	if err := s.Validate(); err != nil {
		return err
	}
	if s.K != k.s.K || s.Dim != k.s.Dim {
		return fmt.Errorf("online: k-means shape %dx%d cannot change to %dx%d", k.s.K, k.s.Dim, s.K, s.Dim)
	}
	k.s = s
	return nil
}

// Atoms returns a read-only K×Dim view of the dictionary, one atom per
// row. Rows of atoms not yet seeded are zero. The view follows later
// updates; Clone the KMeans for a fixed copy.
func (k *KMeans) Atoms() mat.Matrix { return readOnly{k.atoms} }

// Seeded returns the number of atoms in use; it is K once the first
// minibatches have seeded the dictionary.
func (k *KMeans) Seeded() int { return k.seeded }

// Samples returns the number of non-blank rows learned from, seeds
// included.
func (k *KMeans) Samples() int64 { return k.samples }

// Batches returns the number of minibatches learned from (batches without
// a non-blank row are not counted).
func (k *KMeans) Batches() int64 { return k.batches }

// Reseeds returns the number of times a dead atom was re-seeded.
func (k *KMeans) Reseeds() int64 { return k.reseeds }

// Finite reports whether every atom is finite (a caller's check for a
// diverged dictionary).
func (k *KMeans) Finite() bool { return finite.All(k.atoms.RawMatrix().Data) }

// Counts returns the cumulative counts N_j (decayed by Memory),
// written into dst if it has length K (else into a new slice).
func (k *KMeans) Counts(dst []float64) []float64 {
	if len(dst) != k.s.K {
		dst = make([]float64, k.s.K)
	}
	copy(dst, k.counts)
	return dst
}

// Idle returns, for each atom, the number of minibatches since it was last
// assigned a row or seeded, written into dst if it has length K (else
// into a new slice).
func (k *KMeans) Idle(dst []int64) []int64 {
	if len(dst) != k.s.K {
		dst = make([]int64, k.s.K)
	}
	for j, l := range k.last {
		dst[j] = k.batches - l
	}
	return dst
}

func (k *KMeans) setAtom(j int, v []float64) {
	copy(k.atoms.RawRowView(j), v)
	k.packed.set(j, v)
}

// repack rebuilds the float32 copy of the atoms from the float64 ones.
func (k *KMeans) repack() {
	for j := 0; j < k.s.K; j++ {
		if j < k.seeded {
			k.packed.set(j, k.atoms.RawRowView(j))
		} else {
			k.packed.reset(j)
		}
	}
}

// Learn updates the dictionary with the minibatch x (one row per sample),
// leaving out the rows that blank flags (blank may be nil) and zero rows.
// Rows are scaled to unit norm before use, so x need not be normalised.
// It panics with mat.ErrShape if x does not have Dim columns or blank is
// non-nil and not one flag per row, and if the KMeans has no rand.Source.
func (k *KMeans) Learn(x mat.Matrix, blank []bool) {
	k.LearnAssign(nil, nil, x, blank)
}

// LearnAssign is Learn that also writes the f_vq code of each row as this
// step computed it, before the update: dst[i] is the atom of largest
// cosine with row i and cos[i] that cosine, or −1 and 0 for blank and zero
// rows. Either may be nil; otherwise they must have one element per row.
func (k *KMeans) LearnAssign(dst []int, cos []float64, x mat.Matrix, blank []bool) {
	r := k.checkBatch(dst, cos, x, blank)
	if k.rng == nil {
		panic("online: KMeans.Learn without a rand.Source")
	}
	w := &k.work
	m := w.compact(x, blank, k.cores)
	k.learn(m)
	w.spread(dst, cos, r, m)
}

// learn takes the learning step of LearnAssign from the m compacted unit
// rows of the workspace, leaving their codes in it. With m = 0 it does
// nothing.
func (k *KMeans) learn(m int) {
	if m == 0 {
		return
	}
	w := &k.work
	cur := k.batches + 1
	if k.seeded < k.s.K {
		k.seed(m, cur)
	}
	w.argmaxFused(fused, &k.packed, k.seeded, m, k.cores)
	if k.seeded == k.s.K {
		k.update(m, cur)
		k.reseed(m, cur)
	}
	k.batches = cur
	k.samples += int64(m)
}

// checkBatch panics with mat.ErrShape unless x has Dim columns and blank,
// dst and cos are nil or have one element per row; it returns the rows.
func (k *KMeans) checkBatch(dst []int, cos []float64, x mat.Matrix, blank []bool) int {
	r, c := x.Dims()
	if c != k.s.Dim || (blank != nil && len(blank) != r) ||
		(dst != nil && len(dst) != r) || (cos != nil && len(cos) != r) {
		panic(mat.ErrShape)
	}
	return r
}

// Contribute computes, without changing the dictionary, one minibatch's
// contribution to a learning step (Algorithm 1, lines 10-13) under the
// current dictionary, for a KMeans that learns elsewhere (Apply). It codes
// the rows of x as LearnAssign does (blank flags and zero rows left out,
// the same kernel and the same results), writing the f_vq codes into
// assign and cos when they are not nil, and writes into dst, reusing its
// slices:
//
//   - while the dictionary is not fully seeded (Seeded < K), the m
//     non-blank rows scaled to unit norm as Seeds, and no Hits, Sums or
//     candidates; the codes are then those of the atoms seeded so far,
//     whereas LearnAssign codes with the atoms it seeds from the batch;
//   - else the hits h_j and the sums s_j = Σ_{i: j*(i)=j} x_i of the rows
//     assigned to each atom, added in row order as LearnAssign does, and up
//     to candidates re-seeding candidates: u is drawn from src for each
//     non-blank row, in row order (one Float64 each, as LearnAssign draws
//     from its own source when an atom is dead), the key of a row is
//     log(u)/(1 − cos) (Efraimidis and Spirakis, 2006), and the rows of
//     largest key are sent, best first, with their keys. DeadWithin says
//     how many a contribution needs. With candidates ≤ 0, src is not used
//     and may be nil.
//
// It uses the workspace of Learn: it must not run concurrently with
// methods that modify k, but a worker's own Clone may contribute while the
// owner learns. It panics with mat.ErrShape on the shapes LearnAssign
// refuses.
func (k *KMeans) Contribute(dst *KMeansContribution, assign []int, cos []float64, x mat.Matrix, blank []bool, src rand.Source, candidates int) {
	r := k.checkBatch(assign, cos, x, blank)
	K, dim := k.s.K, k.s.Dim
	w := &k.work
	m := w.compact(x, blank, k.cores)
	dst.reset()
	dst.Rows = m
	w.argmaxFused(fused, &k.packed, k.seeded, m, k.cores)
	w.spread(assign, cos, r, m)
	if m == 0 {
		return
	}
	if k.seeded < K {
		dst.Seeds = append(dst.Seeds, w.x[:m*dim]...)
		return
	}
	dst.Hits = grow(dst.Hits, K)
	dst.Sums = grow(dst.Sums, K*dim)
	clear(dst.Sums)
	k.accumulate(dst.Hits, dst.Sums, m)
	if candidates <= 0 {
		return
	}
	w.drawKeys(rand.New(src), m)
	for _, c := range w.order[:min(candidates, len(w.order))] {
		dst.Keys = append(dst.Keys, w.keys[c])
		dst.Candidates = append(dst.Candidates, w.x[c*dim:(c+1)*dim]...)
	}
}

// Apply takes one learning step from the contributions cs, in order:
//
//  1. The Seeds of each contribution that carries them are learned, in
//     order, each as a minibatch exactly as LearnAssign learns it: seeding
//     with k's rand.Source while atoms are missing, then the update and
//     re-seeding of the dictionary. (One minibatch each, not their
//     concatenation: greedy k-means++ costs O(K²) per row, and a single
//     daemon seeds from its first minibatch alone.)
//  2. The Hits and Sums of the other contributions are summed in order,
//     h_j = Σ_c h_j^c and s_j = Σ_c s_j^c over m = Σ_c Rows_c rows, and
//     applied as one update, the update of LearnAssign (see step):
//     N_j ← e^(−m/(K·M))·N_j + h_j, φ_j ← φ_j + η_t·(h_j/N_j)·(s_j/h_j − φ_j),
//     φ_j ← φ_j/‖φ_j‖, η_t from Batches; an atom whose new value is zero
//     keeps its previous direction. Then the dead atoms (idle for at least
//     ReseedAfter minibatches), in increasing order, are re-seeded with the
//     candidates of all contributions merged by key, largest first (ties:
//     contribution order, then position), each used once; atoms left
//     without a candidate stay dead. Batches counts one and Samples adds m.
//
// Each Seeds contribution counts one minibatch, and so do the Hits
// contributions together (Seeds and Hits meet only around the end of
// seeding).
//
// A contribution applied alone to the version of the dictionary it was
// computed under is LearnAssign of its batch, bit for bit, except for the
// re-seeding draws (the candidates' u come from the contributor's source).
// Contributions with Rows 0 are skipped, and so are Hits contributions
// while the dictionary is not fully seeded (they cannot have been
// computed under an earlier version of it).
//
// It panics if a contribution does not fit k (CheckContribution), and if
// the KMeans has no rand.Source and a contribution carries Seeds.
func (k *KMeans) Apply(cs []*KMeansContribution) {
	for _, c := range cs {
		if err := k.CheckContribution(c); err != nil {
			panic(err)
		}
	}
	K, dim := k.s.K, k.s.Dim
	w := &k.work
	for _, c := range cs {
		if len(c.Seeds) == 0 {
			continue
		}
		if k.rng == nil {
			panic("online: KMeans.Apply of seeds without a rand.Source")
		}
		ms := len(c.Seeds) / dim
		w.x = grow(w.x, ms*dim)
		copy(w.x, c.Seeds)
		k.learn(ms)
	}
	if k.seeded < K {
		return
	}
	var (
		first  *KMeansContribution // the only Hits contribution, until a second one
		merged bool
		m      int
	)
	for _, c := range cs {
		if c.Rows == 0 || len(c.Seeds) > 0 {
			continue
		}
		m += c.Rows
		if first == nil {
			first = c
			continue
		}
		if !merged {
			k.hits = append(k.hits[:0], first.Hits...)
			k.sums = append(k.sums[:0], first.Sums...)
			merged = true
		}
		floats.Add(k.hits, c.Hits)
		floats.Add(k.sums, c.Sums)
	}
	if m == 0 {
		return
	}
	hits, sums := first.Hits, first.Sums
	if merged {
		hits, sums = k.hits, k.sums
	}
	cur := k.batches + 1
	k.step(m, cur, hits, sums, false)
	if dead := k.deadAt(cur); len(dead) > 0 {
		k.cand = k.cand[:0]
		for i, c := range cs {
			for p, key := range c.Keys {
				k.cand = append(k.cand, candidate{key: key, c: i, pos: p})
			}
		}
		slices.SortFunc(k.cand, func(a, b candidate) int {
			if c := cmp.Compare(b.key, a.key); c != 0 {
				return c
			}
			if c := cmp.Compare(a.c, b.c); c != 0 {
				return c
			}
			return cmp.Compare(a.pos, b.pos)
		})
		for i, j := range dead {
			if i == len(k.cand) {
				break
			}
			cd := k.cand[i]
			k.revive(j, cur, cs[cd.c].Candidates[cd.pos*dim:(cd.pos+1)*dim])
		}
	}
	k.batches = cur
	k.samples += int64(m)
}

// candidate is a re-seeding candidate of Apply: position pos of
// contribution c, of key key.
type candidate struct {
	key    float64
	c, pos int
}

// CheckContribution reports, with an error wrapping ErrFormat, whether c
// does not fit k's shape or is inconsistent: Seeds of Rows×Dim values
// with no Hits, or else (with rows) K hits and K×Dim sums, and Dim values
// per candidate key.
func (k *KMeans) CheckContribution(c *KMeansContribution) error {
	K, dim := k.s.K, k.s.Dim
	switch {
	case c.Rows < 0:
		return fmt.Errorf("%w: k-means contribution of %d rows", ErrFormat, c.Rows)
	case len(c.Seeds) > 0 && (len(c.Seeds) != c.Rows*dim || len(c.Hits) != 0):
		return fmt.Errorf("%w: k-means contribution of %d rows with %d seed values and %d hits, receiver has Dim %d",
			ErrFormat, c.Rows, len(c.Seeds), len(c.Hits), dim)
	case len(c.Seeds) == 0 && c.Rows > 0 && (len(c.Hits) != K || len(c.Sums) != K*dim):
		return fmt.Errorf("%w: k-means contribution of %d hits and %d sums, receiver is %dx%d",
			ErrFormat, len(c.Hits), len(c.Sums), K, dim)
	case len(c.Candidates) != len(c.Keys)*dim:
		return fmt.Errorf("%w: k-means contribution of %d candidate values for %d keys, receiver has Dim %d",
			ErrFormat, len(c.Candidates), len(c.Keys), dim)
	}
	return nil
}

// DeadWithin returns the number of atoms that would be dead (idle for at
// least ReseedAfter minibatches) after batches more minibatches in which
// they get no row: the number of re-seeding candidates a contributor
// should send (Contribute) when its contribution may be applied up to
// batches versions later (1: applied to the next version). It is 0 when
// re-seeding is off and while the dictionary is not fully seeded.
func (k *KMeans) DeadWithin(batches int) int {
	after := k.s.reseedAfter()
	if after < 0 || k.seeded < k.s.K {
		return 0
	}
	n := 0
	for _, l := range k.last {
		if k.batches+int64(batches)-l >= int64(after) {
			n++
		}
	}
	return n
}

// seed makes rows of the minibatch the next atoms, as many as are missing
// and available, by greedy k-means++ sampling (Arthur and Vassilvitskii,
// 2007, with the greedy choice of scikit-learn): for each new atom,
// 2 + ⌊ln K⌋ candidate rows are drawn with probability proportional to
// 1 − max cos(x, φ), the squared distance on the sphere to the nearest
// atom so far (uniformly for the very first atom), and the candidate that
// lowers the total of that distance most is kept. A row equal to an atom
// has weight zero, so the seeds are distinct. When the minibatch has no
// more rows of positive weight than atoms missing, they are all taken.
func (k *KMeans) seed(m int, cur int64) {
	w := &k.work
	dim := k.s.Dim
	w.argmaxFused(fused, &k.packed, k.seeded, m, k.cores) // w.cos: nearest seeded atom, 0 if none
	tol := fusedTol(dim)
	add := func(c int) {
		j := k.seeded
		k.setAtom(j, w.x[c*dim:(c+1)*dim])
		k.counts[j] = 0
		k.last[j] = cur
		k.seeded++
	}
	positive := 0
	for _, c := range w.cos[:m] {
		if seedWeight(c, tol) > 0 {
			positive++
		}
	}
	if positive <= k.s.K-k.seeded {
		for c, cs := range w.cos[:m] {
			if seedWeight(cs, tol) > 0 {
				add(c)
			}
		}
		return
	}
	trials := min(2+int(math.Log(float64(k.s.K))), panelWidth)
	w.candRow = grow(w.candRow, trials)
	var pots, draws [panelWidth]float64
	pot, u := pots[:trials], draws[:trials]
	var trialScores [panelWidth][]float32 // each trial's scores of the rows
	w.packRowsAsAtoms(m, dim)
	var total float64
	for _, c := range w.cos[:m] {
		total += seedWeight(c, tol)
	}
	cos := w.cos[:m]
	// Each part of the trials draws its candidates, scores them and sums
	// their potentials; every trial's sums run over the rows in order,
	// whatever the parts, so the atoms do not depend on them.
	split := seedSplit(m, trials, k.cores)
	w.seeds = grow(w.seeds, split-1)
	part := func(p, t0, t1 int) {
		f, candX := &w.fused, &w.candX
		if p > 0 {
			f, candX = &w.seeds[p-1].fused, &w.seeds[p-1].candX
		}
		for t := t0; t < t1; t++ {
			w.candRow[t] = seedPick(cos, u[t], tol)
		}
		scores, stride := w.candidateScores(fused, m, w.candRow[t0:t1], f, candX)
		for t := t0; t < t1; t++ {
			trialScores[t] = scores[(t-t0)*stride:][:m]
		}
		seedPotentials(pot[t0:t1], cos, trialScores[t0:t1], tol)
	}
	for k.seeded < k.s.K {
		if !(total > 0) {
			return // every row is already an atom
		}
		for t := range u {
			u[t] = k.rng.Float64() * total
		}
		parts.Run(trials, split, part)
		best, bestPot := 0, math.Inf(1)
		for t, p := range pot {
			if p < bestPot {
				best, bestPot = t, p
			}
		}
		picked := w.candRow[best]
		total = 0
		sb := trialScores[best]
		for c := range cos {
			cs := 1.0
			if c != picked {
				cs = max(cos[c], float64(sb[c]))
			}
			cos[c] = cs
			total += seedWeight(cs, tol)
		}
		add(picked)
	}
}

// seedSplitWork is the least rows × trials of a seeding step cut into
// parts. Each part scores at least one block of candidates against every
// row and sums at least one pass over them, so a step's cost grows with
// the rows more than with the trials; at 13,000 rows of 36 dimensions a
// part takes about 0.3 ms, where handing work to another core of a
// 2-vCPU virtual machine starts to pay, and steps of fewer rows × trials
// than this stay on one goroutine.
const seedSplitWork = 1 << 15

// seedSplit returns how many parts seed cuts the trials of a step over m
// rows into on cores goroutines.
func seedSplit(m, trials, cores int) int {
	if cores <= 1 || m*trials < seedSplitWork {
		return 1
	}
	return min(cores, trials)
}

// seedPick returns the row drawn by u, uniform in [0, Σ weights): the
// first row of positive weight at which u, less the weights of the rows
// up to it, falls below 0 (the last such row if rounding leaves u ≥ 0).
func seedPick(cos []float64, u, tol float64) int {
	pick := -1
	for c, cs := range cos {
		if wt := seedWeight(cs, tol); wt > 0 {
			pick = c
			if u -= wt; u < 0 {
				break
			}
		}
	}
	return pick
}

// seedPotentials sets pot[t] to the potential the rows would have with
// candidate t as one more atom, Σ_c seedWeight(max(cos[c], scores[t][c])),
// summed over the rows in order: four trials at a time in four registers,
// or the last five or six in six (a group past the last trial sums the
// last one again, dropped). A pass over the rows costs about the same
// for one trial as for four, each sum waiting on its last addition, so
// five or six trials take one pass, not two.
func seedPotentials(pot, cos []float64, scores [][]float32, tol float64) {
	n := len(pot)
	trial := func(t int) []float32 { return scores[min(t, n-1)][:len(cos)] }
	for t0 := 0; t0 < n; t0 += 4 {
		if left := n - t0; left == 5 || left == 6 {
			s0, s1, s2, s3, s4, s5 := trial(t0), trial(t0+1), trial(t0+2), trial(t0+3), trial(t0+4), trial(t0+5)
			var p0, p1, p2, p3, p4, p5 float64
			for c, cs := range cos {
				p0 += seedWeightAbove(cs, s0[c], tol)
				p1 += seedWeightAbove(cs, s1[c], tol)
				p2 += seedWeightAbove(cs, s2[c], tol)
				p3 += seedWeightAbove(cs, s3[c], tol)
				p4 += seedWeightAbove(cs, s4[c], tol)
				p5 += seedWeightAbove(cs, s5[c], tol)
			}
			copy(pot[t0:], []float64{p0, p1, p2, p3, p4, p5})
			return
		}
		s0, s1, s2, s3 := trial(t0), trial(t0+1), trial(t0+2), trial(t0+3)
		var p0, p1, p2, p3 float64
		for c, cs := range cos {
			p0 += seedWeightAbove(cs, s0[c], tol)
			p1 += seedWeightAbove(cs, s1[c], tol)
			p2 += seedWeightAbove(cs, s2[c], tol)
			p3 += seedWeightAbove(cs, s3[c], tol)
		}
		copy(pot[t0:], []float64{p0, p1, p2, p3})
	}
}

// seedWeightAbove is seedWeight(max(c, float64(s)), tol) for any c but
// NaN (seed's cosines never are: its rows are unit vectors, whose float32
// scores are finite): 1 − max(c, s) = min(1 − c, 1 − s) exactly, as
// rounding 1 − x is monotone in x; a NaN s gives weight 0 as there; and
// the comparison compiles to fewer instructions than the builtin max,
// which also orders signed zeros (1 − x is the same for both).
func seedWeightAbove(c float64, s float32, tol float64) float64 {
	d := 1 - c
	if e := 1 - float64(s); !(e >= d) {
		d = e
	}
	if d > tol {
		return d
	}
	return 0
}

// seedWeight is the k-means++ weight of a row whose nearest atom has
// cosine c; distances within tol, the rounding error of the float32
// cosines, count as zero so that no row is seeded twice.
func seedWeight(c, tol float64) float64 {
	if d := 1 - c; d > tol {
		return d
	}
	return 0
}

// update moves each assigned atom toward the mean of its rows
// (Algorithm 1, line 13, with per-atom counts) and renormalises it.
func (k *KMeans) update(m int, cur int64) {
	K, dim := k.s.K, k.s.Dim
	k.sums = grow(k.sums, K*dim)
	k.hits = grow(k.hits, K)
	k.accumulate(k.hits, k.sums, m)
	k.step(m, cur, k.hits, k.sums, true)
}

// accumulate writes into hits (K) the number h_j of the m compacted rows
// assigned to each atom and into sums (K×Dim) their sum Σ_{i: j*(i)=j} x_i,
// added in row order. Only the sums of atoms with rows are written.
func (k *KMeans) accumulate(hits, sums []float64, m int) {
	w := &k.work
	dim := k.s.Dim
	clear(hits)
	for c := 0; c < m; c++ {
		j := w.best[c]
		sum := sums[j*dim : (j+1)*dim]
		if hits[j] == 0 {
			clear(sum) // only the sums of atoms with rows are read
		}
		hits[j]++
		for l, v := range w.x[c*dim : (c+1)*dim] {
			sum[l] += v
		}
	}
}

// step applies Algorithm 1, line 13, with per-atom counts, for a batch of
// m rows whose per-atom counts and sums are hits and sums, and
// renormalises the atoms that moved:
//
//	N_j ← e^(−m/(K·M))·N_j + h_j
//	φ_j ← φ_j + η_t·(h_j/N_j)·(s_j/h_j − φ_j)   if h_j > 0
//	φ_j ← φ_j/‖φ_j‖
//
// An atom whose new value is zero or not finite (its rows cancelled out
// exactly) is set to the first of its rows of the workspace if fromRows,
// else it keeps its previous direction.
func (k *KMeans) step(m int, cur int64, hits, sums []float64, fromRows bool) {
	w := &k.work
	dim, K := k.s.Dim, k.s.K
	eta := k.s.learningRate() / (1 + k.s.Decay*float64(k.batches))
	keep := math.Exp(-float64(m) / (float64(K) * k.s.memory()))
	for j := 0; j < K; j++ {
		h := hits[j]
		k.counts[j] = keep*k.counts[j] + h
		if h == 0 {
			continue
		}
		k.last[j] = cur
		step := eta * h / k.counts[j]
		phi := k.atoms.RawRowView(j)
		if !fromRows {
			k.prev = append(k.prev[:0], phi...)
		}
		sum := sums[j*dim : (j+1)*dim]
		var ss float64
		for l := range phi {
			phi[l] += step * (sum[l]/h - phi[l])
			ss += phi[l] * phi[l]
		}
		if ss == 0 || math.IsNaN(ss) || math.IsInf(ss, 0) {
			// The rows cancelled out exactly; keep the atom's direction
			// by re-seeding it from one of them, or restoring it.
			if fromRows {
				copy(phi, w.x[k.firstRowOf(j, m)*dim:])
			} else {
				copy(phi, k.prev)
			}
			ss = 1
		}
		inv := 1 / math.Sqrt(ss)
		for l := range phi {
			phi[l] *= inv
		}
		k.packed.set(j, phi)
	}
}

func (k *KMeans) firstRowOf(j, m int) int {
	for c := 0; c < m; c++ {
		if k.work.best[c] == j {
			return c
		}
	}
	panic("online: atom without rows")
}

// reseed re-seeds the atoms unused for ReseedAfter minibatches with rows of
// the current minibatch, drawn without replacement with probability
// proportional to their distortion 1 − cos (weighted sampling by
// exponential keys, Efraimidis and Spirakis 2006: the rows of largest
// log(u)/weight).
func (k *KMeans) reseed(m int, cur int64) {
	if len(k.deadAt(cur)) == 0 {
		return
	}
	w := &k.work
	w.drawKeys(k.rng, m)
	dim := k.s.Dim
	for i, j := range k.dead {
		if i == len(w.order) {
			break
		}
		c := w.order[i]
		k.revive(j, cur, w.x[c*dim:(c+1)*dim])
	}
}

// deadAt sets k.dead to the atoms that are dead in minibatch cur, idle for
// at least ReseedAfter minibatches, in increasing order, and returns it
// (empty when re-seeding is off).
func (k *KMeans) deadAt(cur int64) []int {
	k.dead = k.dead[:0]
	after := k.s.reseedAfter()
	if after < 0 {
		return k.dead
	}
	for j, l := range k.last {
		if cur-l >= int64(after) {
			k.dead = append(k.dead, j)
		}
	}
	return k.dead
}

// revive re-seeds atom j with the unit row v in minibatch cur.
func (k *KMeans) revive(j int, cur int64, v []float64) {
	k.setAtom(j, v)
	k.counts[j] = 0
	k.last[j] = cur
	k.reseeds++
}

// drawKeys draws, for each of the m compacted rows in order, u uniform in
// (0, 1] from r and sets the row's key to log(u)/(1 − cos), cos the
// cosine with its atom, and sets s.order to the rows of positive
// distortion, largest key first (ties by row).
func (s *scratch) drawKeys(r *rand.Rand, m int) {
	s.keys = grow(s.keys, m)
	s.order = s.order[:0]
	for c := 0; c < m; c++ {
		weight := 1 - s.cos[c]
		u := 1 - r.Float64() // (0, 1]
		if weight <= 0 {
			continue
		}
		s.keys[c] = math.Log(u) / weight
		s.order = append(s.order, c)
	}
	slices.SortFunc(s.order, func(a, b int) int {
		// Largest key first; ties by row for a deterministic order.
		if c := cmp.Compare(s.keys[b], s.keys[a]); c != 0 {
			return c
		}
		return cmp.Compare(a, b)
	})
}

// Assign writes the f_vq code of each row of x (smt-minimalistic, section
// 3): dst[i] is the atom of largest cosine with row i (the first one on
// ties) and cos[i] that cosine. Zero rows, the blank rows of
// NormalizeRows, get −1 and 0, and so does every row while no atom is
// seeded. cos may be nil. Rows need not be normalised.
//
// It panics with mat.ErrShape if x does not have Dim columns or dst (and
// cos if not nil) does not have one element per row.
func (k *KMeans) Assign(dst []int, cos []float64, x mat.Matrix) {
	r, c := x.Dims()
	if c != k.s.Dim || len(dst) != r || (cos != nil && len(cos) != r) {
		panic(mat.ErrShape)
	}
	w := k.pool.Get().(*scratch)
	defer k.pool.Put(w)
	m := w.compact(x, nil, k.cores)
	w.argmaxFused(fused, &k.packed, k.seeded, m, k.cores)
	w.spread(dst, cos, r, m)
}

// SparseCodes holds one sparse code per row of a minibatch in compressed
// sparse row form: the code of row i has the atoms Index[Ptr[i]:Ptr[i+1]],
// in increasing order, with cosines Cos[Ptr[i]:Ptr[i+1]].
type SparseCodes struct {
	// Rows is the number of codes and Atoms the length of each code (K).
	Rows, Atoms int
	Ptr         []int // Rows+1 offsets into Index and Cos
	Index       []int
	Cos         []float64
}

// Row returns the atoms and cosines of code i. The slices alias c.
func (c *SparseCodes) Row(i int) (atoms []int, cos []float64) {
	return c.Index[c.Ptr[i]:c.Ptr[i+1]], c.Cos[c.Ptr[i]:c.Ptr[i+1]]
}

// CodesGQ writes into dst the f_gq code of each row of x
// (smt-minimalistic, section 3): the atoms whose cosine with the row is at
// least t,
//
//	α_j = 1 if cos(x, φ_j) ≥ t, else 0.
//
// The code is binary; dst.Cos holds the cosines as well for callers that
// want a graded variant. Zero rows (blank) get an empty code. dst's slices
// are reused when they are large enough. Rows need not be normalised.
//
// It panics with mat.ErrShape if x does not have Dim columns.
func (k *KMeans) CodesGQ(dst *SparseCodes, x mat.Matrix, t float64) {
	r, c := x.Dims()
	if c != k.s.Dim {
		panic(mat.ErrShape)
	}
	w := k.pool.Get().(*scratch)
	defer k.pool.Put(w)
	m := w.compact(x, nil, k.cores)
	dst.Rows, dst.Atoms = r, k.s.K
	w.codesFused(dst, fused, &k.packed, k.seeded, m, r, t, k.cores)
}

// Clone returns a deep copy of the dictionary. The copy draws from the same
// rand.Source, so only one of the two should Learn; a clone used as an
// immutable snapshot for queries shares nothing mutable with k but the
// pool of coding workspaces, which is safe for concurrent use.
func (k *KMeans) Clone() *KMeans { return k.CloneInto(nil) }

// CloneInto is Clone into the memory of dst, an earlier clone of k that
// nobody reads any more, or into new memory if dst is nil or of another
// shape. A daemon that publishes a snapshot after every minibatch reuses
// the retired ones this way instead of leaving them to the collector.
func (k *KMeans) CloneInto(dst *KMeans) *KMeans {
	if dst == nil || dst.s.K != k.s.K || dst.s.Dim != k.s.Dim {
		dst = &KMeans{atoms: mat.NewDense(k.s.K, k.s.Dim, nil)}
	}
	*dst = KMeans{
		s:       k.s,
		rng:     k.rng,
		atoms:   dst.atoms,
		packed:  k.packed.copyInto(dst.packed),
		counts:  append(dst.counts[:0], k.counts...),
		last:    append(dst.last[:0], k.last...),
		seeded:  k.seeded,
		batches: k.batches,
		samples: k.samples,
		reseeds: k.reseeds,
		pool:    k.pool,
	}
	dst.atoms.Copy(k.atoms)
	return dst
}

// MarshalBinary encodes the settings and the complete learning state
// (atoms, counts, idle clocks, seeding progress, counters), float64s
// bit-exact. The rand.Source is not included: its owner saves it.
func (k *KMeans) MarshalBinary() ([]byte, error) {
	K, dim := k.s.K, k.s.Dim
	e := state.NewEncoder(make([]byte, 0, 96+8*(K*dim+2*K)))
	e.U8(stateVersion)
	e.U8(kindKMeans)
	e.U64(uint64(K))
	e.U64(uint64(dim))
	e.F64(k.s.LearningRate)
	e.F64(k.s.Decay)
	e.F64(k.s.Memory)
	e.I64(int64(k.s.ReseedAfter))
	e.I64(int64(k.seeded))
	e.I64(k.batches)
	e.I64(k.samples)
	e.I64(k.reseeds)
	e.Dense(k.atoms)
	e.F64s(k.counts)
	e.I64s(k.last)
	return e.Bytes(), nil
}

// UnmarshalBinary restores a state written by MarshalBinary, settings
// included, into k, which must have the same K and Dim. On error k is
// unchanged.
func (k *KMeans) UnmarshalBinary(data []byte) error {
	d := state.NewDecoder(data)
	if v := d.U8(); v != stateVersion {
		return fmt.Errorf("%w: k-means state version %d, want %d", ErrVersion, v, stateVersion)
	}
	if kind := d.U8(); kind != kindKMeans {
		return fmt.Errorf("%w: not a k-means state", ErrFormat)
	}
	K, dim := d.U64(), d.U64()
	if d.Bad() || K != uint64(k.s.K) || dim != uint64(k.s.Dim) {
		return fmt.Errorf("%w: k-means state of shape %dx%d, receiver is %dx%d", ErrFormat, K, dim, k.s.K, k.s.Dim)
	}
	s := KMeansSettings{K: k.s.K, Dim: k.s.Dim}
	s.LearningRate, s.Decay, s.Memory = d.F64(), d.F64(), d.F64()
	s.ReseedAfter = int(d.I64())
	seeded := d.I64()
	batches, samples, reseeds := d.I64(), d.I64(), d.I64()
	atoms := make([]float64, k.s.K*k.s.Dim)
	counts := make([]float64, k.s.K)
	last := make([]int64, k.s.K)
	d.F64s(atoms)
	d.F64s(counts)
	d.I64s(last)
	if !d.Done() {
		return fmt.Errorf("%w: k-means state of %d bytes is truncated or too long", ErrFormat, len(data))
	}
	if err := s.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrFormat, err)
	}
	if seeded < 0 || seeded > int64(k.s.K) || batches < 0 || samples < 0 || reseeds < 0 {
		return fmt.Errorf("%w: k-means counters out of range", ErrFormat)
	}
	k.s = s
	k.atoms.Copy(mat.NewDense(k.s.K, k.s.Dim, atoms))
	k.counts, k.last = counts, last
	k.seeded = int(seeded)
	k.batches, k.samples, k.reseeds = batches, samples, reseeds
	k.repack()
	return nil
}
