package bench

import (
	"bufio"
	"context"
	"io"
	"strconv"
	"strings"
	"testing"
)

// figures runs the benchmark run with args and returns the numbers of its
// `name: value` lines by name.
func figures(t *testing.T, run func(context.Context, io.Writer, []string) error, args ...string) map[string]float64 {
	t.Helper()
	var out strings.Builder
	if err := run(context.Background(), &out, args); err != nil {
		t.Fatal(err)
	}
	t.Log(out.String())
	got := map[string]float64{}
	s := bufio.NewScanner(strings.NewReader(out.String()))
	for s.Scan() {
		k, v, _ := strings.Cut(s.Text(), ": ")
		if f, err := strconv.ParseFloat(v, 64); err == nil {
			got[k] = f
		}
	}
	return got
}
