package bench

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"math/bits"
	"math/rand/v2"
	"os"
	"reflect"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas32"
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
//     mat.Dense.Mul (blas64: internal/gemm in the default build, OpenBLAS
//     with -tags openblas), measured in the same run;
//   - patches_*: how many images and patches were used and the blank
//     fraction;
//   - for each K: kmeans_learn_kK_patches_per_s, one pass of KMeans.Learn
//     over the patches in minibatches (seeding included), and
//     kmeans_assign_kK_patches_per_s, one pass of KMeans.Assign (f_vq)
//     with the learned dictionary; each with its _dgemm_fraction, the
//     rate over the bound dgemm_gflops/(2·K·36) that the score product
//     X·Φᵀ alone would allow; and kmeans_kK_distortion, the mean
//     1 − max cos of the patches after the pass;
//   - machine_kernel, the fused float32 scoring kernel KMeans uses
//     (online.KernelName), machine_ghz, the core clock measured with a
//     chain of dependent one-cycle integer operations, and
//     fma_peak_gflops, the float32 FMA peak of one core at that clock,
//     f × 2 FMA pipes × lanes (16 for AVX-512, 8 for AVX2) × 2 flops;
//   - for each K and each of learn and assign: _fused_patches_per_s, the
//     rate above again (KMeans scores with the fused kernel),
//     _fused_cpu_patches_per_s, the same pass over the CPU time of the
//     thread that ran it (Linux only: on a shared machine the wall-clock
//     rate also counts the time other processes held the core),
//     _sgemm_patches_per_s, a float32 reference on the same patches (held
//     in float32 before the clock starts): blas32.Gemm (gonum's sgemm,
//     which may use both cores) of each minibatch with the atoms, then
//     the argmax of each row, and for learn the same per-atom running-mean
//     update as KMeans in float32 (without re-seeding); and
//     _fma_peak_fraction, the fused CPU-time rate (the wall-clock one
//     where that is not available) × 2·K·36 flops over fma_peak_gflops
//     (above 1 with the int8 prefilter of avx512-vnni, which scores most
//     atoms in int8 and only a few in float32), for one core: these
//     passes score on the calling goroutine alone;
//   - with -cores above 1 (GOMAXPROCS by default), the same two passes
//     with KMeans.SetCores(cores): kmeans_learn_kK_cores_patches_per_s
//     and kmeans_assign_kK_cores_patches_per_s (wall clock), their
//     _cores_fma_peak_fraction over cores × fma_peak_gflops, and
//     kmeans_kK_cores_same_bits, whether they learned the one-core
//     dictionary bit for bit and assigned every patch the same atom.
//
// For context, scikit-learn's MiniBatchKMeans (OpenBLAS, 2 cores) learns
// 72,000 and assigns 181,000 patches/s at K = 4096 on the machines the
// project was developed on; OpenBLAS's dgemm is 8 to 12 times gonum's
// pure-Go one there.
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
	cores := fs.Int("cores", runtime.GOMAXPROCS(0), "goroutines each KMeans call may score on in the _cores_ runs (KMeans.SetCores); 1: none")
	cpuprofile := fs.String("cpuprofile", "", "write a CPU profile of the fused learning and assignment runs (not the sgemm references) to `file`")
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
	ghz := clockGHz()
	lanes := 16.0
	if !strings.HasPrefix(online.KernelName(), "avx512") {
		lanes = 8
	}
	peak := ghz * 2 * lanes * 2
	fmt.Fprintf(w, "machine_kernel: %s\n", online.KernelName())
	fmt.Fprintf(w, "machine_ghz: %.2f\n", ghz)
	fmt.Fprintf(w, "fma_peak_gflops: %.1f\n", peak)

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
	x32 := make([]float32, n*dim)
	for i, v := range x.RawMatrix().Data[:n*dim] {
		x32[i] = float32(v)
	}

	// The fused runs of every K come first, under the profile if asked,
	// and then the float32 references, which take most of the time.
	var runs, wide []fusedRun
	stopProfile, err := StartCPUProfile(*cpuprofile)
	if err != nil {
		return err
	}
	stopProfile = sync.OnceFunc(stopProfile)
	defer stopProfile()
	for _, k := range sizes {
		r, err := timeFused(ctx, x, k, *batch, *seed, 1)
		if err != nil {
			return err
		}
		runs = append(runs, r)
		if *cores > 1 {
			r, err := timeFused(ctx, x, k, *batch, *seed, *cores)
			if err != nil {
				return err
			}
			wide = append(wide, r)
		}
	}
	stopProfile()

	for _, r := range runs {
		k := r.k
		bound := gflops * 1e9 / (2 * float64(k) * float64(dim))
		fmt.Fprintf(w, "kmeans_learn_k%d_patches_per_s: %.0f\n", k, r.learn)
		fmt.Fprintf(w, "kmeans_learn_k%d_dgemm_fraction: %.2f\n", k, r.learn/bound)
		fmt.Fprintf(w, "kmeans_assign_k%d_patches_per_s: %.0f\n", k, r.assign)
		fmt.Fprintf(w, "kmeans_assign_k%d_dgemm_fraction: %.2f\n", k, r.assign/bound)
		fmt.Fprintf(w, "kmeans_k%d_distortion: %.4f\n", k, r.distortion)

		flops := 2 * float64(k) * float64(dim) / 1e9
		ref, err := sgemmReference(ctx, x32, n, dim, k, *batch, r.km.Atoms())
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "kmeans_learn_k%d_fused_patches_per_s: %.0f\n", k, r.learn)
		if r.cpuOK {
			fmt.Fprintf(w, "kmeans_learn_k%d_fused_cpu_patches_per_s: %.0f\n", k, r.learnCPU)
		}
		fmt.Fprintf(w, "kmeans_learn_k%d_sgemm_patches_per_s: %.0f\n", k, ref.learn)
		fmt.Fprintf(w, "kmeans_learn_k%d_fma_peak_fraction: %.2f\n", k, r.learnCPU*flops/peak)
		fmt.Fprintf(w, "kmeans_assign_k%d_fused_patches_per_s: %.0f\n", k, r.assign)
		if r.cpuOK {
			fmt.Fprintf(w, "kmeans_assign_k%d_fused_cpu_patches_per_s: %.0f\n", k, r.assignCPU)
		}
		fmt.Fprintf(w, "kmeans_assign_k%d_sgemm_patches_per_s: %.0f\n", k, ref.assign)
		fmt.Fprintf(w, "kmeans_assign_k%d_fma_peak_fraction: %.2f\n", k, r.assignCPU*flops/peak)
	}
	for i, r := range wide {
		k, c := r.k, r.cores
		flops := 2 * float64(k) * float64(dim) / 1e9
		fmt.Fprintf(w, "kmeans_learn_k%d_cores_patches_per_s: %.0f\n", k, r.learn)
		fmt.Fprintf(w, "kmeans_learn_k%d_cores_fma_peak_fraction: %.2f\n", k, r.learn*flops/(peak*float64(c)))
		fmt.Fprintf(w, "kmeans_assign_k%d_cores_patches_per_s: %.0f\n", k, r.assign)
		fmt.Fprintf(w, "kmeans_assign_k%d_cores_fma_peak_fraction: %.2f\n", k, r.assign*flops/(peak*float64(c)))
		fmt.Fprintf(w, "kmeans_k%d_cores_same_bits: %t\n", k, r.same(runs[i]))
	}
	return nil
}

