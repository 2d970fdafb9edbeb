package bench

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"image"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"gonum.org/v1/gonum/mat"

	"github.com/smtd/smtd/dataset"
	"github.com/smtd/smtd/online"
	"github.com/smtd/smtd/sgd"
	"github.com/smtd/smtd/spectral"
)

// Video measures how much the temporal sparse manifold transform
// straightens natural video (sparse-manifold-transform, section 4,
// "Straightening of video sequences"; eq. 7-8). The video is made by
// dataset.Pan: a -size × -size window moving smoothly over a photo of
// -images (pan along a random smooth path, slow zoom and small rotation,
// about one output pixel per frame), -frames frames per clip. The photos
// named by -test are held out entirely; each other photo gives -clips
// training clips and -test-clips more clips on new random paths, also
// held out.
//
// Each frame is cut into -patch × -patch patches at stride -stride, the
// scalar mean of each patch is removed (online.MeanPatch), the patches
// are whitened (online.Whitener, λ = -lambda, fitted on the training
// patches) and L2-normalised, those with a whitened norm below -min-norm
// being blank (online.NormalizeRows). An online spherical k-means
// dictionary of -k atoms (online.KMeans, -kmeans-epochs passes over the
// shuffled training patches in minibatches of 1024) codes each patch:
//
//   - -codes gq (the default): the soft-thresholded cosines of f_gq,
//     α_j = cos(x, φ_j) − t for the atoms with cos ≥ t = -threshold
//     (online.KMeans.CodesGQ, shifted), a weighted sparse code that, like
//     the paper's sparse coding, moves continuously with the patch; an
//     empty code (blank, or no atom above t) is zero (sgd.BlankSkip), and
//     V is the full E[ααᵀ] (MultiHot);
//   - -codes vq: f_vq, the 1-hot code of the nearest atom, blank patches
//     being one more atom (sgd.BlankAtom). A 1-hot code jumps from atom
//     to atom, and so does any linear map of it: β = Pα is piecewise
//     constant in time.
//
// P (-dim rows) is learned from the triples of consecutive frames of the
// training clips, the codes of the same patch position in frames t−1, t,
// t+1: sgd.Stats.AddTemporalGQ gathers V and L, spectral.SolveSMT gives
// the closed form, and sgd.SMT.StepTemporalGQ the SGD from a random P
// (minibatches of -batch frame triples, -epochs passes, rate -rate, by
// default 0.9/λ_max(V⁻¹L), decay -decay).
//
// It prints the straightening ratio of each representation y of the
// patches,
//
//	ratio = mean_{p,t} ‖y_{t,p} − ½y_{t−1,p} − ½y_{t+1,p}‖² / mean_{p,t} ‖y_{t,p} − ȳ‖²,
//
// the mean squared second temporal difference over the mean squared
// deviation (ȳ the mean over all the patches measured), which is
// ‖YD‖²/‖Y‖² of eq. 8 per column and unchanged by adding a constant to y
// (so that a constant row of P, whose β never moves, cannot lower the
// SMT's ratio for free); the _uncentred lines divide by mean ‖y‖²
// instead, ‖PAD‖²/‖PA‖² to the letter. Straight, steady trajectories have
// a small ratio; values independent from frame to frame give 1.5. The
// representations:
//
//   - codes: the sparse codes α themselves;
//   - smt_sgd, smt_closed: β = Pα with the SGD's and the closed form's P;
//   - pca: the projection of the whitened, normalised patches on their
//     -dim leading principal components (fitted on the training patches),
//     the linear map of the same dimension without codes;
//   - whitened: the whitened, normalised patches (all dimensions), for
//     scale.
//
// video_*_ratio are measured on the clips of the held-out photos,
// video_newclips_*_ratio on the new clips of the training photos and
// video_train_*_ratio on the training clips. It also prints the SGD's
// objective tr(PLPᵀ) over the closed form's on the training statistics
// (video_sgd_objective_ratio).
func Video(ctx context.Context, w io.Writer, args []string) error {
	fs := flag.NewFlagSet("bench video", flag.ContinueOnError)
	dir := fs.String("images", "../shared/data/images", "`directory` of the photos (PNG or JPEG)")
	test := fs.String("test", "camera.png,gravel.png", "comma-separated photos of -images held out for measurement")
	size := fs.Int("size", 32, "frame side in pixels")
	frames := fs.Int("frames", 48, "frames per clip")
	clips := fs.Int("clips", 12, "training clips per training photo")
	testClips := fs.Int("test-clips", 3, "held-out clips per photo, of the held-out photos and (new paths) of the training photos")
	patch := fs.Int("patch", 8, "patch side in pixels")
	stride := fs.Int("stride", 4, "patch stride in pixels")
	lambda := fs.Float64("lambda", 0.01, "whitening regulariser λ (pixels in [0, 1])")
	minNorm := fs.Float64("min-norm", 0.05, "whitened patches with a smaller norm are blank")
	k := fs.Int("k", 256, "dictionary size K")
	codesKind := fs.String("codes", "gq", "sparse code: vq (f_vq, 1-hot) or gq (soft-thresholded cosines, see above)")
	threshold := fs.Float64("threshold", 0.3, "cosine threshold t of the gq codes")
	kmEpochs := fs.Int("kmeans-epochs", 5, "k-means passes over the training patches")
	dim := fs.Int("dim", 32, "embedding dimension f (rows of P and principal components)")
	batch := fs.Int("batch", 16, "frame triples per SGD step")
	epochs := fs.Int("epochs", 20, "SGD passes over the training triples")
	rate := fs.Float64("rate", 0, "SGD learning rate η; 0 means 0.9/λ_max(V⁻¹L)")
	decay := fs.Float64("decay", 0.001, "SGD rate decay: η_t = η/(1 + decay·t)")
	seed := fs.Uint64("seed", 1, "seed of the clips, the dictionary and the SGD")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	switch {
	case *frames < 3 || *clips < 1 || *testClips < 1 || *kmEpochs < 1 || *batch < 1 || *epochs < 0:
		return errors.New("bench video: -frames must be >= 3, -clips, -test-clips, -kmeans-epochs and -batch >= 1, -epochs >= 0")
	case !(*lambda >= 0) || !(*minNorm >= 0) || !(*rate >= 0) || !(*decay >= 0):
		return errors.New("bench video: -lambda, -min-norm, -rate and -decay must be >= 0")
	case *k < 2 || *dim < 1 || *dim > *k:
		return fmt.Errorf("bench video: want -k >= 2 and -dim in [1, k]")
	case *codesKind != "vq" && *codesKind != "gq":
		return fmt.Errorf("bench video: -codes %q: want vq or gq", *codesKind)
	case !(*threshold >= 0 && *threshold < 1):
		return errors.New("bench video: -threshold must be in [0, 1)")
	}
	gq := *codesKind == "gq"
	blankMode := sgd.BlankAtom
	if gq {
		blankMode = sgd.BlankSkip
	}
	grid := online.PatchGrid{Width: *size, Height: *size, Size: *patch, Stride: *stride}
	if err := grid.Validate(); err != nil {
		return fmt.Errorf("bench video: %w", err)
	}
	writeMachine(w)
	start := time.Now()

	// Clips: frames of centred patches, one matrix per clip with the
	// patches of frame t in rows t·positions ... (t+1)·positions−1.
	held := map[string]bool{}
	for _, name := range strings.Split(*test, ",") {
		if name = strings.TrimSpace(name); name != "" {
			held[name] = true
		}
	}
	names, err := photoNames(*dir)
	if err != nil {
		return fmt.Errorf("bench video: %w", err)
	}
	for name := range held {
		if !slices.Contains(names, name) {
			return fmt.Errorf("bench video: -test photo %q is not in %s", name, *dir)
		}
	}
	patcher := online.Patcher{Grid: grid, Mean: online.MeanPatch}
	positions := grid.Len()
	var train, evals, fresh []*mat.Dense // training clips, clips of held-out photos, new clips of training photos
	var trainPhotos, testPhotos int
	for i, name := range names {
		if err := ctx.Err(); err != nil {
			return err
		}
		img, err := dataset.LoadGray(filepath.Join(*dir, name))
		if err != nil {
			return fmt.Errorf("bench video: %w", err)
		}
		clip := func(c int) *mat.Dense {
			return clipPatches(img, grid, &patcher, *frames, rand.NewPCG(*seed, uint64(i)<<16|uint64(c)))
		}
		if held[name] {
			testPhotos++
			for c := 0; c < *testClips; c++ {
				evals = append(evals, clip(c))
			}
			continue
		}
		trainPhotos++
		for c := 0; c < *clips; c++ {
			train = append(train, clip(c))
		}
		for c := *clips; c < *clips+*testClips; c++ {
			fresh = append(fresh, clip(c))
		}
	}
	if len(train) == 0 || len(evals) == 0 {
		return errors.New("bench video: need both training and held-out photos")
	}
	fmt.Fprintf(w, "video_train_photos: %d\n", trainPhotos)
	fmt.Fprintf(w, "video_test_photos: %d\n", testPhotos)
	fmt.Fprintf(w, "video_train_clips: %d\n", len(train))
	fmt.Fprintf(w, "video_test_clips: %d\n", len(evals))
	fmt.Fprintf(w, "video_frames_per_clip: %d\n", *frames)
	fmt.Fprintf(w, "video_patches_per_frame: %d\n", positions)

	// Whitening fitted on the training patches, then normalisation.
	wh := online.NewWhitener(grid.Dim(), online.WhitenSettings{Lambda: *lambda, RefreshEvery: -1})
	for _, x := range train {
		if err := wh.Observe(x, nil); err != nil {
			return fmt.Errorf("bench video: %w", err)
		}
	}
	if err := wh.Refresh(); err != nil {
		return fmt.Errorf("bench video: %w", err)
	}
	blankCount, total := 0, 0
	whiten := func(xs []*mat.Dense) [][]bool {
		var blanks [][]bool
		for _, x := range xs {
			var white mat.Dense
			wh.Whiten(&white, x)
			x.Copy(&white)
			b := online.NormalizeRows(x, *minNorm, nil)
			for _, v := range b {
				if v {
					blankCount++
				}
			}
			total += len(b)
			blanks = append(blanks, b)
		}
		return blanks
	}
	trainBlank := whiten(train)
	fmt.Fprintf(w, "video_train_blank_fraction: %.4f\n", float64(blankCount)/float64(total))
	blankCount, total = 0, 0
	whiten(evals)
	fmt.Fprintf(w, "video_test_blank_fraction: %.4f\n", float64(blankCount)/float64(total))
	whiten(fresh)

	// Dictionary: online spherical k-means over the shuffled non-blank
	// training patches.
	var rows []int // non-blank training patches as clip·frames·positions + row
	perClip := *frames * positions
	for c, b := range trainBlank {
		for r, blank := range b {
			if !blank {
				rows = append(rows, c*perClip+r)
			}
		}
	}
	if len(rows) < *k {
		return fmt.Errorf("bench video: %d non-blank training patches for %d atoms", len(rows), *k)
	}
	rng := rand.New(rand.NewPCG(*seed, 0x766964656f))
	km := online.NewKMeans(online.KMeansSettings{K: *k, Dim: grid.Dim()}, rand.NewPCG(*seed, 0x6b6d))
	mb := mat.NewDense(1024, grid.Dim(), nil)
	for e := 0; e < *kmEpochs; e++ {
		rng.Shuffle(len(rows), func(i, j int) { rows[i], rows[j] = rows[j], rows[i] })
		for i := 0; i < len(rows); i += 1024 {
			if err := ctx.Err(); err != nil {
				return err
			}
			n := min(1024, len(rows)-i)
			for j := 0; j < n; j++ {
				r := rows[i+j]
				mb.SetRow(j, train[r/perClip].RawRowView(r%perClip))
			}
			km.Learn(mb.Slice(0, n, 0, grid.Dim()), nil)
		}
	}
	code := func(xs []*mat.Dense) []*online.SparseCodes {
		var out []*online.SparseCodes
		vq := make([]int, perClip)
		for _, x := range xs {
			c := newCodes(*k)
			if gq {
				km.CodesGQ(c, x, *threshold)
				for i := range c.Cos {
					c.Cos[i] -= *threshold
				}
			} else {
				km.Assign(vq, nil, x)
				for _, a := range vq {
					if a >= 0 {
						c.Index = append(c.Index, a)
						c.Cos = append(c.Cos, 1)
					}
					c.Rows++
					c.Ptr = append(c.Ptr, len(c.Index))
				}
			}
			out = append(out, c)
		}
		return out
	}
	trainCodes, testCodes, freshCodes := code(train), code(evals), code(fresh)
	fmt.Fprintf(w, "video_kmeans_seconds: %.1f\n", time.Since(start).Seconds())

	// Temporal statistics and the closed form.
	st := sgd.NewStats(sgd.StatsSettings{K: *k, Blank: blankMode, MultiHot: gq})
	type triple struct{ clip, t int }
	var triples []triple
	bp, bc, bn := newCodes(*k), newCodes(*k), newCodes(*k)
	var idx []int
	frameRows := func(t int) []int {
		idx = idx[:0]
		for p := 0; p < positions; p++ {
			idx = append(idx, t*positions+p)
		}
		return idx
	}
	for c, codes := range trainCodes {
		for t := 1; t+1 < *frames; t++ {
			gatherRows(bp, codes, frameRows(t-1))
			gatherRows(bc, codes, frameRows(t))
			gatherRows(bn, codes, frameRows(t+1))
			st.AddTemporalGQ(bp, bc, bn)
			triples = append(triples, triple{c, t})
		}
	}
	var pc mat.Dense
	startSolve := time.Now()
	res, err := spectral.SolveSMT(&pc, st, spectral.Settings{Dim: *dim}, nil)
	fmt.Fprintf(w, "video_atoms_per_code: %.2f\n", float64(len(trainCodes[0].Index))/float64(trainCodes[0].Rows))
	if err != nil {
		return fmt.Errorf("bench video: closed form: %w", err)
	}
	closedObj := spectral.Objective(st, &pc)
	fmt.Fprintf(w, "video_closed_seconds: %.2f\n", time.Since(startSolve).Seconds())
	fmt.Fprintf(w, "video_closed_atoms: %d\n", res.Atoms)
	fmt.Fprintf(w, "video_closed_objective: %.4e\n", closedObj)

	// SGD from a random P over shuffled minibatches of frame triples.
	lmax, err := largestEigenvalue(st)
	if err != nil {
		return fmt.Errorf("bench video: %w", err)
	}
	if *rate == 0 {
		*rate = 0.9 / lmax
	}
	fmt.Fprintf(w, "video_lambda_max: %.4g\n", lmax)
	fmt.Fprintf(w, "video_sgd_rate: %.4g\n", *rate)
	m := sgd.NewSMT(sgd.SMTSettings{K: *k, Blank: blankMode, Dim: *dim, LearningRate: *rate, Decay: *decay}, rand.NewPCG(*seed, 0x736764))
	steps := 0
	startSGD := time.Now()
	for e := 0; e < *epochs; e++ {
		rng.Shuffle(len(triples), func(i, j int) { triples[i], triples[j] = triples[j], triples[i] })
		for i := 0; i < len(triples); i += *batch {
			if err := ctx.Err(); err != nil {
				return err
			}
			// The rows of the batch's frames, laid end to end; the codes of
			// different clips are gathered into one code set each.
			bp.Rows, bc.Rows, bn.Rows = 0, 0, 0
			bp.Ptr, bc.Ptr, bn.Ptr = bp.Ptr[:1], bc.Ptr[:1], bn.Ptr[:1]
			bp.Index, bc.Index, bn.Index = bp.Index[:0], bc.Index[:0], bn.Index[:0]
			bp.Cos, bc.Cos, bn.Cos = bp.Cos[:0], bc.Cos[:0], bn.Cos[:0]
			for _, tr := range triples[i:min(i+*batch, len(triples))] {
				codes := trainCodes[tr.clip]
				for p := 0; p < positions; p++ {
					appendRow(bp, codes, (tr.t-1)*positions+p)
					appendRow(bc, codes, tr.t*positions+p)
					appendRow(bn, codes, (tr.t+1)*positions+p)
				}
			}
			if err := m.StepTemporalGQ(st, bp, bc, bn); err != nil {
				return fmt.Errorf("bench video: SGD: %w", err)
			}
			steps++
		}
	}
	ps := mat.DenseCopyOf(m.P())
	sgdObj := spectral.Objective(st, ps)
	fmt.Fprintf(w, "video_sgd_steps: %d\n", steps)
	fmt.Fprintf(w, "video_sgd_seconds: %.2f\n", time.Since(startSGD).Seconds())
	fmt.Fprintf(w, "video_sgd_objective: %.4e\n", sgdObj)
	fmt.Fprintf(w, "video_sgd_objective_ratio: %.4f\n", sgdObj/closedObj)
	fmt.Fprintf(w, "video_sgd_constraint_error: %.2e\n", spectral.ConstraintError(st, ps))

	// PCA of the whitened, normalised training patches.
	pca, err := principalComponents(train, *dim)
	if err != nil {
		return fmt.Errorf("bench video: %w", err)
	}

	n := st.Size()
	// dense returns the codes as rows of n coefficients, an empty code
	// being the blank atom (BlankAtom) or zero (BlankSkip).
	dense := func(codes *online.SparseCodes) *mat.Dense {
		y := mat.NewDense(codes.Rows, n, nil)
		for i := 0; i < codes.Rows; i++ {
			atoms, c := codes.Row(i)
			if len(atoms) == 0 && blankMode == sgd.BlankAtom {
				y.Set(i, n-1, 1)
			}
			for j, a := range atoms {
				y.Set(i, a, c[j])
			}
		}
		return y
	}
	embed := func(p *mat.Dense) func(x *mat.Dense, codes *online.SparseCodes) *mat.Dense {
		return func(_ *mat.Dense, codes *online.SparseCodes) *mat.Dense {
			var y mat.Dense
			y.Mul(dense(codes), p.T())
			return &y
		}
	}
	reps := []struct {
		name string
		rep  func(x *mat.Dense, codes *online.SparseCodes) *mat.Dense
	}{
		{"codes", func(_ *mat.Dense, codes *online.SparseCodes) *mat.Dense { return dense(codes) }},
		{"smt_sgd", embed(ps)},
		{"smt_closed", embed(&pc)},
		{"pca", func(x *mat.Dense, _ *online.SparseCodes) *mat.Dense {
			var y mat.Dense
			y.Mul(x, pca)
			return &y
		}},
		{"whitened", func(x *mat.Dense, _ *online.SparseCodes) *mat.Dense { return x }},
	}
	for _, set := range []struct {
		prefix string
		xs     []*mat.Dense
		codes  []*online.SparseCodes
	}{{"video_", evals, testCodes}, {"video_newclips_", fresh, freshCodes}, {"video_train_", train, trainCodes}} {
		for _, r := range reps {
			var ys []*mat.Dense
			for c, x := range set.xs {
				ys = append(ys, r.rep(x, set.codes[c]))
			}
			centred, uncentred := straightening(ys, *frames, positions)
			fmt.Fprintf(w, "%s%s_ratio: %.4f\n", set.prefix, r.name, centred)
			if set.prefix == "video_" {
				fmt.Fprintf(w, "%s%s_ratio_uncentred: %.4f\n", set.prefix, r.name, uncentred)
			}
		}
	}
	fmt.Fprintf(w, "video_seconds: %.1f\n", time.Since(start).Seconds())
	return nil
}

