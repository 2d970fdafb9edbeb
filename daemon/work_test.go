package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/smtd/smtd/config"
	"github.com/smtd/smtd/internal/state"
	"github.com/smtd/smtd/online"
)

// workerPipeline is the deterministic worker-mode pipeline of the tests:
// steps of 5 minibatches of 20 images, coded one version behind.
func workerPipeline(name, subject string) config.Pipeline {
	p := clusterPipeline(name, subject)
	p.Workers = config.Workers{Enabled: true, Merge: 5, Staleness: 1, OnOwner: true, TaskTimeout: 5 * time.Second, Precision: 32}
	return p
}

// simulation is a model learned in one process as worker mode learns it.
type simulation struct {
	sections []Section
	rng      []byte
	version  uint64
	samples  int64
}

// simulateWorkers learns the messages of a recorded stream in this
// process by worker mode's deterministic schedule: steps of merge
// minibatches, the step that makes version v+1 coded with version v−τ
// (never older than 0), each minibatch by its own copy of that version
// as a worker receives it (encoded and decoded), its re-seeding
// candidates drawn from the seed and its first sequence; the
// contributions are applied in order. It stops at the last whole step.
func simulateWorkers(t testing.TB, p config.Pipeline, stream string) simulation {
	t.Helper()
	msgs := readStream(t, stream)
	src := rand.NewPCG(p.Seed, 0x736d7464)
	owner := newModel(&p, src).(workModel)
	versions := map[uint64]workModel{}
	keep := func(v uint64) { versions[v] = workerVersion(t, owner, owner) }
	keep(0)
	w := p.Workers
	step := w.Merge * p.Batch.Size
	var sim simulation
	for first := 0; first+step <= len(msgs); first += step {
		v := sim.version
		coded := uint64(0)
		if v >= uint64(w.Staleness) {
			coded = v - uint64(w.Staleness)
		}
		var enc [][]byte
		for b := first; b < first+step; b += p.Batch.Size {
			batch := make([]sample, 0, p.Batch.Size)
			for i := b; i < b+p.Batch.Size; i++ {
				s, err := decode(&p, msgs[i].Header, msgs[i].Data)
				if err != nil {
					t.Fatalf("message %d: %v", i+1, err)
				}
				s.seq = uint64(i + 1)
				batch = append(batch, s)
			}
			c, _ := versions[coded].contribute(batch, rand.NewPCG(p.Seed, uint64(b+1)), int(v-coded)+1, w.Precision)
			enc = append(enc, c)
		}
		if err := owner.applyContributions(enc); err != nil {
			t.Fatalf("step %d: %v", v, err)
		}
		if err := owner.check(); err != nil {
			t.Fatalf("step %d: %v", v, err)
		}
		sim.version++
		sim.samples += int64(step)
		keep(sim.version)
	}
	var err error
	if sim.sections, err = owner.sections(); err != nil {
		t.Fatal(err)
	}
	if sim.rng, err = src.MarshalBinary(); err != nil {
		t.Fatal(err)
	}
	return sim
}

// workMatchesOneDaemon checks that worker mode learns as one daemon
// does: with one minibatch a step, coded with the newest model (τ = 0)
// and sent exactly (workers.precision 64), the owner that applies the
// workers' contributions ends with the model, bit for bit, of a single
// daemon that learned the same minibatches of samples. Both start from
// the dictionary seeded by the first minibatch (workers code the
// seeding step with a dictionary of their own, see seedLocally), and no
// atom is re-seeded (a worker draws the candidates from the task's
// source, a single daemon from its model's). With f_vq codes a worker's
// code is the one a single daemon's learning step assigns, before it
// moves the atoms. It returns the owner's model.
func workMatchesOneDaemon(t *testing.T, p config.Pipeline, samples []sample) *imageModel {
	t.Helper()
	p.Workers.Merge, p.Workers.Staleness, p.Workers.Precision = 1, 0, 64
	var batches [][]sample
	for b := range slices.Chunk(samples, p.Batch.Size) {
		batches = append(batches, b)
	}
	var one, owner *imageModel
	for _, m := range []**imageModel{&one, &owner} {
		*m = newModel(&p, rand.NewPCG(p.Seed, 1)).(*imageModel)
		if _, err := (*m).learn(batches[0]); err != nil {
			t.Fatal(err)
		}
	}
	for i, batch := range batches[1:] {
		enc, _ := workerVersion(t, owner, owner).contribute(batch, rand.NewPCG(p.Seed, batch[0].seq), 1, 64)
		if err := owner.applyContributions([][]byte{enc}); err != nil {
			t.Fatalf("step %d: %v", i+1, err)
		}
		if _, err := one.learn(batch); err != nil {
			t.Fatal(err)
		}
	}
	if n := one.km.Reseeds(); n != 0 {
		t.Fatalf("%d atoms re-seeded: the comparison holds only without", n)
	}
	got, err := owner.sections()
	if err != nil {
		t.Fatal(err)
	}
	want, err := one.sections()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range want {
		if b, err := findSection(got, s.Name); err != nil || !bytes.Equal(b, s.Data) {
			t.Errorf("section %s differs from one daemon's", s.Name)
		}
	}
	return owner
}

// Images with SMT by SGD: the statistics, the workers' gradients summed by
// the owner and its step are those of one daemon (workMatchesOneDaemon).
func TestWorkImagesMatchOneDaemon(t *testing.T) {
	p := digitsPipeline("digits", "mnist.images", 64)
	p.Deterministic = true
	p.Batch.Size = 20
	owner := workMatchesOneDaemon(t, p, recordedBatch(t, &p, 400))
	if owner.smt.Steps() == 0 {
		t.Error("the owner took no SMT step")
	}
}

