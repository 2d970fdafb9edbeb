package sgd

import (
	"fmt"
	"math"
	"slices"

	"gonum.org/v1/gonum/blas/blas64"
	"gonum.org/v1/gonum/mat"

	"github.com/smtd/smtd/internal/finite"
	"github.com/smtd/smtd/internal/state"
	"github.com/smtd/smtd/online"
	"github.com/smtd/smtd/spectral"
)

// Defaults of WordSettings.
const (
	// DefaultWordWindow is the window of smt-minimalistic App. B: the
	// previous four and the next four words.
	DefaultWordWindow = 4
	// DefaultWordMaxPairs is the default cap on stored word pairs: at most
	// 4,194,304 table slots of 24 bytes, 96 MiB, more than twice the
	// 1,323,131 distinct pairs (window 4) of the one million tokens of
	// the Brown corpus, which fill 2,097,152 slots (48 MiB).
	DefaultWordMaxPairs = 3 << 20
)

// WordSettings configures WordStats. Words and Window fix what the
// statistics mean; MaxPairs and Memory may be tuned live with
// SetSettings. A zero field means its documented default.
type WordSettings struct {
	// Words is the number of vocabulary slots, the size of the
	// online.Vocabulary the token ids come from. Required, at most 2³¹−1.
	Words int
	// Window is w: two tokens of one sentence at most w positions apart
	// are neighbours (smt-minimalistic App. B). Zero means
	// DefaultWordWindow (4); it must be >= 0.
	Window int
	// MaxPairs caps the number of stored word pairs (see WordStats for
	// how the weakest are pruned). Zero means DefaultWordMaxPairs; it
	// must be >= 0. The pair table takes 24 bytes per slot, at most the
	// power of two at or above 4/3·MaxPairs slots.
	MaxPairs int
	// Memory is the number of counted tokens (ids >= 0) the statistics
	// average over once the stream is long: before each minibatch of n
	// counted tokens every count is multiplied by exp(−n/Memory). Zero or
	// +Inf means never forget; it must be >= 0.
	Memory float64
}

// Validate reports whether the settings are usable.
func (s WordSettings) Validate() error {
	switch {
	case s.Words < 1 || s.Words > math.MaxInt32:
		return fmt.Errorf("sgd: word stats: %d words: must be in [1, 2³¹−1]", s.Words)
	case s.Window < 0:
		return fmt.Errorf("sgd: word stats: window %d: must be >= 0 (0 means %d)", s.Window, DefaultWordWindow)
	case s.MaxPairs < 0:
		return fmt.Errorf("sgd: word stats: max pairs %d: must be >= 0 (0 means %d)", s.MaxPairs, DefaultWordMaxPairs)
	case !(s.Memory >= 0):
		return fmt.Errorf("sgd: word stats: memory %v: must be >= 0 (0 means never forget)", s.Memory)
	}
	return nil
}

func (s WordSettings) window() int { return orDefault(s.Window, DefaultWordWindow) }

func (s WordSettings) maxPairs() int { return orDefault(s.MaxPairs, DefaultWordMaxPairs) }

// maxSlots is the table size that holds maxPairs at a load of at most 3/4.
func (s WordSettings) maxSlots() int {
	n := 16
	for n/4*3 < s.maxPairs() {
		n *= 2
	}
	return n
}

