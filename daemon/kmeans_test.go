package daemon

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"gonum.org/v1/gonum/mat"

	"github.com/smtd/smtd/online"
)

// The dictionary the daemon learns from a recorded MNIST stream, replayed
// through NATS, is as good as batch spherical k-means on the same patches:
// its mean patch-to-atom cosine distortion is within 2% of Lloyd's with the
// same K, on the patches as the final model preprocesses them.
func TestStreamedKMeansMatchesLloyd(t *testing.T) {
	t.Parallel() // mostly Lloyd's iterations, many times slower under -race
	const k = 64
	p := digitsPipeline("digits", "mnist.images", k)
	d := startDaemon(t, testConfig(t, p))
	nc := connect(t, d.ClientURL())
	n := replayFile(t, nc, "mnist-train-1000.smtdrec", "mnist.images")
	waitFor(t, 2*time.Minute, "stream learned", func() bool { return pipelineStatus(d, "digits").Learned == int64(n) })
	if err := d.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}

	// The final model, restored from the shutdown checkpoint.
	c := lastCheckpoint(t, d.cfg, "digits")
	m := newModel(&p, rand.NewPCG(0, 0)).(*imageModel)
	if err := m.restore(c.Sections); err != nil {
		t.Fatal(err)
	}
	var batch []sample
	for _, msg := range readStream(t, "mnist-train-1000.smtdrec") {
		s, err := decode(&p, msg.Header, msg.Data)
		if err != nil {
			t.Fatal(err)
		}
		batch = append(batch, s)
	}
	m.prepare(batch, false)

	streamed := online.Distortion(m.km.Atoms(), &m.w, m.blank)
	atoms := mat.NewDense(k, m.patcher.Grid.Dim(), nil)
	if _, err := online.Lloyd(atoms, &m.w, m.blank, 50, rand.NewPCG(1, 1)); err != nil {
		t.Fatal(err)
	}
	lloyd := online.Distortion(atoms, &m.w, m.blank)
	t.Logf("distortion: streamed %.5f, Lloyd %.5f (ratio %.4f) over %d patches", streamed, lloyd, streamed/lloyd, m.w.RawMatrix().Rows)
	if streamed > 1.02*lloyd {
		t.Errorf("streamed dictionary distortion %.5f is more than 2%% above Lloyd's %.5f", streamed, lloyd)
	}
}
