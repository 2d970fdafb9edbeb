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

	"github.com/nats-io/nats.go"

	"github.com/smtd/smtd/client"
	"github.com/smtd/smtd/config"
	"github.com/smtd/smtd/daemon"
)

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
	d, err := daemon.New(cfg, daemon.Options{Logger: daemon.NewLogger(io.Discard, "json")})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer d.Shutdown(context.Background())
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
