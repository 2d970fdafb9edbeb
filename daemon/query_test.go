package daemon

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"github.com/rs/zerolog"
	"gonum.org/v1/gonum/mat"

	"github.com/smtd/smtd/config"
)

// fakeRequest records the error reply of a micro handler.
type fakeRequest struct {
	micro.Request
	code, desc string
}

func (r *fakeRequest) Error(code, desc string, _ []byte, _ ...micro.RespondOpt) error {
	r.code, r.desc = code, desc
	return nil
}
func (r *fakeRequest) Data() []byte           { return nil }
func (r *fakeRequest) Headers() micro.Headers { return nil }
func (r *fakeRequest) Reply() string          { return "_INBOX.test" }

// A query that finds the queue full is answered at once with a 503 "busy"
// error and counted; queued queries are not; after stop, queries are
// refused as shutting down.
func TestQueryQueueBusy(t *testing.T) {
	pl := &pipeline{name: "digits"}
	// No workers: the queue only fills.
	p := &queryPool{workers: 1, jobs: make(chan query, 2), stats: map[*pipeline]*queryStats{pl: {}}}
	h := p.handler(pl, embedQuery)
	for i := range 2 {
		var r fakeRequest
		h(&r)
		if r.code != "" {
			t.Fatalf("query %d of a queue of 2: error %s %q, want it queued", i, r.code, r.desc)
		}
	}
	for range 3 {
		var r fakeRequest
		h(&r)
		if r.code != "503" || !strings.HasPrefix(r.desc, "busy: ") {
			t.Fatalf("query on a full queue: error %q %q, want 503 busy", r.code, r.desc)
		}
	}
	if err := p.submit(query{pl: pl}); !errors.Is(err, errPoolBusy) {
		t.Errorf("submit to a full queue: %v, want errPoolBusy", err)
	}
	if st := p.stats[pl].status(); st.Busy != 3 || st.Answered != 0 || st.Errors != 0 {
		t.Errorf("status %+v, want 3 busy", st)
	}
	p.stop()
	p.stop() // idempotent
	var r fakeRequest
	h(&r)
	if r.code != "503" || r.desc != "shutting down" {
		t.Errorf("query after stop: %q %q, want 503 shutting down", r.code, r.desc)
	}
	if err := p.submit(query{pl: pl}); !errors.Is(err, errPoolStopped) {
		t.Errorf("submit after stop: %v, want errPoolStopped", err)
	}
}

// learnedModel returns a model of pipeline p after six batches, with the
// first sample of each batch as probes.
func learnedModel(t *testing.T, p config.Pipeline) (model, []sample) {
	t.Helper()
	m := newModel(&p, rand.NewPCG(p.Seed, 1))
	var probes []sample
	for b := range 6 {
		var batch []sample
		for i := range 8 {
			h, data := normalImage(8*b + i)
			if p.Modality == config.Text {
				h, data = nil, []byte("the quick brown fox jumps over the lazy dog "+strconv.Itoa(i))
			}
			s, err := decode(&p, h, data)
			if err != nil {
				t.Fatal(err)
			}
			batch = append(batch, s)
		}
		if _, err := m.learn(batch); err != nil {
			t.Logf("batch %d: %v", b, err)
		}
		probes = append(probes, batch[0])
	}
	return m, probes
}