// workerVersion returns the owner's current model version as a worker
// with model base holds it: its sections encoded and decoded, as they
// travel.
func workerVersion(t testing.TB, owner, base workModel) workModel {
	t.Helper()
	secs, err := owner.workerSections()
	if err != nil {
		t.Fatal(err)
	}
	if secs, err = decodeSections(encodeSections(secs)); err != nil {
		t.Fatal(err)
	}
	v, err := base.withWorkerSections(secs)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// Worker mode on a 3-node NATS cluster: three daemon processes share the
// learning of a recorded MNIST stream in deterministic mode; a worker
// that is not the owner is killed with SIGKILL after a third of the
// stream, the owner after two thirds. Every message is applied once, the
// output stream holds one output per input, published by more than one
// daemon, and the final model equals, bit for bit, the in-process
// simulation of the same schedule.
func TestWorkersMatchSimulation(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a NATS cluster and daemon processes")
	}
	const stream = "mnist-train-1000.smtdrec"
	p := workerPipeline("wk", "workers.wk")
	p.Output.Transport = config.JetStream
	want := simulateWorkers(t, p, stream)

	c := startCluster(t, p)
	nc, js, daemons, status := c.nc, c.js, c.daemons, c.status
	n := replayFile(t, nc, stream, p.Input.Subject)
	st := ownerPast(t, status, daemons, uint64(n)/3)
	for name, d := range daemons {
		if name != st.Owner {
			d.signal(t, syscall.SIGKILL)
			delete(daemons, name)
			t.Logf("worker %s killed after seq %d (owner %s)", name, st.LastSeq, st.Owner)
			break
		}
	}
	st = ownerPast(t, status, daemons, 2*uint64(n)/3)
	if st.LastSeq < uint64(n) {
		daemons[st.Owner].signal(t, syscall.SIGKILL)
		t.Logf("owner %s (epoch %d) killed after seq %d", st.Owner, st.Epoch, st.LastSeq)
		waitFor(t, time.Minute, "a new owner", func() bool { next := status(); return next.Owner != "" && next.Epoch > st.Epoch })
	}

	got := finalCheckpoint(t, nc, js, p.Name, n)
	if got.ModelVersion != want.version || got.Samples != want.samples {
		t.Errorf("version %d after %d samples; simulation: %d after %d", got.ModelVersion, got.Samples, want.version, want.samples)
	}
	if !bytes.Equal(got.RNG, want.rng) {
		t.Error("random source state differs from the simulation's")
	}
	for _, s := range want.sections {
		if b, err := findSection(got.Sections, s.Name); err != nil || !bytes.Equal(b, s.Data) {
			t.Errorf("section %s differs from the simulation's", s.Name)
		}
	}
	if c := got.Counters; c.Received != int64(n) || c.Learned != int64(n) || c.Rejected != 0 || c.NotLearned != 0 {
		t.Errorf("counters %+v: want every one of %d messages received and learned once", c, n)
	}
	publishers := outputPublishers(t, js, p.OutputStreamName())
	total := 0
	for _, k := range publishers {
		total += k
	}
	if total != n {
		t.Errorf("output stream holds %d outputs, want one per input (%d)", total, n)
	}
	if len(publishers) < 2 {
		t.Errorf("outputs published by %v: want the work shared by more than one daemon", publishers)
	}
	t.Logf("outputs by daemon: %v", publishers)
}

// workersMatchSimulation replays a recorded stream into three daemon
// processes on a 3-node NATS cluster sharing pipeline p in worker mode
// (deterministic) and checks that the final model equals, bit for bit,
// the in-process simulation of the schedule, that every message is
// learned once, and that the output stream holds one output per input,
// published by more than one daemon. It returns the cluster.
func workersMatchSimulation(t *testing.T, p config.Pipeline, stream string) *testCluster {
	t.Helper()
	p.Output.Transport = config.JetStream
	want := simulateWorkers(t, p, stream)
	c := startCluster(t, p)
	n := replayFile(t, c.nc, stream, p.Input.Subject)
	got := finalCheckpoint(t, c.nc, c.js, p.Name, n)
	if got.ModelVersion != want.version || got.Samples != want.samples {
		t.Errorf("version %d after %d samples; simulation: %d after %d", got.ModelVersion, got.Samples, want.version, want.samples)
	}
	for _, s := range want.sections {
		if b, err := findSection(got.Sections, s.Name); err != nil || !bytes.Equal(b, s.Data) {
			t.Errorf("section %s differs from the simulation's", s.Name)
		}
	}
	if c := got.Counters; c.Received != int64(n) || c.Learned != int64(n) || c.Rejected != 0 {
		t.Errorf("counters %+v: want every one of %d messages received and learned once", c, n)
	}
	publishers := outputPublishers(t, c.js, p.OutputStreamName())
	total := 0
	for _, k := range publishers {
		total += k
	}
	t.Logf("outputs by daemon: %v", publishers)
	if total != n || len(publishers) < 2 {
		t.Errorf("outputs by daemon %v: want one per input (%d), from more than one daemon", publishers, n)
	}
	return c
}

// outputPublishers counts the messages of an output stream by the daemon
// that published them (HeaderDaemon).
func outputPublishers(t testing.TB, js jetstream.JetStream, stream string) map[string]int {
	return outputsBy(t, js, stream, func(h nats.Header) string { return h.Get(HeaderDaemon) })
}

