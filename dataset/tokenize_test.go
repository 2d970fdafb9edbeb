package dataset

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
)

func TestTokenize(t *testing.T) {
	tests := []struct {
		in   string
		want []string
	}{
		{"", nil},
		{"   \t\n", nil},
		{"The cat sat.", []string{"the", "cat", "sat"}},
		{"Don't STOP-me now!", []string{"don't", "stop-me", "now"}},
		{"rock'n'roll", []string{"rock'n'roll"}},
		{"'quoted' end- -start a--b x'-y", []string{"quoted", "end", "start", "a", "b", "x", "y"}},
		{"it’s a well‐known fact", []string{"it's", "a", "well-known", "fact"}},
		{"1,000 3.5% $20 1961", []string{"1", "000", "3", "5", "20", "1961"}},
		{"Ärger über Éclair", []string{"ärger", "über", "éclair"}},
		{"cafe\u0301 naïve", []string{"cafe\u0301", "naïve"}},
		{"ΣΟΦΙΑ Москва", []string{"σοφια", "москва"}},
		{"日本語のテキスト", []string{"日本語のテキスト"}},
		{"a\xffb", []string{"a", "b"}},
		{"a\ufffdb", []string{"a", "b"}},
		{"e-mail_address@host.com", []string{"e-mail", "address", "host", "com"}},
		{"KELVIN \u212a", []string{"kelvin", "k"}},
		{"'", nil},
		{"-'-", nil},
		{"x'", []string{"x"}},
	}
	for _, tt := range tests {
		got := Tokenize(tt.in)
		if !slices.Equal(got, tt.want) {
			t.Errorf("Tokenize(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestAppendTokensReusesSlice(t *testing.T) {
	buf := make([]string, 0, 16)
	s := "no allocation for these lowercase words"
	allocs := testing.AllocsPerRun(100, func() {
		buf = AppendTokens(buf[:0], s)
	})
	if allocs != 0 {
		t.Errorf("AppendTokens allocated %v times, want 0", allocs)
	}
	if len(buf) != 6 {
		t.Errorf("got %q", buf)
	}
}

// checkTokens asserts the documented invariants of Tokenize on one input.
func checkTokens(t *testing.T, s string) {
	toks := Tokenize(s)
	for _, tok := range toks {
		if tok == "" {
			t.Fatalf("Tokenize(%q): empty token", s)
		}
		if !utf8.ValidString(tok) {
			t.Fatalf("Tokenize(%q): invalid UTF-8 token %q", s, tok)
		}
		for _, r := range tok {
			if !isWordRune(r) && r != '\'' && r != '-' {
				t.Fatalf("Tokenize(%q): token %q holds separator %U", s, tok, r)
			}
			if r < utf8.RuneSelf && unicode.IsUpper(r) {
				t.Fatalf("Tokenize(%q): token %q not lowercase", s, tok)
			}
		}
	}
	again := Tokenize(strings.Join(toks, " "))
	if !slices.Equal(again, toks) {
		t.Fatalf("Tokenize(%q) = %q, but retokenised = %q", s, toks, again)
	}
}

func FuzzTokenize(f *testing.F) {
	for _, s := range []string{"The cat sat.", "don't stop-me", "it’s well‐known", "a\xffb", "Ärger", "--'x'--"} {
		f.Add(s)
	}
	f.Fuzz(checkTokens)
}

func ExampleTokenize() {
	fmt.Printf("%q\n", Tokenize("Fulton County's \"term-end\" presentments -- 1,000 votes!"))
	// Output: ["fulton" "county's" "term-end" "presentments" "1" "000" "votes"]
}

func BenchmarkAppendTokens(b *testing.B) {
	sentence := "The Fulton County Grand Jury said Friday an investigation of Atlanta's recent primary election produced no evidence that any irregularities took place. "
	for _, bc := range []struct{ name, s string }{
		{"mixed-case", strings.Repeat(sentence, 8)},
		{"lowercase", strings.Repeat(strings.ToLower(sentence), 8)},
		{"unicode", strings.Repeat("Über die Straße gingen zwölf Männer – it’s a well‐known fact. ", 8)},
	} {
		b.Run(bc.name, func(b *testing.B) {
			buf := make([]string, 0, 256)
			b.ReportAllocs()
			b.SetBytes(int64(len(bc.s)))
			for b.Loop() {
				buf = AppendTokens(buf[:0], bc.s)
			}
		})
	}
}
