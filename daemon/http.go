package daemon

import (
	"context"
	webembed "embed"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io"
	"io/fs"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/smtd/smtd/config"
)

// The live page: a template for the skeleton, plain JavaScript that fills
// it from the JSON endpoints. No build step.
//
//go:embed web
var webFiles webembed.FS

var pageTemplate = template.Must(template.ParseFS(webFiles, "web/index.html"))

// httpServer serves, on observe.http,
//
//	/metrics                              Prometheus metrics (collector, Go, process)
//	/healthz                              200 while the process serves
//	/readyz                               200 when ready, else 503 and a Readiness
//	/                                     the live page (and /static/...)
//	/api/status                           Status as JSON
//	/api/pipelines/{name}/atoms.png       the model's atoms (modelPictures)
//	/api/pipelines/{name}/embed           POST an input message body: its embedding
//	/api/pipelines/{name}/neighbours      ?word=w&k=10: a text pipeline's nearest words
type httpServer struct {
	srv  *http.Server
	addr string
	done chan struct{} // closed when Serve has returned

	mu       sync.Mutex
	pictures map[*pipeline]renderedAtoms // the atoms of the newest snapshot drawn
}

// renderedAtoms caches the picture of one snapshot: the page asks for it
// every time the model version changes, and any number of pages may.
type renderedAtoms struct {
	from *snapshot
	pic  Picture
	err  error
}

// startHTTP starts the monitoring server when observe.http is set.
func (d *Daemon) startHTTP() error {
	addr := d.fixed.Observe.HTTP
	if addr == "" {
		return nil
	}
	auth, err := newHTTPAuth(d.fixed, d.log)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("smtd: observe.http: %w", err)
	}
	h := &httpServer{addr: ln.Addr().String(), done: make(chan struct{}), pictures: map[*pipeline]renderedAtoms{}}
	tl, err := observeTLS(ln, d.fixed.Observe.TLS)
	if err != nil {
		ln.Close()
		return err
	}
	ln = tl
	h.srv = &http.Server{Handler: d.httpHandler(h, auth), ReadHeaderTimeout: 10 * time.Second}
	go func() {
		defer close(h.done)
		if err := h.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			d.log.Error().Err(err).Str("addr", h.addr).Msg("monitoring HTTP server stopped")
		}
	}()
	d.http = h
	scheme := "http"
	if d.fixed.Observe.TLS.Enabled() {
		scheme = "https"
	}
	d.log.Info().Str("addr", h.addr).Str("scheme", scheme).Bool("authentication", auth != nil).
		Msg("monitoring HTTP server: /metrics, /healthz, /readyz, live page on /")
	switch {
	case config.IsLoopback(addr):
	case auth == nil && d.fixed.Observe.TLS.CAFile == "":
		d.log.Warn().Str("addr", h.addr).Msg("observe.allow_unauthenticated: anyone who reaches the monitoring server sees the metrics and the models and may embed")
	case scheme == "http":
		d.log.Warn().Str("addr", h.addr).Msg("the monitoring server asks for passwords without TLS (observe.tls): they cross the network in the clear")
	}
	return nil
}

// stopHTTP stops the monitoring server, waiting for requests in flight
// until ctx is done.
func (d *Daemon) stopHTTP(ctx context.Context) {
	h := d.http
	if h == nil {
		return
	}
	if err := h.srv.Shutdown(ctx); err != nil {
		h.srv.Close()
	}
	<-h.done
}

// HTTPAddr is the address the monitoring server listens on (with the port
// it picked when observe.http has port 0); empty when it is off.
func (d *Daemon) HTTPAddr() string {
	if d.http == nil {
		return ""
	}
	return d.http.addr
}

