package record

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"os"
	"slices"
	"time"

	"github.com/nats-io/nats.go"
)

// Magic is the 8 bytes that start every recording; its last byte is the
// format version.
const Magic = "SMTDREC\x01"

// Version is the format version this package reads and writes.
const Version = 1

// MaxRecordSize bounds the body length of one record (64 MiB, the largest
// payload a NATS server can be configured to accept, plus room for the
// subject and headers). A larger len field is treated as damage.
const MaxRecordSize = 64<<20 + 1<<20

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Errors about recordings. Reader errors about one record come wrapped in a
// *RecordError.
var (
	ErrMagic     = errors.New("record: not an smtd recording (bad magic)")
	ErrVersion   = errors.New("record: unsupported format version")
	ErrTruncated = errors.New("record: truncated record")
	ErrChecksum  = errors.New("record: checksum mismatch")
	ErrMalformed = errors.New("record: malformed record")
	ErrTooLarge  = errors.New("record: message too large for the format")
)

// RecordError reports a damaged record: its index (0 for the first record)
// and the file offset of its len field.
type RecordError struct {
	Index  int
	Offset int64
	Err    error // wraps ErrTruncated, ErrChecksum or ErrMalformed, or is an I/O error
}

func (e *RecordError) Error() string {
	return fmt.Sprintf("record %d at byte %d: %v", e.Index, e.Offset, e.Err)
}

func (e *RecordError) Unwrap() error { return e.Err }

// Message is one recorded NATS message.
type Message struct {
	Subject string
	// Header holds the NATS headers; nil when the message had none.
	Header nats.Header
	// Data is the payload; nil when empty.
	Data []byte
	// Offset is the arrival time since the first recorded message.
	Offset time.Duration
}

// Writer writes a recording. It buffers: call Flush before closing the
// underlying writer. A Writer is not safe for concurrent use.
type Writer struct {
	w   *bufio.Writer
	buf []byte
	err error
}

// NewWriter writes the magic to w and returns a Writer that appends records.
func NewWriter(w io.Writer) (*Writer, error) {
	bw := bufio.NewWriterSize(w, 64<<10)
	if _, err := bw.WriteString(Magic); err != nil {
		return nil, fmt.Errorf("record: %w", err)
	}
	return &Writer{w: bw}, nil
}

// Write appends m as one record. It returns an error wrapping ErrTooLarge if
// a field does not fit its length field (subject or key longer than 65,535
// bytes, more than 65,535 header values, or a body over MaxRecordSize); the
// Writer stays usable after that. An I/O error is sticky.
func (w *Writer) Write(m *Message) error {
	if w.err != nil {
		return w.err
	}
	body, err := appendBody(w.buf[:0], m)
	if err != nil {
		return err
	}
	w.buf = body
	var hdr [4]byte
	binary.LittleEndian.PutUint32(hdr[:], uint32(len(body)))
	var sum [4]byte
	binary.LittleEndian.PutUint32(sum[:], crc32.Checksum(body, castagnoli))
	for _, p := range [][]byte{hdr[:], body, sum[:]} {
		if _, err := w.w.Write(p); err != nil {
			w.err = fmt.Errorf("record: %w", err)
			return w.err
		}
	}
	return nil
}

// Flush writes buffered records to the underlying writer.
func (w *Writer) Flush() error {
	if w.err != nil {
		return w.err
	}
	if err := w.w.Flush(); err != nil {
		w.err = fmt.Errorf("record: %w", err)
	}
	return w.err
}

