package config

import "time"

// Default returns the configuration the daemon runs with when no file is
// given: an embedded NATS server on 127.0.0.1:4222 with JetStream, data
// under ./smtd-data, and one pipeline per modality:
//
//	images  smtd.in.images → smtd.out.images  (28x28 gray, 6x6 patches, k-means K=256)
//	frames  smtd.in.frames → smtd.out.frames  (32x32 gray video frames)
//	words   smtd.in.words  → smtd.out.words   (UTF-8 text, word tokens)
func Default() *Config {
	return &Config{
		Log:     Log{Level: "info", Format: "json"},
		DataDir: "./smtd-data",
		NATS: NATS{
			Listen:         "127.0.0.1:4222",
			MaxPayload:     8 << 20,
			StreamMaxBytes: 1 << 30,
			StreamMaxAge:   24 * time.Hour,
			Replicas:       1,
		},
		Cluster: Cluster{LeaseTTL: 4 * time.Second},
		Service: Service{Name: "smtd", Prefix: "smtd", QueryQueue: 256, LearnNice: 10},
		Checkpoint: Checkpoint{
			EverySamples: 10000,
			Every:        5 * time.Minute,
			Keep:         3,
			ObjectStore:  true,
		},
		Pipelines: []Pipeline{
			DefaultPipeline(Image, "images"),
			DefaultPipeline(Video, "frames"),
			DefaultPipeline(Text, "words"),
		},
	}
}

// DefaultPipeline returns the defaults of a pipeline of modality m named
// name. An unknown modality gets the image defaults.
func DefaultPipeline(m Modality, name string) Pipeline {
	p := Pipeline{
		Name:     name,
		Modality: m,
		Seed:     1,
		Input: Input{
			Transport: JetStream,
			MaxBytes:  4 << 20,
			MaxValue:  1000,
			OnReset:   ResetRestart,
		},
		Output: Output{Subject: "smtd.out." + name, Encoding: Float32, Transport: Core, DuplicateWindow: 10 * time.Minute},
		Batch:  Batch{Size: 32, Timeout: 100 * time.Millisecond},
		Image:  ImageShape{Width: 28, Height: 28, Channels: 1},
		Patches: Patches{
			Size:    6,
			Stride:  1,
			Mean:    "contextual",
			Context: 3,
			MinNorm: 0.1,
		},
		Whiten: Whiten{Lambda: 0.1, RefreshEvery: 64, FreezeAfter: 1000000},
		KMeans: KMeans{
			Atoms:        256,
			LearningRate: 1,
			Memory:       100,
			Code:         CodeVQ,
			Threshold:    0.3,
			ReseedAfter:  100,
		},
		SMT: SMT{
			Dim:          32,
			Context:      3,
			Blank:        "atom",
			Solver:       SolverSGD,
			LearningRate: 0.1,
			Decay:        0.01,
			Gamma0:       1,
			Memory:       5000000,
			SolveEvery:   100,
			PoolKernel:   4,
			PoolStride:   2,
		},
		Text: TextSettings{
			Vocabulary: 50000, VocabularyBytes: 8 << 20, MaxTokens: 10000, MaxTokenBytes: 64, Window: 4, MaxPairs: 3 << 20,
			MinCount: 10, Weighting: "ppmi", PublishVocabulary: true,
		},
		Video:   VideoSettings{MaxStreams: 1024, Reorder: 2, MaxFrameJump: DefaultMaxFrameJump},
		Learner: LearnerSMT,
		ADMM: ADMM{
			Atoms: 256, Prior: PriorSparse, Schedule: 1, Lambda: 0.1, Omega: 1e-4, Rho: 0.5,
			LearningRate: 0.01, Iterations: 15, Passes: 1, Memory: 10000,
		},
		KSM: KSM{
			Neurons: 64, Kernel: KernelGaussian, Sigma: 1, Alpha: 3, Degree: 2, Gamma: 1,
			Lambda: 0.001, EtaW: 0.01, EtaQ: 0.01, EtaL: 0.1,
			AnnealEvery: 10000, AnnealFactor: 0.1, MaxAnneals: 1, InitScale: 1, Init: InitRandom,
		},
		Workers: Workers{Merge: 4, Staleness: 1, OnOwner: true, TaskTimeout: 30 * time.Second, Precision: 32},
	}
	switch m {
	case Image:
		p.Input.Subject = "smtd.in.images"
	case Video:
		p.Input.Subject = "smtd.in.frames"
		p.Image = ImageShape{Width: 32, Height: 32, Channels: 1}
	case Text:
		p.Input.Subject = "smtd.in.words"
		p.Batch.Size = 256
		p.SMT.Dim = 128
		p.SMT.Solver = SolverClosed
	}
	return p
}