// WordStats accumulates the sparse manifold transform statistics of a
// stream of word tokens, the SMT word embedding of smt-minimalistic
// (section 2, "probabilistic point of view", and App. B). Each token is
// the 1-hot code α = e_id of its vocabulary slot, and two tokens of one
// sentence at most Window positions apart are neighbours (first-order
// differences, d = e_i − e_j for each such pair of tokens), so
//
//	V = (1/N) A Aᵀ = diag(c)/N
//	L = (1/M) A D Dᵀ Aᵀ = (1/M) Σ_{a<b} C_ab (e_a − e_b)(e_a − e_b)ᵀ
//	  = (1/M) (diag(C·1) − C)
//
// where c_a counts the tokens of slot a, C_ab the neighbouring pairs of
// tokens with slots a ≠ b (C is symmetric with a zero diagonal), N the
// counted tokens and M the neighbouring pairs added (a pair of equal
// words counts in M but adds nothing to L). L is the Laplacian of the
// co-occurrence graph. WordStats implements spectral.Pencil, and Embed
// solves the problem on its frequent words.
//
// # Memory
//
// V is a Words-vector. C is sparse (most of the Words² pairs never meet),
// so it is an open-addressing hash table of the pairs met, 24 bytes a
// slot, growing to at most the power of two at or above 4/3·MaxPairs
// slots. When a new pair finds MaxPairs pairs stored, the table is pruned
// to 3/4·MaxPairs: first the stale pairs (of reset slots, below), then the
// weakest, by weight and, among equal weights, by a fixed hash of the pair
// (not by slot number, which would favour the words seen first). A pair
// must therefore gain weight faster than new pairs arrive to survive;
// with forgetting the weights of idle pairs decay, so the pairs kept
// follow the stream. The weight pruned leaves C and the degrees of both
// words (L stays a graph Laplacian, positive semi-definite) but not M, so
// pruning shrinks L instead of rescaling it.
//
// # Vocabulary slots
//
// online.Vocabulary hands the slot of its rarest word to a new word when
// it is full (Space-Saving), and with a byte bound a long word may free
// several slots. The statistics of such a slot belong to the evicted
// word, so the caller must call Reset(id) for every slot evicted before
// the slot's new word is added (online.Vocabulary.AddEvicted lists them);
// AssignIDs does it. Reset zeroes c_id and marks every
// pair of the slot stale in O(1): a pair stores the value of a reset clock
// when it was created and is ignored (then overwritten or pruned) once
// either of its slots has been reset since. Note that the vocabulary's
// Space-Saving count of the new word inherits the evicted count, while
// c_id restarts from zero: V counts the new word's own tokens only.
//
// # Forgetting
//
// With Memory set, counts decay by exp(−n/Memory) per minibatch of n
// counted tokens, lazily as in Stats: the stored values are the true
// ones divided by a factor g that shrinks with each minibatch, and are
// rescaled when g gets tiny.
//
// Add, Reset, AssignIDs, SetSettings and UnmarshalBinary modify the
// statistics; the other methods only read them and may run concurrently
// with each other.
type WordStats struct {
	s WordSettings

	g       float64   // true values = stored values · g
	w       float64   // stored weight: counted tokens
	wp      float64   // stored weight: neighbouring pairs
	vd      []float64 // stored counts of each slot
	resetAt []uint64  // reset clock when each slot was last reset
	clock   uint64    // Reset calls so far

	tab  []wordPair // open addressing, linear probing; len a power of two, or 0
	used int        // occupied slots, stale pairs included
	bits uint       // log2(len(tab))

	tokens  int64 // counted tokens added
	pairs   int64 // neighbouring pairs added
	batches int64 // minibatches with at least one counted token
	prunes  int64 // prunings of the pair table

	evicted map[int]int // workspaces of AssignIDs
	slots   []int

	keys  []uint64 // pairs of Add waiting for addPairs
	touch uint64   // sink of the loads that fetch their slots early
}

// pairBatch is the number of pairs addPairs takes at a time.
const pairBatch = 32

// wordPair is a slot of the pair table: key = a<<32 | b with a < b (so 0
// marks an empty slot), w the stored weight C_ab, born the reset clock
// when the pair was created.
type wordPair struct {
	key  uint64
	w    float64
	born uint64
}

var _ spectral.Pencil = (*WordStats)(nil)

