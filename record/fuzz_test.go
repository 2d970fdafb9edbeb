package record

import (
	"bytes"
	"errors"
	"io"
	"testing"
)

// FuzzReader feeds arbitrary bytes to the Reader. It must never panic, must
// end with io.EOF or a documented error, and whatever it reads must survive
// a write and read round trip unchanged.
func FuzzReader(f *testing.F) {
	valid := encode(f, sampleMessages())
	f.Add(valid)
	f.Add(valid[:len(valid)-5])
	f.Add([]byte(Magic))
	f.Add([]byte("SMTDREC\x02"))
	f.Add(append([]byte(Magic), rawRecord(make([]byte, 16))...))
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := NewReader(bytes.NewReader(data))
		if err != nil {
			if !errors.Is(err, ErrMagic) && !errors.Is(err, ErrVersion) {
				t.Fatalf("NewReader: undocumented error %v", err)
			}
			return
		}
		msgs, err := readAll(r)
		var re *RecordError
		if err != io.EOF && !(errors.As(err, &re) &&
			(errors.Is(err, ErrTruncated) || errors.Is(err, ErrChecksum) || errors.Is(err, ErrMalformed))) {
			t.Fatalf("Next: undocumented error %v", err)
		}
		r2, err := NewReader(bytes.NewReader(encode(t, msgs)))
		if err != nil {
			t.Fatal(err)
		}
		again, err := readAll(r2)
		if err != io.EOF || len(again) != len(msgs) {
			t.Fatalf("re-read %d of %d messages, err %v", len(again), len(msgs), err)
		}
		for i := range msgs {
			if !sameMessage(again[i], msgs[i]) {
				t.Fatalf("message %d changed: %+v, then %+v", i, msgs[i], again[i])
			}
		}
	})
}