// clipPatches renders a clip of the given frames over img with
// dataset.Pan (pixels scaled to [0, 1]) and returns its centred patches,
// frame after frame.
func clipPatches(img *image.Gray, grid online.PatchGrid, p *online.Patcher, frames int, src rand.Source) *mat.Dense {
	video := dataset.Pan(img, grid.Width, grid.Height, frames, src)
	out := mat.NewDense(frames*grid.Len(), grid.Dim(), nil)
	pixels := make([]float64, grid.Pixels())
	var patches mat.Dense
	for t, f := range video {
		for i := range pixels {
			pixels[i] = float64(f.Pix[(i/grid.Width)*f.Stride+i%grid.Width]) / 255
		}
		p.Extract(&patches, pixels)
		out.Slice(t*grid.Len(), (t+1)*grid.Len(), 0, grid.Dim()).(*mat.Dense).Copy(&patches)
	}
	return out
}

// principalComponents returns the d×dim matrix of the dim leading
// principal directions of the rows of xs (centred covariance).
func principalComponents(xs []*mat.Dense, dim int) (*mat.Dense, error) {
	_, d := xs[0].Dims()
	if dim > d {
		dim = d
	}
	mom := online.NewMoments(d)
	for _, x := range xs {
		mom.Add(x, nil, 0)
	}
	var cov mat.SymDense
	mom.Cov(&cov)
	var eig mat.EigenSym
	if !eig.Factorize(&cov, true) {
		return nil, errors.New("eigendecomposition of the patch covariance failed")
	}
	var vec mat.Dense
	eig.VectorsTo(&vec)
	// Eigenvalues ascending: the last dim columns, largest first.
	out := mat.NewDense(d, dim, nil)
	for j := 0; j < dim; j++ {
		for i := 0; i < d; i++ {
			out.Set(i, j, vec.At(i, d-1-j))
		}
	}
	return out, nil
}

