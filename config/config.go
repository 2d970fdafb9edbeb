package config

import (
	"fmt"
	"time"
)

// Modality names the kind of data a pipeline consumes.
type Modality string

// The modalities a pipeline can consume.
const (
	Image Modality = "image" // still images: raw uint8/float32 pixels or PNG
	Video Modality = "video" // video frames: images with stream id and frame index headers
	Text  Modality = "text"  // word tokens: UTF-8 text, tokenised by the daemon
)

// Config is the whole daemon configuration, as read from one YAML file.
//
// A field tagged live:"true" may change through a reload while the daemon
// runs; a change to any other field is refused by name.
type Config struct {
	// Log configures the daemon's logs.
	Log Log `yaml:"log"`
	// DataDir holds the embedded server's JetStream store and the
	// checkpoints. Default "./smtd-data".
	DataDir string `yaml:"data_dir"`
	// NATS says which server to use.
	NATS NATS `yaml:"nats"`
	// Service names the subjects of the daemon's own endpoints and events.
	Service Service `yaml:"service"`
	// Checkpoint says when and where model checkpoints are written.
	Checkpoint Checkpoint `yaml:"checkpoint"`
	// Cluster runs the daemon as one of several sharing this config on a
	// NATS cluster: each pipeline is learned by the one daemon that holds
	// its lease, and served by all.
	Cluster Cluster `yaml:"cluster"`
	// Observe serves the daemon's metrics, health and live page over
	// HTTP.
	Observe Observe `yaml:"observe"`
	// Pipelines wire input subjects to learners and output subjects.
	Pipelines []Pipeline `yaml:"pipelines"`
}

// Cluster configures cluster mode. Every daemon of a cluster reads the same
// pipelines and connects to the same NATS deployment (nats.url); each
// pipeline is owned by one of them at a time, through a lease in the
// JetStream key-value bucket smtd-leases that its owner renews every
// LeaseTTL/4. The others stand by, serve queries from the pipeline's newest
// checkpoint and take the lease over once it expires.
type Cluster struct {
	// Enabled turns cluster mode on. Default false: one daemon owns all
	// its pipelines, as without a cluster.
	Enabled bool `yaml:"enabled"`
	// Name identifies this daemon among the cluster's: unique, one
	// subject token. Default: the host name and the process ID.
	Name string `yaml:"name"`
	// Labels of this daemon; a pipeline with placement labels is owned
	// only by daemons that carry all of them.
	Labels []string `yaml:"labels"`
	// LeaseTTL is how long an ownership lease lasts without renewal: the
	// time a standby waits before it takes over from an owner that
	// stopped (killed, frozen or cut off). Default 4s, in 1s..5m.
	LeaseTTL time.Duration `yaml:"lease_ttl"`
}

// Observe configures the daemon's HTTP server for monitoring: Prometheus
// metrics on /metrics, liveness on /healthz, readiness on /readyz, and a
// live page on / that shows each pipeline's health and what its model is
// learning (README "Monitoring").
type Observe struct {
	// HTTP is the server's host:port, e.g. "127.0.0.1:9090" (port 0
	// picks a free port). Empty, the default, serves nothing. Without
	// password users in nats.users or client certificates (TLS.CAFile)
	// the page and endpoints have no authentication, so an address
	// beyond the loopback interface is refused unless
	// AllowUnauthenticated. With password users, every path but
	// /healthz and /readyz asks for one of those users (HTTP basic
	// authentication): operators may use all of it, consumers the embed
	// and neighbours endpoints, producers nothing.
	HTTP string `yaml:"http"`
	// AllowUnauthenticated lets HTTP listen beyond the loopback
	// interface without users or client certificates: anyone who
	// reaches it then sees the metrics and the models and may embed.
	// Default false.
	AllowUnauthenticated bool `yaml:"allow_unauthenticated"`
	// TLS makes the server serve HTTPS with CertFile and KeyFile; with
	// CAFile, every client must present a certificate signed by it, and
	// may then use every path (password users are asked for as well, if
	// any). Without TLS, basic authentication sends passwords in the
	// clear.
	TLS TLS `yaml:"tls"`
}

// PasswordUsers reports whether any user of the embedded server has a
// password (rather than an nkey): those are the users the HTTP server
// asks for.
func (n *NATS) PasswordUsers() bool {
	for _, u := range n.Users {
		if u.User != "" {
			return true
		}
	}
	return false
}

// Log configures logging.
type Log struct {
	// Level is one of debug, info, warn, error. Default info.
	Level string `yaml:"level" live:"true"`
	// Format is json (default) or console (human readable).
	Format string `yaml:"format"`
}

