package daemon

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/nats-io/nats.go"
	"gonum.org/v1/gonum/mat"

	"github.com/smtd/smtd/config"
	"github.com/smtd/smtd/dataset"
)

// Message headers of the wire format (README, "Wire formats").
const (
	HeaderEncoding     = "Smtd-Encoding"      // input: raw or png
	HeaderShape        = "Smtd-Shape"         // input and output: "rows,cols[,channels]", or "n" for vectors
	HeaderDtype        = "Smtd-Dtype"         // input: uint8 or float32; output: float32
	HeaderStream       = "Smtd-Stream"        // video: the stream a frame belongs to (1..maxStreamBytes)
	HeaderFrame        = "Smtd-Frame"         // video: the frame's index in its stream
	HeaderLabel        = "Smtd-Label"         // optional, copied to the output
	HeaderPipeline     = "Smtd-Pipeline"      // output: the pipeline that produced it
	HeaderModelVersion = "Smtd-Model-Version" // output: batches the model had learned
	HeaderSourceSubj   = "Smtd-Source-Subject"
	HeaderSourceSeq    = "Smtd-Source-Seq" // output: the input's stream sequence
	HeaderError        = "Smtd-Error"      // embed reply: why the request was refused
	// HeaderDaemon names, in cluster mode, the daemon whose model made an
	// output or answered an embed request (with the model version in
	// HeaderModelVersion).
	HeaderDaemon = "Smtd-Daemon"
)

// maxStreamBytes bounds the name of a video stream (HeaderStream).
const maxStreamBytes = 256

// Reasons an input message is rejected, as reported in error events.
const (
	ReasonTooLarge      = "too_large"
	ReasonMissingHeader = "missing_header"
	ReasonBadHeader     = "bad_header"
	ReasonBadShape      = "bad_shape"
	ReasonBadDtype      = "bad_dtype"
	ReasonTruncated     = "truncated"
	ReasonNotFinite     = "not_finite"
	ReasonBadPNG        = "bad_png"
	ReasonBadUTF8       = "bad_utf8"
	ReasonTooManyTokens = "too_many_tokens"
	ReasonOutOfRange    = "out_of_range"
	ReasonTokenTooLong  = "token_too_long"
)

// InputError says why an input message was rejected.
type InputError struct {
	Reason string // one of the Reason constants
	Detail string
}

func (e *InputError) Error() string { return "smtd: " + e.Reason + ": " + e.Detail }

// maxEcho is the most bytes of an input that an error reply or error
// event quotes: enough to recognise it, while a message of megabytes
// does not come back in a header or an event.
const maxEcho = 64

// echo quotes the input s for an error message: its first maxEcho bytes
// (cut at a rune boundary), then "…" and its length when it is longer.
func echo(s string) string {
	if len(s) <= maxEcho {
		return strconv.Quote(s)
	}
	cut := maxEcho
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return strconv.Quote(s[:cut]) + "… (" + strconv.Itoa(len(s)) + " bytes)"
}

func reject(reason, format string, args ...any) *InputError {
	return &InputError{Reason: reason, Detail: fmt.Sprintf(format, args...)}
}

// sample is one decoded, validated input message.
type sample struct {
	pixels []float64 // images and frames: rows*cols*channels, row-major, channels interleaved
	tokens []string  // text
	stream string    // video
	frame  uint64    // video
	label  string
	seq    uint64 // stream sequence (or arrival count on core NATS)
}

// header returns the value of key, matched without regard to case.
func header(h nats.Header, key string) string {
	if v := h.Get(key); v != "" {
		return v
	}
	for k, v := range h {
		if strings.EqualFold(k, key) && len(v) > 0 {
			return v[0]
		}
	}
	return ""
}

var pngSignature = []byte("\x89PNG\r\n\x1a\n")

