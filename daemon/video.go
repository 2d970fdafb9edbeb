package daemon

import (
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/smtd/smtd/config"
	"github.com/smtd/smtd/internal/state"
	"github.com/smtd/smtd/online"
)

// frameTracker turns the frames of many video streams into the triples
// (t−1, t, t+1) of the second-order temporal operator of
// sparse-manifold-transform eq. 8, from the patch codes of each frame.
//
// Each stream keeps the codes of its last two frames in order and a
// reorder window of at most reorder frames that arrived ahead of the one
// expected next. A frame is released in index order: at once when it is
// the one expected, or when the window overflows (the missing frame is
// then taken as dropped). A released frame extends the stream's chain
// when its index follows the previous one; otherwise (a gap) the chain
// restarts at it, so that no triple joins frames that were not
// consecutive. A frame older than the one expected, or a repeated index,
// is late: it is coded and published, but not part of any triple.
//
// A frame whose index is more than maxJump away from the newest index of
// its stream, ahead or behind, restarts the stream's chain: the frames
// waiting in the window are released first, and the stream continues from
// that frame as if it were new. Without this horizon one frame numbered
// 2⁶³−1 would make every later frame of the stream late, and a producer
// that restarts its numbering at 0 would never be followed again.
//
// At most maxStreams streams are tracked; a new stream past that forgets
// the least recently seen one. Memory is bounded by
// maxStreams·(2+reorder) frames of codes.
type frameTracker struct {
	maxStreams, reorder int
	maxJump             uint64 // the horizon; config video.max_frame_jump
	atoms               int    // K of the codes
	clock               uint64
	streams             map[string]*frameStream
	late, gaps, evicted int64
	restarts            int64 // chains restarted by a frame past the horizon

	// The triples released by the last add, their positions laid end to
	// end: row p of prev, cur and next is the same patch in frames t−1,
	// t and t+1.
	prev, cur, next online.SparseCodes
}

// frameStream is the state of one video stream.
type frameStream struct {
	seen     uint64 // tracker clock when last seen
	expected uint64 // index of the next frame in order
	chain    int    // frames in the current chain: 0, 1 or 2 (capped)
	last     [2]*online.SparseCodes
	pending  []pendingFrame // sorted by index, ahead of expected
}

type pendingFrame struct {
	index uint64
	codes *online.SparseCodes
}

// newFrameTracker returns a tracker with the default horizon,
// config.DefaultMaxFrameJump; set maxJump for another.
func newFrameTracker(maxStreams, reorder, atoms int) *frameTracker {
	t := &frameTracker{
		maxStreams: maxStreams, reorder: reorder, maxJump: config.DefaultMaxFrameJump, atoms: atoms,
		streams: make(map[string]*frameStream),
	}
	for _, c := range []*online.SparseCodes{&t.prev, &t.cur, &t.next} {
		resetCodes(c, atoms)
	}
	return t
}

// resetCodes empties c, keeping its memory.
func resetCodes(c *online.SparseCodes, atoms int) {
	c.Rows, c.Atoms = 0, atoms
	c.Ptr, c.Index, c.Cos = append(c.Ptr[:0], 0), c.Index[:0], c.Cos[:0]
}

// appendRows appends rows [from, to) of src to dst.
func appendRows(dst, src *online.SparseCodes, from, to int) {
	for r := from; r < to; r++ {
		atoms, cos := src.Row(r)
		dst.Index = append(dst.Index, atoms...)
		dst.Cos = append(dst.Cos, cos...)
		dst.Ptr = append(dst.Ptr, len(dst.Index))
		dst.Rows++
	}
}

// add takes the frames of a minibatch, the codes of frame i being rows
// [i·n, (i+1)·n) of codes, and leaves in t.prev, t.cur and t.next the
// codes of every triple the batch completed.
func (t *frameTracker) add(batch []sample, codes *online.SparseCodes, n int) {
	for _, c := range []*online.SparseCodes{&t.prev, &t.cur, &t.next} {
		resetCodes(c, t.atoms)
	}
	for i, s := range batch {
		t.clock++
		st := t.streams[s.stream]
		if st == nil {
			t.evict()
			st = &frameStream{expected: s.frame}
			t.streams[s.stream] = st
		} else if distance(s.frame, st.newest()) > t.maxJump {
			t.restart(st, s.frame)
		}
		st.seen = t.clock
		if s.frame < st.expected || slices.ContainsFunc(st.pending, func(p pendingFrame) bool { return p.index == s.frame }) {
			t.late++
			continue
		}
		at, _ := slices.BinarySearchFunc(st.pending, s.frame, func(p pendingFrame, f uint64) int { return cmpU64(p.index, f) })
		frame := &online.SparseCodes{}
		resetCodes(frame, t.atoms)
		appendRows(frame, codes, i*n, (i+1)*n)
		st.pending = slices.Insert(st.pending, at, pendingFrame{index: s.frame, codes: frame})
		t.release(st, t.reorder)
	}
}

// newest returns the highest frame index the stream has seen.
func (st *frameStream) newest() uint64 {
	if n := len(st.pending); n > 0 {
		return st.pending[n-1].index
	}
	return st.expected - 1 // a stream is made with its first frame
}

// distance returns |a − b| without overflow.
func distance(a, b uint64) uint64 {
	if a > b {
		return a - b
	}
	return b - a
}

// restart releases the frames st holds in its window, then starts a new
// chain that expects frame next.
func (t *frameTracker) restart(st *frameStream, next uint64) {
	t.restarts++
	t.release(st, 0)
	st.chain, st.last, st.expected = 0, [2]*online.SparseCodes{}, next
}

