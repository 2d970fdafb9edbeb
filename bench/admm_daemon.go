package bench

import (
	"context"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"time"

	"github.com/nats-io/nats.go"
	"gonum.org/v1/gonum/mat"

	"github.com/smtd/smtd/config"
	"github.com/smtd/smtd/daemon"
	"github.com/smtd/smtd/sgd"
)

// admmThroughDaemon runs admmRealData's recipe on images x (pixels in
// [0, 1], side×side) as a stream through a daemon in this process: an
// admm pipeline with the settings s, whose warm start (admm.warm_start)
// takes kmEpochs epochs of the images in shuffled order (rounded up to
// whole minibatches), followed by
// iters minibatches of batch images in shuffled epochs, all as raw uint8
// messages through JetStream. Once every message is learned, a checkpoint
// publishes the atoms (the implicit dictionary A) and the embed endpoint,
// which never trains, returns the codes z of every image. It returns
// R² = 1 − Σ‖x − Aᵀz‖² / Σ‖x − x̄‖² and the time from the first message
// to the last one learned.
func admmThroughDaemon(ctx context.Context, x *mat.Dense, side int, s sgd.ADMMSettings, batch, iters, kmEpochs int, seed uint64, logs io.Writer) (float64, time.Duration, error) {
	t, n := x.Dims()
	p := config.DefaultPipeline(config.Image, "digits")
	p.Input.Subject = "bench.digits"
	p.Output.Subject = "bench.out.digits"
	p.Deterministic = true
	p.Batch.Size = batch
	p.Image = config.ImageShape{Width: side, Height: side, Channels: 1}
	p.Learner = config.LearnerADMM
	a := &p.ADMM
	a.Atoms, a.Schedule, a.Lambda, a.Omega, a.Rho = s.K, int(s.Schedule), s.Lambda, s.Omega, s.Rho
	a.LearningRate, a.Iterations, a.Passes, a.Memory = s.LearningRate, s.Iterations, s.Passes, s.Memory
	// Deterministic batches are whole: the warm start is rounded up to
	// whole minibatches.
	warm := (kmEpochs*t + batch - 1) / batch * batch
	a.WarmStart = int64(warm)
	if s.Prior == sgd.PriorSimplex {
		a.Prior = config.PriorSimplex
	}
	in, err := startDaemon(ctx, p, logs)
	if err != nil {
		return 0, 0, err
	}
	defer in.Close()
	msg := func(subject string, i int) *nats.Msg {
		m := nats.NewMsg(subject)
		m.Header.Set(daemon.HeaderShape, fmt.Sprintf("%d,%d", side, side))
		m.Header.Set(daemon.HeaderDtype, "uint8")
		m.Data = make([]byte, n)
		for j, v := range x.RawRowView(i) {
			m.Data[j] = uint8(math.Round(255 * v))
		}
		return m
	}
	rng := rand.New(rand.NewPCG(seed, 0x6d62))
	total := warm + iters*batch
	start := time.Now()
	var perm []int
	for sent := 0; sent < total; sent++ {
		i := sent // position in the current epoch
		if sent >= warm {
			i = sent - warm
		}
		if i%t == 0 {
			perm = rng.Perm(t)
		}
		if _, err := in.js.PublishMsgAsync(msg(p.Input.Subject, perm[i%t])); err != nil {
			return 0, 0, err
		}
		for int64(sent)-in.learned() > 4096 {
			if err := wait(ctx, 2*time.Millisecond); err != nil {
				return 0, 0, err
			}
		}
	}
	for in.learned() < int64(total) {
		if err := wait(ctx, 10*time.Millisecond); err != nil {
			return 0, 0, err
		}
	}
	took := time.Since(start)

	cfg := config.Default()
	sub, err := in.nc.SubscribeSync(p.Output.Subject + ".atoms")
	if err != nil {
		return 0, 0, err
	}
	if _, err := in.nc.Request(cfg.Subject("control.checkpoint"), nil, 10*time.Minute); err != nil {
		return 0, 0, fmt.Errorf("checkpoint: %w", err)
	}
	am, err := sub.NextMsg(time.Minute)
	if err != nil {
		return 0, 0, fmt.Errorf("atoms: %w", err)
	}
	atoms, err := daemon.DecodeMatrix(am.Header, am.Data)
	if err != nil {
		return 0, 0, err
	}
	z, err := embedAll(in.nc, cfg.EmbedSubject(p.Name), t, msg)
	if err != nil {
		return 0, 0, err
	}
	var xh mat.Dense
	xh.Mul(z, atoms)
	return rSquared(x, &xh), took, nil
}

// rSquared returns 1 − Σ‖x − x̂‖² / Σ‖x − x̄‖² over the rows.
func rSquared(x, xh *mat.Dense) float64 {
	t, n := x.Dims()
	mean := make([]float64, n)
	for i := range t {
		for j, v := range x.RawRowView(i) {
			mean[j] += v / float64(t)
		}
	}
	var sse, sst float64
	for i := range t {
		for j, v := range x.RawRowView(i) {
			e, c := v-xh.At(i, j), v-mean[j]
			sse += e * e
			sst += c * c
		}
	}
	return 1 - sse/sst
}
