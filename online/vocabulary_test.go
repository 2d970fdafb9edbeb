package online

import (
	"bytes"
	"encoding/hex"
	"errors"
	"slices"
	"strings"
	"testing"
	"unsafe"
)

func TestVocabularyKeepsFrequentWords(t *testing.T) {
	v := NewVocabulary(3)
	stream := []string{"the", "cat", "the", "dog", "the", "cat", "emu", "the", "cat", "fox"}
	for _, w := range stream {
		v.Add(w)
	}
	if v.Len() != 3 {
		t.Fatalf("Len = %d, want 3", v.Len())
	}
	for _, w := range []string{"the", "cat"} {
		if _, ok := v.Lookup(w); !ok {
			t.Errorf("frequent word %q evicted", w)
		}
	}
	id, _ := v.Lookup("the")
	if v.Count(id) != 4 {
		t.Errorf("count(the) = %d, want 4 (never evicted, so exact)", v.Count(id))
	}
	// Space-Saving: the newest word took the rarest slot and inherited its
	// count plus one.
	id, ok := v.Lookup("fox")
	if !ok || v.Count(id) != 3 {
		t.Errorf("fox: ok %v count %d, want kept with count 3", ok, v.Count(id))
	}
}

func TestVocabularyMarshalRoundTrip(t *testing.T) {
	a := NewVocabulary(4)
	for _, w := range []string{"a", "b", "a", "c", "d", "e", "a", "f"} {
		a.Add(w)
	}
	data, err := a.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	b := NewVocabulary(1)
	if err := b.UnmarshalBinary(data); err != nil {
		t.Fatal(err)
	}
	// The restored vocabulary behaves identically from here on.
	for _, w := range []string{"g", "b", "h", "a", "i"} {
		if ia, ib := a.Add(w), b.Add(w); ia != ib {
			t.Fatalf("Add(%q): %d after round trip, %d without", w, ib, ia)
		}
	}
	da, _ := a.MarshalBinary()
	db, _ := b.MarshalBinary()
	if !bytes.Equal(da, db) {
		t.Error("states differ after the same words")
	}
	c := a.Clone()
	c.Add("zzz")
	if _, ok := a.Lookup("zzz"); ok {
		t.Error("clone shares state")
	}
	for _, bad := range [][]byte{nil, {9}, data[:len(data)-1], append(append([]byte(nil), data...), 0)} {
		v := NewVocabulary(2)
		if err := v.UnmarshalBinary(bad); !errors.Is(err, ErrVocabularyFormat) {
			t.Errorf("UnmarshalBinary(%v) = %v, want ErrVocabularyFormat", bad, err)
		}
		if v.Len() != 0 || v.Size() != 2 {
			t.Error("failed UnmarshalBinary changed the receiver")
		}
	}
}