// Readers of one published snapshot, each with its own workspaces, encode
// at once on many goroutines what a serial encode of a private copy of
// the snapshot (model.snapshot of the snapshot) encodes, bit for bit, for
// every kind of model: encoding reads the snapshot's parameters only (run
// under -race). A reader that takes over the workspaces of a reader of an
// older snapshot, as a query worker's does, encodes the newer snapshot.
func TestSnapshotReadersEncodeConcurrently(t *testing.T) {
	for _, p := range fuzzPipelines() {
		t.Run(p.Name, func(t *testing.T) {
			m, probes := learnedModel(t, p)
			old := m.snapshot()
			oldReader := old.reader(nil)
			oldReader.encode(probes) // fill its workspaces
			h, data := normalImage(99)
			if p.Modality == config.Text {
				h, data = nil, []byte("a newer batch of words than the quick brown fox")
			}
			s, err := decode(&p, h, data)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := m.learn([]sample{s, s, s}); err != nil {
				t.Logf("last batch: %v", err)
			}
			snap := m.snapshot()
			want := snap.snapshot().encode(probes)

			const workers, rounds = 4, 20
			got := make([][]output, workers)
			var wg sync.WaitGroup
			for w := range workers {
				var prev model
				if w == 0 {
					prev = oldReader
				}
				r := snap.reader(prev)
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range rounds {
						got[w] = r.encode(probes)
					}
				}()
			}
			wg.Wait()
			for w := range workers {
				for i := range want {
					if !equalBits(got[w][i].vector, want[i].vector) {
						t.Fatalf("reader %d, probe %d: encodes %v, a serial copy %v", w, i, got[w][i].vector, want[i].vector)
					}
				}
			}
		})
	}
}

func equalBits(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return false
		}
	}
	return true
}

// Embed queries flooding the daemon while a pipeline learns all get a
// reply, an embedding or an immediate busy error, and none times out; the
// busy replies are counted in status; every embedding is the
// single-threaded encode of the snapshot its model version names, bit for
// bit.
func TestQueriesFloodWhileLearning(t *testing.T) {
	p := digitsPipeline("digits", "mnist.images", 64)
	cfg := testConfig(t, p)
	cfg.Service.QueryWorkers = 2
	cfg.Service.QueryQueue = 4
	d := startDaemon(t, cfg)
	pl := d.pipelines[0]
	nc := connect(t, d.ClientURL())

	// Every snapshot published, by version, to check answers against.
	var mu sync.Mutex
	snaps := map[uint64]*snapshot{}
	record := func() {
		s := pl.acquire() // held to the end: its memory is not taken
		mu.Lock()
		if snaps[s.version] == nil {
			snaps[s.version] = s
		} else {
			s.release()
		}
		mu.Unlock()
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			record()
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
			}
		}
	}()
	defer func() {
		close(stop)
		wg.Wait()
	}()

	n := replayFile(t, nc, "mnist-train-1000.smtdrec", p.Input.Subject)
	queries := readStream(t, "mnist-test-200.smtdrec")
	sub, err := nc.SubscribeSync("_INBOX.flood.>")
	if err != nil {
		t.Fatal(err)
	}
	sub.SetPendingLimits(-1, -1)

	const burst, timeout = 200, 10 * time.Second
	var answered, busy, whileLearning, compared int
	flood := func(round int) {
		t.Helper()
		for i := range burst {
			q := queries[i%len(queries)]
			m := natsMsg(p.Input.Subject, q.Header, q.Data)
			m.Subject = cfg.EmbedSubject(p.Name)
			m.Reply = "_INBOX.flood." + strconv.Itoa(round) + "." + strconv.Itoa(i)
			if err := nc.PublishMsg(m); err != nil {
				t.Fatal(err)
			}
		}
		got := map[string]bool{}
		for len(got) < burst {
			rep, err := sub.NextMsg(timeout)
			if err != nil {
				t.Fatalf("round %d: %d of %d queries answered, then %v", round, len(got), burst, err)
			}
			if got[rep.Subject] {
				t.Fatalf("two replies to %s", rep.Subject)
			}
			got[rep.Subject] = true
			if code := rep.Header.Get(micro.ErrorCodeHeader); code != "" {
				if desc := rep.Header.Get(micro.ErrorHeader); code != "503" || !strings.HasPrefix(desc, "busy: ") {
					t.Fatalf("query error %s %q", code, desc)
				}
				busy++
				continue
			}
			answered++
			i, _ := strconv.Atoi(rep.Subject[strings.LastIndexByte(rep.Subject, '.')+1:])
			version, _ := strconv.ParseUint(rep.Header.Get(HeaderModelVersion), 10, 64)
			record()
			mu.Lock()
			snap := snaps[version]
			mu.Unlock()
			if snap == nil {
				continue // published and replaced between two looks
			}
			q := queries[i%len(queries)]
			s, err := decode(&snap.cfg, q.Header, q.Data)
			if err != nil {
				t.Fatal(err)
			}
			// The published snapshot is read by the workers: encode a
			// private copy of it on this goroutine.
			o := snap.model.snapshot().encode([]sample{s})[0]
			o.version = snap.version
			if want := encodeOutput(&snap.cfg, "", &o, nil).Data; !bytes.Equal(rep.Data, want) {
				t.Fatalf("round %d query %d: the answer differs from the encode of snapshot %d", round, i, version)
			}
			compared++
		}
	}
	for round := 0; round < 20; round++ {
		learning := pipelineStatus(d, p.Name).Learned < int64(n)
		flood(round)
		if learning {
			whileLearning++
		} else {
			break
		}
	}
	waitFor(t, 120*time.Second, "stream learned", func() bool { return pipelineStatus(d, p.Name).Learned == int64(n) })
	flood(100) // and once the model is still

	t.Logf("%d answered (%d compared with their snapshot), %d busy; %d bursts while learning", answered, compared, busy, whileLearning)
	if busy == 0 {
		t.Error("no busy reply: the queue of 4 never filled")
	}
	if compared == 0 {
		t.Error("no answer was compared with its snapshot")
	}
	// A worker counts an answer once it is sent: poll.
	var st QueryStatus
	waitFor(t, 10*time.Second, "status to count every reply", func() bool {
		st = pipelineStatus(d, p.Name).Queries
		return st.Answered == int64(answered)
	})
	if st.Busy != int64(busy) || st.Errors != 0 {
		t.Errorf("status counts %+v, the client saw %d answered and %d busy", st, answered, busy)
	}
	if st.P99Ms < st.P50Ms || st.P50Ms <= 0 {
		t.Errorf("latency percentiles p50 %v ms, p99 %v ms", st.P50Ms, st.P99Ms)
	}
	if _, _, ok := threadCPU(); ok && (st.Timed == 0 || st.WorkSeconds <= 0) {
		t.Errorf("no query work timed: %+v", st)
	}
	if st.OffCPUSeconds > st.WorkSeconds || st.MostlyOffCPU > st.Timed || st.Timed > int64(answered+busy) {
		t.Errorf("off-CPU counts out of range: %+v", st)
	}
}

