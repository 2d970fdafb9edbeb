package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"

	"github.com/smtd/smtd/bench"
	"github.com/smtd/smtd/config"
	"github.com/smtd/smtd/daemon"
)

func runDaemon(args []string, stderr io.Writer) error {
	fs := newFlags("run", "smtd run [flags]", stderr)
	path := fs.String("config", "", "YAML config `file` (default: the built-in config, see config/example.yaml)")
	logFormat := fs.String("log-format", "", "log format: json or console (default: log.format of the config, json); it wins over the config's at every reload too")
	logLevel := fs.String("log-level", "", "least log level: debug, info, warn, error (default: log.level of the config, info); it wins over the config's at every reload too")
	cpuprofile := fs.String("cpuprofile", "", "write a CPU profile of the daemon to `file` until it stops (read it with go tool pprof)")
	tracePath := fs.String("trace", "", "write an execution trace of the daemon to `file` until it stops (read it with go tool trace; it grows by megabytes a second under load)")
	if err := parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return badUsage(fs, "unexpected arguments %q (the config is --config FILE)", fs.Args())
	}
	cfg := config.Default()
	if *path != "" {
		var err error
		if cfg, err = config.Load(*path); err != nil {
			return err
		}
	}
	// The command line wins over the file, at start and at every reload.
	override := func(c *config.Config) {
		if *logFormat != "" {
			c.Log.Format = *logFormat
		}
		if *logLevel != "" {
			c.Log.Level = *logLevel
		}
	}
	override(cfg)
	if err := cfg.Validate(); err != nil {
		return err
	}
	stopProfile, err := bench.StartCPUProfile(*cpuprofile)
	if err != nil {
		return err
	}
	defer stopProfile()
	stopTrace, err := bench.StartTrace(*tracePath)
	if err != nil {
		return err
	}
	defer stopTrace()
	logger := daemon.NewLogger(os.Stderr, cfg.Log.Format)
	d, err := daemon.New(cfg, daemon.Options{ConfigPath: *path, Logger: logger, Override: override})
	if err != nil {
		return err
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	go func() {
		for {
			select {
			case <-hup:
				d.ReloadFromFile(ctx)
			case <-ctx.Done():
				return
			}
		}
	}()
	if err := d.Run(ctx); err != nil {
		return fmt.Errorf("smtd: %w", err)
	}
	return nil
}

func version() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return daemon.Version
}
