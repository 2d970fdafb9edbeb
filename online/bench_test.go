package online

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"

	"gonum.org/v1/gonum/mat"
)

// benchData returns nb minibatches of n unit rows of dimension 36, drawn
// around 512 centres.
func benchData(nb, n int) []*mat.Dense {
	rng := rand.New(rand.NewPCG(61, 62))
	x, _, _ := sphereClusters(rng, 512, 36, nb*n, 0.5)
	return batches(x, n)
}

// benchKMeans returns a dictionary of k atoms that has learned from bs.
func benchKMeans(bs []*mat.Dense, k int) *KMeans {
	km, _ := newTestKMeans(KMeansSettings{K: k, Dim: 36}, 1)
	for _, x := range bs {
		km.Learn(x, nil)
	}
	return km
}

func BenchmarkKMeansLearn(b *testing.B) {
	const n = 1024
	bs := benchData(8, n)
	for _, k := range []int{256, 1024, 4096} {
		b.Run(fmt.Sprintf("K=%d", k), func(b *testing.B) {
			km := benchKMeans(bs, k)
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				km.Learn(bs[i%len(bs)], nil)
				i++
			}
			b.ReportMetric(float64(i*n)/b.Elapsed().Seconds(), "rows/s")
		})
	}
}

// BenchmarkKMeansSeed measures the first minibatch of a dictionary of
// 4096 atoms, 13,000 whitened MNIST patches (those of 32 images), which
// seeds every atom from it (k-means++ with 10 trials an atom), on one
// core and with its trials in parts on GOMAXPROCS (SetCores).
func BenchmarkKMeansSeed(b *testing.B) {
	const m = 13000
	x := mat.NewDense(m, 36, mnistRows(b, 100)[:m*36])
	for _, cores := range []int{1, runtime.GOMAXPROCS(0)} {
		b.Run(fmt.Sprintf("cores=%d", cores), func(b *testing.B) {
			for b.Loop() {
				km, _ := newTestKMeans(KMeansSettings{K: 4096, Dim: 36}, 11)
				km.SetCores(cores)
				km.Learn(x, nil)
			}
		})
	}
}

// BenchmarkInParts measures what partWork weighs: two parts of a fixed
// amount of work (a loop of float64 additions, about 9 µs, 90 µs and
// 0.9 ms of a core) run by inParts on two goroutines, against the same
// two parts one after the other. Were the idle core to pick up the
// goroutine at once, "parts" would take about half of "serial" at every
// size; on a 2-vCPU virtual machine only the largest parts paid
// (BENCHMARKS.md, "Both cores on Zen 4").
func BenchmarkInParts(b *testing.B) {
	var sink [2]float64
	for _, n := range []int{10_000, 100_000, 1_000_000} {
		b.Run(fmt.Sprintf("adds=%d/serial", n), func(b *testing.B) {
			for b.Loop() {
				sink[0], sink[1] = spinAdds(n), spinAdds(n)
			}
		})
		b.Run(fmt.Sprintf("adds=%d/parts", n), func(b *testing.B) {
			for b.Loop() {
				inParts(2, 2, func(p, _, _ int) { sink[p] = spinAdds(n) })
			}
		})
	}
}

// spinAdds is n dependent float64 additions.
//
//go:noinline
func spinAdds(n int) float64 {
	s := 0.0
	for i := range n {
		s += float64(i) * 1e-9
	}
	return s
}

func BenchmarkKMeansAssign(b *testing.B) {
	const n = 1024
	bs := benchData(8, n)
	dst := make([]int, n)
	cos := make([]float64, n)
	for _, k := range []int{256, 1024, 4096} {
		b.Run(fmt.Sprintf("K=%d", k), func(b *testing.B) {
			km := benchKMeans(bs, k)
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				km.Assign(dst, cos, bs[i%len(bs)])
				i++
			}
			b.ReportMetric(float64(i*n)/b.Elapsed().Seconds(), "rows/s")
		})
	}
}

