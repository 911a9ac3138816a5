package cli

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/ctdispatch/ctdispatch/outbox/pgbox"
)

// postgresURLHelp says how a postgres:// --outbox names its tables.
const postgresURLHelp = `The URL's query parameters ` + schemaParam + ` and ` + prefixParam + ` name
the schema (default public) and the tables' prefix (default ctdispatch_);
give every command the same URL. The other parameters go to the driver
(pgx), for example sslmode. Without --outbox the URL is read from
$` + outboxEnv + `, which keeps it out of the argument list that other
users see (ps); the password is best in $PGPASSWORD or ~/.pgpass, which
the driver reads. Messages show a password as xxxxx. A key=value
connection string (host=… password=…) is refused: give the URL form.`

func newMigrateCmd(env *Env) *cobra.Command {
	var where string
	cmd := &cobra.Command{
		Use:   "migrate --outbox postgres://…",
		Short: "Create the tables of a PostgreSQL outbox (idempotent)",
		Long: `Create the schema (unless it exists) and the tables of a PostgreSQL outbox
(package outbox/pgbox), with their indexes, if they do not exist:
dispatch_outbox, timers and deliveries, and intents (the tasks that
transactions recorded for a relay to create, see "ctdispatch relay"), each
prefixed, and the tables "ctdispatch export" keeps its batches (and
refused rows moved by "export refused --quarantine") in. Running
it again, or from several machines at once, is safe. A role that owns the
schema (CREATE SCHEMA jobs AUTHORIZATION app, made by an administrator)
needs no other privilege; a statement the role may not run is named with
the privilege it needs. Then give the same URL as --outbox to dispatch,
timer, recover and query. A worker's inbox table is created by "ctdispatch
worker migrate".

` + postgresURLHelp,
		Example: `  CTDISPATCH_OUTBOX="postgres://app@db.internal/app" ctdispatch migrate
  ctdispatch migrate --outbox "postgres://app@db.internal/app?ctdispatch_schema=jobs&sslmode=require"`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !isPostgresURL(where) {
				return usagef("--outbox %q is not a PostgreSQL URL; want postgres://… or postgresql://… (a file outbox needs no migration)", redact(where))
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), workerMigrateTimeout)
			defer cancel()
			box, db, err := connectPostgres(ctx, where, pgbox.ExportConfig{})
			if err != nil {
				return err
			}
			defer db.Close()
			if err := box.Migrate(ctx); err != nil {
				return err
			}
			_, opts, _ := postgresOptions(where)
			for _, name := range pgbox.TableNames(opts) {
				fmt.Fprintf(env.Out, "outbox table %s ready\n", name)
			}
			fmt.Fprintf(env.Out, "intents table %s ready\n", pgbox.IntentTableName(opts))
			return nil
		},
	}
	cmd.Flags().StringVar(&where, "outbox", "", "PostgreSQL URL of the outbox, postgres://… (required)")
	return cmd
}

func newRetainCmd(env *Env) *cobra.Command {
	var where string
	var olderThan time.Duration
	cmd := &cobra.Command{
		Use:   "retain --outbox postgres://… --older-than DURATION",
		Short: "Delete the records of IDs a PostgreSQL outbox finished more than --older-than ago",
		Long: `Delete the whole history of every ID of a PostgreSQL outbox whose latest
record is terminal (not pending) and was written more than --older-than
ago, in batches of at most 1,000 IDs per statement, and print how many
rows went from each table. Pending records are kept however old: recover
needs them; once "ctdispatch export" (or --export-to) has run on the
database, so are the IDs with a record not yet exported. A repeat of a deleted ID is answered as a new one (Cloud Tasks
answers already_existed while it still holds the name), so keep records
as long as callers may repeat a dispatch. A file outbox applies retention
when it compacts ("ctdispatch compact --retention").

` + postgresURLHelp,
		Example: `  ctdispatch retain --outbox "$DATABASE_URL" --older-than 720h`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !isPostgresURL(where) {
				return usagef("--outbox %q is not a PostgreSQL URL; want postgres://… (a file outbox applies retention in \"ctdispatch compact --retention\")", redact(where))
			}
			if olderThan <= 0 {
				return usagef("--older-than %s is not positive; allowed: a Go duration above 0, for example 720h", olderThan)
			}
			box, db, err := openPostgres(cmd.Context(), where)
			if err != nil {
				return err
			}
			defer db.Close()
			stats, err := box.Retain(cmd.Context(), olderThan)
			for _, st := range stats {
				fmt.Fprintf(env.Out, "%s: %d rows deleted\n", st.Table, st.Rows)
			}
			return err
		},
	}
	cmd.Flags().StringVar(&where, "outbox", "", "PostgreSQL URL of the outbox, postgres://… (required)")
	cmd.Flags().DurationVar(&olderThan, "older-than", 0, "delete IDs finished longer ago than this (required), for example 720h")
	return cmd
}
