// Package progress draws a one-line progress report on a terminal: the
// line is rewritten in place ("\r", clear to end of line), and nothing is
// written when the output is a file or a pipe, so logs and redirected
// output stay clean.
package progress

import (
	"fmt"
	"io"
	"os"
	"strings"
	"time"
)

// IsTerminal says whether f is a character device (a terminal).
func IsTerminal(f *os.File) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// stderr is os.Stderr when it is a terminal, nil otherwise.
var stderr = func() io.Writer {
	if IsTerminal(os.Stderr) {
		return os.Stderr
	}
	return nil
}()

// Stderr returns os.Stderr when it is a terminal, and nil (draw nothing)
// otherwise: the writer to give NewBar.
func Stderr() io.Writer { return stderr }

// Show rewrites the progress line on standard error when it is a
// terminal; Show("") clears it.
func Show(format string, args ...any) {
	if stderr != nil {
		fmt.Fprintf(stderr, "\r\033[K"+format, args...)
	}
}

// Bar is a progress bar with a count, a rate and, when the total is
// known, an estimate of the time left. It redraws at most every
// 100 ms. A Bar with a nil writer draws nothing. It is not safe for
// concurrent use.
type Bar struct {
	w     io.Writer
	label string
	total int // ≤ 0: unknown
	n     int
	start time.Time
	drawn time.Time
}

// NewBar returns a bar counting up to total items (≤ 0 when unknown)
// that draws on w (nil: draws nothing).
func NewBar(w io.Writer, label string, total int) *Bar {
	return &Bar{w: w, label: label, total: total, start: time.Now()}
}

// Add counts n more items done.
func (b *Bar) Add(n int) {
	b.n += n
	if b.w == nil {
		return
	}
	if now := time.Now(); now.Sub(b.drawn) >= 100*time.Millisecond {
		b.drawn = now
		b.draw(now)
	}
}

// Done draws the final count and ends the line.
func (b *Bar) Done() {
	if b.w == nil {
		return
	}
	b.draw(time.Now())
	fmt.Fprintln(b.w)
}

const barWidth = 30

func (b *Bar) draw(now time.Time) {
	elapsed := now.Sub(b.start).Seconds()
	rate := 0.0
	if elapsed > 0 {
		rate = float64(b.n) / elapsed
	}
	if b.total <= 0 {
		fmt.Fprintf(b.w, "\r\033[K%s %d  %.1f/s", b.label, b.n, rate)
		return
	}
	frac := min(float64(b.n)/float64(b.total), 1)
	full := int(frac * barWidth)
	eta := "?"
	if rate > 0 {
		eta = time.Duration(float64(b.total-b.n) / rate * float64(time.Second)).Round(time.Second).String()
	}
	fmt.Fprintf(b.w, "\r\033[K%s [%s%s] %d/%d  %.1f/s  ETA %s", b.label,
		strings.Repeat("=", full), strings.Repeat(" ", barWidth-full), b.n, b.total, rate, eta)
}
