package online

import (
	"errors"
	"fmt"
	"strings"

	"github.com/smtd/smtd/internal/state"
)

// VocabularySlotBytes is what Vocabulary.Bytes counts for each word on top
// of its bytes: its string header, count, heap and position entries and
// its map entry, estimated for 64-bit Go.
const VocabularySlotBytes = 80

// Vocabulary maps the words of a token stream to ids (slots)
// 0..Size-1, growing online up to a fixed number of words and, optionally,
// of bytes. It is the 1-hot sparse feature of word streams
// (smt-minimalistic, App. B: α = e_id).
//
// When the vocabulary is full, a new word takes the slot of the word with
// the smallest count and that count plus one: the Space-Saving algorithm
// (Metwally, Agrawal and El Abbadi, 2005). Every word whose true count
// exceeds N/Size, with N the tokens seen, is guaranteed to be kept, and a
// kept word's count overestimates its true count by at most the count it
// inherited.
//
// With a byte bound (NewBoundedVocabulary), a new word that does not fit
// in the bytes left first evicts the rarest words, as many as it takes,
// and their slots stay free until new words take them. The counts keep
// the Space-Saving bound: a new word starts one above the largest count
// evicted so far. Memory is O(Size) words and at most the byte bound
// (unless one word alone exceeds it: it is then the only word kept),
// whatever the stream length and the length of its words.
//
// The vocabulary keeps its own copy of each word, never a substring of a
// caller's (possibly much longer) string.
type Vocabulary struct {
	size     int
	maxBytes int // 0: no bound
	bytes    int // what Bytes reports
	words    []string
	count    []uint64
	ids      map[string]int
	// heap is a min-heap of the slots in use ordered by count; pos[id] is
	// the place of id in heap, −1 for a free slot.
	heap []int
	pos  []int
	free []int // free slots, the last freed taken first
	// floor is the largest count evicted: a new word counts from floor+1.
	floor uint64
	spare []int // AddEvicted's workspace for Add
}

// NewVocabulary returns an empty vocabulary of at most size words, with no
// byte bound. It panics if size < 1.
func NewVocabulary(size int) *Vocabulary {
	return NewBoundedVocabulary(size, 0)
}

// NewBoundedVocabulary returns an empty vocabulary of at most size words
// and at most maxBytes bytes as counted by Bytes; maxBytes 0 means no byte
// bound. It panics if size < 1 or maxBytes < 0.
func NewBoundedVocabulary(size, maxBytes int) *Vocabulary {
	if size < 1 {
		panic("online: vocabulary size < 1")
	}
	if maxBytes < 0 {
		panic("online: vocabulary byte bound < 0")
	}
	return &Vocabulary{size: size, maxBytes: maxBytes, ids: make(map[string]int)}
}

// Add counts one occurrence of word and returns its id. A word evicted
// earlier comes back under a new id.
func (v *Vocabulary) Add(word string) int {
	id, spare := v.AddEvicted(v.spare[:0], word)
	v.spare = spare[:0]
	return id
}

// AddEvicted is Add that also appends to evicted the slots whose words it
// evicted to make room, and returns it: the slot it returns when that slot
// held another word, and slots it left free. The statistics kept per slot
// by the caller (sgd.WordStats.Reset) belong to the evicted words.
func (v *Vocabulary) AddEvicted(evicted []int, word string) (id int, evictedOut []int) {
	if id, ok := v.ids[word]; ok {
		v.count[id]++
		v.down(v.pos[id])
		return id, evicted
	}
	need := len(word) + VocabularySlotBytes
	for v.maxBytes > 0 && v.bytes+need > v.maxBytes && len(v.heap) > 0 {
		evicted = append(evicted, v.evictMin())
	}
	switch {
	case len(v.free) > 0:
	case len(v.words) < v.size:
		v.words = append(v.words, "")
		v.count = append(v.count, 0)
		v.pos = append(v.pos, -1)
		v.free = append(v.free, len(v.words)-1)
	default:
		evicted = append(evicted, v.evictMin())
	}
	id = v.free[len(v.free)-1]
	v.free = v.free[:len(v.free)-1]
	w := strings.Clone(word)
	v.words[id], v.count[id], v.ids[w] = w, v.floor+1, id
	v.bytes += need
	v.heap = append(v.heap, id)
	v.pos[id] = len(v.heap) - 1
	v.up(len(v.heap) - 1)
	return id, evicted
}

