package bench

import (
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"gonum.org/v1/gonum/mat"

	"github.com/smtd/smtd/config"
	"github.com/smtd/smtd/daemon"
	"github.com/smtd/smtd/dataset"
	"github.com/smtd/smtd/online"
)

// MNIST streams the MNIST training set through NATS into a daemon running
// in this process (embedded server), in order, as many passes as asked: the
// learner never gets random access to the data. It then asks the daemon's
// embed endpoint (which never trains) for the embeddings of the training
// and test images, and reports the soft-KNN top-1 accuracy of
// smt-minimalistic App. J (K = 30, T = 0.03, cosine) with wall time and
// throughput per stage. With -seeds N it runs the same recipe N times from
// consecutive seeds and also reports the spread of the top-1 scores.
func MNIST(ctx context.Context, w io.Writer, args []string) error {
	fs := flag.NewFlagSet("bench mnist", flag.ContinueOnError)
	def := config.DefaultPipeline(config.Image, "")
	dir := fs.String("mnist", "../shared/data/mnist", "`directory` with the MNIST IDX files (gzip'd or not)")
	nTrain := fs.Int("train", 60000, "training images streamed (the first N)")
	nTest := fs.Int("test", 10000, "test images embedded (the first M)")
	validation := fs.Int("validation", 0, "hold out the last `N` training images and score on them instead of the test set (for choosing settings without looking at the test set)")
	atoms := fs.Int("k", 4096, "dictionary size K")
	dim := fs.Int("dim", 32, "SMT embedding dimension")
	ctxRange := fs.Int("context", 3, "SMT context range in patch positions (0: whole image)")
	solver := fs.String("solver", config.SolverSGD, "SMT solver: sgd or closed")
	blank := fs.String("blank", "atom", "blank patches: atom or skip")
	drop := fs.Int("drop", 0, "smt.drop: smallest eigenvectors left out (sgd: 0 or 1, the constant)")
	nonRedundant := fs.Bool("nonredundant", false, "closed solver: choose the rows of P non-redundantly (Blau and Michaeli, Alg. 1); implies -solver closed")
	passes := fs.Int("passes", 2, "passes over the training stream")
	batch := fs.Int("batch", 32, "images per minibatch")
	mean := fs.Int("mean-context", 3, "range d of the contextual mean")
	lambda := fs.Float64("lambda", 0.1, "whitening λ")
	minNorm := fs.Float64("min-norm", def.Patches.MinNorm, "whitened patches with a smaller norm are blank (patches.min_norm)")
	smtMemory := fs.Float64("smt-memory", def.SMT.Memory, "patches the SMT statistics average over (0: never forget)")
	smtRate := fs.Float64("smt-rate", def.SMT.LearningRate, "SMT SGD rate η (smt.learning_rate)")
	smtDecay := fs.Float64("smt-decay", def.SMT.Decay, "SMT SGD rate decay per step (smt.decay)")
	kmDecay := fs.Float64("kmeans-decay", 0, "k-means rate decay per batch (anneals the dictionary)")
	kmMemory := fs.Float64("kmeans-memory", def.KMeans.Memory, "assigned patches an atom of average use averages over (inf: never forget)")
	raw := fs.Bool("raw", false, "also report soft-KNN on raw pixels")
	cpuprofile := fs.String("cpuprofile", "", "write a CPU profile of the whole run to `file`")
	seed := fs.Uint64("seed", def.Seed, "the pipeline's seed (k-means++ seeding and re-seeding, the SMT's initial P)")
	seeds := fs.Int("seeds", 1, "runs, each from a new daemon, with seeds seed, seed+1, …; the per-run lines are the first run's, top1_* sum up all")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *passes < 1 {
		return errors.New("bench mnist: -passes must be at least 1")
	}
	if *seeds < 1 {
		return errors.New("bench mnist: -seeds must be at least 1")
	}
	train, err := dataset.ReadMNIST(*dir, "train")
	if err != nil {
		return err
	}
	test, err := dataset.ReadMNIST(*dir, "t10k")
	if err != nil {
		return err
	}
	if *validation < 0 || *validation >= train.N {
		return fmt.Errorf("bench mnist: -validation must be in [0, %d), got %d", train.N, *validation)
	}
	if *validation > 0 {
		train, test = train.Split(train.N - *validation)
	}
	*nTrain, *nTest = min(*nTrain, train.N), min(*nTest, test.N)

	p := mnistPipeline(*atoms)
	p.Batch.Size = *batch
	p.Patches.Context = *mean
	p.Whiten.Lambda = *lambda
	p.Patches.MinNorm = *minNorm
	p.KMeans.Decay = *kmDecay
	p.KMeans.Memory = *kmMemory
	p.SMT.Memory = *smtMemory
	p.SMT.LearningRate, p.SMT.Decay = *smtRate, *smtDecay
	p.SMT.Dim, p.SMT.Context, p.SMT.Solver, p.SMT.Blank, p.SMT.Drop = *dim, *ctxRange, *solver, *blank, *drop
	if p.SMT.NonRedundant = *nonRedundant; *nonRedundant {
		p.SMT.Solver = config.SolverClosed
	}
	stopProfile, err := StartCPUProfile(*cpuprofile)
	if err != nil {
		return err
	}
	defer stopProfile()
	runs := make([]mnistRun, *seeds)
	for i := range runs {
		p.Seed = *seed + uint64(i)
		if runs[i], err = runMNIST(ctx, p, train, test, *nTrain, *nTest, *passes); err != nil {
			return err
		}
	}
	r := runs[0]

	patches := p.PatchesPerImage()
	seen := float64(*passes * *nTrain)
	line := func(name string, v any) { fmt.Fprintf(w, "%s: %v\n", name, v) }
	line("train_images", *nTrain)
	line("test_images", *nTest)
	line("validation", fmt.Sprint(*validation > 0))
	line("passes", *passes)
	line("k", *atoms)
	line("dim", *dim)
	line("context", *ctxRange)
	line("solver", p.SMT.Solver)
	line("nonredundant", fmt.Sprint(*nonRedundant))
	line("drop", *drop)
	line("blank", *blank)
	line("kmeans_memory", *kmMemory)
	line("smt_memory", *smtMemory)
	line("smt_rate", *smtRate)
	line("smt_decay", *smtDecay)
	line("mean_context", *mean)
	line("lambda", *lambda)
	line("min_norm", *minNorm)
	line("kmeans_decay", *kmDecay)
	line("batch", *batch)
	line("seed", *seed)
	line("embedding_size", r.embeddingSize)
	line("learn_seconds", fmt.Sprintf("%.1f", r.learn.Seconds()))
	line("learn_images_per_s", fmt.Sprintf("%.0f", seen/r.learn.Seconds()))
	line("learn_patches_per_s", fmt.Sprintf("%.0f", seen*float64(patches)/r.learn.Seconds()))
	line("atoms_reseeded", r.reseeded)
	line("smt_atom_steps_bounded", r.bounded)
	line("smt_steps", r.steps)
	line("solve_seconds", fmt.Sprintf("%.1f", r.solve.Seconds()))
	line("embed_seconds", fmt.Sprintf("%.1f", r.embed.Seconds()))
	line("embed_images_per_s", fmt.Sprintf("%.0f", float64(*nTrain+*nTest)/r.embed.Seconds()))
	line("knn_seconds", fmt.Sprintf("%.1f", r.knn.Seconds()))
	line("wall_seconds", fmt.Sprintf("%.1f", r.wall.Seconds()))
	line("top1", fmt.Sprintf("%.2f", 100*r.top1))
	line("top1_cosine_vote", fmt.Sprintf("%.2f", 100*r.top1Cosine))
	if len(runs) > 1 {
		// The same recipe from other seeds: the spread that one run's
		// top-1 carries besides the test set's sampling error.
		scores := make([]string, len(runs))
		lo, hi, sum, sumCosine := math.Inf(1), math.Inf(-1), 0.0, 0.0
		for i, run := range runs {
			scores[i] = fmt.Sprintf("%.2f", 100*run.top1)
			lo, hi, sum = min(lo, run.top1), max(hi, run.top1), sum+run.top1
			sumCosine += run.top1Cosine
		}
		line("seeds", len(runs))
		line("top1_seeds", strings.Join(scores, " "))
		line("top1_mean", fmt.Sprintf("%.3f", 100*sum/float64(len(runs))))
		line("top1_min", fmt.Sprintf("%.2f", 100*lo))
		line("top1_max", fmt.Sprintf("%.2f", 100*hi))
		line("top1_cosine_vote_mean", fmt.Sprintf("%.3f", 100*sumCosine/float64(len(runs))))
	}
	if *raw {
		top1, _, err := knnTop1(pixelMatrix(train, *nTrain), train, pixelMatrix(test, *nTest), test)
		if err != nil {
			return err
		}
		line("raw_pixels_top1", fmt.Sprintf("%.2f", 100*top1))
	}
	return nil
}

