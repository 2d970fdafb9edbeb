package online

import (
	"math"
	"math/rand/v2"
	"testing"
)

func TestFinite(t *testing.T) {
	k := NewKMeans(KMeansSettings{K: 2, Dim: 3}, rand.NewPCG(1, 2))
	w := NewWhitener(3, WhitenSettings{})
	if !k.Finite() || !w.Finite() {
		t.Fatal("fresh dictionary or whitener reported non-finite")
	}
	k.atoms.Set(1, 2, math.NaN())
	w.op.Set(0, 0, math.Inf(1))
	if k.Finite() || w.Finite() {
		t.Error("NaN atom or infinite operator reported finite")
	}
}