// A worker's thread that blocks is off the CPU for most of its work (not
// all: under -race on a loaded machine a 20 ms sleep has shown 10 ms of
// thread CPU time); one that computes is on it for some of it.
func TestQueryWorkOffCPU(t *testing.T) {
	if _, _, ok := threadCPU(); !ok {
		t.Skip("no thread CPU clock on " + runtime.GOOS)
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var s queryStats
	w := startWork()
	time.Sleep(20 * time.Millisecond) // the locked thread sleeps with its goroutine
	s.worked(w)
	st := s.status()
	if st.Timed != 1 || st.MostlyOffCPU != 1 {
		t.Fatalf("after a sleep: %+v, want one query timed, mostly off the CPU", st)
	}
	w = startWork()
	for x := 0.0; time.Since(w.start) < 20*time.Millisecond; x++ {
		_ = math.Sqrt(x)
	}
	s.worked(w)
	st2 := s.status()
	if st2.Timed != 2 || st2.OffCPUSeconds-st.OffCPUSeconds >= st2.WorkSeconds-st.WorkSeconds {
		t.Fatalf("after computing: %+v (before %+v), want some of the work on the CPU", st2, st)
	}
}

var _ micro.Request = (*fakeRequest)(nil)

// The gate lets a learner through at once while no query waits, holds it
// while one does, for at most the time given, and releases it when the
// last waiting query is started on.
func TestQueryGateHoldsLearnerWhileQueriesWait(t *testing.T) {
	var g queryGate
	if d := g.wait(time.Second); d != 0 {
		t.Fatalf("no query waits: blocked %v", d)
	}
	g.enter()
	if d := g.wait(0); d != 0 {
		t.Errorf("learn_yield 0: blocked %v", d)
	}
	if d := g.wait(5 * time.Millisecond); d < 5*time.Millisecond {
		t.Errorf("a query waits: blocked %v, want the whole 5ms", d)
	}
	g.enter()
	done := make(chan time.Duration)
	go func() { done <- g.wait(time.Minute) }()
	g.leave()
	select {
	case d := <-done:
		t.Fatalf("one of two queries started: the learner went on after %v", d)
	case <-time.After(10 * time.Millisecond):
	}
	g.leave()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the last query started and the learner still waits")
	}
	if d := g.wait(time.Second); d != 0 {
		t.Errorf("no query waits any more: blocked %v", d)
	}
}

