package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/smtd/smtd/daemon"
)

// viewCmd draws what a checkpoint's model has learned, offline, as PNG
// files: the same pictures the live page shows (daemon.CheckpointPictures).
func viewCmd(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("view", "smtd view CHECKPOINT [--out DIR]", stderr)
	out := fs.String("out", ".", "`directory` the PNG files are written to (made if missing)")
	// Flags may follow the checkpoint, as in the synopsis.
	var files []string
	for {
		if err := parse(fs, args); err != nil {
			return err
		}
		if fs.NArg() == 0 {
			break
		}
		files = append(files, fs.Arg(0))
		args = fs.Args()[1:]
	}
	if len(files) != 1 {
		return badUsage(fs, "give one checkpoint file, got %d arguments", len(files))
	}
	c, err := daemon.ReadCheckpoint(files[0])
	if err != nil {
		return err
	}
	pics, err := daemon.CheckpointPictures(c)
	if errors.Is(err, daemon.ErrNoPicture) {
		return fmt.Errorf("smtd view: %s is a checkpoint of %s, a %s pipeline: %w", files[0], c.Pipeline, c.Modality, err)
	}
	if err != nil {
		return err
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		return err
	}
	for _, p := range pics {
		path := filepath.Join(*out, fmt.Sprintf("%s-v%d-%s.png", c.Pipeline, c.ModelVersion, p.Name))
		if err := os.WriteFile(path, p.PNG, 0o644); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "%s\t%s\n", path, p.Title)
	}
	return nil
}
