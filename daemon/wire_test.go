package daemon

import (
	"bytes"
	"encoding/binary"
	"errors"
	"image"
	"image/png"
	"math"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/smtd/smtd/config"
)

func pngBytes(t testing.TB, w, h int) []byte {
	img := image.NewGray(image.Rect(0, 0, w, h))
	for i := range img.Pix {
		img.Pix[i] = uint8(i * 7)
	}
	var b bytes.Buffer
	if err := png.Encode(&b, img); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func hdr(kv ...string) nats.Header {
	h := nats.Header{}
	for i := 0; i+1 < len(kv); i += 2 {
		h.Set(kv[i], kv[i+1])
	}
	return h
}

func float32Bytes(vals ...float32) []byte {
	b := make([]byte, 4*len(vals))
	for i, v := range vals {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
	}
	return b
}

func TestDecode(t *testing.T) {
	img := config.DefaultPipeline(config.Image, "images")
	img.Image = config.ImageShape{Width: 2, Height: 2, Channels: 1}
	img.Input.MaxBytes = 1000
	vid := config.DefaultPipeline(config.Video, "frames")
	vid.Image = img.Image
	txt := config.DefaultPipeline(config.Text, "words")
	txt.Text.MaxTokens = 3
	raw := func(kv ...string) nats.Header {
		return hdr(append([]string{HeaderShape, "2,2", HeaderDtype, "uint8"}, kv...)...)
	}
	for _, tc := range []struct {
		name   string
		p      *config.Pipeline
		h      nats.Header
		data   []byte
		reason string // "" for a valid message
		pixels []float64
	}{
		{name: "raw uint8", p: &img, h: raw(), data: []byte{0, 51, 102, 255}, pixels: []float64{0, 0.2, 0.4, 1}},
		{name: "raw uint8 with channels", p: &img, h: hdr(HeaderShape, "2,2,1", HeaderDtype, "uint8"), data: []byte{0, 0, 0, 0}},
		{name: "raw float32", p: &img, h: hdr(HeaderShape, "2,2", HeaderDtype, "float32"), data: float32Bytes(0.5, 0, 1, 0.25), pixels: []float64{0.5, 0, 1, 0.25}},
		{name: "header keys in any case", p: &img, h: hdr("smtd-shape", "2,2", "SMTD-DTYPE", "uint8"), data: []byte{0, 0, 0, 0}},
		{name: "png", p: &img, h: hdr(HeaderEncoding, "png"), data: pngBytes(t, 2, 2)},
		{name: "png detected without header", p: &img, h: nil, data: pngBytes(t, 2, 2)},
		{name: "too large", p: &img, h: raw(), data: make([]byte, 1001), reason: ReasonTooLarge},
		{name: "missing shape", p: &img, h: hdr(HeaderDtype, "uint8"), data: []byte{0, 0, 0, 0}, reason: ReasonMissingHeader},
		{name: "no headers at all", p: &img, h: nil, data: []byte{0, 0, 0, 0}, reason: ReasonMissingHeader},
		{name: "wrong shape", p: &img, h: hdr(HeaderShape, "3,3", HeaderDtype, "uint8"), data: make([]byte, 9), reason: ReasonBadShape},
		{name: "garbled shape", p: &img, h: hdr(HeaderShape, "2;x", HeaderDtype, "uint8"), data: make([]byte, 4), reason: ReasonBadHeader},
		{name: "wrong dtype", p: &img, h: hdr(HeaderShape, "2,2", HeaderDtype, "int16"), data: make([]byte, 8), reason: ReasonBadDtype},
		{name: "truncated", p: &img, h: raw(), data: []byte{1, 2, 3}, reason: ReasonTruncated},
		{name: "too long for shape", p: &img, h: raw(), data: []byte{1, 2, 3, 4, 5}, reason: ReasonBadShape},
		{name: "NaN", p: &img, h: hdr(HeaderShape, "2,2", HeaderDtype, "float32"), data: float32Bytes(0, float32(math.NaN()), 0, 0), reason: ReasonNotFinite},
		{name: "Inf", p: &img, h: hdr(HeaderShape, "2,2", HeaderDtype, "float32"), data: float32Bytes(0, 0, float32(math.Inf(-1)), 0), reason: ReasonNotFinite},
		{name: "invalid png", p: &img, h: hdr(HeaderEncoding, "png"), data: []byte("\x89PNG\r\n\x1a\nnot really"), reason: ReasonBadPNG},
		{name: "png of wrong size", p: &img, h: hdr(HeaderEncoding, "png"), data: pngBytes(t, 3, 2), reason: ReasonBadShape},
		{name: "unknown encoding", p: &img, h: hdr(HeaderEncoding, "jpeg"), data: []byte{1}, reason: ReasonBadHeader},
		{name: "frame", p: &vid, h: raw(HeaderStream, "cam", HeaderFrame, "7"), data: []byte{0, 0, 0, 0}},
		{name: "frame without stream", p: &vid, h: raw(HeaderFrame, "7"), data: []byte{0, 0, 0, 0}, reason: ReasonMissingHeader},
		{name: "frame without index", p: &vid, h: raw(HeaderStream, "cam"), data: []byte{0, 0, 0, 0}, reason: ReasonMissingHeader},
		{name: "frame index not a number", p: &vid, h: raw(HeaderStream, "cam", HeaderFrame, "-1"), data: []byte{0, 0, 0, 0}, reason: ReasonBadHeader},
		{name: "text", p: &txt, data: []byte("The cat, sat.")},
		{name: "invalid utf-8", p: &txt, data: []byte{'a', 0xff, 'b'}, reason: ReasonBadUTF8},
		{name: "too many tokens", p: &txt, data: []byte("a b c d"), reason: ReasonTooManyTokens},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := decode(tc.p, tc.h, tc.data)
			if tc.reason == "" {
				if err != nil {
					t.Fatalf("unexpected error %v", err)
				}
				for i, want := range tc.pixels {
					if math.Abs(s.pixels[i]-want) > 1e-7 {
						t.Errorf("pixel %d = %v, want %v", i, s.pixels[i], want)
					}
				}
				return
			}
			var ie *InputError
			if !errors.As(err, &ie) {
				t.Fatalf("error %v is not an *InputError", err)
			}
			if ie.Reason != tc.reason {
				t.Errorf("reason %q, want %q (%v)", ie.Reason, tc.reason, err)
			}
		})
	}
}

