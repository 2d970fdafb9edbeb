package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/smtd/smtd/config"
)

// childConfigEnv makes the test binary run as a daemon (see TestMain), so
// that the exact-resume test can kill a real process with SIGKILL.
const childConfigEnv = "SMTD_TEST_DAEMON_CONFIG"

func TestMain(m *testing.M) {
	if path := os.Getenv(childConfigEnv); path != "" {
		os.Exit(runChild(path))
	}
	os.Exit(m.Run())
}

func runChild(path string) int {
	cfg, err := config.Load(path)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	d, err := New(cfg, Options{ConfigPath: path, Logger: NewLogger(os.Stderr, "console")})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := d.Run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// startNATS starts a NATS server with JetStream for tests that run the
// daemon against an external server; with changes applied to its options.
func startNATS(t testing.TB, changes ...func(*server.Options)) *server.Server {
	t.Helper()
	opts := &server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoSigs: true}
	for _, change := range changes {
		change(opts)
	}
	s, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("NATS server did not start")
	}
	t.Cleanup(s.Shutdown)
	return s
}

// Exact resume: replaying a recorded stream in deterministic mode while
// the daemon is killed with SIGKILL at random points and restarted ends
// with a model identical, bit for bit, to an uninterrupted run's.
func TestExactResumeAfterKill(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the daemon as a child process")
	}
	const stream = "mnist-train-1000.smtdrec"
	want, n := referenceModel(t, clusterPipeline("ref", "resume.ref"), stream)
	want.Pipeline = "kid"

	// The killed run, in child processes on a stream with the same messages.
	ns := startNATS(t)
	nc := connect(t, ns.ClientURL())
	kidCfg := testConfig(t, clusterPipeline("kid", "resume.kid"))
	kidCfg.NATS.URL = ns.ClientURL()
	kidCfg.Service.Name, kidCfg.Service.Prefix = "smtd-kid", "kid"
	kidCfg.Checkpoint.EverySamples = 100
	kidCfg.Log.Level = "info"
	kid := newChildDaemon(t, "kid", kidCfg)
	progress := func() uint64 {
		var st Status
		m, err := nc.Request("kid.status", nil, time.Second)
		if err != nil || json.Unmarshal(m.Data, &st) != nil || len(st.Pipelines) == 0 {
			return 0
		}
		return st.Pipelines[0].LastSeq
	}
	// The stream is published while the first instance runs; instances
	// are killed at random points past 20%, 45% and 70% of it.
	waitFor(t, time.Minute, "child daemon up", func() bool {
		_, err := nc.Request("kid.status", nil, time.Second)
		return err == nil
	})
	if got := replayFile(t, nc, stream, "resume.kid"); got != n {
		t.Fatalf("replayed %d of %d", got, n)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	kills := 0
	for _, frac := range []float64{0.2, 0.45, 0.7} {
		at := uint64(float64(n) * (frac + 0.1*rng.Float64()))
		waitFor(t, 2*time.Minute, fmt.Sprintf("child past seq %d", at), func() bool { return progress() >= at })
		time.Sleep(time.Duration(rng.IntN(20)) * time.Millisecond)
		kid.signal(t, syscall.SIGKILL)
		kills++
		t.Logf("kill %d after seq >= %d", kills, at)
		kid.start(t)
	}
	waitFor(t, 2*time.Minute, "killed run complete", func() bool { return progress() == uint64(n) })
	kid.signal(t, syscall.SIGTERM)
	if err := kid.cmd.Wait(); err != nil {
		t.Fatalf("child exit: %v", err)
	}
	got := lastCheckpoint(t, kidCfg, "kid")
	// Each restart resumed from a checkpoint, not from scratch (which
	// would also end in the same model, proving nothing).
	if restored := strings.Count(kid.log.String(), "checkpoint restored"); restored != kills {
		t.Errorf("%d restarts restored a checkpoint, want %d", restored, kills)
	}
	sameModel(t, got, want)
}

func lastCheckpoint(t testing.TB, cfg *config.Config, pipeline string) *Checkpoint {
	t.Helper()
	files, err := checkpointFiles(filepath.Join(cfg.DataDir, "checkpoints", pipeline))
	if err != nil || len(files) == 0 {
		t.Fatalf("no checkpoint of %s: %v", pipeline, err)
	}
	c, err := ReadCheckpoint(files[len(files)-1])
	if err != nil {
		t.Fatal(err)
	}
	return c
}
