// Package client is a Go client of a running smtd daemon: its status,
// embedding and nearest-word queries, and the stream of embeddings a
// pipeline publishes, decoded into typed values.
//
// It needs only nats.go: a program that uses it does not link the daemon
// or the embedded NATS server.
//
//	c, err := client.Connect("nats://127.0.0.1:4222")
//	...
//	e, err := c.Embed(ctx, "images", img)       // never trains the model
//	fmt.Println(len(e.Vector), e.Version)
//	err = c.Subscribe(ctx, "images", func(e client.Embedding) { ... })
package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"image"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/smtd/smtd/feed"
)

// Client talks to the smtd daemons behind one NATS connection. It is safe
// for concurrent use.
type Client struct {
	nc     *nats.Conn
	owned  bool // Close closes nc
	prefix string

	mu        sync.Mutex
	pipelines map[string]PipelineInfo // from the last look-up, by name
	// waiting holds the cancel functions of the requests in flight, by
	// subject, for refuse.
	waiting map[string]map[*context.CancelCauseFunc]struct{}
}

// Option configures a Client.
type Option func(*options)

type options struct {
	prefix string
	nats   []nats.Option
}

// WithPrefix sets the daemon's service.prefix (default "smtd").
func WithPrefix(prefix string) Option { return func(o *options) { o.prefix = prefix } }

// WithNATSOptions adds options of the NATS connection Connect makes
// (credentials, TLS, a name).
func WithNATSOptions(opts ...nats.Option) Option {
	return func(o *options) { o.nats = append(o.nats, opts...) }
}

func newOptions(opts []Option) options {
	o := options{prefix: "smtd"}
	for _, f := range opts {
		f(&o)
	}
	return o
}

// Connect connects to the NATS server at url.
func Connect(url string, opts ...Option) (*Client, error) {
	o := newOptions(opts)
	nc, err := nats.Connect(url, o.nats...)
	if err != nil {
		return nil, fmt.Errorf("smtd client: connecting to %s: %w", url, err)
	}
	c := New(nc, opts...)
	c.owned = true
	return c, nil
}

// New returns a client on an open connection, which Close leaves open.
//
// A NATS server tells a client that its user may not publish to a
// subject only asynchronously, through the connection's error handler,
// so New installs one on nc that fails the client's requests to a
// refused subject at once (an error wrapping nats.ErrPermissionViolation)
// instead of leaving them to wait for their deadline, and then calls the
// handler nc had before. A handler set on nc after New replaces it. Each
// New adds one to the chain, for as long as nc lives: make one Client per
// connection.
func New(nc *nats.Conn, opts ...Option) *Client {
	o := newOptions(opts)
	c := &Client{nc: nc, prefix: o.prefix, waiting: map[string]map[*context.CancelCauseFunc]struct{}{}}
	chaining.Lock()
	defer chaining.Unlock()
	next := nc.ErrorHandler()
	nc.SetErrorHandler(func(conn *nats.Conn, sub *nats.Subscription, err error) {
		c.refuse(err)
		if next != nil {
			next(conn, sub, err)
		}
	})
	return c
}

// chaining serialises New's read and replacement of a connection's error
// handler, so that Clients made at once on one connection each keep the
// other's.
var chaining sync.Mutex

// refuse cancels the requests in flight to a subject whose publish err
// is the server's refusal of.
func (c *Client) refuse(err error) {
	if !errors.Is(err, nats.ErrPermissionViolation) {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for subject, w := range c.waiting {
		if feed.Refused(err, "Publish", subject) {
			for cancel := range w {
				(*cancel)(err)
			}
		}
	}
}

// await registers cancel as a request in flight to subject until the
// returned function is called.
func (c *Client) await(subject string, cancel context.CancelCauseFunc) (done func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	w := c.waiting[subject]
	if w == nil {
		w = map[*context.CancelCauseFunc]struct{}{}
		c.waiting[subject] = w
	}
	w[&cancel] = struct{}{}
	return func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		if delete(w, &cancel); len(w) == 0 {
			delete(c.waiting, subject)
		}
	}
}

// Conn returns the client's NATS connection.
func (c *Client) Conn() *nats.Conn { return c.nc }

// Close closes the connection if Connect made it.
func (c *Client) Close() {
	if c.owned {
		c.nc.Close()
	}
}

// Status is the daemon's status reply (smtd.status): the fields a client
// needs; the reply has more (counters, model summaries), which
// the nats CLI shows (nats req smtd.status "").
type Status struct {
	Version       string     `json:"version"`
	ConfigVersion int        `json:"config_version"`
	Pipelines     []Pipeline `json:"pipelines"`
	// Daemon is the answering daemon's name, in cluster mode.
	Daemon string `json:"daemon,omitempty"`
}

// PipelineInfo is what a client needs to talk to a pipeline, from the
// daemon's pipelines endpoint (smtd.pipelines), which every role may ask.
type PipelineInfo struct {
	Name string `json:"name"`
	// Modality is "image", "video" or "text".
	Modality string `json:"modality"`
	// Input and Output are the pipeline's input and output subjects.
	Input  string `json:"input"`
	Output string `json:"output"`
	// Image is the shape of the pipeline's images; nil for text.
	Image *Shape `json:"image,omitempty"`
}

