package bench

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"time"

	"github.com/nats-io/nats.go"
	"gonum.org/v1/gonum/mat"

	"github.com/smtd/smtd/config"
	"github.com/smtd/smtd/daemon"
	"github.com/smtd/smtd/hebbian"
	"github.com/smtd/smtd/record"
)

// PointMsg is the point p as a raw float32 message of shape 1×len(p), the
// form a KSM pipeline with image height 1 and width len(p) consumes.
func PointMsg(subject string, p []float64) *nats.Msg {
	m := nats.NewMsg(subject)
	m.Header.Set(daemon.HeaderShape, fmt.Sprintf("1,%d", len(p)))
	m.Header.Set(daemon.HeaderDtype, "float32")
	m.Data = make([]byte, 4*len(p))
	for i, v := range p {
		binary.LittleEndian.PutUint32(m.Data[4*i:], math.Float32bits(float32(v)))
	}
	return m
}

// KSMPointsPipeline returns a deterministic KSM pipeline named name that
// reads points of dim coordinates on subject, in minibatches of batch,
// with the network settings s (kernel Gaussian) and initial weights init
// (config.InitRandom or config.InitData).
func KSMPointsPipeline(name, subject string, dim, batch int, s hebbian.Settings, init string) config.Pipeline {
	p := config.DefaultPipeline(config.Image, name)
	p.Input.Subject = subject
	p.Output.Subject = "bench.out." + name
	p.Deterministic = true
	p.Batch.Size = batch
	p.Image = config.ImageShape{Width: dim, Height: 1, Channels: 1}
	p.Learner = config.LearnerKSM
	k := &p.KSM
	k.Neurons, k.Kernel, k.Sigma = s.Neurons, config.KernelGaussian, s.Kernel.(hebbian.Gaussian).Sigma
	k.Mixing, k.Lambda, k.EtaW, k.EtaQ, k.EtaL = s.Mixing, s.Lambda, s.EtaW, s.EtaQ, s.EtaL
	k.AnnealEvery, k.AnnealFactor, k.MaxAnneals = s.AnnealEvery, s.AnnealFactor, s.MaxAnneals
	k.Init = init
	if s.AnnealEvery == 0 {
		k.AnnealEvery, k.MaxAnneals = 1, 0
	}
	return p
}

// moonsThroughDaemon learns the network of settings s, with initial
// weights init, from the points x
// as messages through a daemon: the epochs (a new random order of the
// points each, cut as learnEpochs cuts them) are written to a
// recorded stream, which is replayed through JetStream into a daemon
// running the KSM pipeline in this process; once every message is
// learned the daemon's embed endpoint (which never trains) returns the
// responses to every point. It returns them and the time from the first
// message replayed to the last one learned.
func moonsThroughDaemon(ctx context.Context, x *mat.Dense, s hebbian.Settings, init string, batch, steps int, src rand.Source, logs io.Writer) (*mat.Dense, time.Duration, error) {
	t, dim := x.Dims()
	const subject = "bench.moons"
	f, err := os.CreateTemp("", "smtd-moons-*.smtdrec")
	if err != nil {
		return nil, 0, err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	w, err := record.NewWriter(f)
	if err != nil {
		return nil, 0, err
	}
	err = epochMinibatches(ctx, x, batch, steps, src, func(_ int, mb *mat.Dense) error {
		for i := range mb.RawMatrix().Rows {
			m := PointMsg(subject, mb.RawRowView(i))
			if err := w.Write(&record.Message{Subject: m.Subject, Header: m.Header, Data: m.Data}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, 0, err
	}
	if err := w.Flush(); err != nil {
		return nil, 0, err
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return nil, 0, err
	}
	r, err := record.NewReader(f)
	if err != nil {
		return nil, 0, err
	}

	p := KSMPointsPipeline("moons", subject, dim, batch, s, init)
	in, err := startDaemon(ctx, p, logs)
	if err != nil {
		return nil, 0, err
	}
	defer in.Close()
	start := time.Now()
	if _, err := record.Replay(ctx, in.nc, r, record.ReplayOptions{JetStream: true, Window: 4096}); err != nil {
		return nil, 0, err
	}
	for in.learned() < int64(steps*batch) {
		if err := wait(ctx, 10*time.Millisecond); err != nil {
			return nil, 0, err
		}
	}
	took := time.Since(start)
	y, err := embedAll(in.nc, "smtd.embed."+p.Name, t, func(subject string, i int) *nats.Msg {
		return PointMsg(subject, x.RawRowView(i))
	})
	return y, took, err
}
