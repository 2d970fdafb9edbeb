package bench

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"reflect"
	"runtime"
	"strconv"
	"strings"
	"time"

	"gonum.org/v1/gonum/blas/blas64"
	"gonum.org/v1/gonum/mat"

	"github.com/smtd/smtd/dataset"
	"github.com/smtd/smtd/online"
)

// KMeans measures the online spherical k-means dictionary (package online)
// on real data: whitened 6×6 MNIST training patches, preprocessed as the
// daemon's image pipeline does by default (contextual mean over range 1,
// whitening with λ = 0.1 fitted on the same patches, L2 normalisation,
// blank patches left out). It prints
//
//   - machine_*: CPU model, GOMAXPROCS, Go version, BLAS implementation;
//   - dgemm_gflops: the best of three 1024×1024×1024 products through
//     mat.Dense.Mul (blas64, gonum's pure-Go parallel dgemm unless another
//     implementation is installed), measured in the same run;
//   - patches_*: how many images and patches were used and the blank
//     fraction;
//   - for each K: kmeans_learn_kK_patches_per_s, one pass of KMeans.Learn
//     over the patches in minibatches (seeding included), and
//     kmeans_assign_kK_patches_per_s, one pass of KMeans.Assign (f_vq)
//     with the learned dictionary; each with its _dgemm_fraction, the
//     rate over the bound dgemm_gflops/(2·K·36) that the score product
//     X·Φᵀ alone would allow; and kmeans_kK_distortion, the mean
//     1 − max cos of the patches after the pass.
//
// For context, scikit-learn's MiniBatchKMeans (OpenBLAS, 2 cores) learns
// 72,000 and assigns 181,000 patches/s at K = 4096 on the machines the
// project was developed on; OpenBLAS's dgemm is 8 to 12 times gonum's
// there.
func KMeans(ctx context.Context, w io.Writer, args []string) error {
	fs := flag.NewFlagSet("bench kmeans", flag.ContinueOnError)
	dir := fs.String("mnist", "../shared/data/mnist", "`directory` with the MNIST IDX files (gzip'd or not)")
	nPatches := fs.Int("patches", 200000, "non-blank patches to learn from and assign")
	ks := fs.String("k", "256,1024,4096", "comma-separated dictionary sizes K")
	batch := fs.Int("batch", 1024, "patches per minibatch")
	seed := fs.Uint64("seed", 1, "seed of the k-means random source")
	contextRange := fs.Int("context", 1, "range d of the contextual mean")
	lambda := fs.Float64("lambda", 0.1, "whitening regulariser λ (pixels in [0, 1])")
	minNorm := fs.Float64("min-norm", 0.1, "whitened patches with a smaller norm are blank")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *nPatches < 1 || *batch < 1 || *contextRange < 1 {
		return errors.New("bench kmeans: -patches, -batch and -context must be positive")
	}
	var sizes []int
	for _, f := range strings.Split(*ks, ",") {
		k, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || k < 1 {
			return fmt.Errorf("bench kmeans: -k %q: want positive integers separated by commas", *ks)
		}
		sizes = append(sizes, k)
	}

	writeMachine(w)
	gflops := dgemmGFLOPS(1024)
	fmt.Fprintf(w, "dgemm_gflops: %.2f\n", gflops)

	imgs, err := dataset.ReadMNIST(*dir, "train")
	if err != nil {
		return err
	}
	ps, err := mnistPatches(ctx, imgs, *nPatches, *contextRange, *lambda, *minNorm, *batch)
	if err != nil {
		return err
	}
	x := ps.x
	n, dim := x.Dims()
	fmt.Fprintf(w, "patches_images: %d\n", ps.images)
	fmt.Fprintf(w, "patches_blank_fraction: %.3f\n", 1-float64(ps.nonBlank)/float64(ps.positions))
	fmt.Fprintf(w, "patches_used: %d\n", n)
	fmt.Fprintf(w, "batch: %d\n", *batch)

	for _, k := range sizes {
		km := online.NewKMeans(online.KMeansSettings{K: k, Dim: dim}, rand.NewPCG(*seed, *seed))
		start := time.Now()
		for i := 0; i < n; i += *batch {
			if err := ctx.Err(); err != nil {
				return err
			}
			km.Learn(x.Slice(i, min(i+*batch, n), 0, dim), nil)
		}
		learn := float64(n) / time.Since(start).Seconds()

		code := make([]int, *batch)
		cos := make([]float64, *batch)
		var sum float64
		start = time.Now()
		for i := 0; i < n; i += *batch {
			if err := ctx.Err(); err != nil {
				return err
			}
			m := min(*batch, n-i)
			km.Assign(code[:m], cos[:m], x.Slice(i, i+m, 0, dim))
			for _, c := range cos[:m] {
				sum += 1 - c
			}
		}
		assign := float64(n) / time.Since(start).Seconds()

		bound := gflops * 1e9 / (2 * float64(k) * float64(dim))
		fmt.Fprintf(w, "kmeans_learn_k%d_patches_per_s: %.0f\n", k, learn)
		fmt.Fprintf(w, "kmeans_learn_k%d_dgemm_fraction: %.2f\n", k, learn/bound)
		fmt.Fprintf(w, "kmeans_assign_k%d_patches_per_s: %.0f\n", k, assign)
		fmt.Fprintf(w, "kmeans_assign_k%d_dgemm_fraction: %.2f\n", k, assign/bound)
		fmt.Fprintf(w, "kmeans_k%d_distortion: %.4f\n", k, sum/float64(n))
	}
	return nil
}

