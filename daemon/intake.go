package daemon

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/smtd/smtd/config"
)

// inMsg is one raw input message with its stream sequence.
type inMsg struct {
	header nats.Header
	data   []byte
	seq    uint64
	ack    func() error // acknowledges this message and all before it; nil on core NATS
}

// intake cuts a pipeline's input into minibatches.
type intake interface {
	// next returns up to max messages: as soon as max have arrived, or
	// what arrived within wait. With whole (deterministic mode) it
	// returns exactly max messages or none: it waits at most wait (a
	// second if wait is 0) and keeps a partial batch for the next call,
	// so that the caller serves its requests while the stream is idle,
	// and batch boundaries never depend on timing.
	next(ctx context.Context, max int, wait time.Duration, whole bool) ([]inMsg, error)
	// backlog is how many messages wait: read but not yet returned, and
	// those the stream holds after the newest one read.
	backlog() uint64
	stop()
}

// wholeWait is how long next waits in deterministic mode before it
// returns no batch.
const wholeWait = time.Second

// pending holds messages read but not yet returned by next.
type pending struct{ msgs []inMsg }

// take returns up to max pending messages; with whole, exactly max or
// none.
func (p *pending) take(max int, whole bool) []inMsg {
	if len(p.msgs) == 0 || (whole && len(p.msgs) < max) {
		return nil
	}
	n := min(max, len(p.msgs))
	out := p.msgs[:n:n]
	if p.msgs = p.msgs[n:]; len(p.msgs) == 0 {
		p.msgs = nil
	}
	return out
}

// jsIntake reads a JetStream stream through a durable pull consumer.
type jsIntake struct {
	cons jetstream.Consumer
	pending
	// lag is the number of messages of the stream after the newest one
	// fetched (the consumer's pending count), for health and status.
	lag uint64
	// ahead is the fetch of the next batch, sent as next returns one
	// (nil: none): the server looks it up and delivers it while the
	// pipeline learns, instead of after. Its messages and the batch
	// being learned stay within the consumer's MaxAckPending (two
	// batches of at least four).
	ahead jetstream.MessageBatch
}

// consumerName is the durable consumer of a pipeline: smtd-<pipeline>,
// and in cluster mode smtd-<pipeline>-e<epoch>, one per ownership term,
// so that an owner that lost its lease cannot fetch or acknowledge
// through its successor's consumer.
func (pl *pipeline) consumerName() string {
	if pl.term != nil {
		return fmt.Sprintf("smtd-%s-e%d", pl.cfg.Name, pl.term.epoch)
	}
	return "smtd-" + pl.cfg.Name
}

// streamState is one instance of a JetStream stream and the sequences it
// holds. A stream deleted and created again under the same name is another
// instance: its creation time differs and its sequences start again at 1.
type streamState struct {
	name        string
	created     time.Time
	first, last uint64 // first and last sequence held; first = last+1 when empty
}

func newStreamState(info *jetstream.StreamInfo) streamState {
	return streamState{name: info.Config.Name, created: info.Created.UTC(), first: info.State.FirstSeq, last: info.State.LastSeq}
}

// ensureStream returns the state of the stream that captures the
// pipeline's input subject, creating it if there is none.
func ensureStream(ctx context.Context, js jetstream.JetStream, cfg *config.Config, p *config.Pipeline) (streamState, error) {
	name, err := js.StreamNameBySubject(ctx, p.Input.Subject)
	var s jetstream.Stream
	switch {
	case errors.Is(err, jetstream.ErrStreamNotFound):
		sc := boundedStream(p.StreamName(), "smtd input of pipeline "+p.Name, p.Input.Subject, cfg.NATS)
		sc.Duplicates = min(inputDuplicateWindow, sc.MaxAge)
		sc.AllowDirect = true // workers fetch minibatches by sequence
		s, err = js.CreateStream(ctx, sc)
		if err != nil {
			return streamState{}, fmt.Errorf("smtd: creating stream %s for %s: %w", p.StreamName(), p.Input.Subject, err)
		}
	case err != nil:
		return streamState{}, fmt.Errorf("smtd: looking up the stream of %s: %w", p.Input.Subject, err)
	default:
		if s, err = js.Stream(ctx, name); err != nil {
			return streamState{}, fmt.Errorf("smtd: stream %s: %w", name, err)
		}
	}
	return newStreamState(s.CachedInfo()), nil
}

// inputDuplicateWindow is how long an input stream the daemon creates
// remembers the Nats-Msg-Id of each message (at most nats.stream_max_age):
// a message published again with the same id within it is acknowledged as
// a duplicate and not stored, so re-running an interrupted smtd feed adds
// nothing. The server keeps the ids of the window in memory; messages
// without an id cost nothing.
const inputDuplicateWindow = 24 * time.Hour

// boundedStream is the config of a stream the daemon creates: file
// storage, the oldest messages dropped past nats.stream_max_bytes and
// nats.stream_max_age.
func boundedStream(name, description, subject string, n config.NATS) jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name: name, Description: description, Subjects: []string{subject},
		Retention: jetstream.LimitsPolicy, Discard: jetstream.DiscardOld,
		MaxBytes: n.StreamMaxBytes, MaxAge: n.StreamMaxAge, Storage: jetstream.FileStorage,
		Replicas: n.Replicas,
	}
}

