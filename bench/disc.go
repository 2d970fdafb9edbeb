package bench

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"time"

	"gonum.org/v1/gonum/mat"

	"github.com/smtd/smtd/online"
	"github.com/smtd/smtd/sgd"
	"github.com/smtd/smtd/spectral"
)

// Disc runs the unit-disc demonstration of sparse-manifold-transform,
// section 2 (Figure 2), with the second-order temporal SMT of eq. 8:
//
//   - landmarks: -landmarks points on the unit disc, evenly spread on
//     Vogel's sunflower spiral (-layout spiral, the default, like the
//     atoms of a dictionary learned by k-means on the disc) or uniform at
//     random (r = √U, θ = 2πU; -layout random). Random landmarks clump,
//     and a landmark squeezed between close neighbours is rarely used: V
//     then has tiny eigenvalues (λ_max(V⁻¹L) ≈ 30 against 15), the closed
//     form is as good but the SGD's rate must be halved and it ends
//     further from the optimum (objective ratio 1.05 against 1.02 with
//     the defaults; with a fixed rate above 1/λ_max a minibatch that meets
//     such a landmark kicks P far off);
//   - motion: -sequences short sequences of a point moving on a straight
//     line, x_t = x_0 + t·v, with x_0 uniform on the disc, the direction
//     of v uniform and its speed uniform in [-speed-min, -speed-max]
//     (disc radii per frame), for at most -length frames; a sequence ends
//     where the point would leave the disc (it restarts: a new sequence
//     begins elsewhere; points never bounce), so every triple of frames
//     lies on one straight line;
//   - codes: the local interpolation code of each frame, the barycentric
//     coordinates of x_t in the Delaunay triangle of the landmarks that
//     contains it (α ≥ 0, Σα = 1, x_t = Φ_LM α_t, at most three
//     landmarks), or of its nearest point on the boundary for the points
//     outside the landmarks' convex hull (the boundary effect of the
//     paper's Figure 2B);
//   - P: f = -dim rows from sgd.Stats.AddTemporalGQ over every triple of
//     consecutive frames (V = E[ααᵀ], L = E[uuᵀ], u = α_t − ½α_{t−1} −
//     ½α_{t+1}), solved in closed form (spectral.SolveSMT, dense) and by
//     the whitened-gradient SGD (sgd.SMT.StepTemporalGQ from a random P,
//     minibatches of -batch random triples for -epochs passes, rate
//     -rate, by default 0.9/λ_max(V⁻¹L), printed as disc_lambda_max).
//
// It prints the data (disc_sequences, disc_frames, disc_triples,
// disc_inside_fraction: frames inside the landmarks' hull), the closed
// form's generalized eigenvalues (disc_closed_value_01...), the objective
// tr(PLPᵀ) of both solutions and its ratio (disc_sgd_objective_ratio, 1
// at the optimum), the SGD's constraint error ‖PVPᵀ − I‖_F and the overlap
// of its row space with the closed form's (mean squared cosine of the
// principal angles in the V metric, 1 when they span the same space).
// The SGD's rows are then ordered by a Rayleigh-Ritz rotation within
// their span (the eigenvectors of PLPᵀ), so that they can be compared
// row by row.
//
// For each solution (closed, sgd) it prints, over the landmarks, with the
// rows of P read as functions on the landmarks (row i at landmark j is
// P_ij, the embedding of a point sitting on landmark j):
//
//   - _row2_r2, _row3_r2: the linear R² of rows 2 and 3 regressed on the
//     landmark coordinates (1, x, y), and _xy_r2, the smaller R² of x and
//     of y regressed on (1, row 2, row 3): rows 2 and 3 are the classical
//     manifold embedding P_C of the disc;
//   - _zernike_nN_cosM_corr, _zernike_nN_sinM_corr for radial orders n ≤
//     -zernike-order: how much of each Zernike polynomial Z_n^m (R_n^m(r)
//     cos mθ, R_n^m(r) sin mθ) the first (n+1)(n+2)/2 rows span, the
//     number of Zernike polynomials of order ≤ n: ‖proj z‖/‖z‖, an
//     uncentred multiple correlation, rotation-invariant within
//     eigenvalues that tie (the cos/sin pairs);
//
// and, for the closed form, each of the first (order+1)(order+2)/2 rows'
// best Zernike pair: disc_closed_rowNN_zernike_n and _m (n and |m| of the
// pair {Z_n^m, Z_n^−m}, radial order up to order+2) and _corr, the
// uncentred correlation of the row with its projection on that pair.
func Disc(ctx context.Context, w io.Writer, args []string) error {
	fs := flag.NewFlagSet("bench disc", flag.ContinueOnError)
	nLandmarks := fs.Int("landmarks", 300, "number of landmarks on the unit disc")
	layout := fs.String("layout", "spiral", "landmark layout: spiral (Vogel's sunflower, evenly spread) or random (uniform on the disc)")
	sequences := fs.Int("sequences", 4000, "number of straight-line sequences")
	length := fs.Int("length", 16, "frames per sequence at most (fewer where the line leaves the disc)")
	speedMin := fs.Float64("speed-min", 0.05, "smallest speed, disc radii per frame")
	speedMax := fs.Float64("speed-max", 0.15, "largest speed, disc radii per frame")
	dim := fs.Int("dim", 21, "embedding dimension f, the rows of P")
	batch := fs.Int("batch", 2048, "triples per SGD step")
	epochs := fs.Int("epochs", 200, "SGD passes over the triples")
	rate := fs.Float64("rate", 0, "SGD learning rate η; 0 means 0.9/λ_max(V⁻¹L), the largest stable rate with a margin")
	decay := fs.Float64("decay", 0.001, "SGD rate decay: η_t = η/(1 + decay·t)")
	order := fs.Int("zernike-order", 3, "highest radial order n of the Zernike polynomials reported")
	seed := fs.Uint64("seed", 1, "seed of the landmarks, the motion and the SGD")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	switch {
	case !(*rate >= 0):
		return errors.New("bench disc: -rate must be >= 0")
	case *nLandmarks < 4 || *sequences < 1 || *length < 3 || *batch < 1 || *epochs < 0 || *order < 0:
		return errors.New("bench disc: -landmarks must be >= 4, -length >= 3, -sequences and -batch >= 1, -epochs and -zernike-order >= 0")
	case !(*speedMin > 0) || !(*speedMax >= *speedMin):
		return errors.New("bench disc: want 0 < -speed-min <= -speed-max")
	case *dim < 3 || *dim > *nLandmarks:
		return fmt.Errorf("bench disc: -dim %d: must be in [3, %d]", *dim, *nLandmarks)
	case *layout != "random" && *layout != "spiral":
		return fmt.Errorf("bench disc: -layout %q: want random or spiral", *layout)
	}
	writeMachine(w)
	rng := rand.New(rand.NewPCG(*seed, 0x64697363))
	lm := discLandmarks(*nLandmarks, *layout == "spiral", rng)
	tri := newDelaunay(lm)

	// Sequences, coded frame by frame; the triples of consecutive frames
	// are gathered in three code sets, row r of each from the same line.
	k := len(lm)
	prev, cur, next := newCodes(k), newCodes(k), newCodes(k)
	var frames, inside int
	seq := newCodes(k)
	for s := 0; s < *sequences; s++ {
		r, th := math.Sqrt(rng.Float64()), 2*math.Pi*rng.Float64()
		x0 := [2]float64{r * math.Cos(th), r * math.Sin(th)}
		speed := *speedMin + (*speedMax-*speedMin)*rng.Float64()
		dir := 2 * math.Pi * rng.Float64()
		v := [2]float64{speed * math.Cos(dir), speed * math.Sin(dir)}
		*seq = online.SparseCodes{Atoms: k, Ptr: append(seq.Ptr[:0], 0), Index: seq.Index[:0], Cos: seq.Cos[:0]}
		for t := 0; t < *length; t++ {
			x := [2]float64{x0[0] + float64(t)*v[0], x0[1] + float64(t)*v[1]}
			if x[0]*x[0]+x[1]*x[1] > 1 {
				break
			}
			if tri.code(seq, x) {
				inside++
			}
			frames++
		}
		for t := 1; t+1 < seq.Rows; t++ {
			appendRow(prev, seq, t-1)
			appendRow(cur, seq, t)
			appendRow(next, seq, t+1)
		}
	}
	triples := cur.Rows
	fmt.Fprintf(w, "disc_landmarks: %d\n", k)
	fmt.Fprintf(w, "disc_triangles: %d\n", len(tri.tri))
	fmt.Fprintf(w, "disc_sequences: %d\n", *sequences)
	fmt.Fprintf(w, "disc_frames: %d\n", frames)
	fmt.Fprintf(w, "disc_triples: %d\n", triples)
	fmt.Fprintf(w, "disc_inside_fraction: %.4f\n", float64(inside)/float64(frames))
	if triples == 0 {
		return errors.New("bench disc: no triples of frames")
	}

	st := sgd.NewStats(sgd.StatsSettings{K: k, Blank: sgd.BlankSkip, MultiHot: true})
	st.AddTemporalGQ(prev, cur, next)

	start := time.Now()
	var pc mat.Dense
	res, err := spectral.SolveSMT(&pc, st, spectral.Settings{Dim: *dim, Method: spectral.Dense}, nil)
	if err != nil {
		return fmt.Errorf("bench disc: closed form: %w", err)
	}
	fmt.Fprintf(w, "disc_closed_seconds: %.2f\n", time.Since(start).Seconds())
	for i, v := range res.Values {
		fmt.Fprintf(w, "disc_closed_value_%02d: %.3e\n", i+1, v)
	}
	closedObj := spectral.Objective(st, &pc)
	fmt.Fprintf(w, "disc_closed_objective: %.4e\n", closedObj)

	// SGD from a random P over shuffled minibatches of triples.
	lmax, err := largestEigenvalue(st)
	if err != nil {
		return fmt.Errorf("bench disc: %w", err)
	}
	fmt.Fprintf(w, "disc_lambda_max: %.4g\n", lmax)
	if *rate == 0 {
		*rate = 0.9 / lmax
	}
	fmt.Fprintf(w, "disc_sgd_rate: %.4g\n", *rate)
	m := sgd.NewSMT(sgd.SMTSettings{K: k, Blank: sgd.BlankSkip, Dim: *dim, LearningRate: *rate, Decay: *decay},
		rand.NewPCG(*seed, 0x736764))
	perm := make([]int, triples)
	for i := range perm {
		perm[i] = i
	}
	bp, bc, bn := newCodes(k), newCodes(k), newCodes(k)
	start = time.Now()
	steps := 0
	for e := 0; e < *epochs; e++ {
		rng.Shuffle(triples, func(i, j int) { perm[i], perm[j] = perm[j], perm[i] })
		for i := 0; i < triples; i += *batch {
			if err := ctx.Err(); err != nil {
				return err
			}
			gatherRows(bp, prev, perm[i:min(i+*batch, triples)])
			gatherRows(bc, cur, perm[i:min(i+*batch, triples)])
			gatherRows(bn, next, perm[i:min(i+*batch, triples)])
			if err := m.StepTemporalGQ(st, bp, bc, bn); err != nil {
				return fmt.Errorf("bench disc: SGD: %w", err)
			}
			steps++
		}
	}
	ps := mat.DenseCopyOf(m.P())
	sgdObj := spectral.Objective(st, ps)
	fmt.Fprintf(w, "disc_sgd_steps: %d\n", steps)
	fmt.Fprintf(w, "disc_sgd_seconds: %.2f\n", time.Since(start).Seconds())
	fmt.Fprintf(w, "disc_sgd_objective: %.4e\n", sgdObj)
	fmt.Fprintf(w, "disc_sgd_objective_ratio: %.4f\n", sgdObj/closedObj)
	fmt.Fprintf(w, "disc_sgd_constraint_error: %.2e\n", spectral.ConstraintError(st, ps))
	fmt.Fprintf(w, "disc_sgd_subspace_overlap: %.4f\n", subspaceOverlap(st, &pc, ps))
	ritzOrder(ps, st)

	for _, sol := range []struct {
		name string
		p    *mat.Dense
	}{{"closed", &pc}, {"sgd", ps}} {
		r2row2, r2row3, r2xy := coordinateR2(sol.p, lm)
		fmt.Fprintf(w, "disc_%s_row2_r2: %.4f\n", sol.name, r2row2)
		fmt.Fprintf(w, "disc_%s_row3_r2: %.4f\n", sol.name, r2row3)
		fmt.Fprintf(w, "disc_%s_xy_r2: %.4f\n", sol.name, r2xy)
		for n := 0; n <= *order; n++ {
			rows := min((n+1)*(n+2)/2, *dim)
			for mm := n % 2; mm <= n; mm += 2 {
				fmt.Fprintf(w, "disc_%s_zernike_n%d_cos%d_corr: %.4f\n", sol.name, n, mm,
					spanCorr(zernikeOn(lm, n, mm), sol.p.Slice(0, rows, 0, k).(*mat.Dense)))
				if mm > 0 {
					fmt.Fprintf(w, "disc_%s_zernike_n%d_sin%d_corr: %.4f\n", sol.name, n, mm,
						spanCorr(zernikeOn(lm, n, -mm), sol.p.Slice(0, rows, 0, k).(*mat.Dense)))
				}
			}
		}
	}
	for i := 0; i < min((*order+1)*(*order+2)/2, *dim); i++ {
		row := pc.RawRowView(i)
		bestN, bestM, best := 0, 0, -1.0
		for n := 0; n <= *order+2; n++ {
			for mm := n % 2; mm <= n; mm += 2 {
				z := mat.NewDense(1, k, zernikeOn(lm, n, mm))
				if mm > 0 {
					z = mat.NewDense(2, k, append(zernikeOn(lm, n, mm), zernikeOn(lm, n, -mm)...))
				}
				if c := spanCorr(row, z); c > best {
					bestN, bestM, best = n, mm, c
				}
			}
		}
		fmt.Fprintf(w, "disc_closed_row%02d_zernike_n: %d\n", i+1, bestN)
		fmt.Fprintf(w, "disc_closed_row%02d_zernike_m: %d\n", i+1, bestM)
		fmt.Fprintf(w, "disc_closed_row%02d_zernike_corr: %.4f\n", i+1, best)
	}
	return nil
}