// decode validates one input message of pipeline p. It never panics on any
// input; every failure is an *InputError.
func decode(p *config.Pipeline, h nats.Header, data []byte) (sample, error) {
	var s sample
	if len(data) > p.Input.MaxBytes {
		return s, reject(ReasonTooLarge, "%d bytes, limit %d", len(data), p.Input.MaxBytes)
	}
	s.label = header(h, HeaderLabel)
	if len(s.label) > 256 {
		return s, reject(ReasonBadHeader, "%s longer than 256 bytes", HeaderLabel)
	}
	switch p.Modality {
	case config.Text:
		if !utf8.Valid(data) {
			return s, reject(ReasonBadUTF8, "payload is not valid UTF-8")
		}
		s.tokens = dataset.Tokenize(string(data))
		if len(s.tokens) > p.Text.MaxTokens {
			return s, reject(ReasonTooManyTokens, "%d tokens, limit %d", len(s.tokens), p.Text.MaxTokens)
		}
		// A token is a vocabulary word: one of megabytes would be
		// learned as one.
		for i, t := range s.tokens {
			if len(t) > p.Text.MaxTokenBytes {
				return s, reject(ReasonTokenTooLong, "token %d of %d bytes, limit %d: %s", i, len(t), p.Text.MaxTokenBytes, echo(t))
			}
		}
		return s, nil
	case config.Video:
		s.stream = header(h, HeaderStream)
		if s.stream == "" {
			return s, reject(ReasonMissingHeader, "video frame without %s", HeaderStream)
		}
		if len(s.stream) > maxStreamBytes {
			return s, reject(ReasonBadHeader, "%s longer than %d bytes", HeaderStream, maxStreamBytes)
		}
		f := header(h, HeaderFrame)
		if f == "" {
			return s, reject(ReasonMissingHeader, "video frame without %s", HeaderFrame)
		}
		n, err := strconv.ParseUint(f, 10, 64)
		if err != nil {
			return s, reject(ReasonBadHeader, "%s %s is not a frame index", HeaderFrame, echo(f))
		}
		s.frame = n
	}
	px, err := decodeImage(p.Image, p.Input.MaxValue, h, data)
	s.pixels = px
	return s, err
}

// decodeImage returns the pixels of a raw or PNG image of the given shape,
// scaled to [0, 1] for uint8 and PNG data; float32 values are taken as they
// are and must lie in [−maxValue, maxValue].
func decodeImage(shape config.ImageShape, maxValue float64, h nats.Header, data []byte) ([]float64, error) {
	enc := header(h, HeaderEncoding)
	if enc == "" && bytes.HasPrefix(data, pngSignature) {
		enc = "png"
	}
	switch enc {
	case "png":
		return decodePNG(shape, data)
	case "raw", "":
	default:
		return nil, reject(ReasonBadHeader, "%s %s: want raw or png", HeaderEncoding, echo(enc))
	}
	sh := header(h, HeaderShape)
	dt := header(h, HeaderDtype)
	if sh == "" || dt == "" {
		return nil, reject(ReasonMissingHeader, "raw image needs %s and %s", HeaderShape, HeaderDtype)
	}
	rows, cols, ch, err := parseShape(sh)
	if err != nil {
		return nil, err
	}
	if rows != shape.Height || cols != shape.Width || ch != shape.Channels {
		return nil, reject(ReasonBadShape, "shape %dx%dx%d, pipeline expects %dx%dx%d", rows, cols, ch, shape.Height, shape.Width, shape.Channels)
	}
	n := rows * cols * ch
	var size int
	switch dt {
	case "uint8":
		size = 1
	case "float32":
		size = 4
	default:
		return nil, reject(ReasonBadDtype, "dtype %s: want uint8 or float32", echo(dt))
	}
	switch {
	case len(data) < n*size:
		return nil, reject(ReasonTruncated, "%d bytes, shape and dtype need %d", len(data), n*size)
	case len(data) > n*size:
		return nil, reject(ReasonBadShape, "%d bytes, shape and dtype need %d", len(data), n*size)
	}
	px := make([]float64, n)
	if size == 1 {
		for i, b := range data {
			px[i] = float64(b) / 255
		}
		return px, nil
	}
	for i := range px {
		v := float64(math.Float32frombits(binary.LittleEndian.Uint32(data[4*i:])))
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return nil, reject(ReasonNotFinite, "pixel %d is %v", i, v)
		}
		if math.Abs(v) > maxValue {
			return nil, reject(ReasonOutOfRange, "pixel %d is %g, outside [-%g, %g] (input.max_value)", i, v, maxValue, maxValue)
		}
		px[i] = v
	}
	return px, nil
}