// outputsBy counts the messages of an output stream by key(headers).
func outputsBy(t testing.TB, js jetstream.JetStream, stream string, key func(nats.Header) string) map[string]int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := js.Stream(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	st := s.CachedInfo().State
	by := map[string]int{}
	for seq := st.FirstSeq; seq <= st.LastSeq && st.Msgs > 0; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if err != nil {
			t.Fatalf("reading output %d: %v", seq, err)
		}
		by[key(m.Header)]++
	}
	return by
}

// Transfers larger than the server's max_payload arrive whole, and the
// last chunk's request gets its reply; a transfer missing a chunk never
// completes, and a chunk repeated is ignored.
func TestWorkChunksReassemble(t *testing.T) {
	ns := startNATS(t, func(o *server.Options) { o.MaxPayload = 64 << 10 })
	nc := connect(t, ns.ClientURL())
	data := make([]byte, 300<<10)
	for i := range data {
		data[i] = byte(i * 7)
	}
	var asm assembly
	got := make(chan *nats.Msg, 1)
	if _, err := nc.Subscribe("chunks", func(m *nats.Msg) {
		if whole := asm.add(m); whole != nil {
			got <- whole
			m.Respond([]byte("ok"))
		}
	}); err != nil {
		t.Fatal(err)
	}
	h := nats.Header{}
	h.Set("Smtd-Test", "kept")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	reply, err := requestChunks(ctx, nc, "chunks", h, data)
	if err != nil {
		t.Fatal(err)
	}
	if string(reply.Data) != "ok" {
		t.Errorf("reply %q", reply.Data)
	}
	whole := <-got
	if !bytes.Equal(whole.Data, data) || whole.Header.Get("Smtd-Test") != "kept" {
		t.Errorf("got %d bytes (header %q), want the %d sent", len(whole.Data), whole.Header.Get("Smtd-Test"), len(data))
	}
	if n, _ := strconv.Atoi(strings.Split(whole.Header.Get(headerChunk), "/")[1]); n < 5 {
		t.Errorf("%d chunks for %d bytes at a 64 KiB max payload", n, len(data))
	}

	var partial assembly
	chunk := func(i, n int, id string) *nats.Msg {
		m := nats.NewMsg("x")
		m.Header.Set(headerTransfer, id)
		m.Header.Set(headerChunk, fmt.Sprintf("%d/%d", i, n))
		m.Data = []byte{byte(i)}
		return m
	}
	for _, i := range []int{0, 0, 2} { // chunk 0 twice: the repeat is ignored
		if partial.add(chunk(i, 3, "a")) != nil {
			t.Error("an incomplete transfer completed")
		}
	}
	if m := partial.add(chunk(1, 3, "a")); m == nil || !bytes.Equal(m.Data, []byte{0, 1, 2}) {
		t.Errorf("transfer a: %v", m)
	}
	// With memory to lend, a transfer is put together in it.
	for _, size := range []int{4, 2} {
		lent := make([]byte, 1, size)
		partial.lend = func(n int) []byte {
			if cap(lent) < n {
				return nil
			}
			return lent[:0]
		}
		partial.add(chunk(0, 3, "c"))
		partial.add(chunk(2, 3, "c"))
		m := partial.add(chunk(1, 3, "c"))
		if m == nil || !bytes.Equal(m.Data, []byte{0, 1, 2}) {
			t.Fatalf("transfer c with a buffer of %d bytes lent: %v", size, m)
		}
		if same := &m.Data[0] == &lent[:1][0]; same != (size >= 3) {
			t.Errorf("a buffer of %d bytes lent for 3: used %v", size, same)
		}
	}
	for _, bad := range []string{"", "3/3", "-1/2", "0/0", "x/2"} {
		m := chunk(0, 1, "b")
		m.Header.Set(headerChunk, bad)
		if partial.add(m) != nil {
			t.Errorf("chunk header %q accepted", bad)
		}
	}
}

// TestWorkContributionCodesTheFirstStep checks that a minibatch coded
// with a dictionary not yet seeded gets codes all the same: every
// non-blank patch is coded with an atom of the locally seeded copy, the
// rows go to the owner as seeds, the outputs are not empty, the model
// coded with is left as it was, and the same task draws the same atoms.
func TestWorkContributionCodesTheFirstStep(t *testing.T) {
	p := digitsPipeline("digits", "mnist.images", 16)
	m := newModel(&p, rand.NewPCG(1, 2)).(*imageModel)
	batch := recordedBatch(t, &p, 8)
	w := m.snapshot().(*imageModel)
	enc, outs := w.contribute(batch, rand.NewPCG(1, 7), 1, p.Workers.Precision)
	if w.km.Seeded() != 0 {
		t.Fatalf("coding seeded the worker's model: %d atoms", w.km.Seeded())
	}
	var c imageContribution
	if err := c.decode(enc); err != nil {
		t.Fatal(err)
	}
	if len(c.km.Seeds) == 0 {
		t.Error("an unseeded dictionary's contribution carries no seeds")
	}
	if len(c.codes) != len(w.blank) {
		t.Fatalf("%d codes for %d patches", len(c.codes), len(w.blank))
	}
	coded := 0
	for i, a := range c.codes {
		switch {
		case w.blank[i] && a != -1:
			t.Fatalf("blank patch %d coded %d", i, a)
		case !w.blank[i] && (a < 0 || int(a) >= p.KMeans.Atoms):
			t.Fatalf("patch %d coded %d with %d atoms", i, a, p.KMeans.Atoms)
		case !w.blank[i]:
			coded++
		}
	}
	if coded == 0 {
		t.Fatal("no patch is coded")
	}
	for i, o := range outs {
		if !slices.ContainsFunc(o.vector, func(x float32) bool { return x != 0 }) {
			t.Errorf("image %d: zero embedding", i)
		}
	}
	again, _ := m.snapshot().(*imageModel).contribute(batch, rand.NewPCG(1, 7), 1, p.Workers.Precision)
	if !bytes.Equal(enc, again) {
		t.Error("the same task coded twice differs")
	}
}

