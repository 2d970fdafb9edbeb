package bench

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"gonum.org/v1/gonum/mat"

	"github.com/smtd/smtd/config"
	"github.com/smtd/smtd/hebbian"
)

// Moons measures kernel similarity matching (package hebbian) on the half
// moons of section 4.1: 1600 points of two interleaving half circles with
// Gaussian noise 0.1, centred (scikit-learn's make_moons recipe, drawn
// here from a seeded source), the Gaussian kernel with σ = 0.3 and
// minibatches of 64 (one random permutation of the points per epoch).
// Two networks learn, for each number of neurons n:
//
//   - the paper's ("network"): W ~ N(0, 1), q = 1, L = I, λ = 0.001, and
//     the rates and annealing of appendix A.6: 10,000 steps with
//     η_w = η_q = 0.01, η_l = 0.1, then 10,000 steps with rates ten
//     times lower;
//   - with hebbian.Settings.Mixing ("mixing"): a full regulatory matrix
//     Q, W set to the first n points of the minibatches (what a daemon's
//     ksm.init: data does), λ = 0.0001, η_w = η_q = 0.03 (-mixing-eta),
//     η_l = 0.1 (-mixing-eta-l), annealed twice (30,000 steps).
//
// It prints the normalised error ‖K − YYᵀ‖_F/‖K‖_F over the whole data
// set of
//
//   - moons_nN_network_error, moons_nN_mixing_error: the responses y of
//     each network (eq. 12);
//   - moons_nN_nystrom_network_error, moons_nN_nystrom_mixing_error:
//     Nyström with the network's learned W as landmarks;
//   - moons_nN_kpca_error: kernel PCA, the optimum of rank n;
//   - moons_nN_nystrom_uniform_error: Nyström with n uniformly drawn
//     points as landmarks;
//   - moons_nN_nystrom_kmeans_error: Nyström with the centres of
//     Euclidean k-means (k-means++ seeding, at most 100 Lloyd
//     iterations) as landmarks;
//   - moons_nN_rff_error: n random Fourier features;
//
// and moons_nN_network_train_seconds, moons_nN_mixing_train_seconds, the
// time of the learning steps. With -daemon each network also learns
// from the points as messages through a daemon (first seed only):
// moons_nN_daemon_NAME_error, _seconds and _messages_per_second. The randomised methods (initialisations,
// uniform landmarks, k-means seeding, Fourier features) are repeated
// over -repeats seeds and averaged; the _min lines give the best seed.
//
// For reference, scikit-learn on the same recipe gives at n = 16: kernel
// PCA 0.096, Nyström with k-means landmarks 0.112, uniform landmarks
// 0.44.
func Moons(ctx context.Context, w io.Writer, args []string) error {
	fs := flag.NewFlagSet("bench moons", flag.ContinueOnError)
	points := fs.Int("points", 1600, "number of points")
	noise := fs.Float64("noise", 0.1, "standard deviation of the Gaussian noise added to the moons")
	sigma := fs.Float64("sigma", 0.3, "width σ of the Gaussian kernel")
	neurons := fs.String("n", "2,4,8,16,32,64", "comma-separated numbers of neurons (landmarks, components)")
	variants := fs.String("networks", "network,mixing", "comma-separated networks to train: network (the paper's), mixing")
	batch := fs.Int("batch", 64, "minibatch size")
	steps := fs.Int("steps", 10000, "learning steps between anneals")
	etaW := fs.Float64("eta-w", 0.01, "η_w before annealing")
	etaQ := fs.Float64("eta-q", 0.01, "η_q before annealing")
	etaL := fs.Float64("eta-l", 0.1, "η_l before annealing")
	anneal := fs.Float64("anneal", 0.1, "factor applied to the three rates at each anneal")
	lambda := fs.Float64("lambda", 0.001, "λ of eq. 8 (the paper's network)")
	anneals := fs.Int("anneals", 1, "anneals of the paper's network; it learns (anneals+1)·steps steps")
	mixLambda := fs.Float64("mixing-lambda", 0.0001, "λ of the mixing network (responses and Q)")
	mixAnneals := fs.Int("mixing-anneals", 2, "anneals of the mixing network")
	mixEta := fs.Float64("mixing-eta", 0.03, "η_w and η_q of the mixing network before annealing")
	mixEtaL := fs.Float64("mixing-eta-l", 0.1, "η_l of the mixing network before annealing")
	kmIters := fs.Int("kmeans-iters", 100, "maximum Lloyd iterations of the k-means landmarks")
	repeats := fs.Int("repeats", 3, "seeds to average the randomised methods over")
	seed := fs.Uint64("seed", 1, "seed of the data and of the first repeat")
	throughDaemon := fs.Bool("daemon", false, "also learn each network from the points as messages: a recorded stream of the epochs replayed through JetStream into a daemon in this process (once per n, first seed)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *points < 2 || *batch < 1 || *steps < 0 || *repeats < 1 || *anneals < 0 || *mixAnneals < 0 {
		return errors.New("bench moons: -points must be >= 2, -batch and -repeats >= 1, -steps and -anneals >= 0")
	}
	ns, err := parseInts(*neurons)
	if err != nil {
		return fmt.Errorf("bench moons: -n %q: %w", *neurons, err)
	}
	for _, n := range ns {
		if n > *points {
			return fmt.Errorf("bench moons: %d neurons for %d points", n, *points)
		}
	}
	var nets []string
	for _, v := range strings.Split(*variants, ",") {
		v = strings.TrimSpace(v)
		if v != "network" && v != "mixing" {
			return fmt.Errorf("bench moons: -networks %q: want network and/or mixing", *variants)
		}
		nets = append(nets, v)
	}
	kernel := hebbian.Gaussian{Sigma: *sigma}
	if err := kernel.Validate(); err != nil {
		return err
	}
	settings := func(name string, n int) (hebbian.Settings, int) {
		s := hebbian.Settings{
			Neurons: n, Dim: 2, Kernel: kernel, Lambda: *lambda,
			EtaW: *etaW, EtaQ: *etaQ, EtaL: *etaL,
			AnnealEvery: int64(*steps), AnnealFactor: *anneal, MaxAnneals: *anneals,
		}
		if name == "mixing" {
			s.Mixing, s.Lambda, s.MaxAnneals = true, *mixLambda, *mixAnneals
			s.EtaW, s.EtaQ, s.EtaL = *mixEta, *mixEta, *mixEtaL
		}
		if s.MaxAnneals == 0 {
			s.AnnealEvery = 0
		}
		return s, (max(s.MaxAnneals, 0) + 1) * *steps
	}

	writeMachine(w)
	x := MakeMoons(*points, *noise, rand.NewPCG(*seed, 0x6d6f6f6e73))
	var k mat.SymDense
	hebbian.KernelMatrix(&k, kernel, x)
	fmt.Fprintf(w, "moons_points: %d\n", *points)
	fmt.Fprintf(w, "moons_repeats: %d\n", *repeats)
	for _, name := range nets {
		_, total := settings(name, 1)
		fmt.Fprintf(w, "moons_%s_steps: %d\n", name, total)
	}

	maxN := 0
	for _, n := range ns {
		maxN = max(maxN, n)
	}
	var kpca mat.Dense
	if err := hebbian.KernelPCA(&kpca, &k, maxN); err != nil {
		return err
	}

	// mean and best of the repeats, by figure name.
	type stat struct{ sum, low float64 }
	for _, n := range ns {
		stats := map[string]*stat{}
		var order []string
		add := func(name string, e float64) {
			st, ok := stats[name]
			if !ok {
				st = &stat{low: math.Inf(1)}
				stats[name] = st
				order = append(order, name)
			}
			st.sum += e
			st.low = min(st.low, e)
		}
		nystrom := func(landmarks mat.Matrix) (float64, error) {
			var y mat.Dense
			if err := hebbian.Nystrom(&y, kernel, x, landmarks); err != nil {
				return 0, err
			}
			return hebbian.NormalizedError(&k, &y), nil
		}
		for r := range *repeats {
			s := *seed + uint64(r)
			for _, name := range nets {
				if err := ctx.Err(); err != nil {
					return err
				}
				st, total := settings(name, n)
				net := hebbian.New(st, rand.NewPCG(s, uint64(n)))
				if name == "mixing" {
					head, err := streamHead(ctx, x, n, *batch, rand.NewPCG(s, 0x6261746368))
					if err != nil {
						return err
					}
					if err := net.SetWeights(head); err != nil {
						return err
					}
				}
				start := time.Now()
				if err := learnEpochs(ctx, net, x, *batch, total, rand.NewPCG(s, 0x6261746368)); err != nil {
					return fmt.Errorf("bench moons: %s, n = %d: %w", name, n, err)
				}
				add(name+"_train_seconds", time.Since(start).Seconds())
				var y mat.Dense
				net.Transform(&y, x)
				add(name+"_error", hebbian.NormalizedError(&k, &y))
				e, err := nystrom(net.Weights())
				if err != nil {
					return err
				}
				add("nystrom_"+name+"_error", e)
			}
			var lm mat.Dense
			hebbian.UniformLandmarks(&lm, x, n, rand.NewPCG(s, 0x756e69))
			e, err := nystrom(&lm)
			if err != nil {
				return err
			}
			add("nystrom_uniform_error", e)
			lm.Reset()
			hebbian.KMeansLandmarks(&lm, x, n, *kmIters, rand.NewPCG(s, 0x6b6d))
			if e, err = nystrom(&lm); err != nil {
				return err
			}
			add("nystrom_kmeans_error", e)
			var y mat.Dense
			hebbian.RandomFourier(&y, x, n, *sigma, rand.NewPCG(s, 0x726666))
			add("rff_error", hebbian.NormalizedError(&k, &y))
		}
		for _, name := range nets {
			if !*throughDaemon {
				break
			}
			st, total := settings(name, n)
			init := config.InitRandom
			if name == "mixing" {
				init = config.InitData
			}
			y, took, err := moonsThroughDaemon(ctx, x, st, init, *batch, total, rand.NewPCG(*seed, 0x6261746368), io.Discard)
			if err != nil {
				return fmt.Errorf("bench moons: %s through the daemon, n = %d: %w", name, n, err)
			}
			fmt.Fprintf(w, "moons_n%d_daemon_%s_error: %.4f\n", n, name, hebbian.NormalizedError(&k, y))
			fmt.Fprintf(w, "moons_n%d_daemon_%s_seconds: %.2f\n", n, name, took.Seconds())
			fmt.Fprintf(w, "moons_n%d_daemon_%s_messages_per_second: %.0f\n", n, name, float64(total**batch)/took.Seconds())
		}
		fmt.Fprintf(w, "moons_n%d_kpca_error: %.4f\n", n, hebbian.NormalizedError(&k, kpca.Slice(0, *points, 0, n)))
		rep := float64(*repeats)
		for _, name := range order {
			st := stats[name]
			if strings.HasSuffix(name, "_seconds") {
				fmt.Fprintf(w, "moons_n%d_%s: %.2f\n", n, name, st.sum/rep)
				continue
			}
			fmt.Fprintf(w, "moons_n%d_%s: %.4f\n", n, name, st.sum/rep)
			if *repeats > 1 {
				fmt.Fprintf(w, "moons_n%d_%s_min: %.4f\n", n, name, st.low)
			}
		}
	}
	return nil
}

