package daemon

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/smtd/smtd/config"
)

// Reasons of the events about a pipeline's input and checkpoints (on
// <prefix>.events.errors, next to the rejection reasons of wire.go).
const (
	// ReasonStreamReset: the stream under the restored checkpoint was
	// deleted and created again, or the checkpoint counts in another
	// instance of the stream; input.on_reset says what happens.
	ReasonStreamReset = "stream_reset"
	// ReasonStreamPurged: messages after the checkpoint's last sequence
	// were removed from the stream (purge, age or size limits) before
	// they were learned.
	ReasonStreamPurged = "stream_purged"
	// ReasonCheckpointSkipped: a checkpoint was not restored (corrupt,
	// of another pipeline or model shape, degenerate, or of another
	// stream instance while one of this instance exists).
	ReasonCheckpointSkipped = "checkpoint_skipped"
	// ReasonInputMissing: the input stream or its consumer disappeared
	// while the daemon ran, or input cannot be fetched.
	ReasonInputMissing = "input_missing"
	// ReasonDiverged: a learning step left the model non-finite or
	// degenerate; it was rolled back.
	ReasonDiverged = "diverged"
	// ReasonLearner: a learning stage refused a batch and left its
	// parameters as they were.
	ReasonLearner = "learner"
)

// sameStream reports whether checkpoint c counts its sequences in the
// stream instance st. A checkpoint of an older smtd, without the stream's
// creation time, is taken as of st if its name matches and st has come as
// far as its last sequence.
func sameStream(c *Checkpoint, st streamState) bool {
	if c.Stream != st.name {
		return false
	}
	if c.StreamCreated.IsZero() {
		return c.LastSeq <= st.last
	}
	return c.StreamCreated.Equal(st.created) && c.LastSeq <= st.last
}

// resumePlan says where a pipeline reads its stream from after a restore.
type resumePlan struct {
	after  uint64 // deliver from after+1; 0: from the stream's first message
	reason string // the event to report, "" if none
	detail string
}

// planResume decides where a pipeline whose restored checkpoint is c (nil:
// none) continues in the stream instance st, under the reset policy.
//
//   - Same instance: right after c.LastSeq. If messages after it are gone
//     (purged, or dropped by the stream's limits), that is reported with
//     how many were lost.
//   - Another instance (the stream was deleted and recreated, or c came
//     from elsewhere): policy restart keeps the model and reads st from its
//     first message; refuse returns an error.
func planResume(c *Checkpoint, st streamState, policy string) (resumePlan, error) {
	if c == nil || c.LastSeq == 0 {
		return resumePlan{}, nil
	}
	if !sameStream(c, st) {
		was := c.Stream
		if !c.StreamCreated.IsZero() {
			was += " created " + c.StreamCreated.Format(time.RFC3339Nano)
		}
		detail := fmt.Sprintf("the checkpoint read stream %s up to sequence %d; stream %s created %s holds sequences %d..%d",
			was, c.LastSeq, st.name, st.created.Format(time.RFC3339Nano), st.first, st.last)
		if policy == config.ResetRefuse {
			return resumePlan{}, fmt.Errorf("smtd: %s: %s (input.on_reset: refuse)", ReasonStreamReset, detail)
		}
		return resumePlan{reason: ReasonStreamReset, detail: detail + "; reading it from its first message with the restored model (input.on_reset: restart)"}, nil
	}
	plan := resumePlan{after: c.LastSeq}
	if st.first > c.LastSeq+1 {
		plan.reason = ReasonStreamPurged
		plan.detail = fmt.Sprintf("messages %d..%d of stream %s were removed before they were learned; continuing at %d",
			c.LastSeq+1, st.first-1, st.name, st.first)
	}
	return plan, nil
}

// checkpointSource is one place a checkpoint may be read from.
type checkpointSource struct {
	version uint64 // from the name; candidates are tried newest first
	epoch   uint64 // cluster mode: of the same version, the newest epoch first
	from    string // file path or bucket/object, for logs and events
	read    func() ([]byte, error)
}

// checkpointSources lists a pipeline's checkpoints on disk and in the
// object store, newest first; of the same version, the file comes first.
func (d *Daemon) checkpointSources(ctx context.Context, pipeline string) ([]checkpointSource, error) {
	var out []checkpointSource
	if d.cluster == nil {
		// In a cluster, a disk holds what this machine wrote when it last
		// owned the pipeline, not what its successors did.
		files, err := checkpointFiles(d.checkpointDir(pipeline))
		if err != nil {
			return nil, fmt.Errorf("smtd: listing checkpoints: %w", err)
		}
		for _, f := range files {
			out = append(out, checkpointSource{version: checkpointVersion(f), from: f, read: func() ([]byte, error) { return os.ReadFile(f) }})
		}
	}
	if d.store != nil {
		names, err := d.store.list(ctx, pipeline)
		if err != nil {
			d.log.Warn().Err(err).Str("pipeline", pipeline).Msg("listing the checkpoints in JetStream")
		}
		for _, name := range names {
			out = append(out, checkpointSource{version: checkpointVersion(name), epoch: checkpointEpoch(name), from: checkpointBucket + "/" + name,
				read: func() ([]byte, error) { return d.store.obj.GetBytes(ctx, name) }})
		}
	}
	slices.SortStableFunc(out, func(a, b checkpointSource) int {
		switch {
		case a.version > b.version:
			return -1
		case a.version < b.version:
			return 1
		case a.epoch > b.epoch:
			return -1
		case a.epoch < b.epoch:
			return 1
		}
		return 0
	})
	return out, nil
}

