package cli

import (
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/ctdispatch/ctdispatch/cloudtasks"
)

func newRecoverCmd(env *Env) *cobra.Command {
	var conn connFlags
	var staleAfter time.Duration
	var enforce bool
	cmd := &cobra.Command{
		Use:   "recover --outbox DIR [--emulator ADDR] [flags]",
		Short: "Finish dispatches and timers left pending by stopped processes",
		Long: `Finish dispatches and timers left pending by stopped processes.

A record still pending after --stale-after is the trace of a dispatcher that
stopped between recording "pending" and recording the outcome. For each,
Cloud Tasks is asked whether the named task exists: if it does, the record
becomes created; if not, not_found (never created, or it ran and is gone;
not a failure), and the caller may dispatch it again. Records of any processor are taken over unless
--enforce-ownership is given; the new records carry this process's
processor UUID, so the history shows the hand-over.

Task names are read from the records, so --project, --location and --queue
are not needed.

Output: one summary line, or with --json one object with the counts.`,
		Example: `  ctdispatch recover --outbox ./outbox --emulator localhost:8123
  ctdispatch recover --outbox ./outbox --stale-after 10m --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if conn.outbox == "" {
				return usagef("--outbox DIR is required")
			}
			// The records name their queues; these only satisfy the config.
			for _, v := range []*string{&conn.project, &conn.location, &conn.queue} {
				if *v == "" {
					*v = "unused"
				}
			}
			if info, err := os.Stat(conn.outbox); err != nil {
				return fmt.Errorf("outbox %s: %w", conn.outbox, err)
			} else if !info.IsDir() {
				return fmt.Errorf("outbox %s: not a directory", conn.outbox)
			}
			ctx := cmd.Context()
			d, err := cloudtasks.NewDispatcher(ctx, &cloudtasks.Config{
				Project: conn.project, Location: conn.location, Queue: conn.queue,
				EmulatorAddr: conn.emulator, OutboxDir: conn.outbox, Logger: env.Logger,
				StaleAfter: staleAfter, EnforceOwnership: enforce,
			})
			if err != nil {
				return err
			}
			defer d.Close(ctx)
			st, err := d.Recover(ctx)
			if err != nil {
				return err
			}
			if err := d.Close(ctx); err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if conn.jsonOut {
				return json.NewEncoder(out).Encode(map[string]any{
					"processor_uuid": d.ProcessorUUID(), "stale": st.Stale, "found": st.Found, "not_found": st.NotFound,
					"handed_over": st.HandedOver, "skipped_not_owned": st.SkippedNotOwned, "errors": st.Errors,
				})
			}
			fmt.Fprintf(out, "%d stale pending: %d found (created), %d not found (not_found), %d taken over from other processors, %d left to their owners, %d errors\n",
				st.Stale, st.Found, st.NotFound, st.HandedOver, st.SkippedNotOwned, st.Errors)
			if st.Errors > 0 {
				return fmt.Errorf("%d records could not be resolved; they stay pending (see the log)", st.Errors)
			}
			return nil
		},
	}
	conn.register(cmd, env)
	f := cmd.Flags()
	f.DurationVar(&staleAfter, "stale-after", cloudtasks.DefaultStaleAfter, "how old a pending record must be to be re-driven")
	f.BoolVar(&enforce, "enforce-ownership", false, "leave other processors' pending records alone")
	return cmd
}