func BenchmarkKMeansCodesGQ(b *testing.B) {
	const n, k = 1024, 4096
	bs := benchData(8, n)
	km := benchKMeans(bs, k)
	var codes SparseCodes
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		km.CodesGQ(&codes, bs[i%len(bs)], 0.45)
		i++
	}
	b.ReportMetric(float64(i*n)/b.Elapsed().Seconds(), "rows/s")
}

func BenchmarkPatcherMNIST(b *testing.B) {
	imgs := mnistImages(b, 10)
	for _, d := range []int{1, 3} {
		b.Run(fmt.Sprintf("d=%d", d), func(b *testing.B) {
			p := Patcher{Grid: PatchGrid{Width: 28, Height: 28, Size: 6}, Mean: MeanContextual, Context: d}
			var dst mat.Dense
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				p.Extract(&dst, imgs[i%len(imgs)])
				i++
			}
		})
	}
}

func BenchmarkWhiten(b *testing.B) {
	bs := benchData(1, 1024)
	w := NewWhitener(36, WhitenSettings{})
	if err := w.Observe(bs[0], nil); err != nil {
		b.Fatal(err)
	}
	dst := mat.NewDense(1024, 36, nil)
	b.ReportAllocs()
	for b.Loop() {
		w.Whiten(dst, bs[0])
	}
}

// BenchmarkObserve is the whitener's update for one minibatch of 32 MNIST
// images' centred patches (32·529 rows of 36), as the daemon's image
// pipeline makes it: the batch's mean and scatter XᵀX, merged into the
// running ones.
func BenchmarkObserve(b *testing.B) {
	imgs := mnistImages(b, 32)
	p := Patcher{Grid: PatchGrid{Width: 28, Height: 28, Size: 6}, Mean: MeanContextual, Context: 3}
	n := p.Grid.Len()
	x := mat.NewDense(len(imgs)*n, p.Grid.Dim(), nil)
	for i, img := range imgs {
		p.Extract(x.Slice(i*n, (i+1)*n, 0, p.Grid.Dim()).(*mat.Dense), img)
	}
	w := NewWhitener(36, WhitenSettings{})
	b.ReportAllocs()
	for b.Loop() {
		if err := w.Observe(x, nil); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*len(imgs)*n)/b.Elapsed().Seconds(), "rows/s")
}

// BenchmarkKMeansContribution measures the two halves of a data-parallel
// step at K = 4096: a worker's Contribute of a 1024-row minibatch (the
// scoring, with candidates), its encoding and decoding, and the owner's Apply of 4
// such contributions.
func BenchmarkKMeansContribution(b *testing.B) {
	const n, k = 1024, 4096
	bs := benchData(8, n)
	km := benchKMeans(bs, k)
	src := rand.NewPCG(7, 8)
	cs := make([]*KMeansContribution, 4)
	for i := range cs {
		cs[i] = new(KMeansContribution)
		km.Contribute(cs[i], nil, nil, bs[i], nil, src, 16)
	}
	b.Run("Contribute", func(b *testing.B) {
		var c KMeansContribution
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			km.Contribute(&c, nil, nil, bs[i%len(bs)], nil, src, 16)
			i++
		}
		b.ReportMetric(float64(i*n)/b.Elapsed().Seconds(), "rows/s")
	})
	b.Run("Marshal", func(b *testing.B) {
		b.ReportAllocs()
		var size int
		for b.Loop() {
			data, _ := cs[0].MarshalBinary()
			size = len(data)
		}
		b.ReportMetric(float64(size), "bytes")
	})
	b.Run("Unmarshal", func(b *testing.B) {
		data, _ := cs[0].MarshalBinary()
		var c KMeansContribution
		b.ReportAllocs()
		for b.Loop() {
			if err := c.UnmarshalBinary(data); err != nil {
				b.Fatal(err)
			}
		}
		b.SetBytes(int64(len(data)))
	})
	b.Run("Apply4", func(b *testing.B) {
		owner := km.Clone()
		b.ReportAllocs()
		for b.Loop() {
			owner.Apply(cs)
		}
	})
}