// NATS selects the embedded server or an external one.
type NATS struct {
	// URL of an external server or cluster (comma-separated URLs). Empty,
	// the default, starts an embedded server with JetStream.
	URL string `yaml:"url"`
	// Listen is the embedded server's client address. Default
	// "127.0.0.1:4222"; port -1 picks a free port.
	Listen string `yaml:"listen"`
	// MaxPayload is the embedded server's largest message in bytes.
	// Default 8 MiB.
	MaxPayload int `yaml:"max_payload"`
	// StreamMaxBytes bounds each input stream the daemon creates; the
	// oldest messages are dropped past it. Default 1 GiB.
	StreamMaxBytes int64 `yaml:"stream_max_bytes"`
	// StreamMaxAge bounds how long input messages are kept. Default 24h.
	StreamMaxAge time.Duration `yaml:"stream_max_age"`
	// AllowUnauthenticated lets the embedded server listen beyond the
	// loopback interface without Users: anyone who reaches the port may
	// then reload, checkpoint, delete streams and plant checkpoints.
	// Default false: such a listen address is refused.
	AllowUnauthenticated bool `yaml:"allow_unauthenticated"`
	// Users of the embedded server, each with a role. Empty, the default,
	// runs it without authentication (on loopback only, unless
	// AllowUnauthenticated); with users, anonymous clients are refused.
	// External servers have their own users: set Auth instead.
	Users []User `yaml:"users"`
	// TLS of the embedded server (CertFile and KeyFile served, clients
	// verified against CAFile if set), or of the connection to an
	// external server (CAFile verifies the server, CertFile and KeyFile
	// are the daemon's client certificate).
	TLS TLS `yaml:"tls"`
	// Replicas is the replica count of the streams, key-value buckets and
	// the object store the daemon creates: 3 on a 3-node JetStream
	// cluster, at most the number of its nodes. Default 1.
	Replicas int `yaml:"replicas"`
	// Auth is how the daemon authenticates to an external server. With
	// the embedded server the daemon makes itself a fresh nkey at every
	// start, and Auth must be empty.
	Auth ClientAuth `yaml:"auth"`
}

// Roles of the embedded server's users; the subjects each may use are
// listed in the README's Security section.
const (
	// RoleProducer publishes to the pipelines' input subjects (and
	// receives JetStream publish acknowledgements); nothing else.
	RoleProducer = "producer"
	// RoleConsumer subscribes to the output subjects and events and sends
	// embedding and nearest-word queries.
	RoleConsumer = "consumer"
	// RoleOperator may do what a consumer does, and also reload, request
	// checkpoints and status, discover the micro service and look at
	// JetStream streams and consumers without changing them.
	RoleOperator = "operator"
)

// User is one user of the embedded server: a name with a password read
// from a file or the environment, or an nkey. Passwords are never written
// in the config itself.
type User struct {
	// User is the user name; it needs PasswordFile or PasswordEnv.
	User string `yaml:"user"`
	// PasswordFile holds the password (one line; trailing white space is
	// dropped). A bcrypt hash ("$2a$...", "$2b$...", "$2y$...") is
	// compared as such, so the file need not hold the password itself.
	PasswordFile string `yaml:"password_file"`
	// PasswordEnv names the environment variable holding the password
	// (or its bcrypt hash).
	PasswordEnv string `yaml:"password_env"`
	// NKey is the user's public nkey ("U..."), instead of User; the
	// client signs the server's nonce with the matching seed.
	NKey string `yaml:"nkey"`
	// Role is producer, consumer or operator.
	Role string `yaml:"role"`
}

// TLS names certificate files, PEM encoded.
type TLS struct {
	// CertFile and KeyFile are the embedded server's certificate and key,
	// or the daemon's client certificate for an external server.
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
	// CAFile: embedded, clients must present a certificate signed by it;
	// external, the server's certificate is verified against it (default:
	// the system's roots).
	CAFile string `yaml:"ca_file"`
}

// Enabled reports whether any TLS setting is given.
func (t TLS) Enabled() bool { return t.CertFile != "" || t.KeyFile != "" || t.CAFile != "" }

// ClientAuth is how a client authenticates to an external NATS server: at
// most one of a credentials file, an nkey seed file, a user with a
// password, or a token. Secrets come from files or the environment, never
// from the config itself.
type ClientAuth struct {
	// CredentialsFile is a .creds file (user JWT and nkey seed), as made
	// by nsc for servers in operator mode.
	CredentialsFile string `yaml:"credentials_file"`
	// NKeyFile holds a user nkey seed ("SU...").
	NKeyFile string `yaml:"nkey_file"`
	// User is the user name; it needs PasswordFile or PasswordEnv.
	User         string `yaml:"user"`
	PasswordFile string `yaml:"password_file"`
	PasswordEnv  string `yaml:"password_env"`
	// TokenFile or TokenEnv holds an authentication token.
	TokenFile string `yaml:"token_file"`
	TokenEnv  string `yaml:"token_env"`
}

// Enabled reports whether any credential is given.
func (a ClientAuth) Enabled() bool { return a != ClientAuth{} }

