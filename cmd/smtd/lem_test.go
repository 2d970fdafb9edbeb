package main

import (
	"bytes"
	"encoding/csv"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/smtd/smtd/daemon"
)

// TestLEMCmd embeds the shipped raw MNIST recording with plain and
// non-redundant LEM and checks the CSV and the redundancy report.
func TestLEMCmd(t *testing.T) {
	for _, tc := range []struct {
		args []string
	}{
		{[]string{"-dim", "3"}},
		{[]string{"-dim", "3", "-nonredundant"}},
	} {
		out := filepath.Join(t.TempDir(), "y.csv")
		var stdout, stderr bytes.Buffer
		args := append(tc.args, "-out", out, "../../testdata/streams/mnist-raw-100.smtdrec")
		if err := lemCmd(args, &stdout, &stderr); err != nil {
			t.Fatalf("lem %v: %v\n%s", args, err, stderr.String())
		}
		for _, want := range []string{"points: 100\n", "coordinates: 3\n", "redundancy_c1: 1.0000\n", "redundancy_c3: "} {
			if !strings.Contains(stdout.String(), want) {
				t.Errorf("lem %v: output lacks %q:\n%s", args, want, stdout.String())
			}
		}
		f, err := os.Open(out)
		if err != nil {
			t.Fatal(err)
		}
		rows, err := csv.NewReader(f).ReadAll()
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		if len(rows) != 101 || strings.Join(rows[0], ",") != "label,c1,c2,c3" {
			t.Fatalf("lem %v: %d rows, header %v", args, len(rows), rows[0])
		}
		if _, err := strconv.Atoi(rows[1][0]); err != nil {
			t.Errorf("label %q is not a digit", rows[1][0])
		}
		for _, r := range rows[1:] {
			for _, v := range r[1:] {
				if _, err := strconv.ParseFloat(v, 64); err != nil {
					t.Fatalf("coordinate %q: %v", v, err)
				}
			}
		}
	}
}

func TestLEMCmdPNGAndFloat32(t *testing.T) {
	out := filepath.Join(t.TempDir(), "y.f32")
	var stdout, stderr bytes.Buffer
	err := lemCmd([]string{"-dim", "2", "-max", "60", "-format", "float32", "-out", out, "../../testdata/streams/mnist-test-200.smtdrec"}, &stdout, &stderr)
	if err != nil {
		t.Fatal(err, stderr.String())
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) != 60*2*4 {
		t.Errorf("%d bytes, want 60×2 float32", len(b))
	}
}

func TestLEMCmdUsage(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if err := lemCmd([]string{"-h"}, &stdout, &stderr); !errors.Is(err, flag.ErrHelp) || !strings.Contains(stderr.String(), "-nonredundant") {
		t.Errorf("-h: %v\n%s", err, stderr.String())
	}
	if err := lemCmd(nil, &stdout, &stderr); !errors.Is(err, errUsage) {
		t.Errorf("no file: %v, want errUsage", err)
	}
	err := lemCmd([]string{"../../testdata/streams/brown-2000.smtdrec"}, &stdout, &stderr)
	if !errors.Is(err, daemon.ErrNotPoint) {
		t.Errorf("text stream: %v, want daemon.ErrNotPoint", err)
	}
}
