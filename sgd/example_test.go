package sgd_test

import (
	"fmt"
	"math/rand/v2"

	"github.com/smtd/smtd/online"
	"github.com/smtd/smtd/sgd"
	"github.com/smtd/smtd/spectral"
	"gonum.org/v1/gonum/mat"
)

// Example learns an SMT embedding online from f_vq codes whose atoms lie
// on a ring (neighbouring patches have neighbouring atoms, as with smooth
// images), compares it with the closed-form optimum, and embeds an image.
func Example() {
	const k, images = 24, 10
	grid := online.PatchGrid{Width: 10, Height: 10, Size: 3} // 8×8 patches
	rng := rand.New(rand.NewPCG(1, 2))
	batch := func() []int {
		codes := make([]int, 0, images*grid.Len())
		for i := 0; i < images; i++ {
			o := rng.IntN(k)
			for r := 0; r < grid.Rows(); r++ {
				for c := 0; c < grid.Cols(); c++ {
					codes = append(codes, (o+r+c)%k)
				}
			}
		}
		return codes
	}

	st := sgd.NewStats(sgd.StatsSettings{K: k, Blank: sgd.BlankSkip, Range: 1})
	m := sgd.NewSMT(sgd.SMTSettings{K: k, Blank: sgd.BlankSkip, Dim: 3, Decay: 0.01}, rand.NewPCG(3, 4))
	var codes []int
	for step := 0; step < 300; step++ {
		codes = batch()
		// The statistics take the minibatch first, so that the step's V
		// includes it.
		st.AddImagesVQ(codes, images, grid)
		if err := m.StepImagesVQ(st, codes, images, grid); err != nil {
			fmt.Println(err)
			return
		}
	}

	var p mat.Dense
	if _, err := spectral.SolveSMT(&p, st, spectral.Settings{Dim: 3}, nil); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("objective tr(PLPᵀ): SGD %.3f, closed form %.3f\n", spectral.Objective(st, m.P()), spectral.Objective(st, &p))
	fmt.Printf("constraint ‖PVPᵀ − I‖ < 1e-9: %v\n", spectral.ConstraintError(st, m.P()) < 1e-9)

	var z mat.Dense
	m.EmbedImagesVQ(&z, codes[:grid.Len()], 1, grid, sgd.PoolSettings{}) // kernel 4, stride 2
	r, c := z.Dims()
	fmt.Printf("image vector: %d×%d (3×3 positions of 3 values)\n", r, c)
	// Output:
	// objective tr(PLPᵀ): SGD 0.198, closed form 0.198
	// constraint ‖PVPᵀ − I‖ < 1e-9: true
	// image vector: 1×27 (3×3 positions of 3 values)
}