// largestEigenvalue returns λ_max of the pencil L x = λ V x by power
// iteration on V⁻¹L: V is factorised densely unless it is diagonal
// (small n only). The SGD step of sgd.SMT is stable while 2η·λ_max < 2.
func largestEigenvalue(st *sgd.Stats) (float64, error) {
	n := st.Size()
	diag := st.DiagV(nil)
	var chol mat.Cholesky
	if !st.DiagonalV() {
		var v mat.SymDense
		st.VTo(&v)
		if !chol.Factorize(&v) {
			return 0, errors.New("the statistics' V is not positive definite (an atom is never used: more data)")
		}
	} else {
		for a, d := range diag {
			if !(d > 0) {
				return 0, fmt.Errorf("atom %d is never used (more data)", a)
			}
		}
	}
	x := mat.NewDense(n, 1, nil)
	for i := 0; i < n; i++ {
		x.Set(i, 0, 1+float64(i%7))
	}
	var y mat.Dense
	lambda := 0.0
	for it := 0; it < 1000; it++ {
		st.MulL(&y, x)
		if st.DiagonalV() {
			for a, d := range diag {
				x.Set(a, 0, y.At(a, 0)/d)
			}
		} else if err := chol.SolveTo(x, &y); err != nil {
			return 0, err
		}
		next := mat.Norm(x, 2)
		x.Scale(1/next, x)
		if it > 10 && math.Abs(next-lambda) <= 1e-6*next {
			return next, nil
		}
		lambda = next
	}
	return lambda, nil
}

