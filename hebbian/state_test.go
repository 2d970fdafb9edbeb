package hebbian

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"testing"

	"gonum.org/v1/gonum/mat"
)

// TestResumeIsExact checks the daemon's exact-resume contract: a network
// restored from MarshalBinary midway continues bit-identically to the
// uninterrupted one.
func TestResumeIsExact(t *testing.T) {
	for _, s := range []Settings{
		{Neurons: 5, Dim: 2, Kernel: Gaussian{Sigma: 0.4}, AnnealEvery: 7},
		{Neurons: 4, Dim: 3, Kernel: Gaussian{Sigma: 0.8}, Mixing: true, EtaQ: 0.05, EtaL: 0.5},
		{Neurons: 6, Dim: 3, Kernel: PowerCosine{Alpha: 3}, EtaW: 0.003, MaxAnneals: -1, AnnealEvery: 5, AnnealFactor: 0.5},
		{Neurons: 3, Dim: 3, Kernel: Polynomial{Degree: 2, Gamma: 0.5, Coef0: 1}, Lambda: 0.1, MaxLateral: 1e5, InitScale: 0.2},
		{Neurons: 3, Dim: 3, Kernel: Linear{}},
	} {
		rng := rand.New(rand.NewPCG(1, 2))
		batches := make([]*mat.Dense, 20)
		for i := range batches {
			batches[i] = randMatrix(rng, 8, s.Dim, 0.3, 1)
		}
		a := New(s, rand.NewPCG(3, 4))
		var b *Network
		for i, x := range batches {
			if i == 10 {
				state, err := a.MarshalBinary()
				if err != nil {
					t.Fatal(err)
				}
				b = new(Network)
				if err := b.UnmarshalBinary(state); err != nil {
					t.Fatal(err)
				}
				if again, _ := b.MarshalBinary(); !bytes.Equal(again, state) {
					t.Fatalf("%v: state changed by a round trip", s.Kernel)
				}
				if b.Settings() != a.Settings() {
					t.Fatalf("%v: settings %+v, want %+v", s.Kernel, b.Settings(), a.Settings())
				}
			}
			if err := a.Step(nil, x); err != nil {
				t.Fatal(err)
			}
			if b != nil {
				if err := b.Step(nil, x); err != nil {
					t.Fatal(err)
				}
			}
		}
		sa, _ := a.MarshalBinary()
		sb, _ := b.MarshalBinary()
		if !bytes.Equal(sa, sb) {
			t.Errorf("%v (mixing %v): resumed network differs from the uninterrupted one", s.Kernel, s.Mixing)
		}
		var ya, yb mat.Dense
		a.Transform(&ya, batches[0])
		b.Transform(&yb, batches[0])
		assertClose(t, "responses", &yb, &ya, 0)
	}
}

func TestUnmarshalErrors(t *testing.T) {
	net := New(Settings{Neurons: 3, Dim: 2, Kernel: Gaussian{Sigma: 1}}, rand.NewPCG(1, 1))
	good, err := net.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	edit := func(f func(b []byte) []byte) []byte { return f(bytes.Clone(good)) }
	// Offsets: version 0, kind 1, N 2-9, M 10-17, kernel kind 18, σ 19-26,
	// mixing 27.
	for _, tc := range []struct {
		name string
		data []byte
		want error
	}{
		{"empty", nil, ErrVersion},
		{"version", edit(func(b []byte) []byte { b[0] = 9; return b }), ErrVersion},
		{"kind", edit(func(b []byte) []byte { b[1] = 'K'; return b }), ErrFormat},
		{"truncated", good[:len(good)-1], ErrFormat},
		{"trailing", append(bytes.Clone(good), 0), ErrFormat},
		{"huge shape", edit(func(b []byte) []byte { b[9] = 0x7f; return b }), ErrFormat},
		{"kernel kind", edit(func(b []byte) []byte { b[18] = 'X'; return b }), ErrFormat},
		{"bad sigma", edit(func(b []byte) []byte { clear(b[19:27]); return b }), ErrFormat},
		{"mixing flag", edit(func(b []byte) []byte { b[27] = 2; return b }), ErrFormat},
		{"NaN weight", edit(func(b []byte) []byte {
			// The last 8 bytes are L_nn.
			copy(b[len(b)-8:], []byte{0, 0, 0, 0, 0, 0, 0xf8, 0x7f})
			return b
		}), ErrFormat},
		{"L not PD", edit(func(b []byte) []byte {
			// L_nn = −1 (IEEE-754 bits 0xbff0000000000000).
			copy(b[len(b)-8:], []byte{0, 0, 0, 0, 0, 0, 0xf0, 0xbf})
			return b
		}), ErrFormat},
	} {
		target := New(Settings{Neurons: 2, Dim: 2, Kernel: Linear{}}, rand.NewPCG(2, 2))
		before, _ := target.MarshalBinary()
		err := target.UnmarshalBinary(tc.data)
		if !errors.Is(err, tc.want) {
			t.Errorf("%s: error %v, want %v", tc.name, err, tc.want)
		}
		if after, _ := target.MarshalBinary(); !bytes.Equal(before, after) {
			t.Errorf("%s: a refused state changed the network", tc.name)
		}
	}
}

type customKernel struct{ Linear }

func TestMarshalCustomKernel(t *testing.T) {
	net := New(Settings{Neurons: 2, Dim: 2, Kernel: customKernel{}}, rand.NewPCG(1, 1))
	if _, err := net.MarshalBinary(); !errors.Is(err, ErrKernel) {
		t.Errorf("MarshalBinary with a custom kernel: error %v, want ErrKernel", err)
	}
}
