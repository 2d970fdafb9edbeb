package hebbian

import (
	"encoding"
	"errors"
	"fmt"
	"reflect"

	"github.com/smtd/smtd/internal/state"
)

// Errors of MarshalBinary and UnmarshalBinary. Every error wraps one of
// them.
var (
	// ErrVersion means the state was written in a format version this
	// code does not read.
	ErrVersion = errors.New("hebbian: unsupported state version")
	// ErrFormat means the state is truncated, has trailing bytes, is of
	// another kind, or holds invalid values.
	ErrFormat = errors.New("hebbian: malformed state")
	// ErrKernel means MarshalBinary was asked to encode a kernel that is
	// not one of this package's.
	ErrKernel = errors.New("hebbian: kernel cannot be encoded")
)

var (
	_ encoding.BinaryMarshaler   = (*Network)(nil)
	_ encoding.BinaryUnmarshaler = (*Network)(nil)
)

// stateVersion is the leading byte of a network's state, followed by
// the kind byte kindNetwork.
const (
	stateVersion = 1
	kindNetwork  = 'H'
)

// Kernel kinds in the state.
const (
	kernelGaussian    = 'G'
	kernelPowerCosine = 'C'
	kernelLinear      = 'L'
	kernelPolynomial  = 'P'
)

func encodeKernel(e *state.Encoder, k Kernel) error {
	switch k := k.(type) {
	case Gaussian:
		e.U8(kernelGaussian)
		e.F64(k.Sigma)
	case PowerCosine:
		e.U8(kernelPowerCosine)
		e.I64(int64(k.Alpha))
	case Linear:
		e.U8(kernelLinear)
	case Polynomial:
		e.U8(kernelPolynomial)
		e.I64(int64(k.Degree))
		e.F64(k.Gamma)
		e.F64(k.Coef0)
	default:
		return fmt.Errorf("%w: %T", ErrKernel, k)
	}
	return nil
}

func decodeKernel(d *state.Decoder) (Kernel, error) {
	switch kind := d.U8(); kind {
	case kernelGaussian:
		return Gaussian{Sigma: d.F64()}, nil
	case kernelPowerCosine:
		return PowerCosine{Alpha: int(d.I64())}, nil
	case kernelLinear:
		return Linear{}, nil
	case kernelPolynomial:
		return Polynomial{Degree: int(d.I64()), Gamma: d.F64(), Coef0: d.F64()}, nil
	default:
		return nil, fmt.Errorf("%w: unknown kernel kind %q", ErrFormat, kind)
	}
}

// kernelEqual reports whether two kernels are the same, also for kernel
// types that are not comparable with ==.
func kernelEqual(a, b Kernel) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	if reflect.TypeOf(a) != reflect.TypeOf(b) {
		return false
	}
	if reflect.TypeOf(a).Comparable() {
		return a == b
	}
	return reflect.DeepEqual(a, b)
}

// MarshalBinary encodes the settings (kernel and Mixing included), the
// parameters W, q (or Q), L, the step count and the last energy, float64s bit-exact. The
// Cholesky factor and the kernel self-terms are not stored: they are
// recomputed, deterministically, by UnmarshalBinary. It returns an error
// wrapping ErrKernel if the kernel is not one of this package's.
func (n *Network) MarshalBinary() ([]byte, error) {
	N, M := n.n, n.m
	e := state.NewEncoder(make([]byte, 0, 160+8*(N*M+len(n.q)+N*N)))
	e.U8(stateVersion)
	e.U8(kindNetwork)
	e.U64(uint64(N))
	e.U64(uint64(M))
	if err := encodeKernel(e, n.s.Kernel); err != nil {
		return nil, err
	}
	s := n.s
	mixing := byte(0)
	if s.Mixing {
		mixing = 1
	}
	e.U8(mixing)
	e.F64(s.Lambda)
	e.F64(s.EtaW)
	e.F64(s.EtaQ)
	e.F64(s.EtaL)
	e.I64(s.AnnealEvery)
	e.F64(s.AnnealFactor)
	e.I64(int64(s.MaxAnneals))
	e.F64(s.MaxLateral)
	e.F64(s.InitScale)
	e.I64(n.steps)
	e.F64(n.energy)
	raw := n.w.RawMatrix()
	for i := range N {
		e.F64s(raw.Data[i*raw.Stride : i*raw.Stride+M])
	}
	e.F64s(n.q)
	e.F64s(n.l)
	return e.Bytes(), nil
}

// UnmarshalBinary replaces the whole network, settings and shape
// included, by a state written by MarshalBinary; the receiver may be a
// zero Network. On error the receiver is unchanged.
func (n *Network) UnmarshalBinary(data []byte) error {
	d := state.NewDecoder(data)
	if v := d.U8(); v != stateVersion {
		return fmt.Errorf("%w: network state version %d, want %d", ErrVersion, v, stateVersion)
	}
	if kind := d.U8(); kind != kindNetwork {
		return fmt.Errorf("%w: not a hebbian network state", ErrFormat)
	}
	N, M := d.U64(), d.U64()
	const maxSide = 1 << 20
	if d.Bad() || N < 1 || M < 1 || N > maxSide || M > maxSide || uint64(len(data)) < 8*(N*M+N*N) {
		return fmt.Errorf("%w: network of shape %dx%d in %d bytes", ErrFormat, N, M, len(data))
	}
	k, err := decodeKernel(d)
	if err != nil {
		return err
	}
	mixing := d.U8()
	if mixing > 1 {
		return fmt.Errorf("%w: mixing flag %d", ErrFormat, mixing)
	}
	s := Settings{Neurons: int(N), Dim: int(M), Kernel: k, Mixing: mixing == 1}
	s.Lambda, s.EtaW, s.EtaQ, s.EtaL = d.F64(), d.F64(), d.F64(), d.F64()
	s.AnnealEvery = d.I64()
	s.AnnealFactor = d.F64()
	s.MaxAnneals = int(d.I64())
	s.MaxLateral, s.InitScale = d.F64(), d.F64()
	steps, energy := d.I64(), d.F64()
	if d.Bad() {
		return fmt.Errorf("%w: network state of %d bytes is truncated", ErrFormat, len(data))
	}
	if err := s.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrFormat, err)
	}
	c := newNetwork(s)
	d.F64s(c.w.RawMatrix().Data)
	d.F64s(c.q)
	d.F64s(c.l)
	if !d.Done() {
		return fmt.Errorf("%w: network state of %d bytes is truncated or too long", ErrFormat, len(data))
	}
	if steps < 0 || !c.Finite() {
		return fmt.Errorf("%w: negative step count or non-finite parameters", ErrFormat)
	}
	for i := range c.n {
		for j := range i {
			if c.l[i*c.n+j] != c.l[j*c.n+i] {
				return fmt.Errorf("%w: lateral weights not symmetric", ErrFormat)
			}
		}
	}
	if !c.refresh() {
		return fmt.Errorf("%w: L + λI not positive definite", ErrFormat)
	}
	c.steps, c.energy = steps, energy
	n.s, n.n, n.m = c.s, c.n, c.m
	n.w, n.q, n.l, n.fac = c.w, c.q, c.l, c.fac
	n.ww, n.self, n.h = c.ww, c.self, c.h
	n.steps, n.energy = c.steps, c.energy
	n.work = stepWork{}
	return nil
}
