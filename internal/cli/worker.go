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
	cmd.AddCommand(newWorkerMigrateCmd(env))
	return cmd
}

func newWorkerMigrateCmd(env *Env) *cobra.Command {
	var dsn string
	var cfg worker.SQLConfig
	cmd := &cobra.Command{
		Use:   "migrate",
		Short: "Create the worker's inbox table in PostgreSQL (idempotent)",
		Long: `Create the schema, the inbox table and its index that worker.NewSQLInbox
uses, if they do not exist. Running it again, or from several machines at
once, is safe. The table holds one row per finished Idempotency-Key; keep
rows at least 31 days (worker.MinRetention) and remove older ones with
SQLInbox.Cleanup.`,
		Example: `  ctdispatch worker migrate --dsn "postgres://app@db.internal/app"
  ctdispatch worker migrate --dsn "$DATABASE_URL" --schema jobs --table inbox`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if dsn == "" {
				return usagef("--dsn is required: a PostgreSQL connection string (postgres://… or key=value)")
			}
			db, err := sql.Open("pgx", dsn)
			if err != nil {
				return asUsage(fmt.Errorf("--dsn: %w", err))
			}
			defer db.Close()
			inbox, err := worker.NewSQLInbox(db, cfg)
			if err != nil {
				var ce *worker.ConfigError
				if errors.As(err, &ce) {
					return usagef("--%s %s %s", map[string]string{"SQLConfig.Schema": "schema", "SQLConfig.Table": "table"}[ce.Field], ce.Value, ce.Rule)
				}
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), workerMigrateTimeout)
			defer cancel()
			name := inboxName(cfg)
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
	f := cmd.Flags()
	f.StringVar(&dsn, "dsn", "", "PostgreSQL connection string (required)")
	f.StringVar(&cfg.Schema, "schema", worker.DefaultSchema, "schema of the inbox table (created if missing)")
	f.StringVar(&cfg.Table, "table", worker.DefaultTable, "name of the inbox table")
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
