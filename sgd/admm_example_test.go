package sgd_test

import (
	"fmt"
	"math/rand/v2"

	"gonum.org/v1/gonum/mat"

	"github.com/smtd/smtd/sgd"
)

func ExampleProjectSimplex() {
	z := []float64{0.9, 0.8, -3}
	sgd.ProjectSimplex(z, z)
	fmt.Printf("%.2f\n", z)
	// Output:
	// [0.55 0.45 0.00]
}

// ExampleADMM learns a dictionary of 4 atoms from a stream of samples
// that each mix two of them, then codes new samples and reconstructs
// them with the implicit dictionary.
func ExampleADMM() {
	const n, k = 8, 4
	rng := rand.New(rand.NewPCG(1, 2))
	truth := mat.NewDense(k, n, nil)
	for i := range k {
		for j := range n {
			truth.Set(i, j, rng.NormFloat64())
		}
	}
	sample := func(dst []float64) {
		clear(dst)
		for _, a := range rng.Perm(k)[:2] {
			c := rng.NormFloat64()
			for j := range dst {
				dst[j] += c * truth.At(a, j)
			}
		}
	}
	m := sgd.NewADMM(sgd.ADMMSettings{K: k, Lambda: 0.05, Memory: 2000}, n, rand.NewPCG(3, 4))
	x := mat.NewDense(32, n, nil)
	for step := 0; step < 400; step++ {
		for i := range 32 {
			sample(x.RawRowView(i))
		}
		if err := m.Step(x); err != nil {
			fmt.Println(err)
			return
		}
	}
	fmt.Printf("running R² above 0.98: %v\n", m.R2() > 0.98)

	// Code 200 new samples and reconstruct them with the implicit
	// dictionary A: x̂ = Aᵀz.
	fresh := mat.NewDense(200, n, nil)
	for i := range 200 {
		sample(fresh.RawRowView(i))
	}
	var z, xhat, diff mat.Dense
	m.Encode(&z, fresh)
	xhat.Mul(&z, m.Dictionary())
	diff.Sub(fresh, &xhat)
	rel := mat.Norm(&diff, 2) / mat.Norm(fresh, 2)
	fmt.Printf("relative error below 10%%: %v\n", rel < 0.1)
	// Output:
	// running R² above 0.98: true
	// relative error below 10%: true
}