// A learner calls its pipeline's hook between the stages of every batch,
// several times per batch, and learns exactly what it learns without one.
func TestLearnerYieldsBetweenStages(t *testing.T) {
	for _, p := range fuzzPipelines() {
		if p.Modality == config.Text || p.Learner != config.LearnerSMT {
			continue
		}
		t.Run(p.Name, func(t *testing.T) {
			plain := newModel(&p, rand.NewPCG(p.Seed, 1))
			hooked := newModel(&p, rand.NewPCG(p.Seed, 1))
			calls := 0
			hooked.(stagedLearner).betweenStages(func() { calls++ })
			for b := range 4 {
				var batch []sample
				for i := range 16 {
					h, data := normalImage(16*b + i)
					s, err := decode(&p, h, data)
					if err != nil {
						t.Fatal(err)
					}
					s.seq = uint64(16*b + i + 1)
					batch = append(batch, s)
				}
				before := calls
				want, werr := plain.learn(batch)
				got, gerr := hooked.learn(batch)
				if (werr == nil) != (gerr == nil) {
					t.Fatalf("batch %d: errors %v and %v", b, werr, gerr)
				}
				if calls-before < 4 {
					t.Errorf("batch %d: %d yields, want one between each pair of stages", b, calls-before)
				}
				for i := range want {
					if !equalBits(got[i].vector, want[i].vector) {
						t.Fatalf("batch %d output %d: %v with yields, %v without", b, i, got[i].vector, want[i].vector)
					}
				}
			}
		})
	}
}

// BenchmarkEmbedNewSnapshot is the query that first meets a newly
// published snapshot of the default image pipeline (K = 256, SMT
// dimension 32, 28x28 MNIST): a worker's reader takes over its workspaces
// ("reader"), where a private deep copy of the snapshot, with new
// workspaces, used to be made ("copy").
func BenchmarkEmbedNewSnapshot(b *testing.B) {
	p := config.DefaultPipeline(config.Image, "images")
	m := newModel(&p, rand.NewPCG(p.Seed, 1))
	msgs := readStream(b, "mnist-train-1000.smtdrec")
	train := decodeSamples(b, &p, msgs[:10*p.Batch.Size])
	for i := 0; i < len(train); i += p.Batch.Size {
		if _, err := m.learn(train[i : i+p.Batch.Size]); err != nil {
			b.Fatal(err)
		}
	}
	snap := m.snapshot()
	probe := decodeSamples(b, &p, msgs[len(msgs)-1:])
	b.Run("reader", func(b *testing.B) {
		r := snap.reader(nil)
		r.encode(probe)
		b.ReportAllocs()
		for b.Loop() {
			r = snap.reader(r)
			r.encode(probe)
		}
	})
	b.Run("copy", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			snap.snapshot().encode(probe)
		}
	})
}

