package main

import (
	"bytes"
	"encoding/binary"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/smtd/smtd/record"
)

// writeOutputs records n labelled outputs of two well separated classes,
// as the daemon publishes them.
func writeOutputs(t *testing.T, path string, n int) {
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w, err := record.NewWriter(f)
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		class := i % 2
		v := []float32{float32(1 - class), float32(class), float32(i%7) * 0.01}
		data := make([]byte, 4*len(v))
		for j, x := range v {
			binary.LittleEndian.PutUint32(data[4*j:], math.Float32bits(x))
		}
		h := nats.Header{}
		h.Set("Smtd-Shape", "3")
		h.Set("Smtd-Dtype", "float32")
		h.Set("Smtd-Label", strconv.Itoa(class))
		if err := w.Write(&record.Message{Subject: "smtd.out.x", Header: h, Data: data}); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
}

func TestKNNCommand(t *testing.T) {
	dir := t.TempDir()
	train, test := filepath.Join(dir, "train.smtdrec"), filepath.Join(dir, "test.smtdrec")
	writeOutputs(t, train, 60)
	writeOutputs(t, test, 20)
	var out bytes.Buffer
	if code := run([]string{"knn", "--train", train, "--test", test}, &out, &out); code != 0 {
		t.Fatalf("exit %d: %s", code, out.String())
	}
	if !strings.Contains(out.String(), "top1: 100.00") {
		t.Errorf("output:\n%s", out.String())
	}
	// The second coordinate is 1 minus the first: redundant; the third
	// (i mod 7) is not a function of the first two.
	out.Reset()
	if code := run([]string{"knn", "--train", train, "--test", test, "--redundancy", "3"}, &out, &out); code != 0 {
		t.Fatalf("exit %d: %s", code, out.String())
	}
	var e [3]float64
	for i := range e {
		_, v, _ := strings.Cut(out.String(), "redundancy_c"+strconv.Itoa(i+1)+": ")
		v, _, _ = strings.Cut(v, "\n")
		e[i], _ = strconv.ParseFloat(v, 64)
	}
	if e[0] != 1 || e[1] > 0.1 || e[2] < 0.8 {
		t.Errorf("redundancy %v, want 1, < 0.1, > 0.8:\n%s", e, out.String())
	}
	out.Reset()
	if code := run([]string{"knn", "--train", train}, &out, &out); code != 2 {
		t.Errorf("missing --test: exit %d, want 2", code)
	}
	// Both votes classify the separable outputs; bad settings are errors,
	// not panics.
	out.Reset()
	if code := run([]string{"knn", "--train", train, "--test", test, "--vote", "cosine"}, &out, &out); code != 0 || !strings.Contains(out.String(), "top1: 100.00") {
		t.Errorf("--vote cosine: exit %d:\n%s", code, out.String())
	}
	for _, bad := range [][]string{{"--vote", "majority"}, {"--k", "-1"}, {"--t", "-2"}} {
		out.Reset()
		if code := run(append([]string{"knn", "--train", train, "--test", test}, bad...), &out, &out); code != 1 {
			t.Errorf("%v: exit %d, want 1:\n%s", bad, code, out.String())
		}
	}
}
