package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"gopkg.in/yaml.v3"

	"github.com/smtd/smtd/config"
	"github.com/smtd/smtd/internal/natscluster"
)

// natsCluster starts n nats-server nodes with JetStream in this process,
// routed on loopback ports, and returns them with their client URLs.
func natsCluster(t testing.TB, n int) ([]*server.Server, string) {
	t.Helper()
	c, err := natscluster.Start(t.TempDir(), n)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Shutdown)
	return c.Servers, c.URL
}

// lockedBuffer collects a child's logs while the test reads them.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// childDaemon is a daemon in a process of its own (the test binary, see
// TestMain), so that it can be killed and frozen with signals.
type childDaemon struct {
	name string
	dir  string // its data_dir
	path string // its config file
	cmd  *exec.Cmd
	log  lockedBuffer
}

func newChildDaemon(t testing.TB, name string, cfg *config.Config) *childDaemon {
	t.Helper()
	c := &childDaemon{name: name, dir: cfg.DataDir, path: filepath.Join(t.TempDir(), name+".yaml")}
	data, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(c.path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	c.start(t)
	t.Cleanup(func() {
		c.cmd.Process.Kill() // stopped or not
		c.cmd.Wait()
		if t.Failed() {
			t.Logf("logs of %s:\n%s", c.name, c.log.String())
		}
	})
	return c
}

func (c *childDaemon) start(t testing.TB) {
	t.Helper()
	c.cmd = exec.Command(os.Args[0], "-test.run=^$")
	c.cmd.Env = append(os.Environ(), childConfigEnv+"="+c.path)
	c.cmd.Stderr = &c.log
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
}

func (c *childDaemon) signal(t testing.TB, sig syscall.Signal) {
	t.Helper()
	if err := c.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	if sig == syscall.SIGKILL {
		c.cmd.Wait()
	}
}

// clusterPipelineStatus asks any daemon of the cluster for a pipeline's
// status; ok is false if none answered in time.
func clusterPipelineStatus(nc *nats.Conn, prefix, pipeline string) (PipelineStatus, bool) {
	m, err := nc.Request(prefix+".status", nil, 500*time.Millisecond)
	if err != nil {
		return PipelineStatus{}, false
	}
	var st Status
	if json.Unmarshal(m.Data, &st) != nil {
		return PipelineStatus{}, false
	}
	for _, p := range st.Pipelines {
		if p.Name == pipeline {
			return p, true
		}
	}
	return PipelineStatus{}, false
}

// storedCheckpoint reads the checkpoint the latest pointer of a pipeline
// names in the cluster's object store.
func storedCheckpoint(t testing.TB, js jetstream.JetStream, pipeline string) (*Checkpoint, pointer) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	kv, err := js.KeyValue(ctx, latestBucket)
	if err != nil {
		return nil, pointer{}
	}
	e, err := kv.Get(ctx, pipeline)
	if err != nil {
		return nil, pointer{}
	}
	p := parsePointer(e.Value())
	obj, err := js.ObjectStore(ctx, checkpointBucket)
	if err != nil || p.Object == "" {
		return nil, p
	}
	data, err := obj.GetBytes(ctx, p.Object)
	if err != nil {
		return nil, p
	}
	c, err := DecodeCheckpoint(data)
	if err != nil {
		t.Fatalf("%s: %v", p.Object, err)
	}
	return c, p
}

// finalCheckpoint waits until the pipeline has applied all n messages,
// asks its owner (through any daemon) for a checkpoint, and returns it
// from the object store.
func finalCheckpoint(t testing.TB, nc *nats.Conn, js jetstream.JetStream, pipeline string, n int) *Checkpoint {
	t.Helper()
	waitFor(t, 3*time.Minute, "every message applied", func() bool {
		st, _ := clusterPipelineStatus(nc, "cl", pipeline)
		return st.LastSeq == uint64(n)
	})
	var got *Checkpoint
	waitFor(t, time.Minute, "the final checkpoint", func() bool {
		if got, _ = storedCheckpoint(t, js, pipeline); got != nil && got.LastSeq == uint64(n) {
			return true
		}
		m, err := nc.Request("cl.control.checkpoint", []byte(pipeline), 10*time.Second)
		if err == nil && m.Header.Get("Nats-Service-Error") != "" {
			t.Logf("checkpoint request: %s", m.Header.Get("Nats-Service-Error"))
		}
		return false
	})
	return got
}

