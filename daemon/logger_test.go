package daemon

import (
	"bytes"
	"strings"
	"testing"
)

// The console format writes no colour codes into a file or a pipe, and
// the level filter drops what is below the least level.
func TestConsoleLoggerPlainAndFiltered(t *testing.T) {
	var b bytes.Buffer
	l := NewLogger(&b, "console")
	l.SetLevel("warn")
	l.Info().Msg("dropped")
	l.Warn().Str("pipeline", "images").Msg("kept")
	out := b.String()
	if strings.ContainsRune(out, '\x1b') {
		t.Errorf("colour codes in %q", out)
	}
	if strings.Contains(out, "dropped") || !strings.Contains(out, "WRN kept pipeline=images") {
		t.Errorf("logged %q, want only the warning", out)
	}
}
