package config

import (
	"errors"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestLoadFiles(t *testing.T) {
	for _, tc := range []struct {
		file    string
		wantErr []string // substrings, each in its own error line
	}{
		{file: "minimal.good.yaml"},
		{file: "external.good.yaml"},
		{file: "unknown-field.bad.yaml", wantErr: []string{"unknown-field.bad.yaml:7: pipelines[0].kmeans.atomz: unknown field"}},
		{file: "wrong-type.bad.yaml", wantErr: []string{"wrong-type.bad.yaml:2: checkpoint.every_samples: cannot unmarshal !!str `lots` into int64"}},
		{file: "out-of-range.bad.yaml", wantErr: []string{
			"out-of-range.bad.yaml:8: pipelines[0].kmeans.atoms: must be in 1..1048576, got 0",
			"out-of-range.bad.yaml:9: pipelines[0].kmeans.learning_rate: must be in (0, 1], got -0.5",
			"out-of-range.bad.yaml:11: pipelines[0].patches.size: patch 40x40 is larger than the 28x28 image",
		}},
		{file: "duplicate-subject.bad.yaml", wantErr: []string{`:5: pipelines[1].input.subject: duplicate subject "cams.*" overlaps "cams.front"`}},
		{file: "duplicate-name.bad.yaml", wantErr: []string{
			`:4: pipelines[1].name: duplicate pipeline name "a"`,
			`:4: pipelines[1].output.subject: duplicate subject "smtd.out.a"`,
		}},
		{file: "bad-modality.bad.yaml", wantErr: []string{`:3: pipelines[0].modality: must be image, video or text, got "audio"`}},
		{file: "syntax.bad.yaml", wantErr: []string{"syntax.bad.yaml: line 1: did not find expected"}},
		{file: "no-pipelines.bad.yaml", wantErr: []string{":1: pipelines: at least one pipeline is needed"}},
		{file: "reserved-subject.bad.yaml", wantErr: []string{`reserved for the daemon's own smtd.* subjects`}},
		{file: "unstable-live.bad.yaml", wantErr: []string{
			":5: pipelines[0].whiten.lambda: must be in [1e-6, 1e3], got 1e-300",
			":6: pipelines[0].smt.gamma0: must be in [1e-3, 10], got 1e+30",
			":6: pipelines[0].smt.gamma1: must be in [0, 1], got 1e+30",
			":11: pipelines[1].ksm.eta_w: must be in (0, 0.3], got 1e+300",
		}},
		{file: "query-pool.bad.yaml", wantErr: []string{
			"query-pool.bad.yaml:2: service.query_workers: must be in 0..1024 (0: GOMAXPROCS), got -1",
			"query-pool.bad.yaml:3: service.query_queue: must be in 1..1048576, got 0",
			"query-pool.bad.yaml:4: service.learn_yield: must be in 0..1s, got -1ms",
			"query-pool.bad.yaml:5: service.learn_nice: must be in 0..19 (0: learners at the daemon's priority), got 20",
		}},
		{file: "smt-drop.bad.yaml", wantErr: []string{
			"smt-drop.bad.yaml:8: pipelines[0].smt.drop: sgd leaves out at most the constant eigenvector: must be 0 or 1 (more: use smt.solver closed), got 2",
			"smt-drop.bad.yaml:16: pipelines[1].smt.drop: 1 with smt.solver sgd needs kmeans.code vq",
		}},
		{file: "observe.good.yaml"},
		{file: "observe.bad.yaml", wantErr: []string{`observe.bad.yaml:2: observe.http: must be empty or host:port with port 0..65535, got "localhost"`}},
		{file: "cluster.good.yaml"},
		{file: "cluster-embedded.bad.yaml", wantErr: []string{
			"cluster-embedded.bad.yaml:2: nats.replicas: must be 1 with the embedded server",
			"cluster-embedded.bad.yaml:6: cluster.lease_ttl: must be in 1s..5m, got 100ms",
			`cluster-embedded.bad.yaml:5: cluster.name: must be one subject token of letters, digits, '-' and '_', got "d.1"`,
			"cluster-embedded.bad.yaml:4: cluster.enabled: needs nats.url",
		}},
		{file: "workers.bad.yaml", wantErr: []string{
			"workers.bad.yaml:6: pipelines[0].workers.merge: must be in 1..256, got 0",
			"workers.bad.yaml:7: pipelines[0].workers.precision: must be 32 or 64, got 16",
			"workers.bad.yaml:5: pipelines[0].workers.enabled: needs cluster.enabled",
			"workers.bad.yaml:11: pipelines[1].workers.enabled: needs cluster.enabled",
			"workers.bad.yaml:11: pipelines[1].workers.enabled: on text needs smt.dim > 0",
			"workers.bad.yaml:16: pipelines[2].workers.enabled: needs cluster.enabled",
			"workers.bad.yaml:16: pipelines[2].workers.enabled: supports image and video pipelines learning smt and text, got learner ksm",
		}},
		{file: "open-listen.good.yaml"},
		{file: "nkey-users.good.yaml"},
		{file: "open-listen.bad.yaml", wantErr: []string{`open-listen.bad.yaml:3: nats.listen: "0.0.0.0:4222" is beyond the loopback interface and nats.users is empty: anyone who reaches it could reload, checkpoint, delete streams and plant checkpoints; add nats.users, or set nats.allow_unauthenticated: true`}},
		{file: "inline-password.bad.yaml", wantErr: []string{
			"inline-password.bad.yaml:5: nats.users[0].password: unknown field",
			"inline-password.bad.yaml:4: nats.users[0]: needs password_file or password_env",
		}},
		// Unknown keys, wrong types and out-of-range values, all at once;
		// the values that did not decode (batch.size) are not also out
		// of range.
		{file: "mixed.bad.yaml", wantErr: []string{
			"mixed.bad.yaml:4: pipelines[0].kmeans.atoms: must be in 1..1048576, got 0",
			"mixed.bad.yaml:5: pipelines[0].patches.size: patch 40x40 is larger than the 28x28 image",
			"mixed.bad.yaml:6: pipelines[0].bogus: unknown field",
			"mixed.bad.yaml:7: pipelines[0].batch.size: cannot unmarshal !!str `abc` into int",
			"mixed.bad.yaml:9: pipelines[0].smt.learning_rate: cannot unmarshal !!str `fast` into float64",
		}},
		// A sequence element that does not decode at all is dropped by
		// the decoder, shifting the ones after it: only decoding errors.
		{file: "mixed-sequence.bad.yaml", wantErr: []string{
			"mixed-sequence.bad.yaml:2: pipelines[0]: cannot unmarshal !!int `5` into config.Pipeline",
			"mixed-sequence.bad.yaml:4: pipelines[1].kmeans.memory: cannot unmarshal !!str `long` into float64",
		}},
	} {
		t.Run(tc.file, func(t *testing.T) {
			cfg, err := Load(filepath.Join("..", "testdata", "config", tc.file))
			if len(tc.wantErr) == 0 {
				if err != nil {
					t.Fatalf("unexpected error:\n%v", err)
				}
				if cfg == nil {
					t.Fatal("nil config")
				}
				return
			}
			if err == nil {
				t.Fatalf("no error, want %q", tc.wantErr)
			}
			var errs Errors
			if !errors.As(err, &errs) {
				t.Fatalf("error %T is not config.Errors: %v", err, err)
			}
			if len(errs) != len(tc.wantErr) {
				t.Errorf("got %d errors, want %d:\n%v", len(errs), len(tc.wantErr), err)
			}
			for _, want := range tc.wantErr {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error does not contain %q:\n%v", want, err)
				}
			}
			if strings.HasPrefix(tc.file, "mixed") {
				for i, e := range errs {
					if i < len(tc.wantErr) && !strings.HasSuffix(e.Error(), tc.wantErr[i]) {
						t.Errorf("error %d is %q, want %q: not in file order", i, e, tc.wantErr[i])
					}
				}
			}
		})
	}
}