// BenchmarkEmbedQuery is one embed query's encoding by a worker's reader
// of a snapshot of the default image pipeline, at its K and at the
// paper's K = 4096 (28x28 MNIST, 529 patches scored against every atom).
func BenchmarkEmbedQuery(b *testing.B) {
	msgs := readStream(b, "mnist-train-1000.smtdrec")
	for _, k := range []int{256, 4096} {
		b.Run(fmt.Sprintf("K=%d", k), func(b *testing.B) {
			p := config.DefaultPipeline(config.Image, "images")
			p.KMeans.Atoms = k
			m := newModel(&p, rand.NewPCG(p.Seed, 1))
			train := decodeSamples(b, &p, msgs[:20*p.Batch.Size])
			for i := 0; i < len(train); i += p.Batch.Size {
				if _, err := m.learn(train[i : i+p.Batch.Size]); err != nil {
					b.Fatal(err)
				}
			}
			last := msgs[len(msgs)-1]
			probe, err := decode(&p, last.Header, last.Data)
			if err != nil {
				b.Fatal(err)
			}
			r := m.snapshot().reader(nil)
			r.encode([]sample{probe})
			b.ReportAllocs()
			for b.Loop() {
				r.encode([]sample{probe})
			}
		})
	}
}

// An embed query's encoding allocates only the views of whitenSerial's
// slices of at most 192 patches (two each: patches and result) and the
// outputs: a batch of one part is extracted, whitened and embedded
// without the closures and views of the parts (prepare, embedded).
func TestEncodeAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are not meaningful under -race")
	}
	p := config.DefaultPipeline(config.Image, "images")
	m := newModel(&p, rand.NewPCG(p.Seed, 1))
	batch := decodeSamples(t, &p, readStream(t, "mnist-train-1000.smtdrec")[:2*p.Batch.Size])
	for b := 0; b < len(batch); b += p.Batch.Size {
		if _, err := m.learn(batch[b : b+p.Batch.Size]); err != nil {
			t.Fatal(err)
		}
	}
	r := m.snapshot().reader(nil)
	probe := batch[:1]
	r.encode(probe)
	patches := m.(*imageModel).patcher.Grid.Len()
	want := float64(2*((patches+191)/192) + 1)
	if got := testing.AllocsPerRun(50, func() { r.encode(probe) }); got > want {
		t.Errorf("encoding one image allocates %v times, want at most %v", got, want)
	}
}

// An embed request of a uniform image, whose patches are all blank, is
// answered (with the blank code) once the model has learned, and the
// daemon goes on serving: every input is validated before a model sees
// it, and no query can take the daemon down.
func TestEmbedBlankImage(t *testing.T) {
	p := digitsPipeline("digits", "blank.in", 16)
	cfg := testConfig(t, p)
	d := startDaemon(t, cfg)
	nc := connect(t, d.ClientURL())
	n := replayFile(t, nc, "mnist-raw-100.smtdrec", "blank.in")
	waitFor(t, time.Minute, "the stream learned", func() bool { return pipelineStatus(d, "digits").LastSeq == uint64(n) })
	for _, fill := range []byte{0, 255} {
		req := nats.NewMsg(cfg.EmbedSubject("digits"))
		req.Header.Set(HeaderShape, "28,28")
		req.Header.Set(HeaderDtype, "uint8")
		req.Data = bytes.Repeat([]byte{fill}, 28*28)
		m, err := nc.RequestMsg(req, 5*time.Second)
		if err != nil {
			t.Fatalf("uniform image %d: %v", fill, err)
		}
		if e := m.Header.Get(micro.ErrorHeader); e != "" {
			t.Errorf("uniform image %d: error %q", fill, e)
		}
	}
	if st := pipelineStatus(d, "digits"); st.Queries.Answered != 2 {
		t.Errorf("%d queries answered, want 2", st.Queries.Answered)
	}
}