// evictMin frees the slot of the rarest word and returns it.
func (v *Vocabulary) evictMin() int {
	id := v.heap[0]
	last := len(v.heap) - 1
	v.swap(0, last)
	v.heap = v.heap[:last]
	v.pos[id] = -1
	v.down(0)
	delete(v.ids, v.words[id])
	v.bytes -= len(v.words[id]) + VocabularySlotBytes
	v.floor = max(v.floor, v.count[id])
	v.words[id], v.count[id] = "", 0
	v.free = append(v.free, id)
	return id
}

// SetMaxBytes changes the byte bound (0: none), evicting the rarest words
// until Bytes is within it. It appends the slots it freed to evicted and
// returns it. It panics if maxBytes < 0.
func (v *Vocabulary) SetMaxBytes(evicted []int, maxBytes int) []int {
	if maxBytes < 0 {
		panic("online: vocabulary byte bound < 0")
	}
	v.maxBytes = maxBytes
	for maxBytes > 0 && v.bytes > maxBytes && len(v.heap) > 0 {
		evicted = append(evicted, v.evictMin())
	}
	return evicted
}

// Lookup returns the id of word without counting it.
func (v *Vocabulary) Lookup(word string) (id int, ok bool) {
	id, ok = v.ids[word]
	return id, ok
}

// Word returns the word in slot id; "" for a free slot.
func (v *Vocabulary) Word(id int) string { return v.words[id] }

// Count returns the (Space-Saving) count of the word in slot id; 0 for a
// free slot.
func (v *Vocabulary) Count(id int) uint64 { return v.count[id] }

// Len returns the number of words in the vocabulary.
func (v *Vocabulary) Len() int { return len(v.heap) }

// Slots returns the number of slots handed out so far: every id is below
// it. It exceeds Len by the free slots.
func (v *Vocabulary) Slots() int { return len(v.words) }

// Size returns the most words the vocabulary holds.
func (v *Vocabulary) Size() int { return v.size }

// Bytes returns the memory the vocabulary accounts for: the bytes of its
// words plus VocabularySlotBytes per word. The slot tables add at most
// 32 bytes per slot, Size slots at most.
func (v *Vocabulary) Bytes() int { return v.bytes }

// MaxBytes returns the byte bound, 0 for none.
func (v *Vocabulary) MaxBytes() int { return v.maxBytes }

// Clone returns a deep copy.
func (v *Vocabulary) Clone() *Vocabulary {
	c := &Vocabulary{
		size:     v.size,
		maxBytes: v.maxBytes,
		bytes:    v.bytes,
		words:    append([]string(nil), v.words...),
		count:    append([]uint64(nil), v.count...),
		ids:      make(map[string]int, len(v.ids)),
		heap:     append([]int(nil), v.heap...),
		pos:      append([]int(nil), v.pos...),
		free:     append([]int(nil), v.free...),
		floor:    v.floor,
	}
	for w, id := range v.ids {
		c.ids[w] = id
	}
	return c
}

func (v *Vocabulary) less(i, j int) bool {
	a, b := v.heap[i], v.heap[j]
	if v.count[a] != v.count[b] {
		return v.count[a] < v.count[b]
	}
	return a < b
}

func (v *Vocabulary) swap(i, j int) {
	v.heap[i], v.heap[j] = v.heap[j], v.heap[i]
	v.pos[v.heap[i]] = i
	v.pos[v.heap[j]] = j
}

func (v *Vocabulary) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !v.less(i, p) {
			return
		}
		v.swap(i, p)
		i = p
	}
}

func (v *Vocabulary) down(i int) {
	n := len(v.heap)
	for {
		m := i
		if l := 2*i + 1; l < n && v.less(l, m) {
			m = l
		}
		if r := 2*i + 2; r < n && v.less(r, m) {
			m = r
		}
		if m == i {
			return
		}
		v.swap(i, m)
		i = m
	}
}

