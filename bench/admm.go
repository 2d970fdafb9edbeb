package bench

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"gonum.org/v1/gonum/mat"

	"github.com/smtd/smtd/dataset"
	"github.com/smtd/smtd/hebbian"
	"github.com/smtd/smtd/online"
	"github.com/smtd/smtd/sgd"
)

// admmFlags are the flags every ADMM benchmark shares, with the
// benchmark's defaults.
type admmFlags struct {
	k, batch, iters, zIters, warmIters, passes, schedule int
	lambda, omega, rho, etaW, memory                     float64
	seed                                                 uint64
}

func (f *admmFlags) register(fs *flag.FlagSet, d admmFlags) {
	fs.IntVar(&f.k, "k", d.k, "number of atoms K")
	fs.IntVar(&f.batch, "batch", d.batch, "minibatch size B")
	fs.IntVar(&f.iters, "iters", d.iters, "ADMM iterations (minibatches learned)")
	fs.IntVar(&f.zIters, "z-iters", d.zIters, "proximal gradient updates per Z-step")
	fs.IntVar(&f.warmIters, "warm-iters", d.warmIters, "accelerated gradient updates solving the codes of a fresh minibatch before its Z-step (0: the library default, -1: none)")
	fs.IntVar(&f.passes, "passes", d.passes, "ADMM iterations per minibatch in flight")
	fs.IntVar(&f.schedule, "schedule", d.schedule, "schedule of section 4.1: 1, 2 or 3")
	fs.Float64Var(&f.lambda, "lambda", d.lambda, "λ, weight of ‖z‖₁ (sparse codes)")
	fs.Float64Var(&f.omega, "omega", d.omega, "ω of eqs. 2 and 4")
	fs.Float64Var(&f.rho, "rho", d.rho, "ρ of the augmented Lagrangian")
	fs.Float64Var(&f.etaW, "eta-w", d.etaW, "learning rate η_W of the W-step")
	fs.Float64Var(&f.memory, "memory", d.memory, "samples the running sums average over (0: the number of training samples)")
	fs.Uint64Var(&f.seed, "seed", d.seed, "seed of the data, initialisation and minibatches")
}

func (f *admmFlags) settings(prior sgd.Prior, samples int) (sgd.ADMMSettings, error) {
	mem := f.memory
	if mem == 0 {
		mem = float64(samples)
	}
	s := sgd.ADMMSettings{
		K: f.k, Prior: prior, Schedule: sgd.Schedule(f.schedule),
		Lambda: f.lambda, Omega: f.omega, Rho: f.rho, LearningRate: f.etaW,
		Iterations: f.zIters, WarmIterations: f.warmIters, Passes: f.passes, Memory: mem,
	}
	if f.schedule < 1 || f.schedule > 3 {
		return s, fmt.Errorf("-schedule %d: want 1, 2 or 3", f.schedule)
	}
	if f.batch < 1 || f.iters < 0 {
		return s, errors.New("-batch must be >= 1 and -iters >= 0")
	}
	return s, s.Validate()
}

// admmLearn takes steps ADMM steps on minibatches of batch rows of x, each
// epoch a new random order of the rows drawn from src (the last, shorter
// minibatch of an epoch included). After each step it calls after with
// the number of steps taken, if after is not nil.
func admmLearn(ctx context.Context, m *sgd.ADMM, x *mat.Dense, batch, steps int, src rand.Source, after func(step int) error) error {
	return epochMinibatches(ctx, x, batch, steps, src, func(s int, mb *mat.Dense) error {
		if err := m.Step(mb); err != nil {
			return err
		}
		if after != nil {
			return after(s)
		}
		return nil
	})
}

