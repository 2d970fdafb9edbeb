package bench

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"gonum.org/v1/gonum/mat"

	"github.com/smtd/smtd/dataset"
	"github.com/smtd/smtd/hebbian"
)

// KSMMNIST measures kernel similarity matching (package hebbian) on
// MNIST as in section 4.2 and appendix A.7: digits cropped by 4 pixels
// on each side to 20×20 (pixels in [0, 1]), the power-cosine kernel
// ‖u‖‖v‖(û·v̂)^α for each α, n = 800 neurons, minibatches of 64,
// 10,000 steps with η_w = 0.001, η_l = 0.01 (q stays 1: the kernel is
// homogeneous), then 5,000 steps with rates ten times lower. The network
// learns from the training images that are not held out (labels
// unused). For each α it prints
//
//   - ksm_alphaA_train_seconds: the learning time;
//   - ksm_alphaA_acc_kK: test accuracy of a linear classifier on the
//     responses y, trained with K labels per class (averaged over -seeds
//     draws of the labelled images) or all labels (K = all);
//   - ksm_alphaA_sparsity: response sparsity (Fig. 6a), the mean over
//     neurons of the share of test responses with |y_i| <= 0.1·rms(y_i);
//     a Gaussian response has 0.08;
//   - ksm_alphaA_skewness: the mean over neurons of the skewness of y_i
//     after the sign of each neuron is fixed so that ⟨y_i⟩ >= 0 (the
//     degeneracy of odd α, section 4.2);
//
// next to pixels_acc_kK, the same classifier on the 400 raw pixels. The
// classifier is ridge regression on one-hot targets with an intercept;
// its regularisation is picked, per label draw, from a grid by accuracy
// on -val training images held out from everything else. The linearised
// receptive fields s_i = (0.1I + ⟨xxᵀ⟩)⁻¹⟨y_i x⟩ of A.8 of the first
// -fields-n neurons of each α are drawn to the PNG named by -fields, one
// block of tiles per α.
func KSMMNIST(ctx context.Context, w io.Writer, args []string) error {
	fs := flag.NewFlagSet("bench ksm-mnist", flag.ContinueOnError)
	dir := fs.String("mnist", "../shared/data/mnist", "`directory` with the MNIST IDX files (gzip'd or not)")
	alphas := fs.String("alpha", "1,2,3,4", "comma-separated powers α of the power-cosine kernel")
	neurons := fs.Int("n", 800, "number of neurons")
	batch := fs.Int("batch", 64, "minibatch size")
	steps := fs.Int("steps", 10000, "learning steps before the anneal")
	steps2 := fs.Int("steps2", 5000, "learning steps after the anneal")
	etaW := fs.Float64("eta-w", 0.001, "η_w before the anneal")
	etaL := fs.Float64("eta-l", 0.01, "η_l before the anneal")
	lambda := fs.Float64("lambda", 0.001, "λ of eq. 8")
	initScale := fs.Float64("init-scale", 1, "standard deviation of the initial weights (with -init gaussian)")
	initW := fs.String("init", "data", "initial W: data (random training digits) or gaussian (N(0, s²))")
	nTrain := fs.Int("train", 60000, "training images used (the first ones), held-out ones included")
	nTest := fs.Int("test", 10000, "test images used (the first ones)")
	nVal := fs.Int("val", 5000, "training images held out to pick the classifier's regularisation")
	labels := fs.String("labels", "10,100,1000,all", "comma-separated labelled images per class, or all")
	seeds := fs.Int("seeds", 5, "draws of the labelled images averaged for each count below all")
	fieldsPath := fs.String("fields", "ksm-fields.png", "PNG `file` for the linearised receptive fields (empty: none)")
	fieldsN := fs.Int("fields-n", 64, "receptive fields drawn per α")
	seed := fs.Uint64("seed", 1, "seed of the initial weights, minibatches and label draws")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	as, err := parseInts(*alphas)
	if err != nil {
		return fmt.Errorf("bench ksm-mnist: -alpha %q: %w", *alphas, err)
	}
	var counts []int // 0 means all
	for _, f := range strings.Split(*labels, ",") {
		f = strings.TrimSpace(f)
		if f == "all" {
			counts = append(counts, 0)
			continue
		}
		k, err := strconv.Atoi(f)
		if err != nil || k < 1 {
			return fmt.Errorf("bench ksm-mnist: -labels %q: want positive integers or all", *labels)
		}
		counts = append(counts, k)
	}
	if *neurons < 1 || *batch < 1 || *steps < 0 || *steps2 < 0 || *seeds < 1 || *nVal < 10 || *nTrain <= *nVal || *nTest < 1 {
		return errors.New("bench ksm-mnist: -n, -batch, -seeds, -test must be positive, -val >= 10 and -train > -val")
	}
	if *initW != "data" && *initW != "gaussian" {
		return fmt.Errorf("bench ksm-mnist: -init %q: want data or gaussian", *initW)
	}

	writeMachine(w)
	train, err := dataset.ReadMNIST(*dir, "train")
	if err != nil {
		return err
	}
	test, err := dataset.ReadMNIST(*dir, "t10k")
	if err != nil {
		return err
	}
	xAll, yAll := cropMNIST(train, min(*nTrain, train.N))
	xTest, yTest := cropMNIST(test, min(*nTest, test.N))
	nt, dim := xAll.Dims()
	if nt <= *nVal {
		return fmt.Errorf("bench ksm-mnist: %d training images for %d held out", nt, *nVal)
	}
	// The held-out images are the last -val of the training images used.
	pool := nt - *nVal
	xPool := xAll.Slice(0, pool, 0, dim).(*mat.Dense)
	xVal := xAll.Slice(pool, nt, 0, dim).(*mat.Dense)
	yPool, yVal := yAll[:pool], yAll[pool:]
	fmt.Fprintf(w, "ksm_train_images: %d\n", pool)
	fmt.Fprintf(w, "ksm_val_images: %d\n", *nVal)
	fmt.Fprintf(w, "ksm_test_images: %d\n", len(yTest))
	fmt.Fprintf(w, "ksm_neurons: %d\n", *neurons)
	fmt.Fprintf(w, "ksm_steps: %d\n", *steps+*steps2)

	draws := labelDraws(yPool, counts, *seeds, *seed)
	ev := func(name string, fPool, fVal, fTest *mat.Dense) error {
		for ci, k := range counts {
			var sum float64
			for _, idx := range draws[ci] {
				acc, err := ridgeAccuracy(ctx, fPool, yPool, idx, fVal, yVal, fTest, yTest)
				if err != nil {
					return err
				}
				sum += acc
			}
			label := "all"
			if k > 0 {
				label = strconv.Itoa(k)
			}
			fmt.Fprintf(w, "%s_acc_k%s: %.4f\n", name, label, sum/float64(len(draws[ci])))
		}
		return nil
	}
	if err := ev("pixels", xPool, xVal, xTest); err != nil {
		return err
	}

	var fields []*mat.Dense
	for _, alpha := range as {
		kernel := hebbian.PowerCosine{Alpha: alpha}
		s := hebbian.Settings{
			Neurons: *neurons, Dim: dim, Kernel: kernel, Lambda: *lambda,
			EtaW: *etaW, EtaL: *etaL, AnnealEvery: int64(*steps), InitScale: *initScale,
		}
		if err := s.Validate(); err != nil {
			return err
		}
		net := hebbian.New(s, rand.NewPCG(*seed, uint64(alpha)))
		if *initW == "data" {
			var lm mat.Dense
			hebbian.UniformLandmarks(&lm, xPool, *neurons, rand.NewPCG(*seed, 0x696e6974+uint64(alpha)))
			if err := net.SetWeights(&lm); err != nil {
				return err
			}
		}
		start := time.Now()
		if err := learnEpochs(ctx, net, xPool, *batch, *steps+*steps2, rand.NewPCG(*seed, 0x6d6e697374)); err != nil {
			return fmt.Errorf("bench ksm-mnist: α = %d: %w", alpha, err)
		}
		fmt.Fprintf(w, "ksm_alpha%d_train_seconds: %.1f\n", alpha, time.Since(start).Seconds())
		var fPool, fVal, fTest mat.Dense
		net.Transform(&fPool, xPool)
		net.Transform(&fVal, xVal)
		net.Transform(&fTest, xTest)
		name := fmt.Sprintf("ksm_alpha%d", alpha)
		if err := ev(name, &fPool, &fVal, &fTest); err != nil {
			return err
		}
		sp, sk := responseSparsity(&fTest)
		fmt.Fprintf(w, "%s_sparsity: %.3f\n", name, sp)
		fmt.Fprintf(w, "%s_skewness: %.2f\n", name, sk)
		if *fieldsPath != "" {
			fields = append(fields, receptiveFields(xPool, &fPool, min(*fieldsN, *neurons)))
		}
	}
	if *fieldsPath != "" && len(fields) > 0 {
		if err := writeFields(*fieldsPath, fields, 20); err != nil {
			return err
		}
		fmt.Fprintf(w, "ksm_fields_png: %s\n", *fieldsPath)
	}
	return nil
}

