package daemon

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"
	"golang.org/x/crypto/bcrypt"
	"gopkg.in/yaml.v3"

	"github.com/smtd/smtd/config"
)

// secured is a daemon on an embedded server with one user per role: a
// producer whose password file holds a bcrypt hash, a consumer with an
// nkey, and an operator whose password is in the environment.
type secured struct {
	d        *Daemon
	cfg      *config.Config
	consumer nkeys.KeyPair
}

const (
	producerPassword = "cam-secret"
	operatorPassword = "ops-secret"
)

func startSecured(t *testing.T, more ...config.User) *secured {
	t.Helper()
	dir := t.TempDir()
	hash, err := bcrypt.GenerateFromPassword([]byte(producerPassword), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	pwFile := filepath.Join(dir, "cam1.pw")
	if err := os.WriteFile(pwFile, append(hash, '\n'), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("SMTD_TEST_OPS_PASSWORD", operatorPassword)
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := kp.PublicKey()
	cfg := testConfig(t, digitsPipeline("digits", "mnist.images", 16))
	cfg.NATS.Users = []config.User{
		{User: "cam1", PasswordFile: pwFile, Role: config.RoleProducer},
		{NKey: pub, Role: config.RoleConsumer},
		{User: "ops", PasswordEnv: "SMTD_TEST_OPS_PASSWORD", Role: config.RoleOperator},
	}
	cfg.NATS.Users = append(cfg.NATS.Users, more...)
	cfg.Observe.HTTP = "127.0.0.1:0"
	return &secured{d: startDaemon(t, cfg), cfg: cfg, consumer: kp}
}

// client is a connection that records the permission violations the
// server reports to it.
type client struct {
	*nats.Conn
	mu     sync.Mutex
	denied []string
}

func dial(t *testing.T, url string, opts ...nats.Option) *client {
	t.Helper()
	c := &client{}
	opts = append(opts, nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		if errors.Is(err, nats.ErrPermissionViolation) {
			c.mu.Lock()
			c.denied = append(c.denied, err.Error())
			c.mu.Unlock()
		}
	}))
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	c.Conn = nc
	return c
}

func (s *secured) producer(t *testing.T) *client {
	return dial(t, s.d.ClientURL(), nats.UserInfo("cam1", producerPassword))
}

func (s *secured) consumerConn(t *testing.T) *client {
	pub, _ := s.consumer.PublicKey()
	return dial(t, s.d.ClientURL(), nats.Nkey(pub, s.consumer.Sign))
}

func (s *secured) operator(t *testing.T) *client {
	return dial(t, s.d.ClientURL(), nats.UserInfo("ops", operatorPassword))
}

// wasDenied waits until the server has reported a permission violation
// for op ("Publish" or "Subscription") on subject. The server drops a
// denied message before anyone sees it and reports it afterwards, so once
// this returns the message is known to have gone nowhere.
func (c *client) wasDenied(t *testing.T, op, subject string) {
	t.Helper()
	want := op + ` to "` + subject + `"`
	waitFor(t, 10*time.Second, "permission violation: "+want, func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		for _, d := range c.denied {
			if strings.Contains(d, want) {
				return true
			}
		}
		return false
	})
}

// publishDenied publishes with a reply subject, as a request would, and
// waits for the server to refuse it.
func (c *client) publishDenied(t *testing.T, subject string, data []byte) {
	t.Helper()
	if err := c.PublishRequest(subject, c.NewRespInbox(), data); err != nil {
		t.Fatal(err)
	}
	c.wasDenied(t, "Publish", subject)
}

func TestSecurityAnonymousRefused(t *testing.T) {
	s := startSecured(t)
	for name, opts := range map[string][]nats.Option{
		"anonymous":      nil,
		"wrong password": {nats.UserInfo("cam1", "guess")},
		"unknown nkey":   {nats.Nkey(mustUserKey(t))},
	} {
		nc, err := nats.Connect(s.d.ClientURL(), opts...)
		if err == nil {
			nc.Close()
			t.Errorf("%s: connected, want refused", name)
			continue
		}
		if !errors.Is(err, nats.ErrAuthorization) {
			t.Errorf("%s: %v, want %v", name, err, nats.ErrAuthorization)
		}
	}
}

