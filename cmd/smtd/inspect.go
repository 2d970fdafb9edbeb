package main

import (
	"encoding/json"
	"fmt"
	"io"

	"github.com/smtd/smtd/daemon"
)

func inspect(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("inspect", "smtd inspect [--json] CHECKPOINT", stderr)
	asJSON := fs.Bool("json", false, "print JSON instead of text")
	if err := parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return badUsage(fs, "give one checkpoint file, got %d arguments", fs.NArg())
	}
	c, err := daemon.ReadCheckpoint(fs.Arg(0))
	if err != nil {
		return err
	}
	sum, err := daemon.Describe(c)
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(sum)
	}
	fmt.Fprintf(stdout, "checkpoint     %s (format %d)\n", fs.Arg(0), daemon.CheckpointFormat)
	fmt.Fprintf(stdout, "pipeline       %s (%s)\n", c.Pipeline, c.Modality)
	fmt.Fprintf(stdout, "model version  %d (minibatches applied)\n", c.ModelVersion)
	fmt.Fprintf(stdout, "samples        %d\n", c.Samples)
	fmt.Fprintf(stdout, "created        %s\n", c.Created.Format("2006-01-02 15:04:05 MST"))
	fmt.Fprintf(stdout, "input          %s (stream %q), last applied sequence %d\n", c.Input, c.Stream, c.LastSeq)
	fmt.Fprintf(stdout, "random source  PCG, %d bytes of state\n", len(c.RNG))
	fmt.Fprintf(stdout, "sections\n")
	for _, s := range c.Sections {
		fmt.Fprintf(stdout, "  %-12s %d bytes\n", s.Name, len(s.Data))
	}
	fmt.Fprintf(stdout, "model\n")
	for _, k := range sortedKeys(sum.Model) {
		fmt.Fprintf(stdout, "  %-22s %v\n", k, sum.Model[k])
	}
	fmt.Fprintf(stdout, "config\n%s", indent(string(c.Config), "  "))
	return nil
}
