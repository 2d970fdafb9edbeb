// Package state is the exact binary encoding of learner state shared by
// smtd's learning packages: little-endian fixed-size integers, float64s
// as their IEEE-754 bits (so a round trip is bit-exact, which exact resume
// needs), unsigned varints, and sparse vectors as (gap, value) pairs.
//
// Each package writes its own format version and kind bytes first and
// wraps its own errors; this package only moves values.
package state

import (
	"encoding/binary"
	"math"
	"slices"

	"gonum.org/v1/gonum/mat"
)

// Encoder appends values to a byte slice.
type Encoder struct{ b []byte }

// NewEncoder returns an Encoder that appends to buf (which may be nil; its
// capacity is a size hint).
func NewEncoder(buf []byte) *Encoder { return &Encoder{b: buf} }

// Bytes returns what was written.
func (e *Encoder) Bytes() []byte { return e.b }

// U8 writes a byte.
func (e *Encoder) U8(v byte) { e.b = append(e.b, v) }

// U64 writes 8 little-endian bytes.
func (e *Encoder) U64(v uint64) { e.b = binary.LittleEndian.AppendUint64(e.b, v) }

// I64 writes v as U64.
func (e *Encoder) I64(v int64) { e.U64(uint64(v)) }

// F64 writes the IEEE-754 bits of v.
func (e *Encoder) F64(v float64) { e.U64(math.Float64bits(v)) }

// Uvarint writes v as an unsigned varint.
func (e *Encoder) Uvarint(v uint64) { e.b = binary.AppendUvarint(e.b, v) }

// Raw appends b as it is; the reader must know its length.
func (e *Encoder) Raw(b []byte) { e.b = append(e.b, b...) }

// F64s writes every element of v.
func (e *Encoder) F64s(v []float64) {
	e.b = slices.Grow(e.b, 8*len(v))
	for _, x := range v {
		e.b = binary.LittleEndian.AppendUint64(e.b, math.Float64bits(x))
	}
}

// F32s writes every element of v rounded to float32 (4 bytes each).
func (e *Encoder) F32s(v []float64) {
	e.b = slices.Grow(e.b, 4*len(v))
	for _, x := range v {
		e.b = binary.LittleEndian.AppendUint32(e.b, math.Float32bits(float32(x)))
	}
}

// I64s writes every element of v.
func (e *Encoder) I64s(v []int64) {
	e.b = slices.Grow(e.b, 8*len(v))
	for _, x := range v {
		e.b = binary.LittleEndian.AppendUint64(e.b, uint64(x))
	}
}

// Dense writes the rows of m, not its stride padding.
func (e *Encoder) Dense(m *mat.Dense) {
	raw := m.RawMatrix()
	for i := 0; i < raw.Rows; i++ {
		e.F64s(raw.Data[i*raw.Stride : i*raw.Stride+raw.Cols])
	}
}

// Sparse writes the entries of v whose bits are not zero as (gap, bits)
// pairs after their count, so that a large, mostly empty vector costs only
// its used entries. Negative zeros count as entries, keeping the round
// trip bit-exact.
func (e *Encoder) Sparse(v []float64) {
	nnz := 0
	for _, x := range v {
		if math.Float64bits(x) != 0 {
			nnz++
		}
	}
	e.Uvarint(uint64(nnz))
	last := -1
	for i, x := range v {
		if math.Float64bits(x) != 0 {
			e.Uvarint(uint64(i - last))
			e.F64(x)
			last = i
		}
	}
}

// Decoder reads what an Encoder wrote. After the first short or invalid
// read every read returns zero and Bad reports true, so a caller checks
// once, at the end, with Done.
type Decoder struct {
	b   []byte
	bad bool
}

// NewDecoder reads from data.
func NewDecoder(data []byte) *Decoder { return &Decoder{b: data} }

// Bad reports whether a read failed.
func (d *Decoder) Bad() bool { return d.bad }

// Fail marks the input invalid, for checks the caller makes on values.
func (d *Decoder) Fail() { d.bad = true }

// Done reports whether every read succeeded and nothing is left over.
func (d *Decoder) Done() bool { return !d.bad && len(d.b) == 0 }

// Len returns the number of unread bytes.
func (d *Decoder) Len() int { return len(d.b) }

func (d *Decoder) take(n int) []byte {
	if d.bad || n < 0 || len(d.b) < n {
		d.bad = true
		return nil
	}
	p := d.b[:n]
	d.b = d.b[n:]
	return p
}