// The commented example is the reference documentation of every field:
// it must say exactly what the built-in default is.
func TestExampleIsDefault(t *testing.T) {
	cfg, err := Load("example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(cfg, Default()) {
		t.Errorf("example.yaml differs from Default():\n got %+v\nwant %+v", cfg, Default())
	}
	if err := Default().Validate(); err != nil {
		t.Errorf("default config invalid: %v", err)
	}
}

func TestDefaultsFollowModality(t *testing.T) {
	cfg, err := Parse([]byte("pipelines:\n  - {name: t, modality: text, input: {subject: a.b}}\n  - {name: v, modality: video, input: {subject: c.d}}\n"), "x.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.Pipelines[0].Batch.Size; got != 256 {
		t.Errorf("text batch size = %d, want the text default 256", got)
	}
	if got := cfg.Pipelines[1].Image.Width; got != 32 {
		t.Errorf("video width = %d, want the video default 32", got)
	}
	if got := cfg.Pipelines[1].Output.Subject; got != "smtd.out.v" {
		t.Errorf("output subject = %q, want smtd.out.v", got)
	}
	if got := cfg.Checkpoint.Every; got != 5*time.Minute {
		t.Errorf("checkpoint.every = %v, want 5m", got)
	}
}

func TestLiveChanges(t *testing.T) {
	old := Default()
	new := Default()
	new.Pipelines[0].KMeans.LearningRate = 0.5
	new.Pipelines[2].Batch.Timeout = time.Second
	new.Pipelines[0].KMeans.Atoms = 512
	new.Pipelines[1].Input.Subject = "other"
	new.Pipelines[1].KMeans.Code = CodeGQ // the SMT statistics' layout depends on it
	live, refused := LiveChanges(old, new)
	wantLive := []string{"pipelines[0].kmeans.learning_rate", "pipelines[2].batch.timeout"}
	wantRefused := []string{"pipelines[0].kmeans.atoms", "pipelines[1].input.subject", "pipelines[1].kmeans.code (with smt.dim > 0)"}
	if !reflect.DeepEqual(live, wantLive) {
		t.Errorf("live = %v, want %v", live, wantLive)
	}
	if !reflect.DeepEqual(refused, wantRefused) {
		t.Errorf("refused = %v, want %v", refused, wantRefused)
	}
}

