package daemon

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/smtd/smtd/config"
)

// textWorkerPipeline is the wordsPipeline of the text tests in
// deterministic worker mode: steps of two minibatches of 50 messages,
// coded one version behind, embeddings solved every 10 minibatches.
func textWorkerPipeline(name string) config.Pipeline {
	p := wordsPipeline()
	p.Name = name
	p.Deterministic = true
	p.Seed = 7
	p.Batch.Size = 50
	p.SMT.SolveEvery = 10
	p.Workers = config.Workers{Enabled: true, Merge: 2, Staleness: 1, OnOwner: true, TaskTimeout: 5 * time.Second, Precision: 32}
	return p
}

// TestWorkTextMatchesOneDaemon checks that worker mode learns text as one
// daemon does: the owner maps the tokens the workers send to its
// vocabulary and adds them minibatch by minibatch, so that with
// workers.merge dividing smt.solve_every its vocabulary, word statistics
// and embeddings equal, bit for bit, those of a single daemon that
// learned the same messages, whatever the staleness.
func TestWorkTextMatchesOneDaemon(t *testing.T) {
	for _, tau := range []int{0, 1, 3} {
		t.Run(fmt.Sprintf("staleness %d", tau), func(t *testing.T) {
			p := textWorkerPipeline("words")
			p.Workers.Staleness = tau
			textMatchesOneDaemon(t, p)
		})
	}
}

// textMatchesOneDaemon compares worker mode on the recorded Brown stream,
// simulated, with one daemon learning it.
func textMatchesOneDaemon(t *testing.T, p config.Pipeline) {
	const stream = "brown-2000.smtdrec"
	sim := simulateWorkers(t, p, stream)

	one := newModel(&p, rand.NewPCG(p.Seed, 0x736d7464))
	for batch := range slices.Chunk(recordedSamples(t, &p, stream, 2000), p.Batch.Size) {
		if _, err := one.learn(batch); err != nil {
			t.Fatal(err)
		}
	}
	want, err := one.sections()
	if err != nil {
		t.Fatal(err)
	}
	if m := one.(*textModel); m.solved == nil || m.sinceSolve != 0 || len(m.solved.embedded()) == 0 {
		t.Fatal("one daemon ends without embeddings of its last minibatch")
	}
	for _, s := range want {
		if b, err := findSection(sim.sections, s.Name); err != nil || !bytes.Equal(b, s.Data) {
			t.Errorf("section %s differs from one daemon's", s.Name)
		}
	}
}

// Worker mode on text: three daemon processes on a 3-node NATS cluster
// share the learning of 2000 recorded Brown sentences in deterministic
// mode, one version behind, in steps of two minibatches of 100; the
// final vocabulary, word statistics and embeddings equal the in-process
// simulation's bit for bit (workersMatchSimulation). The embeddings are
// solved at every step, as the daemons checkpoint every 100 messages,
// and a checkpoint solves first (textModel.flush), which the simulation
// does not.
func TestWorkersLearnText(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a NATS cluster and daemon processes")
	}
	p := textWorkerPipeline("wt")
	p.Batch.Size = 100
	p.SMT.SolveEvery = p.Workers.Merge
	workersMatchSimulation(t, p, "brown-2000.smtdrec")
}

// A text model version embeds every message as the owner's model does,
// bit for bit, with only the words that have an embedding; before the
// first solve, it embeds every message as zero.
func TestWorkTextVersionEmbedsAsTheOwner(t *testing.T) {
	p := textWorkerPipeline("words")
	owner := newModel(&p, rand.NewPCG(1, 2)).(*textModel)
	batch := recordedSamples(t, &p, "brown-2000.smtdrec", 500)
	base := newModel(&p, rand.NewPCG(3, 4)).(*textModel)
	secs, err := owner.workerSections()
	if err != nil {
		t.Fatal(err)
	}
	if n := len(secs[0].Data); n > 4 {
		t.Errorf("a version before any solve is %d bytes", n)
	}
	for solved := range 2 {
		_, got := workerVersion(t, owner, base).contribute(batch, nil, 0, 32)
		want := owner.encode(batch)
		nonzero := 0
		for i := range want {
			if !slices.Equal(got[i].vector, want[i].vector) {
				t.Fatalf("solve %d: message %d embeds differently", solved, i)
			}
			if slices.ContainsFunc(got[i].vector, func(x float32) bool { return x != 0 }) {
				nonzero++
			}
		}
		if (nonzero > 0) != (solved > 0) {
			t.Errorf("after %d solves: %d of %d messages embedded", solved, nonzero, len(batch))
		}
		if _, err := owner.learn(batch); err != nil {
			t.Fatal(err)
		}
		if err := owner.solve(); err != nil {
			t.Fatal(err)
		}
	}
}

