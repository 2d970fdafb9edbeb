package daemon

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/smtd/smtd/internal/disk"
)

// When the embedded server's disk fills up, a stream whose write fails
// keeps that error (the server logs "critical write error") and refuses
// every later write, and a full store can disable JetStream altogether;
// neither recovers by itself when space is freed: publishes time out until
// the server restarts. The daemon notices both, reports them in status and
// health, and once the store's file system has room again restarts
// JetStream inside the running server, which reloads the streams from disk
// without their latched errors. Nothing is lost: what was stored stays.
const (
	storageCheckEvery = time.Second
	// storageHeadroom is the free space the store needs before JetStream
	// is started again.
	storageHeadroom = 16 << 20
)

// storageFault records a failed JetStream write reported in the embedded
// server's log.
func (d *Daemon) storageFault(msg string) {
	d.writeErr.CompareAndSwap(nil, &msg)
}

// watchStorage runs while the daemon runs (embedded server only).
func (d *Daemon) watchStorage(ctx context.Context) {
	dir := filepath.Join(d.fixed.DataDir, "nats")
	t := time.NewTicker(storageCheckEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		werr := d.writeErr.Load()
		if d.server.JetStreamEnabled() && werr == nil {
			continue
		}
		free := disk.Free(dir)
		if d.storage.Load() == nil {
			msg := "JetStream is disabled"
			if werr != nil {
				msg = "JetStream cannot write (" + *werr + ")"
			}
			msg += fmt.Sprintf("; it restarts once %s has %d MiB free", dir, storageHeadroom>>20)
			d.storage.Store(&msg)
			d.log.Error().Uint64("free_bytes", free).Msg(msg)
			d.publishEvent("events.errors", errorEvent{Reason: ReasonStorage, Error: msg})
		}
		if free < storageHeadroom {
			continue
		}
		if d.server.JetStreamEnabled() {
			if err := d.server.ShutdownJetStream(); err != nil {
				d.log.Warn().Err(err).Msg("stopping JetStream to clear its write errors")
				continue
			}
		}
		if err := d.server.EnableJetStream(&server.JetStreamConfig{StoreDir: dir}); err != nil {
			d.log.Warn().Err(err).Msg("starting JetStream again")
			continue
		}
		d.writeErr.Store(nil)
		d.storage.Store(nil)
		d.log.Info().Uint64("free_bytes", free).Msg("JetStream started again: its disk has room")
	}
}

// ReasonStorage: the embedded server's JetStream could not write (its disk
// was full) or was disabled.
const ReasonStorage = "storage_full"