// parseShape reads "rows,cols" or "rows,cols,channels".
func parseShape(s string) (rows, cols, ch int, err error) {
	parts := strings.Split(s, ",")
	if len(parts) < 2 || len(parts) > 3 {
		return 0, 0, 0, reject(ReasonBadHeader, "%s %s: want rows,cols[,channels]", HeaderShape, echo(s))
	}
	dims := []int{0, 0, 1}
	for i, p := range parts {
		n, err := strconv.Atoi(strings.TrimSpace(p))
		if err != nil || n < 1 || n > 1<<16 {
			return 0, 0, 0, reject(ReasonBadHeader, "%s %s: want rows,cols[,channels]", HeaderShape, echo(s))
		}
		dims[i] = n
	}
	return dims[0], dims[1], dims[2], nil
}

func decodePNG(shape config.ImageShape, data []byte) ([]float64, error) {
	// The size is checked before decoding so that a small file cannot
	// claim a huge image.
	cfg, err := png.DecodeConfig(bytes.NewReader(data))
	if err != nil {
		return nil, reject(ReasonBadPNG, "%v", err)
	}
	if cfg.Width != shape.Width || cfg.Height != shape.Height {
		return nil, reject(ReasonBadShape, "PNG is %dx%d, pipeline expects %dx%d", cfg.Height, cfg.Width, shape.Height, shape.Width)
	}
	img, err := png.Decode(bytes.NewReader(data))
	if err != nil {
		return nil, reject(ReasonBadPNG, "%v", err)
	}
	px := make([]float64, shape.Width*shape.Height*shape.Channels)
	b := img.Bounds()
	i := 0
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			if shape.Channels == 1 {
				px[i] = float64(color.Gray16Model.Convert(img.At(x, y)).(color.Gray16).Y) / 0xffff
				i++
				continue
			}
			r, g, bl, _ := img.At(x, y).RGBA()
			px[i], px[i+1], px[i+2] = float64(r)/0xffff, float64(g)/0xffff, float64(bl)/0xffff
			i += 3
		}
	}
	return px, nil
}

var _ image.Image = (*image.Gray)(nil)

// output is one result to publish.
type output struct {
	vector  []float32
	tokens  []string // text pipelines
	version uint64
	source  sample
	subject string // the input subject
}

// outputJSON is the JSON encoding of an output.
type outputJSON struct {
	Pipeline      string    `json:"pipeline"`
	ModelVersion  uint64    `json:"model_version"`
	SourceSubject string    `json:"source_subject,omitempty"`
	SourceSeq     uint64    `json:"source_seq"`
	Label         string    `json:"label,omitempty"`
	Stream        string    `json:"stream,omitempty"`
	Frame         *uint64   `json:"frame,omitempty"`
	Tokens        []string  `json:"tokens,omitempty"`
	Vector        []float32 `json:"vector"`
}

// encodeOutput builds the message of o on subject for pipeline p. A
// float32 payload is written in the memory of buf when it has room (nil:
// new memory).
func encodeOutput(p *config.Pipeline, subject string, o *output, buf []byte) *nats.Msg {
	m := nats.NewMsg(subject)
	h := m.Header
	h.Set(HeaderPipeline, p.Name)
	h.Set(HeaderModelVersion, strconv.FormatUint(o.version, 10))
	if o.subject != "" {
		h.Set(HeaderSourceSubj, o.subject)
		h.Set(HeaderSourceSeq, strconv.FormatUint(o.source.seq, 10))
	}
	if o.source.label != "" {
		h.Set(HeaderLabel, o.source.label)
	}
	if p.Modality == config.Video {
		h.Set(HeaderStream, o.source.stream)
		h.Set(HeaderFrame, strconv.FormatUint(o.source.frame, 10))
	}
	if p.Output.Encoding == config.JSON {
		j := outputJSON{
			Pipeline: p.Name, ModelVersion: o.version, SourceSubject: o.subject, SourceSeq: o.source.seq,
			Label: o.source.label, Stream: o.source.stream, Tokens: o.tokens, Vector: o.vector,
		}
		if p.Modality == config.Video {
			j.Frame = &o.source.frame
		}
		m.Data, _ = json.Marshal(j) // cannot fail: plain fields, finite values
		h.Set("Content-Type", "application/json")
		return m
	}
	h.Set(HeaderShape, strconv.Itoa(len(o.vector)))
	h.Set(HeaderDtype, "float32")
	m.Data = slices.Grow(buf[:0], 4*len(o.vector))[:4*len(o.vector)]
	for i, v := range o.vector {
		binary.LittleEndian.PutUint32(m.Data[4*i:], math.Float32bits(v))
	}
	return m
}

