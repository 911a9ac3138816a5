package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/ctdispatch/ctdispatch/outbox"
	"github.com/ctdispatch/ctdispatch/outbox/parquetbox"
	"github.com/ctdispatch/ctdispatch/outbox/pgbox"
)

func newExportCmd(env *Env) *cobra.Command {
	var where, to string
	var once bool
	var interval time.Duration
	cmd := &cobra.Command{
		Use:   "export --outbox postgres://… --to DIR|gs://… [--once]",
		Short: "Write a PostgreSQL outbox's records to Parquet tables that DuckDB and BigQuery read",
		Long: `Write every record of a PostgreSQL outbox, once, to Parquet tables in the
layout of a file outbox (dispatch_outbox, timers and deliveries under
--to, partitioned by created_date=YYYY-MM-DD, files named by bucket,
the database's export source and the batch), so that the queries of
docs/outbox.md, "ctdispatch query", "stats" and "compact" work on them.

Records go in numbered batches whose rows are fixed in the database
before any file is written: a batch interrupted by a crash is written
again, to the same files, by the next exporter once its lease (2 minutes)
expires, and exporters on several machines share the work without
writing a row twice. Without --once it exports every --interval until
interrupted; a record is then in Parquet within about --interval. The
same exporter runs inside "dispatch", "timer" and "recover" with
--export-to. Once an exporter has run on a database, "ctdispatch retain"
keeps the records it has not yet exported.

A row no dispatcher can have written (a cloud_task_id that is not the
hash of its ID: typed in by hand, written by another tool, damaged) is
not written and not marked exported: it stays in the database and retain
keeps its ID. --once reports such rows (how many, and a few with the
reason) and exits 3; without --once each batch that refuses rows logs a
warning on stderr. "ctdispatch export refused" lists them, and removes
them with --quarantine or --delete.

When the Parquet root publishes its tables as Iceberg tables (turned on
with "ctdispatch compact --outbox ROOT --iceberg"), export publishes them
too: --once after its batches, printing a line per table, and without
--once every --interval beside the batches (failures are logged on
stderr). A batch written again after a crash goes to the same files,
which the root keeps as they are, so no file, and no row, is registered
twice. A PostgreSQL catalog is recorded without its password: give it in
$PGPASSWORD or ~/.pgpass.

` + postgresURLHelp,
		Example: `  ctdispatch export --outbox "$DATABASE_URL" --to ./outbox --once
  ctdispatch export --outbox "$DATABASE_URL" --to "gs://analytics?prefix=ctdispatch/"
  ctdispatch compact --outbox ./outbox`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !isPostgresURL(where) {
				return usagef("--outbox %q is not a PostgreSQL URL; want postgres://… (a file or bucket outbox is in Parquet already)", redact(where))
			}
			if err := checkExportTo(to); err != nil {
				return err
			}
			if interval < pgbox.MinExportInterval {
				return usagef("--interval %s is below the minimum %s", interval, pgbox.MinExportInterval)
			}
			box, db, err := openPostgres(cmd.Context(), where)
			if err != nil {
				return err
			}
			defer db.Close()
			logger := env.Logger
			if !once {
				logger = warningsShown(env)
			}
			e, err := pgbox.NewExporter(box, pgbox.ExportConfig{Root: to, Open: openExportTables, Interval: interval, Logger: logger})
			if err != nil {
				return err
			}
			defer e.Close()
			if !once {
				stop := publishExportEvery(cmd.Context(), env, logger, to, interval)
				defer stop()
				return e.Run(cmd.Context())
			}
			st, err := e.ExportOnce(cmd.Context())
			if err == nil || len(st.Batches) > 0 {
				printExport(env.Out, st) // not "nothing to export" above an error
			}
			if err == nil {
				err = publishExport(cmd.Context(), env, env.Out, to)
			}
			return errors.Join(err, refusedReport(st, where))
		},
	}
	cmd.AddCommand(newExportRefusedCmd(env))
	cmd.Flags().StringVar(&where, "outbox", "", "PostgreSQL URL of the outbox, postgres://… (required)")
	cmd.Flags().StringVar(&to, "to", "", "where the Parquet tables go: a directory or a bucket URL, gs://BUCKET[?prefix=P/] (required)")
	cmd.Flags().BoolVar(&once, "once", false, "export what is committed now, print what was written, and exit")
	cmd.Flags().DurationVar(&interval, "interval", pgbox.DefaultExportInterval, "without --once: how often to export (at least "+pgbox.MinExportInterval.String()+")")
	return cmd
}

