// Command smtd is the streaming representation-learning daemon: it learns
// sparse codes and embeddings from images, video frames and word tokens
// published on NATS, and publishes codes, embeddings and checkpoints back.
//
// Usage:
//
//	smtd run [--config FILE]            run the daemon (embedded NATS by default)
//	smtd inspect CHECKPOINT             print what a checkpoint holds
//	smtd view CHECKPOINT [--out DIR]    draw what a checkpoint's model learned (PNG)
//	smtd record --out FILE SUBJECT...   record messages to a file
//	smtd replay FILE                    publish a recorded file
//	smtd feed PIPELINE [FILE|DIR|-]...  publish photos, video or text to a pipeline
//	smtd tail PIPELINE                  print (or save as .npy) a pipeline's embeddings
//	smtd knn --train F --test F         soft-KNN accuracy of recorded outputs
//	smtd bench NAME [flags]             run a measurement (see smtd bench --help)
//
// Each command's --help lists its flags.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
)

const usage = `smtd — streaming representation learning on NATS

Usage:
  smtd run [--config FILE] [--log-format json|console] [--log-level LEVEL]
        Run the daemon. Without --config it runs the built-in default: an
        embedded NATS server on 127.0.0.1:4222 with JetStream, data under
        ./smtd-data, pipelines images, frames and words.
  smtd inspect [--json] CHECKPOINT
        Print what a checkpoint file holds.
  smtd view CHECKPOINT [--out DIR]
        Write PNG pictures of what a checkpoint's model has learned (its
        atoms or receptive fields), as the live page shows them.
  smtd record [--server URL] [CREDENTIALS] --out FILE [--count N] [--duration D] SUBJECT...
        Record the messages of subjects (headers included) to a file.
  smtd replay [--server URL] [CREDENTIALS] [--rate] [--speed X] [--subject S] [--jetstream] FILE
        Publish a recorded file.
  smtd feed [--server URL] [CREDENTIALS] [--rate N|--fps N] [--dry-run] [--labels CSV]
            [--stream NAME] [--raw WxH] [--paragraphs] PIPELINE [FILE|DIR|-]...
        Publish your data to a running daemon's pipeline, converted to its
        input: PNG/JPEG photos (directories searched, labelled by their
        directory), video (YUV4MPEG2, raw gray frames or an image
        directory; - reads standard input) or text (one message a line).
        Feeding the same data again adds nothing.
  smtd tail [--server URL] [CREDENTIALS] [--count N] [--npy DIR [--every N]] PIPELINE
        Print a pipeline's embeddings as JSON lines, or write them as .npy.
  smtd knn --train FILE --test FILE [--k 30] [--t 0.03]
        Soft-KNN top-1 of recorded, labelled outputs (smt-minimalistic App. J).
  smtd lem [--dim N] [--nonredundant] [--out FILE] FILE
        Laplacian eigenmaps (plain or non-redundant) of a recorded stream;
        prints the redundancy of each coordinate.
  smtd bench NAME [flags]
        Run a measurement; prints one "name: value" line per figure.
  smtd version
        Print the version.

CREDENTIALS of the NATS clients: --creds FILE, --nkey FILE, or --user NAME
with --password-file FILE or --password-env VAR, or --token-file FILE or
--token-env VAR; TLS: --tls-ca FILE, --tls-cert FILE --tls-key FILE.

Run "smtd COMMAND --help" for a command's flags.
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run dispatches a command line and returns the exit code: 0 on success,
// 1 on failure, 2 on a usage error.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	var err error
	switch cmd, rest := args[0], args[1:]; cmd {
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, usage)
		return 0
	case "run":
		err = runDaemon(rest, stderr)
	case "inspect":
		err = inspect(rest, stdout, stderr)
	case "view":
		err = viewCmd(rest, stdout, stderr)
	case "record":
		err = recordCmd(rest, stdout, stderr)
	case "replay":
		err = replayCmd(rest, stdout, stderr)
	case "feed":
		err = feedCmd(rest, stdout, stderr)
	case "tail":
		err = tailCmd(rest, stdout, stderr)
	case "knn":
		err = knnCmd(rest, stdout, stderr)
	case "lem":
		err = lemCmd(rest, stdout, stderr)
	case "bench":
		err = benchCmd(rest, stdout, stderr)
	case "version":
		fmt.Fprintln(stdout, "smtd", version())
		return 0
	default:
		fmt.Fprintf(stderr, "smtd: unknown command %q\n\n%s", cmd, usage)
		return 2
	}
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, errUsage):
		return 2
	default:
		fmt.Fprintln(stderr, err)
		return 1
	}
}

// errUsage marks a command line error already reported with the usage.
var errUsage = errors.New("usage")

// newFlags returns a flag set that prints "usage" and the flags on --help
// or on a bad flag.
func newFlags(name, synopsis string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: %s\n\nFlags:\n", synopsis)
		fs.PrintDefaults()
	}
	return fs
}

// badUsage reports what is wrong with a command line, then the usage, and
// returns errUsage.
func badUsage(fs *flag.FlagSet, format string, args ...any) error {
	fmt.Fprintf(fs.Output(), "smtd %s: %s\n\n", fs.Name(), fmt.Sprintf(format, args...))
	fs.Usage()
	return errUsage
}

// parse parses args, turning a bad command line into errUsage.
func parse(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return errUsage
	}
	return nil
}