// Service names the daemon's NATS micro service and its subjects.
type Service struct {
	// Name of the NATS micro service. Default "smtd".
	Name string `yaml:"name"`
	// Prefix of every daemon subject: events are published on
	// <prefix>.events.{errors,checkpoint,reload}, control requests are
	// served on <prefix>.control.{reload,checkpoint}, status on
	// <prefix>.status, embedding queries on <prefix>.embed.<pipeline> and
	// nearest-word queries on <prefix>.neighbours.<pipeline>.
	// Default "smtd".
	Prefix string `yaml:"prefix"`
	// QueryWorkers is how many goroutines encode embed and neighbours
	// queries at once, all from the pipeline's published snapshot, each
	// in workspaces of its own; 0 means GOMAXPROCS, which counts the P
	// the daemon adds for each learner (service.learn_nice): 3 workers
	// on 2 cores with one pipeline. Fewer workers leave more of the
	// cores to learning; more answer more queries per second. Default 0.
	QueryWorkers int `yaml:"query_workers"`
	// QueryQueue is how many queries may wait for a worker. A query that
	// finds the queue full is answered at once with error code 503 and a
	// description starting "busy:", instead of waiting until the client
	// times out. Default 256.
	QueryQueue int `yaml:"query_queue"`
	// LearnYield is how long, at most in each batch, a pipeline's
	// learner waits, between the stages of the batch, while embed and
	// neighbours queries of that pipeline wait for a worker to start on
	// them: the learner hands its core to the queries instead of
	// competing with them for it. Learning slows by at most this per
	// batch; 0 never waits. At most 1s. Default 0: on a shared 2-core
	// machine `smtd bench throughput -learn-yield 2ms` measured no gain
	// over 0 within the noise.
	LearnYield time.Duration `yaml:"learn_yield"`
	// LearnNice is how much lower than the rest of the daemon each
	// pipeline's learner runs while the daemon serves queries, as a Linux
	// nice value (0..19): the balance between learning and serving. A
	// batch begun while the daemon has received a query within the last
	// second is learned on an OS thread of its own at that niceness;
	// other batches at the daemon's priority, so that a learner nobody
	// queries does not give its core away to other processes. The daemon
	// adds one to GOMAXPROCS per learner, so that a learner never takes a
	// P from NATS traffic and queries; the kernel gives the cores to the
	// NATS server and the queries when they need them, and the learners
	// take the rest. On a
	// 2-core machine (`smtd bench throughput`, BENCHMARKS.md) 10 against
	// 0 brought the p99 of 500 embed queries/s while learning from 4.5-6.4
	// to 2.8-3.0 ms, and past capacity twice the queries were answered
	// with half the latency while learning kept a quarter of its rate;
	// without queries, learning loses a few percent to the extra P. 0
	// runs learners like everything else, and so does a GOMAXPROCS
	// environment variable, which the daemon then leaves as it is.
	// Ignored (logged) on other systems than Linux. Default 10.
	LearnNice int `yaml:"learn_nice"`
	// LearnCores is how many cores a pipeline's learning step may score
	// its patches on (k-means learning and the codes: online.KMeans.
	// SetCores; an image pipeline also extracts, whitens, takes its SMT
	// gradient and embeds on them) while the daemon serves no queries; a
	// batch begun while the daemon has received a query within the last
	// second scores on one, so that the queries find the other cores
	// free. The codes and the model are the same bit for bit on any
	// number. 0 means GOMAXPROCS as the daemon started; 1 keeps every
	// learner on one core, for a machine whose other cores belong to
	// other work. On a 2-core machine 0 learns and assigns K = 4096
	// k-means 1.3 to 1.9 times as fast as 1 (`smtd bench kmeans`,
	// BENCHMARKS.md). Default 0.
	LearnCores int `yaml:"learn_cores"`
}

// Checkpoint configures periodic checkpoints. Checkpoints are also written
// at shutdown.
type Checkpoint struct {
	// EverySamples writes a checkpoint after this many applied messages.
	// Default 10000; 0 in the file is refused, use a large value instead.
	EverySamples int64 `yaml:"every_samples" live:"true"`
	// Every writes a checkpoint after this much time with new samples.
	// Default 5m.
	Every time.Duration `yaml:"every" live:"true"`
	// Keep is how many checkpoint files per pipeline stay on disk.
	// Default 3.
	Keep int `yaml:"keep" live:"true"`
	// ObjectStore also stores each checkpoint in the JetStream object store
	// bucket "smtd-checkpoints", with the key-value bucket "smtd-latest"
	// pointing at the newest one per pipeline. Default true.
	ObjectStore bool `yaml:"object_store"`
}

