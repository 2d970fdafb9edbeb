package record

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Errors of Capture and Replay.
var (
	// ErrDropped means the client dropped messages because Capture's buffer
	// was full (a NATS slow consumer); the recording misses them.
	ErrDropped = errors.New("record: messages dropped")
	// ErrOutOfOrder means JetStream stored replayed messages out of the
	// recorded order.
	ErrOutOfOrder = errors.New("record: jetstream stored messages out of order")
	// ErrOptions is wrapped by every Validate error.
	ErrOptions = errors.New("record: invalid options")
)

// Defaults of CaptureOptions and ReplayOptions.
const (
	DefaultCaptureBuffer = 1 << 16
	DefaultReplayWindow  = 256
	DefaultAckWait       = 10 * time.Second
)

// healthEvery is how often Capture checks for drops and a closed connection
// while no message arrives.
const healthEvery = 100 * time.Millisecond

// CaptureOptions tunes Capture. The zero value captures until the context
// ends, with the default buffer.
type CaptureOptions struct {
	// Count stops the capture once this many messages are written; 0 means
	// no limit.
	Count int
	// Buffer is the capacity, in messages, of the channel between the
	// connection's reader and the writer; 0 means DefaultCaptureBuffer
	// (65,536). When it is full the client drops messages, and Capture
	// fails with ErrDropped.
	Buffer int
	// Ready, if not nil, is called once the subscriptions are registered
	// with the server, before any message is written: a message published
	// after Ready returns is captured.
	Ready func()
}

// Validate reports negative counts.
func (o CaptureOptions) Validate() error {
	if o.Count < 0 {
		return fmt.Errorf("%w: capture count %d < 0", ErrOptions, o.Count)
	}
	if o.Buffer < 0 {
		return fmt.Errorf("%w: capture buffer %d < 0", ErrOptions, o.Buffer)
	}
	return nil
}

// Capture subscribes (core NATS) to subjects, which may hold wildcards (a
// message matching two of them is delivered, and written, twice), and
// writes each message that arrives, with its headers and its arrival offset
// (time since the first captured message, so the first has offset 0), to w in
// arrival order. It returns when opts.Count messages are written, when ctx
// ends, or on an error, with the number of messages written; w is flushed in
// every case.
//
// The end of ctx is the normal way to stop an unlimited capture and is not an
// error: Capture then unsubscribes, writes the messages the client had
// already received, and returns a nil error. Messages beyond opts.Count are
// not written.
//
// Capture never loses messages silently: if the client drops any because the
// buffer is full, it fails with an error wrapping ErrDropped and
// nats.ErrSlowConsumer; if the connection closes it writes what it holds and
// fails with nats.ErrConnectionClosed. (Core NATS itself delivers at most
// once: what is published while the connection is reconnecting never reaches
// a subscriber.) It runs in the calling goroutine and starts none.
func Capture(ctx context.Context, nc *nats.Conn, subjects []string, w *Writer, opts CaptureOptions) (int, error) {
	if err := opts.Validate(); err != nil {
		return 0, err
	}
	if len(subjects) == 0 {
		return 0, fmt.Errorf("%w: capture needs at least one subject", ErrOptions)
	}
	buffer := opts.Buffer
	if buffer == 0 {
		buffer = DefaultCaptureBuffer
	}
	c := capture{w: w, ch: make(chan *nats.Msg, buffer), count: opts.Count}
	defer c.unsubscribe()
	for _, subj := range subjects {
		// One channel for all subscriptions keeps the arrival order across
		// subjects: the connection's single reader fills it.
		sub, err := nc.ChanSubscribe(subj, c.ch)
		if err != nil {
			return 0, fmt.Errorf("record: capture: subscribe %q: %w", subj, err)
		}
		c.subs = append(c.subs, sub)
		c.slow = append(c.slow, sub.StatusChanged(nats.SubscriptionSlowConsumer))
	}
	if err := nc.Flush(); err != nil {
		return 0, fmt.Errorf("record: capture: %w", err)
	}
	if opts.Ready != nil {
		opts.Ready()
	}
	err := c.run(ctx, nc)
	if ferr := w.Flush(); err == nil {
		err = ferr
	}
	return c.n, err
}

