package record

import (
	"bytes"
	"image"
	"image/png"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

// TestShippedStreams checks the recordings in testdata/streams (written by
// testdata/makestreams) against the header conventions that the daemon's
// tests rely on.
func TestShippedStreams(t *testing.T) {
	dir := filepath.Join("..", "testdata", "streams")
	tests := []struct {
		file    string
		n       int
		subject string
		check   func(t *testing.T, i int, m *Message)
	}{
		{"mnist-train-1000.smtdrec", 1000, "smtd.in.images", checkPNGDigit},
		{"mnist-test-200.smtdrec", 200, "smtd.in.images", checkPNGDigit},
		{"mnist-raw-100.smtdrec", 100, "smtd.in.images", func(t *testing.T, i int, m *Message) {
			h := m.Header
			if h.Get("Smtd-Encoding") != "raw" || h.Get("Smtd-Shape") != "28,28" || h.Get("Smtd-Dtype") != "uint8" || len(m.Data) != 784 {
				t.Fatalf("message %d: header %v, %d bytes", i, h, len(m.Data))
			}
			checkLabel(t, i, m)
		}},
		{"video-2x48.smtdrec", 96, "smtd.in.frames", func(t *testing.T, i int, m *Message) {
			stream := []string{"camera", "coffee"}[i%2]
			if m.Header.Get("Smtd-Stream") != stream || m.Header.Get("Smtd-Frame") != strconv.Itoa(i/2) {
				t.Fatalf("message %d: header %v", i, m.Header)
			}
			checkPNG(t, i, m, 32, 32)
		}},
		{"brown-2000.smtdrec", 2000, "smtd.in.words", func(t *testing.T, i int, m *Message) {
			s := string(m.Data)
			if !utf8.ValidString(s) || s == "" || strings.TrimSpace(s) != s || strings.ToLower(s) != s {
				t.Fatalf("message %d: %q", i, s)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			msgs, err := ReadFile(filepath.Join(dir, tt.file))
			if err != nil {
				t.Fatal(err)
			}
			if len(msgs) != tt.n {
				t.Fatalf("%d messages, want %d", len(msgs), tt.n)
			}
			for i, m := range msgs {
				if m.Subject != tt.subject || i > 0 && m.Offset <= msgs[i-1].Offset {
					t.Fatalf("message %d: subject %q, offset %v after %v", i, m.Subject, m.Offset, msgs[max(i-1, 0)].Offset)
				}
				tt.check(t, i, m)
			}
		})
	}
}

func checkPNGDigit(t *testing.T, i int, m *Message) {
	t.Helper()
	if m.Header.Get("Smtd-Encoding") != "png" {
		t.Fatalf("message %d: header %v", i, m.Header)
	}
	checkLabel(t, i, m)
	checkPNG(t, i, m, 28, 28)
}

func checkLabel(t *testing.T, i int, m *Message) {
	t.Helper()
	if l, err := strconv.Atoi(m.Header.Get("Smtd-Label")); err != nil || l < 0 || l > 9 {
		t.Fatalf("message %d: label %q", i, m.Header.Get("Smtd-Label"))
	}
}

func checkPNG(t *testing.T, i int, m *Message, w, h int) {
	t.Helper()
	img, err := png.Decode(bytes.NewReader(m.Data))
	if err != nil {
		t.Fatalf("message %d: %v", i, err)
	}
	if _, ok := img.(*image.Gray); !ok || img.Bounds() != image.Rect(0, 0, w, h) {
		t.Fatalf("message %d: %T %v, want %dx%d gray", i, img, img.Bounds(), w, h)
	}
}
