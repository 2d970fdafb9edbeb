package main

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/smtd/smtd/client"
	"github.com/smtd/smtd/feed"
	"github.com/smtd/smtd/internal/progress"
)

const feedSynopsis = "smtd feed [flags] PIPELINE [FILE|DIR|-]..."

func feedCmd(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("feed", feedSynopsis, stderr)
	conn := addClientFlags(fs)
	prefix := fs.String("prefix", "smtd", "the daemon's service.prefix")
	rate := fs.Float64("rate", 0, "send at most `N` items per second (0: as fast as the stream acknowledges)")
	fps := fs.Float64("fps", 0, "video: send at most `N` frames per second (the same as --rate)")
	dryRun := fs.Bool("dry-run", false, "read and convert everything, print what would be sent, publish nothing")
	labelsFile := fs.String("labels", "", "images: take labels from a CSV `file` of path,label rows (default: the name of the directory holding each image)")
	stream := fs.String("stream", "", "video: the Smtd-Stream `name` (default: the file's base name, stdin for -); frames are identified by stream and index, so give a live source a new name each time it starts")
	raw := fs.String("raw", "", "video: the input is raw 8-bit gray frames of `WxH` pixels (default: YUV4MPEG2, or a directory of images)")
	paragraphs := fs.Bool("paragraphs", false, "text: one message per paragraph (lines up to a blank line) instead of per line")
	rest, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	switch {
	case len(rest) < 1:
		return badUsage(fs, "name the pipeline to feed")
	case *rate < 0 || *fps < 0:
		return badUsage(fs, "--rate and --fps must be >= 0")
	}
	if *fps > 0 {
		*rate = *fps
	}
	pipeline, inputs := rest[0], rest[1:]
	nc, err := conn.connect("smtd feed")
	if err != nil {
		return err
	}
	defer nc.Close()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	p, err := client.New(nc, client.WithPrefix(*prefix)).Pipeline(ctx, pipeline)
	if err != nil {
		return fmt.Errorf("smtd feed: %w", err)
	}
	var shape feed.Shape
	switch {
	case p.Image != nil:
		shape = feed.Shape{Width: p.Image.Width, Height: p.Image.Height, Channels: p.Image.Channels}
	case p.Modality != "text":
		return fmt.Errorf("smtd feed: the daemon does not say the image shape of pipeline %s (it is older than smtd feed)", pipeline)
	}
	var src feed.Source
	switch p.Modality {
	case "image":
		if len(inputs) == 0 {
			return fmt.Errorf("smtd feed: pipeline %s takes images: give PNG or JPEG files or directories", pipeline)
		}
		var labels feed.Labels
		if *labelsFile != "" {
			f, err := os.Open(*labelsFile)
			if err != nil {
				return fmt.Errorf("smtd feed: %w", err)
			}
			labels, err = feed.ReadLabels(f)
			f.Close()
			if err != nil {
				return fmt.Errorf("smtd feed: %s: %w", *labelsFile, err)
			}
			unmatched, err := labels.Unmatched(inputs)
			if err != nil {
				return fmt.Errorf("smtd feed: %w", err)
			}
			if n := len(unmatched); n > 0 {
				fmt.Fprintf(stderr, "smtd feed: %s: %d of %d rows name no image given, such as %s\n", *labelsFile, n, len(labels), strings.Join(unmatched[:min(n, 3)], ", "))
			}
		}
		if src, err = feed.Images(pipeline, shape, inputs, labels); err != nil {
			return fmt.Errorf("smtd feed: %w", err)
		}
	case "video":
		if len(inputs) != 1 {
			return fmt.Errorf("smtd feed: pipeline %s takes video: give one Y4M file, raw frames (--raw WxH), a directory of images, or - for standard input", pipeline)
		}
		var closer io.Closer
		src, closer, err = videoSource(pipeline, shape, inputs[0], *stream, *raw)
		if err != nil {
			return fmt.Errorf("smtd feed: %w", err)
		}
		defer closer.Close()
	case "text":
		if len(inputs) == 0 {
			inputs = []string{"-"}
		}
		var srcs []feed.Source
		for _, in := range inputs {
			r, err := openInput(in)
			if err != nil {
				return fmt.Errorf("smtd feed: %w", err)
			}
			defer r.Close()
			src := feed.Text(pipeline, r, in, *paragraphs)
			if in != "-" {
				src.Total = countMessages(in, *paragraphs)
			}
			srcs = append(srcs, src)
		}
		src = feed.Concat(srcs...)
	default:
		return fmt.Errorf("smtd feed: pipeline %s has modality %q, which smtd feed does not know", pipeline, p.Modality)
	}
	if *dryRun {
		res, err := feed.DryRun(stdout, p.Input, src)
		fmt.Fprintf(stdout, "dry run: would send %d items to %s (%s), %d unreadable\n", res.Sent, p.Input, pipeline, res.Skipped)
		return cmp.Or(err, unreadable(res.Skipped))
	}
	bar := progress.NewBar(progress.Stderr(), "feed "+pipeline, src.Total)
	skip := func(name string, err error) {
		if progress.Stderr() != nil {
			fmt.Fprint(stderr, "\r\033[K") // over the progress bar
		}
		fmt.Fprintf(stderr, "smtd feed: skipping %s: %v\n", name, err)
	}
	res, err := feed.Send(ctx, nc, p.Input, src, feed.Options{
		Rate:  *rate,
		Acked: func() { bar.Add(1) },
		Skip:  skip,
	})
	bar.Done()
	fmt.Fprintf(stdout, "sent %d items to %s (%s), %d already there, %d unreadable\n", res.Sent, p.Input, pipeline, res.Duplicates, res.Skipped)
	return cmp.Or(err, unreadable(res.Skipped))
}