// capture is the state of one Capture call.
type capture struct {
	w     *Writer
	ch    chan *nats.Msg
	subs  []*nats.Subscription
	slow  []<-chan nats.SubStatus
	count int
	n     int
	first time.Time
}

func (c *capture) run(ctx context.Context, nc *nats.Conn) error {
	health := time.NewTicker(healthEvery)
	defer health.Stop()
	for c.count == 0 || c.n < c.count {
		select {
		case m := <-c.ch:
			if err := c.write(m); err != nil {
				return err
			}
		case <-health.C:
			if err := c.dropped(); err != nil {
				return err
			}
			if nc.IsClosed() {
				if err := c.drain(); err != nil {
					return err
				}
				return fmt.Errorf("record: capture: %w after %d messages", nats.ErrConnectionClosed, c.n)
			}
		case <-ctx.Done():
			return c.drain()
		}
	}
	return c.dropped()
}

func (c *capture) write(m *nats.Msg) error {
	now := time.Now()
	if c.n == 0 {
		c.first = now
	}
	err := c.w.Write(&Message{Subject: m.Subject, Header: m.Header, Data: m.Data, Offset: now.Sub(c.first)})
	if err != nil {
		return fmt.Errorf("record: capture: message %d on %q: %w", c.n, m.Subject, err)
	}
	c.n++
	return nil
}

// drain stops intake and writes what the client already holds.
func (c *capture) drain() error {
	if err := c.dropped(); err != nil {
		return err
	}
	c.unsubscribe()
	for c.count == 0 || c.n < c.count {
		select {
		case m := <-c.ch:
			if err := c.write(m); err != nil {
				return err
			}
		default:
			return c.dropped()
		}
	}
	return c.dropped()
}

// dropped reports drops, counted by the live subscriptions or signalled by a
// slow-consumer status change (which also covers a drop just before
// unsubscribing).
func (c *capture) dropped() error {
	total := 0
	for _, sub := range c.subs {
		if d, err := sub.Dropped(); err == nil {
			total += d
		}
	}
	if total == 0 {
		for _, ch := range c.slow {
			select {
			case st, ok := <-ch:
				if ok && st == nats.SubscriptionSlowConsumer {
					total = -1
				}
			default:
			}
		}
	}
	if total == 0 {
		return nil
	}
	how := "some"
	if total > 0 {
		how = fmt.Sprint(total)
	}
	return fmt.Errorf("record: capture: %w: %w: %s messages lost after %d written (raise the buffer)", ErrDropped, nats.ErrSlowConsumer, how, c.n)
}

func (c *capture) unsubscribe() {
	for _, sub := range c.subs {
		if sub.IsValid() {
			sub.Unsubscribe()
		}
	}
}

// ReplayOptions tunes Replay. The zero value publishes every message to its
// recorded subject through core NATS, as fast as possible.
type ReplayOptions struct {
	// Subject, if not empty, replaces the recorded subject of every message.
	// It must be a literal subject (no wildcards).
	Subject string
	// Rate keeps the recorded time between messages (divided by Speed);
	// false publishes as fast as possible.
	Rate bool
	// Speed divides the recorded offsets when Rate is set: 2 replays twice as
	// fast. 0 means 1.
	Speed float64
	// JetStream publishes through JetStream and waits for every
	// acknowledgement, so that when Replay returns the messages are stored,
	// in recorded order, in the streams that hold their subjects. A message
	// with no stream to take it is an error. False publishes on core NATS and
	// flushes the connection at the end.
	JetStream bool
	// Window bounds the JetStream publishes awaiting acknowledgement; 0 means
	// DefaultReplayWindow (256).
	Window int
	// AckWait bounds the wait for one JetStream acknowledgement and for the
	// final flush of core NATS; 0 means DefaultAckWait (10 s).
	AckWait time.Duration
	// Published, if not nil, is called after each message handed to
	// NATS with the number handed so far (in the calling goroutine),
	// for a progress display.
	Published func(n int)
	// Duplicate, if not nil, is called (in the calling goroutine) with
	// the number of each message that JetStream acknowledged as a
	// duplicate and did not store: its stream had stored a message with
	// the same Nats-Msg-Id within its duplicate window (as when a
	// recording of smtd feed's messages is replayed into the stream that
	// took them). Replay does not count these.
	Duplicate func(i int)
	// StripMsgID publishes without the recorded Nats-Msg-Id headers, so
	// that no stream drops a message as a duplicate of one it stored.
	StripMsgID bool
}

