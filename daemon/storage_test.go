package daemon

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/smtd/smtd/internal/disk"
)

// After the store's disk fills up, the embedded server disables JetStream;
// once space is freed, the daemon enables it again without a restart, and
// what is published then is learned. Needs root, to mount a small tmpfs.
func TestRecoversFromFullDisk(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=24m", "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs (%v: %s)", err, bytes.TrimSpace(out))
	}
	t.Cleanup(func() { exec.Command("umount", "-l", dir).Run() })
	cfg := testConfig(t, digitsPipeline("digits", "full.images", 16))
	cfg.DataDir = filepath.Join(dir, "data")
	cfg.NATS.StreamMaxBytes = 8 << 20
	cfg.Checkpoint.ObjectStore = false
	d := startDaemon(t, cfg)
	nc := connect(t, d.ClientURL())
	js := jetStream(t, nc)

	// Fill the disk but for a little room.
	filler := filepath.Join(dir, "filler")
	f, err := os.Create(filler)
	if err != nil {
		t.Fatal(err)
	}
	block := make([]byte, 64<<10)
	for disk.Free(dir) > 512<<10 {
		if _, err := f.Write(block); err != nil {
			break
		}
	}
	f.Close()

	// Publish until the server refuses: JetStream is disabled.
	img := bytes.Repeat([]byte{128}, 28*28)
	h := nats.Header{HeaderShape: {"28,28"}, HeaderDtype: {"uint8"}}
	for i := 0; ; i++ {
		m := natsMsg("full.images", h, img)
		if _, err := js.PublishMsg(t.Context(), m, jetstream.WithRetryAttempts(0)); err != nil {
			t.Logf("publish %d refused: %v", i, err)
			break
		}
		if i > 100000 {
			t.Fatal("the disk never filled up")
		}
	}
	waitFor(t, 20*time.Second, "status says JetStream is disabled", func() bool { return d.Status().JetStream != "" })
	waitFor(t, 20*time.Second, "pipeline health input_missing", func() bool {
		return pipelineStatus(d, "digits").Health.State == HealthInputMissing
	})

	os.Remove(filler)
	waitFor(t, 30*time.Second, "JetStream enabled again", func() bool { return d.Status().JetStream == "" })
	before := pipelineStatus(d, "digits").Learned
	for i := 0; i < 10; i++ {
		var err error
		for try := 0; try < 50; try++ {
			if _, err = js.PublishMsg(t.Context(), natsMsg("full.images", h, img)); err == nil {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if err != nil {
			t.Fatalf("publish after freeing the disk: %v", err)
		}
	}
	waitFor(t, 30*time.Second, "messages after the recovery learned", func() bool {
		return pipelineStatus(d, "digits").Learned >= before+10
	})
	waitFor(t, 10*time.Second, "health ok", func() bool { return pipelineStatus(d, "digits").Health.State == HealthOK })
}