// Bytes reads n raw bytes (nil after a failure).
func (d *Decoder) Bytes(n int) []byte { return d.take(n) }

// U8 reads a byte.
func (d *Decoder) U8() byte {
	if p := d.take(1); p != nil {
		return p[0]
	}
	return 0
}

// U64 reads 8 little-endian bytes.
func (d *Decoder) U64() uint64 {
	if p := d.take(8); p != nil {
		return binary.LittleEndian.Uint64(p)
	}
	return 0
}

// I64 reads what Encoder.I64 wrote.
func (d *Decoder) I64() int64 { return int64(d.U64()) }

// F64 reads what Encoder.F64 wrote.
func (d *Decoder) F64() float64 { return math.Float64frombits(d.U64()) }

// Uvarint reads an unsigned varint.
func (d *Decoder) Uvarint() uint64 {
	if d.bad {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.bad = true
		return 0
	}
	d.b = d.b[n:]
	return v
}

// F64s fills dst; after a failure it leaves dst as it was.
func (d *Decoder) F64s(dst []float64) { d.FiniteF64s(dst) }

// F32s fills dst with what Encoder.F32s wrote; after a failure it leaves
// dst as it was.
func (d *Decoder) F32s(dst []float64) { d.FiniteF32s(dst) }

// FiniteF64s fills dst as F64s does and reports whether every value read
// is finite (false after a failure), checked as it is read: a value is
// not finite if its bits, sign aside, are at least those of +Inf.
func (d *Decoder) FiniteF64s(dst []float64) bool {
	p := d.take(8 * len(dst))
	if p == nil {
		return len(dst) == 0 && !d.bad
	}
	var most uint64
	for i := range dst {
		u := binary.LittleEndian.Uint64(p)
		p = p[8:]
		most = max(most, u&^(1<<63))
		dst[i] = math.Float64frombits(u)
	}
	return most < 0x7ff<<52
}

// FiniteF32s fills dst as F32s does and reports whether every value read
// is finite (false after a failure), checked as it is read.
func (d *Decoder) FiniteF32s(dst []float64) bool {
	p := d.take(4 * len(dst))
	if p == nil {
		return len(dst) == 0 && !d.bad
	}
	var most uint32
	for i := range dst {
		u := binary.LittleEndian.Uint32(p)
		p = p[4:]
		most = max(most, u&^(1<<31))
		dst[i] = float64(math.Float32frombits(u))
	}
	return most < 0xff<<23
}

// FiniteFloats is FiniteF32s with f32, else FiniteF64s: for sections
// whose width the encoder chose.
func (d *Decoder) FiniteFloats(dst []float64, f32 bool) bool {
	if f32 {
		return d.FiniteF32s(dst)
	}
	return d.FiniteF64s(dst)
}

// Uvarints reads len(dst) unsigned varints.
func (d *Decoder) Uvarints(dst []uint64) {
	if d.bad {
		return
	}
	b := d.b
	for i := range dst {
		// Values below 2¹⁴, the most common, take one or two bytes.
		switch {
		case len(b) > 0 && b[0] < 0x80:
			dst[i], b = uint64(b[0]), b[1:]
		case len(b) > 1 && b[1] < 0x80:
			dst[i], b = uint64(b[0]&0x7f)|uint64(b[1])<<7, b[2:]
		default:
			v, n := binary.Uvarint(b)
			if n <= 0 {
				d.bad = true
				return
			}
			dst[i], b = v, b[n:]
		}
	}
	d.b = b
}

// I64s fills dst; after a failure it leaves dst as it was.
func (d *Decoder) I64s(dst []int64) {
	p := d.take(8 * len(dst))
	if p == nil {
		return
	}
	for i := range dst {
		dst[i] = int64(binary.LittleEndian.Uint64(p[8*i:]))
	}
}

// Sparse reads what Encoder.Sparse wrote into dst, which must be zero and
// as long as the encoded vector.
func (d *Decoder) Sparse(dst []float64) {
	nnz := d.Uvarint()
	if nnz > uint64(len(dst)) {
		d.bad = true
		return
	}
	pos := -1
	for k := uint64(0); k < nnz && !d.bad; k++ {
		gap := d.Uvarint()
		if gap == 0 || gap > uint64(len(dst)-1-pos) {
			d.bad = true
			return
		}
		pos += int(gap)
		dst[pos] = d.F64()
	}
}
