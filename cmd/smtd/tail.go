package main

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/smtd/smtd/client"
)

const tailSynopsis = "smtd tail [flags] PIPELINE"

func tailCmd(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("tail", tailSynopsis, stderr)
	conn := addClientFlags(fs)
	prefix := fs.String("prefix", "smtd", "the daemon's service.prefix")
	count := fs.Int("count", 0, "stop after `N` outputs (0: until Ctrl-C)")
	npyDir := fs.String("npy", "", "write the embeddings as .npy files (float32, shape (n, dim)) into `dir` instead of JSON lines on stdout, with .seqs.npy (int64) and .labels.txt beside each")
	every := fs.Int("every", 1000, "with --npy, start a new file every `N` outputs")
	rest, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	switch {
	case len(rest) != 1:
		return badUsage(fs, "name one pipeline, got %d arguments", len(rest))
	case *count < 0:
		return badUsage(fs, "--count must be >= 0")
	case *every < 1:
		return badUsage(fs, "--every must be >= 1")
	}
	pipeline := rest[0]
	nc, err := conn.connect("smtd tail")
	if err != nil {
		return err
	}
	defer nc.Close()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	var sink interface {
		add(client.Embedding) error
		close() error
	}
	if *npyDir != "" {
		if err := os.MkdirAll(*npyDir, 0o755); err != nil {
			return err
		}
		sink = &npyChunks{dir: *npyDir, pipeline: pipeline, every: *every}
	} else {
		sink = &jsonLines{w: bufio.NewWriter(stdout)}
	}
	outs, err := client.New(nc, client.WithPrefix(*prefix)).Outputs(ctx, pipeline)
	if err != nil {
		return fmt.Errorf("smtd tail: %w", err)
	}
	defer outs.Close()
	fmt.Fprintf(stderr, "smtd tail: reading %s\n", outs.Subject)
	var sinkErr error
	for n := 0; *count == 0 || n < *count; n++ {
		e, err := outs.Next(ctx)
		if err != nil {
			if ctx.Err() == nil {
				sinkErr = fmt.Errorf("smtd tail: %w", err)
			}
			break
		}
		if sinkErr = sink.add(e); sinkErr != nil {
			break
		}
	}
	if err := sink.close(); sinkErr == nil {
		sinkErr = err
	}
	return sinkErr
}

// tailLine is one JSON line of smtd tail.
type tailLine struct {
	Pipeline  string    `json:"pipeline"`
	Seq       uint64    `json:"seq"`
	Label     string    `json:"label,omitempty"`
	Version   uint64    `json:"version"`
	Stream    string    `json:"stream,omitempty"`
	Frame     *uint64   `json:"frame,omitempty"`
	Embedding []float32 `json:"embedding"`
}

type jsonLines struct{ w *bufio.Writer }

func (j *jsonLines) add(e client.Embedding) error {
	l := tailLine{Pipeline: e.Pipeline, Seq: e.Seq, Label: e.Label, Version: e.Version, Stream: e.Stream, Embedding: e.Vector}
	if e.Stream != "" {
		l.Frame = &e.Frame
	}
	b, err := json.Marshal(l)
	if err != nil {
		return err
	}
	j.w.Write(b)
	j.w.WriteByte('\n')
	// One line at a time, so that a reader of a pipe sees each output as
	// it comes.
	return j.w.Flush()
}

func (j *jsonLines) close() error { return j.w.Flush() }

// npyChunks writes the outputs in files of every outputs each:
// <pipeline>-NNNNN.npy (float32, shape (n, dim)), <pipeline>-NNNNN.seqs.npy
// (int64, the input sequences) and <pipeline>-NNNNN.labels.txt (one label
// a line; with .frames.txt, "stream frame" a line, for video). An output of
// another length than the chunk's first starts a new chunk.
type npyChunks struct {
	dir, pipeline string
	every         int
	chunk         int
	buf           []client.Embedding
}

func (c *npyChunks) add(e client.Embedding) error {
	if len(c.buf) > 0 && len(e.Vector) != len(c.buf[0].Vector) {
		if err := c.flush(); err != nil {
			return err
		}
	}
	c.buf = append(c.buf, e)
	if len(c.buf) >= c.every {
		return c.flush()
	}
	return nil
}

func (c *npyChunks) close() error { return c.flush() }

func (c *npyChunks) flush() error {
	if len(c.buf) == 0 {
		return nil
	}
	base := filepath.Join(c.dir, fmt.Sprintf("%s-%05d", c.pipeline, c.chunk))
	c.chunk++
	n, dim := len(c.buf), len(c.buf[0].Vector)
	vectors := make([]byte, 0, 4*n*dim)
	seqs := make([]byte, 0, 8*n)
	var labels, frames strings.Builder
	video := false
	for _, e := range c.buf {
		for _, v := range e.Vector {
			vectors = binary.LittleEndian.AppendUint32(vectors, math.Float32bits(v))
		}
		seqs = binary.LittleEndian.AppendUint64(seqs, e.Seq)
		labels.WriteString(strings.ReplaceAll(e.Label, "\n", " ") + "\n")
		fmt.Fprintf(&frames, "%s %d\n", strings.ReplaceAll(e.Stream, "\n", " "), e.Frame)
		video = video || e.Stream != ""
	}
	c.buf = c.buf[:0]
	if err := writeNPY(base+".npy", "<f4", []int{n, dim}, vectors); err != nil {
		return err
	}
	if err := writeNPY(base+".seqs.npy", "<i8", []int{n}, seqs); err != nil {
		return err
	}
	if err := os.WriteFile(base+".labels.txt", []byte(labels.String()), 0o644); err != nil {
		return err
	}
	if video {
		return os.WriteFile(base+".frames.txt", []byte(frames.String()), 0o644)
	}
	return nil
}

// writeNPY writes data, little-endian values of dtype descr, as a NumPy
// .npy file of format version 1.0: the magic "\x93NUMPY", version 1 0, the
// header length (uint16, little-endian), and a header, a Python dict
// literal padded with spaces and ended by "\n" so that the data starts at
// a multiple of 64 bytes.
func writeNPY(path, descr string, shape []int, data []byte) error {
	dims := make([]string, len(shape))
	for i, d := range shape {
		dims[i] = fmt.Sprint(d)
	}
	tuple := strings.Join(dims, ", ")
	if len(shape) == 1 {
		tuple += ","
	}
	header := fmt.Sprintf("{'descr': '%s', 'fortran_order': False, 'shape': (%s), }", descr, tuple)
	const preamble = 10 // magic, version, header length
	pad := 64 - (preamble+len(header)+1)%64
	if pad == 64 {
		pad = 0
	}
	header += strings.Repeat(" ", pad) + "\n"
	var b []byte
	b = append(b, "\x93NUMPY\x01\x00"...)
	b = binary.LittleEndian.AppendUint16(b, uint16(len(header)))
	b = append(b, header...)
	b = append(b, data...)
	return os.WriteFile(path, b, 0o644)
}