// checkpointVersion reads the model version from a checkpoint's file or
// object name (checkpointName); 0 if it has none.
func checkpointVersion(name string) uint64 {
	base := strings.TrimSuffix(filepath.Base(name), ".ckpt")
	v, _ := strconv.ParseUint(base[strings.LastIndexByte(base, '-')+1:], 10, 64) // zero-padded decimal
	return v
}

// checkpointEpoch reads the lease epoch from a checkpoint's name
// (checkpointName); 0 outside cluster mode.
func checkpointEpoch(name string) uint64 {
	base := filepath.Base(name)
	i := strings.LastIndex(base, "-e")
	if i < 0 {
		return 0
	}
	digits, _, _ := strings.Cut(base[i+2:], "-")
	e, _ := strconv.ParseUint(digits, 10, 64)
	return e
}

// restore loads the newest good checkpoint of pl and returns where its
// input continues. st is the input stream's instance, nil on core NATS.
//
// Candidates are tried newest first, from disk and from the object store.
// One that is corrupt, of another pipeline or model shape, or whose model
// fails its check is skipped with an event naming it and why: the daemon
// never starts on it. A checkpoint of the current stream instance is
// preferred to a newer one of another instance (planted, or copied from
// elsewhere), and one of an instance created after the current one is
// never restored; if none is of this instance, the newest good one is
// restored and input.on_reset decides. If there are checkpoints but none
// can be restored, restore fails: the daemon does not silently start
// afresh next to them.
func (d *Daemon) restore(ctx context.Context, pl *pipeline, st *streamState) (resumePlan, error) {
	sources, err := d.checkpointSources(ctx, pl.cfg.Name)
	if err != nil {
		return resumePlan{}, err
	}
	var fence pointer
	if d.cluster != nil {
		fence = d.store.latestPointer(ctx, pl.cfg.Name)
	}
	var chosen, foreign *Checkpoint
	var from, foreignFrom string
	var failed []error
	for _, src := range sources {
		c, err := pl.tryRestore(src, st, fence)
		if err != nil {
			d.skipCheckpoint(pl, src.from, err)
			failed = append(failed, fmt.Errorf("%s: %w", src.from, err))
			continue
		}
		if st == nil || sameStream(c, *st) {
			chosen, from = c, src.from
			break
		}
		if foreign == nil {
			foreign, foreignFrom = c, src.from
		}
	}
	switch {
	case chosen != nil && foreign != nil:
		d.skipCheckpoint(pl, foreignFrom, fmt.Errorf("%w: it read another instance of stream %s (created %s, up to sequence %d); %s is of the current one",
			ErrCheckpoint, foreign.Stream, foreign.StreamCreated.Format(time.RFC3339Nano), foreign.LastSeq, from))
	case chosen == nil && foreign != nil:
		// The pipeline holds it: every later candidate failed.
		chosen, from = foreign, foreignFrom
	}
	if chosen == nil {
		if len(failed) > 0 {
			// Learning afresh next to checkpoints that cannot be read
			// would hide them: the operator decides.
			return resumePlan{}, fmt.Errorf("smtd: pipeline %s has checkpoints but none can be restored (move them away to start afresh):\n%w",
				pl.cfg.Name, errors.Join(failed...))
		}
		return resumePlan{}, nil
	}
	d.log.Info().Str("pipeline", pl.cfg.Name).Str("from", from).Uint64("model_version", chosen.ModelVersion).
		Int64("samples", chosen.Samples).Uint64("last_seq", chosen.LastSeq).Msg("checkpoint restored")
	if st == nil {
		return resumePlan{after: chosen.LastSeq}, nil
	}
	return planResume(chosen, *st, pl.cfg.Input.OnReset)
}

// tryRestore reads, decodes, checks and restores one checkpoint; on error
// the pipeline is unchanged. A checkpoint of an instance of the stream st
// created after st is not of its past (copied or planted): it is refused.
//
// In cluster mode, a checkpoint of an epoch older than the latest
// pointer's and of a later version than the pointer's was stored by an
// owner after it had lost its lease: it is refused.
func (pl *pipeline) tryRestore(src checkpointSource, st *streamState, fence pointer) (*Checkpoint, error) {
	data, err := src.read()
	if err != nil {
		return nil, fmt.Errorf("%w: reading it: %v", ErrCheckpoint, err)
	}
	c, err := DecodeCheckpoint(data)
	if err != nil {
		return nil, err
	}
	if c.Epoch < fence.Epoch && c.ModelVersion > fence.Version {
		return nil, fmt.Errorf("%w: written in epoch %d after epoch %d began (the latest pointer: version %d): its owner had lost its lease",
			ErrCheckpoint, c.Epoch, fence.Epoch, fence.Version)
	}
	if st != nil && c.Stream == st.name && c.StreamCreated.After(st.created) {
		return nil, fmt.Errorf("%w: it read an instance of stream %s created %s, after the current one (%s)",
			ErrCheckpoint, c.Stream, c.StreamCreated.Format(time.RFC3339Nano), st.created.Format(time.RFC3339Nano))
	}
	if err := pl.restore(c); err != nil {
		return nil, err
	}
	return c, nil
}

// skipCheckpoint logs and reports a checkpoint that was not restored.
func (d *Daemon) skipCheckpoint(pl *pipeline, from string, err error) {
	d.log.Error().Err(err).Str("pipeline", pl.cfg.Name).Str("checkpoint", from).Msg("checkpoint skipped")
	d.publishEvent("events.errors", errorEvent{
		Pipeline: pl.cfg.Name, Subject: pl.cfg.Input.Subject, Reason: ReasonCheckpointSkipped,
		Error: from + ": " + err.Error(),
	})
}
