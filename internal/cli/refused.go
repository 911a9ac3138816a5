package cli

import (
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/ctdispatch/ctdispatch/outbox"
	"github.com/ctdispatch/ctdispatch/outbox/pgbox"
)

// refusedError says an export pass refused rows no dispatcher can have
// written: the export is done, but the Parquet tables lack rows the
// database holds (exit 3, as an answer that may be incomplete).
type refusedError struct {
	st    pgbox.ExportStats
	where string // the --outbox, redacted
}

// refusedReport returns the refusedError of st, or nil when the pass
// refused nothing.
func refusedReport(st pgbox.ExportStats, where string) error {
	if st.Refused == [3]int64{} {
		return nil
	}
	return &refusedError{st: st, where: redact(where)}
}

func (e *refusedError) Error() string {
	var b strings.Builder
	total := e.st.Refused[0] + e.st.Refused[1] + e.st.Refused[2]
	fmt.Fprintf(&b, "export refused %d %s that no dispatcher can have written (%s): not written to Parquet, kept in the database, and kept from retain;",
		total, plural(int(total), "row", "rows"), tableCounts(e.st.Refused))
	for i, r := range e.st.RefusedSample {
		if i > 0 {
			b.WriteString(";")
		}
		b.WriteString(" " + r.String())
	}
	if n := int(total) - len(e.st.RefusedSample); n > 0 {
		fmt.Fprintf(&b, "; and %d more", n)
	}
	fmt.Fprintf(&b, `; list them with "ctdispatch export refused --outbox %s", then remove them with --quarantine or --delete`, e.where)
	return b.String()
}

// tableCounts names the tables of counts (in the order of outbox.Tables)
// that are not zero, with their counts.
func tableCounts(counts [3]int64) string {
	var parts []string
	for i, t := range outbox.Tables() {
		if counts[i] > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", t, counts[i]))
		}
	}
	return strings.Join(parts, ", ")
}

func newExportRefusedCmd(env *Env) *cobra.Command {
	var where string
	var limit int
	var del, quarantine bool
	cmd := &cobra.Command{
		Use:   "refused --outbox postgres://… [--limit N] [--quarantine | --delete]",
		Short: "List the rows export refused to write, then quarantine or delete them",
		Long: `List the rows of a PostgreSQL outbox that "ctdispatch export" refused to
write to Parquet: rows no dispatcher can have written, such as a row whose
cloud_task_id is not the hash of its ID (typed in by hand, written by
another tool, or damaged). The outbox's readers already ignore them; the
exporter leaves them out of every batch, so they stay in the tables and
"ctdispatch retain" keeps their IDs, until removed here on purpose.

Without --quarantine or --delete it prints how many rows of each table
were refused and the first --limit of them, each with its table, seq, ID
and the reason. --quarantine moves every refused row, whole (as JSON, with
its table, seq, ID and the reason), into the table
ctdispatch_export_quarantine ("ctdispatch migrate" creates it); --delete
deletes them. Either works in statements of at most 1,000 rows; other
rows of the same IDs stay. A row no export has looked at yet is not
listed: run "ctdispatch export --once" first.

` + postgresURLHelp,
		Example: `  ctdispatch export refused --outbox "$DATABASE_URL"
  ctdispatch export refused --outbox "$DATABASE_URL" --quarantine`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !isPostgresURL(where) {
				return usagef("--outbox %q is not a PostgreSQL URL; want postgres://… (only a PostgreSQL outbox is exported)", where)
			}
			if del && quarantine {
				return usagef("--delete and --quarantine exclude each other; give one, or neither to list")
			}
			if limit < 0 {
				return usagef("--limit %d is negative; allowed: 0 (counts only) or more", limit)
			}
			box, db, err := openPostgres(cmd.Context(), where)
			if err != nil {
				return err
			}
			defer db.Close()
			_, opts, _ := postgresOptions(where)
			switch {
			case del:
				n, err := box.DeleteRefused(cmd.Context())
				printRemoved(env.Out, n, "deleted")
				return err
			case quarantine:
				n, err := box.QuarantineRefused(cmd.Context())
				printRemoved(env.Out, n, "moved to "+pgbox.QuarantineTableName(opts))
				return err
			}
			counts, rows, err := box.Refused(cmd.Context(), limit)
			if err != nil {
				return err
			}
			total := int64(0)
			for i, t := range outbox.Tables() {
				fmt.Fprintf(env.Out, "%s: %d %s refused\n", t, counts[i], plural(int(counts[i]), "row", "rows"))
				total += counts[i]
			}
			for _, r := range rows {
				fmt.Fprintln(env.Out, r.String())
			}
			if n := total - int64(len(rows)); n > 0 && limit > 0 {
				fmt.Fprintf(env.Out, "… and %d more (--limit %d)\n", n, limit)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&where, "outbox", "", "PostgreSQL URL of the outbox, postgres://… (required)")
	cmd.Flags().IntVar(&limit, "limit", 20, "list at most this many refused rows (0: the counts only)")
	cmd.Flags().BoolVar(&quarantine, "quarantine", false, "move every refused row into the table ctdispatch_export_quarantine")
	cmd.Flags().BoolVar(&del, "delete", false, "delete every refused row")
	return cmd
}

// printRemoved says how many refused rows of each table went, and how.
func printRemoved(w io.Writer, n [3]int64, how string) {
	for i, t := range outbox.Tables() {
		fmt.Fprintf(w, "%s: %d refused %s %s\n", t, n[i], plural(int(n[i]), "row", "rows"), how)
	}
}