func mustUserKey(t *testing.T) (string, nats.SignatureHandler) {
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := kp.PublicKey()
	return pub, kp.Sign
}

// A producer's inputs are learned, with JetStream acknowledgements, as
// `smtd replay --jetstream` publishes them.
func TestSecurityProducerInputsLearned(t *testing.T) {
	s := startSecured(t)
	p := s.producer(t)
	n := replayFile(t, p.Conn, "mnist-raw-100.smtdrec", "mnist.images")
	waitFor(t, 60*time.Second, "the producer's inputs learned", func() bool {
		return pipelineStatus(s.d, "digits").Learned == int64(n)
	})
}

// A producer can only publish inputs: it cannot reload, checkpoint,
// delete or purge a stream, write the checkpoint object store or the
// latest pointer, or read outputs.
func TestSecurityProducerDenied(t *testing.T) {
	s := startSecured(t)
	ctx := context.Background()
	p := s.producer(t)
	stream := s.cfg.Pipelines[0].StreamName()
	before := pipelineStatus(s.d, "digits")
	reload, err := yaml.Marshal(s.cfg)
	if err != nil {
		t.Fatal(err)
	}

	p.publishDenied(t, "smtd.control.reload", reload)
	p.publishDenied(t, "smtd.control.checkpoint", nil)
	p.publishDenied(t, "$JS.API.STREAM.DELETE."+stream, nil)
	p.publishDenied(t, "$JS.API.STREAM.PURGE."+stream, nil)
	p.publishDenied(t, "$JS.API.CONSUMER.DELETE."+stream+"."+"x", nil)
	p.publishDenied(t, "$KV."+latestBucket+".digits", []byte("digits/planted"))
	p.publishDenied(t, "$O."+checkpointBucket+".C.planted", []byte("not a checkpoint"))
	p.publishDenied(t, "mnist.images.codes", []byte("forged output"))
	if _, err := p.SubscribeSync("mnist.images.codes"); err != nil {
		t.Fatal(err)
	}
	p.wasDenied(t, "Subscription", "mnist.images.codes")

	// The JetStream API refuses it as a whole, whatever the client.
	js, err := jetstream.New(p.Conn)
	if err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if _, err := js.ObjectStore(short, checkpointBucket); err == nil {
		t.Error("the producer opened the checkpoint object store")
	}

	if _, err := s.d.js.Stream(ctx, stream); err != nil {
		t.Errorf("stream %s: %v after the producer's delete", stream, err)
	}
	if e, err := s.d.store.latest.Get(ctx, "digits"); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Errorf("latest pointer after the producer's write: %v, %v; want none", e, err)
	}
	if _, err := s.d.store.obj.GetInfo(ctx, "planted"); !errors.Is(err, jetstream.ErrObjectNotFound) {
		t.Errorf("planted object: %v, want not found", err)
	}
	after := pipelineStatus(s.d, "digits")
	if after.Checkpoints != before.Checkpoints {
		t.Errorf("checkpoints %d → %d after the producer's request", before.Checkpoints, after.Checkpoints)
	}
	if v := s.d.Status().ConfigVersion; v != 1 {
		t.Errorf("config version %d after the producer's reload, want 1", v)
	}
}

