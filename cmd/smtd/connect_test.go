package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nkeys"

	"github.com/smtd/smtd/config"
	"github.com/smtd/smtd/daemon"
)

// smtd replay publishes as a producer of a daemon with users, with the
// password from the environment or an nkey seed file, and is refused
// without credentials.
func TestSecurityReplayCredentials(t *testing.T) {
	dir := t.TempDir()
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := kp.PublicKey()
	seed, _ := kp.Seed()
	seedFile := filepath.Join(dir, "cam2.nk")
	if err := os.WriteFile(seedFile, seed, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("SMTD_TEST_CAM_PASSWORD", "cam-secret")
	p := config.DefaultPipeline(config.Image, "digits")
	p.Input.Subject = "smtd.in.images" // as recorded
	p.KMeans.Atoms = 16
	p.SMT.Dim = 8
	cfg := config.Default()
	cfg.DataDir = dir
	cfg.NATS.Listen = "127.0.0.1:-1"
	cfg.Log.Level = "error"
	cfg.Pipelines = []config.Pipeline{p}
	cfg.NATS.Users = []config.User{
		{User: "cam1", PasswordEnv: "SMTD_TEST_CAM_PASSWORD", Role: config.RoleProducer},
		{NKey: pub, Role: config.RoleProducer},
	}
	var logs bytes.Buffer
	d, err := daemon.New(cfg, daemon.Options{Logger: daemon.NewLogger(&logs, "console")})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer d.Shutdown(context.Background())

	stream := filepath.Join("..", "..", "testdata", "streams", "mnist-raw-100.smtdrec")
	var out bytes.Buffer
	if code := run([]string{"replay", "--server", d.ClientURL(), stream}, &out, &out); code != 1 || !strings.Contains(strings.ToLower(out.String()), "authorization violation") {
		t.Errorf("replay without credentials: exit %d, want 1 with an authorization violation:\n%s", code, out.String())
	}
	learned := int64(0)
	for _, creds := range [][]string{
		{"--user", "cam1", "--password-env", "SMTD_TEST_CAM_PASSWORD"},
		{"--nkey", seedFile},
	} {
		out.Reset()
		args := append(append([]string{"replay", "--server", d.ClientURL()}, creds...), stream)
		if code := run(args, &out, &out); code != 0 || !strings.Contains(out.String(), "replayed 100 messages") {
			t.Fatalf("smtd %v: exit %d:\n%s", args, code, out.String())
		}
		learned += 100
		for deadline := time.Now().Add(time.Minute); d.Status().Pipelines[0].Learned != learned; {
			if time.Now().After(deadline) {
				t.Fatalf("replayed messages not learned: %d of %d", d.Status().Pipelines[0].Learned, learned)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	out.Reset()
	if code := run([]string{"replay", "--server", d.ClientURL(), "--password-env", "SMTD_TEST_CAM_PASSWORD", stream}, &out, &out); code != 1 || !strings.Contains(out.String(), "a password needs a user") {
		t.Errorf("password without user: exit %d:\n%s", code, out.String())
	}
}