// Pipeline wires one input subject through preprocessing and a learner to
// an output subject.
type Pipeline struct {
	// Name identifies the pipeline in subjects, logs and checkpoints:
	// lowercase letters, digits, '-' and '_'.
	Name string `yaml:"name"`
	// Modality is image (default), video or text.
	Modality Modality `yaml:"modality"`
	// Seed seeds the pipeline's random source. Default 1.
	Seed uint64 `yaml:"seed"`
	// Placement lists the labels (cluster.labels) a daemon must carry to
	// own this pipeline in cluster mode. Default none: any daemon may.
	Placement []string `yaml:"placement"`
	// Deterministic cuts batches by count only (never by time), so that
	// replaying a recorded stream gives the same model bit for bit, also
	// across a kill and a restart. Default false.
	Deterministic bool `yaml:"deterministic"`
	// Input is where messages come from.
	Input Input `yaml:"input"`
	// Output is where a result per input message goes.
	Output Output `yaml:"output"`
	// Batch cuts the input into minibatches.
	Batch Batch `yaml:"batch"`
	// Image describes the images of image and video pipelines.
	Image ImageShape `yaml:"image"`
	// Patches configures patch extraction and preprocessing.
	Patches Patches `yaml:"patches"`
	// Whiten configures the online whitening of patches.
	Whiten Whiten `yaml:"whiten"`
	// KMeans configures the online spherical k-means dictionary.
	KMeans KMeans `yaml:"kmeans"`
	// SMT configures the sparse manifold transform embedding of the codes.
	SMT SMT `yaml:"smt"`
	// Text configures word-token pipelines.
	Text TextSettings `yaml:"text"`
	// Video configures the frame streams of video pipelines.
	Video VideoSettings `yaml:"video"`
	// Learner is what image and video pipelines learn: smt (default:
	// patches, whitening, k-means codes and the sparse manifold transform),
	// ksm (a kernel similarity matching network on the whole image) or
	// admm (a dictionary learned by ADMM, sparse codes of the whole image).
	Learner string `yaml:"learner"`
	// KSM configures the kernel similarity matching network of learner ksm.
	KSM KSM `yaml:"ksm"`
	// ADMM configures the dictionary learner of learner admm.
	ADMM ADMM `yaml:"admm"`
	// Workers shares the pipeline's learning among the daemons of a
	// cluster (data-parallel workers).
	Workers Workers `yaml:"workers"`
}

// Workers configures data-parallel learning: every daemon of a cluster
// that carries the pipeline computes, for the minibatches the owner
// hands it, their contributions to the learner's statistics (the costly
// scoring of patches against atoms), and publishes their outputs; the
// owner merges the contributions of Merge minibatches in sequence order
// into one learning step and sends the new model to the workers.
type Workers struct {
	// Enabled turns worker mode on. It needs cluster mode, JetStream
	// input, and an image or video pipeline learning smt, or a text
	// pipeline with smt.dim > 0. Default false.
	Enabled bool `yaml:"enabled"`
	// Merge is the number of minibatches (batch.size messages each)
	// merged into one learning step, which yields one model version.
	// Default 4.
	Merge int `yaml:"merge"`
	// Staleness τ is how many versions old the model a contribution is
	// computed with may be: the minibatches of the step that makes
	// version v+1 are coded with version v−τ or newer (exactly v−τ in
	// deterministic mode). τ = 0 codes with the newest model, at the
	// price of workers waiting for every step. Default 1.
	Staleness int `yaml:"staleness"`
	// OnOwner makes the owner compute contributions as well. Default true.
	OnOwner bool `yaml:"on_owner"`
	// TaskTimeout is how long the owner waits for a minibatch's
	// contribution before handing it to another worker. Default 30s.
	TaskTimeout time.Duration `yaml:"task_timeout"`
	// Precision is the width in bits, 32 or 64, of the floats a worker
	// sends for the k-means per-atom sums and the SMT gradient, which
	// make up most of a contribution (K·(patch dim + smt.dim) values,
	// 2.2 MB at K = 4096 in float64). 32 halves what the owner receives
	// and decodes per contribution, rounding each value to 2⁻²⁴ of
	// itself; 64 sends them exactly. The owner's setting decides: it
	// travels with every task, and workers follow it. Default 32.
	Precision int `yaml:"precision"`
}

// Learners of image and video pipelines.
const (
	LearnerSMT  = "smt"  // patches → whitening → k-means codes → SMT embedding
	LearnerKSM  = "ksm"  // whole image → Hebbian/anti-Hebbian KSM network
	LearnerADMM = "admm" // whole image → ADMM sparse codes of a learned dictionary
)

// Priors of the ADMM codes.
const (
	PriorSparse  = "sparse"  // ℓ₁-penalised codes (R₁): sparse dictionary learning
	PriorSimplex = "simplex" // codes on the probability simplex (R₂): manifold approximation
)

