package daemon

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/smtd/smtd/config"
)

// startEmbedded starts the embedded NATS server with JetStream, storing
// under dataDir/nats, with the users, roles and TLS of the config (see
// secureEmbedded), and waits until it accepts clients. It returns the
// options the daemon's own connection authenticates with.
func (d *Daemon) startEmbedded() (*server.Server, []nats.Option, error) {
	host, portStr, _ := net.SplitHostPort(d.cfg.NATS.Listen) // validated by config
	port, _ := strconv.Atoi(portStr)
	opts := &server.Options{
		ServerName: "smtd",
		Host:       host,
		Port:       port,
		JetStream:  true,
		StoreDir:   filepath.Join(d.cfg.DataDir, "nats"),
		MaxPayload: int32(d.cfg.NATS.MaxPayload),
		NoSigs:     true,
	}
	identity, err := secureEmbedded(d.cfg, opts)
	if err != nil {
		return nil, nil, err
	}
	s, err := server.NewServer(opts)
	if err != nil {
		return nil, nil, fmt.Errorf("smtd: embedded NATS server: %w", err)
	}
	s.SetLoggerV2(natsLogger{log: d.log.With().Str("component", "nats-server").Logger(), writeErr: d.storageFault}, false, false, false)
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		s.Shutdown()
		return nil, nil, fmt.Errorf("smtd: embedded NATS server did not start on %s (address in use?)", d.cfg.NATS.Listen)
	}
	if len(d.cfg.NATS.Users) == 0 && !config.IsLoopback(d.cfg.NATS.Listen) {
		d.log.Warn().Str("listen", d.cfg.NATS.Listen).Msg("embedded NATS server without authentication beyond loopback (nats.allow_unauthenticated): anyone who reaches it may reload, checkpoint and delete streams")
	}
	return s, identity, nil
}

// natsLogger sends the embedded server's logs to zerolog, and the write
// errors of its JetStream store (which it reports nowhere else) to
// writeErr.
type natsLogger struct {
	log      zerolog.Logger
	writeErr func(string)
}

func (l natsLogger) Noticef(format string, v ...any) { l.log.Info().Msgf(format, v...) }
func (l natsLogger) Warnf(format string, v ...any)   { l.log.Warn().Msgf(format, v...) }
func (l natsLogger) Fatalf(format string, v ...any)  { l.log.Error().Msgf(format, v...) }
func (l natsLogger) Errorf(format string, v ...any) {
	msg := fmt.Sprintf(format, v...)
	l.log.Error().Msg(msg)
	if strings.Contains(msg, "ritical write error") && l.writeErr != nil {
		l.writeErr(msg)
	}
}
func (l natsLogger) Debugf(format string, v ...any) { l.log.Debug().Msgf(format, v...) }
func (l natsLogger) Tracef(format string, v ...any) { l.log.Trace().Msgf(format, v...) }

// connect connects to the embedded server or to the configured URL, and
// logs every disconnect, reconnect and asynchronous error: a server restart
// is survived, the client reconnects forever. Every option of the
// daemon's connection is set here: in-process with its own identity to the
// embedded server, or with nats.auth and nats.tls (ClientOptions) to an
// external one.
//
// In cluster mode the connection's name ends in @<daemon>, so that the
// server's connection list (nats server report connections, /connz) tells
// the daemons apart.
func (d *Daemon) connect(name string) (*nats.Conn, error) {
	if d.member != "" {
		name += "@" + d.member
	}
	log := d.log.With().Str("component", "nats").Str("connection", name).Logger()
	opts := []nats.Option{
		nats.Name(name),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(time.Second),
		nats.ReconnectBufSize(64 << 20),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil { // nil: our own Close, at shutdown
				log.Warn().Err(err).Msg("disconnected from NATS; reconnecting")
			}
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			log.Info().Str("url", nc.ConnectedUrlRedacted()).Msg("reconnected to NATS")
		}),
		nats.ClosedHandler(func(*nats.Conn) { log.Info().Msg("NATS connection closed") }),
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			ev := log.Error().Err(err)
			if sub != nil {
				ev = ev.Str("subject", sub.Subject)
			}
			ev.Msg("NATS asynchronous error")
		}),
	}
	url := d.cfg.NATS.URL
	if d.server != nil {
		// In process, the connection is a pipe that needs no TLS; a tls://
		// URL would make the client insist on it.
		url = strings.Replace(d.server.ClientURL(), "tls://", "nats://", 1)
		opts = append(opts, nats.InProcessServer(d.server))
		opts = append(opts, d.identity...)
	} else {
		auth, err := ClientOptions(d.cfg.NATS.Auth, d.cfg.NATS.TLS)
		if err != nil {
			return nil, err
		}
		opts = append(opts, auth...)
	}
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		return nil, fmt.Errorf("smtd: connecting to NATS at %s: %w", url, err)
	}
	return nc, nil
}

