package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"
	"github.com/rs/zerolog"

	"github.com/smtd/smtd/config"
)

// Version is the daemon's version, reported by the micro service.
const Version = "0.1.0"

// Options are the daemon's settings that do not come from the config file.
type Options struct {
	// ConfigPath is the file a reload without a body re-reads; empty when
	// the daemon runs on the built-in default.
	ConfigPath string
	// Logger receives the daemon's logs. Its level is changed by reloads
	// that change log.level, so pass a logger built with NewLogger.
	Logger *Logger
	// Override, when not nil, changes the config New is given and every
	// config a reload reads: settings of the command line, which win over
	// the file's at every reload too.
	Override func(*config.Config)
}

// Daemon hosts the pipelines of one configuration.
type Daemon struct {
	opts Options
	log  zerolog.Logger

	mu            sync.Mutex // guards cfg and configVersion (reloads)
	cfg           *config.Config
	configVersion int
	// fixed is the config the daemon started with, for its fields that
	// cannot change live (a reload that changes one is refused): any
	// goroutine may read those from it without the lock.
	fixed *config.Config

	server *server.Server // nil with an external server
	nc     *nats.Conn
	js     jetstream.JetStream
	store  *checkpointStore // nil when disabled or unavailable
	// cluster is this daemon's part in cluster mode; nil outside it.
	cluster *cluster
	svc     micro.Service
	// qnc is the query workers' own connection for their replies: on the
	// pipelines' connection a reply waits behind the outputs and acks
	// of learning for the connection's lock and flusher.
	qnc *nats.Conn
	// queries serves the embed and neighbours endpoints; nil until the
	// service is added.
	queries *queryPool
	http    *httpServer // nil unless observe.http is set

	// storage says why JetStream is disabled on the embedded server; nil
	// while it runs.
	storage atomic.Pointer[string]
	// writeErr is the first JetStream write error the embedded server
	// logged since JetStream last started.
	writeErr atomic.Pointer[string]
	identity []nats.Option // the daemon's credentials on the embedded server
	procs    learnerProcs  // GOMAXPROCS while learners run niced (reserveLearnerProcs)
	// member is the daemon's name in cluster mode (cluster.name, or host
	// and process ID); "" otherwise.
	member string

	pipelines []*pipeline
	cancel    context.CancelFunc
	wg        sync.WaitGroup

	shutdownOnce sync.Once
	shutdownErr  error
}

