package bench

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"gonum.org/v1/gonum/mat"
	"gonum.org/v1/gonum/stat"

	"github.com/smtd/smtd/spectral"
)

// Strip measures the redundancy of Laplacian eigenmaps and of their
// non-redundant version (Blau and Michaeli, "Non-redundant spectral
// dimensionality reduction", Alg. 1) on two manifolds with a long and a
// short axis, L1 = ratio·L2 (paper Fig. 2 with ratio 3.5, and Fig. 1):
//
//   - strip: points spread uniformly (stratified, see MakeStrip) on the
//     rectangle [0, L1]×[0, L2];
//   - swissroll: the same rectangle rolled up in R³ (MakeSwissRoll).
//
// LEM's affinity has one global width by default here (-local-scale -1),
// which follows the strip's Neumann eigenfunctions more closely than
// local scaling.
//
// On such a strip LEM's first ⌊L1/L2⌋ coordinates are all functions of
// the long axis (eq. 1, 2): coordinate 2 is a function of coordinate 1.
// For each manifold it prints
//
//   - NAME_lem_coord2_error: the normalised error of the leave-one-out
//     Nadaraya–Watson regression of LEM's 2nd coordinate on its 1st
//     (spectral.Redundancy), near 0 for a redundant coordinate;
//   - NAME_nonredundant_coord2_error: the same for the non-redundant 2nd
//     coordinate, near 1 for an unpredictable one;
//   - NAME_lem_coord2_spearman_short, NAME_nonredundant_coord2_spearman_short:
//     |Spearman correlation| of each 2nd coordinate with the short axis;
//   - NAME_lem_first_short_coord: the first LEM coordinate (of -lem-dim)
//     whose |Spearman| with the short axis is at least 0.9 (0 if none);
//   - NAME_nonredundant_coord2_rank: the number of singular vectors of
//     the smoother projected out for coordinate 2;
//   - NAME_lem_seconds, NAME_nonredundant_seconds: the time of each
//     embedding (graph included).
func Strip(ctx context.Context, w io.Writer, args []string) error {
	fs := flag.NewFlagSet("bench strip", flag.ContinueOnError)
	points := fs.Int("points", 2000, "points on each manifold (rounded to a grid of strata)")
	ratio := fs.Float64("ratio", 3.5, "L1/L2, the long over the short axis")
	k := fs.Int("k", 10, "neighbours of the LEM graph")
	localScale := fs.Int("local-scale", -1, "LEM affinity: σ_a = distance to this neighbour (0: 7), or one global σ, the median k-th neighbour distance (-1)")
	alpha := fs.Float64("alpha", 0.3, "bandwidth factor α of the non-redundant smoother")
	nrNeighbours := fs.Int("nr-neighbours", 0, "neighbours of each row of the non-redundant smoother (0: min(N, 10000))")
	lemDim := fs.Int("lem-dim", 5, "LEM coordinates computed to find the first one along the short axis")
	manifolds := fs.String("manifolds", "strip,swissroll", "comma-separated manifolds: strip, swissroll")
	seed := fs.Uint64("seed", 1, "seed of the points and the solvers")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *points < 20 || !(*ratio > 0) || *k < 1 || *lemDim < 2 || *lemDim > *points-2 {
		return errors.New("bench strip: -points must be >= 20, -ratio > 0, -k >= 1, -lem-dim in 2..points-2")
	}
	var names []string
	for _, f := range strings.Split(*manifolds, ",") {
		f = strings.TrimSpace(f)
		if f != "strip" && f != "swissroll" {
			return fmt.Errorf("bench strip: -manifolds %q: want strip and/or swissroll", *manifolds)
		}
		names = append(names, f)
	}
	ls := spectral.LEMSettings{Neighbours: *k, LocalScale: *localScale}
	nr := spectral.NonRedundantSettings{Alpha: *alpha, Neighbours: *nrNeighbours}
	if err := ls.Validate(); err != nil {
		return err
	}
	if err := nr.Validate(); err != nil {
		return err
	}

	writeMachine(w)
	r, c := strata(*points, *ratio)
	fmt.Fprintf(w, "strip_points: %d\n", r*c)
	fmt.Fprintf(w, "strip_ratio: %g\n", *ratio)
	for _, name := range names {
		if err := ctx.Err(); err != nil {
			return err
		}
		src := rand.NewPCG(*seed, 0x7374726970)
		var x *mat.Dense
		if name == "strip" {
			x = MakeStrip(*points, *ratio, 1, src)
		} else {
			x = MakeSwissRoll(*points, *ratio, src)
		}
		short := mat.Col(nil, 1, x)
		m, _ := x.Dims()
		t0 := time.Now()
		y, err := spectral.LEM(x, *lemDim, ls, rand.NewPCG(*seed, 1))
		if err != nil {
			return fmt.Errorf("bench strip: %s: %w", name, err)
		}
		lemTime := time.Since(t0)
		if err := ctx.Err(); err != nil {
			return err
		}
		t0 = time.Now()
		z, res, err := spectral.NonRedundantLEM(x, 2, ls, nr, rand.NewPCG(*seed, 2))
		if err != nil {
			return fmt.Errorf("bench strip: %s: %w", name, err)
		}
		nrTime := time.Since(t0)

		re := spectral.Redundancy(y.Slice(0, m, 0, 2), spectral.RedundancySettings{})
		rz := spectral.Redundancy(z, spectral.RedundancySettings{})
		col := make([]float64, m)
		firstShort := 0
		for i := 0; i < *lemDim && firstShort == 0; i++ {
			if math.Abs(spearmanRank(mat.Col(col, i, y), short)) >= 0.9 {
				firstShort = i + 1
			}
		}
		fmt.Fprintf(w, "%s_lem_coord2_error: %.4f\n", name, re[1])
		fmt.Fprintf(w, "%s_nonredundant_coord2_error: %.4f\n", name, rz[1])
		fmt.Fprintf(w, "%s_lem_coord2_spearman_short: %.4f\n", name, math.Abs(spearmanRank(mat.Col(col, 1, y), short)))
		fmt.Fprintf(w, "%s_nonredundant_coord2_spearman_short: %.4f\n", name, math.Abs(spearmanRank(mat.Col(col, 1, z), short)))
		fmt.Fprintf(w, "%s_lem_first_short_coord: %d\n", name, firstShort)
		fmt.Fprintf(w, "%s_nonredundant_coord2_rank: %d\n", name, res.Ranks[1])
		fmt.Fprintf(w, "%s_lem_seconds: %.2f\n", name, lemTime.Seconds())
		fmt.Fprintf(w, "%s_nonredundant_seconds: %.2f\n", name, nrTime.Seconds())
	}
	return nil
}