// checkpointStore keeps checkpoints in a JetStream object store, with a
// key-value bucket whose key <pipeline> names the newest object.
type checkpointStore struct {
	obj    jetstream.ObjectStore
	latest jetstream.KeyValue
}

const (
	checkpointBucket = "smtd-checkpoints"
	latestBucket     = "smtd-latest"
)

func newCheckpointStore(ctx context.Context, js jetstream.JetStream, replicas int) (*checkpointStore, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	obj, err := bindOrCreate(ctx, checkpointBucket,
		func(ctx context.Context) (jetstream.ObjectStore, error) { return js.ObjectStore(ctx, checkpointBucket) },
		func(ctx context.Context) (jetstream.ObjectStore, error) {
			return js.CreateObjectStore(ctx, jetstream.ObjectStoreConfig{
				Bucket: checkpointBucket, Description: "smtd model checkpoints", Storage: jetstream.FileStorage, Replicas: replicas,
			})
		})
	if err != nil {
		return nil, err
	}
	kv, err := keyValue(ctx, js, jetstream.KeyValueConfig{
		Bucket: latestBucket, Description: "smtd: newest checkpoint object per pipeline", History: 1, Storage: jetstream.FileStorage,
		Replicas: replicas,
	})
	if err != nil {
		return nil, err
	}
	return &checkpointStore{obj: obj, latest: kv}, nil
}

// keyValue binds to the key-value bucket of cfg, creating it if there is
// none (an existing bucket keeps its config).
func keyValue(ctx context.Context, js jetstream.JetStream, cfg jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
	return bindOrCreate(ctx, cfg.Bucket,
		func(ctx context.Context) (jetstream.KeyValue, error) { return js.KeyValue(ctx, cfg.Bucket) },
		func(ctx context.Context) (jetstream.KeyValue, error) { return js.CreateKeyValue(ctx, cfg) })
}

// bindOrCreate binds to a bucket, or creates it if there is none, until
// ctx is done. It binds first and never updates: the daemons of a
// cluster start together, and a request about a replicated bucket that
// another daemon is creating can go unanswered; each attempt has 5 s.
func bindOrCreate[B any](ctx context.Context, name string, bind, create func(context.Context) (B, error)) (B, error) {
	attempt := func(f func(context.Context) (B, error)) (B, error) {
		actx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		return f(actx)
	}
	for {
		b, err := attempt(bind)
		if errors.Is(err, jetstream.ErrBucketNotFound) {
			b, err = attempt(create)
		}
		if err == nil {
			return b, nil
		}
		if ctx.Err() != nil {
			var zero B
			return zero, fmt.Errorf("smtd: bucket %s: %w", name, err)
		}
		select { // created meanwhile, or no answer yet: try again
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// put stores a checkpoint, points latest at it, and deletes the pipeline's
// objects older than the newest keep.
//
// In cluster mode (t not nil) the pointer is the JSON of a pointer with
// the owner's epoch, and moves only by compare-and-set from the revision
// the term last wrote: if another owner has moved it since, this one lost
// its lease while it could not tell (paused, cut off); the object is
// deleted again and put returns errLeaseLost.
func (s *checkpointStore) put(ctx context.Context, pipeline, name string, data []byte, keep int, t *term) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	obj := pipeline + "/" + name
	if _, err := s.obj.PutBytes(ctx, obj, data); err != nil {
		return "", err
	}
	if t == nil {
		if _, err := s.latest.PutString(ctx, pipeline, obj); err != nil {
			return obj, err
		}
	} else if err := t.movePointer(ctx, s.latest, pipeline, obj); err != nil {
		if errors.Is(err, errLeaseLost) {
			s.obj.Delete(ctx, obj)
		}
		return "", err
	}
	mine, err := s.list(ctx, pipeline)
	if err != nil {
		return obj, err
	}
	slices.Sort(mine)
	for len(mine) > keep {
		s.obj.Delete(ctx, mine[0])
		mine = mine[1:]
	}
	return obj, nil
}

// list returns the names of a pipeline's checkpoint objects.
func (s *checkpointStore) list(ctx context.Context, pipeline string) ([]string, error) {
	infos, err := s.obj.List(ctx)
	if errors.Is(err, jetstream.ErrNoObjectsFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var names []string
	for _, in := range infos {
		if strings.HasPrefix(in.Name, pipeline+"/") {
			names = append(names, in.Name)
		}
	}
	return names, nil
}
