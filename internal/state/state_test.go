package state

import (
	"math"
	"testing"

	"gonum.org/v1/gonum/mat"
)

func TestRoundTrip(t *testing.T) {
	e := NewEncoder(nil)
	e.U8(7)
	e.U64(1 << 60)
	e.I64(-3)
	e.F64(math.Copysign(0, -1))
	e.Uvarint(300)
	e.F64s([]float64{1.5, math.Inf(1)})
	e.F32s([]float64{0.1, -2})
	e.I64s([]int64{-1, 2})
	e.Dense(mat.NewDense(3, 3, []float64{1, 2, 3, 4, 5, 6, 7, 8, 9}).Slice(1, 3, 1, 3).(*mat.Dense))
	sparse := []float64{0, 2, 0, 0, math.Copysign(0, -1), 3}
	e.Sparse(sparse)

	d := NewDecoder(e.Bytes())
	if d.U8() != 7 || d.U64() != 1<<60 || d.I64() != -3 {
		t.Fatal("integers differ")
	}
	if z := d.F64(); z != 0 || !math.Signbit(z) {
		t.Error("negative zero lost")
	}
	if d.Uvarint() != 300 {
		t.Error("uvarint differs")
	}
	f := make([]float64, 2)
	d.F64s(f)
	f32 := make([]float64, 2)
	d.F32s(f32)
	if f32[0] != float64(float32(0.1)) || f32[1] != -2 {
		t.Errorf("float32s differ: %v", f32)
	}
	i := make([]int64, 2)
	d.I64s(i)
	m := make([]float64, 4)
	d.F64s(m)
	if f[0] != 1.5 || !math.IsInf(f[1], 1) || i[0] != -1 || i[1] != 2 || m[0] != 5 || m[3] != 9 {
		t.Errorf("slices differ: %v %v %v", f, i, m)
	}
	got := make([]float64, len(sparse))
	d.Sparse(got)
	for k := range sparse {
		if math.Float64bits(got[k]) != math.Float64bits(sparse[k]) {
			t.Errorf("sparse[%d] = %v, want %v", k, got[k], sparse[k])
		}
	}
	if !d.Done() {
		t.Error("not done")
	}
}

func TestDecoderFailsOnce(t *testing.T) {
	d := NewDecoder([]byte{1, 2})
	if d.U64() != 0 || !d.Bad() || d.U8() != 0 || d.Done() {
		t.Error("a short read must fail every later read")
	}
	d = NewDecoder([]byte{0x80})
	if d.Uvarint(); !d.Bad() {
		t.Error("truncated varint accepted")
	}
	e := NewEncoder(nil)
	e.Sparse([]float64{0, 1, 2})
	d = NewDecoder(e.Bytes())
	if d.Sparse(make([]float64, 2)); !d.Bad() {
		t.Error("sparse vector longer than dst accepted")
	}
}

// TestFiniteFloats checks that FiniteF64s and FiniteF32s read what F64s
// and F32s read and tell an infinity or NaN anywhere, and a failed read.
func TestFiniteFloats(t *testing.T) {
	max32 := float64(math.MaxFloat32)
	for _, tc := range []struct {
		v    []float64
		want bool
	}{
		{nil, true},
		{[]float64{0, -1.5, max32, -max32, math.SmallestNonzeroFloat32}, true},
		{[]float64{1, math.Inf(1)}, false},
		{[]float64{math.Inf(-1), 1}, false},
		{[]float64{2, math.NaN(), 3}, false},
	} {
		e := NewEncoder(nil)
		e.F64s(tc.v)
		e.F32s(tc.v)
		d := NewDecoder(e.Bytes())
		got64, got32 := make([]float64, len(tc.v)), make([]float64, len(tc.v))
		if ok := d.FiniteF64s(got64); ok != tc.want {
			t.Errorf("FiniteF64s(%v) = %v", tc.v, ok)
		}
		if ok := d.FiniteF32s(got32); ok != tc.want || !d.Done() {
			t.Errorf("FiniteF32s(%v) = %v", tc.v, ok)
		}
		for i, x := range tc.v {
			if !(got64[i] == x || math.IsNaN(x) && math.IsNaN(got64[i])) {
				t.Errorf("FiniteF64s read %v, want %v", got64, tc.v)
			}
			if y := float64(float32(x)); !(got32[i] == y || math.IsNaN(y) && math.IsNaN(got32[i])) {
				t.Errorf("FiniteF32s read %v, want %v", got32, tc.v)
			}
		}
	}
	d := NewDecoder(make([]byte, 7))
	if d.FiniteF64s(make([]float64, 1)) || !d.Bad() {
		t.Error("a short read counts as finite")
	}
}

// TestUvarints checks Uvarints against Uvarint, at the one- and two-byte
// boundaries and beyond, and that a truncated varint fails.
func TestUvarints(t *testing.T) {
	want := []uint64{0, 1, 127, 128, 4097, 16383, 16384, 1 << 31, math.MaxUint64}
	e := NewEncoder(nil)
	for _, v := range want {
		e.Uvarint(v)
	}
	b := e.Bytes()
	got := make([]uint64, len(want))
	d := NewDecoder(b)
	d.Uvarints(got)
	if !d.Done() {
		t.Fatal("Uvarints did not read every varint")
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("varint %d: %d, want %d", i, got[i], want[i])
		}
	}
	for cut := range len(b) {
		d := NewDecoder(b[:cut])
		d.Uvarints(got)
		if !d.Bad() {
			t.Errorf("%d of %d bytes read without failing", cut, len(b))
		}
	}
}
