package bench

import (
	"strconv"
	"testing"
)

// bench throughput runs its phases on a small stream and reports, for
// each, what was sent and how it ended; in the replay phase the daemon
// learns a backlog published before it.
func TestThroughputPhases(t *testing.T) {
	dir := digitsDir(t, 11, 64)
	lines := runBench(t, Throughput, "-mnist", dir, "-images", "96", "-rounds", "1", "-seconds", "0.5", "-rate", "100", "-flood-rate", "400")
	for _, phase := range []string{"idle", "embed", "replay", "flood"} {
		sent, err := strconv.Atoi(lines[phase+"_sent"])
		if err != nil || sent == 0 {
			t.Errorf("%s_sent: %q, want queries sent", phase, lines[phase+"_sent"])
			continue
		}
		outcomes := 0
		for _, o := range []string{"answered", "busy", "errors", "timeouts"} {
			n, err := strconv.Atoi(lines[phase+"_"+o])
			if err != nil {
				t.Errorf("%s_%s: %q", phase, o, lines[phase+"_"+o])
			}
			outcomes += n
		}
		if outcomes != sent {
			t.Errorf("%s: %d outcomes of %d queries", phase, outcomes, sent)
		}
		if lines[phase+"_errors"] != "0" {
			t.Errorf("%s_errors: %s", phase, lines[phase+"_errors"])
		}
	}
	if n, err := strconv.Atoi(lines["replay_backlog_left"]); err != nil || n < 0 {
		t.Errorf("replay_backlog_left: %q, want a count", lines["replay_backlog_left"])
	}
	if r, err := strconv.ParseFloat(lines["replay_learn_images_per_s"], 64); err != nil || r <= 0 {
		t.Errorf("replay_learn_images_per_s: %q, want the daemon learning the backlog", lines["replay_learn_images_per_s"])
	}
}