// NewWordStats returns empty word statistics. It panics if the settings
// are invalid.
func NewWordStats(s WordSettings) *WordStats {
	if err := s.Validate(); err != nil {
		panic(err)
	}
	return &WordStats{s: s, g: 1, vd: make([]float64, s.Words), resetAt: make([]uint64, s.Words)}
}

// Settings returns the current settings.
func (ws *WordStats) Settings() WordSettings { return ws.s }

// SetSettings replaces MaxPairs and Memory for live tuning; a lower
// MaxPairs prunes at once. It refuses any other change.
func (ws *WordStats) SetSettings(s WordSettings) error {
	if err := s.Validate(); err != nil {
		return err
	}
	if s.Words != ws.s.Words || s.window() != ws.s.window() {
		return fmt.Errorf("sgd: word stats words and window cannot change live")
	}
	ws.s = s
	if len(ws.tab) > s.maxSlots() || ws.used > s.maxPairs() {
		ws.prune()
	}
	return nil
}

// Size returns the number of vocabulary slots, Words.
func (ws *WordStats) Size() int { return ws.s.Words }

// DiagonalV reports true: 1-hot codes have a diagonal V.
func (ws *WordStats) DiagonalV() bool { return true }

// Count returns the count c_id of tokens of a slot after forgetting.
func (ws *WordStats) Count(id int) float64 { return ws.vd[id] * ws.g }

// Weight returns the number of counted tokens N after forgetting.
func (ws *WordStats) Weight() float64 { return ws.w * ws.g }

// PairWeight returns the number of neighbouring pairs M after
// forgetting.
func (ws *WordStats) PairWeight() float64 { return ws.wp * ws.g }

// Tokens returns the number of counted tokens added.
func (ws *WordStats) Tokens() int64 { return ws.tokens }

// Pairs returns the number of neighbouring pairs of tokens added.
func (ws *WordStats) Pairs() int64 { return ws.pairs }

// Batches returns the number of minibatches added (those without a
// counted token are not counted).
func (ws *WordStats) Batches() int64 { return ws.batches }

// StoredPairs returns the number of pairs in the table, stale pairs
// included, at most MaxPairs.
func (ws *WordStats) StoredPairs() int { return ws.used }

// TableBytes returns the memory of the pair table, 24 bytes a slot. Its
// array may reserve room for up to two doublings more (at most the
// largest table MaxPairs allows), which stays unmapped until used.
func (ws *WordStats) TableBytes() int { return 24 * len(ws.tab) }

// Prunes returns the number of times the pair table was pruned.
func (ws *WordStats) Prunes() int64 { return ws.prunes }

// Cooccurrence returns C_ab after forgetting: the weight of neighbouring
// pairs of tokens with slots a and b (zero for a = b, for pairs never
// met, pruned or reset).
func (ws *WordStats) Cooccurrence(a, b int) float64 {
	if a < 0 || b < 0 || a >= ws.s.Words || b >= ws.s.Words {
		panic(fmt.Sprintf("sgd: word slots %d, %d out of range [0, %d)", a, b, ws.s.Words))
	}
	if a == b || len(ws.tab) == 0 {
		return 0
	}
	i, ok := ws.find(pairKey(a, b))
	if !ok || ws.stale(&ws.tab[i]) {
		return 0
	}
	return ws.tab[i].w * ws.g
}

// DiagV writes the diagonal of V, c_a/N, into dst if it has length
// Size() (else into a new slice). It is zero before any token is added.
func (ws *WordStats) DiagV(dst []float64) []float64 { return normalised(dst, ws.vd, ws.w) }

// MulV writes V·x into dst for a Size()×c matrix x; dst must have the
// same shape, or be empty (then it is sized), and must not alias x.
func (ws *WordStats) MulV(dst *mat.Dense, x mat.Matrix) {
	xr, dr := ws.shapes(dst, x)
	var inv float64
	if ws.w != 0 {
		inv = 1 / ws.w
	}
	for a, c := range ws.vd {
		f := c * inv
		xa, da := xr.Data[a*xr.Stride:a*xr.Stride+xr.Cols], dr.Data[a*dr.Stride:a*dr.Stride+dr.Cols]
		for j := range da {
			da[j] = f * xa[j]
		}
	}
}

