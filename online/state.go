package online

import (
	"encoding"
	"encoding/binary"
	"errors"
	"math"

	"gonum.org/v1/gonum/mat"
)

// Errors of UnmarshalBinary. Every error wraps one of them.
var (
	// ErrVersion means the state was written in a format version this
	// code does not read.
	ErrVersion = errors.New("online: unsupported state version")
	// ErrFormat means the state is truncated, has trailing bytes, is of
	// another kind (a Whitener's state given to a KMeans), has another
	// shape than the receiver, or holds invalid values.
	ErrFormat = errors.New("online: malformed state")
)

var (
	_ encoding.BinaryMarshaler   = (*KMeans)(nil)
	_ encoding.BinaryUnmarshaler = (*KMeans)(nil)
	_ encoding.BinaryMarshaler   = (*Whitener)(nil)
	_ encoding.BinaryUnmarshaler = (*Whitener)(nil)
	_ mat.Matrix                 = readOnly{}
)

// stateVersion is the leading byte of every state this package writes. It
// is followed by a kind byte naming the type.
const stateVersion = 1

const (
	kindKMeans   = 'K'
	kindWhitener = 'W'
)

// encoder appends little-endian fixed-size values; float64s are written as
// their IEEE-754 bits so that a round trip is exact.
type encoder struct{ b []byte }

func (e *encoder) u8(v byte)     { e.b = append(e.b, v) }
func (e *encoder) u64(v uint64)  { e.b = binary.LittleEndian.AppendUint64(e.b, v) }
func (e *encoder) i64(v int64)   { e.u64(uint64(v)) }
func (e *encoder) f64(v float64) { e.u64(math.Float64bits(v)) }
func (e *encoder) f64s(v []float64) {
	for _, x := range v {
		e.f64(x)
	}
}
func (e *encoder) i64s(v []int64) {
	for _, x := range v {
		e.i64(x)
	}
}

// dense writes the rows of m (not its stride padding).
func (e *encoder) dense(m *mat.Dense) {
	raw := m.RawMatrix()
	for i := 0; i < raw.Rows; i++ {
		e.f64s(raw.Data[i*raw.Stride : i*raw.Stride+raw.Cols])
	}
}

// decoder reads what encoder wrote. After the first short read every read
// returns zero and ok reports false.
type decoder struct {
	b   []byte
	bad bool
}

func (d *decoder) take(n int) []byte {
	if d.bad || len(d.b) < n {
		d.bad = true
		return nil
	}
	p := d.b[:n]
	d.b = d.b[n:]
	return p
}

func (d *decoder) u8() byte {
	if p := d.take(1); p != nil {
		return p[0]
	}
	return 0
}

func (d *decoder) u64() uint64 {
	if p := d.take(8); p != nil {
		return binary.LittleEndian.Uint64(p)
	}
	return 0
}

func (d *decoder) i64() int64   { return int64(d.u64()) }
func (d *decoder) f64() float64 { return math.Float64frombits(d.u64()) }

func (d *decoder) f64s(dst []float64) {
	for i := range dst {
		dst[i] = d.f64()
	}
}

func (d *decoder) i64s(dst []int64) {
	for i := range dst {
		dst[i] = d.i64()
	}
}

// done reports whether every read succeeded and nothing is left over.
func (d *decoder) done() bool { return !d.bad && len(d.b) == 0 }

// readOnly is a mat.Matrix view that does not expose its storage, so a
// caller cannot type-assert it back to *mat.Dense and write into a
// learner's parameters.
type readOnly struct{ m *mat.Dense }

func (r readOnly) Dims() (int, int)    { return r.m.Dims() }
func (r readOnly) At(i, j int) float64 { return r.m.At(i, j) }
func (r readOnly) T() mat.Matrix       { return mat.Transpose{Matrix: r} }
