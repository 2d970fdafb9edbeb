package client_test

import (
	"context"
	"errors"
	"image"
	"io"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/smtd/smtd/client"
	"github.com/smtd/smtd/config"
	"github.com/smtd/smtd/daemon"
)

// testDaemon starts a daemon of cfg and stops it at the end of the test.
func testDaemon(t *testing.T, cfg *config.Config) *daemon.Daemon {
	t.Helper()
	d, err := daemon.New(cfg, daemon.Options{Logger: daemon.NewLogger(io.Discard, "json")})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Shutdown(context.Background()) })
	return d
}

// Decode reads the daemon's outputs of both encodings, float32 and json,
// as the daemon's own DecodeOutput does, with their headers.
func TestDecodeAgreesWithTheDaemon(t *testing.T) {
	cfg := config.Default()
	cfg.DataDir = t.TempDir()
	cfg.NATS.Listen = "127.0.0.1:-1"
	cfg.Log.Level = "error"
	js := config.DefaultPipeline(config.Image, "digits")
	js.Input.Subject, js.Output.Subject, js.Output.Encoding = "smtd.in.digits", "smtd.out.digits", config.JSON
	cfg.Pipelines = []config.Pipeline{config.DefaultPipeline(config.Image, "images"), js, config.DefaultPipeline(config.Video, "frames")}
	d := testDaemon(t, cfg)
	c, err := client.Connect(d.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	st, err := c.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range st.Pipelines {
		names = append(names, p.Name)
	}
	if !slices.Equal(names, []string{"images", "digits", "frames"}) || st.Pipelines[2].Image == nil || *st.Pipelines[2].Image != (client.Shape{Width: 32, Height: 32, Channels: 1}) {
		t.Fatalf("status: pipelines %v, frames image %v", names, st.Pipelines[2].Image)
	}
	if _, err := c.Pipeline(ctx, "nope"); !errors.Is(err, client.ErrNoPipeline) {
		t.Errorf("Pipeline(nope): %v, want ErrNoPipeline", err)
	}

	for _, tc := range []struct {
		pipeline string
		header   map[string]string
	}{
		{"images", map[string]string{"Smtd-Label": "seven"}},
		{"digits", map[string]string{"Smtd-Label": "eight"}},
		{"frames", map[string]string{"Smtd-Stream": "cam", "Smtd-Frame": "41"}},
	} {
		p, err := c.Pipeline(ctx, tc.pipeline)
		if err != nil {
			t.Fatal(err)
		}
		outs, err := c.Outputs(ctx, tc.pipeline)
		if err != nil {
			t.Fatal(err)
		}
		sub, err := c.Conn().SubscribeSync(p.Output)
		if err != nil {
			t.Fatal(err)
		}
		m := nats.NewMsg(p.Input)
		m.Header.Set("Smtd-Shape", strconv.Itoa(p.Image.Height)+","+strconv.Itoa(p.Image.Width))
		m.Header.Set("Smtd-Dtype", "uint8")
		for k, v := range tc.header {
			m.Header.Set(k, v)
		}
		m.Data = make([]byte, p.Image.Width*p.Image.Height)
		for i := range m.Data {
			m.Data[i] = byte(i * 7)
		}
		if err := c.Conn().PublishMsg(m); err != nil {
			t.Fatal(err)
		}
		e, err := outs.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		outs.Close()
		raw, err := sub.NextMsgWithContext(ctx)
		if err != nil {
			t.Fatal(err)
		}
		sub.Unsubscribe()
		want, label, err := daemon.DecodeOutput(raw.Header, raw.Data)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(e.Vector, want) || len(want) == 0 || e.Label != label {
			t.Errorf("%s: client decodes %d numbers, label %q; daemon %d, %q", tc.pipeline, len(e.Vector), e.Label, len(want), label)
		}
		version, _ := strconv.ParseUint(raw.Header.Get("Smtd-Model-Version"), 10, 64)
		if e.Pipeline != tc.pipeline || e.Seq != 1 || e.Subject != p.Input || e.Version != version {
			t.Errorf("%s: %+v", tc.pipeline, e)
		}
		if tc.pipeline == "frames" && (e.Stream != "cam" || e.Frame != 41) {
			t.Errorf("frames: stream %q frame %d, want cam 41", e.Stream, e.Frame)
		}
	}
	// A video pipeline embeds an image of another size, converted, and
	// refuses what is not an image with the service's error.
	ramp := image.NewGray(image.Rect(0, 0, 40, 30))
	for i := range ramp.Pix {
		ramp.Pix[i] = byte(i * 7)
	}
	if e, err := c.Embed(ctx, "frames", ramp); err != nil || len(e.Vector) == 0 || e.Pipeline != "frames" {
		t.Errorf("embedding an image by a video pipeline: %d numbers, %v", len(e.Vector), err)
	}
	var refused *client.Error
	if _, err := c.EmbedRaw(ctx, "frames", nil, []byte("not an image")); !errors.As(err, &refused) || refused.Code != "400" {
		t.Errorf("embedding text by a video pipeline: %v, want a 400 *client.Error", err)
	}
}

// The client works with the rights of each role: a producer looks up a
// pipeline and feeds it, a consumer embeds and reads outputs, and only
// an operator reads the status.
func TestClientRoles(t *testing.T) {
	cfg := config.Default()
	cfg.DataDir = t.TempDir()
	cfg.NATS.Listen = "127.0.0.1:-1"
	cfg.Log.Level = "error"
	cfg.Pipelines = []config.Pipeline{config.DefaultPipeline(config.Image, "images")}
	for _, r := range []string{config.RoleProducer, config.RoleConsumer, config.RoleOperator} {
		t.Setenv("SMTD_TEST_"+r, r+"-secret")
		cfg.NATS.Users = append(cfg.NATS.Users, config.User{User: r, PasswordEnv: "SMTD_TEST_" + r, Role: r})
	}
	d := testDaemon(t, cfg)
	as := func(role string) *client.Client {
		c, err := client.Connect(d.ClientURL(), client.WithNATSOptions(nats.UserInfo(role, role+"-secret")))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		return c
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	consumer := as(config.RoleConsumer)
	outs, err := consumer.Outputs(ctx, "images")
	if err != nil {
		t.Fatal(err)
	}
	defer outs.Close()

	producer := as(config.RoleProducer)
	p, err := producer.Pipeline(ctx, "images")
	if err != nil {
		t.Fatal(err)
	}
	m := nats.NewMsg(p.Input)
	m.Header.Set("Smtd-Shape", strconv.Itoa(p.Image.Height)+","+strconv.Itoa(p.Image.Width))
	m.Header.Set("Smtd-Dtype", "uint8")
	m.Data = make([]byte, p.Image.Width*p.Image.Height)
	for i := range m.Data {
		m.Data[i] = byte(i * 7)
	}
	if err := producer.Conn().PublishMsg(m); err != nil {
		t.Fatal(err)
	}
	if e, err := outs.Next(ctx); err != nil || len(e.Vector) == 0 {
		t.Fatalf("the consumer's output of the producer's image: %d numbers, %v", len(e.Vector), err)
	}
	ramp := image.NewGray(image.Rect(0, 0, p.Image.Width, p.Image.Height))
	if e, err := consumer.Embed(ctx, "images", ramp); err != nil || len(e.Vector) == 0 {
		t.Errorf("the consumer's embedding: %d numbers, %v", len(e.Vector), err)
	}

	// Refusals come back as errors, not as a wait for ctx's deadline.
	for _, role := range []string{config.RoleProducer, config.RoleConsumer} {
		if _, err := as(role).Status(ctx); !errors.Is(err, nats.ErrPermissionViolation) {
			t.Errorf("a %s asked for the status: %v; want a permissions violation", role, err)
		}
	}
	if _, err := producer.Outputs(ctx, "images"); !errors.Is(err, nats.ErrPermissionViolation) {
		t.Errorf("the producer subscribed to the outputs: %v; want a permissions violation", err)
	}
	if _, err := producer.Embed(ctx, "images", ramp); !errors.Is(err, nats.ErrPermissionViolation) {
		t.Errorf("the producer asked for an embedding: %v; want a permissions violation", err)
	}
	operator := as(config.RoleOperator)
	for {
		st, err := operator.Status(ctx)
		if err != nil || len(st.Pipelines) != 1 {
			t.Fatalf("the operator's status: %+v, %v; want the pipeline", st, err)
		}
		if st.Pipelines[0].Learned == 1 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Against a daemon without the pipelines endpoint, Pipeline reads the
// status instead.
func TestPipelineFromAnOlderDaemon(t *testing.T) {
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("server not ready")
	}
	defer s.Shutdown()
	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	status := `{"version": "old", "pipelines": [{"name": "images", "modality": "image", "input": "smtd.in.images", "output": "smtd.out.images", "image": {"width": 28, "height": 28, "channels": 1}, "learned": 7}]}`
	if _, err := nc.Subscribe("smtd.status", func(m *nats.Msg) { m.Respond([]byte(status)) }); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	p, err := client.New(nc).Pipeline(ctx, "images")
	if err != nil || p.Input != "smtd.in.images" || p.Image == nil || p.Image.Width != 28 {
		t.Errorf("Pipeline: %+v, %v; want the status's images pipeline", p, err)
	}
}