// MulL writes L·x into dst for a Size()×c matrix x; dst must have the
// same shape, or be empty (then it is sized), and must not alias x:
//
//	(L x)_a = (1/M) Σ_b C_ab (x_a − x_b)
//
// in one pass over the pair table, in table order.
func (ws *WordStats) MulL(dst *mat.Dense, x mat.Matrix) {
	xr, dr := ws.shapes(dst, x)
	dst.Zero()
	if ws.wp == 0 {
		return
	}
	inv := 1 / ws.wp
	c := xr.Cols
	for i := range ws.tab {
		p := &ws.tab[i]
		if p.key == 0 || ws.stale(p) {
			continue
		}
		a, b := pairSlots(p.key)
		f := p.w * inv
		xa, xb := xr.Data[a*xr.Stride:a*xr.Stride+c], xr.Data[b*xr.Stride:b*xr.Stride+c]
		da, db := dr.Data[a*dr.Stride:a*dr.Stride+c], dr.Data[b*dr.Stride:b*dr.Stride+c]
		for j := range c {
			d := f * (xa[j] - xb[j])
			da[j] += d
			db[j] -= d
		}
	}
}

// shapes checks x (Size()×c) and dst (the same, or empty: then sized)
// and returns their raw matrices.
func (ws *WordStats) shapes(dst *mat.Dense, x mat.Matrix) (xr, dr blas64.General) {
	r, c := x.Dims()
	if r != ws.s.Words {
		panic(mat.ErrShape)
	}
	if dst.IsEmpty() {
		dst.ReuseAs(r, c)
	} else if dr, dc := dst.Dims(); dr != r || dc != c {
		panic(mat.ErrShape)
	}
	return denseOf(x).RawMatrix(), dst.RawMatrix()
}

// Reset forgets everything about vocabulary slot id, which now holds a
// new word: its count becomes zero and its pairs become stale (see
// WordStats). N and M are kept. It panics if id is out of range.
func (ws *WordStats) Reset(id int) {
	if id < 0 || id >= ws.s.Words {
		panic(fmt.Sprintf("sgd: word slot %d out of range [0, %d)", id, ws.s.Words))
	}
	ws.vd[id] = 0
	ws.clock++
	ws.resetAt[id] = ws.clock
}

// AssignIDs appends to dst[:0] the vocabulary slot of each token, adding
// the tokens to v (online.Vocabulary.AddEvicted), and returns it: the ids for
// Add. When v evicts a word, to hand its slot to a new word or to stay
// within its byte bound, AssignIDs resets that slot (Reset) and turns the
// earlier tokens of the same call that carried the evicted word into −1,
// so that no token is counted under a word it is not. It panics with mat.ErrShape if
// v.Size() != Words.
func (ws *WordStats) AssignIDs(dst []int, v *online.Vocabulary, tokens []string) []int {
	if v.Size() != ws.s.Words {
		panic(mat.ErrShape)
	}
	if ws.evicted == nil {
		ws.evicted = make(map[int]int)
	}
	clear(ws.evicted)
	dst = dst[:0]
	for i, t := range tokens {
		var id int
		id, ws.slots = v.AddEvicted(ws.slots[:0], t)
		for _, e := range ws.slots {
			ws.Reset(e)
			ws.evicted[e] = i
		}
		dst = append(dst, id)
	}
	if len(ws.evicted) > 0 {
		for i, id := range dst {
			if at, ok := ws.evicted[id]; ok && i < at {
				dst[i] = -1
			}
		}
	}
	return dst
}