// newJSIntake (re)creates the pipeline's durable consumer on stream so
// that delivery starts right after after, the last sequence the restored
// model has applied (0: from the first message): messages applied after
// the checkpoint but lost in a crash are read again, none is skipped.
func newJSIntake(ctx context.Context, js jetstream.JetStream, stream, name string, p *config.Pipeline, after uint64) (*jsIntake, error) {
	if err := js.DeleteConsumer(ctx, stream, name); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
		return nil, fmt.Errorf("smtd: resetting consumer %s on %s: %w", name, stream, err)
	}
	cc := jetstream.ConsumerConfig{
		Durable:       name,
		Description:   "smtd pipeline " + p.Name,
		FilterSubject: p.Input.Subject,
		AckPolicy:     jetstream.AckAllPolicy,
		AckWait:       5 * time.Minute,
		MaxAckPending: max(4, (p.Workers.Staleness+1)*p.Workers.Merge+1) * p.Batch.Size,
		DeliverPolicy: jetstream.DeliverAllPolicy,
		// In worker mode the owner learns the sequences; the workers
		// fetch the payloads (see runWorkers).
		HeadersOnly: p.Workers.Enabled,
	}
	if after > 0 {
		cc.DeliverPolicy = jetstream.DeliverByStartSequencePolicy
		cc.OptStartSeq = after + 1
	}
	cons, err := js.CreateConsumer(ctx, stream, cc)
	if err != nil {
		return nil, fmt.Errorf("smtd: creating consumer %s on %s: %w", name, stream, err)
	}
	return &jsIntake{cons: cons}, nil
}

func (in *jsIntake) next(ctx context.Context, max int, wait time.Duration, whole bool) ([]inMsg, error) {
	if wait == 0 {
		wait = wholeWait
	}
	if in.ahead != nil && len(in.msgs) < max {
		err := in.receive(in.ahead)
		in.ahead = nil
		if err != nil || ctx.Err() != nil {
			return in.take(max, whole), cmp.Or(err, ctx.Err())
		}
	}
	if len(in.msgs) == 0 || (whole && len(in.msgs) < max) {
		// Fetch waits at most wait; ctx is checked after it, so shutdown
		// waits for at most one fetch.
		b, err := in.cons.Fetch(max-len(in.msgs), jetstream.FetchMaxWait(wait))
		if err != nil {
			return in.take(max, whole), err
		}
		if err := in.receive(b); err != nil {
			return in.take(max, whole), err
		}
	}
	out := in.take(max, whole)
	if len(out) > 0 && len(in.msgs) < max && ctx.Err() == nil {
		// A failed send only means no fetch ahead: the next call fetches.
		in.ahead, _ = in.cons.Fetch(max-len(in.msgs), jetstream.FetchMaxWait(wait))
	}
	return out, ctx.Err()
}

// receive appends the messages of fetch b to the pending ones as they
// arrive, until b ends; a timeout is not an error.
func (in *jsIntake) receive(b jetstream.MessageBatch) error {
	for m := range b.Messages() {
		md, err := m.Metadata()
		if err != nil {
			continue // not a JetStream message; cannot happen on a pull consumer
		}
		in.msgs = append(in.msgs, inMsg{header: m.Headers(), data: m.Data(), seq: md.Sequence.Stream, ack: m.Ack})
		in.lag = md.NumPending
	}
	if err := b.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) && !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return nil
}

func (in *jsIntake) backlog() uint64 { return in.lag + uint64(len(in.msgs)) }

func (in *jsIntake) stop() {}

// coreIntake reads a plain core NATS subscription. Messages carry an
// arrival count instead of a stream sequence; they cannot be replayed.
type coreIntake struct {
	sub  *nats.Subscription
	ch   chan *nats.Msg
	done chan struct{}
	seq  uint64
	pending
}

// newCoreIntake subscribes to the pipeline's subject; arrival counts
// continue after lastSeq, the count the restored model had reached.
func newCoreIntake(nc *nats.Conn, p *config.Pipeline, lastSeq uint64) (*coreIntake, error) {
	in := &coreIntake{ch: make(chan *nats.Msg, 4*p.Batch.Size), done: make(chan struct{}), seq: lastSeq}
	sub, err := nc.Subscribe(p.Input.Subject, func(m *nats.Msg) {
		select {
		case in.ch <- m:
		case <-in.done:
		}
	})
	if err != nil {
		return nil, fmt.Errorf("smtd: subscribing to %s: %w", p.Input.Subject, err)
	}
	// Bounded memory: while the pipeline is busy, messages wait in the
	// client up to these limits; past them the client drops messages and
	// reports a slow consumer (logged) instead of buffering without end.
	if err := sub.SetPendingLimits(16*p.Batch.Size, 64<<20); err != nil {
		sub.Unsubscribe()
		return nil, err
	}
	in.sub = sub
	return in, nil
}

func (in *coreIntake) next(ctx context.Context, max int, wait time.Duration, whole bool) ([]inMsg, error) {
	if wait == 0 {
		wait = wholeWait
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	for len(in.msgs) < max {
		select {
		case m := <-in.ch:
			in.seq++
			in.msgs = append(in.msgs, inMsg{header: m.Header, data: m.Data, seq: in.seq})
		case <-t.C:
			return in.take(max, whole), nil
		case <-ctx.Done():
			return in.take(max, whole), ctx.Err()
		}
	}
	return in.take(max, whole), nil
}

func (in *coreIntake) backlog() uint64 { return uint64(len(in.ch) + len(in.msgs)) }

func (in *coreIntake) stop() {
	close(in.done)
	in.sub.Unsubscribe()
}
