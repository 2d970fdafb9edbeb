package client_test

import (
	"context"
	"errors"
	"fmt"
	"image/png"
	"io"
	"log"
	"os"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/smtd/smtd/client"
	"github.com/smtd/smtd/config"
	"github.com/smtd/smtd/daemon"
)

// startDaemon runs a daemon with the default pipelines (images, frames,
// words) on a free port, as `smtd run` would, and returns its URL and how
// to stop it.
func startDaemon() (url string, stop func()) {
	dir, err := os.MkdirTemp("", "smtd-client-example")
	if err != nil {
		log.Fatal(err)
	}
	cfg := config.Default()
	cfg.DataDir = dir
	cfg.NATS.Listen = "127.0.0.1:-1"
	cfg.Log.Level = "error"
	d, err := daemon.New(cfg, daemon.Options{Logger: daemon.NewLogger(io.Discard, "json")})
	if err != nil {
		log.Fatal(err)
	}
	if err := d.Start(context.Background()); err != nil {
		log.Fatal(err)
	}
	return d.ClientURL(), func() {
		d.Shutdown(context.Background())
		os.RemoveAll(dir)
	}
}

func ExampleClient_Embed() {
	url, stop := startDaemon()
	defer stop()

	c, err := client.Connect(url)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	f, err := os.Open("../testdata/images/digit-5.png")
	if err != nil {
		log.Fatal(err)
	}
	img, err := png.Decode(f)
	f.Close()
	if err != nil {
		log.Fatal(err)
	}
	// The image is converted to the pipeline's shape (28x28 gray); the
	// daemon answers from a snapshot of its model and does not learn.
	e, err := c.Embed(context.Background(), "images", img)
	if err != nil {
		log.Fatal(err)
	}
	// 10x10 pooling positions of 32 SMT dimensions.
	fmt.Println(e.Pipeline, len(e.Vector))
	// Output: images 3200
}

// blank is a raw 28x28 image message for the input subject, as smtd feed
// publishes them.
func blank(subject string) *nats.Msg {
	m := nats.NewMsg(subject)
	m.Header.Set("Smtd-Shape", "28,28")
	m.Header.Set("Smtd-Dtype", "uint8")
	m.Header.Set("Smtd-Label", "blank")
	m.Data = make([]byte, 28*28)
	return m
}

func ExampleOutputs_Next() {
	url, stop := startDaemon()
	defer stop()

	c, err := client.Connect(url)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	// Once Outputs returns, every output published is received.
	outs, err := c.Outputs(ctx, "images")
	if err != nil {
		log.Fatal(err)
	}
	defer outs.Close()
	p, err := c.Pipeline(ctx, "images")
	if err != nil {
		log.Fatal(err)
	}
	if err := c.Conn().PublishMsg(blank(p.Input)); err != nil {
		log.Fatal(err)
	}
	e, err := outs.Next(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(e.Pipeline, e.Label, len(e.Vector), "input sequence", e.Seq)
	// Output: images blank 3200 input sequence 1
}

func ExampleClient_Subscribe() {
	url, stop := startDaemon()
	defer stop()

	c, err := client.Connect(url)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p, err := c.Pipeline(ctx, "images")
	if err != nil {
		log.Fatal(err)
	}
	// A camera publishes an image every 50 ms.
	go func() {
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				c.Conn().PublishMsg(blank(p.Input))
			}
		}
	}()
	// Subscribe calls its function with each output until ctx is done.
	n := 0
	err = c.Subscribe(ctx, "images", func(e client.Embedding) {
		if n++; n == 3 {
			fmt.Println(e.Pipeline, e.Label, len(e.Vector))
			cancel()
		}
	})
	if err != nil {
		log.Fatal(err)
	}
	// Output: images blank 3200
}

func ExampleClient_Neighbours() {
	url, stop := startDaemon()
	defer stop()

	c, err := client.Connect(url)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	// A fresh daemon has solved no word embeddings yet: the query is
	// refused with the service's error code.
	_, err = c.Neighbours(context.Background(), "words", "president", 5)
	var refused *client.Error
	if errors.As(err, &refused) {
		fmt.Println(refused.Code, refused.Description)
	}
	// Output: 503 no word embeddings yet
}