// Validate checks the fields' ranges and that Subject is a literal subject.
func (o ReplayOptions) Validate() error {
	if o.Subject != "" && !literalSubject(o.Subject) {
		return fmt.Errorf("%w: replay subject %q is not a literal subject", ErrOptions, o.Subject)
	}
	if o.Speed < 0 || math.IsNaN(o.Speed) || math.IsInf(o.Speed, 0) {
		return fmt.Errorf("%w: replay speed %v is not a positive number", ErrOptions, o.Speed)
	}
	if o.Window < 0 {
		return fmt.Errorf("%w: replay window %d < 0", ErrOptions, o.Window)
	}
	if o.AckWait < 0 {
		return fmt.Errorf("%w: replay ack wait %v < 0", ErrOptions, o.AckWait)
	}
	return nil
}

// literalSubject reports whether s is a valid NATS subject without wildcards:
// non-empty dot-separated tokens with no white space.
func literalSubject(s string) bool {
	for _, tok := range strings.Split(s, ".") {
		if tok == "" || tok == "*" || tok == ">" || strings.ContainsAny(tok, " \t\r\n") {
			return false
		}
	}
	return true
}

// Replay publishes the messages of r, headers included, to their recorded
// subjects (or opts.Subject) in recorded order, and returns how many it
// published (in JetStream mode: how many were stored, duplicates left
// out). See ReplayOptions for pacing, JetStream and duplicates.
//
// A damaged record ends the replay: the messages before it are published and
// the read error is returned. If ctx ends first Replay returns ctx.Err(). It
// runs in the calling goroutine.
func Replay(ctx context.Context, nc *nats.Conn, r *Reader, opts ReplayOptions) (int, error) {
	if err := opts.Validate(); err != nil {
		return 0, err
	}
	speed := opts.Speed
	if speed == 0 {
		speed = 1
	}
	ackWait := opts.AckWait
	if ackWait == 0 {
		ackWait = DefaultAckWait
	}
	var pub publisher
	if opts.JetStream {
		window := opts.Window
		if window == 0 {
			window = DefaultReplayWindow
		}
		js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(window), jetstream.WithPublishAsyncTimeout(ackWait))
		if err != nil {
			return 0, fmt.Errorf("record: replay: %w", err)
		}
		defer js.CleanupPublisher()
		pub = &jsPublisher{js: js, window: window, duplicate: opts.Duplicate}
	} else {
		pub = &corePublisher{nc: nc, ackWait: ackWait}
	}

	var (
		start   time.Time
		base    time.Duration // offset of the first message
		pace    *time.Timer
		readErr error
	)
	for i := 0; ; i++ {
		m, err := r.Next()
		if err != nil {
			if err != io.EOF {
				readErr = fmt.Errorf("record: replay: %w", err)
			}
			break
		}
		if opts.Rate {
			if i == 0 {
				start, base = time.Now(), m.Offset
			}
			due := start.Add(time.Duration(float64(m.Offset-base) / speed))
			if wait := time.Until(due); wait > 0 {
				if pace == nil {
					pace = time.NewTimer(wait)
					defer pace.Stop()
				} else {
					pace.Reset(wait)
				}
				select {
				case <-pace.C:
				case <-ctx.Done():
					return pub.done(), ctx.Err()
				}
			}
		}
		if err := ctx.Err(); err != nil {
			return pub.done(), err
		}
		subj := m.Subject
		if opts.Subject != "" {
			subj = opts.Subject
		}
		h := m.Header
		if opts.StripMsgID && h.Get(nats.MsgIdHdr) != "" {
			h = maps.Clone(h)
			h.Del(nats.MsgIdHdr)
		}
		if err := pub.publish(ctx, i, &nats.Msg{Subject: subj, Header: h, Data: m.Data}); err != nil {
			return pub.done(), err
		}
		if opts.Published != nil {
			opts.Published(i + 1)
		}
	}
	if err := pub.finish(ctx); err != nil {
		return pub.done(), err
	}
	return pub.done(), readErr
}

