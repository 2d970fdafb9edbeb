package dataset

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// Tokenize splits s into lowercase word tokens. It is smtd's one tokenisation
// rule: the daemon applies it to every word-token message and [BrownSentences]
// applies it to the corpus, so both see the same vocabulary.
//
// The rule, exactly:
//
//   - A word character is a Unicode letter (category L), combining mark
//     (category M, so that decomposed accents stay inside their word) or
//     decimal digit (category Nd).
//   - A joiner is an apostrophe (U+0027 ' or U+2019 ’) or a hyphen (U+002D -
//     or U+2010 ‐). A joiner belongs to a token only when the characters just
//     before and just after it are both word characters: "don't", "term-end"
//     and "rock'n'roll" are single tokens, while "'quoted'", "end-" and "a--b"
//     lose their joiners.
//   - A token is a maximal run of word characters and such inner joiners.
//     Every other character separates tokens, and so does each byte of
//     invalid UTF-8.
//   - Each rune of a token is mapped by unicode.ToLower (simple case mapping,
//     no locale rules), U+2019 becomes ' and U+2010 becomes -.
//
// Tokens are never empty, and joining tokens with spaces and tokenising again
// gives the same tokens. A token that needs no mapping is a substring of s and
// keeps s alive; use [AppendTokens] to reuse the result slice.
func Tokenize(s string) []string {
	return AppendTokens(nil, s)
}

// AppendTokens appends the tokens of s, as defined by [Tokenize], to dst and
// returns the extended slice. With a dst of enough capacity it allocates only
// for tokens that need lowercasing or joiner normalisation.
func AppendTokens(dst []string, s string) []string {
	n := len(s)
	i := 0
	for i < n {
		// Skip separators.
		if c := s[i]; c < utf8.RuneSelf {
			if k := asciiClass[c]; k != 'w' && k != 'u' {
				i++
				continue
			}
		} else if r, size := utf8.DecodeRuneInString(s[i:]); !isWordRune(r) {
			i += size
			continue
		}
		start, end := i, i
		clean := true // already lowercase, with ASCII joiners only
		for i < n {
			c := s[i]
			if c < utf8.RuneSelf {
				switch asciiClass[c] {
				case 'w':
					i++
					end = i
					continue
				case 'u':
					clean = false
					i++
					end = i
					continue
				case 'j':
					if i+1 < n && startsWord(s, i+1) {
						i++
						continue
					}
				}
				break
			}
			r, size := utf8.DecodeRuneInString(s[i:])
			if isWordRune(r) {
				if clean && unicode.ToLower(r) != r {
					clean = false
				}
				i += size
				end = i
				continue
			}
			if (r == '\u2019' || r == '\u2010') && i+size < n && startsWord(s, i+size) {
				clean = false
				i += size
				continue
			}
			break
		}
		tok := s[start:end]
		if !clean {
			tok = normaliseToken(tok)
		}
		dst = append(dst, tok)
	}
	return dst
}

// startsWord reports whether a word character starts at byte i of s.
func startsWord(s string, i int) bool {
	if c := s[i]; c < utf8.RuneSelf {
		k := asciiClass[c]
		return k == 'w' || k == 'u'
	}
	r, _ := utf8.DecodeRuneInString(s[i:])
	return isWordRune(r)
}

// asciiClass classifies the ASCII bytes: 'w' lowercase letter or digit, 'u'
// uppercase letter, 'j' joiner, 0 separator.
var asciiClass = func() (t [utf8.RuneSelf]byte) {
	for c := 'a'; c <= 'z'; c++ {
		t[c] = 'w'
	}
	for c := '0'; c <= '9'; c++ {
		t[c] = 'w'
	}
	for c := 'A'; c <= 'Z'; c++ {
		t[c] = 'u'
	}
	t['\''] = 'j'
	t['-'] = 'j'
	return t
}()

func isWordRune(r rune) bool {
	if r < utf8.RuneSelf {
		c := asciiClass[r]
		return c == 'w' || c == 'u'
	}
	return unicode.In(r, unicode.L, unicode.M, unicode.Nd)
}

func lower(r rune) rune {
	if r < utf8.RuneSelf {
		if asciiClass[r] == 'u' {
			return r + ('a' - 'A')
		}
		return r
	}
	return unicode.ToLower(r)
}

// normaliseToken lowercases tok and maps the Unicode joiners to ASCII; tok
// holds only word characters and joiners.
func normaliseToken(tok string) string {
	var b strings.Builder
	b.Grow(len(tok))
	for i := 0; i < len(tok); i++ {
		if tok[i] >= utf8.RuneSelf {
			return normaliseRunes(&b, tok[i:])
		}
		b.WriteByte(byte(lower(rune(tok[i]))))
	}
	return b.String()
}

// normaliseRunes writes the normalised form of tok to b and returns all of b.
func normaliseRunes(b *strings.Builder, tok string) string {
	for _, r := range tok {
		switch r {
		case '\u2019':
			r = '\''
		case '\u2010':
			r = '-'
		default:
			r = lower(r)
		}
		b.WriteRune(r)
	}
	return b.String()
}