// MakeStrip returns about n points (n×2) spread uniformly on the
// rectangle [0, l1]×[0, l2] by stratified sampling: the rectangle is cut
// into r×c ≈ n equal, nearly square cells and one point is drawn from src
// in each. Column 0 is the long axis, column 1 the short one. It returns
// r·c points, r = round((n·l2/l1)^(1/2)), c = ⌊n/r⌋.
//
// Stratified rather than independent points: the strip's eigenvalues
// λ(0,1) = π²/L2² and λ(1,1) = λ(0,1) + π²/L1² are only 8% apart at
// L1 = 3.5·L2, and the density fluctuations of 2,000 independent points
// perturb the graph Laplacian enough to mix the two eigenfunctions (the
// non-redundant 2nd coordinate's |Spearman| with the short axis fell to
// 0.46 for some seeds, and LEM's 4th coordinate mixed likewise).
func MakeStrip(n int, l1, l2 float64, src rand.Source) *mat.Dense {
	rng := rand.New(src)
	r, c := strata(n, l1/l2)
	x := mat.NewDense(r*c, 2, nil)
	i := 0
	for a := 0; a < r; a++ {
		for b := 0; b < c; b++ {
			x.Set(i, 0, l1*(float64(b)+rng.Float64())/float64(c))
			x.Set(i, 1, l2*(float64(a)+rng.Float64())/float64(r))
			i++
		}
	}
	return x
}

// strata returns the rows r and columns c of about n cells of aspect
// ratio near 1 on a rectangle ratio times as long as high.
func strata(n int, ratio float64) (r, c int) {
	r = max(1, int(math.Round(math.Sqrt(float64(n)/ratio))))
	return r, max(1, n/r)
}

// MakeSwissRoll returns about n points (n×3) of a Swiss roll whose
// unrolled rectangle has a long axis ratio times its short one:
// (t cos t, y, t sin t) with t in [1.5π, 4.5π] and y in [0, L2],
// L2 = 9π²/ratio (9π² ≈ 88.8 is the arc length, ≈ ∫ t dt). Points are
// stratified like MakeStrip's in (s, y), with s uniform in [0, 1] and
// t = (t0² + s·(t1² − t0²))^(1/2), so that they are nearly uniform on the
// surface. Column 1 is the short axis.
func MakeSwissRoll(n int, ratio float64, src rand.Source) *mat.Dense {
	rng := rand.New(src)
	t0, t1 := 1.5*math.Pi, 4.5*math.Pi
	l2 := (t1*t1 - t0*t0) / 2 / ratio
	r, c := strata(n, ratio)
	x := mat.NewDense(r*c, 3, nil)
	i := 0
	for a := 0; a < r; a++ {
		for b := 0; b < c; b++ {
			s := (float64(b) + rng.Float64()) / float64(c)
			t := math.Sqrt(t0*t0 + s*(t1*t1-t0*t0))
			x.Set(i, 0, t*math.Cos(t))
			x.Set(i, 1, l2*(float64(a)+rng.Float64())/float64(r))
			x.Set(i, 2, t*math.Sin(t))
			i++
		}
	}
	return x
}

// spearmanRank returns the Spearman rank correlation of x and y: the Pearson
// correlation of their ranks, ties given their mean rank. It panics if
// the lengths differ.
func spearmanRank(x, y []float64) float64 {
	if len(x) != len(y) {
		panic(mat.ErrShape)
	}
	return stat.Correlation(tieRanks(x), tieRanks(y), nil)
}

// tieRanks returns the ranks of x (0-based), ties given their mean rank.
func tieRanks(x []float64) []float64 {
	idx := make([]int, len(x))
	for i := range idx {
		idx[i] = i
	}
	slices.SortFunc(idx, func(a, b int) int {
		switch {
		case x[a] < x[b]:
			return -1
		case x[a] > x[b]:
			return 1
		}
		return 0
	})
	r := make([]float64, len(x))
	for s := 0; s < len(idx); {
		e := s + 1
		for e < len(idx) && x[idx[e]] == x[idx[s]] {
			e++
		}
		mean := float64(s+e-1) / 2
		for _, i := range idx[s:e] {
			r[i] = mean
		}
		s = e
	}
	return r
}
