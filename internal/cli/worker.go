package cli

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver
	"github.com/spf13/cobra"

	"github.com/ctdispatch/ctdispatch/cloudtasks/worker"
)

// workerMigrateTimeout bounds a migration, which holds an advisory lock.
const workerMigrateTimeout = time.Minute

func newWorkerCmd(env *Env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "worker",
		Short: "Tools for the services Cloud Tasks delivers to (package cloudtasks/worker)",
		Args:  cobra.NoArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.AddCommand(newWorkerMigrateCmd(env), newWorkerCleanupCmd(env))
	return cmd
}

// inboxFlags are the flags that name a worker's SQL inbox.
type inboxFlags struct {
	dsn string
	cfg worker.SQLConfig
}

func (f *inboxFlags) register(cmd *cobra.Command) {
	fs := cmd.Flags()
	fs.StringVar(&f.dsn, "dsn", "", "PostgreSQL connection string (required)")
	fs.StringVar(&f.cfg.Schema, "schema", worker.DefaultSchema, "schema of the inbox table")
	fs.StringVar(&f.cfg.Table, "table", worker.DefaultTable, "name of the inbox table")
}

// open connects to the database and returns the inbox the flags name;
// bad flags are usage errors. The caller closes db.
func (f *inboxFlags) open() (*sql.DB, *worker.SQLInbox, error) {
	if f.dsn == "" {
		return nil, nil, usagef("--dsn is required: a PostgreSQL connection string (postgres://… or key=value)")
	}
	db, err := sql.Open("pgx", f.dsn)
	if err != nil {
		return nil, nil, asUsage(fmt.Errorf("--dsn: %w", err))
	}
	inbox, err := worker.NewSQLInbox(db, f.cfg)
	if err != nil {
		db.Close()
		var ce *worker.ConfigError
		if errors.As(err, &ce) {
			return nil, nil, usagef("--%s %s %s", map[string]string{"SQLConfig.Schema": "schema", "SQLConfig.Table": "table"}[ce.Field], ce.Value, ce.Rule)
		}
		return nil, nil, err
	}
	return db, inbox, nil
}

func newWorkerMigrateCmd(env *Env) *cobra.Command {
	var in inboxFlags
	cmd := &cobra.Command{
		Use:   "migrate",
		Short: "Create the worker's inbox table in PostgreSQL (idempotent)",
		Long: `Create the schema, the inbox table and its index that worker.NewSQLInbox
uses, if they do not exist. Running it again, or from several machines at
once, is safe. A schema that exists is left as it is, so a role that owns
its schema needs no other privilege; a statement the role may not run is
named with the privilege it needs. The table holds one row per finished
Idempotency-Key; keep rows at least 31 days (worker.MinRetention) and
remove older ones with "ctdispatch worker cleanup" (or SQLInbox.Cleanup).`,
		Example: `  ctdispatch worker migrate --dsn "postgres://app@db.internal/app"
  ctdispatch worker migrate --dsn "$DATABASE_URL" --schema jobs --table inbox`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			db, inbox, err := in.open()
			if err != nil {
				return err
			}
			defer db.Close()
			ctx, cancel := context.WithTimeout(cmd.Context(), workerMigrateTimeout)
			defer cancel()
			name := inboxName(in.cfg)
			var existed bool
			if err := db.QueryRowContext(ctx, `SELECT to_regclass($1) IS NOT NULL`, name).Scan(&existed); err != nil {
				return fmt.Errorf("connecting: %w", err)
			}
			if err := inbox.Migrate(ctx); err != nil {
				return err
			}
			if existed {
				fmt.Fprintf(env.Out, "inbox table %s already existed; nothing to do\n", name)
			} else {
				fmt.Fprintf(env.Out, "created inbox table %s\n", name)
			}
			return nil
		},
	}
	in.register(cmd)
	return cmd
}

func newWorkerCleanupCmd(env *Env) *cobra.Command {
	var in inboxFlags
	var olderThan time.Duration
	cmd := &cobra.Command{
		Use:   "cleanup",
		Short: "Delete inbox keys finished more than --older-than ago (at least 31 days)",
		Long: `Delete the rows of the worker's inbox table whose key finished more than
--older-than ago, by the database's clock, in batches, and print how many
went. A key must be kept as long as Cloud Tasks may still deliver its task:
31 days (worker.MinRetention), the longest it keeps a task; a shorter
--older-than is refused. Run it daily, from cron or a scheduler.`,
		Example: `  ctdispatch worker cleanup --dsn "$DATABASE_URL"
  ctdispatch worker cleanup --dsn "$DATABASE_URL" --schema jobs --table inbox --older-than 1080h`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if olderThan < worker.MinRetention {
				return usagef("--older-than %s is below 744h (31 days, worker.MinRetention): a task can still deliver its key until then", olderThan)
			}
			db, inbox, err := in.open()
			if err != nil {
				return err
			}
			defer db.Close()
			n, err := inbox.Cleanup(cmd.Context(), olderThan)
			if err != nil {
				return err
			}
			fmt.Fprintf(env.Out, "deleted %d keys finished more than %s ago from %s\n", n, olderThan, inboxName(in.cfg))
			return nil
		},
	}
	in.register(cmd)
	cmd.Flags().DurationVar(&olderThan, "older-than", worker.MinRetention, "delete keys finished longer ago than this (at least 744h)")
	return cmd
}

// inboxName is the table's name as PostgreSQL resolves it, for to_regclass.
func inboxName(cfg worker.SQLConfig) string {
	if cfg.Schema == "" {
		cfg.Schema = worker.DefaultSchema
	}
	if cfg.Table == "" {
		cfg.Table = worker.DefaultTable
	}
	return `"` + cfg.Schema + `"."` + cfg.Table + `"`
}