// Add adds a minibatch of sentences: ids holds the vocabulary slot of
// every token (−1 for a token to leave out; it keeps its position, so it
// still separates its neighbours), the sentences one after the other with
// the given lengths. Each counted token adds 1 to its c_a and N; each two
// counted tokens of one sentence at most Window positions apart add 1 to
// M and, for different slots a, b, to C_ab.
//
// It panics with mat.ErrShape if the lengths do not sum to len(ids) or
// one is negative, and if an id is out of range.
func (ws *WordStats) Add(ids []int, lengths []int) {
	total := 0
	for _, l := range lengths {
		if l < 0 {
			panic(mat.ErrShape)
		}
		total += l
	}
	if total != len(ids) {
		panic(mat.ErrShape)
	}
	counted := 0
	for _, id := range ids {
		if id >= ws.s.Words || id < -1 {
			panic(fmt.Sprintf("sgd: word id %d out of range [−1, %d)", id, ws.s.Words))
		}
		if id >= 0 {
			counted++
		}
	}
	if counted == 0 {
		return
	}
	ws.forget(counted)
	inv := 1 / ws.g
	win := ws.s.window()
	var pairs int64
	keys := ws.keys[:0]
	first := 0
	for _, l := range lengths {
		sent := ids[first : first+l]
		first += l
		for i, a := range sent {
			if a < 0 {
				continue
			}
			ws.vd[a] += inv
			for _, b := range sent[i+1 : min(i+1+win, l)] {
				if b < 0 {
					continue
				}
				pairs++
				if a != b {
					if keys = append(keys, pairKey(a, b)); len(keys) == pairBatch {
						ws.addPairs(keys, inv)
						keys = keys[:0]
					}
				}
			}
		}
	}
	ws.addPairs(keys, inv)
	ws.keys = keys[:0]
	ws.w += float64(counted) * inv
	ws.wp += float64(pairs) * inv
	ws.tokens += int64(counted)
	ws.pairs += pairs
	ws.batches++
}

// forget multiplies the true values by exp(−counted/Memory), lazily.
func (ws *WordStats) forget(counted int) {
	m := ws.s.Memory
	if m == 0 || math.IsInf(m, 1) {
		return
	}
	ws.g *= math.Exp(-float64(counted) / m)
	if ws.g < renormBelow {
		g := ws.g
		ws.w *= g
		ws.wp *= g
		for i := range ws.vd {
			ws.vd[i] *= g
		}
		for i := range ws.tab {
			ws.tab[i].w *= g
		}
		ws.g = 1
	}
}

func pairKey(a, b int) uint64 {
	if a > b {
		a, b = b, a
	}
	return uint64(a)<<32 | uint64(b)
}

func pairSlots(key uint64) (a, b int) { return int(key >> 32), int(key & math.MaxUint32) }

// mix is the splitmix64 finaliser: the table's hash, and the tie-breaker
// of pruning.
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}

// find returns the slot holding key, or the empty slot where it would go.
// The table must not be empty.
func (ws *WordStats) find(key uint64) (int, bool) {
	m := len(ws.tab) - 1
	for i := int(mix(key) >> (64 - ws.bits)); ; i = (i + 1) & m {
		switch ws.tab[i].key {
		case key:
			return i, true
		case 0:
			return i, false
		}
	}
}

// stale reports whether a slot of p was reset after p was created.
func (ws *WordStats) stale(p *wordPair) bool {
	a, b := pairSlots(p.key)
	return p.born < ws.resetAt[a] || p.born < ws.resetAt[b]
}

// addPairs adds inc to the stored C_ab of each key, in order. The home
// slots of the batch are loaded first, one independent load each: in a
// table of tens of MiB each is a cache miss, and these misses overlap,
// while those of the probes, behind the comparisons of the previous
// pair, would come one after another. The order of the additions, and
// so the table, is unchanged; the ingest of the Brown corpus (`smtd
// bench words`) went from 0.59 to 0.52 s, BenchmarkWordStatsAdd from 1.8
// to 1.5 ms a minibatch.
func (ws *WordStats) addPairs(keys []uint64, inc float64) {
	if m := len(ws.tab) - 1; m > 0 {
		t := ws.touch
		for _, key := range keys {
			t += ws.tab[int(mix(key)>>(64-ws.bits))&m].key
		}
		ws.touch = t
	}
	for _, key := range keys {
		ws.addPair(key, inc)
	}
}