// publisher is how Replay hands messages to NATS.
type publisher interface {
	// publish sends message number i.
	publish(ctx context.Context, i int, m *nats.Msg) error
	// finish waits until everything published has arrived.
	finish(ctx context.Context) error
	// done is the number of messages known to be published.
	done() int
}

type corePublisher struct {
	nc      *nats.Conn
	ackWait time.Duration
	n       int
}

func (p *corePublisher) publish(_ context.Context, i int, m *nats.Msg) error {
	if err := p.nc.PublishMsg(m); err != nil {
		return fmt.Errorf("record: replay: message %d to %q: %w", i, m.Subject, err)
	}
	p.n++
	return nil
}

func (p *corePublisher) finish(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, p.ackWait)
	defer cancel()
	if err := p.nc.FlushWithContext(ctx); err != nil {
		return fmt.Errorf("record: replay: flush: %w", err)
	}
	return nil
}

func (p *corePublisher) done() int { return p.n }

// jsPublisher keeps at most window asynchronous publishes in flight and
// checks their acknowledgements in publish order.
type jsPublisher struct {
	js        jetstream.JetStream
	window    int
	pending   []pendingAck // FIFO, oldest first
	stored    int
	stream    string
	seq       uint64
	duplicate func(i int)
}

type pendingAck struct {
	i   int
	fut jetstream.PubAckFuture
}

func (p *jsPublisher) publish(ctx context.Context, i int, m *nats.Msg) error {
	for len(p.pending) >= p.window {
		if err := p.waitOldest(ctx); err != nil {
			return err
		}
	}
	// No retries: a retried publish could be stored after a later one.
	fut, err := p.js.PublishMsgAsync(m, jetstream.WithRetryAttempts(0))
	if err != nil {
		return fmt.Errorf("record: replay: message %d to %q: %w", i, m.Subject, err)
	}
	p.pending = append(p.pending, pendingAck{i: i, fut: fut})
	return nil
}

func (p *jsPublisher) waitOldest(ctx context.Context) error {
	pa := p.pending[0]
	p.pending = p.pending[1:]
	select {
	case ack := <-pa.fut.Ok():
		if ack.Stream == p.stream && ack.Sequence <= p.seq && !ack.Duplicate {
			return fmt.Errorf("%w: message %d stored at %s sequence %d after sequence %d",
				ErrOutOfOrder, pa.i, ack.Stream, ack.Sequence, p.seq)
		}
		if ack.Duplicate {
			if p.duplicate != nil {
				p.duplicate(pa.i)
			}
			return nil
		}
		p.stream, p.seq = ack.Stream, ack.Sequence
		p.stored++
		return nil
	case err := <-pa.fut.Err():
		return fmt.Errorf("record: replay: message %d to %q: %w", pa.i, pa.fut.Msg().Subject, err)
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (p *jsPublisher) finish(ctx context.Context) error {
	for len(p.pending) > 0 {
		if err := p.waitOldest(ctx); err != nil {
			return err
		}
	}
	return nil
}

func (p *jsPublisher) done() int { return p.stored }
