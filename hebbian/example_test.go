package hebbian_test

import (
	"fmt"
	"math"
	"math/rand/v2"

	"gonum.org/v1/gonum/mat"

	"github.com/smtd/smtd/hebbian"
)

// A network of 8 Gaussian-kernel neurons learns a ring of points one
// minibatch at a time; its responses then approximate the kernel
// matrix better than Nyström with 8 random points of the ring.
func Example() {
	rng := rand.New(rand.NewPCG(1, 2))
	x := mat.NewDense(200, 2, nil)
	for i := range 200 {
		th := 2 * math.Pi * rng.Float64()
		x.Set(i, 0, math.Cos(th)+0.05*rng.NormFloat64())
		x.Set(i, 1, math.Sin(th)+0.05*rng.NormFloat64())
	}
	kernel := hebbian.Gaussian{Sigma: 0.5}
	net := hebbian.New(hebbian.Settings{
		Neurons: 8, Dim: 2, Kernel: kernel, Mixing: true, Lambda: 1e-5,
		EtaW: 0.01, EtaQ: 0.01, EtaL: 0.1, AnnealEvery: 2000,
	}, rand.NewPCG(3, 4))
	var start mat.Dense
	hebbian.UniformLandmarks(&start, x, 8, rand.NewPCG(5, 6))
	net.SetWeights(&start)
	for step := range 4000 {
		i := (step * 40) % 200
		if err := net.Step(nil, x.Slice(i, i+40, 0, 2)); err != nil {
			fmt.Println(err) // a *hebbian.StepError: the network is unchanged
			return
		}
	}

	var k mat.SymDense
	hebbian.KernelMatrix(&k, kernel, x)
	var y, uniform mat.Dense
	net.Transform(&y, x)
	if err := hebbian.Nystrom(&uniform, kernel, x, &start); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("network better than uniform Nyström:",
		hebbian.NormalizedError(&k, &y) < hebbian.NormalizedError(&k, &uniform))
	// Output:
	// network better than uniform Nyström: true
}