// admmLearnCurve learns f.iters minibatches of x (admmLearn, minibatch
// order from f.seed) and prints name_r2_iter_S, the R² of the whole set,
// after every step S for which at(S) holds. It returns the time spent
// learning, the evaluations left out.
func admmLearnCurve(ctx context.Context, w io.Writer, m *sgd.ADMM, x *mat.Dense, f admmFlags, name string, at func(step int) bool) (time.Duration, error) {
	var train time.Duration
	start := time.Now()
	err := admmLearn(ctx, m, x, f.batch, f.iters, rand.NewPCG(f.seed, 0x6d62), func(step int) error {
		if at(step) {
			train += time.Since(start)
			fmt.Fprintf(w, "%s_r2_iter_%d: %.4f\n", name, step, admmEvaluate(m, x).r2)
			start = time.Now()
		}
		return nil
	})
	return train + time.Since(start), err
}

// admmFit is how well a learner reconstructs a data set.
type admmFit struct {
	r2, r2W  float64 // R² with the implicit dictionary A, and with c·Wᵀ
	mse      float64 // mean ‖x − Aᵀz‖² per sample
	mseW     float64 // mean ‖x − c·Wᵀz‖² per sample (c = ADMM.WeightScale)
	l0       float64 // mean number of non-zero codes
	l0Counts []int   // samples by number of non-zero codes (simplex: > 1e-9)
}

// admmEvaluate encodes every row of x (ADMM.Encode) and reconstructs it
// with the implicit dictionary (x̂ = Aᵀ z) and with W (x̂ = c·Wᵀz,
// c = ADMM.WeightScale):
//
//	R² = 1 − Σ‖x − x̂‖² / Σ‖x − x̄‖².
func admmEvaluate(m *sgd.ADMM, x *mat.Dense) admmFit {
	t, n := x.Dims()
	k := m.Settings().K
	d := m.Dictionary()
	w := mat.DenseCopyOf(m.Weights())
	w.Scale(m.WeightScale(), w)
	mean := make([]float64, n)
	for i := range t {
		for j, v := range x.RawRowView(i) {
			mean[j] += v / float64(t)
		}
	}
	fit := admmFit{l0Counts: make([]int, k+1)}
	var sst, sse, sseW float64
	const chunk = 1024
	var z, xh, xw mat.Dense
	for lo := 0; lo < t; lo += chunk {
		hi := min(t, lo+chunk)
		xs := x.Slice(lo, hi, 0, n)
		z.Reset()
		m.Encode(&z, xs)
		xh.Reset()
		xh.Mul(&z, d)
		xw.Reset()
		xw.Mul(&z, w)
		for i := range hi - lo {
			xi := x.RawRowView(lo + i)
			for j, v := range xi {
				e, ew, c := v-xh.At(i, j), v-xw.At(i, j), v-mean[j]
				sse += e * e
				sseW += ew * ew
				sst += c * c
			}
			nz := 0
			for _, v := range z.RawRowView(i) {
				if math.Abs(v) > 1e-9 {
					nz++
				}
			}
			fit.l0Counts[nz]++
			fit.l0 += float64(nz) / float64(t)
		}
	}
	fit.r2 = 1 - sse/sst
	fit.r2W = 1 - sseW/sst
	fit.mse = sse / float64(t)
	fit.mseW = sseW / float64(t)
	return fit
}

// sphericalAtoms returns k atoms (k×N) of online spherical k-means
// (online.KMeans, default settings) after epochs passes over the rows of
// x in minibatches of batch rows, in an order drawn from seed: the warm
// start of section 4.1 for sparse codes.
func sphericalAtoms(ctx context.Context, x *mat.Dense, k, epochs, batch int, seed uint64) (*mat.Dense, error) {
	t, n := x.Dims()
	km := online.NewKMeans(online.KMeansSettings{K: k, Dim: n}, rand.NewPCG(seed, 0x6b6d65616e73))
	rng := rand.New(rand.NewPCG(seed, 0x6f72646572))
	perm := rng.Perm(t)
	mb := mat.NewDense(batch, n, nil)
	for e := 0; e < epochs; e++ {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		for lo := 0; lo < t; lo += batch {
			hi := min(t, lo+batch)
			for i := lo; i < hi; i++ {
				mb.SetRow(i-lo, x.RawRowView(perm[i]))
			}
			km.Learn(mb.Slice(0, hi-lo, 0, n), nil)
		}
	}
	return mat.DenseCopyOf(km.Atoms()), nil
}

