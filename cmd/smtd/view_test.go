package main

import (
	"bytes"
	"context"
	"image/png"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/smtd/smtd/config"
)

// smtd view draws a checkpoint's atoms offline with the live page's code:
// the PNG it writes for the final checkpoint is, byte for byte, the atom
// sheet the page served for the same model version; a missing file is an
// error.
func TestViewDrawsWhatThePageShows(t *testing.T) {
	dir := t.TempDir()
	p := config.DefaultPipeline(config.Image, "digits")
	p.Input.Subject = "smtd.in.images" // as recorded
	p.KMeans.Atoms = 16
	p.SMT.Dim = 0
	d := startFeedDaemon(t, func(cfg *config.Config) {
		cfg.DataDir = dir
		cfg.Observe.HTTP = "127.0.0.1:0"
		cfg.Pipelines = []config.Pipeline{p}
	})
	stream := filepath.Join("..", "..", "testdata", "streams", "mnist-raw-100.smtdrec")
	var out bytes.Buffer
	if code := run([]string{"replay", "--server", d.ClientURL(), "--jetstream", stream}, &out, &out); code != 0 {
		t.Fatalf("replay: %d\n%s", code, out.String())
	}
	for deadline := time.Now().Add(time.Minute); d.Status().Pipelines[0].Learned != 100; {
		if time.Now().After(deadline) {
			t.Fatalf("replayed messages not learned: %d of 100", d.Status().Pipelines[0].Learned)
		}
		time.Sleep(10 * time.Millisecond)
	}
	version := d.Status().Pipelines[0].ModelVersion
	resp, err := http.Get("http://" + d.HTTPAddr() + "/api/pipelines/digits/atoms.png")
	if err != nil {
		t.Fatal(err)
	}
	served, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err := d.Shutdown(context.Background()); err != nil { // writes the final checkpoint
		t.Fatal(err)
	}
	ckpts, _ := filepath.Glob(filepath.Join(dir, "checkpoints", "digits", "*"))
	if len(ckpts) == 0 {
		t.Fatal("no checkpoint written")
	}
	ckpt := ckpts[len(ckpts)-1]

	pics := filepath.Join(dir, "pictures")
	out.Reset()
	if code := run([]string{"view", ckpt, "--out", pics}, &out, &out); code != 0 {
		t.Fatalf("smtd view: exit %d\n%s", code, out.String())
	}
	file := filepath.Join(pics, "digits-v"+strconv.FormatUint(version, 10)+"-atoms.png")
	if !strings.Contains(out.String(), file) {
		t.Errorf("smtd view output does not name %s:\n%s", file, out.String())
	}
	drawn, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := png.Decode(bytes.NewReader(drawn)); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	if !bytes.Equal(drawn, served) {
		t.Errorf("smtd view drew version %d differently from the page (%d and %d bytes)", version, len(drawn), len(served))
	}

	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"view"}, 2, "smtd view CHECKPOINT [--out DIR]"},
		{[]string{"view", "--help"}, 0, "-out directory"},
		{[]string{"view", filepath.Join(dir, "nope.ckpt")}, 1, "no such file"},
	} {
		out.Reset()
		if code := run(tc.args, &out, &out); code != tc.code || !strings.Contains(out.String(), tc.want) {
			t.Errorf("smtd %v: exit %d, want %d; output does not contain %q:\n%s", tc.args, code, tc.code, tc.want, out.String())
		}
	}
}