// TestWorkerVersionCarriesTheOwnersSettings checks that a model version
// tells workers the owner's current settings, reloaded ones included:
// a worker whose own config is older codes with the owner's.
func TestWorkerVersionCarriesTheOwnersSettings(t *testing.T) {
	p := digitsPipeline("digits", "mnist.images", 16)
	owner := newModel(&p, rand.NewPCG(1, 2)).(*imageModel)
	worker := newModel(&p, rand.NewPCG(1, 2)).(*imageModel)
	tuned := p
	tuned.Patches.MinNorm = p.Patches.MinNorm*2 + 0.01
	tuned.Whiten.Lambda = p.Whiten.Lambda * 3
	tuned.KMeans.ReseedAfter = p.KMeans.ReseedAfter + 7
	tuned.SMT.LearningRate = p.SMT.LearningRate / 2
	tuned.KMeans.Threshold = p.KMeans.Threshold + 0.25
	owner.tune(&tuned)
	got := workerVersion(t, owner, worker).(*imageModel)
	if got.minNorm != tuned.Patches.MinNorm || worker.minNorm != p.Patches.MinNorm {
		t.Errorf("min_norm: version %v, worker %v; want %v and %v", got.minNorm, worker.minNorm, tuned.Patches.MinNorm, p.Patches.MinNorm)
	}
	if got.thresh != tuned.KMeans.Threshold {
		t.Errorf("f_gq threshold %v, want %v", got.thresh, tuned.KMeans.Threshold)
	}
	if l := got.white.Settings().Lambda; l != tuned.Whiten.Lambda {
		t.Errorf("whitening λ %v, want %v", l, tuned.Whiten.Lambda)
	}
	if r := got.km.Settings().ReseedAfter; r != tuned.KMeans.ReseedAfter {
		t.Errorf("reseed_after %v, want %v", r, tuned.KMeans.ReseedAfter)
	}
	if got.smt != nil && got.smt.Settings().LearningRate != tuned.SMT.LearningRate {
		t.Errorf("SMT learning rate %v, want %v", got.smt.Settings().LearningRate, tuned.SMT.LearningRate)
	}
}

// TestWorkContributionPrecision checks workers.precision: a contribution
// sent in float32 carries the same codes and hits as in float64, its
// k-means sums and SMT gradient rounded to float32, in well under
// three quarters of the bytes, and the owner applies either.
func TestWorkContributionPrecision(t *testing.T) {
	p := digitsPipeline("digits", "mnist.images", 256)
	m := newModel(&p, rand.NewPCG(1, 2)).(*imageModel)
	batch := recordedBatch(t, &p, 16)
	seed, _ := m.snapshot().(*imageModel).contribute(batch[:8], rand.NewPCG(1, 1), 1, 64)
	if err := m.applyContributions([][]byte{seed}); err != nil {
		t.Fatal(err)
	}
	if !m.tookSeeds || m.contribs[0].km.Seeds != nil {
		t.Errorf("after a step of seeds: tookSeeds %v, %d seed values kept", m.tookSeeds, len(m.contribs[0].km.Seeds))
	}
	var c [2]imageContribution
	var enc [2][]byte
	for i, bits := range []int{64, 32} {
		enc[i], _ = m.snapshot().(*imageModel).contribute(batch[8:], rand.NewPCG(1, 9), 1, bits)
		if err := c[i].decode(enc[i]); err != nil {
			t.Fatalf("%d bits: %v", bits, err)
		}
	}
	exact, f32 := &c[0], &c[1]
	if len(exact.km.Sums) == 0 || !exact.stepped {
		t.Fatal("the contribution of a seeded model has no sums or no gradient")
	}
	if !slices.Equal(exact.codes, f32.codes) || !slices.Equal(exact.km.Hits, f32.km.Hits) {
		t.Error("codes or hits differ between the precisions")
	}
	rounded := func(v []float64) []float64 {
		r := make([]float64, len(v))
		for i, x := range v {
			r[i] = float64(float32(x))
		}
		return r
	}
	if !slices.Equal(f32.km.Sums, rounded(exact.km.Sums)) {
		t.Error("float32 sums are not the float64 sums rounded")
	}
	if !slices.Equal(f32.grad.RawMatrix().Data, rounded(exact.grad.RawMatrix().Data)) {
		t.Error("float32 gradient is not the float64 gradient rounded")
	}
	if 4*len(enc[1]) > 3*len(enc[0]) {
		t.Errorf("%d bytes in float32, %d in float64", len(enc[1]), len(enc[0]))
	}
	for i := range enc {
		if err := m.applyContributions([][]byte{enc[i]}); err != nil {
			t.Errorf("applying the contribution of %d bits: %v", []int{64, 32}[i], err)
		}
		if m.tookSeeds {
			t.Error("a step of sums reported seeds")
		}
	}
}

