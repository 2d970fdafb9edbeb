package daemon

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/smtd/smtd/config"
)

// Cluster mode: several daemons share one config and one NATS cluster.
//
// Each pipeline has one owner at a time, the daemon holding its lease: the
// key <pipeline> of the key-value bucket smtd-leases, whose messages live
// for cluster.lease_ttl (the bucket's MaxAge). A daemon acquires a free
// lease by creating the key (compare-and-set on "absent"); the revision of
// that create is the term's epoch, which grows with every takeover. The
// owner renews every TTL/4 by updating the key from the revision it last
// wrote; it releases the lease on a clean shutdown by deleting the key,
// so that a standby takes over at once. An owner that stops renewing
// (killed, frozen, cut off) loses the lease when the key expires.
//
// Fencing. An owner trusts its lease until the time it sent its last
// successful renewal plus the TTL: the server cannot have expired the key
// before then. Past that deadline it neither acknowledges input, nor
// publishes, nor checkpoints. Its consumer is its own (smtd-<pipeline>-e<epoch>),
// deleted by its successor, so acknowledgements of a paused owner reach no
// one. The latest-checkpoint pointer (bucket smtd-latest) carries the
// epoch of the owner that moved it and only moves by compare-and-set: a
// successor claims it at takeover, so a checkpoint an old owner stores
// afterwards fails to move it and is deleted again; a checkpoint of an
// older epoch past the pointer's version is never restored.
//
// Placement. Daemons announce themselves in the bucket smtd-members
// (same TTL). Every pipeline prefers, among the live daemons whose labels
// include its placement labels, the one with the highest rendezvous hash
// of pipeline and daemon name: that daemon acquires a free lease at
// once, any other eligible one after half a TTL, and an owner hands a
// pipeline over (final checkpoint, release) once its preferred daemon has
// been live for a whole TTL. Pipelines thus spread over the live daemons
// and move back when a daemon returns.
const (
	leaseBucket  = "smtd-leases"
	memberBucket = "smtd-members"
)

var (
	// errLeaseLost ends an ownership term whose lease ran out or was
	// taken: nothing more is written.
	errLeaseLost = errors.New("smtd: the pipeline's lease was lost")
	// errHandoff ends a term to give the pipeline to its preferred
	// daemon: a last checkpoint is written and the lease released.
	errHandoff = errors.New("smtd: handing the pipeline over to its preferred daemon")
)

// Lease is the value of a pipeline's key in the lease bucket. The owner
// rewrites it at every renewal with its view of the pipeline, which any
// daemon's status reports.
type Lease struct {
	Owner        string    `json:"owner"`
	Epoch        uint64    `json:"epoch"`
	Acquired     time.Time `json:"acquired"`
	ModelVersion uint64    `json:"model_version"`
	LastSeq      uint64    `json:"last_seq"`
	Backlog      uint64    `json:"backlog"`
	Health       Health    `json:"health"`
}

// Member is a live daemon of the cluster, as announced in the member
// bucket.
type Member struct {
	Name   string   `json:"name"`
	Labels []string `json:"labels,omitempty"`
	// Since is when the daemon started; in status, since when the
	// answering daemon has seen it live without a break.
	Since time.Time `json:"since"`
	// Instance tells two processes of the same name apart.
	Instance string `json:"instance"`
}

// pointer is the value of a pipeline's key in the latest-checkpoint
// bucket in cluster mode (outside it, the object name alone).
type pointer struct {
	Object  string `json:"object,omitempty"`
	Epoch   uint64 `json:"epoch"`
	Version uint64 `json:"version"`
}

func parsePointer(v []byte) pointer {
	var p pointer
	if len(v) > 0 && v[0] == '{' {
		json.Unmarshal(v, &p)
		return p
	}
	p.Object = string(v)
	p.Version = checkpointVersion(p.Object)
	return p
}

// term is one ownership term of a pipeline.
type term struct {
	epoch    uint64
	rev      atomic.Uint64 // the lease key's revision last written
	deadline atomic.Int64  // the lease holds until then (Unix ns)
	acquired time.Time
	// pointerRev is the latest pointer's revision this term last wrote;
	// owned by the pipeline's goroutine.
	pointerRev uint64
	cancel     context.CancelCauseFunc
}

func (t *term) valid() bool { return time.Now().UnixNano() < t.deadline.Load() }

// lose ends the term at once: the lease was found taken.
func (t *term) lose() {
	t.deadline.Store(0)
	t.cancel(errLeaseLost)
}