// ADMM configures dictionary learning by kernel matching
// (dictionary-learning-kernel-matching-admm, sections 2-4; package sgd's
// ADMM): per minibatch, Z-steps (proximal or projected gradient), P-, M-
// and W-steps (the rows of W normalised for the sparse prior); the codes
// z of each input are its output, and the implicit dictionary
// A = (1/T) X Zᵀ H⁻¹ (times 1 + ω for the simplex prior) is kept from
// running sums. Images are flattened after Crop, as for ksm.
type ADMM struct {
	// Atoms is K, the number of atoms and the length of the codes.
	// Default 256.
	Atoms int `yaml:"atoms"`
	// Prior is sparse (default, R₁) or simplex (R₂).
	Prior string `yaml:"prior"`
	// Schedule is the order of the steps, 1, 2 or 3 (section 4.1).
	// Default 1.
	Schedule int `yaml:"schedule" live:"true"`
	// Lambda is λ, the weight of ‖z‖₁ (sparse prior). Default 0.1.
	Lambda float64 `yaml:"lambda" live:"true"`
	// Omega is ω of eqs. 2 and 4. Default 0.0001.
	Omega float64 `yaml:"omega" live:"true"`
	// Rho is ρ of the augmented Lagrangian (eq. 8). Default 0.5.
	Rho float64 `yaml:"rho" live:"true"`
	// LearningRate is η_W of the W-step (eq. 11). Default 0.01.
	LearningRate float64 `yaml:"learning_rate" live:"true"`
	// Iterations is the number of gradient updates of each Z-step.
	// Default 15.
	Iterations int `yaml:"iterations" live:"true"`
	// WarmIterations is the number of accelerated gradient updates that
	// solve the codes of each fresh minibatch for the current W before
	// its Z-step (section 4.1's warm start). Default 0: the learner's
	// choice, 50 for the simplex prior, Iterations for schedule 3 and
	// none otherwise; -1: none.
	WarmIterations int `yaml:"warm_iterations" live:"true"`
	// Passes is the number of ADMM iterations per minibatch. Default 1.
	Passes int `yaml:"passes" live:"true"`
	// Memory is the number of samples the running sums behind the
	// dictionary and R² average over (.inf: never forget). Default 10000.
	Memory float64 `yaml:"memory" live:"true"`
	// Crop removes this many pixels from each border first. Default 0.
	Crop int `yaml:"crop"`
	// WarmStart is the warm start of section 4.1: the first WarmStart
	// samples train an online spherical k-means dictionary of Atoms atoms
	// (k-means++ seeded), and ADMM starts from its atoms; until then the
	// outputs are the codes of the initial random W. Default 0: no warm
	// start.
	WarmStart int64 `yaml:"warm_start"`
}

// ADMMInputs returns the input dimension of the ADMM learner of p.
func (p *Pipeline) ADMMInputs() int {
	return (p.Image.Width - 2*p.ADMM.Crop) * (p.Image.Height - 2*p.ADMM.Crop) * p.Image.Channels
}

// Kernels of the KSM network.
const (
	KernelGaussian    = "gaussian"     // exp(−‖u−v‖²/2σ²)
	KernelPowerCosine = "power-cosine" // ‖u‖‖v‖(û·v̂)^α
	KernelLinear      = "linear"       // u·v
	KernelPolynomial  = "polynomial"   // (γ u·v + c₀)^d
)

// KSM configures the kernel similarity matching network
// (kernel-similarity-matching-hebbian, sections 2-3): feedforward W
// (Hebbian), regulatory q and lateral L (anti-Hebbian), responses
// y = (L + λI)⁻¹(q ∘ f(W, x)) published for every input. Images are
// flattened (rows, columns, channels) after Crop; a 1xN raw float32
// "image" is a point of N coordinates.
type KSM struct {
	// Neurons is n, the number of responses. Default 64.
	Neurons int `yaml:"neurons"`
	// Kernel is gaussian (default), power-cosine, linear or polynomial.
	Kernel string `yaml:"kernel"`
	// Sigma is σ of the Gaussian kernel. Default 1.
	Sigma float64 `yaml:"sigma"`
	// Alpha is α of the power-cosine kernel. Default 3.
	Alpha int `yaml:"alpha"`
	// Degree, Gamma and Coef0 are d, γ and c₀ of the polynomial kernel.
	// Defaults 2, 1 and 0.
	Degree int     `yaml:"degree"`
	Gamma  float64 `yaml:"gamma"`
	Coef0  float64 `yaml:"coef0"`
	// Mixing replaces the scalar regulatory terms q_i by a full matrix Q
	// (an extension of the paper; see hebbian.Settings). Default false.
	Mixing bool `yaml:"mixing"`
	// Lambda is λ of eq. 8. Default 0.001.
	Lambda float64 `yaml:"lambda"`
	// EtaW, EtaQ and EtaL are the rates of eq. 10: descent on W and q,
	// ascent on L (EtaL much larger than the others). Live, in (0, 0.3],
	// (0, 0.3] and (0, 1]: beyond them the network diverges on MNIST.
	// Defaults 0.01, 0.01 and 0.1.
	EtaW float64 `yaml:"eta_w" live:"true"`
	EtaQ float64 `yaml:"eta_q" live:"true"`
	EtaL float64 `yaml:"eta_l" live:"true"`
	// AnnealEvery multiplies the three rates by AnnealFactor after every
	// this many minibatches, at most MaxAnneals times (A.6). Defaults
	// 10000, 0.1 and 1; anneal_every 0 in the file is refused, use
	// max_anneals 0 to never anneal.
	AnnealEvery  int64   `yaml:"anneal_every" live:"true"`
	AnnealFactor float64 `yaml:"anneal_factor" live:"true"`
	MaxAnneals   int     `yaml:"max_anneals" live:"true"`
	// InitScale is the standard deviation of the initial weights W.
	// Default 1.
	InitScale float64 `yaml:"init_scale"`
	// Init is how W starts: random (default), N(0, InitScale²) entries,
	// or data, the first Neurons inputs of the stream, one per neuron,
	// each taken as it arrives (before the step that learns from it).
	// With data the landmarks start where the inputs are, which on half
	// moons is what lets mixing match the kernel better than Nyström
	// with k-means landmarks.
	Init string `yaml:"init"`
	// Crop removes this many pixels from each border of an image before
	// the network (MNIST: 4 gives the paper's 20x20). Default 0.
	Crop int `yaml:"crop"`
}

