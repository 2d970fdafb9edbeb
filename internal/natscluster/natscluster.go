// Package natscluster starts a NATS cluster with JetStream inside the
// calling process: nodes routed to each other on loopback ports, as the
// cluster tests and benchmarks of smtd run it.
package natscluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Cluster is a running cluster.
type Cluster struct {
	Servers []*server.Server
	// URL lists every node's client URL, comma-separated, as nats.url
	// and nats.Connect take it.
	URL string
}

// Start starts n nodes storing under dir/n1, dir/n2, ... (one node: a
// server without cluster) and returns once
// JetStream answers (it has a meta leader), or within a minute an error.
// Each configure function may change a node's options (its name, ports,
// store and routes are set before).
//
// The nodes' route ports are picked free, then bound by the nodes: a
// process in between (tests run in parallel) may take one. A start whose
// node does not come up is tried again, twice, on new ports.
func Start(dir string, n int, configure ...func(*server.Options)) (*Cluster, error) {
	var err error
	for range 3 {
		var c *Cluster
		if c, err = start(dir, n, configure); !errors.Is(err, errNotStarted) {
			return c, err
		}
	}
	return nil, err
}

var errNotStarted = errors.New("natscluster: a node did not start")

func start(dir string, n int, configure []func(*server.Options)) (*Cluster, error) {
	ports := make([]int, n)
	var routes []string
	for i := range ports {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ports[i] = l.Addr().(*net.TCPAddr).Port
		l.Close()
		routes = append(routes, fmt.Sprintf("nats-route://127.0.0.1:%d", ports[i]))
	}
	c := &Cluster{}
	var urls []string
	for i := range n {
		name := fmt.Sprintf("n%d", i+1)
		opts := &server.Options{
			ServerName: name, Host: "127.0.0.1", Port: -1, NoSigs: true,
			JetStream: true, StoreDir: filepath.Join(dir, name),
		}
		if n > 1 { // a single node is a plain server: JetStream needs no meta group
			opts.Cluster = server.ClusterOpts{Name: "smtd", Host: "127.0.0.1", Port: ports[i]}
			opts.Routes = server.RoutesFromStr(strings.Join(routes, ","))
		}
		for _, f := range configure {
			f(opts)
		}
		s, err := server.NewServer(opts)
		if err != nil {
			c.Shutdown()
			return nil, err
		}
		go s.Start()
		if !s.ReadyForConnections(10 * time.Second) {
			s.Shutdown()
			c.Shutdown()
			return nil, fmt.Errorf("%w: %s", errNotStarted, name)
		}
		c.Servers = append(c.Servers, s)
		urls = append(urls, s.ClientURL())
	}
	c.URL = strings.Join(urls, ",")
	if err := c.waitJetStream(time.Minute); err != nil {
		c.Shutdown()
		return nil, err
	}
	return c, nil
}

// Connect connects a client to the cluster (any node, reconnecting to
// the others) with a JetStream context.
func (c *Cluster) Connect() (*nats.Conn, jetstream.JetStream, error) {
	nc, err := nats.Connect(c.URL, nats.MaxReconnects(-1))
	if err != nil {
		return nil, nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return nc, js, nil
}

func (c *Cluster) waitJetStream(timeout time.Duration) error {
	nc, js, err := c.Connect()
	if err != nil {
		return err
	}
	defer nc.Close()
	deadline := time.Now().Add(timeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := js.AccountInfo(ctx)
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("natscluster: JetStream has no leader after %v: %w", timeout, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Shutdown stops every node that runs.
func (c *Cluster) Shutdown() {
	for _, s := range c.Servers {
		s.Shutdown()
	}
}