// movePointer points the latest-checkpoint key at obj, by compare-and-set
// from the revision this term last wrote.
func (t *term) movePointer(ctx context.Context, kv jetstream.KeyValue, pipeline, obj string) error {
	val, _ := json.Marshal(pointer{Object: obj, Epoch: t.epoch, Version: checkpointVersion(obj)})
	rev, err := kv.Update(ctx, pipeline, val, t.pointerRev)
	if errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		return fmt.Errorf("%w: another owner moved the latest checkpoint pointer: %v", errLeaseLost, err)
	}
	if err != nil {
		return err
	}
	t.pointerRev = rev
	return nil
}

// cluster is a daemon's part in cluster mode.
type cluster struct {
	d       *Daemon
	self    Member
	ttl     time.Duration
	leases  jetstream.KeyValue
	members jetstream.KeyValue
	live    atomic.Pointer[[]Member] // the members last read, by name
	// seen is when this daemon first saw each live member (since it
	// last disappeared): a daemon frozen and resumed counts as new.
	// Owned by readMembers' callers (start, then heartbeat).
	seen map[string]time.Time
}

// clusterName is the default cluster.name: host name and process ID,
// with what is not a letter, digit, '-' or '_' replaced by '-'.
func clusterName() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "smtd"
	}
	name := []byte(host)
	for i, b := range name {
		if !('a' <= b && b <= 'z' || 'A' <= b && b <= 'Z' || '0' <= b && b <= '9' || b == '-' || b == '_') {
			name[i] = '-'
		}
	}
	return string(name[:min(len(name), 48)]) + "-" + strconv.Itoa(os.Getpid())
}

// joinCluster creates the cluster's buckets (with nats.replicas) and
// announces this daemon. A name still announced by another live process
// is waited for during one TTL (a daemon restarted at once under the same
// name), then refused.
func (d *Daemon) joinCluster(ctx context.Context) (*cluster, error) {
	cc := d.fixed.Cluster
	c := &cluster{d: d, ttl: cc.LeaseTTL, self: Member{Name: d.member, Labels: cc.Labels, Since: time.Now().UTC()}, seen: map[string]time.Time{}}
	c.self.Instance = strconv.FormatUint(uint64(time.Now().UnixNano()), 36)
	var err error
	bctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for _, b := range []struct {
		kv   *jetstream.KeyValue
		name string
		desc string
	}{
		{&c.leases, leaseBucket, "smtd: ownership lease per pipeline"},
		{&c.members, memberBucket, "smtd: the live daemons of the cluster"},
	} {
		*b.kv, err = keyValue(bctx, d.js, jetstream.KeyValueConfig{
			Bucket: b.name, Description: b.desc, History: 1, TTL: c.ttl,
			Storage: jetstream.FileStorage, Replicas: d.fixed.NATS.Replicas,
		})
		if err != nil {
			return nil, err
		}
	}
	val, _ := json.Marshal(c.self)
	giveUp := time.Now().Add(c.ttl + time.Second)
	for {
		_, err := c.members.Create(ctx, c.self.Name, val)
		if err == nil {
			break
		}
		if !errors.Is(err, jetstream.ErrKeyExists) {
			return nil, fmt.Errorf("smtd: joining the cluster as %s: %w", c.self.Name, err)
		}
		if time.Now().After(giveUp) {
			return nil, fmt.Errorf("smtd: cluster.name %s is used by another live daemon", c.self.Name)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(c.ttl / 4):
		}
	}
	c.readMembers(ctx)
	d.log.Info().Str("daemon", c.self.Name).Strs("labels", c.self.Labels).Dur("lease_ttl", c.ttl).Msg("joined the cluster")
	return c, nil
}

// heartbeat renews this daemon's member entry and rereads the others'
// every TTL/4 until ctx is done, then removes the entry.
func (c *cluster) heartbeat(ctx context.Context) {
	val, _ := json.Marshal(c.self)
	t := time.NewTicker(c.ttl / 4)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			dctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			c.members.Delete(dctx, c.self.Name)
			cancel()
			return
		case <-t.C:
		}
		rctx, cancel := context.WithTimeout(ctx, c.ttl/2)
		if _, err := c.members.Put(rctx, c.self.Name, val); err != nil && ctx.Err() == nil {
			c.d.log.Warn().Err(err).Msg("announcing this daemon to the cluster")
		}
		c.readMembers(rctx)
		cancel()
	}
}