// ADMMSynthetic measures sparse dictionary learning by kernel matching
// (sgd.ADMM, PriorSparse) on the synthetic data of section 4.1: a true
// dictionary of K atoms in N dimensions with N(0, 1) entries, and T
// samples x = A z with -nonzeros non-zero codes at random positions,
// N(0, 1) values. For each schedule the learner starts from online
// spherical k-means atoms and learns -iters minibatches, the codes of
// every fresh minibatch warm-started by the same 15 accelerated updates
// (-warm-iters; sgd.ADMMSettings would give them to Schedule3 only), so
// that the curves compare the schedules' steps alone; it prints
//
//   - admm_synthetic_scheduleS_r2_iter_I: R² of the whole data set
//     reconstructed by the implicit dictionary from the codes of Encode,
//     after I iterations (I = 0 is the k-means warm start);
//   - admm_synthetic_scheduleS_r2, _r2_w: the final R² with the implicit
//     dictionary A and with Wᵀ; _running_r2, the learner's running R²;
//   - admm_synthetic_scheduleS_min_cos, _mean_cos, _matched: over the
//     true atoms, the largest |cos| with a learned atom (rows of A), and
//     the number of true atoms with |cos| >= 0.95;
//   - admm_synthetic_scheduleS_l0: mean number of non-zero codes;
//   - admm_synthetic_scheduleS_train_seconds.
func ADMMSynthetic(ctx context.Context, w io.Writer, args []string) error {
	fs := flag.NewFlagSet("bench admm-synthetic", flag.ContinueOnError)
	var f admmFlags
	f.register(fs, admmFlags{k: 16, batch: 128, iters: 3000, zIters: 15, warmIters: 15, passes: 1, schedule: 1,
		lambda: 0.5, omega: 1e-4, rho: 0.5, etaW: 0.01, seed: 1})
	n := fs.Int("n", 30, "data dimension N")
	t := fs.Int("t", 1500, "number of samples T")
	nonzeros := fs.Int("nonzeros", 2, "non-zero codes per sample")
	schedules := fs.String("schedules", "1,2,3", "comma-separated schedules to run (overrides -schedule)")
	checkpoints := fs.String("checkpoints", "10,20,50,100,200,500,1000,2000,3000", "comma-separated iterations at which to print R²")
	kmEpochs := fs.Int("kmeans-epochs", 10, "epochs of online spherical k-means for the warm start")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *n < 1 || *t < f.k || *nonzeros < 1 || *nonzeros > f.k || *kmEpochs < 1 {
		return errors.New("bench admm-synthetic: want -n >= 1, -t >= -k, -nonzeros in [1, -k], -kmeans-epochs >= 1")
	}
	scheds, err := parseInts(*schedules)
	if err != nil {
		return fmt.Errorf("bench admm-synthetic: -schedules %q: %w", *schedules, err)
	}
	checks, err := parseInts(*checkpoints)
	if err != nil {
		return fmt.Errorf("bench admm-synthetic: -checkpoints %q: %w", *checkpoints, err)
	}

	writeMachine(w)
	rng := rand.New(rand.NewPCG(f.seed, 0x73796e7468))
	truth := mat.NewDense(f.k, *n, nil)
	for i := range f.k {
		for j := range *n {
			truth.Set(i, j, rng.NormFloat64())
		}
	}
	x := mat.NewDense(*t, *n, nil)
	for i := range *t {
		row := x.RawRowView(i)
		for _, a := range rng.Perm(f.k)[:*nonzeros] {
			c := rng.NormFloat64()
			for j, v := range truth.RawRowView(a) {
				row[j] += c * v
			}
		}
	}
	fmt.Fprintf(w, "admm_synthetic_n: %d\n", *n)
	fmt.Fprintf(w, "admm_synthetic_k: %d\n", f.k)
	fmt.Fprintf(w, "admm_synthetic_t: %d\n", *t)
	atoms, err := sphericalAtoms(ctx, x, f.k, *kmEpochs, f.batch, f.seed)
	if err != nil {
		return err
	}
	for _, sch := range scheds {
		f.schedule = sch
		s, err := f.settings(sgd.PriorSparse, *t)
		if err != nil {
			return fmt.Errorf("bench admm-synthetic: %w", err)
		}
		m := sgd.NewADMM(s, *n, rand.NewPCG(f.seed, 0x77))
		if err := m.WarmStart(atoms); err != nil {
			return err
		}
		name := fmt.Sprintf("admm_synthetic_schedule%d", sch)
		fmt.Fprintf(w, "%s_r2_iter_0: %.4f\n", name, admmEvaluate(m, x).r2)
		train, err := admmLearnCurve(ctx, w, m, x, f, name, func(step int) bool { return slices.Contains(checks, step) })
		if err != nil {
			return fmt.Errorf("bench admm-synthetic: schedule %d: %w", sch, err)
		}
		fit := admmEvaluate(m, x)
		fmt.Fprintf(w, "%s_r2: %.4f\n", name, fit.r2)
		fmt.Fprintf(w, "%s_r2_w: %.4f\n", name, fit.r2W)
		fmt.Fprintf(w, "%s_running_r2: %.4f\n", name, m.R2())
		minCos, meanCos, matched := matchAtoms(truth, m.Dictionary(), 0.95)
		fmt.Fprintf(w, "%s_min_cos: %.4f\n", name, minCos)
		fmt.Fprintf(w, "%s_mean_cos: %.4f\n", name, meanCos)
		fmt.Fprintf(w, "%s_matched: %d\n", name, matched)
		fmt.Fprintf(w, "%s_l0: %.2f\n", name, fit.l0)
		fmt.Fprintf(w, "%s_train_seconds: %.2f\n", name, train.Seconds())
	}
	return nil
}

