package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/smtd/smtd/config"
	"github.com/smtd/smtd/daemon"
)

// benchDaemon is a daemon on an embedded NATS server at a free port,
// running in the benchmark's process or, when proc is not nil, as `smtd
// run` in a process of its own; nc is the benchmark's client connection.
type benchDaemon struct {
	d    *daemon.Daemon
	proc *daemonProcess
	url  string
	nc   *nats.Conn
	js   jetstream.JetStream
	dir  string

	// cfg, logs and process start the daemon again (restartReset), in
	// this process or in one of its own.
	cfg     *config.Config
	logs    io.Writer
	process bool

	// The pipeline's learned count, asked for at most every 2 ms.
	lastLearned int64
	askedAt     time.Time
}

// startDaemon runs one pipeline in this process with data in a temporary
// directory; periodic checkpoints are off (they would be measured too).
// Logs at warn level and above go to logs. Close stops it all.
func startDaemon(ctx context.Context, p config.Pipeline, logs io.Writer) (*benchDaemon, error) {
	return startDaemonWith(ctx, p, logs, nil)
}

// startDaemonWith is startDaemon with a last change to the config, when
// change is not nil.
func startDaemonWith(ctx context.Context, p config.Pipeline, logs io.Writer, change func(*config.Config)) (*benchDaemon, error) {
	cfg, dir, err := benchConfig(p, change)
	if err != nil {
		return nil, err
	}
	in := &benchDaemon{dir: dir, cfg: cfg, logs: logs}
	if err := in.startInProcess(ctx); err != nil {
		in.Close()
		return nil, err
	}
	return in, nil
}

// startInProcess starts the daemon of in.cfg in this process and
// connects the client.
func (in *benchDaemon) startInProcess(ctx context.Context) error {
	var err error
	if in.d, err = daemon.New(in.cfg, daemon.Options{Logger: daemon.NewLogger(in.logs, "console")}); err == nil {
		if err = in.d.Start(ctx); err == nil {
			in.url = in.d.ClientURL()
			err = in.connect()
		}
	}
	return err
}

// startDaemonProcessWith is startDaemonWith with the daemon in a process of
// its own (this executable's `smtd run`, with runArgs), its log in its
// data directory. It returns once the daemon answers status requests.
func startDaemonProcessWith(ctx context.Context, p config.Pipeline, change func(*config.Config), runArgs ...string) (*benchDaemon, error) {
	cfg, dir, err := benchConfig(p, change)
	if err != nil {
		return nil, err
	}
	in := &benchDaemon{dir: dir, cfg: cfg, process: true}
	port, err := freePort()
	if err == nil {
		cfg.NATS.Listen = fmt.Sprintf("127.0.0.1:%d", port)
		in.url = fmt.Sprintf("nats://127.0.0.1:%d", port)
		err = in.startProcess(ctx, runArgs...)
	}
	if err != nil {
		in.Close()
		return nil, err
	}
	return in, nil
}

// startProcess starts `smtd run` on in.cfg and returns once it answers
// status requests.
func (in *benchDaemon) startProcess(ctx context.Context, runArgs ...string) error {
	var err error
	if in.proc, err = startDaemonProcess(in.dir, "daemon", in.cfg, nil, runArgs...); err != nil {
		return err
	}
	return pollUntil(ctx, time.Minute, "the daemon process", func() bool {
		if in.nc == nil && in.connect() != nil {
			return false
		}
		_, err := in.status()
		return err == nil
	})
}

// restartReset stops the daemon, deletes its checkpoints and starts it
// again on the same data: its model starts empty and learns its input
// stream again from the first message, a backlog that is all there
// before it starts, with no publisher running.
func (in *benchDaemon) restartReset(ctx context.Context) error {
	in.stop()
	in.lastLearned, in.askedAt = 0, time.Time{}
	if err := os.RemoveAll(filepath.Join(in.dir, "checkpoints")); err != nil {
		return err
	}
	if in.process {
		return in.startProcess(ctx)
	}
	return in.startInProcess(ctx)
}

// benchConfig is the default config learning p alone, with its data in a
// new temporary directory, logging at warn level, periodic checkpoints
// off (they would be measured too), then changed by change if not nil.
func benchConfig(p config.Pipeline, change func(*config.Config)) (*config.Config, string, error) {
	cfg := config.Default()
	dir, err := os.MkdirTemp("", "smtd-bench-")
	if err != nil {
		return nil, "", err
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
	return cfg, dir, nil
}

// connect opens the benchmark's client connection.
func (in *benchDaemon) connect() error {
	nc, err := nats.Connect(in.url)
	if err != nil {
		return err
	}
	if in.js, err = jetstream.New(nc); err != nil {
		nc.Close()
		return err
	}
	in.nc = nc
	return nil
}

// status asks the daemon for its status.
func (in *benchDaemon) status() (daemon.Status, error) {
	if in.d != nil {
		return in.d.Status(), nil
	}
	return requestStatus(in.nc, config.Default().Subject("status"), time.Second)
}

// requestStatus asks a daemon (in cluster mode, any one) for its status on
// subject, `<prefix>.status`; a status without pipelines is an error.
func requestStatus(nc *nats.Conn, subject string, timeout time.Duration) (daemon.Status, error) {
	var st daemon.Status
	m, err := nc.Request(subject, nil, timeout)
	if err == nil {
		err = json.Unmarshal(m.Data, &st)
	}
	if err == nil && len(st.Pipelines) == 0 {
		err = errors.New("bench: the daemon reports no pipeline")
	}
	return st, err
}

// Close stops the daemon and removes its data.
func (in *benchDaemon) Close() {
	in.stop()
	os.RemoveAll(in.dir)
}

// stop closes the client and stops the daemon, keeping its data.
func (in *benchDaemon) stop() {
	if in.nc != nil {
		in.nc.Close()
		in.nc, in.js = nil, nil
	}
	if in.d != nil {
		in.d.Shutdown(context.Background())
		in.d = nil
	}
	if in.proc != nil {
		in.proc.cmd.Process.Signal(syscall.SIGTERM)
		in.proc.wait()
		in.proc = nil
	}
}

// waitPublished returns once the daemon has published the outputs of n
// messages, asking it every d, or an error after a minute (an output
// the daemon failed to publish is not counted).
func (in *benchDaemon) waitPublished(ctx context.Context, n int, d time.Duration) error {
	return pollEvery(ctx, d, time.Minute, fmt.Sprintf("the outputs of %d messages published", n), func() bool {
		st, err := in.status()
		return err == nil && st.Pipelines[0].Published >= int64(n)
	})
}

// learned returns how many messages the pipeline has learned. The
// daemon is asked at most every 2 ms (a status is not free: it copies
// the latency windows), and a failed request leaves the last answer.
func (in *benchDaemon) learned() int64 {
	if time.Since(in.askedAt) < 2*time.Millisecond {
		return in.lastLearned
	}
	if st, err := in.status(); err == nil {
		in.lastLearned = st.Pipelines[0].Learned
	}
	in.askedAt = time.Now()
	return in.lastLearned
}
