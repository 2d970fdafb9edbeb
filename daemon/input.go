package daemon

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/smtd/smtd/config"
)

// attach reads the stream instance st with a new durable consumer, from
// where plan says, and reports what the plan found (a reset or a purge).
// After a reset the pipeline counts sequences in the new instance: its
// model is kept, its last applied sequence starts again at 0.
func (pl *pipeline) attach(ctx context.Context, st streamState, plan resumePlan) error {
	pl.flushOutputs() // the acknowledgements go to the consumer replaced
	in, err := newJSIntake(ctx, pl.d.js, st.name, pl.consumerName(), &pl.cfg, plan.after)
	if err != nil {
		return err
	}
	switch plan.reason {
	case ReasonStreamReset:
		if pl.lastSeq > 0 {
			pl.log.Warn().Uint64("last_seq", pl.lastSeq).Msg("input sequences start again in the new stream")
		}
		pl.lastSeq, pl.lastCkptSeq = 0, 0
		pl.stats.lastSeq.Store(0)
	case ReasonStreamPurged:
		pl.stats.lost.Add(int64(st.first - 1 - plan.after))
	}
	if plan.reason != "" {
		pl.log.Error().Str("stream", st.name).Str("reason", plan.reason).Msg(plan.detail)
		pl.d.publishEvent("events.errors", errorEvent{
			Pipeline: pl.cfg.Name, Subject: pl.cfg.Input.Subject, Seq: plan.after, Reason: plan.reason, Error: plan.detail,
		})
	}
	pl.in, pl.stream = in, st
	pl.goneSince = time.Time{}
	return nil
}

// recreateAfter is how long a deleted input stream stays missing before
// the daemon creates it again: the server removes a deleted stream's
// files asynchronously, and a stream of the same name created at once can
// lose its first messages to that removal.
const recreateAfter = 2 * time.Second

// inputTrouble handles a failed fetch. On JetStream it finds out whether
// the stream or the consumer is gone and attaches again: a deleted
// stream is recreated under input.on_reset (restart: read from its first
// message; refuse: stay without input), a deleted consumer is recreated
// right after the last applied sequence. Until input flows again the
// pipeline's health is input_missing; the cause is logged and reported
// once, not at every retry.
func (pl *pipeline) inputTrouble(ctx context.Context, fetchErr error) {
	why := "fetching input: " + fetchErr.Error()
	if s := pl.d.storage.Load(); s != nil {
		why = *s
	} else if pl.fenced() {
		why = "the lease was lost: " + why
	} else if pl.stream.name != "" {
		reattached, cause := pl.reattach(ctx)
		if reattached {
			return
		}
		if cause != "" {
			why = cause
		}
	}
	if pl.missing != why {
		pl.missing = why
		pl.log.Error().Err(fetchErr).Msg(why + "; retrying every second")
		pl.d.publishEvent("events.errors", errorEvent{
			Pipeline: pl.cfg.Name, Subject: pl.cfg.Input.Subject, Seq: pl.lastSeq, Reason: ReasonInputMissing, Error: why,
		})
		pl.updateHealth()
	}
	select {
	case <-ctx.Done():
	case <-time.After(time.Second):
	}
}

// inputFine notes that input flows again.
func (pl *pipeline) inputFine() {
	if pl.missing == "" {
		return
	}
	pl.log.Info().Str("was", pl.missing).Msg("input flows again")
	pl.missing = ""
	pl.updateHealth()
}

// reattach attaches again to a stream or consumer that disappeared; it
// returns whether it did, or what is wrong ("" if it cannot tell).
func (pl *pipeline) reattach(ctx context.Context) (bool, string) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	js := pl.d.js
	name := pl.stream.name
	s, err := js.Stream(ctx, name)
	switch {
	case errors.Is(err, jetstream.ErrStreamNotFound):
		why := fmt.Sprintf("input stream %s was deleted", name)
		if pl.cfg.Input.OnReset == config.ResetRefuse {
			// Another instance of the stream is refused too.
			if st, err := streamOf(ctx, js, &pl.cfg); err == nil {
				if _, err := planResume(pl.position(), st, config.ResetRefuse); err != nil {
					return false, err.Error()
				}
			}
			return false, why + " (input.on_reset: refuse: not recreated)"
		}
		if pl.goneSince.IsZero() {
			pl.goneSince = time.Now()
		}
		if time.Since(pl.goneSince) < recreateAfter {
			return false, why
		}
		st, err := ensureStream(ctx, js, pl.d.fixed, &pl.cfg)
		if err != nil {
			return false, why + "; recreating it: " + err.Error()
		}
		// What the deleted stream held after the newest message read is
		// gone with it (at least: the count is from the last fetch).
		if n := pl.in.backlog(); n > 0 {
			pl.stats.lost.Add(int64(n))
			why += fmt.Sprintf(" with at least %d messages not yet learned", n)
		}
		return pl.reattachTo(ctx, st, why)
	case err != nil:
		return false, ""
	}
	if _, err := js.Consumer(ctx, name, pl.consumerName()); !errors.Is(err, jetstream.ErrConsumerNotFound) {
		return false, ""
	}
	return pl.reattachTo(ctx, newStreamState(s.CachedInfo()), fmt.Sprintf("consumer %s of stream %s was deleted", pl.consumerName(), name))
}

// reattachTo attaches to the stream instance st after what went wrong.
func (pl *pipeline) reattachTo(ctx context.Context, st streamState, what string) (bool, string) {
	plan, err := planResume(pl.position(), st, pl.cfg.Input.OnReset)
	if err != nil {
		return false, what + ": " + err.Error()
	}
	if err := pl.attach(ctx, st, plan); err != nil {
		return false, what + ": " + err.Error()
	}
	pl.log.Warn().Str("stream", st.name).Uint64("resume_after_seq", plan.after).Msg(what + "; attached again")
	return true, ""
}

// position is where the pipeline is, as a checkpoint would record it.
func (pl *pipeline) position() *Checkpoint {
	return &Checkpoint{Stream: pl.stream.name, StreamCreated: pl.stream.created, LastSeq: pl.lastSeq}
}

// streamOf returns the stream that captures the pipeline's input, if any.
func streamOf(ctx context.Context, js jetstream.JetStream, p *config.Pipeline) (streamState, error) {
	name, err := js.StreamNameBySubject(ctx, p.Input.Subject)
	if err != nil {
		return streamState{}, err
	}
	s, err := js.Stream(ctx, name)
	if err != nil {
		return streamState{}, err
	}
	return newStreamState(s.CachedInfo()), nil
}

// ensureOutputStream makes sure the output stream of a pipeline with
// output transport jetstream exists, with the configured duplicate window.
func ensureOutputStream(ctx context.Context, js jetstream.JetStream, cfg *config.Config, p *config.Pipeline) error {
	name := p.OutputStreamName()
	sc := boundedStream(name, "smtd outputs of pipeline "+p.Name, p.Output.Subject, cfg.NATS)
	sc.Duplicates = p.Output.DuplicateWindow
	_, err := js.CreateOrUpdateStream(ctx, sc)
	if err != nil {
		return fmt.Errorf("smtd: output stream %s for %s: %w", name, p.Output.Subject, err)
	}
	return nil
}
