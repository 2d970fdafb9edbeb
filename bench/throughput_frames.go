package bench

import (
	"fmt"
	"image"
	"math/rand/v2"
	"path/filepath"
	"strconv"

	"github.com/nats-io/nats.go"

	"github.com/smtd/smtd/config"
	"github.com/smtd/smtd/daemon"
	"github.com/smtd/smtd/dataset"
)

// clipFrames is the length of each panned clip of framesInput: ten
// seconds of a 25 frames/s camera.
const clipFrames = 250

// framesInput returns the default frames pipeline (32x32 gray video, the
// temporal SMT of each stream's consecutive frames) with atoms k-means
// atoms, and n input messages for it: clips of clipFrames frames, each a
// stream of its own, panned over the photos of dir in turn (dataset.Pan,
// seeded by the clip's number).
func framesInput(dir string, n, atoms int) (config.Pipeline, []*nats.Msg, error) {
	p := config.DefaultPipeline(config.Video, "frames")
	p.Input.Subject = "bench.frames"
	p.Output.Subject = "bench.frames.embeddings"
	p.KMeans.Atoms = atoms
	check := config.Default()
	check.Pipelines = []config.Pipeline{p}
	if err := check.Validate(); err != nil {
		return p, nil, fmt.Errorf("bench throughput: frames: %w", err)
	}
	msgs, err := panFrames(dir, p, n)
	return p, msgs, err
}

// panFrames returns n input messages of pipeline p, raw uint8 frames of
// p's image shape with their stream and frame headers, from clips of
// clipFrames frames panned over the photos of dir in turn.
func panFrames(dir string, p config.Pipeline, n int) ([]*nats.Msg, error) {
	names, err := photoNames(dir)
	if err != nil {
		return nil, fmt.Errorf("bench throughput: %w", err)
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("bench throughput: no photos (PNG or JPEG) in %s", dir)
	}
	photos := make([]*image.Gray, min(len(names), (n+clipFrames-1)/clipFrames))
	for i := range photos {
		if photos[i], err = dataset.LoadGray(filepath.Join(dir, names[i])); err != nil {
			return nil, fmt.Errorf("bench throughput: %w", err)
		}
	}
	w, h := p.Image.Width, p.Image.Height
	shape := fmt.Sprintf("%d,%d", h, w)
	msgs := make([]*nats.Msg, 0, n)
	for clip := 0; len(msgs) < n; clip++ {
		name := names[clip%len(photos)]
		frames := dataset.Pan(photos[clip%len(photos)], w, h, min(clipFrames, n-len(msgs)), rand.NewPCG(uint64(clip), 0x70616e))
		stream := fmt.Sprintf("pan-%d-%s", clip, name)
		for t, f := range frames {
			m := nats.NewMsg(p.Input.Subject)
			m.Header.Set(daemon.HeaderShape, shape)
			m.Header.Set(daemon.HeaderDtype, "uint8")
			m.Header.Set(daemon.HeaderStream, stream)
			m.Header.Set(daemon.HeaderFrame, strconv.Itoa(t))
			m.Data = f.Pix // Pan's frames are w×h with stride w
			msgs = append(msgs, m)
		}
	}
	return msgs, nil
}
