package online

import (
	"encoding"
	"fmt"
	"math"

	"github.com/smtd/smtd/internal/finite"
	"github.com/smtd/smtd/internal/state"
)

// Contributions split a learning step between many workers and one owner
// (the parameter-server pattern): each worker computes, under the version
// of the learner it holds, the share of one minibatch in the learner's
// sufficient statistics, which is where the cost is (scoring every row
// against K atoms), and the owner merges the contributions in sequence
// order and takes the step (Whitener.Apply, KMeans.Apply), which costs
// O(parameters). A contribution is computed under a possibly older version
// than the one it is applied to; applied at once to the version it was
// computed under, it is the step Observe or LearnAssign takes, bit for bit.

var (
	_ encoding.BinaryMarshaler   = (*WhitenContribution)(nil)
	_ encoding.BinaryUnmarshaler = (*WhitenContribution)(nil)
	_ encoding.BinaryMarshaler   = (*KMeansContribution)(nil)
	_ encoding.BinaryUnmarshaler = (*KMeansContribution)(nil)
)

const (
	kindWhitenContribution = 'w'
	kindKMeansContribution = 'k'
)

// Bounds on the shapes UnmarshalBinary accepts, so that a corrupt header
// cannot make it allocate without limit: dimensions up to 2^16, K up to
// 2^20 and K·Dim up to 2^24 floats (128 MiB), above any configuration the
// daemon runs (K = 16384 atoms of 6×6 patches is 2^19.2).
const (
	maxContributionDim    = 1 << 16
	maxContributionK      = 1 << 20
	maxContributionFloats = 1 << 24
)

// readHeader reads the version and kind bytes of an encoding of the kind
// named what and returns an error wrapping ErrVersion or ErrFormat if
// they are not this package's version and kind.
func readHeader(d *state.Decoder, kind byte, what string) error {
	if v := d.U8(); v != stateVersion {
		return fmt.Errorf("%w: %s version %d, want %d", ErrVersion, what, v, stateVersion)
	}
	if k := d.U8(); k != kind {
		return fmt.Errorf("%w: not a %s", ErrFormat, what)
	}
	return nil
}

// WhitenContribution is one minibatch's share of the whitening moments,
// computed under the state of the Whitener that contributed it (its bound,
// see Whitener.Observe and Whitener.Contribute): the count n_b, mean m_b
// and scatter M_b of its bounded rows, which Whitener.Apply merges with
// the pairwise update of Chan, Golub and LeVeque (1979).
type WhitenContribution struct {
	Rows     int       // n_b: rows merged (after leaving out rejected/skipped ones); 0: nothing
	Mean     []float64 // m_b, Dim
	Scatter  []float64 // M_b = Σ (x−m_b)(x−m_b)ᵀ, Dim×Dim row-major, upper triangle
	Clipped  int64     // rows pulled in by the bound
	Rejected int64     // rows left out as non-finite
}

// MarshalBinary encodes c, float64 values bit-exact: the counters, and
// with Rows > 0 the dimension, the mean and the upper triangle of the
// scatter. It returns an error wrapping ErrFormat if the lengths of Mean
// and Scatter do not agree or a count is negative.
func (c *WhitenContribution) MarshalBinary() ([]byte, error) {
	d := len(c.Mean)
	if c.Rows < 0 || c.Clipped < 0 || c.Rejected < 0 || (c.Rows > 0 && (d == 0 || len(c.Scatter) != d*d)) {
		return nil, fmt.Errorf("%w: whiten contribution of %d rows with a %d-mean and a %d-scatter",
			ErrFormat, c.Rows, d, len(c.Scatter))
	}
	if c.Rows == 0 {
		d = 0
	}
	e := state.NewEncoder(make([]byte, 0, 32+8*(d*(d+3)/2)))
	e.U8(stateVersion)
	e.U8(kindWhitenContribution)
	e.Uvarint(uint64(c.Rows))
	e.Uvarint(uint64(c.Clipped))
	e.Uvarint(uint64(c.Rejected))
	e.Uvarint(uint64(d))
	if d > 0 {
		e.F64s(c.Mean)
		for i := range d {
			e.F64s(c.Scatter[i*d+i : (i+1)*d])
		}
	}
	return e.Bytes(), nil
}