// addPair adds inc to the stored C_ab of key = pairKey(a, b), a ≠ b.
func (ws *WordStats) addPair(key uint64, inc float64) {
	if len(ws.tab) == 0 {
		ws.rehash(min(1024, ws.s.maxSlots()))
	}
	i, ok := ws.find(key)
	if ok {
		p := &ws.tab[i]
		if ws.stale(p) {
			p.w, p.born = 0, ws.clock
		}
		p.w += inc
		return
	}
	switch {
	case ws.used >= ws.s.maxPairs():
		ws.prune()
		i, _ = ws.find(key)
	case (ws.used+1)*4 > len(ws.tab)*3 && len(ws.tab) < ws.s.maxSlots():
		ws.grow()
		i, _ = ws.find(key)
	}
	ws.tab[i] = wordPair{key: key, w: inc, born: ws.clock}
	ws.used++
}

// rehash moves the pairs into a new table of n slots (a power of two),
// in the order of the old table. The new table's array has room for two
// doublings in place (grow), up to the largest table MaxPairs allows.
func (ws *WordStats) rehash(n int) {
	old := ws.tab
	ws.tab = make([]wordPair, n, min(4*n, max(n, ws.s.maxSlots())))
	ws.bits = uint(0)
	for 1<<ws.bits < n {
		ws.bits++
	}
	for _, p := range old {
		if p.key != 0 {
			i, _ := ws.find(p.key)
			ws.tab[i] = p
		}
	}
}

// grow doubles the table in place: in its array if it has the room (the
// slots beyond its length are still zero: nothing writes there), else in
// a new array with room for two more doublings (as rehash makes them),
// the old table copied to its start. A fresh page costs a fault when
// first touched, about 13 µs a 4 KiB page on the benchmark machine of
// BENCHMARKS.md; on the Brown corpus the tables of 1,024 to 2,097,152
// slots add up to 96 MiB when each doubling moves into a new array, and
// to 55 MiB when two of three are in place.
//
// In place, the pairs move from the highest old slot down, each to the
// first free slot at or after its new home, which the pass has already
// emptied of old pairs if the home lies above the slot being moved from;
// a pair whose home does not (displaced past twice its old home, or
// whose probe would wrap around to the unmoved part) waits and is
// inserted last, with the table complete. Every pair so ends at or after
// its home with no empty slot between, what find needs. The layout is
// not rehash's, but a function of the old one only, whatever the array's
// capacity, which a restored table does not share with the one stored:
// both grow into the same bytes.
func (ws *WordStats) grow() {
	n := len(ws.tab)
	if cap(ws.tab) < 2*n {
		t := make([]wordPair, n, min(8*n, max(2*n, ws.s.maxSlots())))
		copy(t, ws.tab)
		ws.tab = t
	}
	ws.tab = ws.tab[:2*n]
	ws.bits++
	var late []wordPair
	for i := n - 1; i >= 0; i-- {
		p := ws.tab[i]
		if p.key == 0 {
			continue
		}
		ws.tab[i] = wordPair{}
		j := int(mix(p.key) >> (64 - ws.bits))
		if j <= i {
			late = append(late, p)
			continue
		}
		for j < 2*n && ws.tab[j].key != 0 {
			j++
		}
		if j == 2*n {
			late = append(late, p)
			continue
		}
		ws.tab[j] = p
	}
	for _, p := range late {
		j, _ := ws.find(p.key)
		ws.tab[j] = p
	}
}

