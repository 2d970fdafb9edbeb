package progress

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

func TestBarShowsCountRateAndTimeLeft(t *testing.T) {
	var b bytes.Buffer
	bar := NewBar(&b, "feed images", 10)
	bar.start = time.Now().Add(-2 * time.Second)
	bar.Add(4)
	line := b.String()
	if !strings.HasPrefix(line, "\r\033[Kfeed images [") || !strings.Contains(line, "] 4/10") || !strings.Contains(line, "/s  ETA ") {
		t.Errorf("line %q", line)
	}
	bar.Done()
	if !strings.HasSuffix(b.String(), "\n") || strings.Count(b.String(), "\r\033[K") != 2 {
		t.Errorf("after Done: %q", b.String())
	}

	b.Reset()
	unknown := NewBar(&b, "feed frames", 0)
	unknown.Add(3)
	if got := b.String(); !strings.HasPrefix(got, "\r\033[Kfeed frames 3  ") || strings.Contains(got, "ETA") {
		t.Errorf("unknown total: %q", got)
	}
}

func TestBarWithoutWriterDrawsNothing(t *testing.T) {
	bar := NewBar(nil, "x", 5)
	bar.Add(5)
	bar.Done()
	if bar.n != 5 {
		t.Errorf("counted %d, want 5", bar.n)
	}
}