// Initial weights of the KSM network.
const (
	InitRandom = "random"
	InitData   = "data"
)

// KSMInputs returns the input dimension of the KSM network of p.
func (p *Pipeline) KSMInputs() int {
	return (p.Image.Width - 2*p.KSM.Crop) * (p.Image.Height - 2*p.KSM.Crop) * p.Image.Channels
}

// Transport of a pipeline's input.
const (
	JetStream = "jetstream" // durable pull consumer on a stream (default)
	Core      = "core"      // plain subscription: lower latency, no replay
)

// Input configures where a pipeline's messages come from.
type Input struct {
	// Subject the pipeline consumes. Required, unique across pipelines.
	Subject string `yaml:"subject"`
	// Transport is jetstream (default: a stream, created if absent, read by
	// a durable pull consumer) or core (a plain subscription).
	Transport string `yaml:"transport"`
	// Stream names the JetStream stream. Default SMTD_<NAME>; an existing
	// stream that already captures the subject is used as it is.
	Stream string `yaml:"stream"`
	// MaxBytes rejects larger messages. Default 4 MiB.
	MaxBytes int `yaml:"max_bytes"`
	// MaxValue bounds raw float32 image values: a message with a value
	// outside [−MaxValue, MaxValue] is rejected (reason out_of_range).
	// uint8 and PNG images are scaled to [0, 1] and always fit. Default
	// 1000.
	MaxValue float64 `yaml:"max_value" live:"true"`
	// OnReset says what happens when the stream under a checkpoint was
	// deleted and recreated, or the checkpoint belongs to another instance
	// of the stream: restart (default) keeps the model and reads the
	// stream from its first message; refuse does not start the pipeline.
	// Either way the daemon logs it and publishes an event.
	OnReset string `yaml:"on_reset"`
}

// Policies for a stream reset under a checkpoint.
const (
	ResetRestart = "restart" // keep the model, read the new stream from its start
	ResetRefuse  = "refuse"  // do not start the pipeline
)

// Output encodings.
const (
	Float32 = "float32" // little-endian float32 vector, shape in headers
	JSON    = "json"    // a JSON object
)

// Output configures where results go.
type Output struct {
	// Subject receives one message per input message. Default
	// smtd.out.<name>.
	Subject string `yaml:"subject"`
	// Encoding is float32 (default) or json.
	Encoding string `yaml:"encoding" live:"true"`
	// Transport is core (default: plain publishes, at-least-once across
	// crashes: outputs of messages applied after the last checkpoint are
	// published again after a restart) or jetstream (published into the
	// stream Stream with Nats-Msg-Id <pipeline>:<source sequence>, so the
	// server drops a republished output within DuplicateWindow:
	// effectively once).
	Transport string `yaml:"transport"`
	// Stream is the output stream of transport jetstream. Default
	// SMTD_OUT_<NAME>, created if absent.
	Stream string `yaml:"stream"`
	// DuplicateWindow is how long the output stream remembers message
	// IDs: a restart must come within it for outputs to stay
	// effectively once. Default 10m.
	DuplicateWindow time.Duration `yaml:"duplicate_window"`
}

// Batch configures micro-batching.
type Batch struct {
	// Size is the most messages in one minibatch. Default 32.
	Size int `yaml:"size"`
	// Timeout applies a partial minibatch after this long. Ignored in
	// deterministic mode. Default 100ms.
	Timeout time.Duration `yaml:"timeout" live:"true"`
}

// ImageShape is the expected shape of a pipeline's images. Messages of
// another shape are rejected.
type ImageShape struct {
	// Width in pixels. Default 28.
	Width int `yaml:"width"`
	// Height in pixels. Default 28.
	Height int `yaml:"height"`
	// Channels per pixel: 1 (gray) or 3 (RGB). Default 1.
	Channels int `yaml:"channels"`
}

// Patches configures patch extraction (smt-minimalistic, App. C).
type Patches struct {
	// Size is the side T of the TxT patches. Default 6.
	Size int `yaml:"size"`
	// Stride between patch positions. Default 1.
	Stride int `yaml:"stride"`
	// Mean removal: none, patch (each patch's own mean) or contextual (the
	// mean of the patches within Context grid steps, App. C). Default
	// contextual.
	Mean string `yaml:"mean"`
	// Context is the range d of the contextual mean. Default 3 (fewer
	// blank patches and better embeddings than 1; see BENCHMARKS.md).
	Context int `yaml:"context"`
	// MinNorm: whitened patches with a smaller L2 norm are blank; they are
	// left out of learning and get an all-zero code. Default 0.1.
	MinNorm float64 `yaml:"min_norm" live:"true"`
}

