package sgd_test

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/smtd/smtd/sgd"
	"gonum.org/v1/gonum/mat"
)

// benchCodes returns nb minibatches of 32 MNIST-shaped images (23×23
// patches) of f_vq codes over k atoms: neighbouring patches get nearby
// atoms of a random walk, and 30% of the patches are blank.
func benchCodes(nb, k int) [][]int {
	rng := rand.New(rand.NewPCG(41, 42))
	const images = 32
	out := make([][]int, nb)
	for b := range out {
		codes := make([]int, 0, images*mnistGrid.Len())
		for i := 0; i < images; i++ {
			o := rng.IntN(k)
			for r := 0; r < mnistGrid.Rows(); r++ {
				for c := 0; c < mnistGrid.Cols(); c++ {
					if rng.Float64() < 0.3 {
						codes = append(codes, -1)
						continue
					}
					codes = append(codes, (o+7*r+c+rng.IntN(5))%k)
				}
			}
		}
		out[b] = codes
	}
	return out
}

func BenchmarkStatsAddImagesVQ(b *testing.B) {
	for _, k := range []int{1024, 4096} {
		for _, d := range []int{3, 0} {
			b.Run(fmt.Sprintf("K=%d/range=%d", k, d), func(b *testing.B) {
				benchStatsAdd(b, sgd.StatsSettings{K: k, Range: d, Memory: 1e6})
			})
		}
	}
	// V and the minibatch's degrees, what the SGD step needs.
	for _, k := range []int{256, 4096} {
		b.Run(fmt.Sprintf("K=%d/range=3/v-only", k), func(b *testing.B) {
			benchStatsAdd(b, sgd.StatsSettings{K: k, Range: 3, Memory: 5e6, VOnly: true})
		})
	}
}

func benchStatsAdd(b *testing.B, s sgd.StatsSettings) {
	k := s.K
	batches := benchCodes(8, k)
	st := sgd.NewStats(s)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		st.AddImagesVQ(batches[i%len(batches)], 32, mnistGrid)
		i++
	}
	b.ReportMetric(float64(i*32*mnistGrid.Len())/b.Elapsed().Seconds(), "patches/s")
}

func BenchmarkSMTStepImagesVQ(b *testing.B) {
	for _, k := range []int{1024, 4096} {
		b.Run(fmt.Sprintf("K=%d/dim=32", k), func(b *testing.B) {
			batches := benchCodes(8, k)
			st := sgd.NewStats(sgd.StatsSettings{K: k, Range: 3, VOnly: true})
			for _, c := range batches {
				st.AddImagesVQ(c, 32, mnistGrid)
			}
			m := sgd.NewSMT(sgd.SMTSettings{K: k, Dim: 32, LearningRate: 0.05}, rand.NewPCG(1, 2))
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				if err := m.StepImagesVQ(st, batches[i%len(batches)], 32, mnistGrid); err != nil {
					b.Fatal(err)
				}
				i++
			}
			b.ReportMetric(float64(i*32*mnistGrid.Len())/b.Elapsed().Seconds(), "patches/s")
		})
	}
}

func BenchmarkEmbedImagesVQ(b *testing.B) {
	const k = 4096
	batches := benchCodes(1, k)
	m := sgd.NewSMT(sgd.SMTSettings{K: k, Dim: 32}, rand.NewPCG(1, 2))
	dst := mat.NewDense(32, sgd.PoolSettings{}.Len(mnistGrid, 32), nil)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		m.EmbedImagesVQ(dst, batches[0], 32, mnistGrid, sgd.PoolSettings{})
		i++
	}
	b.ReportMetric(float64(i*32)/b.Elapsed().Seconds(), "images/s")
}

// BenchmarkSMTCheck is the health check the daemon runs on P after every
// minibatch (finite, of full rank).
func BenchmarkSMTCheck(b *testing.B) {
	for _, k := range []int{256, 4096, 16384} {
		b.Run(fmt.Sprintf("K=%d/dim=32", k), func(b *testing.B) {
			m := sgd.NewSMT(sgd.SMTSettings{K: k, Dim: 32}, rand.NewPCG(1, 2))
			b.ReportAllocs()
			for b.Loop() {
				if err := m.Check(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