// readMembers reads the live members; on error the last view is kept.
func (c *cluster) readMembers(ctx context.Context) {
	keys, err := c.members.Keys(ctx)
	if err != nil && !errors.Is(err, jetstream.ErrNoKeysFound) {
		return
	}
	var out []Member
	for _, k := range keys {
		e, err := c.members.Get(ctx, k)
		if err != nil {
			continue
		}
		var m Member
		if json.Unmarshal(e.Value(), &m) == nil {
			out = append(out, m)
		}
	}
	if !slices.ContainsFunc(out, func(m Member) bool { return m.Name == c.self.Name }) {
		out = append(out, c.self) // announced, or about to be again
	}
	now := time.Now()
	for name := range c.seen {
		if !slices.ContainsFunc(out, func(m Member) bool { return m.Name == name }) {
			delete(c.seen, name)
		}
	}
	for i := range out {
		if _, ok := c.seen[out[i].Name]; !ok {
			c.seen[out[i].Name] = now
		}
		out[i].Since = c.seen[out[i].Name]
	}
	slices.SortFunc(out, func(a, b Member) int {
		switch {
		case a.Name < b.Name:
			return -1
		case a.Name > b.Name:
			return 1
		}
		return 0
	})
	c.live.Store(&out)
}

// eligible reports whether m may own a pipeline with these placement
// labels.
func eligible(m *Member, placement []string) bool {
	for _, l := range placement {
		if !slices.Contains(m.Labels, l) {
			return false
		}
	}
	return true
}

// preferred returns the live member that should own pipeline p (highest
// rendezvous hash among the eligible), and since when it is live; "" if
// none is eligible.
func (c *cluster) preferred(p *config.Pipeline) (string, time.Time) {
	var best string
	var since time.Time
	var top uint64
	for _, m := range *c.live.Load() {
		if !eligible(&m, p.Placement) {
			continue
		}
		if s := rendezvous(p.Name, m.Name); best == "" || s > top {
			best, top, since = m.Name, s, m.Since
		}
	}
	return best, since
}

// rendezvous is the weight of daemon for pipeline in rendezvous hashing
// (Thaler and Ravishankar, 1998): the first 8 bytes of SHA-256 of both
// names, the same in every daemon. A hash whose output bits all depend on
// every input byte matters here: names such as d1, d2, d3 differ in one
// byte, and FNV-1a's high bits barely move with the last byte, which made
// one daemon the preferred owner of every pipeline.
func rendezvous(pipeline, daemon string) uint64 {
	h := sha256.New()
	h.Write([]byte(pipeline))
	h.Write([]byte{0})
	h.Write([]byte(daemon))
	return binary.BigEndian.Uint64(h.Sum(nil))
}

// lease reads a pipeline's lease; nil if it is free.
func (c *cluster) lease(ctx context.Context, pipeline string) (*Lease, error) {
	e, err := c.leases.Get(ctx, pipeline)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var l Lease
	if err := json.Unmarshal(e.Value(), &l); err != nil {
		return nil, fmt.Errorf("smtd: lease of %s: %w", pipeline, err)
	}
	return &l, nil
}

// leaseValue is the lease the owner of pl writes.
func (c *cluster) leaseValue(pl *pipeline, t *term) []byte {
	l := Lease{Owner: c.self.Name, Epoch: t.epoch, Acquired: t.acquired, Health: *pl.health.Load(),
		LastSeq: pl.stats.lastSeq.Load(), Backlog: pl.stats.backlog.Load()}
	if s := pl.snap.Load(); s != nil {
		l.ModelVersion = s.version
	}
	b, _ := json.Marshal(l)
	return b
}

// serve runs pipeline pl in cluster mode until ctx is done: standing by
// (serving queries from the newest checkpoint), acquiring the lease when
// the pipeline is free, and owning it for as long as the lease holds.
func (c *cluster) serve(ctx context.Context, pl *pipeline) {
	tick := time.NewTicker(c.ttl / 8)
	defer tick.Stop()
	var freeSince time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case r := <-pl.tune:
			pl.applyTune(r)
			continue
		case r := <-pl.ckptReq:
			r.done <- checkpointResult{err: fmt.Errorf("smtd: %s does not own pipeline %s", c.self.Name, pl.name)}
			continue
		case <-tick.C:
		}
		rctx, cancel := context.WithTimeout(ctx, c.ttl/2)
		l, err := c.lease(rctx, pl.name)
		if err == nil {
			c.refreshStandby(rctx, pl)
		}
		cancel()
		switch {
		case err != nil:
			continue // cannot tell: stay as we are
		case l != nil:
			pl.lease.Store(l)
			freeSince = time.Time{}
			continue
		}
		pl.lease.Store(nil)
		if !eligible(&c.self, pl.cfg.Placement) {
			continue
		}
		if freeSince.IsZero() {
			freeSince = time.Now()
		}
		if want, _ := c.preferred(&pl.cfg); want != c.self.Name && time.Since(freeSince) < c.ttl/2 {
			continue // the preferred daemon goes first
		}
		if t := c.acquire(ctx, pl); t != nil {
			c.own(ctx, pl, t)
			freeSince = time.Time{}
		}
	}
}

