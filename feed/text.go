package feed

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"path/filepath"
	"strconv"
)

// MaxTextBytes bounds one text message (the daemon's default
// input.max_bytes is 4 MiB).
const MaxTextBytes = 4 << 20

// Text returns the text read from r, named name ("-" for standard
// input), as one message per non-blank line, or with paragraphs one
// message per paragraph: lines up to a blank line, joined by newlines.
// The daemon's co-occurrence window never spans two messages. An item's
// Nats-Msg-Id is a digest of name (cleaned: book.txt and ./book.txt are
// one), its position and its text.
func Text(pipeline string, r io.Reader, name string, paragraphs bool) Source {
	// book.txt and ./book.txt are one file.
	idName := filepath.Clean(name)
	seq := func(yield func(Item, error) bool) {
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 0, 64<<10), MaxTextBytes)
		var para bytes.Buffer
		n, line, start := 0, 0, 0
		emit := func(text []byte, at int) bool {
			where := name + ":" + strconv.Itoa(at)
			id := msgID(pipeline, []byte("text"), []byte(idName), []byte(strconv.Itoa(n)), text)
			n++
			return yield(newItem(id, where, nil, bytes.Clone(text)), nil)
		}
		for sc.Scan() {
			line++
			t := bytes.TrimRight(sc.Bytes(), "\r")
			blank := len(bytes.TrimSpace(t)) == 0
			switch {
			case !paragraphs && !blank:
				if !emit(t, line) {
					return
				}
			case paragraphs && blank && para.Len() > 0:
				if !emit(para.Bytes(), start) {
					return
				}
				para.Reset()
			case paragraphs && !blank:
				if para.Len() == 0 {
					start = line
				} else {
					para.WriteByte('\n')
				}
				if para.Len()+len(t) > MaxTextBytes {
					yield(Item{Name: name + ":" + strconv.Itoa(start)}, fmt.Errorf("%s:%d: paragraph longer than %d bytes", name, start, MaxTextBytes))
					return
				}
				para.Write(t)
			}
		}
		if err := sc.Err(); err != nil {
			yield(Item{Name: name + ":" + strconv.Itoa(line+1)}, fmt.Errorf("%s:%d: %w", name, line+1, err))
			return
		}
		if para.Len() > 0 {
			emit(para.Bytes(), start)
		}
	}
	return Source{Items: seq}
}

// Concat returns the items of srcs one source after the other.
func Concat(srcs ...Source) Source {
	total := 0
	for _, s := range srcs {
		if s.Total <= 0 {
			total = 0
			break
		}
		total += s.Total
	}
	seq := func(yield func(Item, error) bool) {
		for _, s := range srcs {
			for it, err := range s.Items {
				if !yield(it, err) {
					return
				}
			}
		}
	}
	return Source{Total: total, Items: seq}
}