// mnistRun is what one run of bench mnist measured.
type mnistRun struct {
	learn, solve, embed, knn, wall time.Duration
	reseeded, bounded, steps       any // the daemon's status figures
	embeddingSize                  int
	top1, top1Cosine               float64 // soft-KNN, exp and cosine votes
}

// runMNIST streams passes over the first nTrain images of train into a
// new daemon learning p, embeds them and the first nTest of test through
// its embed endpoint, and scores the soft-KNN top-1.
func runMNIST(ctx context.Context, p config.Pipeline, train, test *dataset.Images, nTrain, nTest, passes int) (mnistRun, error) {
	var r mnistRun
	start := time.Now()
	in, err := startDaemon(ctx, p, os.Stderr)
	if err != nil {
		return r, err
	}
	defer in.Close()
	nc, js, learned := in.nc, in.js, in.learned
	cfg := config.Default() // the subjects of the daemon's endpoints
	t0 := time.Now()
	for pass := range passes {
		for i := range nTrain {
			if _, err := js.PublishMsgAsync(imageMsg(p.Input.Subject, train, i)); err != nil {
				return r, err
			}
			// Publish a little ahead of the daemon, not the whole set.
			for int64(pass*nTrain+i)-learned() > 2048 {
				if err := wait(ctx, 2*time.Millisecond); err != nil {
					return r, err
				}
			}
		}
	}
	for learned() < int64(passes*nTrain) {
		if err := wait(ctx, 2*time.Millisecond); err != nil {
			return r, err
		}
	}
	r.learn = time.Since(t0)
	st, err := in.status()
	if err != nil {
		return r, fmt.Errorf("bench mnist: status: %w", err)
	}
	r.reseeded = st.Pipelines[0].Model["atoms_reseeded"]
	r.bounded = st.Pipelines[0].Model["smt_atom_steps_bounded"]
	r.steps = st.Pipelines[0].Model["smt_steps"]

	// A checkpoint brings a closed-form P up to date (one solve).
	t0 = time.Now()
	if _, err := nc.Request(cfg.Subject("control.checkpoint"), nil, 10*time.Minute); err != nil {
		return r, fmt.Errorf("bench mnist: checkpoint: %w", err)
	}
	r.solve = time.Since(t0)

	t0 = time.Now()
	trainX, err := embedAll(nc, cfg.EmbedSubject(p.Name), nTrain, func(s string, i int) *nats.Msg { return imageMsg(s, train, i) })
	if err != nil {
		return r, fmt.Errorf("bench mnist: %w", err)
	}
	testX, err := embedAll(nc, cfg.EmbedSubject(p.Name), nTest, func(s string, i int) *nats.Msg { return imageMsg(s, test, i) })
	if err != nil {
		return r, fmt.Errorf("bench mnist: %w", err)
	}
	r.embed = time.Since(t0)
	r.embeddingSize = trainX.RawMatrix().Cols

	t0 = time.Now()
	if r.top1, r.top1Cosine, err = knnTop1(trainX, train, testX, test); err != nil {
		return r, err
	}
	r.knn = time.Since(t0)
	r.wall = time.Since(start)
	return r, nil
}

