package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// argsEnv makes the test binary run the command line it holds (see
// TestMain), so tests can signal a real smtd process.
const argsEnv = "SMTD_TEST_ARGS"

func TestMain(m *testing.M) {
	if args := os.Getenv(argsEnv); args != "" {
		os.Exit(run(strings.Fields(args), os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

func TestHelpAndUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		want string // in stdout+stderr
	}{
		{[]string{"--help"}, 0, "smtd run [--config FILE]"},
		{nil, 2, "Usage:"},
		{[]string{"frobnicate"}, 2, `unknown command "frobnicate"`},
		{[]string{"run", "--help"}, 0, "-config file"},
		{[]string{"run", "--nope"}, 2, "flag provided but not defined: -nope"},
		{[]string{"inspect", "--help"}, 0, "-json"},
		{[]string{"inspect"}, 2, "smtd inspect [--json] CHECKPOINT"},
		{[]string{"inspect", "/nonexistent.ckpt"}, 1, "no such file"},
		{[]string{"record", "--help"}, 0, "-duration"},
		{[]string{"replay", "--help"}, 0, "-speed"},
		{[]string{"replay", "--help"}, 0, "-creds file"},
		{[]string{"record", "--help"}, 0, "-password-env variable"},
		{[]string{"record", "--help"}, 0, "-tls-ca file"},
		{[]string{"bench", "--help"}, 0, "kmeans"},
		{[]string{"bench", "nope"}, 2, `unknown benchmark "nope"`},
		{[]string{"run", "--config", "../../testdata/config/out-of-range.bad.yaml"}, 1, "pipelines[0].kmeans.atoms: must be in 1..1048576, got 0"},
		{[]string{"version"}, 0, "smtd "},
		// A wrong command line says what is wrong before the usage.
		{[]string{"record", "--count", "1"}, 2, "smtd record: --out FILE is needed"},
		{[]string{"record", "--out", "x.smtdrec"}, 2, "smtd record: name at least one subject to record"},
		{[]string{"replay"}, 2, "smtd replay: give one recording, got 0 arguments"},
		{[]string{"knn", "--train", "train.smtdrec"}, 2, "smtd knn: both --train and --test are needed"},
		{[]string{"run", "extra"}, 2, `smtd run: unexpected arguments ["extra"]`},
		{[]string{"lem", "--format", "xml", "x.smtdrec"}, 2, `smtd lem: --format must be csv or float32, got "xml"`},
	} {
		var out bytes.Buffer
		code := run(tc.args, &out, &out)
		if code != tc.code || !strings.Contains(out.String(), tc.want) {
			t.Errorf("smtd %v: exit %d, want %d; output does not contain %q:\n%s", tc.args, code, tc.code, tc.want, out.String())
		}
	}
}

func freePort(t *testing.T) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// smtd run reloads its config file on SIGHUP, applying live fields and
// refusing others by name, and shuts down cleanly on SIGTERM with a last
// checkpoint, the CPU profile and the execution trace asked for
// (--cpuprofile, --trace).
func TestRunReloadsOnSIGHUP(t *testing.T) {
	dir := t.TempDir()
	port := freePort(t)
	path := filepath.Join(dir, "smtd.yaml")
	writeConfig := func(rate float64, atoms int) {
		cfg := fmt.Sprintf("data_dir: %s\nnats: {listen: \"127.0.0.1:%d\"}\npipelines:\n  - name: digits\n    input: {subject: smtd.in.digits}\n    kmeans: {atoms: %d, learning_rate: %g}\n    smt: {dim: 8}\n", dir, port, atoms, rate)
		if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	writeConfig(1, 16)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	profile, trace := filepath.Join(dir, "cpu.prof"), filepath.Join(dir, "exec.trace")
	cmd.Env = append(os.Environ(), argsEnv+"=run --config "+path+" --cpuprofile "+profile+" --trace "+trace)
	var logs bytes.Buffer
	cmd.Stderr = &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cmd.Process.Kill()
		cmd.Wait()
		if t.Failed() {
			t.Logf("smtd logs:\n%s", logs.String())
		}
	}()
	url := fmt.Sprintf("nats://127.0.0.1:%d", port)
	var nc *nats.Conn
	deadline := time.Now().Add(time.Minute)
	for {
		var err error
		if nc, err = nats.Connect(url); err == nil {
			if _, err = nc.Request("smtd.status", nil, time.Second); err == nil {
				break
			}
			nc.Close()
		}
		if time.Now().After(deadline) {
			t.Fatalf("smtd did not come up: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	defer nc.Close()
	events, err := nc.SubscribeSync("smtd.events.reload")
	if err != nil {
		t.Fatal(err)
	}
	nc.Flush()

	reload := func() map[string]any {
		t.Helper()
		if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		m, err := events.NextMsg(10 * time.Second)
		if err != nil {
			t.Fatalf("no reload event: %v", err)
		}
		var ev map[string]any
		json.Unmarshal(m.Data, &ev)
		return ev
	}
	writeConfig(0.5, 16)
	if ev := reload(); fmt.Sprint(ev["applied"]) != "[pipelines[0].kmeans.learning_rate]" || ev["config_version"] != 2.0 {
		t.Errorf("live reload event %v", ev)
	}
	writeConfig(0.25, 32)
	if ev := reload(); fmt.Sprint(ev["refused"]) != "[pipelines[0].kmeans.atoms]" || ev["config_version"] != 2.0 {
		t.Errorf("refused reload event %v", ev)
	}

	// One image learned, so that shutdown has something to checkpoint.
	img := nats.NewMsg("smtd.in.digits")
	img.Header.Set("Smtd-Shape", "28,28")
	img.Header.Set("Smtd-Dtype", "uint8")
	img.Data = bytes.Repeat([]byte{0, 255, 7, 90}, 196)
	if err := nc.PublishMsg(img); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; {
		m, err := nc.Request("smtd.status", nil, time.Second)
		if err == nil && strings.Contains(string(m.Data), `"learned":1`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("image not learned")
		}
		time.Sleep(20 * time.Millisecond)
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("smtd exit: %v", err)
	}
	// A profile is gzip'd protocol buffers.
	if b, err := os.ReadFile(profile); err != nil || len(b) < 100 || b[0] != 0x1f || b[1] != 0x8b {
		t.Errorf("CPU profile: %d bytes, %v; want a gzip'd profile", len(b), err)
	}
	// A trace starts with its format's version, "go 1.N trace".
	if b, err := os.ReadFile(trace); err != nil || len(b) < 100 || !bytes.HasPrefix(b, []byte("go 1.")) || !bytes.Contains(b[:16], []byte(" trace")) {
		t.Errorf("execution trace: %d bytes, %v; want a trace", len(b), err)
	}
	for _, want := range []string{"reload applied", "reload not applied", "smtd stopped"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("logs do not say %q", want)
		}
	}
	files, _ := filepath.Glob(filepath.Join(dir, "checkpoints", "digits", "*.ckpt"))
	if len(files) == 0 {
		t.Fatal("no checkpoint at shutdown")
	}
	var out bytes.Buffer
	if code := run([]string{"inspect", files[len(files)-1]}, &out, &out); code != 0 || !strings.Contains(out.String(), "pipeline       digits (image)") {
		t.Errorf("inspect: exit %d:\n%s", code, out.String())
	}
}