// Pipeline is one pipeline of a Status: its description, health and
// counters.
type Pipeline struct {
	PipelineInfo
	ModelVersion uint64 `json:"model_version"`
	Health       struct {
		State  string `json:"state"`
		Reason string `json:"reason,omitempty"`
	} `json:"health"`
	Received  int64 `json:"received"`
	Learned   int64 `json:"learned"`
	Rejected  int64 `json:"rejected"`
	Published int64 `json:"published"`
	Backlog   int64 `json:"backlog"`
}

// Shape is an image shape.
type Shape struct {
	Width    int `json:"width"`
	Height   int `json:"height"`
	Channels int `json:"channels"`
}

// ErrNoPipeline is returned for a pipeline the daemon does not run.
var ErrNoPipeline = errors.New("smtd client: no such pipeline")

// Error is a request the daemon refused: its micro service error code
// ("400", "503", …) and description.
type Error struct {
	Subject     string
	Code        string
	Description string
}

func (e *Error) Error() string {
	return fmt.Sprintf("smtd client: %s: %s %s", e.Subject, e.Code, e.Description)
}

// request sends data with header h to subject and returns the reply, an
// *Error if the daemon refused it, or an error wrapping
// nats.ErrPermissionViolation if the server did.
func (c *Client) request(ctx context.Context, subject string, h nats.Header, data []byte) (*nats.Msg, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	defer c.await(subject, cancel)()
	m, err := c.nc.RequestMsgWithContext(ctx, &nats.Msg{Subject: subject, Header: h, Data: data})
	if err != nil {
		if cause := context.Cause(ctx); errors.Is(cause, nats.ErrPermissionViolation) {
			err = cause
		}
		return nil, fmt.Errorf("smtd client: %s: %w", subject, err)
	}
	if code := m.Header.Get("Nats-Service-Error-Code"); code != "" {
		return nil, &Error{Subject: subject, Code: code, Description: m.Header.Get("Nats-Service-Error")}
	}
	return m, nil
}

// Status asks the daemon for its status.
func (c *Client) Status(ctx context.Context) (*Status, error) {
	m, err := c.request(ctx, c.prefix+".status", nil, nil)
	if err != nil {
		return nil, err
	}
	var st Status
	if err := json.Unmarshal(m.Data, &st); err != nil {
		return nil, fmt.Errorf("smtd client: status reply: %w", err)
	}
	return &st, nil
}

// Pipeline describes one pipeline: its subjects, modality and shape. The
// first call asks the daemon's pipelines endpoint (smtd.pipelines), which
// every role may ask, unlike the status (asked instead of a daemon too
// old to have the endpoint); later calls reuse its answer (these do not
// change while the daemon runs).
func (c *Client) Pipeline(ctx context.Context, name string) (PipelineInfo, error) {
	c.mu.Lock()
	p, ok := c.pipelines[name]
	c.mu.Unlock()
	if ok {
		return p, nil
	}
	var r struct {
		Pipelines []PipelineInfo `json:"pipelines"`
	}
	m, err := c.request(ctx, c.prefix+".pipelines", nil, nil)
	switch {
	case errors.Is(err, nats.ErrNoResponders):
		// A daemon older than the pipelines endpoint: its status.
		st, err := c.Status(ctx)
		if err != nil {
			return PipelineInfo{}, err
		}
		for _, p := range st.Pipelines {
			r.Pipelines = append(r.Pipelines, p.PipelineInfo)
		}
	case err != nil:
		return PipelineInfo{}, err
	default:
		if err := json.Unmarshal(m.Data, &r); err != nil {
			return PipelineInfo{}, fmt.Errorf("smtd client: pipelines reply: %w", err)
		}
	}
	var names []string
	c.mu.Lock()
	c.pipelines = make(map[string]PipelineInfo, len(r.Pipelines))
	for _, p := range r.Pipelines {
		c.pipelines[p.Name] = p
		names = append(names, p.Name)
	}
	p, ok = c.pipelines[name]
	c.mu.Unlock()
	if !ok {
		return PipelineInfo{}, fmt.Errorf("%w %q (the daemon runs %s)", ErrNoPipeline, name, strings.Join(names, ", "))
	}
	return p, nil
}

// Embed asks for the embedding of an image by an image or video
// pipeline, converted to the pipeline's shape as smtd feed converts
// photos (centre cut to the aspect ratio, Catmull-Rom resize, gray for
// one channel). The daemon answers from a snapshot of its model and never
// learns from the query.
func (c *Client) Embed(ctx context.Context, pipeline string, img image.Image) (Embedding, error) {
	p, err := c.Pipeline(ctx, pipeline)
	if err != nil {
		return Embedding{}, err
	}
	if p.Image == nil {
		return Embedding{}, fmt.Errorf("smtd client: pipeline %s takes %s, not images", pipeline, p.Modality)
	}
	s := feed.Shape{Width: p.Image.Width, Height: p.Image.Height, Channels: p.Image.Channels}
	h := s.Header()
	if p.Modality == "video" {
		// A query is not part of any stream; the decoder still wants
		// the headers of a frame.
		h.Set(HeaderStream, "query")
		h.Set(HeaderFrame, "0")
	}
	return c.EmbedRaw(ctx, pipeline, h, feed.Raw(nil, img, s))
}