// A consumer cannot publish inputs, but reads outputs and queries
// embeddings.
func TestSecurityConsumer(t *testing.T) {
	s := startSecured(t)
	ctx := context.Background()
	c := s.consumerConn(t)
	out := subscribe(t, c.Conn, "mnist.images.codes")
	subscribe(t, c.Conn, "smtd.events.errors")

	msgs := readStream(t, "mnist-raw-100.smtdrec")
	c.publishDenied(t, "mnist.images", msgs[0].Data)
	st, err := s.d.js.Stream(ctx, s.cfg.Pipelines[0].StreamName())
	if err != nil {
		t.Fatal(err)
	}
	if n := st.CachedInfo().State.Msgs; n != 0 {
		t.Errorf("input stream holds %d messages from a consumer, want 0", n)
	}
	if ps := pipelineStatus(s.d, "digits"); ps.Received != 0 || ps.Learned != 0 {
		t.Errorf("pipeline counters moved: received %d, learned %d", ps.Received, ps.Learned)
	}
	c.publishDenied(t, "smtd.control.reload", nil)
	c.publishDenied(t, "$JS.API.STREAM.DELETE."+s.cfg.Pipelines[0].StreamName(), nil)

	req := natsMsg("smtd.embed.digits", msgs[0].Header, msgs[0].Data)
	rep, err := c.RequestMsg(req, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if e := rep.Header.Get("Nats-Service-Error"); e != "" {
		t.Fatalf("embed error: %s", e)
	}
	if rep.Header.Get(HeaderModelVersion) == "" {
		t.Error("embedding reply names no model version")
	}

	p := s.producer(t)
	n := replayFile(t, p.Conn, "mnist-raw-100.smtdrec", "mnist.images")
	for i := range n {
		if _, err := out.NextMsg(30 * time.Second); err != nil {
			t.Fatalf("output %d of %d: %v", i, n, err)
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, d := range c.denied {
		if strings.Contains(d, "Subscription") {
			t.Errorf("consumer's subscription refused: %s", d)
		}
	}
}

// An operator reloads and reads status, and looks at streams without
// being able to delete them.
func TestSecurityOperator(t *testing.T) {
	s := startSecured(t)
	ctx := context.Background()
	o := s.operator(t)

	var st Status
	request(t, o.Conn, "smtd.status", nil, &st)
	if len(st.Pipelines) != 1 || st.Pipelines[0].Name != "digits" {
		t.Fatalf("status %+v, want the digits pipeline", st)
	}
	if _, err := o.Request("$SRV.PING.smtd", nil, 10*time.Second); err != nil {
		t.Errorf("service discovery: %v", err)
	}

	next := *s.cfg
	next.Pipelines = []config.Pipeline{s.cfg.Pipelines[0]}
	next.Pipelines[0].KMeans.LearningRate = 0.25
	body, err := yaml.Marshal(&next)
	if err != nil {
		t.Fatal(err)
	}
	var res ReloadResult
	request(t, o.Conn, "smtd.control.reload", body, &res)
	if res.ConfigVersion != 2 || res.Error != "" {
		t.Fatalf("operator's reload: %+v, want config version 2", res)
	}

	js, err := jetstream.New(o.Conn)
	if err != nil {
		t.Fatal(err)
	}
	stream := s.cfg.Pipelines[0].StreamName()
	if _, err := js.Stream(ctx, stream); err != nil {
		t.Errorf("operator's stream info: %v", err)
	}
	o.publishDenied(t, "$JS.API.STREAM.DELETE."+stream, nil)
	o.publishDenied(t, "$KV."+latestBucket+".digits", []byte("digits/planted"))
	o.publishDenied(t, "mnist.images", nil)
	if _, err := s.d.js.Stream(ctx, stream); err != nil {
		t.Errorf("stream %s: %v after the operator's delete", stream, err)
	}
}

// selfSigned writes a self-signed CA certificate for 127.0.0.1 that also
// serves as server and client certificate, and returns the file names.
func selfSigned(t *testing.T) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "smtd test"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1)},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}

