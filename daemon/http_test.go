package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"image/png"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	pmodel "github.com/prometheus/common/model"

	"github.com/smtd/smtd/config"
	"github.com/smtd/smtd/record"
)

// observedConfig is testConfig with the monitoring server on a free port.
func observedConfig(t testing.TB, pipelines ...config.Pipeline) *config.Config {
	cfg := testConfig(t, pipelines...)
	cfg.Observe.HTTP = "127.0.0.1:0"
	return cfg
}

// httpGet fetches path from the daemon's monitoring server.
func httpGet(t testing.TB, d *Daemon, path string) (int, http.Header, []byte) {
	t.Helper()
	resp, err := http.Get("http://" + d.HTTPAddr() + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, body
}

// publishAll publishes msgs to subject through JetStream and waits until
// the stream has stored them all.
func publishAll(t testing.TB, nc *nats.Conn, subject string, msgs []*record.Message) {
	t.Helper()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range msgs {
		if _, err := js.PublishMsgAsync(natsMsg(subject, m.Header, m.Data)); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(30 * time.Second):
		t.Fatal("JetStream did not acknowledge the inputs within 30s")
	}
}

// scrape reads /metrics with the Prometheus text parser.
func scrape(t testing.TB, d *Daemon) map[string]*dto.MetricFamily {
	t.Helper()
	code, _, body := httpGet(t, d, "/metrics")
	if code != http.StatusOK {
		t.Fatalf("/metrics: %d %s", code, body)
	}
	p := expfmt.NewTextParser(pmodel.UTF8Validation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		t.Fatalf("/metrics does not parse: %v\n%s", err, body)
	}
	return fams
}

// metricValue returns the value of the series of family name whose labels
// include want, and whether there is one.
func metricValue(fams map[string]*dto.MetricFamily, name string, want map[string]string) (float64, bool) {
	f := fams[name]
	if f == nil {
		return 0, false
	}
next:
	for _, m := range f.Metric {
		have := map[string]string{}
		for _, l := range m.Label {
			have[l.GetName()] = l.GetValue()
		}
		for k, v := range want {
			if have[k] != v {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			return m.Counter.GetValue(), true
		case m.Gauge != nil:
			return m.Gauge.GetValue(), true
		case m.Histogram != nil:
			return float64(m.Histogram.GetSampleCount()), true
		case m.Untyped != nil:
			return m.Untyped.GetValue(), true
		}
	}
	return 0, false
}

// Prometheus scrapes what the pipelines count, as they count it: while a
// recorded MNIST stream flows through JetStream, every named series is
// there, learned messages and the model version grow between two scrapes,
// and the counters agree with smtd.status.
func TestMetricsWhileLearning(t *testing.T) {
	p := digitsPipeline("digits", "metrics.images", 16)
	cfg := observedConfig(t, p)
	cfg.Checkpoint.EverySamples = 200
	d := startDaemon(t, cfg)
	pl := map[string]string{"pipeline": "digits"}
	nc := connect(t, d.ClientURL())
	msgs := readStream(t, "mnist-train-1000.smtdrec")
	bad := &record.Message{Header: nats.Header{HeaderShape: {"27,29"}, HeaderDtype: {"uint8"}}, Data: make([]byte, 784)}
	publishAll(t, nc, p.Input.Subject, append([]*record.Message{bad}, msgs[:500]...))
	waitFor(t, time.Minute, "first half learned", func() bool {
		return pipelineStatus(d, "digits").Learned == 500 && pipelineStatus(d, "digits").Checkpoints > 0
	})
	if _, err := nc.Request("smtd.embed.digits", mustRead(t, "digit-3.png"), 10*time.Second); err != nil {
		t.Fatal(err)
	}
	first := scrape(t, d)
	publishAll(t, nc, p.Input.Subject, msgs[500:])
	// A batch's outputs are published after its messages count as learned.
	waitFor(t, time.Minute, "second half learned and published", func() bool {
		st := pipelineStatus(d, "digits")
		return st.Learned == 1000 && st.Published == 1000
	})
	// A batch's latency is observed once its outputs are handed to the
	// publisher, which may have published them already.
	minBatches := math.Ceil(1000 / float64(p.Batch.Size))
	var second map[string]*dto.MetricFamily
	waitFor(t, 10*time.Second, "the last batch's latency observed", func() bool {
		second = scrape(t, d)
		n, _ := metricValue(second, "smtd_batch_seconds", pl)
		return n >= minBatches
	})

	with := func(k, v string) map[string]string { return map[string]string{"pipeline": "digits", k: v} }
	for _, s := range []struct {
		name   string
		labels map[string]string
	}{
		{"smtd_messages_total", with("outcome", "received")},
		{"smtd_messages_total", with("outcome", "learned")},
		{"smtd_messages_total", with("outcome", "not_learned")},
		{"smtd_messages_total", with("outcome", "rejected")},
		{"smtd_messages_total", with("outcome", "redelivered")},
		{"smtd_messages_total", with("outcome", "lost")},
		{"smtd_rejected_total", with("reason", ReasonBadShape)},
		{"smtd_published_total", pl},
		{"smtd_rollbacks_total", pl},
		{"smtd_checkpoints_total", pl},
		{"smtd_lag_messages", pl},
		{"smtd_model_version", pl},
		{"smtd_checkpoint_age_seconds", pl},
		{"smtd_checkpoint_bytes", pl},
		{"smtd_health", with("state", HealthOK)},
		{"smtd_health", with("state", HealthInputMissing)},
		{"smtd_batch_seconds", pl},
		{"smtd_query_seconds", with("endpoint", "embed")},
		{"smtd_query_seconds", with("endpoint", "neighbours")},
		{"go_goroutines", nil},
		{"process_cpu_seconds_total", nil},
	} {
		if _, ok := metricValue(first, s.name, s.labels); !ok {
			t.Errorf("no %s%v in the first scrape", s.name, s.labels)
		}
	}
	learned1, _ := metricValue(first, "smtd_messages_total", with("outcome", "learned"))
	learned2, _ := metricValue(second, "smtd_messages_total", with("outcome", "learned"))
	if learned1 != 500 || learned2 != 1000 {
		t.Errorf("learned %v then %v, want 500 then 1000", learned1, learned2)
	}
	v1, _ := metricValue(first, "smtd_model_version", pl)
	v2, _ := metricValue(second, "smtd_model_version", pl)
	if !(v1 > 0 && v2 > v1) {
		t.Errorf("model version %v then %v, want it to grow", v1, v2)
	}
	if r, _ := metricValue(second, "smtd_rejected_total", with("reason", ReasonBadShape)); r != 1 {
		t.Errorf("smtd_rejected_total{reason=%q} = %v, want 1", ReasonBadShape, r)
	}
	if h, _ := metricValue(second, "smtd_health", with("state", HealthOK)); h != 1 {
		t.Errorf("smtd_health{state=ok} = %v, want 1", h)
	}
	if h, _ := metricValue(second, "smtd_health", with("state", HealthInputMissing)); h != 0 {
		t.Errorf("smtd_health{state=input_missing} = %v, want 0", h)
	}
	if n, _ := metricValue(second, "smtd_query_seconds", with("endpoint", "embed")); n != 1 {
		t.Errorf("smtd_query_seconds{endpoint=embed} counts %v queries, want 1", n)
	}
	if n, _ := metricValue(second, "smtd_batch_seconds", pl); n < minBatches {
		t.Errorf("smtd_batch_seconds counts %v batches for 1000 messages of batches of %d", n, p.Batch.Size)
	}
	if b, _ := metricValue(second, "smtd_checkpoint_bytes", pl); b < 1000 {
		t.Errorf("smtd_checkpoint_bytes = %v", b)
	}
	if pub, _ := metricValue(second, "smtd_published_total", pl); pub != 1000 {
		t.Errorf("smtd_published_total %v, want 1000 as status says", pub)
	}
}

func mustRead(t testing.TB, image string) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "testdata", "images", image))
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// Once Start has returned, the daemon is alive and ready; the micro
// service's stats carry each pipeline's health.
func TestHealthzReadyzAfterStart(t *testing.T) {
	d := startDaemon(t, observedConfig(t, digitsPipeline("digits", "ready.images", 16)))
	if code, _, body := httpGet(t, d, "/healthz"); code != http.StatusOK {
		t.Errorf("/healthz: %d %s", code, body)
	}
	code, _, body := httpGet(t, d, "/readyz")
	var r Readiness
	if err := json.Unmarshal(body, &r); err != nil || code != http.StatusOK || !r.Ready {
		t.Errorf("/readyz: %d %s (%v)", code, body, err)
	}
	if h := endpointHealth(t, connect(t, d.ClientURL()), "embed-digits"); h.State != HealthOK {
		t.Errorf("micro stats of embed-digits: health %+v, want ok", h)
	}
}