// A published snapshot takes the memory of a replaced one that no reader
// holds, never of one still read, and is the model's exact copy either
// way.
func TestSnapshotsReuseUnreadMemory(t *testing.T) {
	p := config.DefaultPipeline(config.Image, "images")
	m := newModel(&p, rand.NewPCG(p.Seed, 1))
	pl := &pipeline{model: m, cfg: p}
	msgs := readStream(t, "mnist-train-1000.smtdrec")
	next := 0
	step := func() *imageModel {
		t.Helper()
		var batch []sample
		for range p.Batch.Size {
			s, err := decode(&p, msgs[next].Header, msgs[next].Data)
			if err != nil {
				t.Fatal(err)
			}
			batch = append(batch, s)
			next++
		}
		if _, err := m.learn(batch); err != nil {
			t.Fatal(err)
		}
		pl.version++
		pl.publishSnapshot()
		s := pl.snap.Load().model.(*imageModel)
		if !mat.Equal(s.km.Atoms(), m.(*imageModel).km.Atoms()) || !mat.Equal(s.smt.P(), m.(*imageModel).smt.P()) {
			t.Fatalf("snapshot %d differs from the model", pl.version)
		}
		return s
	}
	s1 := step()
	held := pl.acquire()
	if held.model != s1 {
		t.Fatal("acquire returned another snapshot than the current one")
	}
	s2 := step() // s1 replaced, still read
	s3 := step() // s2 replaced, unread
	s4 := step()
	if s4.km != s2.km || s4.smt != s2.smt {
		t.Error("the snapshot did not take the memory of the unread one")
	}
	for _, s := range []*imageModel{s2, s3, s4} {
		if s.km == s1.km || s.smt == s1.smt {
			t.Fatal("a snapshot took the memory of one still read")
		}
	}
	held.release()
	s5 := step()
	if s5.km != s1.km && s5.km != s3.km {
		t.Error("the snapshot did not take the memory of a released one")
	}
}

// TestLearnOnSeveralCores checks that an image model whose learning step
// extracts, whitens and scores on several goroutines (learnOn; batches of
// 32 images shared by three goroutines) learns and publishes exactly what
// one on a single goroutine does: the default pipeline on recorded MNIST,
// with f_vq and with f_gq codes.
func TestLearnOnSeveralCores(t *testing.T) {
	msgs := readStream(t, "mnist-train-1000.smtdrec")[:192]
	for _, code := range []string{config.CodeVQ, config.CodeGQ} {
		t.Run(code, func(t *testing.T) {
			p := config.DefaultPipeline(config.Image, "images")
			p.KMeans.Code = code
			one := newModel(&p, rand.NewPCG(p.Seed, 1))
			three := newModel(&p, rand.NewPCG(p.Seed, 1))
			three.(coresLearner).learnOn(3)
			for b := 0; b < len(msgs); b += 32 {
				batch := decodeSamples(t, &p, msgs[b:b+32])
				want, werr := one.learn(batch)
				got, gerr := three.learn(batch)
				if (werr == nil) != (gerr == nil) {
					t.Fatalf("batch %d: errors %v on one core, %v on three", b/32, werr, gerr)
				}
				for i := range want {
					if !equalBits(got[i].vector, want[i].vector) {
						t.Fatalf("batch %d output %d differs on three cores", b/32, i)
					}
				}
			}
			ws, gs := must(one.sections()), must(three.sections())
			for i := range ws {
				if ws[i].Name != gs[i].Name || !bytes.Equal(ws[i].Data, gs[i].Data) {
					t.Errorf("section %q differs after learning on three cores", ws[i].Name)
				}
			}
		})
	}
}

