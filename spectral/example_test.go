package spectral_test

import (
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/smtd/smtd/online"
	"github.com/smtd/smtd/sgd"
	"github.com/smtd/smtd/spectral"
	"gonum.org/v1/gonum/mat"
)

// pathLaplacian is the Laplacian of a path of n nodes, applied
// matrix-free: its eigenvalues are 2 − 2cos(πk/n), k = 0, ..., n−1.
type pathLaplacian int

func (p pathLaplacian) Size() int { return int(p) }
func (p pathLaplacian) Apply(dst, x []float64) {
	n := int(p)
	for i := range dst {
		v := 0.0
		if i > 0 {
			v += x[i] - x[i-1]
		}
		if i < n-1 {
			v += x[i] - x[i+1]
		}
		dst[i] = v
	}
}

func ExampleSmallest() {
	const n = 1000
	res, err := spectral.Smallest(pathLaplacian(n), 4, spectral.LanczosSettings{}, rand.NewPCG(1, 2))
	if err != nil {
		fmt.Println(err)
		return
	}
	for k, v := range res.Values {
		// The Laplacian's eigenvalues are at least 0; the computed 0 is
		// within rounding of it, on either side.
		fmt.Printf("λ%d = %.8f (exact %.8f)\n", k, max(v, 0), 2-2*math.Cos(math.Pi*float64(k)/n))
	}
	// Output:
	// λ0 = 0.00000000 (exact 0.00000000)
	// λ1 = 0.00000987 (exact 0.00000987)
	// λ2 = 0.00003948 (exact 0.00003948)
	// λ3 = 0.00008883 (exact 0.00008883)
}

// ExampleSolveSMT embeds 60 atoms that lie on a ring, as f_vq codes of
// smooth images would: the two first non-constant rows of P place them on
// a circle.
func ExampleSolveSMT() {
	const k = 60
	grid := online.PatchGrid{Width: 12, Height: 12, Size: 3} // 10×10 patches
	st := sgd.NewStats(sgd.StatsSettings{K: k, Blank: sgd.BlankSkip, Range: 1})
	for o := 0; o < k; o++ { // one image per offset: every atom alike
		codes := make([]int, 0, grid.Len())
		for r := 0; r < grid.Rows(); r++ {
			for c := 0; c < grid.Cols(); c++ {
				codes = append(codes, (o+r+c)%k)
			}
		}
		st.AddImagesVQ(codes, 1, grid)
	}
	var p mat.Dense
	res, err := spectral.SolveSMT(&p, st, spectral.Settings{Dim: 2, Drop: 1}, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("dropped %.3f, kept %.4f %.4f\n", math.Abs(res.Dropped[0]), res.Values[0], res.Values[1])
	// Every atom at the same distance from the centre, neighbours 6° apart.
	r0 := math.Hypot(p.At(0, 0), p.At(1, 0))
	a0 := math.Atan2(p.At(1, 0), p.At(0, 0))
	a1 := math.Atan2(p.At(1, 1), p.At(0, 1))
	fmt.Printf("radius of atom 30 / atom 0: %.3f; angle from atom 0 to 1: %.1f°\n",
		math.Hypot(p.At(0, 30), p.At(1, 30))/r0, math.Abs(math.Remainder(a1-a0, 2*math.Pi))*180/math.Pi)
	// Output:
	// dropped 0.000, kept 0.0161 0.0161
	// radius of atom 30 / atom 0: 1.000; angle from atom 0 to 1: 6.0°
}
