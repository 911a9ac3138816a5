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
		Use:   "recover --outbox DIR|BUCKET_URL [--log-dir DIR] [flags]",
		Short: "Finish dispatches and timers left pending by stopped processes",
		Long: `Finish dispatches and timers left pending by stopped processes.

A record still pending after --stale-after is the trace of a dispatcher that
stopped between recording "pending" and recording the outcome. For each,
Cloud Tasks is asked whether the named task exists: if it does, the record
becomes already_existed; if not, not_found (never created, or it ran and is
gone; not a failure), and the caller may dispatch it again. Records of any
processor are taken over unless
--enforce-ownership is given; the new records carry this process's
processor UUID, so the history shows the hand-over.

Task names are read from the records, so --project, --location and --queue
are not needed. --stale-after 0 re-drives every pending record, however
recent (only when no dispatcher is running on the outbox).

Output: one line, "N stale pending: N found (already_existed), N not found
(not_found), N taken over from other processors, N left to their owners, N
errors", or with --json one object {"processor_uuid","stale","found",
"not_found","handed_over","skipped_not_owned","errors"}. The exit status is
1 when any record could not be resolved (errors above 0): those stay
pending, and a later run tries them again.`,
		Example: `  ctdispatch recover --outbox ./outbox --emulator localhost:8123
  ctdispatch recover --outbox ./outbox --stale-after 10m --json
  ctdispatch recover --outbox 'gs://my-bucket?prefix=outbox/' --log-dir /var/lib/ctdispatch
  ctdispatch recover --outbox "$DATABASE_URL"`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if conn.outbox == "" {
				return usagef("--outbox DIR is required")
			}
			if staleAfter < 0 {
				return usagef("--stale-after %s is negative; allowed: 0 (every pending record) or more", staleAfter)
			}
			// The records name their queues; these only satisfy the config.
			for _, v := range []*string{&conn.project, &conn.location, &conn.queue} {
				if *v == "" {
					*v = "unused"
				}
			}
			if !isBucketURL(conn.outbox) && !isPostgresURL(conn.outbox) {
				if info, err := os.Stat(conn.outbox); err != nil {
					return fmt.Errorf("outbox %s: %w", redact(conn.outbox), err)
				} else if !info.IsDir() {
					return fmt.Errorf("outbox %s: not a directory", redact(conn.outbox))
				}
			}
			ctx := cmd.Context()
			if staleAfter == 0 {
				// The dispatcher reads 0 as "the default"; the shortest
				// positive age takes every pending record.
				staleAfter = time.Nanosecond
			}
			sess, err := conn.connect(ctx, env, cloudtasks.Config{
				Project: conn.project, Location: conn.location, Queue: conn.queue,
				StaleAfter: staleAfter, EnforceOwnership: enforce,
			}, "")
			if err != nil {
				return err
			}
			defer sess.close()
			d := sess.d
			st, err := d.Recover(ctx)
			if err != nil {
				return err
			}
			if err := sess.close(); err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if conn.jsonOut {
				err := json.NewEncoder(out).Encode(map[string]any{
					"processor_uuid": d.ProcessorUUID(), "stale": st.Stale, "found": st.Found, "not_found": st.NotFound,
					"handed_over": st.HandedOver, "skipped_not_owned": st.SkippedNotOwned, "errors": st.Errors,
				})
				if err != nil {
					return err
				}
			} else {
				fmt.Fprintf(out, "%d stale pending: %d found (already_existed), %d not found (not_found), %d taken over from other processors, %d left to their owners, %d errors\n",
					st.Stale, st.Found, st.NotFound, st.HandedOver, st.SkippedNotOwned, st.Errors)
			}
			if st.Errors > 0 {
				return fmt.Errorf("%d %s could not be resolved (left pending for a later run; -v logs why)", st.Errors, plural(st.Errors, "record", "records"))
			}
			return nil
		},
	}
	conn.registerFor(cmd, env, true)
	f := cmd.Flags()
	f.DurationVar(&staleAfter, "stale-after", cloudtasks.DefaultStaleAfter, "how old a pending record must be to be re-driven (0: every pending record)")
	f.BoolVar(&enforce, "enforce-ownership", false, "leave other processors' pending records alone")
	return cmd
}