// DecodeOutput reads an output message of either encoding (or an embed
// reply): its vector and its Smtd-Label. It is the inverse of what the
// daemon publishes, for clients and evaluation tools.
func DecodeOutput(h nats.Header, data []byte) (vector []float32, label string, err error) {
	label = header(h, HeaderLabel)
	if header(h, "Content-Type") == "application/json" {
		var j outputJSON
		if err := json.Unmarshal(data, &j); err != nil {
			return nil, "", fmt.Errorf("smtd: JSON output: %w", err)
		}
		return j.Vector, j.Label, nil
	}
	if dt := header(h, HeaderDtype); dt != "float32" {
		return nil, "", fmt.Errorf("smtd: output dtype %s, want float32", echo(dt))
	}
	n, err := strconv.Atoi(header(h, HeaderShape))
	if err != nil || n < 0 || len(data) != 4*n {
		return nil, "", fmt.Errorf("smtd: output of %d bytes does not have shape %s", len(data), echo(header(h, HeaderShape)))
	}
	vector = make([]float32, n)
	for i := range vector {
		vector[i] = math.Float32frombits(binary.LittleEndian.Uint32(data[4*i:]))
	}
	return vector, label, nil
}

// DecodeMatrix reads a message holding a float32 matrix, Smtd-Shape
// "rows,cols" and little-endian values row by row, such as the atoms an
// admm pipeline publishes on <output subject>.atoms.
func DecodeMatrix(h nats.Header, data []byte) (*mat.Dense, error) {
	if dt := header(h, HeaderDtype); dt != "float32" {
		return nil, fmt.Errorf("smtd: matrix dtype %s, want float32", echo(dt))
	}
	rows, cols, ch, err := parseShape(header(h, HeaderShape))
	if err != nil || ch != 1 || len(data) != 4*rows*cols {
		return nil, fmt.Errorf("smtd: matrix of %d bytes does not have shape %s", len(data), echo(header(h, HeaderShape)))
	}
	m := mat.NewDense(rows, cols, nil)
	raw := m.RawMatrix().Data
	for i := range raw {
		raw[i] = float64(math.Float32frombits(binary.LittleEndian.Uint32(data[4*i:])))
	}
	return m, nil
}

// DecodePoint returns the values of one recorded or received message as a
// vector, and its label: an input image as the daemon reads it, of any
// shape (PNG, gray or colour; or raw with Smtd-Shape and Smtd-Dtype;
// uint8 and PNG scaled to [0, 1], channels interleaved), or an output
// vector (DecodeOutput). It is how tools outside a pipeline (smtd lem)
// read streams.
func DecodePoint(h nats.Header, data []byte) ([]float64, string, error) {
	label := header(h, HeaderLabel)
	enc := header(h, HeaderEncoding)
	if enc == "" && bytes.HasPrefix(data, pngSignature) {
		enc = "png"
	}
	switch {
	case enc == "png":
		cfg, err := png.DecodeConfig(bytes.NewReader(data))
		if err != nil {
			return nil, "", reject(ReasonBadPNG, "%v", err)
		}
		shape := config.ImageShape{Width: cfg.Width, Height: cfg.Height, Channels: 3}
		if cfg.ColorModel == color.GrayModel || cfg.ColorModel == color.Gray16Model {
			shape.Channels = 1
		}
		px, err := decodePNG(shape, data)
		return px, label, err
	case enc == "raw" || (enc == "" && strings.Contains(header(h, HeaderShape), ",")):
		rows, cols, ch, err := parseShape(header(h, HeaderShape))
		if err != nil {
			return nil, "", err
		}
		px, err := decodeImage(config.ImageShape{Width: cols, Height: rows, Channels: ch}, math.MaxFloat32, h, data)
		return px, label, err
	case enc != "":
		return nil, "", reject(ReasonBadHeader, "%s %s: want raw or png", HeaderEncoding, echo(enc))
	}
	v, label, err := DecodeOutput(h, data)
	if err != nil {
		return nil, "", fmt.Errorf("%w: %v", ErrNotPoint, err)
	}
	px := make([]float64, len(v))
	for i, f := range v {
		px[i] = float64(f)
	}
	return px, label, nil
}

// ErrNotPoint is returned by DecodePoint for a message that is neither an
// image nor an output vector (text, say).
var ErrNotPoint = errors.New("smtd: neither an image nor an output vector")
