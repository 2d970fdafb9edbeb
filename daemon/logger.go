package daemon

import (
	"io"
	"os"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/smtd/smtd/internal/progress"
)

// Logger is a zerolog logger whose level can change while the daemon runs
// (log.level is a live field).
type Logger struct {
	zerolog.Logger
	min *atomic.Int32
}

// NewLogger logs to w as JSON lines (format "json") or human-readable lines
// (format "console", coloured only when w is a terminal), at level info
// until SetLevel.
func NewLogger(w io.Writer, format string) *Logger {
	if format == "console" {
		f, ok := w.(*os.File)
		w = zerolog.ConsoleWriter{Out: w, TimeFormat: time.RFC3339, NoColor: !ok || !progress.IsTerminal(f)}
	}
	min := new(atomic.Int32)
	min.Store(int32(zerolog.InfoLevel))
	zl := zerolog.New(levelFilter{w: w, min: min}).Level(zerolog.TraceLevel).With().Timestamp().Logger()
	return &Logger{Logger: zl, min: min}
}

// SetLevel sets the least level logged: debug, info, warn or error.
func (l *Logger) SetLevel(level string) {
	lv, err := zerolog.ParseLevel(level)
	if err != nil {
		return // validated by config
	}
	l.min.Store(int32(lv))
}

// levelFilter drops events below min.
type levelFilter struct {
	w   io.Writer
	min *atomic.Int32
}

func (f levelFilter) Write(p []byte) (int, error) { return f.w.Write(p) }

func (f levelFilter) WriteLevel(l zerolog.Level, p []byte) (int, error) {
	if int32(l) < f.min.Load() {
		return len(p), nil
	}
	return f.w.Write(p)
}
