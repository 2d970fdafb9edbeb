package sgd

import (
	"encoding/binary"
	"errors"
	"math"
)

// Errors of UnmarshalBinary. Every error wraps one of them.
var (
	// ErrVersion means the state was written in a format version this
	// code does not read.
	ErrVersion = errors.New("sgd: unsupported state version")
	// ErrFormat means the state is truncated, has trailing bytes, is of
	// another kind (a Stats state given to an SMT), has another shape than
	// the receiver, or holds invalid values.
	ErrFormat = errors.New("sgd: malformed state")
)

// stateVersion is the leading byte of every state this package writes. It
// is followed by a kind byte naming the type.
const stateVersion = 1

const (
	kindStats = 'S'
	kindSMT   = 'P'
)

// encoder appends little-endian fixed-size values and unsigned varints;
// float64s are written as their IEEE-754 bits so that a round trip is
// exact.
type encoder struct{ b []byte }

func (e *encoder) u8(v byte)        { e.b = append(e.b, v) }
func (e *encoder) u64(v uint64)     { e.b = binary.LittleEndian.AppendUint64(e.b, v) }
func (e *encoder) i64(v int64)      { e.u64(uint64(v)) }
func (e *encoder) f64(v float64)    { e.u64(math.Float64bits(v)) }
func (e *encoder) uvarint(v uint64) { e.b = binary.AppendUvarint(e.b, v) }
func (e *encoder) f64s(v []float64) {
	for _, x := range v {
		e.f64(x)
	}
}

// sparse writes the non-zero entries of v as (gap, bits) pairs after their
// count, so that a large, mostly empty co-occurrence triangle costs only
// its used entries. Negative zeros are written like any other value so
// that the round trip stays bit-exact.
func (e *encoder) sparse(v []float64) {
	nnz := 0
	for _, x := range v {
		if math.Float64bits(x) != 0 {
			nnz++
		}
	}
	e.uvarint(uint64(nnz))
	last := -1
	for i, x := range v {
		if math.Float64bits(x) != 0 {
			e.uvarint(uint64(i - last))
			e.f64(x)
			last = i
		}
	}
}

// decoder reads what encoder wrote. After the first short or invalid read
// every read returns zero and bad is set.
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

func (d *decoder) uvarint() uint64 {
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

func (d *decoder) f64s(dst []float64) {
	for i := range dst {
		dst[i] = d.f64()
	}
}

// sparse reads what encoder.sparse wrote into dst, which must be zero and
// as long as the encoded vector.
func (d *decoder) sparse(dst []float64) {
	nnz := d.uvarint()
	if nnz > uint64(len(dst)) {
		d.bad = true
		return
	}
	pos := -1
	for k := uint64(0); k < nnz && !d.bad; k++ {
		gap := d.uvarint()
		if gap == 0 || gap > uint64(len(dst)-1-pos) {
			d.bad = true
			return
		}
		pos += int(gap)
		dst[pos] = d.f64()
	}
}

// done reports whether every read succeeded and nothing is left over.
func (d *decoder) done() bool { return !d.bad && len(d.b) == 0 }

func finite(s []float64) bool {
	for _, v := range s {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return false
		}
	}
	return true
}

func grow[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}
