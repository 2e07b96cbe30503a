// Command sidecar is Weft's data-plane proxy: flags (or --bootstrap FILE) are parsed
// by bootstrap/render and the sidecar runs until SIGTERM or SIGINT.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/hashicorp/go-hclog"

	"github.com/weft-mesh/weft/bootstrap/render"
	"github.com/weft-mesh/weft/sidecar/app"
)

func main() {
	s, err := render.Parse(os.Args[1:], os.ReadFile)
	if err != nil {
		fmt.Fprintln(os.Stderr, "sidecar:", err)
		if errors.Is(err, render.ErrUsage) {
			os.Exit(2)
		}
		os.Exit(1)
	}
	level := hclog.LevelFromString(os.Getenv("WEFT_LOG_LEVEL"))
	if level == hclog.NoLevel {
		level = hclog.Info
	}
	log := hclog.New(&hclog.LoggerOptions{Name: "sidecar", Level: level, Output: os.Stderr})
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := app.Run(ctx, s, app.Options{Logger: log.With("node", s.Node.ID)}); err != nil {
		log.Error("exit", "error", err)
		os.Exit(1)
	}
}