// appendBody appends the encoded body of m to dst.
func appendBody(dst []byte, m *Message) ([]byte, error) {
	if len(m.Subject) > math.MaxUint16 {
		return nil, fmt.Errorf("%w: subject of %d bytes", ErrTooLarge, len(m.Subject))
	}
	keys := make([]string, 0, len(m.Header))
	npairs := 0
	for k, vs := range m.Header {
		if len(k) > math.MaxUint16 {
			return nil, fmt.Errorf("%w: header key of %d bytes", ErrTooLarge, len(k))
		}
		keys = append(keys, k)
		npairs += len(vs)
	}
	if npairs > math.MaxUint16 {
		return nil, fmt.Errorf("%w: %d header values", ErrTooLarge, npairs)
	}
	slices.Sort(keys)
	size := 8 + 2 + len(m.Subject) + 2 + 4 + len(m.Data)
	for _, k := range keys {
		for _, v := range m.Header[k] {
			size += 2 + len(k) + 4 + len(v)
		}
	}
	if size > MaxRecordSize {
		return nil, fmt.Errorf("%w: record of %d bytes exceeds %d", ErrTooLarge, size, MaxRecordSize)
	}
	dst = slices.Grow(dst, size)
	dst = binary.LittleEndian.AppendUint64(dst, uint64(m.Offset))
	dst = binary.LittleEndian.AppendUint16(dst, uint16(len(m.Subject)))
	dst = append(dst, m.Subject...)
	dst = binary.LittleEndian.AppendUint16(dst, uint16(npairs))
	for _, k := range keys {
		for _, v := range m.Header[k] {
			dst = binary.LittleEndian.AppendUint16(dst, uint16(len(k)))
			dst = append(dst, k...)
			dst = binary.LittleEndian.AppendUint32(dst, uint32(len(v)))
			dst = append(dst, v...)
		}
	}
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(m.Data)))
	dst = append(dst, m.Data...)
	return dst, nil
}

// Reader reads a recording. It is not safe for concurrent use.
type Reader struct {
	r     *bufio.Reader
	off   int64 // file offset of the next record
	index int   // index of the next record
	err   error // sticky error
}

// NewReader reads and checks the magic and version at the start of r. It
// returns an error wrapping ErrMagic if r is not a recording (or is shorter
// than the magic) and ErrVersion for a recording of another version.
func NewReader(r io.Reader) (*Reader, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	var magic [len(Magic)]byte
	if _, err := io.ReadFull(br, magic[:]); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, fmt.Errorf("%w: file shorter than its magic", ErrMagic)
		}
		return nil, fmt.Errorf("record: %w", err)
	}
	if string(magic[:len(Magic)-1]) != Magic[:len(Magic)-1] {
		return nil, ErrMagic
	}
	if v := magic[len(Magic)-1]; v != Version {
		return nil, fmt.Errorf("%w %d (this build reads %d)", ErrVersion, v, Version)
	}
	return &Reader{r: br, off: int64(len(Magic))}, nil
}

// Next returns the next message. It returns io.EOF after the last whole
// record, and a *RecordError wrapping ErrTruncated, ErrChecksum or
// ErrMalformed for a damaged record; once it has returned an error it keeps
// returning it. The returned message owns its memory.
func (r *Reader) Next() (*Message, error) {
	if r.err != nil {
		return nil, r.err
	}
	m, n, err := r.next()
	if err != nil {
		if err != io.EOF {
			err = &RecordError{Index: r.index, Offset: r.off, Err: err}
		}
		r.err = err
		return nil, err
	}
	r.off += n
	r.index++
	return m, nil
}

