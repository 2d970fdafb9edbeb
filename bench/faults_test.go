package bench

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/smtd/smtd/config"
	"github.com/smtd/smtd/daemon"
)

// faultsDaemonEnv makes the test binary run as a daemon with the config
// file it names (see TestMain): the faults benchmark needs a process it
// can kill, and a test binary cannot run `smtd run`.
const faultsDaemonEnv = "SMTD_BENCH_DAEMON_CONFIG"

func TestMain(m *testing.M) {
	if path := os.Getenv(faultsDaemonEnv); path != "" {
		os.Exit(runDaemonChild(path))
	}
	os.Exit(m.Run())
}

// runDaemonChild runs a daemon as `smtd run --config path` does, until
// SIGTERM.
func runDaemonChild(path string) int {
	cfg, err := config.Load(path)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	d, err := daemon.New(cfg, daemon.Options{ConfigPath: path, Logger: daemon.NewLogger(os.Stderr, cfg.Log.Format)})
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

// testDaemon runs this test binary as the daemon.
func testDaemon(path string) *exec.Cmd {
	c := exec.Command(os.Args[0], "-test.run=^$")
	c.Env = append(os.Environ(), faultsDaemonEnv+"="+path)
	return c
}

// A daemon killed with SIGKILL mid-stream and restarted loses no input and
// applies none twice, and its JetStream outputs hold each input's output
// exactly once; core outputs are at least once.
func TestFaultsKill9Small(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the daemon as child processes")
	}
	const n = 300
	var out bytes.Buffer
	args := []string{"-scenarios", "kill9", "-messages", strconv.Itoa(n), "-kills", "1", "-every", "60",
		"-stream", "../testdata/streams/mnist-train-1000.smtdrec", "-timeout", "1m"}
	if err := runFaults(t.Context(), &out, args, testDaemon); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	got := map[string]int64{}
	s := bufio.NewScanner(&out)
	for s.Scan() {
		name, value, ok := strings.Cut(s.Text(), ": ")
		if v, err := strconv.ParseInt(value, 10, 64); ok && err == nil {
			got[name] = v
		}
	}
	want := map[string]int64{
		"faults_kill9_kills": 1,
		"faults_kill9_in":    n, "faults_kill9_applied": n, "faults_kill9_model_samples": n,
		"faults_kill9_applied_twice": 0, "faults_kill9_lost": 0, "faults_kill9_missing_outputs": 0,
		"faults_kill9_jetstream_in": n, "faults_kill9_jetstream_applied": n, "faults_kill9_jetstream_model_samples": n,
		"faults_kill9_jetstream_applied_twice": 0, "faults_kill9_jetstream_lost": 0,
		"faults_kill9_jetstream_published": n, "faults_kill9_jetstream_duplicate_outputs": 0,
		"faults_kill9_jetstream_missing_outputs": 0,
	}
	for name, w := range want {
		if v, ok := got[name]; !ok || v != w {
			t.Errorf("%s: %d (printed: %t), want %d", name, v, ok, w)
		}
	}
	if p := got["faults_kill9_published"]; p < n {
		t.Errorf("%d core outputs seen for %d inputs, want at least one each", p, n)
	}
	if t.Failed() {
		t.Logf("output:\n%s", out.String())
	}
}
