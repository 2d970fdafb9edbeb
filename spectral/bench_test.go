package spectral_test

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/smtd/smtd/online"
	"github.com/smtd/smtd/sgd"
	"github.com/smtd/smtd/spectral"
	"gonum.org/v1/gonum/mat"
)

// BenchmarkSolveSMT solves for a 32-dimensional P from the statistics of
// 2,000 MNIST-shaped images (23×23 patches, range 3) whose codes follow a
// random walk over the atoms.
func BenchmarkSolveSMT(b *testing.B) {
	grid := online.PatchGrid{Width: 28, Height: 28, Size: 6}
	for _, k := range []int{1024, 4096} {
		b.Run(fmt.Sprintf("K=%d/dim=32", k), func(b *testing.B) {
			rng := rand.New(rand.NewPCG(51, 52))
			st := sgd.NewStats(sgd.StatsSettings{K: k, Range: 3})
			codes := make([]int, grid.Len())
			for i := 0; i < 2000; i++ {
				o := rng.IntN(k)
				for r := 0; r < grid.Rows(); r++ {
					for c := 0; c < grid.Cols(); c++ {
						codes[r*grid.Cols()+c] = (o + 7*r + c + rng.IntN(5)) % k
						if rng.Float64() < 0.3 {
							codes[r*grid.Cols()+c] = -1
						}
					}
				}
				st.AddImagesVQ(codes, 1, grid)
			}
			var p mat.Dense
			b.ReportAllocs()
			var res spectral.Result
			for b.Loop() {
				var err error
				res, err = spectral.SolveSMT(&p, st, spectral.Settings{Dim: 32, Method: spectral.Lanczos}, nil)
				if err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(res.Applies), "applies")
		})
	}
}