// checkExportTo checks the destination of an export: required, and a
// directory or a bucket this binary can open.
func checkExportTo(to string) error {
	if to == "" {
		return usagef("--to is required: a directory or a bucket URL for the Parquet tables")
	}
	if isPostgresURL(to) {
		return usagef("--to %s is a PostgreSQL URL; want a directory or a bucket URL for the Parquet tables", redact(to))
	}
	if isBucketURL(to) {
		return checkBucketFlag("--to", to)
	}
	return nil
}

// printExport says what an export pass wrote.
func printExport(w io.Writer, st pgbox.ExportStats) {
	if len(st.Batches) == 0 {
		fmt.Fprintln(w, "nothing to export")
		return
	}
	first, last := st.Batches[0], st.Batches[len(st.Batches)-1]
	span := fmt.Sprintf("batch %d", first)
	if last != first {
		span = fmt.Sprintf("%d batches, %d to %d", len(st.Batches), first, last)
	}
	fmt.Fprintf(w, "exported %s: dispatch_outbox %d rows, timers %d rows, deliveries %d rows\n",
		span, st.Rows[0], st.Rows[1], st.Rows[2])
}

// warningsShown is env's logger when it shows warnings (-v), or one that
// writes warnings and errors to stderr: a long-running export's failed
// passes and refused rows are not to go unseen.
func warningsShown(env *Env) *slog.Logger {
	if env.Logger.Enabled(context.Background(), slog.LevelWarn) {
		return env.Logger
	}
	return slog.New(slog.NewTextHandler(env.Err, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// exportOptions are the export a dispatcher's PostgreSQL outbox runs, from
// --export-to and --export-interval (none without --export-to).
func (c *connFlags) exportOptions(env *Env) pgbox.ExportConfig {
	if c.exportTo == "" {
		return pgbox.ExportConfig{}
	}
	return pgbox.ExportConfig{Root: c.exportTo, Open: openExportTables, Interval: c.exportInterval, Logger: env.Logger}
}

// openExportTables opens the Parquet tables at root that a PostgreSQL
// outbox's exporter writes to (pgbox.ExportConfig.Open): read-only, as
// the exporter keeps no log of its own, and a local directory is created
// (0700) when missing. The program wires the two stores: neither imports
// the other.
func openExportTables(ctx context.Context, root string) (outbox.RunWriter, error) {
	if !strings.Contains(root, "://") {
		if err := os.MkdirAll(root, 0o700); err != nil {
			return nil, err
		}
	}
	files, err := parquetbox.Open(ctx, parquetbox.Config{Root: root, ReadOnly: true})
	if err != nil {
		return nil, err
	}
	return files, nil
}

// checkExport checks --export-to and --export-interval for a dispatcher
// over outbox.
func (c *connFlags) checkExport(pg bool) error {
	if c.exportTo == "" {
		return nil
	}
	if !pg {
		return usagef("--export-to applies to a PostgreSQL --outbox; a file or bucket outbox is in Parquet already")
	}
	if c.exportInterval < pgbox.MinExportInterval {
		return usagef("--export-interval %s is below the minimum %s", c.exportInterval, pgbox.MinExportInterval)
	}
	return checkExportTo(c.exportTo)
}

// closeExporting closes a PostgreSQL outbox (its exporter) and then its
// database.
func closeExporting(box *pgbox.Outbox, close func() error) func() error {
	return func() error { return errors.Join(box.Close(), close()) }
}

// publishExport publishes the Iceberg tables of an export's root, when
// the root publishes them, and prints what it did to w.
func publishExport(ctx context.Context, env *Env, w io.Writer, root string) error {
	if !strings.Contains(root, "://") {
		if _, err := os.Stat(root); errors.Is(err, os.ErrNotExist) {
			return nil // nothing exported, nothing switched on
		}
	}
	o, err := parquetbox.Open(ctx, parquetbox.Config{Root: root, ReadOnly: true, Logger: env.Logger})
	if err != nil {
		return err
	}
	defer o.Close()
	cfg, on, err := publishedConfig(ctx, env, o)
	if err != nil || !on {
		return err
	}
	return publish(ctx, w, o, cfg)
}

// publishExportEvery publishes the export root's Iceberg tables every
// interval, beside a running exporter, until ctx ends or stop is
// called; what fails is logged.
func publishExportEvery(ctx context.Context, env *Env, logger *slog.Logger, root string, interval time.Duration) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			var lines strings.Builder
			if err := publishExport(ctx, env, &lines, root); err != nil && ctx.Err() == nil {
				logger.Warn("export: iceberg publication failed; trying again next interval", "root", redact(root), "err", err)
			}
			logger.Debug("export: iceberg publication", "root", redact(root), "report", lines.String())
		}
	}()
	return func() { cancel(); <-done }
}