// clusterPipeline is the deterministic pipeline of the cluster tests.
func clusterPipeline(name, subject string) config.Pipeline {
	p := digitsPipeline(name, subject, 32)
	p.Deterministic = true
	p.Seed = 7
	p.Batch.Size = 20
	return p
}

// referenceModel learns a recorded stream with one uninterrupted daemon
// of its own and returns its last checkpoint.
func referenceModel(t testing.TB, p config.Pipeline, stream string) (*Checkpoint, int) {
	t.Helper()
	ns := startNATS(t)
	cfg := testConfig(t, p)
	cfg.NATS.URL = ns.ClientURL()
	cfg.Service.Name, cfg.Service.Prefix = "smtd-ref", "ref"
	cfg.Checkpoint.EverySamples = 100
	d := startDaemon(t, cfg)
	n := replayFile(t, connect(t, ns.ClientURL()), stream, p.Input.Subject)
	waitFor(t, 2*time.Minute, "reference run", func() bool { return pipelineStatus(d, p.Name).LastSeq == uint64(n) })
	if err := d.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	return lastCheckpoint(t, cfg, p.Name), n
}

// sameModel fails the test unless got holds the model of want, bit for
// bit, after as many messages.
func sameModel(t testing.TB, got, want *Checkpoint) {
	t.Helper()
	if got.Samples != want.Samples || got.ModelVersion != want.ModelVersion || got.LastSeq != want.LastSeq {
		t.Errorf("%d samples, version %d, seq %d; uninterrupted: %d, %d, %d",
			got.Samples, got.ModelVersion, got.LastSeq, want.Samples, want.ModelVersion, want.LastSeq)
	}
	if !bytes.Equal(got.RNG, want.RNG) {
		t.Error("random source state differs")
	}
	if len(got.Sections) != len(want.Sections) {
		t.Fatalf("%d sections, want %d", len(got.Sections), len(want.Sections))
	}
	for i := range want.Sections {
		if !bytes.Equal(got.Sections[i].Data, want.Sections[i].Data) {
			t.Errorf("section %s differs from the uninterrupted run's", want.Sections[i].Name)
		}
	}
}

// clusterConfig is the config of daemon name of a test cluster.
func clusterConfig(t testing.TB, url, name string, replicas int, p config.Pipeline) *config.Config {
	cfg := testConfig(t, p)
	cfg.NATS.URL = url
	cfg.NATS.Replicas = replicas
	cfg.Service.Name, cfg.Service.Prefix = "smtd-cl", "cl"
	cfg.Checkpoint.EverySamples = 100
	cfg.Log.Level = "info"
	cfg.Cluster = config.Cluster{Enabled: true, Name: name, LeaseTTL: 2 * time.Second}
	return cfg
}

// testCluster is a 3-node NATS cluster (R3) with a daemon process
// d1..d3 on it carrying one pipeline.
type testCluster struct {
	servers []*server.Server
	nc      *nats.Conn
	js      jetstream.JetStream
	daemons map[string]*childDaemon
	status  func() PipelineStatus // the pipeline's, from any daemon
}

// startCluster starts a testCluster for p and waits until the pipeline
// has an owner and its input stream can be reached.
func startCluster(t testing.TB, p config.Pipeline) *testCluster {
	t.Helper()
	servers, url := natsCluster(t, 3)
	c := &testCluster{servers: servers, nc: connect(t, url), daemons: map[string]*childDaemon{}}
	var err error
	if c.js, err = jetstream.New(c.nc); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"d1", "d2", "d3"} {
		c.daemons[name] = newChildDaemon(t, name, clusterConfig(t, url, name, 3, p))
	}
	c.status = func() PipelineStatus {
		st, _ := clusterPipelineStatus(c.nc, "cl", p.Name)
		return st
	}
	waitForOwner(t, c.nc, c.js, p)
	return c
}

// ownerPast waits up to two minutes until status names one of daemons as
// the pipeline's owner with the pipeline past seq, and returns that
// status. A standby that cannot read the lease at that moment reports the
// LastSeq of the checkpoint it serves but no owner.
func ownerPast(t testing.TB, status func() PipelineStatus, daemons map[string]*childDaemon, seq uint64) PipelineStatus {
	t.Helper()
	var st PipelineStatus
	waitFor(t, 2*time.Minute, fmt.Sprintf("an owner past seq %d", seq), func() bool {
		st = status()
		return st.LastSeq >= seq && daemons[st.Owner] != nil
	})
	return st
}

