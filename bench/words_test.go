package bench

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/smtd/smtd/record"
)

// brownTarball writes the sentences of a recorded text stream as one
// sample of a Brown corpus tarball (every token tagged nn) and returns
// its path.
func brownTarball(t *testing.T, stream string) string {
	t.Helper()
	msgs, err := record.ReadFile(filepath.Join("..", "testdata", "streams", stream))
	if err != nil {
		t.Fatal(err)
	}
	var sample strings.Builder
	for _, m := range msgs {
		sample.WriteByte('\t')
		for _, w := range strings.Fields(string(m.Data)) {
			sample.WriteString(w + "/nn ")
		}
		sample.WriteByte('\n')
	}
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	tw := tar.NewWriter(zw)
	if err := tw.WriteHeader(&tar.Header{Name: "brown/ca01", Mode: 0o644, Size: int64(sample.Len()), Typeflag: tar.TypeReg}); err != nil {
		t.Fatal(err)
	}
	if _, err := tw.Write([]byte(sample.String())); err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "brown.tgz")
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// bench words on 2,000 Brown sentences: the daemon embeds the words the
// library embeds and answers the same neighbour lists, word for word,
// and the figures the words section of BENCHMARKS.md quotes are printed.
func TestWordsLibraryAndDaemonAgree(t *testing.T) {
	var out strings.Builder
	queries := "the,said,president,city"
	err := Words(context.Background(), &out, []string{"-data", brownTarball(t, "brown-2000.smtdrec"), "-dim", "16", "-min-count", "5", "-queries", queries, "-k", "5"})
	if err != nil {
		t.Fatal(err)
	}
	t.Log(out.String())
	got := map[string]string{}
	for _, l := range strings.Split(out.String(), "\n") {
		if k, v, ok := strings.Cut(l, ": "); ok {
			got[k] = v
		}
	}
	for _, name := range []string{
		"words_tokens", "words_embedded", "words_solve_seconds", "words_lanczos_applies",
		"words_lanczos_restarts", "words_lanczos_passes", "words_first_token_to_embeddings_seconds",
		"words_embeddings_fnv64a", "daemon_first_token_to_embeddings_seconds",
	} {
		if got[name] == "" {
			t.Errorf("no %s line", name)
		}
	}
	if r := got["words_lanczos_redone"]; r != "true" && r != "false" {
		t.Errorf("words_lanczos_redone: %q, want true or false", r)
	}
	if got["words_embedded"] != got["daemon_embedded"] {
		t.Errorf("the library embedded %s words, the daemon %s", got["words_embedded"], got["daemon_embedded"])
	}
	for _, q := range strings.Split(queries, ",") {
		lib, dmn := got["neighbours_"+q], got["daemon_neighbours_"+q]
		if lib == "" || strings.Contains(lib, "not embedded") {
			t.Errorf("%s: library neighbours %q", q, lib)
		}
		if lib != dmn {
			t.Errorf("%s: library neighbours %q, daemon's %q", q, lib, dmn)
		}
	}
}
