package cli

import (
	"fmt"

	"github.com/spf13/cobra"
)

func newImportCmd(env *Env) *cobra.Command {
	var from, where string
	cmd := &cobra.Command{
		Use:   "import --from DIR|gs://… --outbox postgres://…",
		Short: "Copy a Parquet outbox's records into a PostgreSQL outbox (idempotent)",
		Long: `Copy every record of a file or bucket outbox (--from) into a PostgreSQL
outbox (--outbox, created with "ctdispatch migrate"): the dispatch_outbox,
timers and deliveries tables, the whole history of every ID, with the
versions, times and processors they were written with. A repeat of an
old ID through the PostgreSQL outbox is then answered from its old
records (already_existed, or a conflict for a changed payload) without a
call to Cloud Tasks. Records the database holds already are skipped, so
the import can run again after it stopped, or once more after the last
dispatcher on the Parquet outbox stopped; a record whose version a
dispatcher on the database took meanwhile is skipped too, and the
database's record stands. It prints, per table, the records read,
imported and skipped.

` + postgresURLHelp,
		Example: `  ctdispatch import --from ./outbox --outbox "postgres://app@db.internal/app"
  ctdispatch import --from gs://my-bucket/outbox --outbox "$DATABASE_URL"`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !isPostgresURL(where) {
				return usagef("--outbox %q is not a PostgreSQL URL; want postgres://… or postgresql://… (the outbox the records go to)", redact(where))
			}
			if from == "" {
				return usagef("--from is required: the file or bucket outbox to copy")
			}
			if isPostgresURL(from) {
				return usagef("--from %s is a PostgreSQL database; want the directory or bucket URL of a file outbox", redact(from))
			}
			ctx := cmd.Context()
			src, err := openOutbox(ctx, env, from, true)
			if err != nil {
				return err
			}
			defer src.Close()
			box, db, err := openPostgres(ctx, where)
			if err != nil {
				return err
			}
			defer db.Close()
			stats, err := box.Import(ctx, src)
			for _, st := range stats {
				fmt.Fprintf(env.Out, "%s: %d read, %d imported, %d skipped\n", st.Table, st.Read, st.Imported, st.Skipped)
			}
			if err != nil {
				return err
			}
			for _, fe := range src.Damaged() {
				fmt.Fprintf(env.Err, "ctdispatch: warning: not imported: %v\n", fe)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&from, "from", "", "the file outbox to copy: a directory or a bucket URL (gs://…) (required)")
	cmd.Flags().StringVar(&where, "outbox", "", "PostgreSQL URL of the outbox to copy into, postgres://… (required)")
	return cmd
}