// next reads one record and returns it with its size in bytes.
func (r *Reader) next() (*Message, int64, error) {
	var hdr [4]byte
	n, err := io.ReadFull(r.r, hdr[:])
	switch {
	case err == io.EOF:
		return nil, 0, io.EOF
	case err == io.ErrUnexpectedEOF:
		return nil, 0, fmt.Errorf("%w: %d of 4 length bytes", ErrTruncated, n)
	case err != nil:
		return nil, 0, err
	}
	size := binary.LittleEndian.Uint32(hdr[:])
	if size > MaxRecordSize {
		return nil, 0, fmt.Errorf("%w: length %d exceeds %d", ErrMalformed, size, MaxRecordSize)
	}
	rec, err := readFull(r.r, int(size)+4)
	if err != nil {
		if err == io.ErrUnexpectedEOF {
			return nil, 0, fmt.Errorf("%w: %d of %d body and checksum bytes", ErrTruncated, len(rec), size+4)
		}
		return nil, 0, err
	}
	body := rec[:size]
	if got, want := crc32.Checksum(body, castagnoli), binary.LittleEndian.Uint32(rec[size:]); got != want {
		return nil, 0, fmt.Errorf("%w: crc32c %08x, recorded %08x", ErrChecksum, got, want)
	}
	m, err := parseBody(body)
	if err != nil {
		return nil, 0, fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	return m, int64(size) + 8, nil
}

// readFull reads n bytes, growing its buffer as data arrives so that a
// damaged length field costs no more memory than the data actually present.
// It returns what it got with io.ErrUnexpectedEOF at a premature end.
func readFull(r io.Reader, n int) ([]byte, error) {
	const first = 64 << 10
	buf := make([]byte, 0, min(n, first))
	for len(buf) < n {
		want := min(n-len(buf), max(len(buf), first)) // double as data arrives
		buf = slices.Grow(buf, want)
		got, err := io.ReadFull(r, buf[len(buf):len(buf)+want])
		buf = buf[:len(buf)+got]
		if err == io.EOF {
			return buf, io.ErrUnexpectedEOF
		}
		if err != nil {
			return buf, err
		}
	}
	return buf, nil
}

// parseBody decodes a body whose checksum has been verified. Strings are
// copied; Data aliases body, which the Reader never reuses.
func parseBody(body []byte) (*Message, error) {
	p := parser{b: body}
	m := &Message{Offset: time.Duration(p.u64())}
	m.Subject = string(p.bytes(int(p.u16())))
	npairs := int(p.u16())
	if npairs > 0 && p.err == nil {
		m.Header = make(nats.Header)
		for range npairs {
			k := string(p.bytes(int(p.u16())))
			v := string(p.bytes(int(p.u32())))
			if p.err != nil {
				break
			}
			m.Header[k] = append(m.Header[k], v)
		}
	}
	if data := p.bytes(int(p.u32())); len(data) > 0 {
		m.Data = data[:len(data):len(data)]
	}
	if p.err != nil {
		return nil, p.err
	}
	if len(p.b) != 0 {
		return nil, fmt.Errorf("%d bytes after the data", len(p.b))
	}
	return m, nil
}

// parser consumes little-endian fields from b; after the first short read
// every call returns zero values and err says what was missing.
type parser struct {
	b   []byte
	err error
}

func (p *parser) take(n int) []byte {
	if p.err != nil {
		return nil
	}
	if n > len(p.b) {
		p.err = fmt.Errorf("field of %d bytes but only %d left in the body", n, len(p.b))
		return nil
	}
	v := p.b[:n]
	p.b = p.b[n:]
	return v
}

func (p *parser) u16() uint16 {
	if b := p.take(2); b != nil {
		return binary.LittleEndian.Uint16(b)
	}
	return 0
}

func (p *parser) u32() uint32 {
	if b := p.take(4); b != nil {
		return binary.LittleEndian.Uint32(b)
	}
	return 0
}

func (p *parser) u64() uint64 {
	if b := p.take(8); b != nil {
		return binary.LittleEndian.Uint64(b)
	}
	return 0
}

func (p *parser) bytes(n int) []byte { return p.take(n) }

// ReadFile reads every message of the recording at path. On a damaged file it
// returns the messages before the damage together with the error.
func ReadFile(path string) ([]*Message, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("record: %w", err)
	}
	defer f.Close()
	r, err := NewReader(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	var msgs []*Message
	for {
		m, err := r.Next()
		if err == io.EOF {
			return msgs, nil
		}
		if err != nil {
			return msgs, fmt.Errorf("%s: %w", path, err)
		}
		msgs = append(msgs, m)
	}
}
