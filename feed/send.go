package feed

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Options says how Send publishes.
type Options struct {
	// Rate paces the items: at most Rate per second (0: as fast as the
	// stream acknowledges them).
	Rate float64
	// Window is how many publishes may wait for their acknowledgement at
	// once. Default 256.
	Window int
	// AckWait is how long one acknowledgement may take. Default 30 s.
	AckWait time.Duration
	// Acked, if not nil, is called after each acknowledgement (for a
	// progress bar).
	Acked func()
	// Skip, if not nil, is told about each item that could not be read
	// (a file that does not decode); Send goes on with the next. With a
	// nil Skip the first such item ends Send with its error.
	Skip func(name string, err error)
}

// Result counts what Send did.
type Result struct {
	// Sent is how many items the stream stored.
	Sent int
	// Duplicates is how many items the stream already held (the same
	// Nats-Msg-Id within its duplicate window) and dropped.
	Duplicates int
	// Skipped is how many items could not be read.
	Skipped int
}

// ErrNoStream is returned when no JetStream stream captures the subject.
var ErrNoStream = errors.New("feed: no JetStream stream captures the subject (is the pipeline's input.transport core?)")

// Send publishes the items of src to subject through JetStream, each with
// its Nats-Msg-Id, and waits for every acknowledgement. It returns when
// src is exhausted, ctx is done, or a publish fails; Result counts what
// was acknowledged until then. If the server refuses the user's publish
// to subject, the first item's error wraps nats.ErrPermissionViolation.
func Send(ctx context.Context, nc *nats.Conn, subject string, src Source, opts Options) (Result, error) {
	var res Result
	if opts.Window <= 0 {
		opts.Window = 256
	}
	if opts.AckWait <= 0 {
		opts.AckWait = 30 * time.Second
	}
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(opts.Window+1), jetstream.WithPublishAsyncTimeout(opts.AckWait))
	if err != nil {
		return res, err
	}
	defer js.CleanupPublisher()
	acked := opts.Acked
	if acked == nil {
		acked = func() {}
	}
	var inflight []jetstream.PubAckFuture
	// settle waits for the oldest acknowledgements until at most keep
	// publishes are in flight. Once ctx is done, Send still settles what
	// it published (each acknowledgement waits at most AckWait), so that
	// Result counts every message the stream stored.
	settle := func(ctx context.Context, keep int) error {
		for len(inflight) > keep {
			f := inflight[0]
			pop := func() {
				inflight[0] = nil
				inflight = inflight[1:]
			}
			select {
			case ack := <-f.Ok():
				if ack.Duplicate {
					res.Duplicates++
				} else {
					res.Sent++
				}
				acked()
			case err := <-f.Err():
				if errors.Is(err, nats.ErrNoResponders) || errors.Is(err, jetstream.ErrNoStreamResponse) {
					err = ErrNoStream
				}
				pop()
				return fmt.Errorf("feed: publishing %s to %s: %w", f.Msg().Header.Get(nats.MsgIdHdr), subject, err)
			case <-ctx.Done():
				return ctx.Err()
			}
			pop()
		}
		return nil
	}
	start := time.Now()
	var pace *time.Timer
	n := 0
	for it, err := range src.Items {
		if err != nil {
			res.Skipped++
			if opts.Skip == nil {
				settle(context.Background(), 0)
				return res, err
			}
			opts.Skip(it.Name, err)
			continue
		}
		if opts.Rate > 0 {
			if wait := time.Until(start.Add(time.Duration(float64(n) / opts.Rate * float64(time.Second)))); wait > 0 {
				if pace == nil {
					pace = time.NewTimer(wait)
				} else {
					pace.Reset(wait)
				}
				select {
				case <-pace.C:
				case <-ctx.Done():
					settle(context.Background(), 0)
					return res, ctx.Err()
				}
			}
		}
		if err := settle(ctx, opts.Window-1); err != nil {
			settle(context.Background(), 0)
			return res, err
		}
		// settle may return with ctx done when an acknowledgement was
		// ready too: nothing new is published once ctx is done.
		if err := ctx.Err(); err != nil {
			settle(context.Background(), 0)
			return res, err
		}
		m := &nats.Msg{Subject: subject, Header: it.Header, Data: it.Data}
		var before error // the connection's last error before the first publish
		if n == 0 {
			before = nc.LastError()
		}
		f, err := js.PublishMsgAsync(m)
		if err != nil {
			settle(context.Background(), 0)
			return res, fmt.Errorf("feed: publishing %s to %s: %w", it.Name, subject, err)
		}
		inflight = append(inflight, f)
		if n == 0 {
			if err := refused(ctx, nc, subject, before, opts.AckWait); err != nil {
				return res, fmt.Errorf("feed: publishing %s to %s: %w", it.Name, subject, err)
			}
		}
		n++
	}
	if pace != nil {
		pace.Stop()
	}
	if err := settle(ctx, 0); err != nil {
		settle(context.Background(), 0)
		return res, err
	}
	return res, ctx.Err()
}

// Refused reports whether err is the NATS server's refusal of op
// ("Publish" or "Subscription") to subject by the connection's user,
// which the server reports only to the connection's error handler and
// its last error (nats.Conn.LastError).
func Refused(err error, op, subject string) bool {
	return errors.Is(err, nats.ErrPermissionViolation) && strings.Contains(err.Error(), fmt.Sprintf("%s to %q", op, subject))
}

// refused returns the server's refusal of the publish to subject made
// after the connection's last error was before, if there was one: the
// refusal precedes the answer to a flush, and becomes the connection's
// last error. (Another error on the connection in between hides it;
// the acknowledgement's timeout then tells.) Without it a refused feed
// would wait for AckWait.
func refused(ctx context.Context, nc *nats.Conn, subject string, before error, wait time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	if err := nc.FlushWithContext(ctx); err != nil {
		return nil // the acknowledgements will tell
	}
	if err := nc.LastError(); !errors.Is(err, before) && Refused(err, "Publish", subject) {
		return err
	}
	return nil
}

// DryRun reads and converts every item of src as Send would and writes
// one line per item to w (its name, subject, size, Nats-Msg-Id and Smtd
// headers), publishing nothing.
func DryRun(w io.Writer, subject string, src Source) (Result, error) {
	var res Result
	for it, err := range src.Items {
		if err != nil {
			res.Skipped++
			fmt.Fprintf(w, "skip %s: %v\n", it.Name, err)
			continue
		}
		fmt.Fprintf(w, "%s -> %s %d bytes %s=%s", it.Name, subject, len(it.Data), nats.MsgIdHdr, it.ID)
		keys := make([]string, 0, len(it.Header))
		for k := range it.Header {
			if k != nats.MsgIdHdr {
				keys = append(keys, k)
			}
		}
		slices.Sort(keys)
		for _, k := range keys {
			fmt.Fprintf(w, " %s=%s", k, it.Header.Get(k))
		}
		fmt.Fprintln(w)
		res.Sent++
	}
	return res, nil
}
