package daemon

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// The daemon survives a restart of an external NATS server: it reconnects,
// and messages published after the restart are learned too.
func TestSurvivesServerRestart(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	store := t.TempDir()
	startServer := func() *server.Server {
		s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: port, JetStream: true, StoreDir: store, NoSigs: true})
		if err != nil {
			t.Fatal(err)
		}
		go s.Start()
		if !s.ReadyForConnections(10 * time.Second) {
			t.Fatal("NATS server did not start")
		}
		return s
	}
	s := startServer()
	cfg := testConfig(t, digitsPipeline("digits", "mnist.images", 16))
	cfg.NATS.URL = s.ClientURL()
	d := startDaemon(t, cfg)

	nc := connect(t, s.ClientURL())
	n1 := replayFile(t, nc, "mnist-raw-100.smtdrec", "mnist.images")
	waitFor(t, 30*time.Second, "first batch learned", func() bool { return pipelineStatus(d, "digits").Learned == int64(n1) })

	s.Shutdown()
	s.WaitForShutdown()
	s = startServer()
	defer s.Shutdown()
	waitFor(t, 30*time.Second, "daemon reconnected", func() bool { return d.nc.IsConnected() })

	nc2 := connect(t, s.ClientURL())
	n2 := replayFile(t, nc2, "mnist-raw-100.smtdrec", "mnist.images")
	waitFor(t, time.Minute, "messages after the restart learned", func() bool {
		return pipelineStatus(d, "digits").Learned == int64(n1+n2)
	})
	if err := d.Shutdown(context.Background()); err != nil { // while the server is up
		t.Fatal(err)
	}
}