// EmbedText asks a text pipeline for the embedding of text (the mean of
// its words' embeddings).
func (c *Client) EmbedText(ctx context.Context, pipeline, text string) (Embedding, error) {
	return c.EmbedRaw(ctx, pipeline, nil, []byte(text))
}

// EmbedRaw asks for the embedding of an input message given as it would
// be published on the pipeline's input subject (README, "Wire formats").
func (c *Client) EmbedRaw(ctx context.Context, pipeline string, h nats.Header, data []byte) (Embedding, error) {
	m, err := c.request(ctx, c.prefix+".embed."+pipeline, h, data)
	if err != nil {
		return Embedding{}, err
	}
	return Decode(m)
}

// Neighbours is the reply of a nearest-word query.
type Neighbours struct {
	Pipeline     string `json:"pipeline"`
	ModelVersion uint64 `json:"model_version"`
	Word         string `json:"word"`
	// Neighbours are the nearest words, most similar first.
	Neighbours []Neighbour `json:"neighbours"`
}

// Neighbour is a word and the cosine of its embedding with the query's.
type Neighbour struct {
	Word   string  `json:"word"`
	Cosine float64 `json:"cosine"`
}

// Neighbours asks a text pipeline for the k words nearest to word (k 0:
// the daemon's default, 10).
func (c *Client) Neighbours(ctx context.Context, pipeline, word string, k int) (*Neighbours, error) {
	body, err := json.Marshal(struct {
		Word string `json:"word"`
		K    int    `json:"k,omitempty"`
	}{word, k})
	if err != nil {
		return nil, err
	}
	m, err := c.request(ctx, c.prefix+".neighbours."+pipeline, nil, body)
	if err != nil {
		return nil, err
	}
	var n Neighbours
	if err := json.Unmarshal(m.Data, &n); err != nil {
		return nil, fmt.Errorf("smtd client: neighbours reply: %w", err)
	}
	return &n, nil
}

// Subscribe calls fn with each output of pipeline, in the order they
// arrive, on the calling goroutine, until ctx is done (it then returns
// nil), or an output cannot be decoded or the subscription fails (it
// returns the error).
func (c *Client) Subscribe(ctx context.Context, pipeline string, fn func(Embedding)) error {
	o, err := c.Outputs(ctx, pipeline)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	defer o.Close()
	for {
		e, err := o.Next(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		fn(e)
	}
}

// Outputs is a subscription to a pipeline's outputs.
type Outputs struct {
	// Subject is the pipeline's output subject.
	Subject string
	sub     *nats.Subscription
}

// Outputs subscribes to the outputs of pipeline. When it returns, the
// server has the subscription: every output published from then on is
// received. A subscription the server refuses returns an error wrapping
// nats.ErrPermissionViolation. Outputs not yet read by Next wait, up to
// 65,536 messages or 256 MiB; past that NATS drops them and Next
// returns nats.ErrSlowConsumer.
func (c *Client) Outputs(ctx context.Context, pipeline string) (*Outputs, error) {
	p, err := c.Pipeline(ctx, pipeline)
	if err != nil {
		return nil, err
	}
	before := c.nc.LastError()
	sub, err := c.nc.SubscribeSync(p.Output)
	if err != nil {
		return nil, fmt.Errorf("smtd client: subscribing to %s: %w", p.Output, err)
	}
	if err := sub.SetPendingLimits(1<<16, 256<<20); err != nil {
		sub.Unsubscribe()
		return nil, err
	}
	fctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := c.nc.FlushWithContext(fctx); err != nil {
		sub.Unsubscribe()
		return nil, fmt.Errorf("smtd client: subscribing to %s: %w", p.Output, err)
	}
	// The server's refusal of the subscription comes before its answer
	// to the flush, and is the connection's last error by then (unless
	// another error came in between).
	if err := c.nc.LastError(); !errors.Is(err, before) && feed.Refused(err, "Subscription", p.Output) {
		sub.Unsubscribe()
		return nil, fmt.Errorf("smtd client: subscribing to %s: %w", p.Output, err)
	}
	return &Outputs{Subject: p.Output, sub: sub}, nil
}

// Next waits for the next output and decodes it.
func (o *Outputs) Next(ctx context.Context) (Embedding, error) {
	m, err := o.sub.NextMsgWithContext(ctx)
	if err != nil {
		return Embedding{}, fmt.Errorf("smtd client: %s: %w", o.Subject, err)
	}
	return Decode(m)
}

// Close ends the subscription.
func (o *Outputs) Close() error { return o.sub.Unsubscribe() }