// TestWorkOwnerSleepsUntilDue checks how long an owner with nothing to
// read waits for an event: until its oldest parked request must be
// answered, a task handed out is late (only while a worker waits for
// one), or a checkpoint is due by time (one overdue has failed: it
// waits for the next wake); never longer than workIdle.
func TestWorkOwnerSleepsUntilDue(t *testing.T) {
	p := digitsPipeline("digits", "mnist.images", 256)
	p.Workers.TaskTimeout = 10 * time.Second
	pl := &pipeline{cfg: p, ckpt: config.Checkpoint{Every: time.Hour}}
	now := time.Now()
	pl.lastCkptTime = now
	o := &workOwner{pl: pl}
	late := &workTask{sent: now.Add(-9800 * time.Millisecond)}
	o.steps = []*workStep{{tasks: []*workTask{{result: []byte{1}, sent: now.Add(-time.Minute)}, late, {}}}}
	check := func(what string, want time.Duration) {
		t.Helper()
		if got := o.idleFor(now); got != want {
			t.Errorf("%s: waits %v, want %v", what, got, want)
		}
	}
	check("no worker waiting", workIdle)
	o.parked = []parkedRequest{{at: now.Add(-900 * time.Millisecond)}, {at: now}}
	check("a worker waiting", 100*time.Millisecond)
	late.sent = now.Add(-9950 * time.Millisecond)
	check("a task late in 50 ms", 50*time.Millisecond)
	late.sent = now.Add(-time.Minute)
	check("a task late already", time.Millisecond)
	o.parked = nil
	pl.sinceCkpt, pl.lastCkptTime = 1, now.Add(-time.Hour+20*time.Millisecond)
	check("a checkpoint due in 20 ms", 20*time.Millisecond)
	pl.lastCkptTime = now.Add(-2 * time.Hour)
	check("a checkpoint overdue (it failed)", workIdle)
}

// TestWorkTaskPrecision checks that workers code in the owner's
// precision, which travels with each task, and in float64 for an owner
// whose tasks do not say (one that predates float32 contributions and
// reads only float64).
func TestWorkTaskPrecision(t *testing.T) {
	for _, tc := range []struct {
		json string
		want int
	}{
		{`{"id":1,"precision":32}`, 32},
		{`{"id":1,"precision":64}`, 64},
		{`{"id":1}`, 64},
	} {
		var task workTask
		if err := json.Unmarshal([]byte(tc.json), &task); err != nil {
			t.Fatal(err)
		}
		if got := task.precision(); got != tc.want {
			t.Errorf("%s: precision %d, want %d", tc.json, got, tc.want)
		}
	}
	p := digitsPipeline("digits", "mnist.images", 16)
	b, err := json.Marshal(workTask{ID: 1, Precision: p.Workers.Precision})
	if err != nil || !strings.Contains(string(b), `"precision":32`) {
		t.Errorf("a task of an owner at the default precision: %s (%v)", b, err)
	}
}

// recordedBatch decodes the first n images of the recorded MNIST stream
// for p.
func recordedBatch(t *testing.T, p *config.Pipeline, n int) []sample {
	return recordedSamples(t, p, "mnist-train-1000.smtdrec", n)
}

// recordedFrames decodes the first n frames of the recorded video stream
// for p.
func recordedFrames(t *testing.T, p *config.Pipeline, n int) []sample {
	return recordedSamples(t, p, "video-2x48.smtdrec", n)
}

// recordedSamples decodes the first n messages of a recorded stream for
// p, numbered by their sequence in it.
func recordedSamples(t *testing.T, p *config.Pipeline, stream string, n int) []sample {
	t.Helper()
	msgs := readStream(t, stream)
	batch := make([]sample, n)
	for i := range batch {
		var err error
		if batch[i], err = decode(p, msgs[i].Header, msgs[i].Data); err != nil {
			t.Fatal(err)
		}
		batch[i].seq = uint64(i + 1)
	}
	return batch
}

// A contribution cut short or corrupted is refused with an error before
// the model changes, never with a panic: images and video with f_vq and
// f_gq codes (frames, f_gq atoms and cosines).
func TestWorkContributionMalformed(t *testing.T) {
	digits := digitsPipeline("digits", "mnist.images", 16)
	digitsGQ := digits
	digitsGQ.KMeans.Code, digitsGQ.SMT.Solver = config.CodeGQ, config.SolverClosed
	for _, tc := range []struct {
		name  string
		p     config.Pipeline
		batch []sample
		cases int
	}{
		{"images", digits, recordedBatch(t, &digits, 8), 300},
		{"images gq", digitsGQ, recordedBatch(t, &digitsGQ, 8), 90},
		{"video vq", videoWorkerPipeline(config.CodeVQ), nil, 90},
		{"video gq", videoWorkerPipeline(config.CodeGQ), nil, 90},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := tc.p
			if tc.batch == nil {
				tc.batch = recordedFrames(t, &p, 8)
			}
			owner := func() workModel { return newModel(&p, rand.NewPCG(1, 2)).(workModel) }
			enc, _ := owner().snapshot().(*imageModel).contribute(tc.batch, rand.NewPCG(1, 1), 1, p.Workers.Precision)
			refusesCorrupted(t, owner, enc, tc.cases)
		})
	}
}

