package daemon

import (
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/smtd/smtd/internal/state"
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
// At most maxStreams streams are tracked; a new stream past that forgets
// the least recently seen one. Memory is bounded by
// maxStreams·(2+reorder) frames of codes.
type frameTracker struct {
	maxStreams, reorder int
	clock               uint64
	streams             map[string]*frameStream
	late, gaps, evicted int64

	// The triples released by the last add, concatenated.
	prev, cur, next []int
}

// frameStream is the state of one video stream.
type frameStream struct {
	seen     uint64 // tracker clock when last seen
	expected uint64 // index of the next frame in order
	chain    int    // frames in the current chain: 0, 1 or 2 (capped)
	last     [2][]int
	pending  []pendingFrame // sorted by index, ahead of expected
}

type pendingFrame struct {
	index uint64
	codes []int
}

func newFrameTracker(maxStreams, reorder int) *frameTracker {
	return &frameTracker{maxStreams: maxStreams, reorder: reorder, streams: make(map[string]*frameStream)}
}

// add takes the frames of a minibatch, the codes of frame i being
// codes[i*n : (i+1)*n], and leaves in t.prev, t.cur and t.next the codes
// of every triple the batch completed.
func (t *frameTracker) add(batch []sample, codes []int, n int) {
	t.prev, t.cur, t.next = t.prev[:0], t.cur[:0], t.next[:0]
	for i, s := range batch {
		t.clock++
		st := t.streams[s.stream]
		if st == nil {
			t.evict()
			st = &frameStream{expected: s.frame}
			t.streams[s.stream] = st
		}
		st.seen = t.clock
		if s.frame < st.expected || slices.ContainsFunc(st.pending, func(p pendingFrame) bool { return p.index == s.frame }) {
			t.late++
			continue
		}
		at, _ := slices.BinarySearchFunc(st.pending, s.frame, func(p pendingFrame, f uint64) int { return cmpU64(p.index, f) })
		st.pending = slices.Insert(st.pending, at, pendingFrame{index: s.frame, codes: slices.Clone(codes[i*n : (i+1)*n])})
		t.release(st)
	}
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
// chain, collecting the triples they complete.
func (t *frameTracker) release(st *frameStream) {
	for len(st.pending) > 0 && (st.pending[0].index == st.expected || len(st.pending) > t.reorder) {
		f := st.pending[0]
		st.pending = slices.Delete(st.pending, 0, 1)
		if f.index != st.expected {
			t.gaps++
			st.chain = 0
		}
		if st.chain == 2 {
			t.prev = append(t.prev, st.last[0]...)
			t.cur = append(t.cur, st.last[1]...)
			t.next = append(t.next, f.codes...)
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
}

func (t *frameTracker) counts() *frameCounts {
	return &frameCounts{Streams: len(t.streams), Late: t.late, Gaps: t.gaps, StreamsForgotten: t.evicted}
}

// clone returns a deep copy.
func (t *frameTracker) clone() *frameTracker {
	c := newFrameTracker(t.maxStreams, t.reorder)
	c.clock, c.late, c.gaps, c.evicted = t.clock, t.late, t.gaps, t.evicted
	for name, st := range t.streams {
		s := *st
		s.last = [2][]int{slices.Clone(st.last[0]), slices.Clone(st.last[1])}
		s.pending = make([]pendingFrame, len(st.pending))
		for i, p := range st.pending {
			s.pending[i] = pendingFrame{p.index, slices.Clone(p.codes)}
		}
		c.streams[name] = &s
	}
	return c
}

const frameTrackerVersion = 1

// MarshalBinary writes the tracker with its streams in name order, so that
// equal trackers give equal bytes.
func (t *frameTracker) MarshalBinary() ([]byte, error) {
	e := state.NewEncoder(nil)
	e.U8(frameTrackerVersion)
	for _, v := range []uint64{t.clock, uint64(t.late), uint64(t.gaps), uint64(t.evicted), uint64(len(t.streams))} {
		e.Uvarint(v)
	}
	codes := func(c []int) {
		e.Uvarint(uint64(len(c)))
		for _, a := range c {
			e.Uvarint(uint64(a + 1)) // blank −1 → 0
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

// UnmarshalBinary reads a tracker written by MarshalBinary into t, keeping
// t's limits; on error t is unchanged.
func (t *frameTracker) UnmarshalBinary(data []byte) error {
	d := state.NewDecoder(data)
	if v := d.U8(); v != frameTrackerVersion {
		return fmt.Errorf("video frame tracker: version %d, want %d", v, frameTrackerVersion)
	}
	c := newFrameTracker(t.maxStreams, t.reorder)
	c.clock = d.Uvarint()
	c.late, c.gaps, c.evicted = int64(d.Uvarint()), int64(d.Uvarint()), int64(d.Uvarint())
	n := d.Uvarint()
	count := func() int {
		v := d.Uvarint()
		if v > uint64(d.Len()) {
			d.Fail()
			return 0
		}
		return int(v)
	}
	codes := func() []int {
		c := make([]int, count())
		for i := range c {
			c[i] = int(d.Uvarint()) - 1
		}
		return c
	}
	for range n {
		if d.Bad() {
			break
		}
		name := string(d.Bytes(count()))
		st := &frameStream{seen: d.Uvarint(), expected: d.Uvarint(), chain: int(d.Uvarint())}
		st.last = [2][]int{codes(), codes()}
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