// acquire creates the lease of pl; nil if another daemon was first.
func (c *cluster) acquire(ctx context.Context, pl *pipeline) *term {
	t := &term{acquired: time.Now().UTC()}
	sent := time.Now()
	actx, cancel := context.WithTimeout(ctx, c.ttl/2)
	defer cancel()
	// The epoch is the create's revision, known only once it is done:
	// the value first names the owner, the first renewal adds the epoch.
	rev, err := c.leases.Create(actx, pl.name, c.leaseValue(pl, t))
	if err != nil {
		if !errors.Is(err, jetstream.ErrKeyExists) {
			pl.log.Warn().Err(err).Msg("acquiring the pipeline's lease")
		}
		return nil
	}
	t.epoch = rev
	t.rev.Store(rev)
	t.deadline.Store(sent.Add(c.ttl).UnixNano())
	if rev, err := c.leases.Update(actx, pl.name, c.leaseValue(pl, t), rev); err == nil {
		t.rev.Store(rev)
	}
	return t
}

// own runs one ownership term of pl: restore the newest checkpoint from
// the object store, claim the latest pointer, read the input after the
// checkpoint with this term's consumer, and learn until the term ends
// (shutdown, handoff, or the lease lost); then release the lease unless
// it was lost.
func (c *cluster) own(ctx context.Context, pl *pipeline, t *term) {
	termCtx, cancel := context.WithCancelCause(ctx)
	t.cancel = cancel
	defer cancel(nil)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		c.renew(termCtx, pl, t)
	}()
	pl.reset()
	pl.term = t
	l := Lease{Owner: c.self.Name, Epoch: t.epoch, Acquired: t.acquired}
	pl.lease.Store(&l)
	pl.log.Info().Uint64("epoch", t.epoch).Msg("lease acquired: this daemon owns the pipeline")
	c.d.publishEvent("events.cluster", clusterEvent{Pipeline: pl.name, Daemon: c.self.Name, Epoch: t.epoch, Event: "acquired"})
	if err := c.d.startPipeline(termCtx, pl); err != nil {
		if termCtx.Err() == nil {
			pl.log.Error().Err(err).Msg("starting the pipeline as its owner; releasing the lease")
		}
		cancel(err)
	} else {
		pl.run(termCtx)
	}
	cause := context.Cause(termCtx)
	cancel(nil)
	wg.Wait()
	pl.term = nil
	pl.served = "" // a standby again: load the newest checkpoint
	if errors.Is(cause, errLeaseLost) || !t.valid() {
		pl.log.Warn().Uint64("epoch", t.epoch).Msg("lease lost: stepped down without writing")
		c.d.publishEvent("events.cluster", clusterEvent{Pipeline: pl.name, Daemon: c.self.Name, Epoch: t.epoch, Event: "lost"})
		pl.lease.Store(nil)
		return
	}
	dctx, dcancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer dcancel()
	if err := c.leases.Delete(dctx, pl.name, jetstream.LastRevision(t.rev.Load())); err != nil {
		pl.log.Warn().Err(err).Msg("releasing the lease")
	}
	pl.lease.Store(nil)
	why := "released"
	if errors.Is(cause, errHandoff) {
		why = "handed over"
	}
	pl.log.Info().Uint64("epoch", t.epoch).Msg("lease " + why)
	c.d.publishEvent("events.cluster", clusterEvent{Pipeline: pl.name, Daemon: c.self.Name, Epoch: t.epoch, Event: why})
}

// clusterEvent is published on <prefix>.events.cluster when a daemon
// acquires, releases, hands over or loses a pipeline.
type clusterEvent struct {
	Pipeline string `json:"pipeline"`
	Daemon   string `json:"daemon"`
	Epoch    uint64 `json:"epoch"`
	Event    string `json:"event"`
}

