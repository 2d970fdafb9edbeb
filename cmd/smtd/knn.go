package main

import (
	"fmt"
	"io"
	"strconv"

	"gonum.org/v1/gonum/mat"

	"github.com/smtd/smtd/daemon"
	"github.com/smtd/smtd/online"
	"github.com/smtd/smtd/record"
	"github.com/smtd/smtd/spectral"
)

// knnCmd scores embeddings: recordings of output messages (smtd record on
// an output subject) whose Smtd-Label headers carry the classes.
func knnCmd(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("knn", "smtd knn [flags] --train FILE --test FILE", stderr)
	trainPath := fs.String("train", "", "recording of labelled outputs to classify with (required)")
	testPath := fs.String("test", "", "recording of labelled outputs to classify (required)")
	k := fs.Int("k", 30, "neighbours")
	temp := fs.Float64("t", 0.03, "temperature T")
	vote := fs.String("vote", "exp", "how the neighbours vote: exp (weights exp(cos/T)) or cosine (weights cos, smt-minimalistic App. J as written; T then does not matter)")
	redundancy := fs.Int("redundancy", 0, "also print the redundancy of the first N coordinates of the train vectors (non-redundant-spectral-dimensionality-reduction Fig. 3: the normalised error of regressing each on the ones before it; near 0 redundant, near 1 new)")
	if err := parse(fs, args); err != nil {
		return err
	}
	switch {
	case *trainPath == "" || *testPath == "":
		return badUsage(fs, "both --train and --test are needed")
	case fs.NArg() > 0:
		return badUsage(fs, "unexpected arguments %q", fs.Args())
	}
	s := online.KNNSettings{K: *k, Temperature: *temp}
	if err := s.Vote.UnmarshalText([]byte(*vote)); err != nil {
		return fmt.Errorf("smtd knn: %w", err)
	}
	if err := s.Validate(); err != nil {
		return fmt.Errorf("smtd knn: %w", err)
	}
	trainX, trainY, err := readLabelled(*trainPath)
	if err != nil {
		return err
	}
	testX, testY, err := readLabelled(*testPath)
	if err != nil {
		return err
	}
	if _, c := testX.Dims(); c != trainX.RawMatrix().Cols {
		return fmt.Errorf("smtd knn: train vectors have %d values, test vectors %d", trainX.RawMatrix().Cols, c)
	}
	pred := make([]int, len(testY))
	if err := online.SoftKNN(pred, trainX, trainY, testX, s); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "train: %d\ntest: %d\ntop1: %.2f\n", len(trainY), len(testY), 100*online.Top1(pred, testY))
	if n := min(*redundancy, trainX.RawMatrix().Cols); n > 0 && len(trainY) >= 2 {
		for i, e := range spectral.Redundancy(trainX.Slice(0, len(trainY), 0, n), spectral.RedundancySettings{}) {
			fmt.Fprintf(stdout, "redundancy_c%d: %.4f\n", i+1, e)
		}
	}
	return nil
}

// readLabelled reads the vectors and integer labels of a recording of
// output messages.
func readLabelled(path string) (*mat.Dense, []int, error) {
	msgs, err := record.ReadFile(path)
	if err != nil {
		return nil, nil, err
	}
	if len(msgs) == 0 {
		return nil, nil, fmt.Errorf("%s: no messages", path)
	}
	var x *mat.Dense
	y := make([]int, len(msgs))
	for i, m := range msgs {
		v, label, err := daemon.DecodeOutput(m.Header, m.Data)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: message %d: %w", path, i, err)
		}
		if y[i], err = strconv.Atoi(label); err != nil {
			return nil, nil, fmt.Errorf("%s: message %d: label %q is not an integer class", path, i, label)
		}
		if x == nil {
			x = mat.NewDense(len(msgs), len(v), nil)
		}
		if len(v) != x.RawMatrix().Cols {
			return nil, nil, fmt.Errorf("%s: message %d has %d values, the first had %d", path, i, len(v), x.RawMatrix().Cols)
		}
		for j, f := range v {
			x.Set(i, j, float64(f))
		}
	}
	return x, y, nil
}