// The embedded server serves TLS: a client that trusts the CA connects and
// its inputs are learned, one that does not is refused; with ca_file, a
// client certificate is required too.
func TestSecurityTLS(t *testing.T) {
	cert, key := selfSigned(t)
	t.Run("server", func(t *testing.T) {
		cfg := testConfig(t, digitsPipeline("digits", "mnist.images", 16))
		cfg.NATS.TLS = config.TLS{CertFile: cert, KeyFile: key}
		d := startDaemon(t, cfg)
		if !strings.HasPrefix(d.ClientURL(), "tls://") {
			t.Errorf("client URL %s, want tls://", d.ClientURL())
		}
		if nc, err := nats.Connect(d.ClientURL()); err == nil {
			nc.Close()
			t.Error("a client without the CA connected")
		}
		nc := dial(t, d.ClientURL(), nats.RootCAs(cert))
		n := replayFile(t, nc.Conn, "mnist-raw-100.smtdrec", "mnist.images")
		waitFor(t, 60*time.Second, "inputs over TLS learned", func() bool {
			return pipelineStatus(d, "digits").Learned == int64(n)
		})
	})
	t.Run("client certificates", func(t *testing.T) {
		cfg := testConfig(t, digitsPipeline("digits", "mnist.images", 16))
		cfg.NATS.TLS = config.TLS{CertFile: cert, KeyFile: key, CAFile: cert}
		d := startDaemon(t, cfg)
		if nc, err := nats.Connect(d.ClientURL(), nats.RootCAs(cert)); err == nil {
			nc.Close()
			t.Error("a client without a certificate connected")
		}
		nc := dial(t, d.ClientURL(), nats.RootCAs(cert), nats.ClientCert(cert, key))
		var st Status
		request(t, nc.Conn, "smtd.status", nil, &st)
	})
	t.Run("monitoring server", func(t *testing.T) {
		cfg := observedConfig(t, digitsPipeline("digits", "mnist.images", 16))
		cfg.Observe.TLS = config.TLS{CertFile: cert, KeyFile: key}
		d := startDaemon(t, cfg)
		if resp, err := http.Get("http://" + d.HTTPAddr() + "/healthz"); err == nil {
			if resp.StatusCode == http.StatusOK {
				t.Error("plain HTTP answered on the TLS port")
			}
			resp.Body.Close()
		}
		if code := getStatus(t, httpsClient(t, cert), "https://"+d.HTTPAddr()+"/api/status"); code != http.StatusOK {
			t.Errorf("https /api/status: %d", code)
		}
	})
	t.Run("monitoring server with client certificates", func(t *testing.T) {
		cfg := observedConfig(t, digitsPipeline("digits", "mnist.images", 16))
		cfg.Observe.HTTP = "0.0.0.0:0" // beyond loopback: the certificates are its authentication
		cfg.Observe.TLS = config.TLS{CertFile: cert, KeyFile: key, CAFile: cert}
		if err := cfg.Validate(); err != nil {
			t.Fatal(err)
		}
		d := startDaemon(t, cfg)
		_, port, _ := net.SplitHostPort(d.HTTPAddr())
		url := "https://127.0.0.1:" + port + "/api/status"
		if resp, err := httpsClient(t, cert).Get(url); err == nil {
			resp.Body.Close()
			t.Errorf("a client without a certificate got %d", resp.StatusCode)
		}
		pair, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			t.Fatal(err)
		}
		if code := getStatus(t, httpsClient(t, cert, pair), url); code != http.StatusOK {
			t.Errorf("a client with a certificate: %d", code)
		}
	})
	t.Run("monitoring server with a bad key", func(t *testing.T) {
		cfg := observedConfig(t, digitsPipeline("digits", "mnist.images", 16))
		cfg.Observe.TLS = config.TLS{CertFile: cert, KeyFile: cert} // readable, but no key
		d, err := New(cfg, Options{Logger: NewLogger(testWriter{t}, "console")})
		if err != nil {
			t.Fatal(err)
		}
		if err := d.Start(context.Background()); err == nil || !strings.Contains(err.Error(), "observe.tls") {
			t.Errorf("Start with a certificate for a key: %v, want an error naming observe.tls", err)
		}
	})
}