// imageMsg is image i as a raw uint8 message with its label.
func imageMsg(subject string, im *dataset.Images, i int) *nats.Msg {
	m := nats.NewMsg(subject)
	m.Header.Set(daemon.HeaderShape, fmt.Sprintf("%d,%d", im.Rows, im.Cols))
	m.Header.Set(daemon.HeaderDtype, "uint8")
	m.Header.Set(daemon.HeaderLabel, strconv.Itoa(int(im.Labels[i])))
	m.Data = im.Image(i)
	return m
}

// embedAll asks the embed endpoint on subject for the embeddings of n
// inputs, msg(subject, i) building the request of input i.
//
// Requests go out from embedInFlight goroutines at once, as concurrent
// clients would send them, so that every query worker of the daemon
// (one per core by default) has one to encode.
func embedAll(nc *nats.Conn, subject string, n int, msg func(subject string, i int) *nats.Msg) (*mat.Dense, error) {
	if n == 0 {
		return nil, nil
	}
	embed := func(i int) ([]byte, error) {
		rep, err := nc.RequestMsg(msg(subject, i), time.Minute)
		if err != nil {
			return nil, fmt.Errorf("embedding input %d: %w", i, err)
		}
		if e := rep.Header.Get("Nats-Service-Error"); e != "" {
			return nil, fmt.Errorf("embedding input %d: %s", i, e)
		}
		return rep.Data, nil
	}
	first, err := embed(0)
	if err != nil {
		return nil, err
	}
	dim := len(first) / 4
	x := mat.NewDense(n, dim, nil)
	put := func(i int, data []byte) error {
		if len(data) != 4*dim {
			return fmt.Errorf("embedding input %d: %d bytes, the first had %d", i, len(data), 4*dim)
		}
		row := x.RawRowView(i)
		for j := range row {
			row[j] = float64(math.Float32frombits(binary.LittleEndian.Uint32(data[4*j:])))
		}
		return nil
	}
	if err := put(0, first); err != nil {
		return nil, err
	}
	next := make(chan int)
	errs := make(chan error, embedInFlight)
	var wg sync.WaitGroup
	for range embedInFlight {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				data, err := embed(i)
				if err == nil {
					err = put(i, data)
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	var failed error
feed:
	for i := 1; i < n; i++ {
		select {
		case next <- i:
		case failed = <-errs:
			break feed
		}
	}
	close(next)
	wg.Wait()
	close(errs)
	if failed == nil {
		failed = <-errs
	}
	if failed != nil {
		return nil, failed
	}
	return x, nil
}

// embedInFlight is how many embed requests embedAll keeps in flight.
const embedInFlight = 8

func pixelMatrix(im *dataset.Images, n int) *mat.Dense {
	x := mat.NewDense(n, im.Rows*im.Cols, nil)
	for i := range n {
		row := x.RawRowView(i)
		for j, v := range im.Image(i) {
			row[j] = float64(v) / 255
		}
	}
	return x
}

// knnTop1 is the soft-KNN top-1 accuracy of the test rows given the
// labelled training rows, under the two readings of smt-minimalistic
// App. J (online.KNNVote): neighbours weighed by exp(cos/T), and by their
// cosine, as the appendix writes it.
func knnTop1(trainX *mat.Dense, train *dataset.Images, testX *mat.Dense, test *dataset.Images) (exp, cosine float64, err error) {
	n, c := trainX.Dims()
	m, _ := testX.Dims()
	trainY, testY := make([]int, n), make([]int, m)
	for i := range trainY {
		trainY[i] = int(train.Labels[i])
	}
	for i := range testY {
		testY[i] = int(test.Labels[i])
	}
	k := online.NewKNN(online.KNNSettings{}, c)
	if err := k.Add(trainX, trainY); err != nil {
		return 0, 0, err
	}
	pred := [][]int{make([]int, m), make([]int, m)}
	// The test rows are classified in one contiguous part per core at
	// once: Classify only reads the KNN, and each row's neighbours are
	// those it would have alone.
	parts := min(runtime.GOMAXPROCS(0), m)
	errs := make([]error, parts)
	var wg sync.WaitGroup
	for p := range parts {
		q0, q1 := p*m/parts, (p+1)*m/parts
		wg.Go(func() {
			part := [][]int{pred[0][q0:q1], pred[1][q0:q1]}
			errs[p] = k.ClassifyVotes(part, []online.KNNVote{online.VoteExp, online.VoteCosine}, testX.Slice(q0, q1, 0, c))
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return 0, 0, err
	}
	return online.Top1(pred[0], testY), online.Top1(pred[1], testY), nil
}
