package daemon

import (
	"testing"
)

// A pipeline's health follows what its owner saw last, the most severe
// first.
func TestHealthStates(t *testing.T) {
	cfg := testConfig(t, digitsPipeline("digits", "health.images", 16))
	pl := newPipeline(&Daemon{cfg: cfg, fixed: cfg, log: NewLogger(testWriter{t}, "console").Logger}, cfg.Pipelines[0])
	for _, tc := range []struct {
		name              string
		refused, diverged int
		missing           string
		backlog           uint64
		want              string
	}{
		{name: "fresh", want: HealthOK},
		{name: "two refusals", refused: 2, want: HealthOK},
		{name: "three refusals", refused: 3, want: HealthStalled},
		{name: "rolled back", diverged: 1, refused: 3, want: HealthDiverged},
		{name: "deep backlog", backlog: 100*32 + 1, want: HealthLagging},
		{name: "stream gone", missing: "input stream SMTD_DIGITS was deleted", diverged: 1, backlog: 1 << 20, want: HealthInputMissing},
	} {
		pl.refused, pl.diverged, pl.missing = tc.refused, tc.diverged, tc.missing
		pl.stats.backlog.Store(tc.backlog)
		pl.updateHealth()
		if h := pl.health.Load(); h.State != tc.want || (tc.want != HealthOK && h.Reason == "") {
			t.Errorf("%s: health %+v, want %s with a reason", tc.name, *h, tc.want)
		}
	}
}
