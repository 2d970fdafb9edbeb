package record

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// sampleMessages covers empty and multi-valued headers, empty and binary
// payloads and a negative offset.
func sampleMessages() []*Message {
	return []*Message{
		{Subject: "smtd.in.images", Header: nats.Header{"Smtd-Encoding": {"png"}, "Smtd-Label": {"5"}}, Data: []byte("\x89PNG..."), Offset: 0},
		{Subject: "smtd.in.words", Data: []byte("the jury said"), Offset: 1500 * time.Microsecond},
		{Subject: "a", Header: nats.Header{"X": {"1", "2", ""}, "Empty": {}}, Offset: time.Second},
		{Subject: "", Data: bytes.Repeat([]byte{0, 255}, 1000), Offset: -time.Nanosecond},
	}
}

func encode(t testing.TB, msgs []*Message) []byte {
	t.Helper()
	var b bytes.Buffer
	w, err := NewWriter(&b)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range msgs {
		if err := w.Write(m); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// sameMessage compares two messages, treating nil and empty headers, header
// keys without values, and nil and empty data as equal.
func sameMessage(a, b *Message) bool {
	clean := func(h nats.Header) nats.Header {
		c := nats.Header{}
		for k, v := range h {
			if len(v) > 0 {
				c[k] = v
			}
		}
		return c
	}
	return a.Subject == b.Subject && a.Offset == b.Offset && bytes.Equal(a.Data, b.Data) &&
		maps.EqualFunc(clean(a.Header), clean(b.Header), slices.Equal)
}

func readAll(r *Reader) ([]*Message, error) {
	var msgs []*Message
	for {
		m, err := r.Next()
		if err != nil {
			return msgs, err
		}
		msgs = append(msgs, m)
	}
}

func TestRoundTrip(t *testing.T) {
	want := sampleMessages()
	data := encode(t, want)
	if !strings.HasPrefix(string(data), "SMTDREC\x01") {
		t.Fatalf("file starts with %q", data[:8])
	}
	r, err := NewReader(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	got, err := readAll(r)
	if err != io.EOF {
		t.Fatalf("end: err = %v, want io.EOF", err)
	}
	if len(got) != len(want) {
		t.Fatalf("read %d messages, want %d", len(got), len(want))
	}
	for i := range want {
		if !sameMessage(got[i], want[i]) {
			t.Errorf("message %d = %+v, want %+v", i, got[i], want[i])
		}
	}
	if got[1].Header != nil || got[2].Data != nil {
		t.Errorf("absent header/data not nil: %v %v", got[1].Header, got[2].Data)
	}
	if _, err := r.Next(); err != io.EOF {
		t.Errorf("after end: err = %v, want io.EOF again", err)
	}

	// Header order does not depend on map iteration: equal messages, equal bytes.
	for range 5 {
		if again := encode(t, want); !bytes.Equal(again, data) {
			t.Fatal("encoding is not deterministic")
		}
	}
}

// TestLayout pins the byte layout documented in doc.go.
func TestLayout(t *testing.T) {
	data := encode(t, []*Message{{Subject: "s", Header: nats.Header{"K": {"v"}}, Data: []byte("xy"), Offset: 258}})
	body := []byte{
		2, 1, 0, 0, 0, 0, 0, 0, // offset 258
		1, 0, 's', // subject
		1, 0, 1, 0, 'K', 1, 0, 0, 0, 'v', // one header pair
		2, 0, 0, 0, 'x', 'y', // data
	}
	want := append([]byte("SMTDREC\x01"), byte(len(body)), 0, 0, 0)
	want = append(want, body...)
	want = binary.LittleEndian.AppendUint32(want, crc32.Checksum(body, crc32.MakeTable(crc32.Castagnoli)))
	if !bytes.Equal(data, want) {
		t.Fatalf("layout:\n got %v\nwant %v", data, want)
	}
}

func TestNewReaderErrors(t *testing.T) {
	tests := []struct {
		name string
		data string
		want error
	}{
		{"empty", "", ErrMagic},
		{"short", "SMTD", ErrMagic},
		{"other file", "\x89PNG\r\n\x1a\n", ErrMagic},
		{"version 2", "SMTDREC\x02", ErrVersion},
		{"version 0", "SMTDREC\x00", ErrVersion},
	}
	for _, tt := range tests {
		if _, err := NewReader(strings.NewReader(tt.data)); !errors.Is(err, tt.want) {
			t.Errorf("%s: err = %v, want %v", tt.name, err, tt.want)
		}
	}
	r, err := NewReader(strings.NewReader(Magic))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Next(); err != io.EOF {
		t.Errorf("magic only: err = %v, want io.EOF", err)
	}
}

// TestTruncated cuts a recording at every byte: the whole records before
// the cut are read, then io.EOF at a record boundary or ErrTruncated.
func TestTruncated(t *testing.T) {
	msgs := sampleMessages()
	data := encode(t, msgs)
	// Record boundaries.
	ends := []int{len(Magic)}
	for off := len(Magic); off < len(data); {
		off += 8 + int(binary.LittleEndian.Uint32(data[off:]))
		ends = append(ends, off)
	}
	for cut := len(Magic); cut < len(data); cut++ {
		r, err := NewReader(bytes.NewReader(data[:cut]))
		if err != nil {
			t.Fatal(err)
		}
		got, err := readAll(r)
		whole := 0
		for whole+1 < len(ends) && ends[whole+1] <= cut {
			whole++
		}
		if len(got) != whole {
			t.Fatalf("cut %d: read %d messages, want %d", cut, len(got), whole)
		}
		if cut == ends[whole] {
			if err != io.EOF {
				t.Fatalf("cut %d at a boundary: err = %v, want io.EOF", cut, err)
			}
			continue
		}
		var re *RecordError
		if !errors.Is(err, ErrTruncated) || !errors.As(err, &re) || re.Index != whole || re.Offset != int64(ends[whole]) {
			t.Fatalf("cut %d: err = %v, want ErrTruncated at record %d, byte %d", cut, err, whole, ends[whole])
		}
	}
}

// TestCorrupt flips every byte of the second record's body and checksum.
func TestCorrupt(t *testing.T) {
	data := encode(t, sampleMessages())
	start := len(Magic) + 8 + int(binary.LittleEndian.Uint32(data[len(Magic):]))
	size := int(binary.LittleEndian.Uint32(data[start:]))
	for i := start + 4; i < start+8+size; i++ {
		bad := bytes.Clone(data)
		bad[i] ^= 0x40
		r, _ := NewReader(bytes.NewReader(bad))
		got, err := readAll(r)
		var re *RecordError
		if len(got) != 1 || !errors.Is(err, ErrChecksum) || !errors.As(err, &re) || re.Index != 1 || re.Offset != int64(start) {
			t.Fatalf("flip byte %d: %d messages, err = %v", i, len(got), err)
		}
		if _, again := r.Next(); again != err {
			t.Fatalf("error not sticky: %v then %v", err, again)
		}
	}
}

// rawRecord frames body with its length and a valid checksum.
func rawRecord(body []byte) []byte {
	rec := binary.LittleEndian.AppendUint32(nil, uint32(len(body)))
	rec = append(rec, body...)
	return binary.LittleEndian.AppendUint32(rec, crc32.Checksum(body, castagnoli))
}

func TestMalformed(t *testing.T) {
	tests := []struct {
		name string
		rec  []byte
		want error
	}{
		{"short body", rawRecord([]byte{1, 2, 3}), ErrMalformed},
		{"subject overruns", rawRecord([]byte{0, 0, 0, 0, 0, 0, 0, 0, 9, 0, 'a'}), ErrMalformed},
		{"trailing bytes", rawRecord([]byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 7}), ErrMalformed},
		{"pairs overrun", rawRecord([]byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 5, 0, 0, 0, 0, 0, 0, 0}), ErrMalformed},
		{"huge length", []byte{0xff, 0xff, 0xff, 0xff, 1, 2}, ErrMalformed},
		{"length beyond end", []byte{0, 0, 1, 0, 1, 2}, ErrTruncated},
	}
	for _, tt := range tests {
		r, _ := NewReader(bytes.NewReader(append([]byte(Magic), tt.rec...)))
		if _, err := r.Next(); !errors.Is(err, tt.want) {
			t.Errorf("%s: err = %v, want %v", tt.name, err, tt.want)
		}
	}
	// The smallest valid body: offset, empty subject, no pairs, no data.
	r, _ := NewReader(bytes.NewReader(append([]byte(Magic), rawRecord(make([]byte, 16))...)))
	if m, err := r.Next(); err != nil || m.Subject != "" || m.Header != nil || m.Data != nil {
		t.Errorf("minimal record: %+v, %v", m, err)
	}
}

func TestWriteTooLarge(t *testing.T) {
	var b bytes.Buffer
	w, _ := NewWriter(&b)
	tests := []*Message{
		{Subject: strings.Repeat("s", 1<<16)},
		{Subject: "s", Header: nats.Header{strings.Repeat("k", 1<<16): {"v"}}},
		{Subject: "s", Header: nats.Header{"k": make([]string, 1<<16)}},
		{Subject: "s", Data: make([]byte, MaxRecordSize)},
	}
	for i, m := range tests {
		if err := w.Write(m); !errors.Is(err, ErrTooLarge) {
			t.Errorf("case %d: err = %v, want ErrTooLarge", i, err)
		}
	}
	// The writer is still usable.
	if err := w.Write(&Message{Subject: "ok"}); err != nil {
		t.Fatal(err)
	}
	w.Flush()
	r, _ := NewReader(&b)
	if m, err := r.Next(); err != nil || m.Subject != "ok" {
		t.Fatalf("after errors: %+v, %v", m, err)
	}
}

type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

func TestWriterIOErrorSticky(t *testing.T) {
	w, err := NewWriter(failWriter{}) // the magic stays in the buffer
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Flush(); err == nil {
		t.Fatal("Flush: no error")
	}
	if err := w.Write(&Message{Subject: "x"}); err == nil {
		t.Fatal("Write after a failed Flush: no error")
	}
}

func TestReadFile(t *testing.T) {
	dir := t.TempDir()
	data := encode(t, sampleMessages())
	good := filepath.Join(dir, "good.smtdrec")
	cut := filepath.Join(dir, "cut.smtdrec")
	os.WriteFile(good, data, 0o644)
	os.WriteFile(cut, data[:len(data)-3], 0o644)

	msgs, err := ReadFile(good)
	if err != nil || len(msgs) != 4 {
		t.Fatalf("good: %d messages, %v", len(msgs), err)
	}
	msgs, err = ReadFile(cut)
	if len(msgs) != 3 || !errors.Is(err, ErrTruncated) || !strings.Contains(err.Error(), "cut.smtdrec") {
		t.Fatalf("cut: %d messages, %v", len(msgs), err)
	}
	if _, err := ReadFile(filepath.Join(dir, "none")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("missing: %v", err)
	}
}

func Example() {
	var file bytes.Buffer
	w, _ := NewWriter(&file)
	w.Write(&Message{Subject: "smtd.in.words", Data: []byte("the jury said"), Offset: 0})
	w.Write(&Message{
		Subject: "smtd.in.images",
		Header:  nats.Header{"Smtd-Encoding": {"raw"}, "Smtd-Shape": {"2,2"}, "Smtd-Dtype": {"uint8"}},
		Data:    []byte{0, 64, 128, 255},
		Offset:  40 * time.Millisecond,
	})
	w.Flush()

	r, _ := NewReader(&file)
	for {
		m, err := r.Next()
		if err == io.EOF {
			break
		}
		fmt.Println(m.Offset, m.Subject, m.Header.Get("Smtd-Shape"), m.Data)
	}
	// Output:
	// 0s smtd.in.words  [116 104 101 32 106 117 114 121 32 115 97 105 100]
	// 40ms smtd.in.images 2,2 [0 64 128 255]
}

func BenchmarkWrite(b *testing.B) {
	m := &Message{Subject: "smtd.in.images", Header: nats.Header{"Smtd-Encoding": {"png"}, "Smtd-Label": {"5"}}, Data: make([]byte, 784)}
	w, _ := NewWriter(io.Discard)
	b.ReportAllocs()
	b.SetBytes(int64(len(m.Data)))
	for b.Loop() {
		w.Write(m)
	}
}

func BenchmarkRead(b *testing.B) {
	msgs := make([]*Message, 1000)
	for i := range msgs {
		msgs[i] = &Message{Subject: "smtd.in.images", Header: nats.Header{"Smtd-Encoding": {"png"}, "Smtd-Label": {"5"}}, Data: make([]byte, 784)}
	}
	data := encode(b, msgs)
	b.ReportAllocs()
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		r, _ := NewReader(bytes.NewReader(data))
		if got, err := readAll(r); err != io.EOF || len(got) != 1000 {
			b.Fatal(err)
		}
	}
}
