package cli

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"
)

// defaultEvery is the cadence of compact --every given alone: with
// dispatchers publishing their logs every 30 s (the default
// --publish-interval), a record is in the Iceberg tables within
// 30 s + one conversion + this + one round (docs/outbox.md, "Publishing
// as Iceberg"), under the 60 s the tables promise.
const defaultEvery = 15 * time.Second

// everyArgs lets "compact --every 5m" mean "--every=5m": --every alone
// takes its default, so pflag leaves a duration after it as an
// argument. Any other argument is refused.
func everyArgs(cmd *cobra.Command, args []string) error {
	f := cmd.Flags().Lookup("every")
	if len(args) == 1 && f != nil && f.Changed && f.Value.String() == f.NoOptDefVal {
		if d, err := time.ParseDuration(args[0]); err == nil {
			return f.Value.Set(d.String())
		}
	}
	return cobra.NoArgs(cmd, args)
}

// compactEvery runs round every interval (measured from each round's
// start; at once when a round took longer) until ctx is cancelled
// (SIGTERM, SIGINT), which ends it after the round in progress: a round
// runs to its end whatever the signal, so it never leaves a compaction
// or a publication half done. A failed round is reported on errw and
// the next one runs as usual.
func compactEvery(ctx context.Context, interval time.Duration, errw io.Writer, round func(context.Context) error) {
	work := context.WithoutCancel(ctx)
	for n := 1; ctx.Err() == nil; n++ {
		start := time.Now()
		if err := round(work); err != nil {
			fmt.Fprintf(errw, "ctdispatch: compact round %d: %s\n", n, oneLine(err.Error()))
		}
		wait := time.NewTimer(interval - time.Since(start))
		select {
		case <-ctx.Done():
		case <-wait.C:
		}
		wait.Stop()
	}
}