// fusedRun holds the rates of one dictionary size with the fused kernels.
type fusedRun struct {
	k, cores                           int
	learn, learnCPU, assign, assignCPU float64
	distortion                         float64
	cpuOK                              bool
	km                                 *online.KMeans // the dictionary learned
	codes                              []int          // the atom assigned to each patch
}

// same reports whether r learned the dictionary of o, bit for bit, and
// assigned every patch the same atom.
func (r fusedRun) same(o fusedRun) bool {
	a, errA := r.km.MarshalBinary()
	b, errB := o.km.MarshalBinary()
	return errA == nil && errB == nil && bytes.Equal(a, b) && slices.Equal(r.codes, o.codes)
}

// timeFused times one learning pass of a KMeans of k atoms over the rows
// of x in minibatches of batch rows, then one assignment pass with the
// dictionary learned, each scoring on up to cores goroutines
// (KMeans.SetCores). The CPU-time rates are those of the calling
// thread, meaningful with one core only.
func timeFused(ctx context.Context, x *mat.Dense, k, batch int, seed uint64, cores int) (fusedRun, error) {
	n, dim := x.Dims()
	km := online.NewKMeans(online.KMeansSettings{K: k, Dim: dim}, rand.NewPCG(seed, seed))
	km.SetCores(cores)
	watch := startStopwatch()
	for i := 0; i < n; i += batch {
		if err := ctx.Err(); err != nil {
			watch.stop()
			return fusedRun{}, err
		}
		km.Learn(x.Slice(i, min(i+batch, n), 0, dim), nil)
	}
	wall, cpu, cpuOK := watch.stop()
	r := fusedRun{k: k, cores: cores, km: km, codes: make([]int, n)}
	r.learn = float64(n) / wall.Seconds()
	r.learnCPU = float64(n) / cpu.Seconds()

	cos := make([]float64, batch)
	var sum float64
	watch = startStopwatch()
	for i := 0; i < n; i += batch {
		if err := ctx.Err(); err != nil {
			watch.stop()
			return fusedRun{}, err
		}
		m := min(batch, n-i)
		km.Assign(r.codes[i:i+m], cos[:m], x.Slice(i, i+m, 0, dim))
		for _, c := range cos[:m] {
			sum += 1 - c
		}
	}
	wall, cpu, _ = watch.stop()
	r.assign = float64(n) / wall.Seconds()
	r.assignCPU = float64(n) / cpu.Seconds()
	r.distortion = sum / float64(n)
	if r.cpuOK = cpuOK; !cpuOK {
		r.learnCPU, r.assignCPU = r.learn, r.assign
	}
	return r, nil
}

