package dataset

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// writeTGZ writes a gzip'd tar with the given members (name, content) in order.
func writeTGZ(t *testing.T, members ...string) string {
	t.Helper()
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	tw := tar.NewWriter(zw)
	for i := 0; i < len(members); i += 2 {
		body := []byte(members[i+1])
		if err := tw.WriteHeader(&tar.Header{Name: members[i], Mode: 0o644, Size: int64(len(body)), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		tw.Write(body)
	}
	tw.Close()
	zw.Close()
	p := filepath.Join(t.TempDir(), "brown.tgz")
	if err := os.WriteFile(p, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestBrownSentences(t *testing.T) {
	ca01 := "\n\n\tThe/at Fulton/np-tl County/nn-tl said/vbd ``/`` no/at evidence/nn ''/'' ./.\n" +
		"Atlanta's/np$ term-end/nn report/nn ,/, by/in Mayor/nn-tl Allen/np Jr./np ./.\n\n\n" +
		"\t``/`` --/-- ''/''\n" +
		"It/pps cost/vbd $1,000/nns ./.\n"
	cb02 := "\tAnd/cc so/rb 1/2/cd ;/.\n"
	p := writeTGZ(t,
		"package/package.json", "{}",
		"package/cb02", cb02, // out of order on purpose: samples are read by name
		"package/README", "BROWN CORPUS",
		"package/ca01", ca01,
		"package/cats.txt", "ca01 news\n")
	got, err := BrownSentences(p)
	if err != nil {
		t.Fatal(err)
	}
	want := [][]string{
		{"the", "fulton", "county", "said", "no", "evidence"},
		{"atlanta's", "term-end", "report", "by", "mayor", "allen", "jr"},
		{"it", "cost", "1", "000"},
		{"and", "so", "1", "2"},
	}
	if !slices.EqualFunc(got, want, slices.Equal) {
		t.Fatalf("got %q\nwant %q", got, want)
	}
	for _, s := range got {
		if again := Tokenize(strings.Join(s, " ")); !slices.Equal(again, s) {
			t.Errorf("retokenised %q = %q", s, again)
		}
	}
}

func TestBrownSentencesErrors(t *testing.T) {
	tests := []struct {
		name    string
		path    string
		wantErr error
	}{
		{"no samples", writeTGZ(t, "package/README", "x"), ErrBrown},
		{"no tag", writeTGZ(t, "package/ca01", "The/at jury\n"), ErrBrown},
		{"empty tag", writeTGZ(t, "package/ca01", "The/at jury/\n"), ErrBrown},
		{"missing file", filepath.Join(t.TempDir(), "none.tgz"), os.ErrNotExist},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := BrownSentences(tt.path); !errors.Is(err, tt.wantErr) {
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			}
		})
	}
	notGzip := filepath.Join(t.TempDir(), "plain.tgz")
	os.WriteFile(notGzip, []byte("ca01"), 0o644)
	if _, err := BrownSentences(notGzip); err == nil {
		t.Fatal("not gzip: no error")
	}
}