// cropMNIST returns the first n images cropped by 4 pixels on each side,
// one per row, pixels scaled to [0, 1], and their labels.
func cropMNIST(im *dataset.Images, n int) (*mat.Dense, []int) {
	const border = 4
	h, wd := im.Rows-2*border, im.Cols-2*border
	x := mat.NewDense(n, h*wd, nil)
	labels := make([]int, n)
	for i := range n {
		px := im.Image(i)
		row := x.RawRowView(i)
		for r := range h {
			for c := range wd {
				row[r*wd+c] = float64(px[(r+border)*im.Cols+c+border]) / 255
			}
		}
		labels[i] = int(im.Labels[i])
	}
	return x, labels
}

// labelDraws returns, for each count k (0 meaning all), the index sets of
// labelled images: seeds draws of k images per class (without
// replacement, as many as the class has if fewer), or one set of all.
func labelDraws(labels []int, counts []int, seeds int, seed uint64) [][][]int {
	byClass := map[int][]int{}
	for i, l := range labels {
		byClass[l] = append(byClass[l], i)
	}
	classes := make([]int, 0, len(byClass))
	for c := range byClass {
		classes = append(classes, c)
	}
	slices.Sort(classes)
	out := make([][][]int, len(counts))
	for ci, k := range counts {
		if k == 0 {
			all := make([]int, len(labels))
			for i := range all {
				all[i] = i
			}
			out[ci] = [][]int{all}
			continue
		}
		for s := range seeds {
			rng := rand.New(rand.NewPCG(seed+uint64(s), uint64(k)))
			var idx []int
			for _, c := range classes {
				members := byClass[c]
				perm := rng.Perm(len(members))
				for _, p := range perm[:min(k, len(members))] {
					idx = append(idx, members[p])
				}
			}
			out[ci] = append(out[ci], idx)
		}
	}
	return out
}