// patchSet is the preprocessed data of the benchmark.
type patchSet struct {
	x         *mat.Dense // whitened unit-norm non-blank patches, one per row
	images    int        // images extracted
	positions int        // patch positions in those images
	nonBlank  int        // non-blank patches among them (x may hold fewer)
}

// mnistPatches returns the first want (or as many as there are) whitened,
// unit-norm, non-blank 6×6 patches of the MNIST training images, in image
// order. The whitener sees the patches in minibatches of batch rows, as a
// stream would, and is refreshed once at the end so that every patch is
// whitened with the same operator.
func mnistPatches(ctx context.Context, imgs *dataset.Images, want, contextRange int, lambda, minNorm float64, batch int) (patchSet, error) {
	g := online.PatchGrid{Width: imgs.Cols, Height: imgs.Rows, Size: 6}
	if err := g.Validate(); err != nil {
		return patchSet{}, err
	}
	p := online.Patcher{Grid: g, Mean: online.MeanContextual, Context: contextRange}
	var (
		centred []float64 // the non-zero centred patches, row-major
		patches mat.Dense
		pixels  = make([]float64, g.Pixels())
		ps      patchSet
		nonZero int
		target  = want + want/8 // non-zero patches to extract
	)
	for {
		// A zero centred patch is blank whatever the whitening, so only
		// the others are kept.
		for ; ps.images < imgs.N && nonZero < target; ps.images++ {
			if err := ctx.Err(); err != nil {
				return patchSet{}, err
			}
			for i, v := range imgs.Image(ps.images) {
				pixels[i] = float64(v) / 255
			}
			p.Extract(&patches, pixels)
			raw := patches.RawMatrix()
			for r := 0; r < raw.Rows; r++ {
				row := raw.Data[r*raw.Stride : r*raw.Stride+raw.Cols]
				for _, v := range row {
					if v != 0 {
						centred = append(centred, row...)
						nonZero++
						break
					}
				}
			}
		}
		if nonZero == 0 {
			return patchSet{}, errors.New("bench kmeans: no non-blank patches")
		}
		c := mat.NewDense(nonZero, g.Dim(), centred)
		wh := online.NewWhitener(g.Dim(), online.WhitenSettings{Lambda: lambda, RefreshEvery: -1})
		for i := 0; i < nonZero; i += batch {
			if err := wh.Observe(c.Slice(i, min(i+batch, nonZero), 0, g.Dim()), nil); err != nil {
				return patchSet{}, err
			}
		}
		if err := wh.Refresh(); err != nil {
			return patchSet{}, err
		}
		var white mat.Dense
		wh.Whiten(&white, c)
		blank := online.NormalizeRows(&white, minNorm, nil)
		ps.nonBlank = 0
		for _, b := range blank {
			if !b {
				ps.nonBlank++
			}
		}
		if ps.nonBlank < want && ps.images < imgs.N {
			target += want - ps.nonBlank + want/16
			continue
		}
		if ps.nonBlank == 0 {
			return patchSet{}, errors.New("bench kmeans: no non-blank patches")
		}
		ps.x = mat.NewDense(min(want, ps.nonBlank), g.Dim(), nil)
		r := 0
		for i, b := range blank {
			if !b && r < want {
				ps.x.SetRow(r, white.RawRowView(i))
				r++
			}
		}
		ps.positions = ps.images * g.Len()
		return ps, nil
	}
}

// dgemmGFLOPS returns the best rate of three n×n×n products through
// mat.Dense.Mul, in GFLOP/s (2n³ flops each).
func dgemmGFLOPS(n int) float64 {
	rng := rand.New(rand.NewPCG(1, 2))
	fill := func() *mat.Dense {
		d := make([]float64, n*n)
		for i := range d {
			d[i] = rng.Float64()
		}
		return mat.NewDense(n, n, d)
	}
	a, b := fill(), fill()
	c := mat.NewDense(n, n, nil)
	c.Mul(a, b) // warm up
	best := 0.0
	for range 3 {
		start := time.Now()
		c.Mul(a, b)
		best = max(best, 2*float64(n)*float64(n)*float64(n)/time.Since(start).Seconds()/1e9)
	}
	return best
}

// parseFlags parses args into fs and refuses positional arguments, which
// no benchmark takes.
func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%s: unexpected arguments %q", fs.Name(), fs.Args())
	}
	return nil
}

// writeMachine prints the machine_* lines: CPU model, GOMAXPROCS, Go
// version and the BLAS implementation blas64 dispatches to.
func writeMachine(w io.Writer) {
	fmt.Fprintf(w, "machine_cpu: %s\n", cpuModel())
	fmt.Fprintf(w, "machine_gomaxprocs: %d\n", runtime.GOMAXPROCS(0))
	fmt.Fprintf(w, "machine_go: %s %s/%s\n", runtime.Version(), runtime.GOOS, runtime.GOARCH)
	t := reflect.TypeOf(blas64.Implementation())
	fmt.Fprintf(w, "machine_blas: %s.%s\n", t.PkgPath(), t.Name())
}

// cpuModel returns the first "model name" of /proc/cpuinfo, or "unknown".
func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return "unknown"
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if k, v, ok := strings.Cut(s.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
}