// streamHead returns the first n points of the minibatches
// epochMinibatches cuts from x with src: the points a daemon with
// ksm.init: data makes the rows of W when x arrives in that order.
func streamHead(ctx context.Context, x *mat.Dense, n, batch int, src rand.Source) (*mat.Dense, error) {
	_, dim := x.Dims()
	head := mat.NewDense(n, dim, nil)
	got := 0
	err := epochMinibatches(ctx, x, batch, (n+batch-1)/batch, src, func(_ int, mb *mat.Dense) error {
		for i := 0; i < mb.RawMatrix().Rows && got < n; i++ {
			head.SetRow(got, mb.RawRowView(i))
			got++
		}
		return nil
	})
	return head, err
}

// learnEpochs takes steps learning steps of net on minibatches of x (see
// epochMinibatches). A refused step (hebbian.StepError) is an error here:
// the benchmark reports divergence instead of hiding it.
func learnEpochs(ctx context.Context, net *hebbian.Network, x *mat.Dense, batch, steps int, src rand.Source) error {
	return epochMinibatches(ctx, x, batch, steps, src, func(_ int, mb *mat.Dense) error { return net.Step(nil, mb) })
}

// epochMinibatches calls step steps times with a minibatch of rows of x
// and the number of the step (from 1): each epoch visits the rows in a
// new random order drawn from src, cut into minibatches of batch rows
// (the last, shorter one included). mb is a view, valid during the call.
// It stops at the first error of step or of ctx.
func epochMinibatches(ctx context.Context, x *mat.Dense, batch, steps int, src rand.Source, step func(s int, mb *mat.Dense) error) error {
	t, m := x.Dims()
	rng := rand.New(src)
	perm := make([]int, t)
	for i := range perm {
		perm[i] = i
	}
	mb := mat.NewDense(batch, m, nil)
	pos := t
	for s := 1; s <= steps; s++ {
		if s%64 == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		if pos >= t {
			rng.Shuffle(t, func(i, j int) { perm[i], perm[j] = perm[j], perm[i] })
			pos = 0
		}
		b := min(batch, t-pos)
		for i := range b {
			mb.SetRow(i, x.RawRowView(perm[pos+i]))
		}
		pos += b
		if err := step(s, mb.Slice(0, b, 0, m).(*mat.Dense)); err != nil {
			return err
		}
	}
	return nil
}

