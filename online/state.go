package online

import (
	"encoding"
	"errors"

	"gonum.org/v1/gonum/mat"
)

// Errors of UnmarshalBinary. Every error wraps one of them.
var (
	// ErrVersion means the state was written in a format version this
	// code does not read.
	ErrVersion = errors.New("online: unsupported state version")
	// ErrFormat means the state (or contribution) is truncated, has
	// trailing bytes, is of another kind (a Whitener's state given to a
	// KMeans), has another shape than the receiver, or holds invalid
	// values.
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

// readOnly is a mat.Matrix view that does not expose its storage, so a
// caller cannot type-assert it back to *mat.Dense and write into a
// learner's parameters.
type readOnly struct{ m *mat.Dense }

func (r readOnly) Dims() (int, int)    { return r.m.Dims() }
func (r readOnly) At(i, j int) float64 { return r.m.At(i, j) }
func (r readOnly) T() mat.Matrix       { return mat.Transpose{Matrix: r} }