// matchAtoms returns, over the rows of truth, the smallest and the mean
// of the largest |cos| with a row of learned, and how many reach bar.
func matchAtoms(truth, learned *mat.Dense, bar float64) (minCos, meanCos float64, matched int) {
	kt, _ := truth.Dims()
	kl, _ := learned.Dims()
	minCos = math.Inf(1)
	for i := range kt {
		ti := truth.RowView(i)
		best := 0.0
		for j := range kl {
			lj := learned.RowView(j)
			nn := mat.Norm(ti, 2) * mat.Norm(lj, 2)
			if nn == 0 {
				continue
			}
			best = max(best, math.Abs(mat.Dot(ti, lj))/nn)
		}
		minCos = min(minCos, best)
		meanCos += best / float64(kt)
		if best >= bar {
			matched++
		}
	}
	return minCos, meanCos, matched
}

// ADMMMNIST measures sparse dictionary learning by kernel matching on
// MNIST as in section 4.2: the first -images training digits of the
// classes {0, 3, 4, 6, 7} (28×28 pixels scaled to [0, 1]), K = 500,
// λ = 0.1, B = 128, ω = 1e-4, η_W = 1e-4, Schedule 1 with 15 Z-step
// updates, warm-started from online spherical k-means atoms. It prints
// admm_mnist_r2_iter_I (R² of all the digits with the implicit dictionary
// and Encode's codes, every -every iterations; I = 0 is the warm start),
// the final admm_mnist_r2, _r2_w (with Wᵀ), _running_r2, _l0 (mean
// non-zero codes) and _train_seconds (learning steps only), and draws the
// first -png-n atoms of the implicit dictionary to the PNG file -png.
// The paper reports R² ≈ 0.75 after 8000 iterations.
func ADMMMNIST(ctx context.Context, w io.Writer, args []string) error {
	fs := flag.NewFlagSet("bench admm-mnist", flag.ContinueOnError)
	var f admmFlags
	f.register(fs, admmFlags{k: 500, batch: 128, iters: 8000, zIters: 15, passes: 1, schedule: 1,
		lambda: 0.1, omega: 1e-4, rho: 0.5, etaW: 1e-4, seed: 1})
	dir := fs.String("mnist", "../shared/data/mnist", "`directory` with the MNIST IDX files (gzip'd or not)")
	images := fs.Int("images", 9000, "digits of the classes used (the first ones of the training set)")
	classes := fs.String("classes", "0,3,4,6,7", "comma-separated digit classes")
	every := fs.Int("every", 1000, "print R² every this many iterations (0: only at the end)")
	kmEpochs := fs.Int("kmeans-epochs", 5, "epochs of online spherical k-means for the warm start")
	pngPath := fs.String("png", "admm-mnist-atoms.png", "PNG `file` for the first atoms (empty: none)")
	pngN := fs.Int("png-n", 100, "atoms drawn")
	throughDaemon := fs.Bool("daemon", false, "also stream the same recipe (warm start, then -iters minibatches) through JetStream into a daemon's admm pipeline and measure R² from its published atoms and the codes of its embed endpoint")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	s, err := f.settings(sgd.PriorSparse, *images)
	if err != nil {
		return fmt.Errorf("bench admm-mnist: %w", err)
	}
	want := map[uint8]bool{}
	for _, c := range strings.Split(*classes, ",") {
		var d uint8
		if _, err := fmt.Sscan(strings.TrimSpace(c), &d); err != nil || d > 9 {
			return fmt.Errorf("bench admm-mnist: -classes %q: want digits 0-9", *classes)
		}
		want[d] = true
	}
	if *images < f.k || *every < 0 || *kmEpochs < 1 {
		return errors.New("bench admm-mnist: want -images >= -k, -every >= 0, -kmeans-epochs >= 1")
	}

	writeMachine(w)
	train, err := dataset.ReadMNIST(*dir, "train")
	if err != nil {
		return err
	}
	side := train.Rows * train.Cols
	var rows [][]float64
	for i := 0; i < train.N && len(rows) < *images; i++ {
		if !want[train.Labels[i]] {
			continue
		}
		row := make([]float64, side)
		for j, p := range train.Image(i) {
			row[j] = float64(p) / 255
		}
		rows = append(rows, row)
	}
	if len(rows) < *images {
		return fmt.Errorf("bench admm-mnist: only %d digits of classes %s", len(rows), *classes)
	}
	x := mat.NewDense(len(rows), side, nil)
	for i, r := range rows {
		x.SetRow(i, r)
	}
	fmt.Fprintf(w, "admm_mnist_images: %d\n", len(rows))
	fmt.Fprintf(w, "admm_mnist_k: %d\n", f.k)
	fmt.Fprintf(w, "admm_mnist_iterations: %d\n", f.iters)
	if err := admmRealData(ctx, w, "admm_mnist", x, s, f, *kmEpochs, *every, *pngPath, *pngN, train.Cols); err != nil {
		return err
	}
	if !*throughDaemon {
		return nil
	}
	r2, took, err := admmThroughDaemon(ctx, x, train.Cols, s, f.batch, f.iters, *kmEpochs, f.seed, os.Stderr)
	if err != nil {
		return fmt.Errorf("bench admm-mnist: through the daemon: %w", err)
	}
	fmt.Fprintf(w, "admm_mnist_daemon_r2: %.4f\n", r2)
	fmt.Fprintf(w, "admm_mnist_daemon_seconds: %.1f\n", took.Seconds())
	fmt.Fprintf(w, "admm_mnist_daemon_images_per_s: %.0f\n", float64(*kmEpochs*len(rows)+f.iters*f.batch)/took.Seconds())
	return nil
}