// BenchmarkLearnBatch is one learning step of the default image pipeline
// (SMT dimension 32, 32 recorded MNIST images a minibatch, past the
// seeding) at its K = 256 and at the paper's 4096, on one goroutine and on
// every core (learnOn), as the daemon's learner takes it with nobody
// querying: images/s of the whole step, extraction to embeddings.
func BenchmarkLearnBatch(b *testing.B) {
	msgs := readStream(b, "mnist-train-1000.smtdrec")
	for _, k := range []int{256, 4096} {
		p := config.DefaultPipeline(config.Image, "images")
		p.KMeans.Atoms = k
		train := decodeSamples(b, &p, msgs)
		n := p.Batch.Size
		for _, cores := range slices.Compact([]int{1, runtime.GOMAXPROCS(0)}) {
			b.Run(fmt.Sprintf("K=%d/cores=%d", k, cores), func(b *testing.B) {
				m := newModel(&p, rand.NewPCG(p.Seed, 1))
				m.(coresLearner).learnOn(cores)
				next := 0
				step := func() {
					if _, err := m.learn(train[next : next+n]); err != nil {
						b.Fatal(err)
					}
					if next += n; next+n > len(train) {
						next = 0
					}
				}
				for range 8 {
					step()
				}
				for b.Loop() {
					step()
				}
				b.ReportMetric(float64(b.N*n)/b.Elapsed().Seconds(), "images/s")
			})
		}
	}
}

// TestLearnCoresFollowQueries checks the balance Daemon.learnCores keeps:
// one core while queries arrive, service.learn_cores (0: the cores the
// daemon started with) otherwise.
func TestLearnCoresFollowQueries(t *testing.T) {
	pl := &pipeline{}
	d := &Daemon{cfg: &config.Config{}, pipelines: []*pipeline{pl}}
	if got := d.learnCores(); got != startProcs {
		t.Errorf("no query yet: %d cores, want %d", got, startProcs)
	}
	pl.gate.last.Store(time.Now().UnixNano())
	if got := d.learnCores(); got != 1 {
		t.Errorf("just queried: %d cores, want 1", got)
	}
	pl.gate.last.Store(time.Now().Add(-2 * queriesRecently).UnixNano())
	d.cfg.Service.LearnCores = 3
	if got := d.learnCores(); got != 3 {
		t.Errorf("queried %v ago, service.learn_cores 3: %d cores", 2*queriesRecently, got)
	}
}

// The learners' extra Ps (service.learn_nice) are there only while the
// daemon serves queries, and gone for good once it has shut down.
func TestLearnerProcsOnlyWhileQueried(t *testing.T) {
	procs := runtime.GOMAXPROCS(0)
	defer runtime.GOMAXPROCS(procs)
	d := &Daemon{log: zerolog.Nop()}
	d.procs.raise = procs + 1
	for i, step := range []struct {
		queried bool
		want    int
	}{{false, procs}, {true, procs + 1}, {true, procs + 1}, {false, procs}, {true, procs + 1}} {
		d.fitLearnerProcs(step.queried)
		if got := runtime.GOMAXPROCS(0); got != step.want {
			t.Errorf("step %d, queried %v: GOMAXPROCS %d, want %d", i, step.queried, got, step.want)
		}
	}
	d.stopLearnerProcs()
	d.fitLearnerProcs(true)
	if got := runtime.GOMAXPROCS(0); got != procs {
		t.Errorf("queried after shutdown: GOMAXPROCS %d, want %d", got, procs)
	}
}

// By default the query pool has a worker for each core the daemon
// started with, not for the Ps it adds for its learners.
func TestQueryPoolDefaultsToStartCores(t *testing.T) {
	cfg := testConfig(t, digitsPipeline("digits", "mnist.images", 64))
	cfg.Service.QueryWorkers = 0
	cfg.Service.LearnNice = 10
	d := startDaemon(t, cfg)
	if d.queries.workers != startProcs {
		t.Errorf("%d query workers, want %d", d.queries.workers, startProcs)
	}
}