// With password users, the monitoring server asks for one of them, as
// the NATS server does: operators may use all of it, consumers the embed
// and neighbours endpoints, producers nothing; the probes stay open.
func TestSecurityHTTP(t *testing.T) {
	t.Setenv("SMTD_TEST_VIEWER_PASSWORD", "viewer-secret")
	s := startSecured(t, config.User{User: "viewer", PasswordEnv: "SMTD_TEST_VIEWER_PASSWORD", Role: config.RoleConsumer})
	do := func(method, path, user, password string) *http.Response {
		t.Helper()
		var body io.Reader
		if method == http.MethodPost {
			body = bytes.NewReader(mustRead(t, "digit-7.png"))
		}
		req, err := http.NewRequest(method, "http://"+s.d.HTTPAddr()+path, body)
		if err != nil {
			t.Fatal(err)
		}
		if user != "" {
			req.SetBasicAuth(user, password)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}
	const embed = "/api/pipelines/digits/embed"
	for _, tc := range []struct {
		method, path, user, password string
		want                         int
	}{
		{"GET", "/healthz", "", "", http.StatusOK},
		{"GET", "/", "", "", http.StatusUnauthorized},
		{"GET", "/metrics", "", "", http.StatusUnauthorized},
		{"POST", embed, "", "", http.StatusUnauthorized},
		{"GET", "/", "ops", "wrong", http.StatusUnauthorized},
		{"GET", "/", "nobody", operatorPassword, http.StatusUnauthorized},
		{"GET", "/", "cam1", "wrong", http.StatusUnauthorized}, // a bcrypt hash
		{"GET", "/", "cam1", producerPassword, http.StatusForbidden},
		{"GET", "/", "cam1", producerPassword, http.StatusForbidden}, // the hash's answer, kept
		{"POST", embed, "cam1", producerPassword, http.StatusForbidden},
		{"GET", "/", "viewer", "viewer-secret", http.StatusForbidden},
		{"GET", "/api/status", "viewer", "viewer-secret", http.StatusForbidden},
		{"POST", embed, "viewer", "viewer-secret", http.StatusOK},
		{"GET", "/", "ops", operatorPassword, http.StatusOK},
		{"GET", "/metrics", "ops", operatorPassword, http.StatusOK},
		{"GET", "/api/status", "ops", operatorPassword, http.StatusOK},
		{"GET", "/static/app.js", "ops", operatorPassword, http.StatusOK},
		{"POST", embed, "ops", operatorPassword, http.StatusOK},
	} {
		resp := do(tc.method, tc.path, tc.user, tc.password)
		if resp.StatusCode != tc.want {
			t.Errorf("%s %s as %q: %d, want %d", tc.method, tc.path, tc.user, resp.StatusCode, tc.want)
		}
		if resp.StatusCode == http.StatusUnauthorized && !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Basic ") {
			t.Errorf("%s %s as %q: 401 without a basic challenge", tc.method, tc.path, tc.user)
		}
	}
	if resp := do("GET", "/readyz", "", ""); resp.StatusCode == http.StatusUnauthorized {
		t.Error("/readyz asks for a password")
	}

	// Three logins above failed; seven more make this client refused,
	// with the right password too, while requests without one are still
	// asked for it.
	for range loginFailures - 3 {
		if resp := do("GET", "/", "ops", "guess"); resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("a wrong password: %d, want 401", resp.StatusCode)
		}
	}
	resp := do("GET", "/", "ops", operatorPassword)
	if resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("after %d failed logins: %d, want 429", loginFailures, resp.StatusCode)
	}
	if after, err := strconv.Atoi(resp.Header.Get("Retry-After")); err != nil || after < 1 || after > 60 {
		t.Errorf("Retry-After %q, want 1 to 60 seconds", resp.Header.Get("Retry-After"))
	}
	if resp := do("GET", "/", "", ""); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("without a password while refused: %d, want 401", resp.StatusCode)
	}
}