// httpHandler routes the server's paths. With auth, /healthz and /readyz
// stay open (for probes), the embed and neighbours endpoints serve
// consumers and operators, and everything else operators, as the same
// users may use the daemon's NATS subjects.
func (d *Daemon) httpHandler(h *httpServer, auth *httpAuth) http.Handler {
	mux := http.NewServeMux()
	operator := func(pattern string, h http.Handler) {
		mux.Handle(pattern, auth.require(h, config.RoleOperator))
	}
	query := func(pattern string, h http.HandlerFunc) {
		mux.Handle(pattern, auth.require(h, config.RoleConsumer, config.RoleOperator))
	}
	reg := newRegistry(d)
	operator("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		io.WriteString(w, "ok\n")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		r := d.Readiness()
		code := http.StatusOK
		if !r.Ready {
			code = http.StatusServiceUnavailable
		}
		writeJSON(w, code, r)
	})
	static, _ := fs.Sub(webFiles, "web")
	operator("GET /static/", http.StripPrefix("/static/", http.FileServerFS(static)))
	operator("GET /{$}", http.HandlerFunc(d.servePage))
	operator("GET /api/status", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, http.StatusOK, d.Status()) }))
	operator("GET /api/pipelines/{name}/atoms.png", d.withPipeline(h.serveAtoms))
	query("POST /api/pipelines/{name}/embed", d.withPipeline(serveEmbed))
	query("GET /api/pipelines/{name}/neighbours", d.withPipeline(serveNeighbours))
	return mux
}

// Readiness is the body of /readyz.
type Readiness struct {
	Ready bool `json:"ready"`
	// Reasons say why not, one per pipeline that is not ready.
	Reasons []string `json:"reasons,omitempty"`
}

// Readiness reports whether the daemon can do its work: every pipeline is
// running (not stopped) and none has health input_missing, diverged or
// stalled. A lagging pipeline is ready: it learns, only behind.
func (d *Daemon) Readiness() Readiness {
	r := Readiness{Ready: true}
	st := d.Status()
	for i, ps := range st.Pipelines {
		select {
		case <-d.pipelines[i].finished:
			r.Reasons = append(r.Reasons, fmt.Sprintf("pipeline %s: stopped", ps.Name))
			continue
		default:
		}
		switch ps.Health.State {
		case HealthInputMissing, HealthDiverged, HealthStalled:
			r.Reasons = append(r.Reasons, fmt.Sprintf("pipeline %s: %s: %s", ps.Name, ps.Health.State, ps.Health.Reason))
		}
	}
	if len(d.pipelines) == 0 {
		r.Reasons = append(r.Reasons, "no pipeline started")
	}
	r.Ready = len(r.Reasons) == 0
	return r
}

// endpointStats is the Data of each endpoint in the micro service's
// stats: the health of the endpoint's pipeline, or of every pipeline for
// the daemon's own endpoints. As in Status, a standby reports the
// owner's health from the lease. It reads only what is fixed before the
// service is added and atomics: stats may be asked for while Start runs.
func (d *Daemon) endpointStats(e *micro.Endpoint) any {
	all := map[string]Health{}
	for _, pl := range d.pipelines {
		h := *pl.health.Load()
		if c := d.cluster; c != nil {
			if l := pl.lease.Load(); l != nil && l.Owner != c.self.Name {
				h = l.Health
			}
		}
		if pl.name == e.Metadata["pipeline"] {
			return map[string]any{"pipeline": pl.name, "health": h}
		}
		all[pl.name] = h
	}
	return map[string]any{"health": all}
}

// pageData is what the page's template shows before its script runs.
type pageData struct {
	Version   string
	Pipelines []pagePipeline
}

type pagePipeline struct {
	Name, Modality string
	// Atoms: the model has pictures; Words: a text pipeline with word
	// embeddings, which answers neighbours.
	Atoms, Words bool
	// AtomsTitle says what the picture shows.
	AtomsTitle string
}

func (d *Daemon) servePage(w http.ResponseWriter, _ *http.Request) {
	data := pageData{Version: Version}
	for _, pl := range d.pipelines {
		snap := pl.snap.Load()
		if snap == nil {
			continue
		}
		pp := pagePipeline{Name: pl.name, Modality: string(snap.cfg.Modality)}
		if snap.cfg.Modality == config.Text {
			pp.Words = snap.cfg.SMT.Dim > 0
		} else {
			pp.Atoms = true
			switch snap.cfg.Learner {
			case config.LearnerKSM:
				pp.AtomsTitle = "KSM receptive fields: the rows of W"
			case config.LearnerADMM:
				pp.AtomsTitle = "ADMM dictionary atoms"
			default:
				pp.AtomsTitle = "k-means dictionary atoms, unwhitened to pixels"
			}
		}
		data.Pipelines = append(data.Pipelines, pp)
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	if err := pageTemplate.Execute(w, data); err != nil {
		d.log.Warn().Err(err).Msg("rendering the live page")
	}
}

// withPipeline finds the pipeline named in the path, with a snapshot.
func (d *Daemon) withPipeline(h func(http.ResponseWriter, *http.Request, *pipeline, *snapshot)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		name := r.PathValue("name")
		for _, pl := range d.pipelines {
			if pl.name != name {
				continue
			}
			snap := pl.acquire()
			if snap == nil {
				httpError(w, http.StatusServiceUnavailable, "model not ready")
				return
			}
			defer snap.release()
			h(w, r, pl, snap)
			return
		}
		httpError(w, http.StatusNotFound, "no pipeline "+echo(name))
	}
}