func TestEncodeOutput(t *testing.T) {
	p := config.DefaultPipeline(config.Video, "frames")
	o := &output{vector: []float32{1, -2.5}, version: 7, subject: "in", source: sample{seq: 42, label: "3", stream: "cam", frame: 9}}
	m := encodeOutput(&p, "out", o, nil)
	for k, want := range map[string]string{
		HeaderShape: "2", HeaderDtype: "float32", HeaderModelVersion: "7", HeaderSourceSeq: "42",
		HeaderSourceSubj: "in", HeaderLabel: "3", HeaderStream: "cam", HeaderFrame: "9", HeaderPipeline: "frames",
	} {
		if got := m.Header.Get(k); got != want {
			t.Errorf("header %s = %q, want %q", k, got, want)
		}
	}
	if !bytes.Equal(m.Data, float32Bytes(1, -2.5)) {
		t.Errorf("data %v", m.Data)
	}
	if v, label, err := DecodeOutput(m.Header, m.Data); err != nil || label != "3" || len(v) != 2 || v[1] != -2.5 {
		t.Errorf("DecodeOutput = %v, %q, %v", v, label, err)
	}
	p.Output.Encoding = config.JSON
	m = encodeOutput(&p, "out", o, nil)
	if want := `"vector":[1,-2.5]`; !strings.Contains(string(m.Data), want) {
		t.Errorf("JSON %s does not contain %s", m.Data, want)
	}
	if v, label, err := DecodeOutput(m.Header, m.Data); err != nil || label != "3" || len(v) != 2 || v[1] != -2.5 {
		t.Errorf("DecodeOutput of JSON = %v, %q, %v", v, label, err)
	}
	if _, _, err := DecodeOutput(nats.Header{HeaderDtype: {"float32"}, HeaderShape: {"3"}}, []byte{1, 2}); err == nil {
		t.Error("DecodeOutput accepted a payload shorter than its shape")
	}
}