// endpointHealth reads the health in the micro service's stats of the
// endpoint.
func endpointHealth(t testing.TB, nc *nats.Conn, endpoint string) Health {
	t.Helper()
	var st micro.Stats
	request(t, nc, "$SRV.STATS.smtd", nil, &st)
	for _, e := range st.Endpoints {
		if e.Name != endpoint {
			continue
		}
		var data struct {
			Pipeline string `json:"pipeline"`
			Health   Health `json:"health"`
		}
		if err := json.Unmarshal(e.Data, &data); err != nil {
			t.Fatalf("stats data of %s: %v: %s", endpoint, err, e.Data)
		}
		return data.Health
	}
	t.Fatalf("no endpoint %s in the service stats", endpoint)
	return Health{}
}

// A pipeline whose input stream is deleted makes the daemon not ready,
// with the pipeline and why in the body, while it stays alive; the micro
// service's stats say so too.
func TestReadyzNotReadyWhenInputDeleted(t *testing.T) {
	p := digitsPipeline("digits", "unready.images", 16)
	p.Input.OnReset = config.ResetRefuse
	d := startDaemon(t, observedConfig(t, p))
	nc := connect(t, d.ClientURL())
	if err := jetStream(t, nc).DeleteStream(context.Background(), "SMTD_DIGITS"); err != nil {
		t.Fatal(err)
	}
	var r Readiness
	waitFor(t, 20*time.Second, "/readyz 503", func() bool {
		code, _, body := httpGet(t, d, "/readyz")
		r = Readiness{}
		json.Unmarshal(body, &r)
		return code == http.StatusServiceUnavailable
	})
	if r.Ready || len(r.Reasons) != 1 || !strings.Contains(r.Reasons[0], "digits") || !strings.Contains(r.Reasons[0], HealthInputMissing) {
		t.Errorf("/readyz body %+v does not name the pipeline and input_missing", r)
	}
	if code, _, _ := httpGet(t, d, "/healthz"); code != http.StatusOK {
		t.Errorf("/healthz %d while not ready, want 200: the process still serves", code)
	}
	if h := endpointHealth(t, nc, "embed-digits"); h.State != HealthInputMissing {
		t.Errorf("micro stats of embed-digits: health %+v, want input_missing", h)
	}
}

