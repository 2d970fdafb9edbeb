package daemon

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/smtd/smtd/config"
)

// videoWorkerPipeline is a small video pipeline with temporal SMT in
// deterministic worker mode: steps of one minibatch of 8 frames, coded
// with the newest model, sent exactly.
func videoWorkerPipeline(code string) config.Pipeline {
	p := config.DefaultPipeline(config.Video, "frames")
	p.KMeans.Atoms = 32
	p.KMeans.Code = code
	p.SMT.Dim = 8
	p.Deterministic = true
	p.Seed = 7
	p.Batch.Size = 8
	p.Workers = config.Workers{Enabled: true, Merge: 1, Staleness: 0, OnOwner: true, TaskTimeout: 5 * time.Second, Precision: 64}
	return p
}

// TestWorkVideoMatchesOneDaemon checks that worker mode learns video as
// one daemon does (workMatchesOneDaemon), its frame tracker and
// temporal SMT statistics included.
func TestWorkVideoMatchesOneDaemon(t *testing.T) {
	p := videoWorkerPipeline(config.CodeVQ)
	owner := workMatchesOneDaemon(t, p, recordedFrames(t, &p, 96))
	if c := owner.frames.counts(); c.Streams != 2 || c.Gaps != 0 || c.Late != 0 {
		t.Errorf("owner's frame tracker: %+v, want 2 streams, no gaps, nothing late", c)
	}
	if owner.smt.Steps() == 0 {
		t.Error("the owner took no temporal SMT step")
	}
}

// Worker mode on video: three daemon processes on a 3-node NATS cluster
// share the learning of two interleaved recorded clips, f_gq codes and
// temporal SMT, in deterministic mode, one version behind, minibatches
// of four frames handed to whichever daemon asks, so that each clip is
// coded by more than one; the owner joins the frames into triples: the
// final model, frame tracker included, equals the in-process simulation
// bit for bit (workersMatchSimulation).
func TestWorkersLearnVideo(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a NATS cluster and daemon processes")
	}
	p := videoWorkerPipeline(config.CodeGQ)
	p.Name = "wv"
	p.Batch.Size = 4
	p.Workers.Merge, p.Workers.Staleness, p.Workers.Precision = 2, 1, 32
	c := workersMatchSimulation(t, p, "video-2x48.smtdrec")
	// The frames of each clip were coded by more than one daemon.
	coders := map[string]int{}
	for k := range outputsBy(t, c.js, p.OutputStreamName(), func(h nats.Header) string { return h.Get(HeaderStream) + "\x00" + h.Get(HeaderDaemon) }) {
		clip, _, _ := strings.Cut(k, "\x00")
		coders[clip]++
	}
	t.Logf("daemons per clip: %v", coders)
	for clip, n := range coders {
		if n < 2 {
			t.Errorf("clip %s coded by %d daemon, want more than one", clip, n)
		}
	}
	if len(coders) != 2 {
		t.Errorf("outputs of %d clips, want 2", len(coders))
	}
}

// A video worker's contribution carries every frame's stream and index in
// order, and the f_gq code of every patch, its cosines exact in either
// precision (they are float32 scores widened) and not softened, which
// the owner does with its own threshold.
func TestWorkContributionCarriesFrames(t *testing.T) {
	p := videoWorkerPipeline(config.CodeGQ)
	m := newModel(&p, rand.NewPCG(1, 2)).(*imageModel)
	batch := recordedFrames(t, &p, 16)
	if _, err := m.learn(batch[:8]); err != nil { // seeds the dictionary
		t.Fatal(err)
	}
	for _, bits := range []int{32, 64} {
		w := m.snapshot().(*imageModel)
		enc, _ := w.contribute(batch[8:], rand.NewPCG(1, 9), 1, bits)
		var c imageContribution
		if err := c.decode(enc); err != nil {
			t.Fatalf("%d bits: %v", bits, err)
		}
		if len(c.frames) != 8 {
			t.Fatalf("%d bits: %d frames, want 8", bits, len(c.frames))
		}
		for i, s := range batch[8:] {
			if f := c.frames[i]; f.stream != s.stream || f.index != s.frame {
				t.Fatalf("%d bits: frame %d is %v, want %s %d", bits, i, f, s.stream, s.frame)
			}
		}
		// The worker's codes, softened for its outputs.
		got, want := c.sparse, w.codes
		softened := make([]float64, len(got.Cos))
		for i, v := range got.Cos {
			softened[i] = v - p.KMeans.Threshold
		}
		if got.Rows != want.Rows || !slices.Equal(got.Ptr, want.Ptr) || !slices.Equal(got.Index, want.Index) || !slices.Equal(softened, want.Cos) {
			t.Errorf("%d bits: the f_gq codes sent are not the worker's", bits)
		}
		if got.Rows != 8*w.patcher.Grid.Len() || len(got.Index) == 0 {
			t.Errorf("%d bits: %d codes with %d atoms for 8 frames of %d patches", bits, got.Rows, len(got.Index), w.patcher.Grid.Len())
		}
	}
}

// An f_gq code whose atoms do not increase (swapped, or one repeated) is
// refused before the model changes: the statistics take codes in order
// only (online.SparseCodes), and would panic on it.
func TestWorkContributionAtomsOutOfOrder(t *testing.T) {
	digits := digitsPipeline("digits", "mnist.images", 16)
	digits.KMeans.Code, digits.SMT.Solver = config.CodeGQ, config.SolverClosed
	video := videoWorkerPipeline(config.CodeGQ)
	for name, tc := range map[string]struct {
		p     config.Pipeline
		batch func(*config.Pipeline) []sample
	}{
		"images": {digits, func(p *config.Pipeline) []sample { return recordedBatch(t, p, 8) }},
		"video":  {video, func(p *config.Pipeline) []sample { return recordedFrames(t, p, 8) }},
	} {
		for _, how := range []string{"swapped", "repeated"} {
			p := tc.p
			m := newModel(&p, rand.NewPCG(1, 2)).(*imageModel)
			if _, err := m.learn(tc.batch(&p)); err != nil { // seeds the dictionary
				t.Fatal(err)
			}
			enc, _ := m.snapshot().(*imageModel).contribute(tc.batch(&p), rand.NewPCG(1, 9), 1, 64)
			var c imageContribution
			if err := c.decode(enc); err != nil {
				t.Fatal(err)
			}
			row := -1
			for i := range c.sparse.Rows {
				if atoms, _ := c.sparse.Row(i); len(atoms) >= 2 {
					row = i
					break
				}
			}
			if row < 0 {
				t.Fatalf("%s: no code with two atoms", name)
			}
			atoms, _ := c.sparse.Row(row)
			if how == "swapped" {
				atoms[0], atoms[1] = atoms[1], atoms[0]
			} else {
				atoms[1] = atoms[0]
			}
			before, _ := m.sections()
			if err := m.applyContributions([][]byte{c.encode(false)}); err == nil {
				t.Errorf("%s, atoms %s: applied", name, how)
			}
			after, _ := m.sections()
			for i := range before {
				if !slices.Equal(before[i].Data, after[i].Data) {
					t.Errorf("%s, atoms %s: section %s changed", name, how, before[i].Name)
				}
			}
		}
	}
}
