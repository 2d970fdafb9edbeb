package client

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go"
)

// Headers of the daemon's outputs (README, "Wire formats").
const (
	HeaderShape        = "Smtd-Shape"
	HeaderDtype        = "Smtd-Dtype"
	HeaderPipeline     = "Smtd-Pipeline"
	HeaderModelVersion = "Smtd-Model-Version"
	HeaderSourceSubj   = "Smtd-Source-Subject"
	HeaderSourceSeq    = "Smtd-Source-Seq"
	HeaderLabel        = "Smtd-Label"
	HeaderStream       = "Smtd-Stream"
	HeaderFrame        = "Smtd-Frame"
	HeaderDaemon       = "Smtd-Daemon"
)

// Embedding is one output of a pipeline, or the reply to an embed query.
type Embedding struct {
	// Vector is the embedding (README, "Wire formats": an image's pooled
	// SMT embedding, a KSM response, an ADMM code, a text message's mean
	// word embedding).
	Vector []float32
	// Version is the model version that produced it: the minibatches the
	// model had learned.
	Version  uint64
	Pipeline string
	// Label, Stream and Frame are copied from the input (Stream is empty
	// and Frame 0 for images and text).
	Label  string
	Stream string
	Frame  uint64
	// Seq is the input's JetStream sequence (0 for an embed reply);
	// Subject its input subject.
	Seq     uint64
	Subject string
	// Daemon names the daemon whose model answered, in cluster mode.
	Daemon string
}

// Decode reads an output message of either encoding, float32 (the
// default: little-endian values, Smtd-Shape n) or json, or an embed
// reply. It is what Subscribe and smtd tail decode outputs with.
func Decode(m *nats.Msg) (Embedding, error) {
	h := m.Header
	e := Embedding{
		Pipeline: header(h, HeaderPipeline),
		Label:    header(h, HeaderLabel),
		Stream:   header(h, HeaderStream),
		Subject:  header(h, HeaderSourceSubj),
		Daemon:   header(h, HeaderDaemon),
	}
	for _, f := range []struct {
		key string
		dst *uint64
	}{{HeaderModelVersion, &e.Version}, {HeaderSourceSeq, &e.Seq}, {HeaderFrame, &e.Frame}} {
		if v := header(h, f.key); v != "" {
			n, err := strconv.ParseUint(v, 10, 64)
			if err != nil {
				return e, fmt.Errorf("smtd client: output header %s %q is not a number", f.key, v)
			}
			*f.dst = n
		}
	}
	if header(h, "Content-Type") == "application/json" {
		var j struct {
			Vector []float32 `json:"vector"`
		}
		if err := json.Unmarshal(m.Data, &j); err != nil {
			return e, fmt.Errorf("smtd client: JSON output: %w", err)
		}
		e.Vector = j.Vector
		return e, nil
	}
	if dt := header(h, HeaderDtype); dt != "float32" {
		return e, fmt.Errorf("smtd client: output dtype %q, want float32", dt)
	}
	n, err := strconv.Atoi(header(h, HeaderShape))
	if err != nil || n < 0 || len(m.Data) != 4*n {
		return e, fmt.Errorf("smtd client: output of %d bytes does not have shape %q", len(m.Data), header(h, HeaderShape))
	}
	e.Vector = make([]float32, n)
	for i := range e.Vector {
		e.Vector[i] = math.Float32frombits(binary.LittleEndian.Uint32(m.Data[4*i:]))
	}
	return e, nil
}

// header returns the value of key, matched without regard to case as
// the daemon matches it.
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
