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