// renew keeps the term's lease every TTL/4 until ctx is done. A renewal
// refused because the key changed or expired ends the term with
// errLeaseLost at once; one that cannot reach the server ends it when the
// deadline passes. Once the pipeline's preferred daemon has been live a
// whole TTL, the term ends with errHandoff.
func (c *cluster) renew(ctx context.Context, pl *pipeline, t *term) {
	tick := time.NewTicker(c.ttl / 4)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if !t.valid() {
			t.lose()
			return
		}
		sent := time.Now()
		rctx, cancel := context.WithTimeout(ctx, c.ttl/4)
		rev, err := c.leases.Update(rctx, pl.name, c.leaseValue(pl, t), t.rev.Load())
		cancel()
		switch {
		case err == nil:
			t.rev.Store(rev)
			t.deadline.Store(sent.Add(c.ttl).UnixNano())
		case errors.Is(err, jetstream.ErrKeyRevisionMismatch):
			t.lose()
			return
		case ctx.Err() == nil:
			pl.log.Warn().Err(err).Msg("renewing the lease")
		}
		if want, since := c.preferred(&pl.cfg); want != "" && want != c.self.Name && time.Since(since) > c.ttl {
			pl.log.Info().Str("to", want).Msg("handing the pipeline over to its preferred daemon")
			t.cancel(errHandoff)
			return
		}
	}
}

// refreshStandby loads the newest checkpoint into a pipeline this daemon
// does not own, when the latest pointer has moved, so that its queries
// are answered by the newest model any owner stored.
func (c *cluster) refreshStandby(ctx context.Context, pl *pipeline) {
	store := c.d.store
	e, err := store.latest.Get(ctx, pl.name)
	if err != nil {
		return
	}
	p := parsePointer(e.Value())
	if p.Object == "" || p.Object == pl.served {
		return
	}
	data, err := store.obj.GetBytes(ctx, p.Object)
	if err == nil {
		var ck *Checkpoint
		if ck, err = DecodeCheckpoint(data); err == nil {
			err = pl.restore(ck)
		}
	}
	if err != nil {
		if errors.Is(err, jetstream.ErrObjectNotFound) {
			if now, gerr := store.latest.Get(ctx, pl.name); gerr == nil && now.Revision() != e.Revision() {
				// The owner stored a newer checkpoint and removed this
				// one (checkpoint.keep) between the two reads; the next
				// refresh loads the newer one.
				pl.log.Debug().Str("checkpoint", p.Object).Msg("the newest checkpoint was replaced while being loaded")
				return
			}
		}
		pl.log.Warn().Err(err).Str("checkpoint", p.Object).Msg("loading the newest checkpoint to serve queries")
		return
	}
	pl.served = p.Object
	pl.publishSnapshot()
	pl.log.Debug().Str("checkpoint", p.Object).Uint64("model_version", pl.version).Msg("serving the newest checkpoint")
}

// claimPointer makes the latest-checkpoint pointer carry this term's
// epoch, so that no earlier owner can move it any more.
func (t *term) claimPointer(ctx context.Context, kv jetstream.KeyValue, pipeline string) error {
	var p pointer
	e, err := kv.Get(ctx, pipeline)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		t.pointerRev = 0
	case err != nil:
		return fmt.Errorf("smtd: reading the latest checkpoint pointer: %w", err)
	default:
		p = parsePointer(e.Value())
		t.pointerRev = e.Revision()
	}
	if p.Epoch > t.epoch {
		return fmt.Errorf("%w: the latest checkpoint pointer has epoch %d, after this term's %d", errLeaseLost, p.Epoch, t.epoch)
	}
	return t.movePointer(ctx, kv, pipeline, p.Object)
}

// latestPointer reads a pipeline's latest pointer; the zero pointer if
// there is none.
func (s *checkpointStore) latestPointer(ctx context.Context, pipeline string) pointer {
	e, err := s.latest.Get(ctx, pipeline)
	if err != nil {
		return pointer{}
	}
	return parsePointer(e.Value())
}

// deleteOldConsumers deletes the consumers earlier owners of pl read its
// stream with: their acknowledgements then reach no one.
func (pl *pipeline) deleteOldConsumers(ctx context.Context, stream string) {
	prefix := "smtd-" + pl.cfg.Name
	mine := pl.consumerName()
	s, err := pl.d.js.Stream(ctx, stream)
	if err != nil {
		return
	}
	names := s.ConsumerNames(ctx)
	var old []string
	for n := range names.Name() {
		if n == prefix || (len(n) > len(prefix)+2 && n[:len(prefix)+2] == prefix+"-e" && n != mine) {
			old = append(old, n)
		}
	}
	for _, n := range old {
		if err := pl.d.js.DeleteConsumer(ctx, stream, n); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
			pl.log.Warn().Err(err).Str("consumer", n).Msg("deleting an earlier owner's consumer")
		}
	}
}
