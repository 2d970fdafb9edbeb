package main

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"

	"gonum.org/v1/gonum/mat"

	"github.com/smtd/smtd/daemon"
	"github.com/smtd/smtd/record"
	"github.com/smtd/smtd/spectral"
)

// lemCmd embeds the vectors of a recorded stream with Laplacian
// eigenmaps, plain or non-redundant (Blau and Michaeli, Alg. 1), writes
// the coordinates and prints the redundancy of each coordinate.
func lemCmd(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("lem", "smtd lem [flags] FILE\n\n"+
		"Embeds the messages of a recording (smtd record): images (raw uint8 or\n"+
		"float32, or PNG, as the daemon reads them) or output vectors (float32 or\n"+
		"JSON, as the daemon publishes them), one point per message. Prints\n"+
		"\"redundancy_cI: e\" for each coordinate I: the normalised error of\n"+
		"regressing it on the coordinates before it (near 0: redundant; near 1:\n"+
		"new information)", stderr)
	dim := fs.Int("dim", 2, "number of coordinates")
	nonRedundant := fs.Bool("nonredundant", false, "non-redundant coordinates (each unpredictable from the previous ones)")
	k := fs.Int("k", 10, "neighbours of the LEM graph")
	localScale := fs.Int("local-scale", 0, "affinity width of each point: the distance to this neighbour (0: 7; -1: one global width)")
	sigma := fs.Float64("sigma", 0, "global affinity width σ (0: local widths, see -local-scale)")
	alpha := fs.Float64("alpha", 0, "non-redundant smoother bandwidth factor α (0: 0.3)")
	nrNeighbours := fs.Int("nr-neighbours", 0, "neighbours of each row of the non-redundant smoother (0: min(N, 10000))")
	truncate := fs.Float64("truncate", 0, "smoother singular values kept, relative to the largest (0: 0.03)")
	maxPoints := fs.Int("max", 0, "embed at most the first N messages (0: all)")
	out := fs.String("out", "", "write the coordinates to `file` (\"-\": standard output, the redundancy then goes to standard error)")
	format := fs.String("format", "csv", "coordinates format: csv (a header, then label and coordinates per point) or float32 (little-endian, row-major N×dim)")
	seed := fs.Uint64("seed", 1, "seed of the solvers")
	if err := parse(fs, args); err != nil {
		return err
	}
	switch {
	case fs.NArg() != 1:
		return badUsage(fs, "give one recording, got %d arguments", fs.NArg())
	case *dim < 1:
		return badUsage(fs, "--dim must be >= 1")
	case *format != "csv" && *format != "float32":
		return badUsage(fs, "--format must be csv or float32, got %q", *format)
	case *maxPoints < 0:
		return badUsage(fs, "--max-points must be >= 0")
	}
	ls := spectral.LEMSettings{Neighbours: *k, Sigma: *sigma, LocalScale: *localScale}
	nr := spectral.NonRedundantSettings{Alpha: *alpha, Neighbours: *nrNeighbours, Truncate: *truncate}
	if err := ls.Validate(); err != nil {
		return fmt.Errorf("smtd lem: %w", err)
	}
	if err := nr.Validate(); err != nil {
		return fmt.Errorf("smtd lem: %w", err)
	}
	path := fs.Arg(0)
	x, labels, err := readPoints(path, *maxPoints)
	if err != nil {
		return err
	}
	n, _ := x.Dims()
	if *dim > n-2 {
		return fmt.Errorf("smtd lem: %d coordinates of %d points: at most N-2", *dim, n)
	}
	var y *mat.Dense
	if *nonRedundant {
		y, _, err = spectral.NonRedundantLEM(x, *dim, ls, nr, rand.NewPCG(*seed, 2))
	} else {
		y, err = spectral.LEM(x, *dim, ls, rand.NewPCG(*seed, 1))
	}
	if err != nil {
		return fmt.Errorf("smtd lem: %s: %w", path, err)
	}

	report := stdout
	if *out != "" {
		w := stdout
		if *out == "-" {
			report = stderr
		} else {
			f, err := os.Create(*out)
			if err != nil {
				return fmt.Errorf("smtd lem: %w", err)
			}
			defer f.Close()
			w = f
		}
		bw := bufio.NewWriter(w)
		if *format == "csv" {
			writeCSV(bw, y, labels)
		} else {
			writeFloat32(bw, y)
		}
		if err := bw.Flush(); err != nil {
			return fmt.Errorf("smtd lem: %s: %w", *out, err)
		}
		if f, ok := w.(*os.File); ok && *out != "-" {
			if err := f.Close(); err != nil {
				return fmt.Errorf("smtd lem: %w", err)
			}
		}
	}
	fmt.Fprintf(report, "points: %d\n", n)
	fmt.Fprintf(report, "coordinates: %d\n", *dim)
	for i, r := range spectral.Redundancy(y, spectral.RedundancySettings{}) {
		fmt.Fprintf(report, "redundancy_c%d: %.4f\n", i+1, r)
	}
	return nil
}

// writeCSV writes a header and one line per point: its label (empty when
// it has none) and its coordinates.
func writeCSV(w *bufio.Writer, y *mat.Dense, labels []string) {
	n, d := y.Dims()
	w.WriteString("label")
	for j := 0; j < d; j++ {
		fmt.Fprintf(w, ",c%d", j+1)
	}
	w.WriteByte('\n')
	for a := 0; a < n; a++ {
		w.WriteString(csvField(labels[a]))
		for _, v := range y.RawRowView(a) {
			w.WriteByte(',')
			w.WriteString(strconv.FormatFloat(v, 'g', -1, 64))
		}
		w.WriteByte('\n')
	}
}

// csvField quotes s if it holds a comma, a quote or a line break.
func csvField(s string) string {
	if !strings.ContainsAny(s, ",\"\r\n") {
		return s
	}
	return `"` + strings.ReplaceAll(s, `"`, `""`) + `"`
}

// writeFloat32 writes y row-major as little-endian float32s.
func writeFloat32(w *bufio.Writer, y *mat.Dense) {
	n, _ := y.Dims()
	var b [4]byte
	for a := 0; a < n; a++ {
		for _, v := range y.RawRowView(a) {
			binary.LittleEndian.PutUint32(b[:], math.Float32bits(float32(v)))
			w.Write(b[:])
		}
	}
}

// readPoints reads the first max messages (0: all) of a recording as the
// rows of a matrix, with their Smtd-Label headers.
func readPoints(path string, max int) (*mat.Dense, []string, error) {
	msgs, err := record.ReadFile(path)
	if err != nil {
		return nil, nil, err
	}
	if max > 0 && len(msgs) > max {
		msgs = msgs[:max]
	}
	if len(msgs) < 4 {
		return nil, nil, fmt.Errorf("%s: %d messages, at least 4 needed", path, len(msgs))
	}
	var x *mat.Dense
	labels := make([]string, len(msgs))
	for i, m := range msgs {
		v, label, err := daemon.DecodePoint(m.Header, m.Data)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: message %d: %w", path, i, err)
		}
		if x == nil {
			x = mat.NewDense(len(msgs), len(v), nil)
		}
		if len(v) != x.RawMatrix().Cols {
			return nil, nil, fmt.Errorf("%s: message %d has %d values, the first had %d", path, i, len(v), x.RawMatrix().Cols)
		}
		x.SetRow(i, v)
		labels[i] = label
	}
	return x, labels, nil
}