// discLandmarks returns n points on the unit disc: uniform at random from
// rng, or on Vogel's spiral r_j = √((j+½)/n), θ_j = j·π(3−√5).
func discLandmarks(n int, spiral bool, rng *rand.Rand) [][2]float64 {
	pts := make([][2]float64, n)
	golden := math.Pi * (3 - math.Sqrt(5))
	for j := range pts {
		var r, th float64
		if spiral {
			r, th = math.Sqrt((float64(j)+0.5)/float64(n)), float64(j)*golden
		} else {
			r, th = math.Sqrt(rng.Float64()), 2*math.Pi*rng.Float64()
		}
		pts[j] = [2]float64{r * math.Cos(th), r * math.Sin(th)}
	}
	return pts
}

// newCodes returns an empty code set of k atoms.
func newCodes(k int) *online.SparseCodes {
	return &online.SparseCodes{Atoms: k, Ptr: []int{0}}
}

// appendRow appends row i of src to dst.
func appendRow(dst, src *online.SparseCodes, i int) {
	atoms, w := src.Row(i)
	dst.Index = append(dst.Index, atoms...)
	dst.Cos = append(dst.Cos, w...)
	dst.Rows++
	dst.Ptr = append(dst.Ptr, len(dst.Index))
}

// gatherRows sets dst to the given rows of src, reusing its slices.
func gatherRows(dst, src *online.SparseCodes, rows []int) {
	dst.Rows, dst.Atoms = 0, src.Atoms
	dst.Ptr, dst.Index, dst.Cos = append(dst.Ptr[:0], 0), dst.Index[:0], dst.Cos[:0]
	for _, r := range rows {
		appendRow(dst, src, r)
	}
}