// refusesCorrupted applies n corrupted copies of contribution enc (in
// turn cut short, a byte flipped, a byte appended) to a model newOwner
// makes, and checks that each is refused with the model unchanged; a
// flipped byte inside a float or a name may still make a contribution,
// after which the model is made again. The contribution itself is then
// applied.
func refusesCorrupted(t *testing.T, newOwner func() workModel, enc []byte, n int) {
	t.Helper()
	m := newOwner()
	before, err := m.sections()
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(3, 4))
	for i := range n {
		bad := append([]byte(nil), enc...)
		switch i % 3 {
		case 0:
			bad = bad[:r.IntN(len(bad))]
		case 1:
			bad[r.IntN(len(bad))] ^= byte(1 + r.IntN(255))
		default:
			bad = append(bad, byte(r.IntN(256)))
		}
		if err := m.applyContributions([][]byte{bad}); err == nil {
			if i%3 != 1 {
				t.Fatalf("case %d: a malformed contribution was applied", i)
			}
			m = newOwner()
		}
	}
	after, err := m.sections()
	if err != nil {
		t.Fatal(err)
	}
	for i := range before {
		if !bytes.Equal(before[i].Data, after[i].Data) {
			t.Errorf("section %s changed by refused contributions", before[i].Name)
		}
	}
	if err := m.applyContributions([][]byte{enc}); err != nil {
		t.Errorf("the contribution itself: %v", err)
	}
}

// TestWorkGradientShapeRefusedFirst checks that a contribution whose SMT
// gradient is not the model's K×dim is refused before its memory is
// taken: a peer cannot make the owner allocate what it claims.
func TestWorkGradientShapeRefusedFirst(t *testing.T) {
	gradient := func(rows, dim int) *state.Decoder {
		e := state.NewEncoder(nil)
		e.U8(gradientFloat32)
		e.Uvarint(1) // pairs
		e.Uvarint(uint64(rows))
		e.Uvarint(uint64(dim))
		e.Uvarint(0) // no non-zero rows
		return state.NewDecoder(e.Bytes())
	}
	c := imageContribution{gradShape: [2]int{256, 32}}
	if err := c.readGradient(gradient(3000, 7)); err == nil || !c.grad.IsEmpty() {
		t.Errorf("a 3000x7 gradient for a 256x32 model: error %v, gradient allocated %v", err, !c.grad.IsEmpty())
	}
	if err := c.readGradient(gradient(256, 32)); err != nil {
		t.Fatalf("a gradient of the model's shape: %v", err)
	}
	if r, cols := c.grad.Dims(); r != 256 || cols != 32 || !c.stepped {
		t.Errorf("read a %dx%d gradient (stepped %v), want 256x32", r, cols, c.stepped)
	}

	// A model without SMT takes no gradient at all: a contribution with
	// one is refused before the gradient's memory is taken.
	p := digitsPipeline("digits", "mnist.images", 16)
	p.SMT.Dim = 0
	m := newModel(&p, rand.NewPCG(1, 2)).(*imageModel)
	enc, _ := m.snapshot().(*imageModel).contribute(recordedBatch(t, &p, 8), rand.NewPCG(1, 1), 1, 64)
	if enc[len(enc)-1] != gradientNone {
		t.Fatal("a contribution without SMT does not end with an empty gradient")
	}
	e := state.NewEncoder(enc[: len(enc)-1 : len(enc)-1])
	e.U8(gradientFloat32)
	for _, v := range []uint64{1, 3000, 7, 0} { // pairs, rows, dim, non-zero rows
		e.Uvarint(v)
	}
	if err := m.applyContributions([][]byte{e.Bytes()}); err == nil || !m.contribs[0].grad.IsEmpty() {
		t.Errorf("a gradient sent to a model without SMT: error %v, gradient allocated %v", err, !m.contribs[0].grad.IsEmpty())
	}
}

// TestWorkOwnerSkipsStaleRequests checks that a request parked too long
// gets no task (its worker may have stopped waiting) and that the task
// due goes to the next request instead of waiting for another round.
func TestWorkOwnerSkipsStaleRequests(t *testing.T) {
	ns := startNATS(t)
	nc := connect(t, ns.ClientURL())
	reqs := make(chan *nats.Msg, 2)
	if _, err := nc.ChanSubscribe("task", reqs); err != nil {
		t.Fatal(err)
	}
	replies := map[string]chan *nats.Msg{}
	for _, name := range []string{"stale", "fresh"} {
		replies[name] = make(chan *nats.Msg, 1)
		if _, err := nc.ChanSubscribe("inbox."+name, replies[name]); err != nil {
			t.Fatal(err)
		}
		if err := nc.PublishRequest("task", "inbox."+name, nil); err != nil {
			t.Fatal(err)
		}
	}
	now := time.Now()
	o := &workOwner{pl: &pipeline{cfg: digitsPipeline("digits", "mnist.images", 16)}}
	o.parked = []parkedRequest{{<-reqs, now.Add(-2 * workParkFor)}, {<-reqs, now}}
	task := &workTask{ID: 7, Seqs: []uint64{7}}
	o.steps = []*workStep{{tasks: []*workTask{task}}}
	o.handOut()
	if task.sent.IsZero() || len(o.parked) != 0 {
		t.Fatalf("task handed out %v, %d requests left parked", !task.sent.IsZero(), len(o.parked))
	}
	for name, want := range map[string]bool{"stale": false, "fresh": true} {
		select {
		case m := <-replies[name]:
			if got := len(m.Data) > 0; got != want {
				t.Errorf("the %s request got a task %v, want %v", name, got, want)
			}
		case <-time.After(5 * time.Second):
			t.Errorf("the %s request got no answer", name)
		}
	}
}