// MakeMoons returns n points (n×2) of scikit-learn's make_moons recipe,
// centred: ⌊n/2⌋ points (cos θ, sin θ) and ⌈n/2⌉ points
// (1 − cos θ, 1/2 − sin θ), θ evenly spaced over [0, π], shuffled, plus
// N(0, noise²) noise on both coordinates, all drawn from src; then the
// mean is subtracted.
func MakeMoons(n int, noise float64, src rand.Source) *mat.Dense {
	rng := rand.New(src)
	out := n / 2
	in := n - out
	x := mat.NewDense(n, 2, nil)
	arc := func(i, k int) float64 {
		if k == 1 {
			return 0
		}
		return math.Pi * float64(i) / float64(k-1)
	}
	for i := range out {
		th := arc(i, out)
		x.Set(i, 0, math.Cos(th))
		x.Set(i, 1, math.Sin(th))
	}
	for i := range in {
		th := arc(i, in)
		x.Set(out+i, 0, 1-math.Cos(th))
		x.Set(out+i, 1, 0.5-math.Sin(th))
	}
	rng.Shuffle(n, func(i, j int) {
		ri, rj := x.RawRowView(i), x.RawRowView(j)
		ri[0], rj[0] = rj[0], ri[0]
		ri[1], rj[1] = rj[1], ri[1]
	})
	var mean [2]float64
	for i := range n {
		for j := range 2 {
			v := x.At(i, j) + noise*rng.NormFloat64()
			x.Set(i, j, v)
			mean[j] += v / float64(n)
		}
	}
	for i := range n {
		for j := range 2 {
			x.Set(i, j, x.At(i, j)-mean[j])
		}
	}
	return x
}

// parseInts parses comma-separated positive integers.
func parseInts(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		v, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || v < 1 {
			return nil, errors.New("want positive integers separated by commas")
		}
		out = append(out, v)
	}
	return out, nil
}