func TestLoginLimit(t *testing.T) {
	l := loginLimit{window: time.Minute, failures: map[string]int{}}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := 1; i <= loginFailures; i++ {
		if wait := l.refused("10.0.0.1", t0); wait != 0 {
			t.Fatalf("refused after %d failures", i-1)
		}
		if last := l.failed("10.0.0.1", t0.Add(time.Second)); last != (i == loginFailures) {
			t.Errorf("failure %d reported as the last: %v", i, last)
		}
	}
	if wait := l.refused("10.0.0.1", t0.Add(20*time.Second)); wait != 40*time.Second {
		t.Errorf("refused for %v, want the 40 s left of the window", wait)
	}
	if wait := l.refused("10.0.0.2", t0.Add(20*time.Second)); wait != 0 {
		t.Errorf("another client refused for %v", wait)
	}
	if wait := l.refused("10.0.0.1", t0.Add(time.Minute)); wait != 0 {
		t.Errorf("refused for %v in the next window", wait)
	}

	// Past loginClients addresses in a window, new ones are not followed.
	for i := range loginClients {
		l.failed(strconv.Itoa(i), t0.Add(time.Minute))
	}
	for range loginFailures {
		l.failed("10.0.0.3", t0.Add(time.Minute))
	}
	if len(l.failures) != loginClients {
		t.Errorf("%d clients followed, want at most %d", len(l.failures), loginClients)
	}
	if wait := l.refused("10.0.0.3", t0.Add(time.Minute)); wait != 0 {
		t.Errorf("an unfollowed client refused for %v", wait)
	}
}

func TestUnknownUserSecret(t *testing.T) {
	hash, err := bcrypt.GenerateFromPassword([]byte("x"), bcrypt.MinCost+1)
	if err != nil {
		t.Fatal(err)
	}
	plain := map[string]*httpUser{"ops": {secret: "ops-secret"}}
	hashed := map[string]*httpUser{"ops": {secret: "ops-secret"}, "cam1": {secret: string(hash)}}
	for _, tc := range []struct {
		name  string
		users map[string]*httpUser
		cost  int // 0: not a hash
	}{{"plain", plain, 0}, {"bcrypt", hashed, bcrypt.MinCost + 1}} {
		secret, err := unknownSecret(tc.users)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if cost, err := bcrypt.Cost([]byte(secret)); tc.cost != 0 && (err != nil || cost != tc.cost) {
			t.Errorf("%s: the unknown user's hash has cost %d (%v), want %d", tc.name, cost, err, tc.cost)
		}
		if tc.cost == 0 && isBcrypt(secret) {
			t.Errorf("%s: the unknown user's secret is a hash, the users' are not", tc.name)
		}
		u := &httpUser{secret: secret}
		for _, pw := range []string{"", "ops-secret", "x"} {
			if u.accepts(pw) {
				t.Errorf("%s: the unknown user accepts %q", tc.name, pw)
			}
		}
	}
}

// httpsClient trusts the server certificates that the CA in caFile signed
// and presents mine, if any.
func httpsClient(t *testing.T, caFile string, mine ...tls.Certificate) *http.Client {
	t.Helper()
	caPEM, err := os.ReadFile(caFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		t.Fatalf("%s: no PEM certificate", caFile)
	}
	return &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: mine}}}
}

