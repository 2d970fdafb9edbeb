package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/smtd/smtd/config"
	"github.com/smtd/smtd/daemon"
)

// wordsDaemonResult is what a stream of sentences through the daemon gave.
type wordsDaemonResult struct {
	ingest, ready time.Duration
	neighbours    map[string][]string // nil list: not embedded
	embedded      int
}

// wordsThroughDaemon streams the sentences, one message each (the tokens
// joined by spaces, as a user would send text), through JetStream into a
// daemon in this process running the text pipeline p, waits until every
// message is learned, asks for a checkpoint (which solves the
// embeddings), then queries the neighbours endpoint for each query word.
// ingest is the time from the first message published to the last one
// learned; ready, to usable embeddings.
func wordsThroughDaemon(ctx context.Context, sentences [][]string, p config.Pipeline, queries []string, k int, logs io.Writer) (*wordsDaemonResult, error) {
	in, err := startDaemon(ctx, p, logs)
	if err != nil {
		return nil, err
	}
	defer in.Close()
	cfg := config.Default() // the subjects of the daemon's endpoints
	start := time.Now()
	for i, s := range sentences {
		m := nats.NewMsg(p.Input.Subject)
		m.Data = []byte(strings.Join(s, " "))
		if _, err := in.js.PublishMsgAsync(m); err != nil {
			return nil, err
		}
		for int64(i)-in.learned() > 4096 {
			if err := wait(ctx, 2*time.Millisecond); err != nil {
				return nil, err
			}
		}
	}
	for in.learned() < int64(len(sentences)) {
		if err := wait(ctx, 2*time.Millisecond); err != nil {
			return nil, err
		}
	}
	res := &wordsDaemonResult{ingest: time.Since(start), neighbours: map[string][]string{}}
	if _, err := in.nc.Request(cfg.Subject("control.checkpoint"), nil, 30*time.Minute); err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	res.ready = time.Since(start)
	res.embedded, _ = in.d.Status().Pipelines[0].Model["words_embedded"].(int)
	for _, q := range queries {
		body, _ := json.Marshal(daemon.NeighboursRequest{Word: q, K: k})
		rep, err := in.nc.Request(cfg.NeighboursSubject(p.Name), body, time.Minute)
		if err != nil {
			return nil, fmt.Errorf("neighbours of %q: %w", q, err)
		}
		if code := rep.Header.Get("Nats-Service-Error-Code"); code == "404" {
			res.neighbours[q] = nil
			continue
		} else if code != "" {
			return nil, fmt.Errorf("neighbours of %q: %s %s", q, code, rep.Header.Get("Nats-Service-Error"))
		}
		var nr daemon.NeighboursReply
		if err := json.Unmarshal(rep.Data, &nr); err != nil {
			return nil, err
		}
		for _, n := range nr.Neighbours {
			res.neighbours[q] = append(res.neighbours[q], n.Word)
		}
	}
	return res, nil
}