// TestWorkerVersionsShareAWorkspace checks that the model versions a
// worker holds code in one workspace, and code as each would on its own.
func TestWorkerVersionsShareAWorkspace(t *testing.T) {
	p := digitsPipeline("digits", "mnist.images", 16)
	batch := recordedBatch(t, &p, 16)
	owner := newModel(&p, rand.NewPCG(1, 2)).(*imageModel)
	var secs [2][]Section
	for v := range secs {
		if _, err := owner.learn(batch[8*v : 8*v+8]); err != nil {
			t.Fatal(err)
		}
		var err error
		if secs[v], err = owner.workerSections(); err != nil {
			t.Fatal(err)
		}
	}
	w := &worker{pl: &pipeline{cfg: p}, base: newModel(&p, rand.NewPCG(1, 2)).(*imageModel), versions: map[workVersion]*heldVersion{}, arrived: make(chan struct{})}
	var held [2]*imageModel
	for v := range secs {
		w.versions[workVersion{0, uint64(v)}] = &heldVersion{secs: secs[v]}
		m, _, err := w.model(context.Background(), &workTask{Version: uint64(v), Exact: true})
		if err != nil {
			t.Fatal(err)
		}
		held[v] = m.(*imageModel)
	}
	if held[0].imageWork != held[1].imageWork {
		t.Error("the versions held have workspaces of their own")
	}
	// The shared workspace first holds another version's larger batch.
	held[1].contribute(append(batch, batch...), rand.NewPCG(7, 8), 1, 64)
	for v := range held {
		alone, err := w.base.withWorkerSections(secs[v])
		if err != nil {
			t.Fatal(err)
		}
		want, wantOuts := alone.contribute(batch, rand.NewPCG(5, 6), 1, 64)
		got, gotOuts := held[v].contribute(batch, rand.NewPCG(5, 6), 1, 64)
		if !bytes.Equal(got, want) {
			t.Errorf("version %d contributes differently in the shared workspace", v)
		}
		for i := range wantOuts {
			if !slices.Equal(gotOuts[i].vector, wantOuts[i].vector) {
				t.Errorf("version %d, image %d: another output in the shared workspace", v, i)
			}
		}
	}
}

// A worker sends a contribution and goes on to its next task without
// waiting for the owner's receipt, so that an owner busy receiving other
// workers' contributions does not hold it up; it has one contribution in
// flight at a time, so the next send waits for the receipt before it.
func TestWorkerSendsWithoutAwaitingReceipt(t *testing.T) {
	w, got := sendingWorker(t)
	receive := func() *nats.Msg { return nextMsg(t, got, "no contribution arrived") }
	ctx := context.Background()
	sent := make(chan uint64, 2)
	go func() {
		for id := uint64(1); id <= 2; id++ {
			w.send(ctx, &workTask{ID: id}, &workMeta{Task: id}, []byte{byte(id)})
			sent <- id
		}
	}()
	first := receive()
	select {
	case <-sent: // the first send returned while its receipt is pending
	case <-time.After(5 * time.Second):
		t.Fatal("the worker waits for the owner's receipt")
	}
	select {
	case id := <-sent:
		t.Fatalf("send %d returned with a contribution in flight", id)
	case <-got:
		t.Fatal("a second contribution was sent before the first's receipt")
	case <-time.After(200 * time.Millisecond):
	}
	first.Respond([]byte("ok"))
	second := receive()
	if !bytes.Equal(first.Data, []byte{1}) || !bytes.Equal(second.Data, []byte{2}) {
		t.Errorf("contributions %v then %v", first.Data, second.Data)
	}
	select {
	case <-sent:
	case <-time.After(5 * time.Second):
		t.Fatal("the second send did not return after the first's receipt")
	}
	second.Respond([]byte("ok"))
	w.sends.Wait()
}

// sendingWorker returns a worker of pipeline "p" on a server of its own,
// and the contributions it sends.
func sendingWorker(t *testing.T) (*worker, <-chan *nats.Msg) {
	ns := startNATS(t)
	nc := connect(t, ns.ClientURL())
	d := &Daemon{cfg: config.Default(), nc: nc}
	pl := &pipeline{d: d, name: "p", cfg: workerPipeline("p", "p.in")}
	got := make(chan *nats.Msg, 2)
	if _, err := nc.ChanSubscribe(d.workSubject("p", "done"), got); err != nil {
		t.Fatal(err)
	}
	return &worker{d: d, pl: pl, sending: make(chan struct{}, 1)}, got
}

// A worker that is stopped while its contribution waits for the owner's
// receipt, with the next one coded, stops at once: it neither waits for
// the receipt nor sends the next (the owner hands both tasks out again).
func TestWorkerSendStopsWithContext(t *testing.T) {
	w, got := sendingWorker(t)
	ctx, cancel := context.WithCancel(context.Background())
	w.send(ctx, &workTask{ID: 1}, &workMeta{Task: 1}, []byte{1})
	nextMsg(t, got, "no contribution arrived") // never answered
	second := make(chan struct{})
	go func() {
		w.send(ctx, &workTask{ID: 2}, &workMeta{Task: 2}, []byte{2})
		close(second)
	}()
	time.Sleep(100 * time.Millisecond)
	start := time.Now()
	cancel()
	<-second
	w.sends.Wait()
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("the worker took %v to stop", took)
	}
	select {
	case m := <-got:
		t.Errorf("contribution %v sent after the worker stopped", m.Data)
	case <-time.After(100 * time.Millisecond):
	}
}

