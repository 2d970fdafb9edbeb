package hebbian

import (
	"errors"
	"math"
	"math/rand/v2"
	"testing"
)

// Check holds after every step of the network on the half moons, with
// the paper's Gaussian kernel (q learned), with Mixing, and with the
// power-cosine kernel of section 4.2 (q = 1), from a random W.
func TestCheckAlongHalfMoons(t *testing.T) {
	x := moons(256, 0.1, rand.NewPCG(13, 14))
	for _, s := range []Settings{
		{Neurons: 8, Dim: 2, Kernel: Gaussian{Sigma: 0.3}, AnnealEvery: 500},
		{Neurons: 8, Dim: 2, Kernel: Gaussian{Sigma: 0.3}, Mixing: true, Lambda: 1e-5},
		{Neurons: 8, Dim: 2, Kernel: PowerCosine{Alpha: 3}},
	} {
		net := New(s, rand.NewPCG(2, 2))
		if err := net.Check(); err != nil {
			t.Fatalf("%+v, fresh: %v", s, err)
		}
		for step := range 1000 {
			i := (step * 32) % 256
			if err := net.Step(nil, x.Slice(i, i+32, 0, 2)); err != nil {
				t.Fatal(err)
			}
			if err := net.Check(); err != nil {
				t.Fatalf("%+v, step %d: %v", s, step, err)
			}
		}
	}
}

func TestNetworkCheck(t *testing.T) {
	x := moons(64, 0.1, rand.NewPCG(1, 2))
	trained := func(mixing bool) *Network {
		net := New(Settings{Neurons: 4, Dim: 2, Kernel: Gaussian{Sigma: 0.5}, Mixing: mixing}, rand.NewPCG(3, 4))
		for i := 0; i < 64; i += 16 {
			if err := net.Step(nil, x.Slice(i, i+16, 0, 2)); err != nil {
				t.Fatal(err)
			}
		}
		return net
	}
	paper, mixed := trained(false), trained(true)
	for _, tc := range []struct {
		name    string
		net     *Network
		corrupt func(n *Network)
		part    string
		index   int
		want    error
	}{
		{"NaN in W", paper, func(n *Network) { n.w.Set(2, 1, math.NaN()) }, "W", 5, ErrNotFinite},
		{"Inf self term", paper, func(n *Network) { n.self[1] = math.Inf(1) }, "W", 1, ErrNotFinite},
		{"NaN q", paper, func(n *Network) { n.q[3] = math.NaN() }, "q", 3, ErrNotFinite},
		{"zero q", paper, func(n *Network) { n.q[2] = 0 }, "q", 2, ErrCollapsed},
		{"zero Q", mixed, func(n *Network) { clear(n.q) }, "Q", -1, ErrCollapsed},
		{"Inf in L", paper, func(n *Network) { n.l[5] = math.Inf(-1) }, "L", 5, ErrNotFinite},
		{"asymmetric L", paper, func(n *Network) { n.l[1] += 0.25 }, "L", 1, ErrAsymmetric},
		{"lateral beyond MaxLateral", paper, func(n *Network) { n.l[0] = 2e8 }, "L", -1, ErrDiverged},
		{"L + λI not PD", paper, func(n *Network) {
			for i := range n.n {
				n.l[i*n.n+i] = -1
			}
		}, "L", -1, ErrNotPositiveDefinite},
		{"NaN factor", mixed, func(n *Network) { n.fac[0] = math.NaN() }, "factor", 0, ErrNotFinite},
	} {
		n := tc.net.Clone()
		tc.corrupt(n)
		err := n.Check()
		var ce *CheckError
		if !errors.As(err, &ce) || !errors.Is(err, tc.want) || ce.Part != tc.part || ce.Index != tc.index {
			t.Errorf("%s: Check = %v, want %v in %s at %d", tc.name, err, tc.want, tc.part, tc.index)
		}
	}
	if !paper.Finite() || !mixed.Finite() {
		t.Error("Finite no longer holds")
	}
}