// unreadable is the error of a feed that skipped n unreadable items (nil
// for none): the exit status is 1.
func unreadable(n int) error {
	if n == 0 {
		return nil
	}
	return fmt.Errorf("smtd feed: %d items could not be read", n)
}

// parseInterspersed parses args allowing flags after the positional
// arguments ("smtd feed frames --stream cam1 -"), and returns the
// positional ones; "-" is positional, and "--" ends the flags.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var rest []string
	for {
		if err := parse(fs, args); err != nil {
			return nil, err
		}
		left := fs.Args()
		if len(left) == 0 {
			return rest, nil
		}
		// The flag package stops at the first positional argument, or
		// after a "--", which it consumes.
		if n := len(args) - len(left); n > 0 && args[n-1] == "--" {
			return append(rest, left...), nil
		}
		rest = append(rest, left[0])
		args = left[1:]
	}
}

// countMessages is the number of messages of a text file, for the
// progress bar's time left; 0 if it cannot be read.
func countMessages(path string, paragraphs bool) int {
	f, err := os.Open(path)
	if err != nil {
		return 0
	}
	defer f.Close()
	n := 0
	for _, err := range feed.Text("", f, path, paragraphs).Items {
		if err != nil {
			return 0
		}
		n++
	}
	return n
}

// openInput opens a file, or standard input for "-".
func openInput(path string) (io.ReadCloser, error) {
	if path == "-" {
		return io.NopCloser(os.Stdin), nil
	}
	return os.Open(path)
}

// videoSource returns the frames of in: a directory of images, raw frames
// of size raw, or a YUV4MPEG2 stream; and what to close when done.
func videoSource(pipeline string, shape feed.Shape, in, stream, raw string) (feed.Source, io.Closer, error) {
	if stream == "" {
		stream = feed.StreamName(in)
	}
	if fi, err := os.Stat(in); in != "-" && err == nil && fi.IsDir() {
		src, err := feed.ImageSequence(pipeline, shape, in, stream)
		return src, io.NopCloser(nil), err
	}
	r, err := openInput(in)
	if err != nil {
		return feed.Source{}, nil, err
	}
	if raw != "" {
		w, h, err := feed.ParseSize(raw)
		if err != nil {
			r.Close()
			return feed.Source{}, nil, err
		}
		return feed.RawFrames(pipeline, shape, r, w, h, stream), r, nil
	}
	src, err := feed.Y4MFrames(pipeline, shape, r, stream)
	if err != nil {
		r.Close()
		return feed.Source{}, nil, fmt.Errorf("%s: %w", in, err)
	}
	return src, r, nil
}