// prune removes the stale pairs and then the weakest, by (weight,
// mix(key)), until at most 3/4·MaxPairs remain, and rebuilds the table
// (its size shrinks if MaxPairs did).
func (ws *WordStats) prune() {
	ws.prunes++
	target := ws.s.maxPairs() - ws.s.maxPairs()/4
	live := make([]wordPair, 0, ws.used)
	for _, p := range ws.tab {
		if p.key != 0 && !ws.stale(&p) {
			live = append(live, p)
		}
	}
	if excess := len(live) - target; excess > 0 {
		// The excess-th smallest weight t: pairs below t go, pairs at t
		// go by their hash.
		weights := make([]float64, len(live))
		for i, p := range live {
			weights[i] = p.w
		}
		slices.Sort(weights)
		t := weights[excess-1]
		below := 0
		for _, x := range weights {
			if x < t {
				below++
			}
		}
		var ties []uint64
		for _, p := range live {
			if p.w == t {
				ties = append(ties, mix(p.key))
			}
		}
		slices.Sort(ties)
		cut := ties[excess-below-1] // ties with a hash <= cut go
		kept := live[:0]
		for _, p := range live {
			if p.w > t || p.w == t && mix(p.key) > cut {
				kept = append(kept, p)
			}
		}
		live = kept
	}
	n := min(len(ws.tab), ws.s.maxSlots())
	ws.tab = make([]wordPair, n)
	ws.bits = 0
	for 1<<ws.bits < n {
		ws.bits++
	}
	for _, p := range live {
		i, _ := ws.find(p.key)
		ws.tab[i] = p
	}
	ws.used = len(live)
}

// Clone returns a deep copy that shares nothing with ws.
func (ws *WordStats) Clone() *WordStats {
	c := *ws
	c.vd = slices.Clone(ws.vd)
	c.resetAt = slices.Clone(ws.resetAt)
	c.tab = slices.Clone(ws.tab)
	c.evicted, c.slots = nil, nil
	return &c
}

// kindWords is the kind byte of a WordStats state.
const kindWords = 'W'

// MarshalBinary encodes the settings, the counts and the pair table,
// float64s bit-exact. The table is written slot by slot (only its
// occupied slots), so a restored WordStats has the same layout: it sums
// MulL in the same order and prunes the same pairs as the original.
func (ws *WordStats) MarshalBinary() ([]byte, error) {
	e := state.NewEncoder(make([]byte, 0, 128+8*len(ws.vd)+26*ws.used))
	e.U8(stateVersion)
	e.U8(kindWords)
	e.Uvarint(uint64(ws.s.Words))
	e.Uvarint(uint64(ws.s.Window))
	e.Uvarint(uint64(ws.s.MaxPairs))
	e.F64(ws.s.Memory)
	e.F64(ws.g)
	e.F64(ws.w)
	e.F64(ws.wp)
	e.Uvarint(ws.clock)
	e.I64(ws.tokens)
	e.I64(ws.pairs)
	e.I64(ws.batches)
	e.I64(ws.prunes)
	e.Sparse(ws.vd)
	nz := 0
	for _, r := range ws.resetAt {
		if r != 0 {
			nz++
		}
	}
	e.Uvarint(uint64(nz))
	last := -1
	for id, r := range ws.resetAt {
		if r != 0 {
			e.Uvarint(uint64(id - last))
			e.Uvarint(r)
			last = id
		}
	}
	e.Uvarint(uint64(len(ws.tab)))
	e.Uvarint(uint64(ws.used))
	last = -1
	for i, p := range ws.tab {
		if p.key != 0 {
			e.Uvarint(uint64(i - last))
			e.U64(p.key)
			e.F64(p.w)
			e.Uvarint(p.born)
			last = i
		}
	}
	return e.Bytes(), nil
}

