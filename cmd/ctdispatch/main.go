// Command ctdispatch is the command-line face of the ctdispatch library: it
// derives Cloud Tasks IDs, runs the in-repo emulator, dispatches tasks and
// timers, and queries the Parquet outbox. Every command lives in
// internal/cli so it can be tested in-process.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/ctdispatch/ctdispatch/internal/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Run(ctx, os.Args[1:], cli.DefaultEnv())
	stop()
	os.Exit(code)
}