// UnmarshalBinary decodes what MarshalBinary wrote into c, reusing its
// slices; the lower triangle of Scatter is zero. It returns an error
// wrapping ErrFormat or ErrVersion if data is truncated, too long, of
// another kind, or holds non-finite moments or a scatter with a negative
// diagonal; c then holds no rows (its slices are kept for reuse).
func (c *WhitenContribution) UnmarshalBinary(data []byte) error {
	c.Rows, c.Clipped, c.Rejected = 0, 0, 0
	c.Mean, c.Scatter = c.Mean[:0], c.Scatter[:0]
	d := state.NewDecoder(data)
	if err := readHeader(d, kindWhitenContribution, "whiten contribution"); err != nil {
		return err
	}
	rows, clipped, rejected, dim := d.Uvarint(), d.Uvarint(), d.Uvarint(), d.Uvarint()
	switch {
	case d.Bad():
	case rows > math.MaxInt32 || clipped > math.MaxInt64 || rejected > math.MaxInt64:
		d.Fail()
	case (rows == 0) != (dim == 0) || dim > maxContributionDim:
		d.Fail()
	case uint64(d.Len()) != 8*dim*(dim+3)/2:
		d.Fail()
	}
	if d.Bad() {
		return fmt.Errorf("%w: whiten contribution of %d bytes is truncated, too long or inconsistent", ErrFormat, len(data))
	}
	n := int(dim)
	mean, scatter := grow(c.Mean, n), grow(c.Scatter, n*n)
	c.Mean, c.Scatter = mean[:0], scatter[:0]
	clear(scatter)
	d.F64s(mean)
	for i := range n {
		d.F64s(scatter[i*n+i : (i+1)*n])
	}
	if !d.Done() {
		return fmt.Errorf("%w: whiten contribution of %d bytes is truncated or too long", ErrFormat, len(data))
	}
	if !finite.All(mean) || !finite.All(scatter) {
		return fmt.Errorf("%w: whiten contribution with non-finite moments", ErrFormat)
	}
	for i := range n {
		if scatter[i*n+i] < 0 {
			return fmt.Errorf("%w: whiten contribution with a negative variance", ErrFormat)
		}
	}
	c.Rows, c.Clipped, c.Rejected = int(rows), int64(clipped), int64(rejected)
	c.Mean, c.Scatter = mean, scatter
	return nil
}

// KMeansContribution is one minibatch's share of a k-means step
// (smt-minimalistic, App. D, Algorithm 1, lines 10-13), computed under the
// dictionary of the KMeans that contributed it (KMeans.Contribute) and
// applied by KMeans.Apply.
type KMeansContribution struct {
	Rows       int       // m: non-blank rows
	Hits       []float64 // h_j, K (nil/empty when Seeds is set)
	Sums       []float64 // Σ_{i: j*(i)=j} x_i, K×Dim; rows of atoms without hits are zero
	Seeds      []float64 // m×Dim unit rows, set instead of Hits/Sums while the contributor's dictionary was not fully seeded
	Candidates []float64 // c×Dim rows for re-seeding dead atoms, best first
	Keys       []float64 // their keys log(u)/(1−cos) (Efraimidis-Spirakis), decreasing
}

// reset empties c, keeping its slices for reuse.
func (c *KMeansContribution) reset() {
	c.Rows = 0
	c.Hits, c.Sums, c.Seeds = c.Hits[:0], c.Sums[:0], c.Seeds[:0]
	c.Candidates, c.Keys = c.Candidates[:0], c.Keys[:0]
}

// Modes of an encoded KMeansContribution.
const (
	contributionHits   = 'h'
	contributionHits32 = 'f' // the sums as float32
	contributionSeeds  = 's'
)