// admmRealData warm-starts a sparse learner from spherical k-means,
// learns, prints the R² figures under prefix and draws the atoms.
func admmRealData(ctx context.Context, w io.Writer, prefix string, x *mat.Dense, s sgd.ADMMSettings, f admmFlags, kmEpochs, every int, pngPath string, pngN, side int) error {
	_, n := x.Dims()
	atoms, err := sphericalAtoms(ctx, x, f.k, kmEpochs, f.batch, f.seed)
	if err != nil {
		return err
	}
	m := sgd.NewADMM(s, n, rand.NewPCG(f.seed, 0x77))
	if err := m.WarmStart(atoms); err != nil {
		return err
	}
	fmt.Fprintf(w, "%s_r2_iter_0: %.4f\n", prefix, admmEvaluate(m, x).r2)
	train, err := admmLearnCurve(ctx, w, m, x, f, prefix, func(step int) bool {
		return every > 0 && step%every == 0 && step < f.iters
	})
	if err != nil {
		return fmt.Errorf("bench %s: %w", strings.ReplaceAll(prefix, "_", "-"), err)
	}
	fit := admmEvaluate(m, x)
	fmt.Fprintf(w, "%s_r2_iter_%d: %.4f\n", prefix, f.iters, fit.r2)
	fmt.Fprintf(w, "%s_r2: %.4f\n", prefix, fit.r2)
	fmt.Fprintf(w, "%s_r2_w: %.4f\n", prefix, fit.r2W)
	fmt.Fprintf(w, "%s_running_r2: %.4f\n", prefix, m.R2())
	fmt.Fprintf(w, "%s_l0: %.2f\n", prefix, fit.l0)
	fmt.Fprintf(w, "%s_train_seconds: %.1f\n", prefix, train.Seconds())
	if pngPath != "" {
		d := m.Dictionary()
		k := min(pngN, f.k)
		if err := writeFields(pngPath, []*mat.Dense{mat.DenseCopyOf(d.Slice(0, k, 0, n))}, side); err != nil {
			return err
		}
		fmt.Fprintf(w, "%s_atoms_png: %s\n", prefix, pngPath)
	}
	return nil
}