// subspaceOverlap returns ‖A V Bᵀ‖²_F/f for two f×n solutions with
// AVAᵀ = BVBᵀ = I: the mean squared cosine of the principal angles
// between their row spaces in the V metric.
func subspaceOverlap(pb spectral.Pencil, a, b *mat.Dense) float64 {
	var vb, c mat.Dense
	pb.MulV(&vb, b.T())
	c.Mul(a, &vb)
	f, _ := a.Dims()
	n := mat.Norm(&c, 2)
	return n * n / float64(f)
}

// ritzOrder rotates the rows of p (with PVPᵀ = I) within their span into
// the eigenvectors of PLPᵀ, eigenvalues ascending, each signed so that its
// largest entry is positive: the closed form's row order.
func ritzOrder(p *mat.Dense, pb spectral.Pencil) {
	f, n := p.Dims()
	var lp, m mat.Dense
	pb.MulL(&lp, p.T())
	m.Mul(p, &lp)
	sym := mat.NewSymDense(f, nil)
	for i := 0; i < f; i++ {
		for j := i; j < f; j++ {
			sym.SetSym(i, j, 0.5*(m.At(i, j)+m.At(j, i)))
		}
	}
	var eig mat.EigenSym
	if !eig.Factorize(sym, true) {
		return
	}
	var u mat.Dense
	eig.VectorsTo(&u)
	var rot mat.Dense
	rot.Mul(u.T(), p)
	for i := 0; i < f; i++ {
		row := rot.RawRowView(i)
		big := 0.0
		for _, v := range row {
			if math.Abs(v) > math.Abs(big) {
				big = v
			}
		}
		if big < 0 {
			for a := 0; a < n; a++ {
				row[a] = -row[a]
			}
		}
	}
	p.Copy(&rot)
}