// The page's JSON endpoints: status, the atom sheet of an image pipeline
// (a PNG that changes as the model learns), the embedding of an uploaded
// image and errors as JSON with the status code of the embed endpoint.
func TestPageEndpoints(t *testing.T) {
	p := digitsPipeline("digits", "page.images", 16)
	d := startDaemon(t, observedConfig(t, p))
	nc := connect(t, d.ClientURL())

	code, _, body := httpGet(t, d, "/")
	if code != http.StatusOK || !strings.Contains(string(body), `id="p-digits"`) {
		t.Errorf("/: %d, no section for digits:\n%s", code, body)
	}
	for _, static := range []string{"/static/app.js", "/static/style.css"} {
		if code, _, _ := httpGet(t, d, static); code != http.StatusOK {
			t.Errorf("%s: %d", static, code)
		}
	}
	var st Status
	if code, _, body := httpGet(t, d, "/api/status"); code != http.StatusOK || json.Unmarshal(body, &st) != nil || len(st.Pipelines) != 1 {
		t.Errorf("/api/status: %d %s", code, body)
	}

	atoms := func() []byte {
		code, h, body := httpGet(t, d, "/api/pipelines/digits/atoms.png")
		if code != http.StatusOK || h.Get("Content-Type") != "image/png" {
			t.Fatalf("atoms.png: %d %s %s", code, h.Get("Content-Type"), body)
		}
		img, err := png.Decode(bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		// 16 atoms of 6x6 patches drawn 5 times larger on a 4x4 grid.
		if b := img.Bounds(); b.Dx() != 4*31+1 || b.Dy() != 4*31+1 {
			t.Errorf("atom sheet %v, want 125x125", b)
		}
		return body
	}
	before := atoms()
	publishAll(t, nc, p.Input.Subject, readStream(t, "mnist-train-1000.smtdrec")[:300])
	waitFor(t, time.Minute, "learned", func() bool { return pipelineStatus(d, "digits").Learned == 300 })
	if bytes.Equal(before, atoms()) {
		t.Error("the atom sheet did not change after 300 images")
	}

	resp, err := http.Post("http://"+d.HTTPAddr()+"/api/pipelines/digits/embed", "image/png", bytes.NewReader(mustRead(t, "digit-7.png")))
	if err != nil {
		t.Fatal(err)
	}
	var e EmbedReply
	json.NewDecoder(resp.Body).Decode(&e)
	resp.Body.Close()
	want, _ := pipelineStatus(d, "digits").Model["output_dim"].(int)
	if resp.StatusCode != http.StatusOK || len(e.Vector) != want || e.ModelVersion == 0 {
		t.Errorf("embed: %d, %d dimensions (want %d), version %d", resp.StatusCode, len(e.Vector), want, e.ModelVersion)
	}
	resp, err = http.Post("http://"+d.HTTPAddr()+"/api/pipelines/digits/embed", "image/png", strings.NewReader("not an image"))
	if err != nil {
		t.Fatal(err)
	}
	var bad map[string]string
	json.NewDecoder(resp.Body).Decode(&bad)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest || bad["error"] == "" {
		t.Errorf("embed of garbage: %d %v, want 400 with an error", resp.StatusCode, bad)
	}
	if code, _, _ := httpGet(t, d, "/api/pipelines/nope/atoms.png"); code != http.StatusNotFound {
		t.Errorf("atoms of an unknown pipeline: %d, want 404", code)
	}
}

// A text pipeline's word box: the neighbours of a word over HTTP, the
// same answers as the neighbours endpoint, errors with their status; it
// has no atom picture; an image pipeline has no neighbours.
func TestNeighboursOverHTTP(t *testing.T) {
	d := startDaemon(t, observedConfig(t, wordsPipeline(), digitsPipeline("digits", "mnist.images", 16)))
	nc := connect(t, d.ClientURL())
	if code, _, body := httpGet(t, d, "/api/pipelines/words/neighbours?word=the"); code != http.StatusServiceUnavailable {
		t.Errorf("before any solve: %d %s, want 503", code, body)
	}
	n := replayFile(t, nc, "brown-2000.smtdrec", "")
	waitFor(t, time.Minute, "sentences learned", func() bool { return pipelineStatus(d, "words").Learned == int64(n) })
	request(t, nc, "smtd.control.checkpoint", nil, nil)

	code, _, body := httpGet(t, d, "/api/pipelines/words/neighbours?word=The&k=5")
	var got, want NeighboursReply
	if err := json.Unmarshal(body, &got); err != nil || code != http.StatusOK {
		t.Fatalf("neighbours: %d %s", code, body)
	}
	request(t, nc, "smtd.neighbours.words", []byte(`{"word": "The", "k": 5}`), &want)
	if len(got.Neighbours) != 5 || got.Word != "the" || got.Neighbours[0] != want.Neighbours[0] {
		t.Errorf("HTTP neighbours %+v, endpoint %+v", got, want)
	}
	for path, wantCode := range map[string]int{
		"/api/pipelines/words/neighbours?word=qqqzzzx": http.StatusNotFound,
		"/api/pipelines/words/neighbours?word=a+b":     http.StatusBadRequest,
		"/api/pipelines/words/neighbours?word=a&k=x":   http.StatusBadRequest,
		"/api/pipelines/words/atoms.png":               http.StatusNotFound,
		"/api/pipelines/digits/neighbours?word=the":    http.StatusNotFound,
	} {
		if code, _, body := httpGet(t, d, path); code != wantCode {
			t.Errorf("%s: %d %s, want %d", path, code, body, wantCode)
		}
	}
}

// A monitoring address that cannot be listened on fails Start, naming the
// key, and leaves nothing running.
func TestObserveAddressInUse(t *testing.T) {
	d := startDaemon(t, observedConfig(t, digitsPipeline("digits", "busy.images", 16)))
	cfg := observedConfig(t, digitsPipeline("digits", "busy.images", 16))
	cfg.Observe.HTTP = d.HTTPAddr()
	d2, err := New(cfg, Options{Logger: NewLogger(testWriter{t}, "console")})
	if err != nil {
		t.Fatal(err)
	}
	if err := d2.Start(context.Background()); err == nil || !strings.Contains(err.Error(), "observe.http") {
		t.Errorf("Start on a taken address: %v, want an error naming observe.http", err)
	}
}