func TestSubjectsOverlap(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want bool
	}{
		{"a.b", "a.b", true},
		{"a.b", "a.c", false},
		{"a.*", "a.c", true},
		{"a.>", "a.c.d", true},
		{"a.*", "a.c.d", false},
		{"a", "a.b", false},
	} {
		if got := subjectsOverlap(tc.a, tc.b); got != tc.want {
			t.Errorf("subjectsOverlap(%q, %q) = %v, want %v", tc.a, tc.b, got, tc.want)
		}
	}
}

// A file needs only what differs from the defaults: each top-level key
// alone gives the default pipelines plus that one change.
func TestSingleTopLevelKey(t *testing.T) {
	for _, tc := range []struct {
		key, yaml string
		change    func(*Config)
	}{
		{"log", "log:\n  level: debug\n", func(c *Config) { c.Log.Level = "debug" }},
		{"data_dir", "data_dir: /var/lib/smtd\n", func(c *Config) { c.DataDir = "/var/lib/smtd" }},
		{"nats", "nats:\n  listen: 127.0.0.1:-1\n", func(c *Config) { c.NATS.Listen = "127.0.0.1:-1" }},
		{"nats url", "nats:\n  url: nats://example.org:4222\n", func(c *Config) { c.NATS.URL = "nats://example.org:4222" }},
		{"service", "service:\n  prefix: lab\n", func(c *Config) { c.Service.Prefix = "lab" }},
		{"checkpoint", "checkpoint:\n  keep: 5\n", func(c *Config) { c.Checkpoint.Keep = 5 }},
		{"pipelines", "pipelines:\n  - name: words\n    modality: text\n", func(c *Config) { c.Pipelines = c.Pipelines[2:] }},
		{"empty", "", func(*Config) {}},
	} {
		t.Run(tc.key, func(t *testing.T) {
			got, err := Parse([]byte(tc.yaml), tc.key+".yaml")
			if err != nil {
				t.Fatalf("refused:\n%v", err)
			}
			want := Default()
			tc.change(want)
			if !reflect.DeepEqual(got, want) {
				t.Errorf("got  %+v\nwant %+v", got, want)
			}
		})
	}
}

func TestBoundsValidated(t *testing.T) {
	for _, tc := range []struct {
		yaml, want string
	}{
		{"pipelines:\n  - {name: w, modality: text, text: {max_token_bytes: 0}}\n", "pipelines[0].text.max_token_bytes: must be in 1..1048576, got 0"},
		{"pipelines:\n  - {name: w, modality: text, text: {max_token_bytes: 1000, vocabulary_bytes: 1000}}\n", "pipelines[0].text.vocabulary_bytes: must be in text.max_token_bytes+256 (1256)"},
		{"pipelines:\n  - {name: v, modality: video, video: {reorder: 4, max_frame_jump: 4}}\n", "pipelines[0].video.max_frame_jump: must be in video.reorder+1 (5)"},
	} {
		_, err := Parse([]byte(tc.yaml), "x.yaml")
		if err == nil || !strings.Contains(err.Error(), "x.yaml:2: "+tc.want) {
			t.Errorf("%q: error %v, want %q", tc.yaml, err, tc.want)
		}
	}
	p := DefaultPipeline(Text, "w")
	if p.Text.MaxTokenBytes != 64 || p.Text.VocabularyBytes != 8<<20 || DefaultPipeline(Video, "v").Video.MaxFrameJump != DefaultMaxFrameJump {
		t.Errorf("defaults %+v, %+v", p.Text, DefaultPipeline(Video, "v").Video)
	}
}