// dims returns the K and Dim of c (K is 0 with Seeds), or an error
// wrapping ErrFormat if its lengths are inconsistent.
func (c *KMeansContribution) dims() (K, dim int, err error) {
	K = len(c.Hits)
	switch {
	case len(c.Seeds) > 0 && c.Rows > 0:
		dim = len(c.Seeds) / c.Rows
	case K > 0:
		dim = len(c.Sums) / K
	case len(c.Keys) > 0:
		dim = len(c.Candidates) / len(c.Keys)
	}
	switch {
	case c.Rows < 0, len(c.Seeds) > 0 && (K > 0 || len(c.Sums) > 0 || len(c.Seeds) != c.Rows*dim),
		len(c.Sums) != K*dim, len(c.Candidates) != len(c.Keys)*dim,
		dim == 0 && (c.Rows > 0 || len(c.Keys) > 0):
		return 0, 0, fmt.Errorf("%w: k-means contribution of %d rows with %d hits, %d sums, %d seed values, %d candidate values and %d keys",
			ErrFormat, c.Rows, len(c.Hits), len(c.Sums), len(c.Seeds), len(c.Candidates), len(c.Keys))
	}
	return K, dim, nil
}

// MarshalBinary encodes c compactly, float64 values bit-exact: the shape,
// then either the seeds or, for each atom with hits only, its index (as a
// gap), its count and its sum, then the candidates with their keys; a
// contribution without rows is encoded without hits or sums. It
// returns an error wrapping ErrFormat if the lengths of c are
// inconsistent, a count is not a non-negative integer, or the counts do
// not add up to Rows.
func (c *KMeansContribution) MarshalBinary() ([]byte, error) { return c.marshal(false) }

// MarshalFloat32 encodes c as MarshalBinary does but the per-atom sums
// rounded to float32, which halves a contribution of many atoms (the sums
// are K×Dim values, the rest O(K)); UnmarshalBinary reads either. The
// rounding, 2⁻²⁴ of each sum, is far below what one minibatch moves an
// atom by.
func (c *KMeansContribution) MarshalFloat32() ([]byte, error) { return c.marshal(true) }

func (c *KMeansContribution) marshal(f32 bool) ([]byte, error) {
	K, dim, err := c.dims()
	if err != nil {
		return nil, err
	}
	if c.Rows == 0 {
		K = 0 // nothing to merge
	}
	nnz, total := 0, 0.0
	for _, h := range c.Hits {
		if !(h >= 0 && h <= math.MaxInt32 && h == math.Trunc(h)) {
			return nil, fmt.Errorf("%w: k-means contribution with a count of %v", ErrFormat, h)
		}
		if h > 0 {
			nnz++
			total += h
		}
	}
	if len(c.Seeds) == 0 && total != float64(c.Rows) {
		return nil, fmt.Errorf("%w: k-means contribution of %d rows with %v hits", ErrFormat, c.Rows, total)
	}
	e := state.NewEncoder(make([]byte, 0, 48+8*(len(c.Seeds)+nnz*(dim+1)+len(c.Candidates)+len(c.Keys))))
	e.U8(stateVersion)
	e.U8(kindKMeansContribution)
	e.Uvarint(uint64(K))
	e.Uvarint(uint64(dim))
	e.Uvarint(uint64(c.Rows))
	if len(c.Seeds) > 0 {
		e.U8(contributionSeeds)
		e.F64s(c.Seeds)
	} else {
		mode := byte(contributionHits)
		if f32 {
			mode = contributionHits32
		}
		e.U8(mode)
		e.Uvarint(uint64(nnz))
		last := -1
		for j, h := range c.Hits[:K] {
			if h > 0 {
				e.Uvarint(uint64(j - last))
				e.Uvarint(uint64(h))
				if f32 {
					e.F32s(c.Sums[j*dim : (j+1)*dim])
				} else {
					e.F64s(c.Sums[j*dim : (j+1)*dim])
				}
				last = j
			}
		}
	}
	e.Uvarint(uint64(len(c.Keys)))
	for i, key := range c.Keys {
		e.F64(key)
		e.F64s(c.Candidates[i*dim : (i+1)*dim])
	}
	return e.Bytes(), nil
}

