package daemon

import (
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// pipelineMetrics are the few measurements of a pipeline that its
// counters do not hold: latency histograms, and when and how large its
// last checkpoint was. A histogram's Observe is safe from any goroutine;
// the owner goroutine observes batches, the query workers queries.
type pipelineMetrics struct {
	batch prometheus.Histogram
	// query is indexed by queryKind.
	query [2]prometheus.Histogram
	// ckptUnixNano and ckptBytes describe the newest checkpoint written
	// or restored (bytes 0: restored, size unknown); 0 before any.
	ckptUnixNano, ckptBytes atomic.Int64
}

// Batch and query latencies span a k-means step on a few patches (about
// 100 µs) to an SMT solve or a large ADMM step (seconds).
var latencyBuckets = prometheus.ExponentialBuckets(100e-6, 2.5, 14)

func newPipelineMetrics(name string) *pipelineMetrics {
	m := &pipelineMetrics{
		batch: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "smtd_batch_seconds", Help: "Time to decode and learn one batch and hand its outputs to the pipeline's publisher.",
			Buckets: latencyBuckets, ConstLabels: prometheus.Labels{"pipeline": name},
		}),
	}
	for k, endpoint := range []string{embedQuery: "embed", neighboursQuery: "neighbours"} {
		m.query[k] = prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "smtd_query_seconds", Help: "Time from a query's arrival to its answer, answered queries only.",
			Buckets: latencyBuckets, ConstLabels: prometheus.Labels{"pipeline": name, "endpoint": endpoint},
		})
	}
	return m
}

// checkpointed records a checkpoint written (or restored) at t of size
// bytes.
func (m *pipelineMetrics) checkpointed(t time.Time, bytes int) {
	m.ckptUnixNano.Store(t.UnixNano())
	m.ckptBytes.Store(int64(bytes))
}

// collector exports the daemon's state at scrape time, read from the same
// counters, health and snapshots smtd.status reports (Daemon.Status):
// nothing is counted twice.
type collector struct {
	d *Daemon

	messages, rejected, published, rollbacks, checkpoints *prometheus.Desc
	lag, version, health, ckptAge, ckptBytes, queries     *prometheus.Desc
	queryWork, queryOffCPU                                *prometheus.Desc
}

var _ prometheus.Collector = (*collector)(nil)

// Outcomes of a message, the outcome label of smtd_messages_total:
// received = rejected + learned + not_learned once its batch is done;
// redelivered messages were applied before and skipped; lost ones were
// removed from the stream before they were learned.
var messageOutcomes = []string{"received", "learned", "not_learned", "rejected", "redelivered", "lost"}

var healthStates = []string{HealthOK, HealthLagging, HealthStalled, HealthDiverged, HealthInputMissing}

func newCollector(d *Daemon) *collector {
	pl := []string{"pipeline"}
	return &collector{
		d:           d,
		messages:    prometheus.NewDesc("smtd_messages_total", "Input messages by outcome.", []string{"pipeline", "outcome"}, nil),
		rejected:    prometheus.NewDesc("smtd_rejected_total", "Invalid input messages by reason.", []string{"pipeline", "reason"}, nil),
		published:   prometheus.NewDesc("smtd_published_total", "Outputs published.", pl, nil),
		rollbacks:   prometheus.NewDesc("smtd_rollbacks_total", "Batches rolled back because the model diverged.", pl, nil),
		checkpoints: prometheus.NewDesc("smtd_checkpoints_total", "Checkpoints written.", pl, nil),
		lag:         prometheus.NewDesc("smtd_lag_messages", "Input messages waiting to be learned: the stream's last sequence minus the last applied.", pl, nil),
		version:     prometheus.NewDesc("smtd_model_version", "Model version: batches that changed the model.", pl, nil),
		health:      prometheus.NewDesc("smtd_health", "1 for the pipeline's current health state, 0 for the others.", []string{"pipeline", "state"}, nil),
		ckptAge:     prometheus.NewDesc("smtd_checkpoint_age_seconds", "Seconds since the newest checkpoint was written (or, before the first, since the restored one was).", pl, nil),
		ckptBytes:   prometheus.NewDesc("smtd_checkpoint_bytes", "Size of the newest checkpoint written.", pl, nil),
		queries:     prometheus.NewDesc("smtd_queries_total", "Embed and neighbours queries by result: answered, busy (queue full), error.", []string{"pipeline", "result"}, nil),
		queryWork:   prometheus.NewDesc("smtd_query_work_seconds_total", "Time query workers spent on queries, from taking one to its reply (timed queries: Linux, worker on one thread).", pl, nil),
		queryOffCPU: prometheus.NewDesc("smtd_query_off_cpu_seconds_total", "The part of smtd_query_work_seconds_total the workers' threads did not run: waiting for a core, or asleep while a worker waited for a lock.", pl, nil),
	}
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.messages, c.rejected, c.published, c.rollbacks, c.checkpoints, c.lag, c.version, c.health, c.ckptAge, c.ckptBytes, c.queries, c.queryWork, c.queryOffCPU} {
		ch <- d
	}
	for _, pl := range c.d.pipelines {
		pl.obs.batch.Describe(ch)
		for _, h := range pl.obs.query {
			h.Describe(ch)
		}
	}
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	st := c.d.Status()
	now := time.Now()
	counter := func(d *prometheus.Desc, v int64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	for i, ps := range st.Pipelines {
		name := ps.Name
		for j, v := range []int64{ps.Received, ps.Learned, ps.NotLearned, ps.Rejected, ps.Redelivered, ps.Lost} {
			counter(c.messages, v, name, messageOutcomes[j])
		}
		for reason, v := range ps.ByReason {
			counter(c.rejected, v, name, reason)
		}
		counter(c.published, ps.Published, name)
		counter(c.rollbacks, ps.Rollbacks, name)
		counter(c.checkpoints, ps.Checkpoints, name)
		counter(c.queries, ps.Queries.Answered, name, "answered")
		counter(c.queries, ps.Queries.Busy, name, "busy")
		counter(c.queries, ps.Queries.Errors, name, "error")
		ch <- prometheus.MustNewConstMetric(c.queryWork, prometheus.CounterValue, ps.Queries.WorkSeconds, name)
		ch <- prometheus.MustNewConstMetric(c.queryOffCPU, prometheus.CounterValue, ps.Queries.OffCPUSeconds, name)
		gauge(c.lag, float64(ps.Backlog), name)
		gauge(c.version, float64(ps.ModelVersion), name)
		for _, s := range healthStates {
			v := 0.0
			if ps.Health.State == s {
				v = 1
			}
			gauge(c.health, v, name, s)
		}
		obs := c.d.pipelines[i].obs
		if t := obs.ckptUnixNano.Load(); t != 0 {
			gauge(c.ckptAge, now.Sub(time.Unix(0, t)).Seconds(), name)
		}
		if b := obs.ckptBytes.Load(); b != 0 {
			gauge(c.ckptBytes, float64(b), name)
		}
		obs.batch.Collect(ch)
		for _, h := range obs.query {
			h.Collect(ch)
		}
	}
}

// newRegistry returns a registry of the daemon's metrics and the Go
// runtime's and process's. Each daemon has its own, so that several in
// one process (tests, benchmarks) do not collide.
func newRegistry(d *Daemon) *prometheus.Registry {
	r := prometheus.NewRegistry()
	r.MustRegister(newCollector(d), collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return r
}