// sgemmRates are the rates of the float32 reference, in patches/s.
type sgemmRates struct{ learn, assign float64 }

// sgemmReference times the float32 reference of KMeans on the n patches
// x (row-major, float32): one learning pass in minibatches of batch rows
// from a dictionary of the first k patches, scoring each minibatch with
// blas32.Gemm and updating the assigned atoms as KMeans does (running
// means over counts with memory 100, renormalised), and one assignment
// pass with the atoms of learned (the dictionary KMeans learned, so that
// both assign with the same atoms).
func sgemmReference(ctx context.Context, x []float32, n, dim, k, batch int, learned mat.Matrix) (sgemmRates, error) {
	atoms := make([]float32, k*dim)
	for j := 0; j < k; j++ {
		copy(atoms[j*dim:(j+1)*dim], x[(j%n)*dim:(j%n+1)*dim])
	}
	scores := make([]float32, batch*k)
	best := make([]int, batch)
	sums := make([]float32, k*dim)
	hits := make([]float32, k)
	counts := make([]float32, k)
	score := func(i, m int) {
		blas32.Gemm(blas.NoTrans, blas.Trans, 1,
			blas32.General{Rows: m, Cols: dim, Stride: dim, Data: x[i*dim : (i+m)*dim]},
			blas32.General{Rows: k, Cols: dim, Stride: dim, Data: atoms},
			0, blas32.General{Rows: m, Cols: k, Stride: k, Data: scores[:m*k]})
		for r := 0; r < m; r++ {
			row := scores[r*k : (r+1)*k]
			b := 0
			for j, v := range row {
				if v > row[b] {
					b = j
				}
			}
			best[r] = b
		}
	}
	var rates sgemmRates
	start := time.Now()
	for i := 0; i < n; i += batch {
		if err := ctx.Err(); err != nil {
			return rates, err
		}
		m := min(batch, n-i)
		score(i, m)
		clear(sums)
		clear(hits)
		for r := 0; r < m; r++ {
			j := best[r]
			hits[j]++
			for l, v := range x[(i+r)*dim : (i+r+1)*dim] {
				sums[j*dim+l] += v
			}
		}
		keep := float32(math.Exp(-float64(m) / (float64(k) * 100)))
		for j := range hits {
			counts[j] = keep*counts[j] + hits[j]
			if hits[j] == 0 {
				continue
			}
			step := hits[j] / counts[j]
			phi := atoms[j*dim : (j+1)*dim]
			var ss float32
			for l := range phi {
				phi[l] += step * (sums[j*dim+l]/hits[j] - phi[l])
				ss += phi[l] * phi[l]
			}
			inv := float32(1 / math.Sqrt(float64(ss)))
			for l := range phi {
				phi[l] *= inv
			}
		}
	}
	rates.learn = float64(n) / time.Since(start).Seconds()

	for j := 0; j < k; j++ {
		for l := 0; l < dim; l++ {
			atoms[j*dim+l] = float32(learned.At(j, l))
		}
	}
	start = time.Now()
	for i := 0; i < n; i += batch {
		if err := ctx.Err(); err != nil {
			return rates, err
		}
		score(i, min(batch, n-i))
	}
	rates.assign = float64(n) / time.Since(start).Seconds()
	return rates, nil
}