// With a byte bound, long words evict the rarest words until they fit,
// the evicted slots are reported and reused, and Bytes never exceeds the
// bound.
func TestVocabularyByteBound(t *testing.T) {
	const slot = VocabularySlotBytes
	v := NewBoundedVocabulary(10, 4*slot+30)
	for _, w := range []string{"the", "the", "the", "cat", "cat", "sat"} {
		if _, ev := v.AddEvicted(nil, w); len(ev) != 0 {
			t.Fatalf("%s evicted %v with room left", w, ev)
		}
	}
	if got := v.Bytes(); got != 3*slot+9 {
		t.Fatalf("Bytes = %d, want %d", got, 3*slot+9)
	}
	// 30 bytes: a new slot does not fit, so the rarest word (sat) goes
	// and the long word takes its slot.
	long := strings.Repeat("x", 30)
	id, ev := v.AddEvicted(nil, long)
	if satID := 2; id != satID || !slices.Equal(ev, []int{satID}) {
		t.Fatalf("long word: slot %d, evicted %v; want slot 2, evicted [2]", id, ev)
	}
	if _, ok := v.Lookup("sat"); ok || v.Bytes() > v.MaxBytes() {
		t.Fatalf("sat kept or %d bytes > %d", v.Bytes(), v.MaxBytes())
	}
	// Space-Saving floor: the long word counts from sat's count plus one.
	if v.Count(id) != 2 {
		t.Errorf("count of the long word %d, want 2", v.Count(id))
	}
	// 100 bytes evict the rarest words until they fit: cat and the long
	// word (count 2 both, the lower slot first); the last one freed is
	// taken.
	huge := strings.Repeat("y", 100)
	id, ev = v.AddEvicted(nil, huge)
	if !slices.Equal(ev, []int{1, 2}) || id != 2 || v.Len() != 2 || v.Slots() != 3 {
		t.Fatalf("huge word: slot %d, evicted %v, %d words in %d slots", id, ev, v.Len(), v.Slots())
	}
	if v.Bytes() > v.MaxBytes() {
		t.Errorf("%d bytes > bound %d", v.Bytes(), v.MaxBytes())
	}
	// A free slot is taken before a new one.
	if id := v.Add("a"); id != 1 || v.Word(1) != "a" {
		t.Errorf("a took slot %d, want the free slot 1", id)
	}
	// The state, free slots included, round-trips exactly.
	data, _ := v.MarshalBinary()
	u := NewVocabulary(1)
	if err := u.UnmarshalBinary(data); err != nil {
		t.Fatal(err)
	}
	if u.Bytes() != v.Bytes() || u.MaxBytes() != v.MaxBytes() || u.Len() != v.Len() {
		t.Errorf("restored: %d bytes of %d, %d words; want %d, %d, %d", u.Bytes(), u.MaxBytes(), u.Len(), v.Bytes(), v.MaxBytes(), v.Len())
	}
	for _, w := range []string{"b", strings.Repeat("z", 50), "the", "c"} {
		if a, b := v.Add(w), u.Add(w); a != b {
			t.Fatalf("Add(%.8s): %d after round trip, %d without", w, b, a)
		}
	}
	c := v.Clone()
	if ev := c.SetMaxBytes(nil, slot+10); c.Bytes() > slot+10 && c.Len() > 1 || len(ev) == 0 {
		t.Errorf("SetMaxBytes: %d bytes, %d words, evicted %v", c.Bytes(), c.Len(), ev)
	}
	if v.Len() == c.Len() {
		t.Error("clone shares state")
	}
}

// 10000 distinct words of 1000 bytes in a vocabulary of 1 MB stay within
// it.
func TestVocabularyBytesStayBounded(t *testing.T) {
	const bound = 1 << 20
	v := NewBoundedVocabulary(50000, bound)
	for i := range 10000 {
		v.Add(strings.Repeat(string(rune('a'+i%26)), 990) + strings.Repeat("0", 10-len(itoa(i))) + itoa(i))
		if v.Bytes() > bound {
			t.Fatalf("word %d: %d bytes > %d", i, v.Bytes(), bound)
		}
	}
	data, _ := v.MarshalBinary()
	if len(data) > bound {
		t.Errorf("encoding of %d bytes > %d", len(data), bound)
	}
}

func itoa(i int) string {
	var b []byte
	for {
		b = append([]byte{byte('0' + i%10)}, b...)
		if i /= 10; i == 0 {
			return string(b)
		}
	}
}

// A word is copied: the vocabulary never keeps a long message alive
// through a token that is a substring of it.
func TestVocabularyCopiesWords(t *testing.T) {
	msg := "word " + strings.Repeat(".", 1<<20)
	v := NewVocabulary(4)
	id := v.Add(msg[:4])
	p := uintptr(unsafe.Pointer(unsafe.StringData(v.Word(id))))
	start := uintptr(unsafe.Pointer(unsafe.StringData(msg)))
	if p >= start && p < start+uintptr(len(msg)) {
		t.Error("the vocabulary keeps a substring of the message")
	}
}

// A vocabulary written in format 1 is restored and evicts as it did.
func TestVocabularyReadsFormat1(t *testing.T) {
	// NewVocabulary(4) after a b a c d e a f, format 1.
	data, _ := hex.DecodeString("01040401610301650201660201640103020100")
	v := NewVocabulary(1)
	if err := v.UnmarshalBinary(data); err != nil {
		t.Fatal(err)
	}
	var got []int
	for _, w := range []string{"g", "b", "h", "a", "i"} {
		got = append(got, v.Add(w))
	}
	if want := []int{3, 1, 2, 0, 3}; !slices.Equal(got, want) {
		t.Errorf("slots %v, want %v as before the format changed", got, want)
	}
	if v.Bytes() != 4*VocabularySlotBytes+4 {
		t.Errorf("Bytes %d", v.Bytes())
	}
}