// UnmarshalBinary restores a state written by MarshalBinary, settings
// included, into ws, which must have been made with the same Words and
// Window. On error ws is unchanged.
func (ws *WordStats) UnmarshalBinary(data []byte) error {
	d := state.NewDecoder(data)
	if v := d.U8(); v != stateVersion {
		return fmt.Errorf("%w: word stats state version %d, want %d", ErrVersion, v, stateVersion)
	}
	if kind := d.U8(); kind != kindWords {
		return fmt.Errorf("%w: not a word stats state", ErrFormat)
	}
	words, window, maxPairs := d.Uvarint(), d.Uvarint(), d.Uvarint()
	if d.Bad() || words != uint64(ws.s.Words) || window > math.MaxInt32 || maxPairs > math.MaxInt32 {
		return fmt.Errorf("%w: word stats state of %d words does not match the receiver's %d", ErrFormat, words, ws.s.Words)
	}
	s := WordSettings{Words: int(words), Window: int(window), MaxPairs: int(maxPairs), Memory: d.F64()}
	if err := s.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrFormat, err)
	}
	if s.window() != ws.s.window() {
		return fmt.Errorf("%w: word stats state of window %d does not match the receiver's %d", ErrFormat, s.window(), ws.s.window())
	}
	c := &WordStats{s: s, g: d.F64(), w: d.F64(), wp: d.F64(), clock: d.Uvarint()}
	c.tokens, c.pairs, c.batches, c.prunes = d.I64(), d.I64(), d.I64(), d.I64()
	c.vd = make([]float64, s.Words)
	d.Sparse(c.vd)
	c.resetAt = make([]uint64, s.Words)
	nz := d.Uvarint()
	if nz > uint64(s.Words) {
		d.Fail()
	}
	id := -1
	for range nz {
		gap := d.Uvarint()
		if d.Bad() || gap == 0 || gap > uint64(s.Words-1-id) {
			d.Fail()
			break
		}
		id += int(gap)
		if c.resetAt[id] = d.Uvarint(); c.resetAt[id] == 0 || c.resetAt[id] > c.clock {
			d.Fail()
		}
	}
	n, used := d.Uvarint(), d.Uvarint()
	if n != 0 && (n < 16 || n&(n-1) != 0 || n > uint64(s.maxSlots())) || used > uint64(s.maxPairs()) || used*4 > n*3 {
		d.Fail()
	}
	if !d.Bad() && n > 0 {
		c.rehash(int(n))
		c.used = int(used)
		i := -1
		for range used {
			gap := d.Uvarint()
			if d.Bad() || gap == 0 || gap > n-1-uint64(i) {
				d.Fail()
				break
			}
			i += int(gap)
			p := wordPair{key: d.U64(), w: d.F64(), born: d.Uvarint()}
			a, b := pairSlots(p.key)
			if a >= b || b >= s.Words || !(p.w >= 0) || math.IsInf(p.w, 0) || p.born > c.clock {
				d.Fail()
				break
			}
			c.tab[i] = p
		}
		// Every pair must be where find looks for it (no duplicates, no
		// holes in its probe sequence).
		for i, p := range c.tab {
			if p.key != 0 && !d.Bad() {
				if j, _ := c.find(p.key); j != i {
					d.Fail()
				}
			}
		}
	}
	if !d.Done() {
		return fmt.Errorf("%w: word stats state of %d bytes is truncated, too long or inconsistent", ErrFormat, len(data))
	}
	if !(c.g > 0) || math.IsInf(c.g, 0) || !(c.w >= 0) || math.IsInf(c.w, 0) || !(c.wp >= 0) || math.IsInf(c.wp, 0) ||
		c.tokens < 0 || c.pairs < 0 || c.batches < 0 || c.prunes < 0 || !finite.All(c.vd) || slices.ContainsFunc(c.vd, func(x float64) bool { return x < 0 }) {
		return fmt.Errorf("%w: word stats values out of range", ErrFormat)
	}
	*ws = *c
	return nil
}