// Whiten configures online whitening x ← (λI+Σ)^(-1/2) x̄.
type Whiten struct {
	// Lambda is λ. Default 0.1.
	Lambda float64 `yaml:"lambda" live:"true"`
	// RefreshEvery recomputes the operator from Σ every this many batches
	// (after a doubling warm-up: batches 1, 2, 4, ...). Default 64.
	RefreshEvery int `yaml:"refresh_every" live:"true"`
	// FreezeAfter stops updating Σ after this many patches; 0 never
	// freezes. Default 1000000.
	FreezeAfter int64 `yaml:"freeze_after" live:"true"`
}

// Sparse codes of the k-means stage (smt-minimalistic, section 3).
const (
	CodeVQ = "vq" // 1-sparse: the atom of largest cosine
	CodeGQ = "gq" // every atom with cosine >= threshold
)

// KMeans configures online spherical k-means (smt-minimalistic, App. D).
type KMeans struct {
	// Atoms is the dictionary size K. Default 256.
	Atoms int `yaml:"atoms"`
	// LearningRate is η of Algorithm 1. Default 1.
	LearningRate float64 `yaml:"learning_rate" live:"true"`
	// Decay anneals the rate, η_t = η/(1+Decay·t), t in batches. Default 0.
	Decay float64 `yaml:"decay" live:"true"`
	// Memory is how many assigned patches an atom of average use averages
	// over: per-atom counts decay so that the dictionary keeps converging
	// and follows a drifting stream (.inf: never forget). Default 100.
	Memory float64 `yaml:"memory" live:"true"`
	// Code is vq (default) or gq. Video pipelines weight the f_gq atoms
	// by cos − Threshold (soft-thresholded cosines), so that a code moves
	// continuously with its patch from frame to frame.
	Code string `yaml:"code" live:"true"`
	// Threshold is t of f_gq. Default 0.3.
	Threshold float64 `yaml:"threshold" live:"true"`
	// ReseedAfter re-seeds an atom unused for this many batches from recent
	// data. Default 100.
	ReseedAfter int `yaml:"reseed_after" live:"true"`
}

// Solvers of the SMT embedding.
const (
	SolverSGD    = "sgd"    // whitened-gradient SGD, a step per minibatch
	SolverClosed = "closed" // generalised eigenproblem, solved from time to time
)

// SMT configures the sparse manifold transform (sparse-manifold-transform
// section 3 and Supp. C; smt-minimalistic sections 2-3): an embedding P of
// the k-means codes, min ‖PAD‖² s.t. PVPᵀ = I, with D the first-order
// neighbour relation of patches within Context grid positions.
type SMT struct {
	// Dim is the embedding dimension (rows of P); 0 turns SMT off and the
	// pipeline publishes pooled k-means codes. Default 32.
	Dim int `yaml:"dim"`
	// Context is the range d, in patch positions: patches whose grid rows
	// and columns each differ by at most d are neighbours; 0 means the
	// whole image. Default 3. Video pipelines ignore it: their neighbours
	// are the same patch in the previous and next frame of the stream.
	Context int `yaml:"context"`
	// Blank is how blank patches enter: atom (one more atom, default) or
	// skip (left out, zero embedding).
	Blank string `yaml:"blank"`
	// Solver is sgd (default) or closed.
	Solver string `yaml:"solver"`
	// LearningRate is η of the SGD step, in (0, 0.5].
	// Default 0.1.
	LearningRate float64 `yaml:"learning_rate" live:"true"`
	// Decay anneals η_t = η/(1+Decay·t), t in SGD steps. Default 0.01.
	Decay float64 `yaml:"decay" live:"true"`
	// Gamma0 weighs the smoothness term (γ₀ of Supp. C). Default 1.
	Gamma0 float64 `yaml:"gamma0" live:"true"`
	// Gamma1 weighs the sparsity term by shrinkage (γ₁); 0 (default) has
	// the closed-form optimum as fixed point.
	Gamma1 float64 `yaml:"gamma1" live:"true"`
	// Memory is how many patches the statistics V and ADDᵀAᵀ average
	// over, so they follow a dictionary that still moves; 0 never
	// forgets. Default 5000000.
	Memory float64 `yaml:"memory" live:"true"`
	// SolveEvery re-solves the closed form every this many minibatches
	// (and before every checkpoint). Default 100.
	SolveEvery int `yaml:"solve_every" live:"true"`
	// Drop leaves out this many of the smallest eigenvectors (the first
	// is the constant function, which embeds every atom alike): any
	// number with the closed solver; 0 or 1 with sgd, which keeps P
	// orthogonal to the constant (vq codes). It helps at low dimensions
	// (MNIST, dimension 4: BENCHMARKS.md). Default 0.
	Drop int `yaml:"drop"`
	// NonRedundant chooses the rows of the closed-form P one at a time,
	// each unpredictable from the rows before it
	// (non-redundant-spectral-dimensionality-reduction, Alg. 1, on the
	// atoms weighted by their usage), so that a low dimension carries
	// more of the manifold. Closed solver, vq codes only. Default false.
	NonRedundant bool `yaml:"nonredundant"`
	// PoolKernel and PoolStride pool the patch embeddings of an image
	// (average pooling, then per-position L2 normalisation). Defaults 4
	// and 2.
	PoolKernel int `yaml:"pool_kernel"`
	PoolStride int `yaml:"pool_stride"`
}

