package daemon

import (
	"encoding/binary"
	"math"
	"strconv"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/smtd/smtd/config"
)

// fuzzPipelines are small pipelines of every learner and modality.
func fuzzPipelines() []config.Pipeline {
	shape := config.ImageShape{Width: 8, Height: 8, Channels: 1}
	img := config.DefaultPipeline(config.Image, "images")
	img.Image, img.Patches.Size, img.KMeans.Atoms, img.SMT.Dim, img.SMT.PoolKernel = shape, 4, 8, 4, 2
	img.Whiten.RefreshEvery = 1
	vid := config.DefaultPipeline(config.Video, "frames")
	vid.Image, vid.Patches.Size, vid.KMeans.Atoms, vid.SMT.Dim, vid.SMT.PoolKernel = shape, 4, 8, 4, 2
	vid.KMeans.Code = config.CodeGQ
	vid.Whiten.RefreshEvery = 1
	txt := config.DefaultPipeline(config.Text, "words")
	txt.SMT.Dim, txt.SMT.SolveEvery, txt.Text.MinCount = 2, 1, 1
	ksm := config.DefaultPipeline(config.Image, "points")
	ksm.Image, ksm.Learner, ksm.KSM.Neurons = shape, config.LearnerKSM, 4
	admm := config.DefaultPipeline(config.Image, "dict")
	admm.Image, admm.Learner, admm.ADMM.Atoms = shape, config.LearnerADMM, 4
	return []config.Pipeline{img, vid, txt, ksm, admm}
}

// fuzzImage is an 8x8 float32 image message whose values are raw's bytes
// read as float32 (zero-padded), scaled by 10^exp, and kept finite and in
// range when clamp is set, so that most inputs decode.
func fuzzImage(raw []byte, exp int8, clamp bool, frame uint64) (nats.Header, []byte) {
	data := make([]byte, 4*64)
	scale := math.Pow(10, float64(exp%40))
	for i := range 64 {
		var bits uint32
		if 4*i+4 <= len(raw) {
			bits = binary.LittleEndian.Uint32(raw[4*i:])
		}
		v := float64(math.Float32frombits(bits)) * scale
		if clamp {
			if math.IsNaN(v) {
				v = 0
			}
			v = math.Max(-1000, math.Min(1000, v))
		}
		binary.LittleEndian.PutUint32(data[4*i:], math.Float32bits(float32(v)))
	}
	h := nats.Header{HeaderShape: {"8,8"}, HeaderDtype: {"float32"}, HeaderStream: {"cam"}, HeaderFrame: {strconv.FormatUint(frame, 10)}}
	return h, data
}

// normalImage is the i-th of a deterministic family of plausible images.
func normalImage(i int) (nats.Header, []byte) {
	data := make([]byte, 4*64)
	for p := range 64 {
		v := float32(0.5 + 0.5*math.Sin(float64(p*(i%7+1))/5+float64(i)))
		binary.LittleEndian.PutUint32(data[4*p:], math.Float32bits(v))
	}
	return nats.Header{HeaderShape: {"8,8"}, HeaderDtype: {"float32"}, HeaderStream: {"cam"}, HeaderFrame: {strconv.Itoa(i)}}, data
}

// Random but decodable inputs, extreme finite values included, go through
// full learning steps of every kind of pipeline between batches of
// ordinary data: nothing panics, and after every step each model is finite
// and non-degenerate, or was rolled back (and then is).
func FuzzPipelineStep(f *testing.F) {
	f.Add([]byte{0, 0, 128, 63}, int8(0), true, uint64(3), "the cat sat")
	f.Add([]byte{0, 0, 128, 63, 0, 0, 128, 191}, int8(6), false, uint64(math.MaxInt64), "a b c")
	f.Add([]byte{255, 255, 127, 127}, int8(38), true, uint64(1<<63-1), "")
	f.Add(make([]byte, 256), int8(-30), true, uint64(0), "word word word word")
	ns := startNATS(f)
	nc := connect(f, ns.ClientURL())
	cfg := testConfig(f, fuzzPipelines()...)
	d := &Daemon{cfg: cfg, fixed: cfg, nc: nc, log: NewLogger(testWriter{f}, "console").Logger}
	d.log = d.log.Level(zerolog.Disabled) // rollbacks are expected
	f.Fuzz(func(t *testing.T, raw []byte, exp int8, clamp bool, frame uint64, text string) {
		for _, p := range cfg.Pipelines {
			pl := newPipeline(d, p)
			pl.publishSnapshot()
			ph, pdata := normalImage(0)
			if p.Modality == config.Text {
				ph, pdata = nil, []byte("the fox")
			}
			probe, err := decode(&pl.cfg, ph, pdata)
			if err != nil {
				t.Fatal(err)
			}
			seq := uint64(0)
			step := func(msgs ...inMsg) {
				for i := range msgs {
					seq++
					msgs[i].seq = seq
				}
				pl.process(t.Context(), msgs)
				if err := pl.model.check(); err != nil {
					t.Fatalf("%s: model left degenerate after a step: %v", p.Name, err)
				}
				if out := pl.snap.Load().model.encode([]sample{probe}); len(out) != 1 {
					t.Fatalf("%s: %d outputs for one query", p.Name, len(out))
				}
			}
			normal := func(from int) []inMsg {
				var out []inMsg
				for i := from; i < from+4; i++ {
					h, data := normalImage(i)
					if p.Modality == config.Text {
						h, data = nil, []byte("the quick brown fox jumps over the lazy dog")
					}
					out = append(out, inMsg{header: h, data: data})
				}
				return out
			}
			step(normal(0)...)
			h, data := fuzzImage(raw, exp, clamp, frame)
			if p.Modality == config.Text {
				h, data = nil, []byte(text)
			}
			step(append(normal(4), inMsg{header: h, data: data})...)
			for b := range 3 {
				step(normal(8 + 4*b)...)
			}
			if pl.health.Load().State == HealthStalled {
				t.Errorf("%s: stalled on ordinary data after the fuzzed input", p.Name)
			}
		}
	})
}