// A text contribution cut short or corrupted, or past the owner's token
// limits, is refused before the vocabulary or the statistics change.
func TestWorkTextContributionMalformed(t *testing.T) {
	p := textWorkerPipeline("words")
	batch := recordedSamples(t, &p, "brown-2000.smtdrec", 20)
	enc, _ := newModel(&p, rand.NewPCG(1, 2)).(*textModel).contribute(batch, nil, 0, 32)
	refusesCorrupted(t, func() workModel { return newModel(&p, rand.NewPCG(1, 2)).(workModel) }, enc, 300)
	long := p
	long.Text.MaxTokenBytes = 3
	strict := newModel(&long, rand.NewPCG(1, 2)).(*textModel)
	if err := strict.applyContributions([][]byte{enc}); err == nil {
		t.Error("tokens longer than the owner's text.max_token_bytes were applied")
	}
}

// A model version that repeats the one before (a text model between two
// solves) is published as a reference to it, without its bytes, and a
// worker holding that version holds the new one as the same, decoded
// once; one that does not hold it ignores the reference (it asks for the
// version when a task needs it).
func TestWorkOwnerRepeatsUnchangedVersions(t *testing.T) {
	ns := startNATS(t)
	nc := connect(t, ns.ClientURL())
	cfg := config.Default()
	d := &Daemon{cfg: cfg, nc: nc}
	p := textWorkerPipeline("words")
	models := make(chan *nats.Msg, 4)
	if _, err := nc.ChanSubscribe(d.workSubject(p.Name, "model"), models); err != nil {
		t.Fatal(err)
	}
	pl := &pipeline{d: d, name: p.Name, cfg: p, model: newModel(&p, rand.NewPCG(1, 2))}
	o := &workOwner{pl: pl, epoch: 3}
	w := &worker{pl: pl, versions: map[workVersion]*heldVersion{}, arrived: make(chan struct{})}
	next := func() *nats.Msg { return nextMsg(t, models, "no model version published") }
	o.publishModel() // version 0: the model without a solve
	first := next()
	if len(first.Data) == 0 || first.Header.Get(headerModelSame) != "" {
		t.Fatalf("version 0: %d bytes, repeating %q", len(first.Data), first.Header.Get(headerModelSame))
	}
	pl.version = 1
	o.publishModel()
	repeat := next()
	if len(repeat.Data) != 0 || repeat.Header.Get(headerModelSame) != "0" {
		t.Fatalf("version 1 unchanged: %d bytes, repeating %q", len(repeat.Data), repeat.Header.Get(headerModelSame))
	}
	if !bytes.Equal(pl.workVersions[1], pl.workVersions[0]) {
		t.Error("the owner does not keep the bytes of the repeated version for model.get")
	}
	w.store(repeat)
	if len(w.versions) != 0 {
		t.Fatal("a worker without version 0 took version 1 as a reference to it")
	}
	w.store(first)
	w.store(repeat)
	if h := w.versions[workVersion{3, 1}]; h == nil || h != w.versions[workVersion{3, 0}] {
		t.Error("version 1 is not held as version 0's")
	}
	// A solve changes the version: it is sent whole.
	m := pl.model.(*textModel)
	if err := m.applyContributions([][]byte{mustContribute(t, &p, 500)}); err != nil {
		t.Fatal(err)
	}
	if err := m.solve(); err != nil {
		t.Fatal(err)
	}
	pl.version = 2
	o.publishModel()
	if changed := next(); len(changed.Data) == 0 || changed.Header.Get(headerModelSame) != "" {
		t.Errorf("version 2 after a solve: %d bytes, repeating %q", len(changed.Data), changed.Header.Get(headerModelSame))
	}
}

// mustContribute returns the contribution of the first n Brown sentences.
func mustContribute(t *testing.T, p *config.Pipeline, n int) []byte {
	t.Helper()
	enc, _ := newModel(p, rand.NewPCG(1, 2)).(*textModel).contribute(recordedSamples(t, p, "brown-2000.smtdrec", n), nil, 0, 32)
	return enc
}