// TextSettings configures word-token pipelines. With smt.dim > 0 the
// pipeline learns SMT word embeddings (smt-minimalistic App. B): 1-hot
// codes over the vocabulary, tokens of one message at most Window apart
// are neighbours, and the embeddings, the columns of P, are solved in
// closed form every smt.solve_every minibatches and before checkpoints.
type TextSettings struct {
	// Vocabulary is the most distinct words kept; when full, the rarest
	// word is replaced (its co-occurrences are forgotten). Default 50000.
	Vocabulary int `yaml:"vocabulary"`
	// VocabularyBytes bounds the vocabulary's memory: its words' bytes
	// plus about 80 bytes per word; when a new word does not fit, the
	// rarest words are replaced or dropped (their co-occurrences are
	// forgotten). At least max_token_bytes+256. Default 8388608 (8 MiB:
	// 50000 words of 64 bytes fit).
	VocabularyBytes int `yaml:"vocabulary_bytes"`
	// MaxTokens rejects messages with more tokens. Default 10000.
	MaxTokens int `yaml:"max_tokens"`
	// MaxTokenBytes rejects messages with a longer token (after
	// lowercasing), reason token_too_long: no word of natural text comes
	// close, and a long run of letters or digits is not one. Default 64.
	MaxTokenBytes int `yaml:"max_token_bytes"`
	// Window is w: tokens of one message at most w positions apart
	// co-occur. Default 4.
	Window int `yaml:"window"`
	// MaxPairs bounds the word pairs stored (24 bytes each); past it the
	// weakest are pruned. Default 3145728.
	MaxPairs int `yaml:"max_pairs" live:"true"`
	// MinCount leaves words seen fewer times out of the embedding (zero
	// vector). Default 10.
	MinCount float64 `yaml:"min_count" live:"true"`
	// Weighting of the co-occurrence pairs: ppmi (default; positive
	// pointwise mutual information) or counts (the paper's raw counts).
	Weighting string `yaml:"weighting" live:"true"`
	// PublishVocabulary publishes every word's embedding after each solve
	// on <output.subject>.vocabulary. Default true.
	PublishVocabulary bool `yaml:"publish_vocabulary" live:"true"`
}

// VideoSettings configures how a video pipeline follows its streams (the
// Smtd-Stream header) for the temporal SMT of sparse-manifold-transform
// eq. 8, which links frames t−1, t and t+1 of one stream.
type VideoSettings struct {
	// MaxStreams bounds the streams followed at once; a new stream past
	// it forgets the least recently seen one. Default 1024.
	MaxStreams int `yaml:"max_streams"`
	// Reorder is how many frames of a stream may arrive ahead of an
	// earlier one; a frame still missing after that is taken as dropped
	// and breaks the stream's chain of triples. Default 2.
	Reorder int `yaml:"reorder"`
	// MaxFrameJump is the horizon of a stream: a frame whose index is
	// further than this from the stream's newest index, ahead or behind,
	// restarts the stream's chain there instead of counting as late or as
	// a huge gap. At least reorder+1. Default 1000.
	MaxFrameJump int `yaml:"max_frame_jump"`
}

// DefaultMaxFrameJump is the default video.max_frame_jump.
const DefaultMaxFrameJump = 1000

// EmbedSubject is where the pipeline answers embedding queries.
func (c *Config) EmbedSubject(pipeline string) string {
	return c.Service.Prefix + ".embed." + pipeline
}

// NeighboursSubject is where a text pipeline answers nearest-word queries.
func (c *Config) NeighboursSubject(pipeline string) string {
	return c.Service.Prefix + ".neighbours." + pipeline
}

// Subject returns <prefix>.<suffix>, for events, control and status.
func (c *Config) Subject(suffix string) string {
	return c.Service.Prefix + "." + suffix
}

// StreamName returns the JetStream stream a pipeline reads.
func (p *Pipeline) StreamName() string {
	if p.Input.Stream != "" {
		return p.Input.Stream
	}
	return "SMTD_" + upperName(p.Name)
}

func upperName(s string) string {
	b := []byte(s)
	for i, c := range b {
		switch {
		case c >= 'a' && c <= 'z':
			b[i] = c - 'a' + 'A'
		case c == '-':
			b[i] = '_'
		}
	}
	return string(b)
}

// PatchesPerImage is the number of patch positions in one image.
func (p *Pipeline) PatchesPerImage() int {
	rows := (p.Image.Height-p.Patches.Size)/p.Patches.Stride + 1
	cols := (p.Image.Width-p.Patches.Size)/p.Patches.Stride + 1
	return rows * cols
}

// OutputStreamName returns the JetStream stream of a pipeline's outputs
// (output transport jetstream).
func (p *Pipeline) OutputStreamName() string {
	if p.Output.Stream != "" {
		return p.Output.Stream
	}
	return "SMTD_OUT_" + upperName(p.Name)
}

// String names the pipeline for logs.
func (p *Pipeline) String() string { return fmt.Sprintf("%s(%s)", p.Name, p.Modality) }