// getStatus is the status code of a GET of url with c.
func getStatus(t *testing.T, c *http.Client, url string) int {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// The daemon authenticates to an external server with a password from a
// file, an nkey seed file or a token from the environment, and refuses to
// start with a wrong one.
func TestSecurityExternalServer(t *testing.T) {
	dir := t.TempDir()
	pwFile := filepath.Join(dir, "smtd.pw")
	if err := os.WriteFile(pwFile, []byte("daemon-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := kp.PublicKey()
	seed, _ := kp.Seed()
	seedFile := filepath.Join(dir, "smtd.nk")
	if err := os.WriteFile(seedFile, seed, 0o600); err != nil {
		t.Fatal(err)
	}
	s := startNATS(t, func(o *server.Options) {
		o.Users = []*server.User{{Username: "smtd", Password: "daemon-secret"}, {Username: "cam", Password: "cam-secret"}}
		o.Nkeys = []*server.NkeyUser{{Nkey: pub}}
	})

	for _, tc := range []struct {
		name string
		auth config.ClientAuth
	}{
		{"password file", config.ClientAuth{User: "smtd", PasswordFile: pwFile}},
		{"nkey seed file", config.ClientAuth{NKeyFile: seedFile}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := digitsPipeline("digits", "mnist.images", 16)
			p.Input.Stream = "SMTD_" + strings.ToUpper(strings.ReplaceAll(tc.name, " ", "_"))
			p.Input.Subject = "ext." + strings.ReplaceAll(tc.name, " ", "-")
			p.Output.Subject = p.Input.Subject + ".codes"
			cfg := testConfig(t, p)
			cfg.NATS.URL = s.ClientURL()
			cfg.NATS.Auth = tc.auth
			cfg.Checkpoint.ObjectStore = false
			d := startDaemon(t, cfg)
			nc := dial(t, s.ClientURL(), nats.UserInfo("cam", "cam-secret"))
			n := replayFile(t, nc.Conn, "mnist-raw-100.smtdrec", p.Input.Subject)
			waitFor(t, 60*time.Second, "inputs learned", func() bool {
				return pipelineStatus(d, "digits").Learned == int64(n)
			})
		})
	}
	t.Run("token from the environment", func(t *testing.T) {
		ts, err := server.NewServer(&server.Options{
			Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoSigs: true, Authorization: "daemon-token",
		})
		if err != nil {
			t.Fatal(err)
		}
		go ts.Start()
		if !ts.ReadyForConnections(10 * time.Second) {
			t.Fatal("NATS server did not start")
		}
		defer ts.Shutdown()
		t.Setenv("SMTD_TEST_TOKEN", "daemon-token")
		cfg := testConfig(t, digitsPipeline("digits", "mnist.images", 16))
		cfg.NATS.URL = ts.ClientURL()
		cfg.NATS.Auth = config.ClientAuth{TokenEnv: "SMTD_TEST_TOKEN"}
		d := startDaemon(t, cfg)
		var st Status
		request(t, dial(t, ts.ClientURL(), nats.Token("daemon-token")).Conn, "smtd.status", nil, &st)
		if len(st.Pipelines) != 1 {
			t.Errorf("status %+v, want one pipeline", st)
		}
		d.Shutdown(context.Background()) // before the server goes
	})
	t.Run("wrong password", func(t *testing.T) {
		t.Setenv("SMTD_TEST_PASSWORD", "guess")
		cfg := testConfig(t, digitsPipeline("digits", "mnist.images", 16))
		cfg.NATS.URL = s.ClientURL()
		cfg.NATS.Auth = config.ClientAuth{User: "smtd", PasswordEnv: "SMTD_TEST_PASSWORD"}
		d, err := New(cfg, Options{Logger: NewLogger(testWriter{t}, "console")})
		if err != nil {
			t.Fatal(err)
		}
		if err := d.Start(context.Background()); !errors.Is(err, nats.ErrAuthorization) {
			t.Errorf("start with a wrong password: %v, want %v", err, nats.ErrAuthorization)
		}
	})
}

// Inconsistent client credentials are refused before connecting.
func TestSecurityClientOptionsRefused(t *testing.T) {
	f := filepath.Join(t.TempDir(), "pw")
	if err := os.WriteFile(f, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		auth config.ClientAuth
		tls  config.TLS
	}{
		{name: "two ways", auth: config.ClientAuth{User: "a", PasswordFile: f, TokenFile: f}},
		{name: "password without user", auth: config.ClientAuth{PasswordFile: f}},
		{name: "user without password", auth: config.ClientAuth{User: "a"}},
		{name: "unreadable seed", auth: config.ClientAuth{NKeyFile: f + ".missing"}},
		{name: "half a certificate", tls: config.TLS{CertFile: f}},
	} {
		if _, err := ClientOptions(tc.auth, tc.tls); !errors.Is(err, ErrCredentials) {
			t.Errorf("%s: %v, want ErrCredentials", tc.name, err)
		}
	}
}