// waitForOwner waits until a daemon of the test cluster (prefix cl) owns
// p and p's input stream can be reached.
func waitForOwner(t testing.TB, nc *nats.Conn, js jetstream.JetStream, p config.Pipeline) {
	t.Helper()
	waitFor(t, time.Minute, "an owner and its input stream", func() bool {
		st, _ := clusterPipelineStatus(nc, "cl", p.Name)
		return st.Owner != "" && streamReachable(js, p.Input.Subject)
	})
}

// Takeover: three daemons on a 3-node JetStream cluster (R3) learn a
// recorded stream while the owner of the pipeline is killed with SIGKILL,
// then a NATS node is shut down, then the new owner is killed. Each time
// a standby takes the lease over and continues after the newest
// checkpoint in the object store. The final model equals an uninterrupted
// run's bit for bit, every message is applied exactly once, and the
// output stream holds one output per input.
func TestTakeoverAfterKills(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a NATS cluster and daemon processes")
	}
	const stream = "mnist-train-1000.smtdrec"
	p := clusterPipeline("kid", "cluster.kid")
	p.Output.Transport = config.JetStream
	want, n := referenceModel(t, clusterPipeline("ref", "cluster.ref"), stream)
	want.Pipeline = "kid"

	c := startCluster(t, p)
	servers, nc, js, daemons, status := c.servers, c.nc, c.js, c.daemons, c.status
	if got := replayFile(t, nc, stream, "cluster.kid"); got != n {
		t.Fatalf("replayed %d of %d", got, n)
	}

	takeover := func(at uint64) {
		t.Helper()
		st := ownerPast(t, status, daemons, at)
		owner := daemons[st.Owner]
		owner.signal(t, syscall.SIGKILL)
		killed := time.Now()
		var next PipelineStatus
		waitFor(t, time.Minute, "a new owner", func() bool {
			next = status()
			return next.Owner != "" && next.Owner != owner.name && next.Epoch > st.Epoch
		})
		t.Logf("%s (epoch %d) killed after seq %d; %s (epoch %d) took over in %v", owner.name, st.Epoch, st.LastSeq, next.Owner, next.Epoch, time.Since(killed).Round(time.Millisecond))
	}
	takeover(uint64(n) / 4)
	waitFor(t, 2*time.Minute, "past half the stream", func() bool { return status().LastSeq >= uint64(n)/2 })
	servers[0].Shutdown()
	t.Log("NATS node n1 shut down")
	takeover(3 * uint64(n) / 4)

	got := finalCheckpoint(t, nc, js, "kid", n)
	sameModel(t, got, want)
	if c := got.Counters; c.Received != int64(n) || c.Learned != int64(n) || c.Rejected != 0 || c.NotLearned != 0 {
		t.Errorf("counters %+v: want every one of %d messages received and learned once", c, n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := js.Stream(ctx, p.OutputStreamName())
	if err != nil {
		t.Fatal(err)
	}
	if got := out.CachedInfo().State.Msgs; got != uint64(n) {
		t.Errorf("output stream holds %d outputs, want one per input (%d)", got, n)
	}
	restored := 0
	for _, d := range daemons {
		restored += strings.Count(d.log.String(), "checkpoint restored")
		if strings.Contains(d.log.String(), filepath.Join(d.dir, "checkpoints")) {
			t.Errorf("%s restored a checkpoint from its disk", d.name)
		}
	}
	if restored < 2 {
		t.Errorf("%d takeovers restored a checkpoint, want 2", restored)
	}
}

// streamReachable reports whether a JetStream publish to subject reaches
// its stream from this connection: a probe that expects an impossible
// last sequence is answered with an error by the stream, and stores
// nothing. Just after a replicated stream is created, its leader's
// interest may not have reached every node yet.
func streamReachable(js jetstream.JetStream, subject string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_, err := js.Publish(ctx, subject, nil, jetstream.WithExpectLastSequence(math.MaxInt64))
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence
}

// checkpointObjects lists the objects of the checkpoint store.
func checkpointObjects(t testing.TB, js jetstream.JetStream) map[string]bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	obj, err := js.ObjectStore(ctx, checkpointBucket)
	if err != nil {
		t.Fatal(err)
	}
	infos, err := obj.List(ctx)
	if err != nil && err != jetstream.ErrNoObjectsFound {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, in := range infos {
		names[in.Name] = true
	}
	return names
}

// Placement: pipelines spread over the live daemons, a pipeline pinned by
// labels is owned only by a daemon that carries them, and a daemon that
// stops cleanly hands its pipelines over at once.
func TestClusterPlacement(t *testing.T) {
	ns := startNATS(t)
	nc := connect(t, ns.ClientURL())
	var pipelines []config.Pipeline
	for i := range 6 {
		p := digitsPipeline(fmt.Sprintf("p%d", i), fmt.Sprintf("place.p%d", i), 8)
		p.SMT.Dim = 0
		pipelines = append(pipelines, p)
	}
	pipelines[0].Placement = []string{"gpu"}
	start := func(name string, labels ...string) *Daemon {
		cfg := clusterConfig(t, ns.ClientURL(), name, 1, pipelines[0])
		cfg.Pipelines = pipelines
		cfg.Cluster.Labels = labels
		cfg.Log.Level = "warn"
		return startDaemon(t, cfg)
	}
	a := start("a")
	b := start("b", "gpu")
	owners := func() map[string]string {
		m := map[string]string{}
		for _, d := range []*Daemon{a, b} {
			for _, p := range d.Status().Pipelines {
				if p.Role == "owner" {
					m[p.Name] = d.cluster.self.Name
				}
			}
		}
		return m
	}
	waitFor(t, time.Minute, "every pipeline owned, by both daemons", func() bool {
		o := owners()
		count := map[string]int{}
		for _, d := range o {
			count[d]++
		}
		return len(o) == len(pipelines) && count["a"] > 0 && count["b"] > 0
	})
	if o := owners(); o["p0"] != "b" {
		t.Errorf("p0 (placement gpu) is owned by %q, want b", o["p0"])
	}
	// A standby learns the lease from the bucket's watch, a moment after
	// the owner took it: any daemon's status names the owner soon.
	var st PipelineStatus
	named := func() bool {
		var ok bool
		st, ok = clusterPipelineStatus(nc, "cl", "p1")
		return ok && st.Owner != "" && st.Epoch != 0
	}
	deadline := time.Now().Add(10 * time.Second)
	for !named() && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if st.Owner == "" || st.Epoch == 0 {
		t.Errorf("status of p1 from any daemon: %+v", st)
	}
	// a stops: b owns everything but p0's placement is kept.
	released := time.Now()
	a.Shutdown(context.Background())
	waitFor(t, time.Minute, "b owns every pipeline", func() bool { return len(owners()) == len(pipelines) })
	t.Logf("a's pipelines taken over %v after its shutdown", time.Since(released).Round(time.Millisecond))
}

// The deployment in deploy/ is consistent: three NATS nodes routed to each
// other, and three daemons in cluster mode with distinct names that reach
// all three nodes and replicate on all three.
func TestDeployFiles(t *testing.T) {
	var clientURLs []string
	for i := 1; i <= 3; i++ {
		opts, err := server.ProcessConfigFile(filepath.Join("..", "deploy", fmt.Sprintf("nats-%d.conf", i)))
		if err != nil {
			t.Fatal(err)
		}
		if len(opts.Routes) != 3 || opts.Cluster.Name != "smtd" || opts.StoreDir == "" {
			t.Errorf("nats-%d.conf: routes %v, cluster %q, store %q", i, opts.Routes, opts.Cluster.Name, opts.StoreDir)
		}
		// A frozen daemon keeps its share of the queries until its server
		// drops it (TestFrozenDaemonLeavesQueries).
		interval, pings := opts.PingInterval, opts.MaxPingsOut
		if interval == 0 {
			interval = server.DEFAULT_PING_INTERVAL
		}
		if pings == 0 {
			pings = server.DEFAULT_PING_MAX_OUT
		}
		if stale := interval * time.Duration(pings); stale > 15*time.Second {
			t.Errorf("nats-%d.conf: an unresponsive client is dropped after %v (ping_interval × ping_max); want at most 15s", i, stale)
		}
		clientURLs = append(clientURLs, fmt.Sprintf("nats://%s:%d", opts.Host, opts.Port))
	}
	names := map[string]bool{}
	for i := 1; i <= 3; i++ {
		cfg, err := config.Load(filepath.Join("..", "deploy", fmt.Sprintf("smtd-%d.yaml", i)))
		if err != nil {
			t.Fatal(err)
		}
		if !cfg.Cluster.Enabled || cfg.NATS.Replicas != 3 || cfg.NATS.URL != strings.Join(clientURLs, ",") {
			t.Errorf("smtd-%d.yaml: cluster %+v, replicas %d, url %q (nodes at %v)", i, cfg.Cluster, cfg.NATS.Replicas, cfg.NATS.URL, clientURLs)
		}
		names[cfg.Cluster.Name] = true
	}
	if len(names) != 3 {
		t.Errorf("daemon names %v are not distinct", names)
	}
}

// A standby answers embed requests from the newest checkpoint, and every
// reply says which daemon and which model version answered; the
// checkpoint endpoint of any daemon is passed on to the owner.
func TestStandbyServesNewestCheckpoint(t *testing.T) {
	ns := startNATS(t)
	nc := connect(t, ns.ClientURL())
	p := clusterPipeline("kid", "serve.kid")
	daemons := map[string]*Daemon{}
	for _, name := range []string{"a", "b"} {
		cfg := clusterConfig(t, ns.ClientURL(), name, 1, p)
		cfg.Log.Level = "warn"
		daemons[name] = startDaemon(t, cfg)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	waitForOwner(t, nc, js, p)
	n := replayFile(t, nc, "mnist-train-1000.smtdrec", "serve.kid")
	ckpt := finalCheckpoint(t, nc, js, "kid", n)
	var owner, standby *Daemon
	waitFor(t, time.Minute, "the standby serving the final checkpoint", func() bool {
		for _, d := range daemons {
			st := pipelineStatus(d, "kid")
			switch {
			case st.Role == "owner":
				owner = d
			case st.ServedVersion == ckpt.ModelVersion:
				standby = d
			}
		}
		return owner != nil && standby != nil
	})
	answeredBy := map[string]int{}
	req := digitRequest(daemons["a"].fixed.EmbedSubject("kid"))
	for range 40 {
		m, err := nc.RequestMsg(req, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		by := m.Header.Get(HeaderDaemon)
		answeredBy[by]++
		if v := m.Header.Get(HeaderModelVersion); v != fmt.Sprint(ckpt.ModelVersion) {
			t.Errorf("%s answered with model version %s, want the checkpoint's %d", by, v, ckpt.ModelVersion)
		}
	}
	if len(answeredBy) != 2 {
		t.Errorf("answers by daemon: %v; want both to answer", answeredBy)
	}
	if standby.Status().Pipelines[0].Owner != owner.cluster.self.Name {
		t.Errorf("the standby's status names owner %q, want %q", standby.Status().Pipelines[0].Owner, owner.cluster.self.Name)
	}
}

// digitRequest is an embed request of one 28×28 uint8 image to subject.
func digitRequest(subject string) *nats.Msg {
	req := nats.NewMsg(subject)
	req.Header.Set(HeaderShape, "28,28")
	req.Header.Set(HeaderDtype, "uint8")
	req.Data = make([]byte, 28*28)
	for i := range req.Data {
		req.Data[i] = byte(i % 251)
	}
	return req
}

// Rendezvous hashing spreads pipelines over daemons whose names differ
// in one byte (the deployment's d1, d2, d3): the built-in pipelines do
// not all prefer one daemon, and of 60 pipelines each daemon is
// preferred for at least 15 (20 expected).
func TestRendezvousSpreads(t *testing.T) {
	preferred := func(pipeline string) string {
		best, top := "", uint64(0)
		for _, d := range []string{"d1", "d2", "d3"} {
			if s := rendezvous(pipeline, d); best == "" || s > top {
				best, top = d, s
			}
		}
		return best
	}
	owners := map[string]bool{}
	for _, p := range config.Default().Pipelines {
		owners[preferred(p.Name)] = true
	}
	if len(owners) < 2 {
		t.Errorf("the built-in pipelines all prefer %v", owners)
	}
	count := map[string]int{}
	for i := range 60 {
		count[preferred(fmt.Sprintf("p%d", i))]++
	}
	for _, d := range []string{"d1", "d2", "d3"} {
		if count[d] < 15 {
			t.Errorf("preferred owners of 60 pipelines: %v; want each daemon at least 15", count)
			break
		}
	}
}