// clockGHz measures the core clock: the best of 200 runs (about a
// millisecond each, short enough that on a shared machine some run
// without being descheduled) of a chain of dependent rotate-and-add
// operations, each one cycle on x86-64 (the loop bookkeeping runs beside
// the chain).
func clockGHz() float64 {
	const n = 1 << 16
	best := 0.0
	for range 200 {
		start := time.Now()
		chainSink = rotateAddChain(n, chainSink)
		best = max(best, 16*n/time.Since(start).Seconds()/1e9)
	}
	return best
}

var chainSink uint64

// rotateAddChain runs n iterations of 8 rotate-and-add pairs, 16 dependent
// one-cycle operations.
//
//go:noinline
func rotateAddChain(n int, x uint64) uint64 {
	for i := 0; i < n; i++ {
		x = bits.RotateLeft64(x, 1) + 1
		x = bits.RotateLeft64(x, 1) + 1
		x = bits.RotateLeft64(x, 1) + 1
		x = bits.RotateLeft64(x, 1) + 1
		x = bits.RotateLeft64(x, 1) + 1
		x = bits.RotateLeft64(x, 1) + 1
		x = bits.RotateLeft64(x, 1) + 1
		x = bits.RotateLeft64(x, 1) + 1
	}
	return x
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

// stopwatch measures a single-threaded section in wall-clock time and in
// CPU time of the thread that runs it (the goroutine is locked to its
// thread in between).
type stopwatch struct {
	wall time.Time
	cpu  time.Duration
}

func startStopwatch() stopwatch {
	runtime.LockOSThread()
	cpu, _ := threadCPU()
	return stopwatch{wall: time.Now(), cpu: cpu}
}

// stop returns the wall-clock and CPU time since startStopwatch, and
// whether the CPU time is known.
func (s stopwatch) stop() (wall, cpu time.Duration, ok bool) {
	wall = time.Since(s.wall)
	end, ok := threadCPU()
	runtime.UnlockOSThread()
	return wall, end - s.cpu, ok && end > s.cpu
}

// threadCPU returns the time the calling thread has spent on a CPU, the
// first field of Linux's /proc/thread-self/schedstat (nanoseconds), and
// false where that file does not exist.
func threadCPU() (time.Duration, bool) {
	b, err := os.ReadFile("/proc/thread-self/schedstat")
	if err != nil {
		return 0, false
	}
	f, _, _ := strings.Cut(string(b), " ")
	ns, err := strconv.ParseInt(strings.TrimSpace(f), 10, 64)
	if err != nil {
		return 0, false
	}
	return time.Duration(ns), true
}
