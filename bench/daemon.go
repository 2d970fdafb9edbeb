package bench

import (
	"context"
	"io"
	"os"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/smtd/smtd/config"
	"github.com/smtd/smtd/daemon"
)

// inProcess is a daemon running in the benchmark's process on an embedded
// NATS server at a free port, with a client connection to it.
type inProcess struct {
	d   *daemon.Daemon
	nc  *nats.Conn
	js  jetstream.JetStream
	dir string
}

// startDaemon runs one pipeline in this process with data in a temporary
// directory; periodic checkpoints are off (they would be measured too).
// Logs at warn level and above go to logs. Close stops it all.
func startDaemon(ctx context.Context, p config.Pipeline, logs io.Writer) (*inProcess, error) {
	return startDaemonWith(ctx, p, logs, nil)
}

// startDaemonWith is startDaemon with a last change to the config, when
// change is not nil.
func startDaemonWith(ctx context.Context, p config.Pipeline, logs io.Writer, change func(*config.Config)) (*inProcess, error) {
	cfg := config.Default()
	dir, err := os.MkdirTemp("", "smtd-bench-")
	if err != nil {
		return nil, err
	}
	cfg.DataDir = dir
	cfg.NATS.Listen = "127.0.0.1:-1"
	cfg.Log.Level = "warn"
	cfg.Checkpoint.EverySamples = 1 << 40
	cfg.Checkpoint.Every = 24 * time.Hour
	cfg.Checkpoint.ObjectStore = false
	cfg.Pipelines = []config.Pipeline{p}
	if change != nil {
		change(cfg)
	}
	in := &inProcess{dir: dir}
	if in.d, err = daemon.New(cfg, daemon.Options{Logger: daemon.NewLogger(logs, "console")}); err == nil {
		if err = in.d.Start(ctx); err == nil {
			if in.nc, err = nats.Connect(in.d.ClientURL()); err == nil {
				in.js, err = jetstream.New(in.nc)
			}
		}
	}
	if err != nil {
		in.Close()
		return nil, err
	}
	return in, nil
}

// Close stops the daemon and removes its data.
func (in *inProcess) Close() {
	if in.nc != nil {
		in.nc.Close()
	}
	if in.d != nil {
		in.d.Shutdown(context.Background())
	}
	os.RemoveAll(in.dir)
}

// learned returns how many messages the pipeline has learned.
func (in *inProcess) learned() int64 { return in.d.Status().Pipelines[0].Learned }