// coordinateR2 returns the R² of rows 2 and 3 of p regressed on (1, x, y)
// of the landmarks, and the smaller R² of x and y regressed on (1, row 2,
// row 3).
func coordinateR2(p *mat.Dense, lm [][2]float64) (row2, row3, xy float64) {
	k := len(lm)
	coords := mat.NewDense(k, 3, nil)
	rows := mat.NewDense(k, 3, nil)
	x, y := make([]float64, k), make([]float64, k)
	for j, q := range lm {
		coords.SetRow(j, []float64{1, q[0], q[1]})
		rows.SetRow(j, []float64{1, p.At(1, j), p.At(2, j)})
		x[j], y[j] = q[0], q[1]
	}
	return linearR2(coords, p.RawRowView(1)), linearR2(coords, p.RawRowView(2)),
		min(linearR2(rows, x), linearR2(rows, y))
}

// linearR2 returns 1 − SS_res/SS_tot of the least-squares fit of y by the
// columns of a (which include the constant).
func linearR2(a *mat.Dense, y []float64) float64 {
	yv := mat.NewVecDense(len(y), y)
	var beta, fit mat.VecDense
	if err := beta.SolveVec(a, yv); err != nil {
		return math.NaN()
	}
	fit.MulVec(a, &beta)
	var mean float64
	for _, v := range y {
		mean += v / float64(len(y))
	}
	var res, tot float64
	for i, v := range y {
		res += (v - fit.AtVec(i)) * (v - fit.AtVec(i))
		tot += (v - mean) * (v - mean)
	}
	return 1 - res/tot
}

// spanCorr returns ‖proj z‖/‖z‖, proj the orthogonal projection of z on
// the span of the rows of b (uncentred).
func spanCorr(z []float64, b *mat.Dense) float64 {
	zv := mat.NewVecDense(len(z), z)
	var c, fit mat.VecDense
	if err := c.SolveVec(b.T(), zv); err != nil {
		return math.NaN()
	}
	fit.MulVec(b.T(), &c)
	return mat.Norm(&fit, 2) / mat.Norm(zv, 2)
}

// zernikeOn returns the Zernike polynomial Z_n^m at the landmarks:
// R_n^|m|(r)·cos(mθ) for m ≥ 0, R_n^|m|(r)·sin(|m|θ) for m < 0, with the
// radial polynomial
//
//	R_n^m(r) = Σ_{s=0}^{(n−m)/2} (−1)^s (n−s)! / (s! ((n+m)/2−s)! ((n−m)/2−s)!) r^(n−2s),
//
// n − |m| even and non-negative (unnormalised: only directions matter).
func zernikeOn(lm [][2]float64, n, m int) []float64 {
	am := m
	if am < 0 {
		am = -am
	}
	fact := func(v int) float64 {
		f := 1.0
		for i := 2; i <= v; i++ {
			f *= float64(i)
		}
		return f
	}
	out := make([]float64, len(lm))
	for j, q := range lm {
		r, th := math.Hypot(q[0], q[1]), math.Atan2(q[1], q[0])
		var rad float64
		for s := 0; s <= (n-am)/2; s++ {
			c := fact(n-s) / (fact(s) * fact((n+am)/2-s) * fact((n-am)/2-s))
			if s%2 == 1 {
				c = -c
			}
			rad += c * math.Pow(r, float64(n-2*s))
		}
		if m >= 0 {
			out[j] = rad * math.Cos(float64(am)*th)
		} else {
			out[j] = rad * math.Sin(float64(am)*th)
		}
	}
	return out
}
