package online

import (
	"errors"
	"fmt"

	"github.com/smtd/smtd/internal/state"
)

// Vocabulary maps the words of a token stream to ids 0..Size-1, growing
// online up to a fixed size. It is the 1-hot sparse feature of word
// streams (smt-minimalistic, App. B: α = e_id).
//
// When the vocabulary is full, a new word takes the id of the word with the
// smallest count and inherits that count plus one: the Space-Saving
// algorithm (Metwally, Agrawal and El Abbadi, 2005). Every word whose true
// count exceeds N/Size, with N the tokens seen, is guaranteed to be kept,
// and a kept word's count overestimates its true count by at most the
// count it inherited. Memory is O(Size) whatever the stream length.
type Vocabulary struct {
	size  int
	words []string
	count []uint64
	ids   map[string]int
	// heap is a min-heap of ids ordered by count; pos[id] is the place of
	// id in heap.
	heap []int
	pos  []int
}

// NewVocabulary returns an empty vocabulary of at most size words. It
// panics if size < 1.
func NewVocabulary(size int) *Vocabulary {
	if size < 1 {
		panic("online: vocabulary size < 1")
	}
	return &Vocabulary{size: size, ids: make(map[string]int)}
}

// Add counts one occurrence of word and returns its id. A word evicted
// earlier comes back under a new id.
func (v *Vocabulary) Add(word string) int {
	if id, ok := v.ids[word]; ok {
		v.count[id]++
		v.down(v.pos[id])
		return id
	}
	if len(v.words) < v.size {
		id := len(v.words)
		v.words = append(v.words, word)
		v.count = append(v.count, 1)
		v.ids[word] = id
		v.heap = append(v.heap, id)
		v.pos = append(v.pos, len(v.heap)-1)
		v.up(len(v.heap) - 1)
		return id
	}
	id := v.heap[0]
	delete(v.ids, v.words[id])
	v.words[id] = word
	v.ids[word] = id
	v.count[id]++
	v.down(0)
	return id
}

// Lookup returns the id of word without counting it.
func (v *Vocabulary) Lookup(word string) (id int, ok bool) {
	id, ok = v.ids[word]
	return id, ok
}

// Word returns the word with the given id.
func (v *Vocabulary) Word(id int) string { return v.words[id] }

// Count returns the (Space-Saving) count of the word with the given id.
func (v *Vocabulary) Count(id int) uint64 { return v.count[id] }

// Len returns the number of words in the vocabulary.
func (v *Vocabulary) Len() int { return len(v.words) }

// Size returns the most words the vocabulary holds.
func (v *Vocabulary) Size() int { return v.size }

// Clone returns a deep copy.
func (v *Vocabulary) Clone() *Vocabulary {
	c := &Vocabulary{
		size:  v.size,
		words: append([]string(nil), v.words...),
		count: append([]uint64(nil), v.count...),
		ids:   make(map[string]int, len(v.ids)),
		heap:  append([]int(nil), v.heap...),
		pos:   append([]int(nil), v.pos...),
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

const vocabularyFormat = 1

// ErrVocabularyFormat is returned when a vocabulary cannot be restored.
var ErrVocabularyFormat = errors.New("online: bad vocabulary encoding")

// MarshalBinary encodes the vocabulary exactly, heap order included, so
// that a restored vocabulary evicts the same words as the original.
func (v *Vocabulary) MarshalBinary() ([]byte, error) {
	e := state.NewEncoder(nil)
	e.U8(vocabularyFormat)
	e.Uvarint(uint64(v.size))
	e.Uvarint(uint64(len(v.words)))
	for id, w := range v.words {
		e.Uvarint(uint64(len(w)))
		for i := 0; i < len(w); i++ {
			e.U8(w[i])
		}
		e.Uvarint(v.count[id])
	}
	for _, id := range v.heap {
		e.Uvarint(uint64(id))
	}
	return e.Bytes(), nil
}

// UnmarshalBinary restores a vocabulary written by MarshalBinary. On error
// the receiver is unchanged.
func (v *Vocabulary) UnmarshalBinary(data []byte) error {
	d := state.NewDecoder(data)
	if d.U8() != vocabularyFormat || d.Bad() {
		return fmt.Errorf("%w: format version", ErrVocabularyFormat)
	}
	size, n := d.Uvarint(), d.Uvarint()
	if d.Bad() || size < 1 || n > size || size > 1<<30 {
		return fmt.Errorf("%w: %d words of %d", ErrVocabularyFormat, n, size)
	}
	u := NewVocabulary(int(size))
	for id := 0; id < int(n) && !d.Bad(); id++ {
		l := d.Uvarint()
		if l > uint64(d.Len()) {
			d.Fail()
			break
		}
		w := string(d.Bytes(int(l)))
		u.words = append(u.words, w)
		u.count = append(u.count, d.Uvarint())
		u.ids[w] = id
	}
	u.pos = make([]int, n)
	seen := make([]bool, n)
	for i := 0; i < int(n) && !d.Bad(); i++ {
		id := d.Uvarint()
		if id >= n || seen[id] {
			d.Fail()
			break
		}
		seen[id] = true
		u.heap = append(u.heap, int(id))
		u.pos[id] = i
	}
	if !d.Done() || len(u.ids) != int(n) {
		return fmt.Errorf("%w: truncated, inconsistent or trailing bytes", ErrVocabularyFormat)
	}
	*v = *u
	return nil
}