// New returns a daemon for cfg; Start brings it up.
func New(cfg *config.Config, opts Options) (*Daemon, error) {
	if opts.Override != nil {
		opts.Override(cfg)
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if opts.Logger == nil {
		opts.Logger = NewLogger(os.Stderr, "json")
	}
	opts.Logger.SetLevel(cfg.Log.Level)
	return &Daemon{opts: opts, cfg: cfg, fixed: cfg, configVersion: 1, log: opts.Logger.Logger}, nil
}

// Start starts (or connects to) NATS, restores every pipeline from its
// latest checkpoint, subscribes the pipelines and registers the micro
// service; once it returns, the service endpoints answer requests. The
// pipelines run until Shutdown. If Start fails, everything it started is
// stopped again.
func (d *Daemon) Start(ctx context.Context) (err error) {
	defer func() {
		if err != nil {
			d.Shutdown(context.Background())
		}
	}()
	if err := checkDataDir(d.cfg.DataDir); err != nil {
		return err
	}
	if d.cfg.NATS.URL == "" {
		if d.server, d.identity, err = d.startEmbedded(); err != nil {
			return err
		}
		d.log.Info().Str("url", d.server.ClientURL()).Str("store", filepath.Join(d.cfg.DataDir, "nats")).Msg("embedded NATS server with JetStream started")
	}
	if cc := d.fixed.Cluster; cc.Enabled {
		if d.member = cc.Name; d.member == "" {
			d.member = clusterName()
		}
	}
	if d.nc, err = d.connect("smtd"); err != nil {
		return err
	}
	if d.js, err = jetstream.New(d.nc); err != nil {
		return fmt.Errorf("smtd: JetStream: %w", err)
	}
	if d.cfg.Checkpoint.ObjectStore {
		if d.store, err = newCheckpointStore(ctx, d.js, d.cfg.NATS.Replicas); err != nil {
			if d.cfg.Cluster.Enabled {
				return err
			}
			d.log.Warn().Err(err).Msg("checkpoints go to disk only")
			d.store, err = nil, nil
		}
	}
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	d.cancel = cancel
	if d.cfg.Cluster.Enabled {
		if d.cluster, err = d.joinCluster(ctx); err != nil {
			return err
		}
		d.wg.Add(1)
		go func() {
			defer d.wg.Done()
			d.cluster.heartbeat(runCtx)
		}()
	}
	for _, pc := range d.cfg.Pipelines {
		pl := newPipeline(d, pc)
		if d.cluster != nil {
			// A standby until it holds the lease: it serves the newest
			// checkpoint.
			d.cluster.refreshStandby(ctx, pl)
			pl.publishSnapshot()
		} else if err := d.startPipeline(ctx, pl); err != nil {
			return err
		}
		d.pipelines = append(d.pipelines, pl)
	}
	if d.server != nil {
		d.wg.Add(1)
		go func() {
			defer d.wg.Done()
			d.watchStorage(runCtx)
		}()
	}
	nice := d.learnerNice()
	d.reserveLearnerProcs(nice)
	for _, pl := range d.pipelines {
		if pl.cfg.Workers.Enabled {
			if err := d.startWorker(ctx, runCtx, pl, nice); err != nil {
				return err
			}
		}
		d.wg.Add(1)
		go func() {
			defer d.wg.Done()
			defer close(pl.finished)
			pl.learner = d.newLearnerThread(pl.log, nice)
			defer pl.learner.stop()
			if d.cluster != nil {
				d.cluster.serve(runCtx, pl)
				return
			}
			pl.run(runCtx)
		}()
	}
	if d.svc, err = d.addService(); err != nil {
		return err
	}
	// The endpoints' subscriptions travel to the server asynchronously; a
	// round trip makes sure a request sent once Start has returned finds
	// them (otherwise it can fail with "no responders").
	if err := d.nc.FlushTimeout(10 * time.Second); err != nil {
		return fmt.Errorf("smtd: registering the service endpoints: %w", err)
	}
	return d.startHTTP()
}

// startPipeline restores pl from its newest good checkpoint and attaches
// its intake and, with output transport jetstream, its output stream.
func (d *Daemon) startPipeline(ctx context.Context, pl *pipeline) error {
	pc := &pl.cfg
	var st *streamState
	if pc.Input.Transport == config.JetStream {
		s, err := ensureStream(ctx, d.js, d.cfg, pc)
		if err != nil {
			return err
		}
		st = &s
	}
	plan, err := d.restore(ctx, pl, st)
	if err != nil {
		return err
	}
	if t := pl.term; t != nil {
		if err := t.claimPointer(ctx, d.store.latest, pl.cfg.Name); err != nil {
			return err
		}
		if st != nil {
			pl.deleteOldConsumers(ctx, st.name)
		}
	}
	pl.publishSnapshot()
	if st == nil {
		pl.in, err = newCoreIntake(d.nc, pc, pl.lastSeq)
	} else {
		err = pl.attach(ctx, *st, plan)
	}
	if err != nil {
		return err
	}
	if pc.Output.Transport == config.JetStream {
		if err := ensureOutputStream(ctx, d.js, d.cfg, pc); err != nil {
			return err
		}
	}
	d.log.Info().Str("pipeline", pc.Name).Str("modality", string(pc.Modality)).Str("input", pc.Input.Subject).
		Str("transport", pc.Input.Transport).Str("stream", pl.stream.name).Str("output", pc.Output.Subject).
		Str("output_transport", pc.Output.Transport).Uint64("model_version", pl.version).Uint64("resume_after_seq", pl.lastSeq).Str("consumer", pl.consumerName()).Msg("pipeline started")
	return nil
}

func (d *Daemon) checkpointDir(pipeline string) string {
	return filepath.Join(d.fixed.DataDir, "checkpoints", pipeline)
}

// Run starts the daemon and serves until ctx is done, then shuts down.
func (d *Daemon) Run(ctx context.Context) error {
	if err := d.Start(ctx); err != nil {
		return err
	}
	d.log.Info().Int("pipelines", len(d.pipelines)).Msg("smtd running")
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return d.Shutdown(sctx)
}

// Shutdown stops intake, lets every pipeline finish its batch in flight and
// write a last checkpoint, stops the service, drains the connection and
// stops the embedded server. It is idempotent: later calls wait for
// nothing and return the first call's result.
func (d *Daemon) Shutdown(ctx context.Context) error {
	d.shutdownOnce.Do(func() {
		d.stopHTTP(ctx)
		if d.cancel != nil {
			d.cancel()
		}
		done := make(chan struct{})
		go func() {
			d.wg.Wait()
			close(done)
		}()
		select {
		case <-done:
		case <-ctx.Done():
			d.shutdownErr = fmt.Errorf("smtd: shutdown: pipelines still running: %w", ctx.Err())
		}
		d.stopLearnerProcs()
		if d.svc != nil {
			d.svc.Stop()
		}
		if d.queries != nil {
			d.queries.stop() // answers the queries queued before the drain
		}
		if d.qnc != nil {
			d.qnc.Close() // after the last answer: stop flushed them
		}
		if d.nc != nil {
			if err := d.nc.Drain(); err != nil {
				d.nc.Close()
			}
			for d.nc.IsDraining() && ctx.Err() == nil {
				time.Sleep(10 * time.Millisecond)
			}
		}
		if d.server != nil {
			d.server.Shutdown()
			d.server.WaitForShutdown()
		}
		d.log.Info().Msg("smtd stopped")
	})
	return d.shutdownErr
}

// ClientURL is the URL clients reach NATS at: the embedded server's, or the
// configured one.
func (d *Daemon) ClientURL() string {
	if d.server != nil {
		return d.server.ClientURL()
	}
	return d.fixed.NATS.URL
}

// errorEvent is published on <prefix>.events.errors.
type errorEvent struct {
	Pipeline string `json:"pipeline"`
	Subject  string `json:"subject"`
	Seq      uint64 `json:"seq"`
	Reason   string `json:"reason"`
	Error    string `json:"error"`
}

// publishEvent publishes v as JSON on <prefix>.<suffix>. Events are best
// effort: a failure is logged, never fatal.
func (d *Daemon) publishEvent(suffix string, v any) {
	data, err := json.Marshal(v)
	if err != nil {
		d.log.Error().Err(err).Msg("encoding event")
		return
	}
	subject := d.fixed.Subject(suffix)
	if err := d.nc.Publish(subject, data); err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
		d.log.Warn().Err(err).Str("subject", subject).Msg("publishing event")
	}
}
