package sgd

import (
	"errors"
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

func grow[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}

// orDefault returns v, or d when v is zero: the documented default of a
// zero settings field.
func orDefault[T int | float64](v, d T) T {
	if v == 0 {
		return d
	}
	return v
}
