package online

import (
	"bytes"
	"errors"
	"testing"
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