// UnmarshalBinary decodes what MarshalBinary wrote into c, reusing its
// slices; the sums of atoms without hits are zero. It returns an error
// wrapping ErrFormat or ErrVersion if data is truncated, too long, of
// another kind, has inconsistent lengths or counts (hits that do not add
// up to Rows, atoms out of range), or holds non-finite values, seeds or
// candidates that are not unit rows (the contributor's compacted rows
// are, to rounding), or keys that are NaN or not decreasing; c then
// holds no rows (its slices are kept for reuse).
func (c *KMeansContribution) UnmarshalBinary(data []byte) error {
	c.reset()
	fail := func(what string) error {
		c.reset()
		return fmt.Errorf("%w: k-means contribution of %d bytes: %s", ErrFormat, len(data), what)
	}
	d := state.NewDecoder(data)
	if err := readHeader(d, kindKMeansContribution, "k-means contribution"); err != nil {
		return err
	}
	uK, udim, urows := d.Uvarint(), d.Uvarint(), d.Uvarint()
	mode := d.U8()
	if d.Bad() {
		return fail("truncated")
	}
	if udim > maxContributionDim || uK > maxContributionK || uK*udim > maxContributionFloats || urows > math.MaxInt32 {
		return fail("shape out of range")
	}
	K, dim, rows := int(uK), int(udim), int(urows)
	// Every row, atom or candidate costs at least dim float64s (float32s
	// for the atoms of contributionHits32): check the claimed counts
	// against the bytes left before allocating.
	fitsIn := func(n uint64, size int) bool { return dim > 0 && n <= uint64(d.Len())/uint64(size*dim) }
	fits := func(n uint64) bool { return fitsIn(n, 8) }
	switch mode {
	case contributionSeeds:
		if rows == 0 || K != 0 || !fits(urows) {
			return fail("inconsistent seeds")
		}
		c.Seeds = grow(c.Seeds, rows*dim)
		d.F64s(c.Seeds)
	case contributionHits, contributionHits32:
		size := 8
		if mode == contributionHits32 {
			size = 4
		}
		nnz := d.Uvarint()
		if d.Bad() || nnz > uK || (nnz > 0 && !fitsIn(nnz, size)) || (rows > 0) != (nnz > 0) || (rows == 0 && K > 0) {
			return fail("inconsistent hits")
		}
		if K > 0 {
			c.Hits, c.Sums = grow(c.Hits, K), grow(c.Sums, K*dim)
			clear(c.Hits)
			clear(c.Sums) // a no-op on a new slice, which the runtime zeroed
		}
		pos, total := -1, uint64(0)
		for range nnz {
			gap, h := d.Uvarint(), d.Uvarint()
			if d.Bad() || gap == 0 || gap > uint64(K-1-pos) || h == 0 || h > urows-total {
				return fail("inconsistent hits")
			}
			pos += int(gap)
			total += h
			c.Hits[pos] = float64(h)
			sum := c.Sums[pos*dim : (pos+1)*dim]
			if !d.FiniteFloats(sum, size == 4) {
				return fail("non-finite sums")
			}
		}
		if total != urows {
			return fail("hits do not add up to the rows")
		}
	default:
		return fail("unknown mode")
	}
	nc := d.Uvarint()
	if d.Bad() || (nc > 0 && !fits(nc)) {
		return fail("inconsistent candidates")
	}
	c.Keys, c.Candidates = grow(c.Keys, int(nc)), grow(c.Candidates, int(nc)*dim)
	for i := range c.Keys {
		c.Keys[i] = d.F64()
		d.F64s(c.Candidates[i*dim : (i+1)*dim])
	}
	if !d.Done() {
		return fail("truncated or too long")
	}
	for i, key := range c.Keys {
		if math.IsNaN(key) || (i > 0 && key > c.Keys[i-1]) {
			return fail("candidate keys not decreasing")
		}
	}
	if !finite.All(c.Seeds) || !finite.All(c.Candidates) {
		return fail("non-finite values")
	}
	if !unitRows(c.Seeds, dim) || !unitRows(c.Candidates, dim) {
		return fail("seed or candidate rows not of unit length")
	}
	c.Rows = rows
	return nil
}

// unitTol bounds |‖x‖² − 1| for the unit rows of a contribution: a row
// scaled to unit length in float64 is within a few ulps of it, and a row
// that is not (a corrupted value) would score as something other than a
// cosine.
const unitTol = 1e-9

// unitRows reports whether x holds rows of dim values of unit length
// (within unitTol).
func unitRows(x []float64, dim int) bool {
	if dim == 0 {
		return len(x) == 0
	}
	for i := 0; i+dim <= len(x); i += dim {
		var ss float64
		for _, v := range x[i : i+dim] {
			ss += v * v
		}
		if !(math.Abs(ss-1) <= unitTol) {
			return false
		}
	}
	return true
}