// ridgeGrid holds the regularisations tried, relative to the mean
// squared norm of the centred training features.
var ridgeGrid = []float64{1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1, 1}

// ridgeAccuracy trains ridge regression on one-hot targets (with an
// intercept, by centring) on the rows idx of x, picks the regularisation
// of ridgeGrid by accuracy on (xVal, yVal), and returns the accuracy on
// (xTest, yTest).
func ridgeAccuracy(ctx context.Context, x *mat.Dense, y []int, idx []int, xVal *mat.Dense, yVal []int, xTest *mat.Dense, yTest []int) (float64, error) {
	_, d := x.Dims()
	const classes = 10
	n := len(idx)
	xs := mat.NewDense(n, d, nil)
	mean := make([]float64, d)
	for r, i := range idx {
		xs.SetRow(r, x.RawRowView(i))
		for j, v := range x.RawRowView(i) {
			mean[j] += v / float64(n)
		}
	}
	var scale float64
	for r := range n {
		row := xs.RawRowView(r)
		for j := range row {
			row[j] -= mean[j]
			scale += row[j] * row[j]
		}
	}
	scale /= float64(n)
	t := mat.NewDense(n, classes, nil)
	for r, i := range idx {
		t.Set(r, y[i], 1)
	}
	tMean := make([]float64, classes)
	for r := range n {
		for c := range classes {
			tMean[c] += t.At(r, c) / float64(n)
		}
	}
	for r := range n {
		for c := range classes {
			t.Set(r, c, t.At(r, c)-tMean[c])
		}
	}
	var gram mat.SymDense
	gram.SymOuterK(1, xs.T())
	var xt mat.Dense
	xt.Mul(xs.T(), t)

	predict := func(coef *mat.Dense, xe *mat.Dense, ye []int) float64 {
		var p mat.Dense
		p.Mul(xe, coef)
		// Intercept: tMean − meanᵀ·coef.
		b := make([]float64, classes)
		for c := range classes {
			b[c] = tMean[c]
			for j := range d {
				b[c] -= mean[j] * coef.At(j, c)
			}
		}
		right := 0
		for r := range ye {
			row := p.RawRowView(r)
			best := 0
			for c := range classes {
				if row[c]+b[c] > row[best]+b[best] {
					best = c
				}
			}
			if best == ye[r] {
				right++
			}
		}
		return float64(right) / float64(len(ye))
	}

	bestAcc, bestCoef := -1.0, (*mat.Dense)(nil)
	for _, rel := range ridgeGrid {
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		a := mat.NewSymDense(d, nil)
		a.CopySym(&gram)
		for j := range d {
			a.SetSym(j, j, a.At(j, j)+rel*scale)
		}
		var ch mat.Cholesky
		if !ch.Factorize(a) {
			continue
		}
		var coef mat.Dense
		if err := ch.SolveTo(&coef, &xt); err != nil {
			continue
		}
		if acc := predict(&coef, xVal, yVal); acc > bestAcc {
			bestAcc, bestCoef = acc, mat.DenseCopyOf(&coef)
		}
	}
	if bestCoef == nil {
		return 0, errors.New("bench ksm-mnist: ridge regression failed for every regularisation")
	}
	return predict(bestCoef, xTest, yTest), nil
}

