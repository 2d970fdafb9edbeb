package config

import (
	"fmt"
	"net"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Bounds of the query pool: a worker holds workspaces for each
// pipeline's model, and a waiting query holds its request. A learner
// that waits longer than maxLearnYield for queries would stall.
const (
	maxQueryWorkers = 1024
	maxLearnCores   = 1024
	maxQueryQueue   = 1 << 20
	maxLearnYield   = time.Second
)

var pipelineName = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,63}$`)

// Validate checks a configuration built in code (not read from a file).
func (c *Config) Validate() error {
	if errs := c.validate("<config>", nil); len(errs) > 0 {
		return errs
	}
	return nil
}

// validator collects errors with the line each field has in the file.
type validator struct {
	file    string
	present map[string]int
	errs    Errors
}

func (v *validator) check(ok bool, field, format string, args ...any) {
	if !ok {
		v.errs = append(v.errs, &Error{File: v.file, Line: v.line(field), Field: field, Msg: fmt.Sprintf(format, args...)})
	}
}

// line finds the line of field or of its nearest parent present in the file.
func (v *validator) line(field string) int {
	for p := field; p != ""; {
		if l, ok := v.present[p]; ok {
			return l
		}
		i := strings.LastIndexAny(p, ".[")
		if i < 0 {
			break
		}
		p = p[:i]
	}
	return 0
}

func oneOf(s string, set ...string) bool {
	for _, x := range set {
		if s == x {
			return true
		}
	}
	return false
}

func (c *Config) validate(file string, present map[string]int) Errors {
	v := &validator{file: file, present: present}
	v.check(oneOf(c.Log.Level, "debug", "info", "warn", "error"), "log.level", "must be debug, info, warn or error, got %q", c.Log.Level)
	v.check(oneOf(c.Log.Format, "json", "console"), "log.format", "must be json or console, got %q", c.Log.Format)
	v.check(c.DataDir != "", "data_dir", "must not be empty")
	if c.NATS.URL == "" {
		v.check(validListen(c.NATS.Listen), "nats.listen", "must be host:port with port -1..65535, got %q", c.NATS.Listen)
	}
	c.NATS.validateSecurity(v)
	v.check(c.Observe.HTTP == "" || validHTTPAddr(c.Observe.HTTP), "observe.http", "must be empty or host:port with port 0..65535, got %q", c.Observe.HTTP)
	c.Observe.validateSecurity(v, &c.NATS)
	v.check(c.NATS.MaxPayload > 0 && c.NATS.MaxPayload <= 64<<20, "nats.max_payload", "must be in 1..67108864 bytes, got %d", c.NATS.MaxPayload)
	v.check(c.NATS.StreamMaxBytes > 0, "nats.stream_max_bytes", "must be > 0, got %d", c.NATS.StreamMaxBytes)
	v.check(c.NATS.StreamMaxAge > 0, "nats.stream_max_age", "must be > 0, got %s", c.NATS.StreamMaxAge)
	v.check(validSubject(c.Service.Name, false) && !strings.Contains(c.Service.Name, "."), "service.name", "must be one subject token, got %q", c.Service.Name)
	v.check(validSubject(c.Service.Prefix, false), "service.prefix", "must be a subject without wildcards, got %q", c.Service.Prefix)
	v.check(c.Service.QueryWorkers >= 0 && c.Service.QueryWorkers <= maxQueryWorkers, "service.query_workers", "must be in 0..%d (0: GOMAXPROCS), got %d", maxQueryWorkers, c.Service.QueryWorkers)
	v.check(c.Service.QueryQueue >= 1 && c.Service.QueryQueue <= maxQueryQueue, "service.query_queue", "must be in 1..%d, got %d", maxQueryQueue, c.Service.QueryQueue)
	v.check(c.Service.LearnCores >= 0 && c.Service.LearnCores <= maxLearnCores, "service.learn_cores", "must be in 0..%d (0: GOMAXPROCS), got %d", maxLearnCores, c.Service.LearnCores)
	v.check(c.Service.LearnNice >= 0 && c.Service.LearnNice <= 19, "service.learn_nice", "must be in 0..19 (0: learners at the daemon's priority), got %d", c.Service.LearnNice)
	v.check(c.Service.LearnYield >= 0 && c.Service.LearnYield <= maxLearnYield, "service.learn_yield", "must be in 0..%v, got %v", maxLearnYield, c.Service.LearnYield)
	v.check(c.Checkpoint.EverySamples > 0, "checkpoint.every_samples", "must be > 0, got %d", c.Checkpoint.EverySamples)
	v.check(c.Checkpoint.Every > 0, "checkpoint.every", "must be > 0, got %s", c.Checkpoint.Every)
	v.check(c.Checkpoint.Keep >= 1, "checkpoint.keep", "must be >= 1, got %d", c.Checkpoint.Keep)

	v.check(c.NATS.Replicas >= 1 && c.NATS.Replicas <= 5, "nats.replicas", "must be in 1..5, got %d", c.NATS.Replicas)
	v.check(c.NATS.Replicas == 1 || c.NATS.URL != "", "nats.replicas", "must be 1 with the embedded server (one node); replicas need a NATS cluster in nats.url")
	c.validateCluster(v)

	v.check(len(c.Pipelines) > 0, "pipelines", "at least one pipeline is needed")
	names := map[string]string{}
	subjects := map[string]string{} // subject → the field that uses it
	for i := range c.Pipelines {
		p := &c.Pipelines[i]
		path := fmt.Sprintf("pipelines[%d]", i)
		v.check(pipelineName.MatchString(p.Name), path+".name", "must match %s, got %q", pipelineName, p.Name)
		if other, dup := names[p.Name]; dup {
			v.check(false, path+".name", "duplicate pipeline name %q (also %s)", p.Name, other)
		}
		names[p.Name] = path + ".name"
		c.validatePipeline(v, p, path)
		for _, s := range []struct{ field, subject string }{
			{path + ".input.subject", p.Input.Subject},
			{path + ".output.subject", p.Output.Subject},
		} {
			for other, field := range subjects {
				if subjectsOverlap(s.subject, other) {
					v.check(false, s.field, "duplicate subject %q overlaps %q of %s", s.subject, other, field)
				}
			}
			if strings.HasPrefix(s.subject, c.Service.Prefix+".") && !strings.HasPrefix(s.subject, c.Service.Prefix+".in.") && !strings.HasPrefix(s.subject, c.Service.Prefix+".out.") {
				v.check(false, s.field, "subject %q is reserved for the daemon's own %s.* subjects (use %s.in.* or %s.out.*)", s.subject, c.Service.Prefix, c.Service.Prefix, c.Service.Prefix)
			}
			subjects[s.subject] = s.field
		}
	}
	return v.errs
}

// validateCluster checks cluster mode's settings: a shared NATS
// deployment, checkpoints in its object store (a standby never restores
// another machine's disk), and names and labels that are subject tokens.
func (c *Config) validateCluster(v *validator) {
	cl := &c.Cluster
	v.check(cl.LeaseTTL >= time.Second && cl.LeaseTTL <= 5*time.Minute, "cluster.lease_ttl", "must be in 1s..5m, got %s", cl.LeaseTTL)
	v.check(cl.Name == "" || validToken(cl.Name), "cluster.name", "must be one subject token of letters, digits, '-' and '_', got %q", cl.Name)
	for i, l := range cl.Labels {
		v.check(validToken(l), fmt.Sprintf("cluster.labels[%d]", i), "must be letters, digits, '-' and '_', got %q", l)
	}
	for i := range c.Pipelines {
		for j, l := range c.Pipelines[i].Placement {
			v.check(validToken(l), fmt.Sprintf("pipelines[%d].placement[%d]", i, j), "must be letters, digits, '-' and '_', got %q", l)
		}
	}
	for i := range c.Pipelines {
		c.validateWorkers(v, &c.Pipelines[i], fmt.Sprintf("pipelines[%d].workers", i))
	}
	if !cl.Enabled {
		return
	}
	v.check(c.NATS.URL != "", "cluster.enabled", "needs nats.url: the daemons of a cluster share one NATS deployment, not each its embedded server")
	v.check(c.Checkpoint.ObjectStore, "cluster.enabled", "needs checkpoint.object_store: a standby takes over from the checkpoints in JetStream")
}

// validateWorkers checks a pipeline's worker mode: the owner and its
// workers find each other through cluster mode, workers read the input
// by stream sequence, and the learners that split into contributions and
// merges are the image and video chain's (whitening, k-means and SMT)
// and the word statistics of text.
func (c *Config) validateWorkers(v *validator, p *Pipeline, path string) {
	w := &p.Workers
	f := func(name string) string { return path + "." + name }
	v.check(w.Merge >= 1 && w.Merge <= 256, f("merge"), "must be in 1..256, got %d", w.Merge)
	v.check(w.Staleness >= 0 && w.Staleness <= 64, f("staleness"), "must be in 0..64, got %d", w.Staleness)
	v.check(w.TaskTimeout >= time.Second, f("task_timeout"), "must be >= 1s, got %s", w.TaskTimeout)
	v.check(w.Precision == 32 || w.Precision == 64, f("precision"), "must be 32 or 64, got %d", w.Precision)
	if !w.Enabled {
		return
	}
	v.check(c.Cluster.Enabled, f("enabled"), "needs cluster.enabled: the owner and its workers are daemons of one cluster")
	v.check(p.Input.Transport == JetStream, f("enabled"), "needs input.transport jetstream: workers read their minibatches from the stream by sequence")
	if p.Modality == Text {
		// Without SMT a message's output is its tokens' vocabulary ids,
		// which only the owner knows.
		v.check(p.SMT.Dim > 0, f("enabled"), "on text needs smt.dim > 0 (word embeddings): without, the outputs are vocabulary ids only the owner knows")
		return
	}
	v.check(p.Learner == LearnerSMT, f("enabled"), "supports image and video pipelines learning smt and text, got learner %s", p.Learner)
}

var token = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

func validToken(s string) bool { return token.MatchString(s) }

func (c *Config) validatePipeline(v *validator, p *Pipeline, path string) {
	f := func(name string) string { return path + "." + name }
	v.check(oneOf(string(p.Modality), string(Image), string(Video), string(Text)), f("modality"), "must be image, video or text, got %q", p.Modality)
	v.check(validSubject(p.Input.Subject, true), f("input.subject"), "must be a NATS subject, got %q", p.Input.Subject)
	v.check(oneOf(p.Input.Transport, JetStream, Core), f("input.transport"), "must be jetstream or core, got %q", p.Input.Transport)
	v.check(p.Input.Stream == "" || validStreamName(p.Input.Stream), f("input.stream"), "must be a stream name (no spaces, '.', '*', '>'), got %q", p.Input.Stream)
	v.check(p.Input.MaxBytes > 0 && p.Input.MaxBytes <= c.NATS.MaxPayload, f("input.max_bytes"), "must be in 1..nats.max_payload (%d), got %d", c.NATS.MaxPayload, p.Input.MaxBytes)
	v.check(p.Input.MaxValue >= 1 && p.Input.MaxValue <= 1e6, f("input.max_value"), "must be in [1, 1e6], got %g", p.Input.MaxValue)
	v.check(oneOf(p.Input.OnReset, ResetRestart, ResetRefuse), f("input.on_reset"), "must be restart or refuse, got %q", p.Input.OnReset)
	v.check(validSubject(p.Output.Subject, false), f("output.subject"), "must be a NATS subject without wildcards, got %q", p.Output.Subject)
	v.check(oneOf(p.Output.Encoding, Float32, JSON), f("output.encoding"), "must be float32 or json, got %q", p.Output.Encoding)
	v.check(oneOf(p.Output.Transport, Core, JetStream), f("output.transport"), "must be core or jetstream, got %q", p.Output.Transport)
	v.check(p.Output.Stream == "" || validStreamName(p.Output.Stream), f("output.stream"), "must be a stream name (no spaces, '.', '*', '>'), got %q", p.Output.Stream)
	v.check(p.Output.Stream == "" || p.Output.Stream != p.StreamName(), f("output.stream"), "must differ from the input stream %q", p.StreamName())
	v.check(p.Output.DuplicateWindow >= time.Second && p.Output.DuplicateWindow <= 7*24*time.Hour, f("output.duplicate_window"), "must be in 1s..168h, got %s", p.Output.DuplicateWindow)
	v.check(p.Batch.Size >= 1 && p.Batch.Size <= 65536, f("batch.size"), "must be in 1..65536, got %d", p.Batch.Size)
	v.check(p.Batch.Timeout > 0, f("batch.timeout"), "must be > 0, got %s", p.Batch.Timeout)
	if p.Modality == Text {
		v.check(p.Text.Vocabulary >= 1 && p.Text.Vocabulary <= 1<<24, f("text.vocabulary"), "must be in 1..16777216, got %d", p.Text.Vocabulary)
		v.check(p.Text.MaxTokens >= 1, f("text.max_tokens"), "must be >= 1, got %d", p.Text.MaxTokens)
		v.check(p.Text.MaxTokenBytes >= 1 && p.Text.MaxTokenBytes <= 1<<20, f("text.max_token_bytes"), "must be in 1..1048576, got %d", p.Text.MaxTokenBytes)
		v.check(p.Text.VocabularyBytes >= p.Text.MaxTokenBytes+256 && p.Text.VocabularyBytes <= 1<<40, f("text.vocabulary_bytes"),
			"must be in text.max_token_bytes+256 (%d)..1099511627776, got %d", p.Text.MaxTokenBytes+256, p.Text.VocabularyBytes)
		v.check(p.Text.Window >= 1, f("text.window"), "must be >= 1, got %d", p.Text.Window)
		v.check(p.Text.MaxPairs >= 1, f("text.max_pairs"), "must be >= 1, got %d", p.Text.MaxPairs)
		v.check(p.Text.MinCount >= 0, f("text.min_count"), "must be >= 0, got %g", p.Text.MinCount)
		v.check(oneOf(p.Text.Weighting, "ppmi", "counts"), f("text.weighting"), "must be ppmi or counts, got %q", p.Text.Weighting)
		m := p.SMT
		v.check(m.Dim >= 0 && m.Dim+m.Drop < p.Text.Vocabulary, f("smt.dim"), "must be in 0..text.vocabulary-smt.drop-1, got %d", m.Dim)
		v.check(m.Dim == 0 || m.Solver == SolverClosed, f("smt.solver"), "word embeddings are solved in closed form: must be closed, got %q", m.Solver)
		v.check(m.Memory >= 0, f("smt.memory"), "must be >= 0 (0: never forget), got %g", m.Memory)
		v.check(m.SolveEvery >= 1, f("smt.solve_every"), "must be >= 1, got %d", m.SolveEvery)
		v.check(m.Drop >= 0, f("smt.drop"), "must be >= 0, got %d", m.Drop)
		return
	}
	im := p.Image
	v.check(im.Width >= 1 && im.Width <= 8192, f("image.width"), "must be in 1..8192, got %d", im.Width)
	v.check(im.Height >= 1 && im.Height <= 8192, f("image.height"), "must be in 1..8192, got %d", im.Height)
	v.check(im.Channels == 1 || im.Channels == 3, f("image.channels"), "must be 1 or 3, got %d", im.Channels)
	if p.Modality == Video {
		v.check(p.Video.MaxStreams >= 1 && p.Video.MaxStreams <= 1<<20, f("video.max_streams"), "must be in 1..1048576, got %d", p.Video.MaxStreams)
		v.check(p.Video.Reorder >= 0 && p.Video.Reorder <= 64, f("video.reorder"), "must be in 0..64, got %d", p.Video.Reorder)
		v.check(p.Video.MaxFrameJump > p.Video.Reorder && p.Video.MaxFrameJump <= 1<<62, f("video.max_frame_jump"), "must be in video.reorder+1 (%d)..4611686018427387904, got %d", p.Video.Reorder+1, p.Video.MaxFrameJump)
	}
	v.check(oneOf(p.Learner, LearnerSMT, LearnerKSM, LearnerADMM), f("learner"), "must be smt, ksm or admm, got %q", p.Learner)
	switch p.Learner {
	case LearnerKSM:
		validateKSM(v, p, f)
		return
	case LearnerADMM:
		validateADMM(v, p, f)
		return
	}
	pt := p.Patches
	v.check(pt.Size >= 1, f("patches.size"), "must be >= 1, got %d", pt.Size)
	v.check(pt.Size <= im.Width && pt.Size <= im.Height, f("patches.size"), "patch %dx%d is larger than the %dx%d image", pt.Size, pt.Size, im.Width, im.Height)
	v.check(pt.Stride >= 1, f("patches.stride"), "must be >= 1, got %d", pt.Stride)
	v.check(oneOf(pt.Mean, "none", "patch", "contextual"), f("patches.mean"), "must be none, patch or contextual, got %q", pt.Mean)
	v.check(pt.Context >= 0, f("patches.context"), "must be >= 0, got %d", pt.Context)
	v.check(pt.Mean != "contextual" || pt.Context >= 1, f("patches.context"), "must be >= 1 with contextual mean, got %d", pt.Context)
	v.check(pt.MinNorm >= 0, f("patches.min_norm"), "must be >= 0, got %g", pt.MinNorm)
	w := p.Whiten
	v.check(w.Lambda >= 1e-6 && w.Lambda <= 1e3, f("whiten.lambda"), "must be in [1e-6, 1e3], got %g", w.Lambda)
	v.check(w.RefreshEvery >= 1 && w.RefreshEvery <= 1<<30, f("whiten.refresh_every"), "must be in 1..2^30, got %d", w.RefreshEvery)
	v.check(w.FreezeAfter >= 0, f("whiten.freeze_after"), "must be >= 0, got %d", w.FreezeAfter)
	k := p.KMeans
	v.check(k.Atoms >= 1 && k.Atoms <= 1<<20, f("kmeans.atoms"), "must be in 1..1048576, got %d", k.Atoms)
	v.check(k.LearningRate > 0 && k.LearningRate <= 1, f("kmeans.learning_rate"), "must be in (0, 1], got %g", k.LearningRate)
	v.check(k.Decay >= 0 && k.Decay <= 1e6, f("kmeans.decay"), "must be in [0, 1e6], got %g", k.Decay)
	v.check(k.Memory >= 1, f("kmeans.memory"), "must be >= 1 (.inf never forgets), got %g", k.Memory)
	v.check(oneOf(k.Code, CodeVQ, CodeGQ), f("kmeans.code"), "must be vq or gq, got %q", k.Code)
	v.check(k.Threshold >= -1 && k.Threshold <= 1, f("kmeans.threshold"), "must be a cosine in [-1, 1], got %g", k.Threshold)
	v.check(k.ReseedAfter >= 1 && k.ReseedAfter <= 1<<30, f("kmeans.reseed_after"), "must be in 1..2^30, got %d", k.ReseedAfter)
	m := p.SMT
	v.check(m.Dim >= 0 && (m.Dim <= k.Atoms || k.Atoms < 1), f("smt.dim"), "must be in 0..kmeans.atoms (%d), got %d", k.Atoms, m.Dim)
	if m.Dim == 0 {
		return
	}
	v.check(m.Context >= 0, f("smt.context"), "must be >= 0 (0: whole image), got %d", m.Context)
	v.check(oneOf(m.Blank, "atom", "skip"), f("smt.blank"), "must be atom or skip, got %q", m.Blank)
	v.check(oneOf(m.Solver, SolverSGD, SolverClosed), f("smt.solver"), "must be sgd or closed, got %q", m.Solver)
	v.check(m.Solver != SolverSGD || k.Code == CodeVQ || p.Modality == Video, f("smt.solver"), "sgd on images needs kmeans.code vq (f_gq codes: use closed)")
	v.check(m.LearningRate > 0 && m.LearningRate <= 0.5, f("smt.learning_rate"), "must be in (0, 0.5], got %g", m.LearningRate)
	v.check(m.Decay >= 0 && m.Decay <= 1e6, f("smt.decay"), "must be in [0, 1e6], got %g", m.Decay)
	v.check(m.Gamma0 >= 1e-3 && m.Gamma0 <= 10, f("smt.gamma0"), "must be in [1e-3, 10], got %g", m.Gamma0)
	v.check(m.Gamma1 >= 0 && m.Gamma1 <= 1, f("smt.gamma1"), "must be in [0, 1], got %g", m.Gamma1)
	v.check(m.Memory == 0 || m.Memory >= 1000, f("smt.memory"), "must be 0 (never forget) or >= 1000, got %g", m.Memory)
	v.check(m.SolveEvery >= 1 && m.SolveEvery <= 1<<30, f("smt.solve_every"), "must be in 1..2^30, got %d", m.SolveEvery)
	v.check(m.Drop >= 0 && (m.Drop+m.Dim <= k.Atoms || k.Atoms < 1 || m.Dim > k.Atoms), f("smt.drop"), "must be >= 0 with drop+dim <= kmeans.atoms, got %d", m.Drop)
	v.check(m.Solver != SolverSGD || m.Drop <= 1, f("smt.drop"), "sgd leaves out at most the constant eigenvector: must be 0 or 1 (more: use smt.solver closed), got %d", m.Drop)
	v.check(m.Solver != SolverSGD || m.Drop == 0 || k.Code == CodeVQ, f("smt.drop"), "1 with smt.solver sgd needs kmeans.code vq")
	v.check(!m.NonRedundant || (m.Solver == SolverClosed && k.Code == CodeVQ), f("smt.nonredundant"), "needs smt.solver closed and kmeans.code vq")
	v.check(m.PoolKernel >= 1, f("smt.pool_kernel"), "must be >= 1, got %d", m.PoolKernel)
	v.check(m.PoolStride >= 1, f("smt.pool_stride"), "must be >= 1, got %d", m.PoolStride)
}

func validateKSM(v *validator, p *Pipeline, f func(string) string) {
	k := p.KSM
	v.check(k.Neurons >= 1 && k.Neurons <= 1<<16, f("ksm.neurons"), "must be in 1..65536, got %d", k.Neurons)
	v.check(oneOf(k.Kernel, KernelGaussian, KernelPowerCosine, KernelLinear, KernelPolynomial), f("ksm.kernel"), "must be gaussian, power-cosine, linear or polynomial, got %q", k.Kernel)
	v.check(k.Sigma > 0, f("ksm.sigma"), "must be > 0, got %g", k.Sigma)
	v.check(k.Alpha >= 1, f("ksm.alpha"), "must be >= 1, got %d", k.Alpha)
	v.check(k.Degree >= 1, f("ksm.degree"), "must be >= 1, got %d", k.Degree)
	v.check(k.Gamma > 0, f("ksm.gamma"), "must be > 0, got %g", k.Gamma)
	v.check(k.Coef0 >= 0, f("ksm.coef0"), "must be >= 0, got %g", k.Coef0)
	v.check(k.Lambda > 0, f("ksm.lambda"), "must be > 0, got %g", k.Lambda)
	v.check(k.EtaW > 0 && k.EtaW <= 0.3, f("ksm.eta_w"), "must be in (0, 0.3], got %g", k.EtaW)
	v.check(k.EtaQ > 0 && k.EtaQ <= 0.3, f("ksm.eta_q"), "must be in (0, 0.3], got %g", k.EtaQ)
	v.check(k.EtaL > 0 && k.EtaL <= 1, f("ksm.eta_l"), "must be in (0, 1], got %g", k.EtaL)
	v.check(k.AnnealEvery >= 1, f("ksm.anneal_every"), "must be >= 1 (max_anneals 0 never anneals), got %d", k.AnnealEvery)
	v.check(k.AnnealFactor > 0 && k.AnnealFactor <= 1, f("ksm.anneal_factor"), "must be in (0, 1], got %g", k.AnnealFactor)
	v.check(k.MaxAnneals >= 0, f("ksm.max_anneals"), "must be >= 0, got %d", k.MaxAnneals)
	v.check(k.InitScale > 0, f("ksm.init_scale"), "must be > 0, got %g", k.InitScale)
	v.check(oneOf(k.Init, InitRandom, InitData), f("ksm.init"), "must be random or data, got %q", k.Init)
	v.check(k.Crop >= 0 && 2*k.Crop < p.Image.Width && 2*k.Crop < p.Image.Height, f("ksm.crop"), "must leave pixels of the %dx%d image, got %d", p.Image.Width, p.Image.Height, k.Crop)
}

func validateADMM(v *validator, p *Pipeline, f func(string) string) {
	a := p.ADMM
	v.check(a.Atoms >= 1 && a.Atoms <= 1<<16, f("admm.atoms"), "must be in 1..65536, got %d", a.Atoms)
	v.check(oneOf(a.Prior, PriorSparse, PriorSimplex), f("admm.prior"), "must be sparse or simplex, got %q", a.Prior)
	v.check(a.Schedule >= 1 && a.Schedule <= 3, f("admm.schedule"), "must be 1, 2 or 3, got %d", a.Schedule)
	v.check(a.Lambda > 0 && a.Lambda <= 1, f("admm.lambda"), "must be in (0, 1], got %g", a.Lambda)
	v.check(a.Omega > 0 && a.Omega <= 100, f("admm.omega"), "must be in (0, 100], got %g", a.Omega)
	v.check(a.Rho >= 1e-3 && a.Rho <= 100, f("admm.rho"), "must be in [1e-3, 100], got %g", a.Rho)
	v.check(a.LearningRate > 0 && a.LearningRate <= 1, f("admm.learning_rate"), "must be in (0, 1], got %g", a.LearningRate)
	v.check(a.Iterations >= 1 && a.Iterations <= 10000, f("admm.iterations"), "must be in 1..10000, got %d", a.Iterations)
	v.check(a.WarmIterations >= -1, f("admm.warm_iterations"), "must be >= -1 (0: the learner's default, -1: none), got %d", a.WarmIterations)
	v.check(a.WarmIterations <= 10000, f("admm.warm_iterations"), "must be at most 10000, got %d", a.WarmIterations)
	v.check(a.Passes >= 1 && a.Passes <= 100, f("admm.passes"), "must be in 1..100, got %d", a.Passes)
	v.check(a.Memory >= 1, f("admm.memory"), "must be >= 1 (.inf never forgets), got %g", a.Memory)
	v.check(a.WarmStart >= 0, f("admm.warm_start"), "must be >= 0, got %d", a.WarmStart)
	v.check(a.Crop >= 0 && 2*a.Crop < p.Image.Width && 2*a.Crop < p.Image.Height, f("admm.crop"), "must leave pixels of the %dx%d image, got %d", p.Image.Width, p.Image.Height, a.Crop)
}

func validListen(s string) bool {
	_, port, err := net.SplitHostPort(s)
	if err != nil {
		return false
	}
	n, err := strconv.Atoi(port)
	return err == nil && n >= -1 && n <= 65535
}

// validHTTPAddr reports whether s is a host:port net/http can listen on.
func validHTTPAddr(s string) bool {
	_, port, err := net.SplitHostPort(s)
	if err != nil {
		return false
	}
	n, err := strconv.Atoi(port)
	return err == nil && n >= 0 && n <= 65535
}

// validSubject reports whether s is a NATS subject: non-empty tokens
// separated by '.', no white space, and wildcards ('*', or '>' as the last
// token) only if wild.
func validSubject(s string, wild bool) bool {
	if s == "" || strings.ContainsAny(s, " \t\r\n") {
		return false
	}
	toks := strings.Split(s, ".")
	for i, t := range toks {
		switch {
		case t == "":
			return false
		case t == "*" || (t == ">" && i == len(toks)-1):
			if !wild {
				return false
			}
		case strings.ContainsAny(t, "*>"):
			return false
		}
	}
	return true
}

func validStreamName(s string) bool {
	return s != "" && !strings.ContainsAny(s, " \t\r\n.*>/\\")
}

// subjectsOverlap reports whether some subject matches both patterns.
func subjectsOverlap(a, b string) bool {
	ta, tb := strings.Split(a, "."), strings.Split(b, ".")
	for i := 0; ; i++ {
		switch {
		case i == len(ta) && i == len(tb):
			return true
		case i < len(ta) && ta[i] == ">", i < len(tb) && tb[i] == ">":
			return true
		case i == len(ta) || i == len(tb):
			return false
		case ta[i] != tb[i] && ta[i] != "*" && tb[i] != "*":
			return false
		}
	}
}