// vocabularyFormat 2 adds the byte bound, free slots and the eviction
// floor; format 1 (no byte bound, no free slots) is still read.
const vocabularyFormat = 2

// ErrVocabularyFormat is returned when a vocabulary cannot be restored.
var ErrVocabularyFormat = errors.New("online: bad vocabulary encoding")

// MarshalBinary encodes the vocabulary exactly, heap and free-slot order
// included, so that a restored vocabulary evicts the same words as the
// original.
func (v *Vocabulary) MarshalBinary() ([]byte, error) {
	e := state.NewEncoder(nil)
	e.U8(vocabularyFormat)
	e.Uvarint(uint64(v.size))
	e.Uvarint(uint64(v.maxBytes))
	e.Uvarint(v.floor)
	e.Uvarint(uint64(len(v.words)))
	for id, w := range v.words {
		if v.pos[id] < 0 {
			e.U8(0)
			continue
		}
		e.U8(1)
		e.Uvarint(uint64(len(w)))
		e.Raw([]byte(w))
		e.Uvarint(v.count[id])
	}
	for _, id := range v.heap {
		e.Uvarint(uint64(id))
	}
	e.Uvarint(uint64(len(v.free)))
	for _, id := range v.free {
		e.Uvarint(uint64(id))
	}
	return e.Bytes(), nil
}

// UnmarshalBinary restores a vocabulary written by MarshalBinary, of this
// or the previous format (restored with no byte bound: SetMaxBytes sets
// one). On error the receiver is unchanged.
func (v *Vocabulary) UnmarshalBinary(data []byte) error {
	d := state.NewDecoder(data)
	format := d.U8()
	if (format != 1 && format != vocabularyFormat) || d.Bad() {
		return fmt.Errorf("%w: format version", ErrVocabularyFormat)
	}
	size := d.Uvarint()
	var maxBytes, floor uint64
	if format >= 2 {
		maxBytes, floor = d.Uvarint(), d.Uvarint()
	}
	n := d.Uvarint()
	if d.Bad() || size < 1 || n > size || size > 1<<30 || maxBytes > 1<<40 {
		return fmt.Errorf("%w: %d slots of %d", ErrVocabularyFormat, n, size)
	}
	u := NewBoundedVocabulary(int(size), int(maxBytes))
	u.floor = floor
	u.pos = make([]int, n)
	const (
		free = iota
		inUse
		placed // in the heap or the free list
	)
	slot := make([]uint8, n)
	used := 0
	for id := 0; id < int(n) && !d.Bad(); id++ {
		u.pos[id] = -1
		if format >= 2 && d.U8() == 0 {
			u.words = append(u.words, "")
			u.count = append(u.count, 0)
			continue
		}
		l := d.Uvarint()
		if l > uint64(d.Len()) {
			d.Fail()
			break
		}
		w := string(d.Bytes(int(l)))
		u.words = append(u.words, w)
		u.count = append(u.count, d.Uvarint())
		u.ids[w] = id
		u.bytes += len(w) + VocabularySlotBytes
		slot[id] = inUse
		used++
	}
	for i := 0; i < used && !d.Bad(); i++ {
		id := d.Uvarint()
		if id >= n || slot[id] != inUse {
			d.Fail()
			break
		}
		slot[id] = placed
		u.heap = append(u.heap, int(id))
		u.pos[id] = i
	}
	if format >= 2 && !d.Bad() {
		if d.Uvarint() != n-uint64(used) {
			d.Fail()
		}
		for i := used; i < int(n) && !d.Bad(); i++ {
			id := d.Uvarint()
			if id >= n || slot[id] != free {
				d.Fail()
				break
			}
			slot[id] = placed
			u.free = append(u.free, int(id))
		}
	}
	if !d.Done() || len(u.ids) != used || len(u.heap) != used {
		return fmt.Errorf("%w: truncated, inconsistent or trailing bytes", ErrVocabularyFormat)
	}
	*v = *u
	return nil
}
