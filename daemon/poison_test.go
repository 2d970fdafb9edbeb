package daemon

import (
	"bytes"
	"encoding/binary"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// hugeImage is a raw float32 28x28 image of N(0,1)·scale.
func hugeImage(scale float64) (nats.Header, []byte) {
	rng := rand.New(rand.NewPCG(3, 4))
	data := make([]byte, 4*28*28)
	for i := range 28 * 28 {
		binary.LittleEndian.PutUint32(data[4*i:], math.Float32bits(float32(rng.NormFloat64()*scale)))
	}
	return nats.Header{HeaderShape: {"28,28"}, HeaderDtype: {"float32"}}, data
}

// One image of huge finite values in an MNIST stream does not end
// learning: by default one of N(0,1)·1e6 is refused at the edge
// (out_of_range); admitted (N(0,1)·1e5 with input.max_value 1e6), its weight in the whitening statistics is bounded,
// so the dictionary keeps learning and different digits keep different
// embeddings, and no rollback is needed.
func TestHugeValuesDoNotStopLearning(t *testing.T) {
	t.Parallel()
	for _, admitted := range []bool{false, true} {
		p := digitsPipeline("digits", "poison.images", 16)
		p.Whiten.RefreshEvery = 1 // refresh right after the image
		if admitted {
			p.Input.MaxValue = 1e6
		}
		d := startDaemon(t, testConfig(t, p))
		nc := connect(t, d.ClientURL())
		n := replayFile(t, nc, "mnist-raw-100.smtdrec", "poison.images")
		waitFor(t, 30*time.Second, "first part learned", func() bool { return pipelineStatus(d, "digits").Learned == int64(n) })
		patches := func() float64 { return float64(pipelineStatus(d, "digits").Model["kmeans_patches"].(int64)) }
		before := patches()

		scale := 1e6 // as reproduced: every image then got the same embedding
		if admitted {
			scale = 1e5 // within max_value
		}
		h, data := hugeImage(scale)
		if err := nc.PublishMsg(natsMsg("poison.images", h, data)); err != nil {
			t.Fatal(err)
		}
		m := replayFile(t, nc, "mnist-raw-100.smtdrec", "poison.images")
		waitFor(t, 30*time.Second, "second part learned", func() bool {
			st := pipelineStatus(d, "digits")
			return st.Learned+st.Rejected == int64(n+m+1)
		})
		st := pipelineStatus(d, "digits")
		if got := st.ByReason[ReasonOutOfRange]; admitted != (got == 0) {
			t.Errorf("admitted=%v: %d rejected out_of_range", admitted, got)
		}
		if after := patches(); after < before+float64(m)*100 {
			t.Errorf("admitted=%v: k-means learned %v patches after the image, from %v: learning stopped", admitted, after-before, before)
		}
		if st.Rollbacks != 0 || st.Health.State != HealthOK {
			t.Errorf("admitted=%v: %d rollbacks, health %+v", admitted, st.Rollbacks, st.Health)
		}
		one, seven := embedPNG(t, nc, "digit-1.png"), embedPNG(t, nc, "digit-7.png")
		if bytes.Equal(one, seven) {
			t.Errorf("admitted=%v: digits 1 and 7 have the same embedding", admitted)
		}
		d.Shutdown(t.Context())
	}
}

func embedPNG(t *testing.T, nc *nats.Conn, name string) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "testdata", "images", name))
	if err != nil {
		t.Fatal(err)
	}
	m, err := nc.Request("smtd.embed.digits", data, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return m.Data
}