// straightening returns the mean squared second temporal difference of
// the representations ys (one matrix per clip, frames·positions rows,
// frame after frame) over their mean squared deviation from the mean row
// (centred) and over their mean squared norm (uncentred).
func straightening(ys []*mat.Dense, frames, positions int) (centred, uncentred float64) {
	_, d := ys[0].Dims()
	mean := make([]float64, d)
	var rows float64
	var sq float64
	for _, y := range ys {
		r, _ := y.Dims()
		for i := 0; i < r; i++ {
			for l, v := range y.RawRowView(i) {
				mean[l] += v
				sq += v * v
			}
		}
		rows += float64(r)
	}
	var meanSq float64
	for l := range mean {
		mean[l] /= rows
		meanSq += mean[l] * mean[l]
	}
	variance := sq/rows - meanSq
	var num, cols float64
	for _, y := range ys {
		for t := 1; t+1 < frames; t++ {
			for p := 0; p < positions; p++ {
				a, b, c := y.RawRowView((t-1)*positions+p), y.RawRowView(t*positions+p), y.RawRowView((t+1)*positions+p)
				for l := range b {
					u := b[l] - 0.5*a[l] - 0.5*c[l]
					num += u * u
				}
				cols++
			}
		}
	}
	num /= cols
	return num / variance, num / (sq / rows)
}

// photoNames returns the names of the PNG and JPEG files in dir, sorted.
func photoNames(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, e := range entries {
		if ext := strings.ToLower(filepath.Ext(e.Name())); !e.IsDir() && (ext == ".png" || ext == ".jpg" || ext == ".jpeg") {
			names = append(names, e.Name())
		}
	}
	slices.Sort(names)
	return names, nil
}