// nextMsg returns the next message on ch; after 5 s without one the test
// fails with why.
func nextMsg(t testing.TB, ch <-chan *nats.Msg, why string) *nats.Msg {
	t.Helper()
	select {
	case m := <-ch:
		return m
	case <-time.After(5 * time.Second):
		t.Fatal(why)
	}
	return nil
}

// TestWorkContributionLoadReplays checks the owner load of smtd bench
// cluster: it records the contributions workers send, past the
// dictionary's seeding only, and answers the owner's tasks with them
// under each task's id, epoch and version.
func TestWorkContributionLoadReplays(t *testing.T) {
	p := digitsPipeline("digits", "mnist.images", 16)
	owner := newModel(&p, rand.NewPCG(1, 2)).(*imageModel)
	batch := recordedBatch(t, &p, 16)
	seeds, _ := owner.snapshot().(*imageModel).contribute(batch[:8], rand.NewPCG(1, 1), 1, 32)
	if err := owner.applyContributions([][]byte{seeds}); err != nil {
		t.Fatal(err)
	}
	hits, _ := owner.snapshot().(*imageModel).contribute(batch[8:], rand.NewPCG(1, 9), 1, 32)

	ns := startNATS(t)
	nc := connect(t, ns.ClientURL())
	cfg := config.Default()
	d := &Daemon{cfg: cfg, nc: nc}
	load, err := RecordContributions(nc, cfg, p.Name)
	if err != nil {
		t.Fatal(err)
	}
	for _, enc := range [][]byte{seeds, hits} {
		h := nats.Header{}
		h.Set(headerWork, `{"task":1,"images":8}`)
		if err := publishChunks(nc, d.workSubject(p.Name, "done"), h, enc); err != nil {
			t.Fatal(err)
		}
	}
	nc.Flush()
	deadline := time.Now().Add(5 * time.Second)
	for load.Recorded() < 1 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond) // a second recording would be in by now
	if n := load.Recorded(); n != 1 {
		t.Fatalf("%d contributions recorded, want the one past the seeding", n)
	}

	// The owner: one task, then none.
	task := workTask{ID: 41, Epoch: 3, Version: 7, Seqs: []uint64{41, 42, 43, 44, 45, 46, 47, 48}}
	handed := false
	if _, err := nc.Subscribe(d.workSubject(p.Name, "task"), func(m *nats.Msg) {
		if handed {
			m.Respond(nil)
			return
		}
		handed = true
		b, _ := json.Marshal(task)
		m.Respond(b)
	}); err != nil {
		t.Fatal(err)
	}
	got := make(chan *nats.Msg, 1)
	var asm assembly
	if _, err := nc.Subscribe(d.workSubject(p.Name, "done"), func(m *nats.Msg) {
		if whole := asm.add(m); whole != nil {
			whole.Respond([]byte("ok"))
			got <- whole
		}
	}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	type result struct {
		images int64
		err    error
	}
	replayed := make(chan result, 1)
	go func() {
		n, err := load.Replay(ctx, 2)
		replayed <- result{n, err}
	}()
	m := nextMsg(t, got, "no contribution replayed")
	var meta workMeta
	if err := json.Unmarshal([]byte(m.Header.Get(headerWork)), &meta); err != nil {
		t.Fatal(err)
	}
	if meta.Task != task.ID || meta.Epoch != task.Epoch || meta.Version != task.Version || meta.Images != 8 || meta.Received != 8 {
		t.Errorf("replayed under %+v, want task %d, epoch %d, version %d, 8 images", meta, task.ID, task.Epoch, task.Version)
	}
	if !bytes.Equal(m.Data, hits) {
		t.Error("the replayed contribution is not the recorded one")
	}
	cancel() // the contribution in flight still gets its receipt
	r := <-replayed
	if r.err != nil || r.images != 8 {
		t.Errorf("Replay: %d images, %v; want 8, nil", r.images, r.err)
	}
}

// BenchmarkWorkContributionDecode decodes a contribution of the size bench
// cluster sends: 128 MNIST images (529 patches each), K = 4096 atoms of
// 6x6 patches, an SMT gradient of dimension 32, in float32.
func BenchmarkWorkContributionDecode(b *testing.B) {
	const images, patches, k, dim, smtDim = 128, 529, 4096, 36, 32
	rng := rand.New(rand.NewPCG(1, 2))
	c := imageContribution{images: images}
	c.white = online.WhitenContribution{Rows: images * patches, Mean: make([]float64, dim), Scatter: make([]float64, dim*dim)}
	for i := range dim {
		c.white.Scatter[i*dim+i] = 1
	}
	c.km = online.KMeansContribution{Hits: make([]float64, k), Sums: make([]float64, k*dim)}
	c.codes = make([]int32, images*patches)
	for i := range c.codes {
		a := rng.IntN(k+1) - 1
		c.codes[i] = int32(a)
		if a >= 0 {
			c.km.Rows++
			c.km.Hits[a]++
			for j := range dim {
				c.km.Sums[a*dim+j] += rng.NormFloat64()
			}
		}
	}
	c.grad.ReuseAs(k, smtDim)
	for i := range k {
		for j := range smtDim {
			c.grad.Set(i, j, rng.NormFloat64())
		}
	}
	c.pairs, c.stepped = 4*int64(len(c.codes)), true
	enc := c.encode(true)
	var got imageContribution
	b.SetBytes(int64(len(enc)))
	for b.Loop() {
		if err := got.decode(enc); err != nil {
			b.Fatal(err)
		}
	}
}