// ADMMPatches measures sparse dictionary learning by kernel matching on
// natural image patches as in section 4.2: -patches patches of -size²
// pixels drawn uniformly from the photographs in -images (gray, [0, 1]),
// each with its mean removed, all scaled by one factor to unit pixel
// variance; K = 192, λ = 0.9, B = 128, ω = 1e-4, η_W = 1e-4, Schedule 1,
// 5000 iterations, warm-started from online spherical k-means. It prints
// the figures of ADMMMNIST under admm_patches_ and draws the first -png-n
// atoms to -png.
func ADMMPatches(ctx context.Context, w io.Writer, args []string) error {
	fs := flag.NewFlagSet("bench admm-patches", flag.ContinueOnError)
	var f admmFlags
	f.register(fs, admmFlags{k: 192, batch: 128, iters: 5000, zIters: 15, passes: 1, schedule: 1,
		lambda: 0.9, omega: 1e-4, rho: 0.5, etaW: 1e-4, seed: 1})
	dir := fs.String("images", "../shared/data/images", "`directory` of PNG or JPEG photographs")
	files := fs.String("files", "", "comma-separated file names in -images (empty: every .png, .jpg, .jpeg)")
	count := fs.Int("patches", 4000, "number of patches")
	size := fs.Int("size", 16, "patch side in pixels")
	every := fs.Int("every", 1000, "print R² every this many iterations (0: only at the end)")
	kmEpochs := fs.Int("kmeans-epochs", 5, "epochs of online spherical k-means for the warm start")
	pngPath := fs.String("png", "admm-patches-atoms.png", "PNG `file` for the first atoms (empty: none)")
	pngN := fs.Int("png-n", 100, "atoms drawn")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	s, err := f.settings(sgd.PriorSparse, *count)
	if err != nil {
		return fmt.Errorf("bench admm-patches: %w", err)
	}
	if *count < f.k || *size < 2 || *every < 0 || *kmEpochs < 1 {
		return errors.New("bench admm-patches: want -patches >= -k, -size >= 2, -every >= 0, -kmeans-epochs >= 1")
	}
	var names []string
	if *files != "" {
		for _, nm := range strings.Split(*files, ",") {
			names = append(names, strings.TrimSpace(nm))
		}
	} else {
		ents, err := os.ReadDir(*dir)
		if err != nil {
			return fmt.Errorf("bench admm-patches: %w", err)
		}
		for _, e := range ents {
			switch strings.ToLower(filepath.Ext(e.Name())) {
			case ".png", ".jpg", ".jpeg":
				names = append(names, e.Name())
			}
		}
	}
	if len(names) == 0 {
		return fmt.Errorf("bench admm-patches: no images in %s", *dir)
	}

	writeMachine(w)
	var imgs []*mat.Dense
	for _, nm := range names {
		g, err := dataset.LoadGray(filepath.Join(*dir, nm))
		if err != nil {
			return err
		}
		b := g.Bounds()
		if b.Dx() < *size || b.Dy() < *size {
			continue
		}
		im := mat.NewDense(b.Dy(), b.Dx(), nil)
		for y := range b.Dy() {
			for xx := range b.Dx() {
				im.Set(y, xx, float64(g.GrayAt(xx, y).Y)/255)
			}
		}
		imgs = append(imgs, im)
	}
	if len(imgs) == 0 {
		return fmt.Errorf("bench admm-patches: no image of %s is %d pixels wide and high", *dir, *size)
	}
	rng := rand.New(rand.NewPCG(f.seed, 0x7061746368))
	dim := *size * *size
	x := mat.NewDense(*count, dim, nil)
	var ss float64
	for i := range *count {
		im := imgs[rng.IntN(len(imgs))]
		h, wd := im.Dims()
		r0, c0 := rng.IntN(h-*size+1), rng.IntN(wd-*size+1)
		row := x.RawRowView(i)
		var mean float64
		for r := range *size {
			for c := range *size {
				v := im.At(r0+r, c0+c)
				row[r**size+c] = v
				mean += v / float64(dim)
			}
		}
		for j := range row {
			row[j] -= mean
			ss += row[j] * row[j]
		}
	}
	if ss == 0 {
		return errors.New("bench admm-patches: every patch is flat")
	}
	x.Scale(1/math.Sqrt(ss/float64(*count*dim)), x)
	fmt.Fprintf(w, "admm_patches_images: %d\n", len(imgs))
	fmt.Fprintf(w, "admm_patches_patches: %d\n", *count)
	fmt.Fprintf(w, "admm_patches_k: %d\n", f.k)
	fmt.Fprintf(w, "admm_patches_iterations: %d\n", f.iters)
	return admmRealData(ctx, w, "admm_patches", x, s, f, *kmEpochs, *every, *pngPath, *pngN, *size)
}

