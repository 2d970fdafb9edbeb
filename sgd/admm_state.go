package sgd

import (
	"encoding"
	"fmt"
	"math"

	"github.com/smtd/smtd/internal/state"
)

// kindADMM is the kind byte of an ADMM state.
const kindADMM = 'A'

// Clone returns a deep copy of the learner that shares nothing with a.
func (a *ADMM) Clone() *ADMM {
	c := newADMM(a.s, a.dim)
	c.w.Copy(a.w)
	c.g.Copy(a.g)
	c.lip = a.lip
	c.steps = a.steps
	c.n = a.n
	copy(c.sz, a.sz)
	c.szz.Copy(a.szz)
	c.szx.Copy(a.szx)
	c.rn, c.rxx, c.rse = a.rn, a.rxx, a.rse
	copy(c.rx, a.rx)
	return c
}

// MarshalBinary encodes the settings, the shape, the step count, W and
// the running sums, float64s bit-exact. G and L are recomputed from W on
// restore (deterministically), and nothing per sample exists between
// steps, so a restored learner steps bit-identically.
func (a *ADMM) MarshalBinary() ([]byte, error) {
	k, n := a.s.K, a.dim
	e := state.NewEncoder(make([]byte, 0, 128+8*(2*k*n+k*k+k+n)))
	e.U8(stateVersion)
	e.U8(kindADMM)
	e.U64(uint64(k))
	e.U64(uint64(n))
	e.U8(byte(a.s.Prior))
	e.U8(byte(a.s.Schedule))
	e.F64(a.s.Lambda)
	e.F64(a.s.Omega)
	e.F64(a.s.Rho)
	e.F64(a.s.LearningRate)
	e.U64(uint64(a.s.Iterations))
	e.U64(uint64(a.s.Passes))
	e.I64(int64(a.s.WarmIterations))
	e.F64(a.s.Memory)
	e.I64(a.steps)
	e.Dense(a.w)
	e.F64(a.n)
	e.F64s(a.sz)
	e.Dense(a.szz)
	e.Dense(a.szx)
	e.F64(a.rn)
	e.F64(a.rxx)
	e.F64(a.rse)
	e.F64s(a.rx)
	return e.Bytes(), nil
}

// UnmarshalBinary restores a state written by MarshalBinary, settings
// included, into a, which must have the same K, N and Prior. On error a is
// unchanged; every error wraps ErrVersion or ErrFormat.
func (a *ADMM) UnmarshalBinary(data []byte) error {
	d := state.NewDecoder(data)
	if v := d.U8(); v != stateVersion {
		return fmt.Errorf("%w: ADMM state version %d, want %d", ErrVersion, v, stateVersion)
	}
	if kind := d.U8(); kind != kindADMM {
		return fmt.Errorf("%w: not an ADMM state", ErrFormat)
	}
	k, n := d.U64(), d.U64()
	prior := Prior(d.U8())
	if d.Bad() || k != uint64(a.s.K) || n != uint64(a.dim) || prior != a.s.Prior {
		return fmt.Errorf("%w: ADMM state of K %d, dimension %d, %v; receiver has %d, %d, %v",
			ErrFormat, k, n, prior, a.s.K, a.dim, a.s.Prior)
	}
	s := ADMMSettings{K: a.s.K, Prior: prior, Schedule: Schedule(d.U8())}
	s.Lambda, s.Omega, s.Rho, s.LearningRate = d.F64(), d.F64(), d.F64(), d.F64()
	iters, passes, warm := d.U64(), d.U64(), d.I64()
	s.Memory = d.F64()
	steps := d.I64()
	b := newADMM(ADMMSettings{K: a.s.K, Prior: prior}, a.dim)
	d.F64s(b.w.RawMatrix().Data)
	b.n = d.F64()
	d.F64s(b.sz)
	d.F64s(b.szz.RawMatrix().Data)
	d.F64s(b.szx.RawMatrix().Data)
	b.rn, b.rxx, b.rse = d.F64(), d.F64(), d.F64()
	d.F64s(b.rx)
	if !d.Done() {
		return fmt.Errorf("%w: ADMM state of %d bytes is truncated or too long", ErrFormat, len(data))
	}
	if iters > math.MaxInt32 || passes > math.MaxInt32 || warm < math.MinInt32 || warm > math.MaxInt32 {
		return fmt.Errorf("%w: ADMM iterations %d, passes %d, warm iterations %d out of range", ErrFormat, iters, passes, warm)
	}
	s.Iterations, s.Passes, s.WarmIterations = int(iters), int(passes), int(warm)
	if err := s.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrFormat, err)
	}
	if steps < 0 || b.n < 0 || b.rn < 0 || !b.Finite() {
		return fmt.Errorf("%w: ADMM values out of range", ErrFormat)
	}
	a.s = s
	a.steps = steps
	a.w.Copy(b.w)
	a.n = b.n
	copy(a.sz, b.sz)
	a.szz.Copy(b.szz)
	a.szx.Copy(b.szx)
	a.rn, a.rxx, a.rse = b.rn, b.rxx, b.rse
	copy(a.rx, b.rx)
	a.refresh()
	return nil
}

var (
	_ encoding.BinaryMarshaler   = (*ADMM)(nil)
	_ encoding.BinaryUnmarshaler = (*ADMM)(nil)
)