func cmpU64(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// release moves the frames of st that are due from its window to its
// chain, collecting the triples they complete: the one expected, and the
// first while more than window frames wait (0 releases them all).
func (t *frameTracker) release(st *frameStream, window int) {
	for len(st.pending) > 0 && (st.pending[0].index == st.expected || len(st.pending) > window) {
		f := st.pending[0]
		st.pending = slices.Delete(st.pending, 0, 1)
		if f.index != st.expected {
			t.gaps++
			st.chain = 0
		}
		if st.chain == 2 {
			appendRows(&t.prev, st.last[0], 0, st.last[0].Rows)
			appendRows(&t.cur, st.last[1], 0, st.last[1].Rows)
			appendRows(&t.next, f.codes, 0, f.codes.Rows)
		}
		st.last[0], st.last[1] = st.last[1], f.codes
		st.chain = min(st.chain+1, 2)
		st.expected = f.index + 1
	}
}

// evict forgets the least recently seen stream when the tracker is full.
func (t *frameTracker) evict() {
	if len(t.streams) < t.maxStreams {
		return
	}
	var oldest string
	var seen uint64
	for name, st := range t.streams {
		if oldest == "" || st.seen < seen {
			oldest, seen = name, st.seen
		}
	}
	delete(t.streams, oldest)
	t.evicted++
}

// frameCounts are a tracker's counters, for status.
type frameCounts struct {
	Streams                      int
	Late, Gaps, StreamsForgotten int64
	ChainRestarts                int64
}

func (t *frameTracker) counts() *frameCounts {
	return &frameCounts{Streams: len(t.streams), Late: t.late, Gaps: t.gaps, StreamsForgotten: t.evicted, ChainRestarts: t.restarts}
}

// frameTrackerVersion 3 adds the restarts counter; version 2 is read with
// none.
const frameTrackerVersion = 3

// MarshalBinary writes the tracker with its streams in name order, so that
// equal trackers give equal bytes.
func (t *frameTracker) MarshalBinary() ([]byte, error) {
	e := state.NewEncoder(nil)
	e.U8(frameTrackerVersion)
	for _, v := range []uint64{t.clock, uint64(t.late), uint64(t.gaps), uint64(t.evicted), uint64(t.restarts), uint64(len(t.streams))} {
		e.Uvarint(v)
	}
	codes := func(c *online.SparseCodes) {
		if c == nil {
			e.U8(0)
			return
		}
		e.U8(1)
		e.Uvarint(uint64(c.Rows))
		for r := range c.Rows {
			atoms, cos := c.Row(r)
			e.Uvarint(uint64(len(atoms)))
			for j, a := range atoms {
				e.Uvarint(uint64(a))
				e.F64(cos[j])
			}
		}
	}
	for _, name := range slices.Sorted(maps.Keys(t.streams)) {
		st := t.streams[name]
		e.Uvarint(uint64(len(name)))
		e.Raw([]byte(name))
		e.Uvarint(st.seen)
		e.Uvarint(st.expected)
		e.Uvarint(uint64(st.chain))
		codes(st.last[0])
		codes(st.last[1])
		e.Uvarint(uint64(len(st.pending)))
		for _, p := range st.pending {
			e.Uvarint(p.index)
			codes(p.codes)
		}
	}
	return e.Bytes(), nil
}

var errFrameTracker = errors.New("video frame tracker: bad encoding")

// UnmarshalBinary reads a tracker written by MarshalBinary, of this or the
// previous version, into t, keeping t's limits; on error t is unchanged.
func (t *frameTracker) UnmarshalBinary(data []byte) error {
	d := state.NewDecoder(data)
	v := d.U8()
	if v != frameTrackerVersion && v != 2 {
		return fmt.Errorf("video frame tracker: version %d, want 2 or %d", v, frameTrackerVersion)
	}
	c := newFrameTracker(t.maxStreams, t.reorder, t.atoms)
	c.maxJump = t.maxJump
	c.clock = d.Uvarint()
	c.late, c.gaps, c.evicted = int64(d.Uvarint()), int64(d.Uvarint()), int64(d.Uvarint())
	if v >= 3 {
		c.restarts = int64(d.Uvarint())
	}
	n := d.Uvarint()
	count := func() int {
		v := d.Uvarint()
		if v > uint64(d.Len()) {
			d.Fail()
			return 0
		}
		return int(v)
	}
	codes := func() *online.SparseCodes {
		if d.U8() == 0 {
			return nil
		}
		c := &online.SparseCodes{}
		resetCodes(c, t.atoms)
		for range count() {
			for range count() {
				a := d.Uvarint()
				if a >= uint64(t.atoms) {
					d.Fail()
					return c
				}
				c.Index = append(c.Index, int(a))
				c.Cos = append(c.Cos, d.F64())
			}
			c.Ptr = append(c.Ptr, len(c.Index))
			c.Rows++
			if d.Bad() {
				return c
			}
		}
		return c
	}
	for range n {
		if d.Bad() {
			break
		}
		name := string(d.Bytes(count()))
		st := &frameStream{seen: d.Uvarint(), expected: d.Uvarint(), chain: int(d.Uvarint())}
		st.last = [2]*online.SparseCodes{codes(), codes()}
		st.pending = make([]pendingFrame, count())
		for i := range st.pending {
			st.pending[i] = pendingFrame{index: d.Uvarint(), codes: codes()}
		}
		c.streams[name] = st
	}
	if !d.Done() || len(c.streams) != int(n) {
		return errFrameTracker
	}
	*t = *c
	return nil
}