// FuzzDecode feeds arbitrary headers and payloads to every modality's
// decoder: it must never panic, and must either reject with an
// *InputError or return pixels of the configured size, all finite.
func FuzzDecode(f *testing.F) {
	f.Add("", "2,2", "uint8", []byte{1, 2, 3, 4})
	f.Add("png", "", "", pngBytes(f, 2, 2))
	f.Add("raw", "2,2", "float32", float32Bytes(1, 2, 3, 4))
	f.Add("raw", "2,2,3", "uint8", []byte("hello, world"))
	img := config.DefaultPipeline(config.Image, "images")
	img.Image = config.ImageShape{Width: 2, Height: 2, Channels: 1}
	vid := config.DefaultPipeline(config.Video, "frames")
	vid.Image = img.Image
	txt := config.DefaultPipeline(config.Text, "words")
	f.Fuzz(func(t *testing.T, enc, shape, dtype string, data []byte) {
		h := hdr(HeaderEncoding, enc, HeaderShape, shape, HeaderDtype, dtype, HeaderStream, "s", HeaderFrame, "1")
		for _, p := range []*config.Pipeline{&img, &vid, &txt} {
			s, err := decode(p, h, data)
			if err != nil {
				var ie *InputError
				if !errors.As(err, &ie) {
					t.Fatalf("%s: error %v is not an *InputError", p.Name, err)
				}
				continue
			}
			if p.Modality == config.Text {
				continue
			}
			if len(s.pixels) != 4 {
				t.Fatalf("%s: %d pixels, want 4", p.Name, len(s.pixels))
			}
			for _, v := range s.pixels {
				if math.IsNaN(v) || math.IsInf(v, 0) {
					t.Fatalf("%s: non-finite pixel accepted", p.Name)
				}
			}
		}
	})
}

// DecodePoint reads images of any shape and output vectors, and refuses
// what is neither.
func TestDecodePoint(t *testing.T) {
	for _, tc := range []struct {
		name  string
		h     nats.Header
		data  []byte
		n     int
		label string
		err   bool
	}{
		{"png", hdr(HeaderLabel, "7"), pngBytes(t, 5, 3), 15, "7", false},
		{"raw uint8", hdr(HeaderShape, "2,3", HeaderDtype, "uint8"), []byte{0, 51, 102, 153, 204, 255}, 6, "", false},
		{"raw float32 rgb", hdr(HeaderShape, "1,2,3", HeaderDtype, "float32"), float32Bytes(1, 2, 3, 4, 5, 6), 6, "", false},
		{"output", hdr(HeaderShape, "3", HeaderDtype, "float32", HeaderLabel, "2"), float32Bytes(0.5, 0, -1), 3, "2", false},
		{"truncated", hdr(HeaderShape, "2,3", HeaderDtype, "uint8"), []byte{1, 2}, 0, "", true},
		{"text", nil, []byte("the quick brown fox"), 0, "", true},
	} {
		v, label, err := DecodePoint(tc.h, tc.data)
		if (err != nil) != tc.err || len(v) != tc.n || label != tc.label {
			t.Errorf("%s: %d values, label %q, error %v", tc.name, len(v), label, err)
		}
	}
	if _, _, err := DecodePoint(nil, []byte("text")); !errors.Is(err, ErrNotPoint) {
		t.Errorf("text: %v, want ErrNotPoint", err)
	}
}

// A rejection quotes at most maxEcho bytes of the header it refuses, so
// that an error event stays small whatever the input.
func TestDecodeErrorIsShort(t *testing.T) {
	img := config.DefaultPipeline(config.Image, "images")
	vid := config.DefaultPipeline(config.Video, "frames")
	long := strings.Repeat("x", 100<<10)
	for _, tc := range []struct {
		name string
		p    *config.Pipeline
		h    nats.Header
	}{
		{"frame", &vid, hdr(HeaderStream, "s", HeaderFrame, long)},
		{"encoding", &img, hdr(HeaderEncoding, long)},
		{"dtype", &img, hdr(HeaderShape, "28,28", HeaderDtype, long)},
		{"shape", &img, hdr(HeaderShape, long, HeaderDtype, "uint8")},
	} {
		_, err := decode(tc.p, tc.h, []byte{1})
		var ie *InputError
		if !errors.As(err, &ie) {
			t.Fatalf("%s: error %v, want an *InputError", tc.name, err)
		}
		if len(err.Error()) > 200 || !strings.Contains(err.Error(), "… (102400 bytes)") {
			t.Errorf("%s: error of %d bytes: %.300s", tc.name, len(err.Error()), err)
		}
	}
	if got, want := echo("é"+strings.Repeat("é", maxEcho)), `"`+strings.Repeat("é", maxEcho/2)+`"… (130 bytes)`; got != want {
		t.Errorf("echo cuts a rune: %s, want %s", got, want)
	}
}
