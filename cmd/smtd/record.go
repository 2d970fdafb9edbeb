package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/smtd/smtd/internal/progress"
	"github.com/smtd/smtd/record"
)

func recordCmd(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("record", "smtd record [flags] SUBJECT...", stderr)
	client := addClientFlags(fs)
	out := fs.String("out", "", "recording `file` to write (required)")
	count := fs.Int("count", 0, "stop after this many messages (0: until --duration or Ctrl-C)")
	duration := fs.Duration("duration", 0, "stop after this long (0: until --count or Ctrl-C)")
	if err := parse(fs, args); err != nil {
		return err
	}
	switch {
	case *out == "":
		return badUsage(fs, "--out FILE is needed")
	case fs.NArg() == 0:
		return badUsage(fs, "name at least one subject to record")
	}
	nc, err := client.connect("smtd record")
	if err != nil {
		return err
	}
	defer nc.Close()
	f, err := os.Create(*out)
	if err != nil {
		return err
	}
	bw := bufio.NewWriter(f)
	w, err := record.NewWriter(bw)
	if err != nil {
		f.Close()
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, *duration)
		defer cancel()
	}
	n, err := record.Capture(ctx, nc, fs.Args(), w, record.CaptureOptions{Count: *count})
	if ferr := bw.Flush(); err == nil {
		err = ferr
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	fmt.Fprintf(stdout, "recorded %d messages to %s\n", n, *out)
	return err
}

func replayCmd(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("replay", "smtd replay [flags] FILE", stderr)
	client := addClientFlags(fs)
	rate := fs.Bool("rate", false, "keep the recorded time between messages (default: as fast as possible)")
	speed := fs.Float64("speed", 1, "with --rate, play this many times faster than recorded")
	subject := fs.String("subject", "", "publish every message to this subject instead of its recorded one")
	js := fs.Bool("jetstream", true, "publish through JetStream and wait for every acknowledgement (the subject must be captured by a stream, as the daemon's inputs are; a producer of the embedded server may do this); false publishes plain core NATS messages")
	stripIDs := fs.Bool("strip-msg-id", false, "publish without the recorded Nats-Msg-Id headers: a stream that stored the messages within its duplicate window (24 h for the daemon's inputs) stores them again instead of dropping them as duplicates")
	if err := parse(fs, args); err != nil {
		return err
	}
	switch {
	case fs.NArg() != 1:
		return badUsage(fs, "give one recording, got %d arguments", fs.NArg())
	case *speed <= 0:
		return badUsage(fs, "--speed must be > 0")
	}
	f, err := os.Open(fs.Arg(0))
	if err != nil {
		return err
	}
	defer f.Close()
	r, err := record.NewReader(bufio.NewReader(f))
	if err != nil {
		return fmt.Errorf("%s: %w", fs.Arg(0), err)
	}
	nc, err := client.connect("smtd replay")
	if err != nil {
		return err
	}
	defer nc.Close()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	start := time.Now()
	bar := progress.NewBar(progress.Stderr(), "replay", 0)
	duplicates := 0
	n, err := record.Replay(ctx, nc, r, record.ReplayOptions{Subject: *subject, Rate: *rate, Speed: *speed, JetStream: *js,
		StripMsgID: *stripIDs, Published: func(int) { bar.Add(1) }, Duplicate: func(int) { duplicates++ }})
	bar.Done()
	fmt.Fprintf(stdout, "replayed %d messages in %s\n", n, time.Since(start).Round(time.Millisecond))
	if duplicates > 0 {
		fmt.Fprintf(stdout, "%d more dropped by the stream as duplicates: it stored messages with the same Nats-Msg-Id within its duplicate window (--strip-msg-id publishes them as new)\n", duplicates)
	}
	return err
}