// ADMMMoons measures piecewise-linear manifold approximation by kernel
// matching (sgd.ADMM, PriorSimplex, R₂) on the half moons of section 4.3:
// -points points (MakeMoons, noise 0.01), K = 12, ω = 0.1, B = 128,
// η_W = 2e-3, 15 projected gradient updates per Z-step, 5500 iterations
// of Schedule 1, W warm-started from Euclidean k-means centres
// (hebbian.KMeansLandmarks), and the codes of each fresh minibatch
// solved for the current W by 50 accelerated updates before the Z-step
// (-warm-iters; section 4.1's warm start, "solve the sparse coding
// problem corresponding to W"; without it the 15 updates leave most codes
// on 3 or 4 atoms, see sgd.ADMM). It prints the reconstruction of all
// points by the implicit dictionary from Encode's codes (admm_moons_r2,
// admm_moons_mse, the mean squared error per point; _r2_w and _mse_w
// with (1 + ω)Wᵀ, see sgd.ADMM.Dictionary), the
// histogram of ‖z‖₀ (admm_moons_l0_N: share of points with N non-zero
// codes; the paper's Fig. 3 peaks at 2), its mode and mean, and
// admm_moons_train_seconds.
func ADMMMoons(ctx context.Context, w io.Writer, args []string) error {
	fs := flag.NewFlagSet("bench admm-moons", flag.ContinueOnError)
	var f admmFlags
	f.register(fs, admmFlags{k: 12, batch: 128, iters: 5500, zIters: 15, warmIters: 50, passes: 1, schedule: 1,
		lambda: 0, omega: 0.1, rho: 0.5, etaW: 2e-3, seed: 1})
	points := fs.Int("points", 2500, "number of points")
	noise := fs.Float64("noise", 0.01, "standard deviation of the Gaussian noise added to the moons")
	kmIters := fs.Int("kmeans-iters", 100, "maximum Lloyd iterations of the k-means warm start")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	s, err := f.settings(sgd.PriorSimplex, *points)
	if err != nil {
		return fmt.Errorf("bench admm-moons: %w", err)
	}
	if *points < f.k || *kmIters < 0 {
		return errors.New("bench admm-moons: want -points >= -k and -kmeans-iters >= 0")
	}

	writeMachine(w)
	x := MakeMoons(*points, *noise, rand.NewPCG(f.seed, 0x6d6f6f6e73))
	var lm mat.Dense
	hebbian.KMeansLandmarks(&lm, x, f.k, *kmIters, rand.NewPCG(f.seed, 0x6b6d))
	m := sgd.NewADMM(s, 2, rand.NewPCG(f.seed, 0x77))
	if err := m.WarmStart(&lm); err != nil {
		return err
	}
	fmt.Fprintf(w, "admm_moons_points: %d\n", *points)
	fmt.Fprintf(w, "admm_moons_k: %d\n", f.k)
	fmt.Fprintf(w, "admm_moons_iterations: %d\n", f.iters)
	fmt.Fprintf(w, "admm_moons_r2_iter_0: %.4f\n", admmEvaluate(m, x).r2)
	start := time.Now()
	if err := admmLearn(ctx, m, x, f.batch, f.iters, rand.NewPCG(f.seed, 0x6d62), nil); err != nil {
		return fmt.Errorf("bench admm-moons: %w", err)
	}
	train := time.Since(start)
	fit := admmEvaluate(m, x)
	fmt.Fprintf(w, "admm_moons_r2: %.4f\n", fit.r2)
	fmt.Fprintf(w, "admm_moons_r2_w: %.4f\n", fit.r2W)
	fmt.Fprintf(w, "admm_moons_mse: %.6f\n", fit.mse)
	fmt.Fprintf(w, "admm_moons_mse_w: %.6f\n", fit.mseW)
	fmt.Fprintf(w, "admm_moons_running_r2: %.4f\n", m.R2())
	mode := 0
	for l, c := range fit.l0Counts {
		if c > fit.l0Counts[mode] {
			mode = l
		}
		if l > 0 && c > 0 {
			fmt.Fprintf(w, "admm_moons_l0_%d: %.4f\n", l, float64(c)/float64(*points))
		}
	}
	fmt.Fprintf(w, "admm_moons_l0_mode: %d\n", mode)
	fmt.Fprintf(w, "admm_moons_l0: %.3f\n", fit.l0)
	fmt.Fprintf(w, "admm_moons_train_seconds: %.2f\n", train.Seconds())
	return nil
}
