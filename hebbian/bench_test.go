package hebbian

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"gonum.org/v1/gonum/mat"
)

// BenchmarkStep measures one learning step on a minibatch of 64: the
// half-moons network (n = 16 and 64, Gaussian kernel, with and without
// Mixing) and the MNIST one (n = 800, 400 inputs, power-cosine α = 3),
// whose cost is dominated by the Cholesky factorisation of the 800×800
// L + λI.
func BenchmarkStep(b *testing.B) {
	for _, bc := range []struct {
		n, dim int
		kernel Kernel
		mixing bool
	}{
		{16, 2, Gaussian{Sigma: 0.3}, false},
		{16, 2, Gaussian{Sigma: 0.3}, true},
		{64, 2, Gaussian{Sigma: 0.3}, false},
		{64, 2, Gaussian{Sigma: 0.3}, true},
		{800, 400, PowerCosine{Alpha: 3}, false},
	} {
		b.Run(fmt.Sprintf("n=%d/dim=%d/mixing=%v", bc.n, bc.dim, bc.mixing), func(b *testing.B) {
			rng := rand.New(rand.NewPCG(1, 2))
			x := randMatrix(rng, 64, bc.dim, 0.3, 1)
			net := New(Settings{Neurons: bc.n, Dim: bc.dim, Kernel: bc.kernel, Mixing: bc.mixing, EtaW: 1e-4, EtaQ: 1e-4, EtaL: 1e-3},
				rand.NewPCG(3, 4))
			var y mat.Dense
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				if err := net.Step(&y, x); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkTransform measures inference (eq. 12) for a minibatch of 64.
func BenchmarkTransform(b *testing.B) {
	for _, bc := range []struct {
		n, dim int
		kernel Kernel
	}{
		{16, 2, Gaussian{Sigma: 0.3}},
		{800, 400, PowerCosine{Alpha: 3}},
	} {
		b.Run(fmt.Sprintf("n=%d/dim=%d", bc.n, bc.dim), func(b *testing.B) {
			rng := rand.New(rand.NewPCG(1, 2))
			x := randMatrix(rng, 64, bc.dim, 0.3, 1)
			net := New(Settings{Neurons: bc.n, Dim: bc.dim, Kernel: bc.kernel}, rand.NewPCG(3, 4))
			var y mat.Dense
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				net.Transform(&y, x)
			}
		})
	}
}
