package daemon

import (
	"bytes"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

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
	const stream = "brown-2000.smtdrec"
	p := textWorkerPipeline("words")
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
	for solved := range 2 {
		secs, err := owner.workerSections()
		if err != nil {
			t.Fatal(err)
		}
		version, err := base.withWorkerSections(secs)
		if err != nil {
			t.Fatal(err)
		}
		_, got := version.contribute(batch, nil, 0, 32)
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
		if n := len(secs[0].Data); solved == 0 && n > 4 {
			t.Errorf("a version before any solve is %d bytes", n)
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