// responseSparsity returns, over the columns (neurons) of y, the mean
// share of entries with |y_bi| <= 0.1·rms(y_i), and the mean skewness
// of y_i·sign(⟨y_i⟩).
func responseSparsity(y *mat.Dense) (sparsity, skewness float64) {
	r, c := y.Dims()
	var used int
	for i := range c {
		var sum, ss float64
		for b := range r {
			v := y.At(b, i)
			sum += v
			ss += v * v
		}
		if ss == 0 {
			continue
		}
		used++
		sign := 1.0
		if sum < 0 {
			sign = -1
		}
		rms := math.Sqrt(ss / float64(r))
		mean := sign * sum / float64(r)
		var near int
		var m2, m3 float64
		for b := range r {
			v := sign * y.At(b, i)
			if math.Abs(v) <= 0.1*rms {
				near++
			}
			d := v - mean
			m2 += d * d
			m3 += d * d * d
		}
		m2 /= float64(r)
		m3 /= float64(r)
		sparsity += float64(near) / float64(r)
		if m2 > 0 {
			skewness += m3 / math.Pow(m2, 1.5)
		}
	}
	if used == 0 {
		return 0, 0
	}
	return sparsity / float64(used), skewness / float64(used)
}

// receptiveFields returns the linearised responses of A.8 of the first k
// neurons, one per row: s_i = (0.1I + ⟨xxᵀ⟩)⁻¹⟨y_i x⟩.
func receptiveFields(x, y *mat.Dense, k int) *mat.Dense {
	t, d := x.Dims()
	var c mat.SymDense
	c.SymOuterK(1/float64(t), x.T())
	for j := range d {
		c.SetSym(j, j, c.At(j, j)+0.1)
	}
	var xy mat.Dense
	xy.Mul(x.T(), y.Slice(0, t, 0, k))
	xy.Scale(1/float64(t), &xy)
	var ch mat.Cholesky
	if !ch.Factorize(&c) {
		return mat.NewDense(k, d, nil)
	}
	var s mat.Dense
	if err := ch.SolveTo(&s, &xy); err != nil {
		return mat.NewDense(k, d, nil)
	}
	return mat.DenseCopyOf(s.T())
}

// writeFields draws each set of fields (rows of side×side images) as a
// block of tiles, 16 per row, scaled ×2, each tile mapped symmetrically
// around mid-gray by its largest magnitude; blocks are stacked
// vertically, separated by a white band.
func writeFields(path string, sets []*mat.Dense, side int) error {
	const perRow, zoom, gap, band = 16, 2, 2, 8
	tile := side*zoom + gap
	var height int
	rowsOf := make([]int, len(sets))
	for i, s := range sets {
		k, _ := s.Dims()
		rowsOf[i] = (k + perRow - 1) / perRow
		height += rowsOf[i]*tile + band
	}
	img := image.NewGray(image.Rect(0, 0, perRow*tile, height))
	for i := range img.Pix {
		img.Pix[i] = 255
	}
	y0 := 0
	for si, s := range sets {
		k, _ := s.Dims()
		for f := range k {
			row := s.RawRowView(f)
			var top float64
			for _, v := range row {
				top = max(top, math.Abs(v))
			}
			if top == 0 {
				top = 1
			}
			ox, oy := (f%perRow)*tile, y0+(f/perRow)*tile
			for r := range side {
				for c := range side {
					g := uint8(math.Round(127.5 + 127.5*row[r*side+c]/top))
					for dy := range zoom {
						for dx := range zoom {
							img.SetGray(ox+c*zoom+dx, oy+r*zoom+dy, color.Gray{Y: g})
						}
					}
				}
			}
		}
		y0 += rowsOf[si]*tile + band
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := png.Encode(f, img); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