// serveAtoms draws the atoms of the pipeline's snapshot, once per
// snapshot.
func (h *httpServer) serveAtoms(w http.ResponseWriter, _ *http.Request, pl *pipeline, snap *snapshot) {
	h.mu.Lock()
	a, ok := h.pictures[pl]
	h.mu.Unlock()
	if !ok || a.from != snap {
		a = renderedAtoms{from: snap}
		pics, err := modelPictures(snap.model)
		if err == nil {
			a.pic = pics[0]
		}
		a.err = err
		h.mu.Lock()
		h.pictures[pl] = a
		h.mu.Unlock()
	}
	switch {
	case errors.Is(a.err, ErrNoPicture):
		httpError(w, http.StatusNotFound, a.err.Error())
		return
	case a.err != nil:
		httpError(w, http.StatusInternalServerError, a.err.Error())
		return
	}
	w.Header().Set("Content-Type", "image/png")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set(HeaderModelVersion, strconv.FormatUint(snap.version, 10))
	w.Header().Set("X-Smtd-Title", a.pic.Title)
	w.Write(a.pic.PNG)
}

// EmbedReply is the answer of /api/pipelines/{name}/embed.
type EmbedReply struct {
	Pipeline     string    `json:"pipeline"`
	ModelVersion uint64    `json:"model_version"`
	Vector       []float32 `json:"vector"`
}

// serveEmbed embeds the request body, an input message as on the
// pipeline's input subject (a PNG, or raw pixels with the Smtd-Shape and
// Smtd-Dtype headers, or text), exactly as the embed endpoint does. The
// request's Smtd-* headers are the message's headers. The encoder is a
// private copy of the snapshot, as a query worker's.
func serveEmbed(w http.ResponseWriter, r *http.Request, pl *pipeline, snap *snapshot) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, int64(snap.cfg.Input.MaxBytes)))
	if err != nil {
		httpError(w, http.StatusRequestEntityTooLarge, err.Error())
		return
	}
	h := nats.Header{}
	for k, v := range r.Header {
		if strings.HasPrefix(k, "Smtd-") {
			h[k] = v
		}
	}
	encoders := map[*pipeline]*encoder{}
	q := pl.embed(encoders, h, body)
	releaseEncoders(encoders)
	if q.code != "" {
		httpError(w, statusOf(q.code), q.desc)
		return
	}
	vec, _, err := DecodeOutput(q.header, q.data)
	if err != nil {
		httpError(w, http.StatusInternalServerError, err.Error())
		return
	}
	version, _ := strconv.ParseUint(q.header.Get(HeaderModelVersion), 10, 64)
	writeJSON(w, http.StatusOK, EmbedReply{Pipeline: pl.name, ModelVersion: version, Vector: vec})
}

// serveNeighbours answers ?word=w&k=n as the neighbours endpoint does.
func serveNeighbours(w http.ResponseWriter, r *http.Request, pl *pipeline, _ *snapshot) {
	q := NeighboursRequest{Word: r.URL.Query().Get("word")}
	if k := r.URL.Query().Get("k"); k != "" {
		n, err := strconv.Atoi(k)
		if err != nil {
			httpError(w, http.StatusBadRequest, "k is not a number: "+echo(k))
			return
		}
		q.K = n
	}
	req, _ := json.Marshal(q)
	rep := pl.neighbours(req)
	if rep.code != "" {
		httpError(w, statusOf(rep.code), rep.desc)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Write(rep.data)
}

// statusOf maps a micro error code (an HTTP status as text) to a status.
func statusOf(code string) int {
	if n, err := strconv.Atoi(code); err == nil && n >= 400 && n < 600 {
		return n
	}
	return http.StatusInternalServerError
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(v)
}

// httpError answers {"error": msg} with the status code.
func httpError(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, map[string]string{"error": msg})
}
