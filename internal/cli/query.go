package cli

import (
	"bufio"
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/ctdispatch/ctdispatch/outbox/parquetbox"

	"github.com/spf13/cobra"

	"github.com/ctdispatch/ctdispatch/outbox"
)

// openOutbox opens an existing outbox: a directory, or a bucket URL
// (gs://, s3:// in a binary built with -tags s3, mem://) which is always
// opened read-only (compaction included), since write-ahead logs live on
// the dispatchers' machines. Skipped files are logged through
// env.Logger (stderr) with their path and reason.
func openOutbox(ctx context.Context, env *Env, dir string, readOnly bool) (*parquetbox.Outbox, error) {
	if dir == "" {
		return nil, usagef("--outbox DIR is required")
	}
	if isPostgresURL(dir) {
		return nil, fmt.Errorf("outbox %s: a PostgreSQL outbox is not opened as files", redact(dir))
	}
	if isBucketURL(dir) {
		if err := checkBucketURL(dir); err != nil {
			return nil, err
		}
		return parquetbox.Open(ctx, parquetbox.Config{Root: dir, ReadOnly: true, Logger: env.Logger})
	}
	info, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("outbox %s: %w", redact(dir), err)
	}
	if !info.IsDir() {
		return nil, fmt.Errorf("outbox %s: not a directory", redact(dir))
	}
	return parquetbox.Open(ctx, parquetbox.Config{Root: dir, ReadOnly: readOnly, Logger: env.Logger})
}

const timeLayout = "2006-01-02T15:04:05.000000Z07:00"

func formatTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(timeLayout)
}

// queryColumn is a column of query's JSON and CSV output.
type queryColumn struct {
	// name is the JSON key and the CSV header.
	name string
	// col is the table column it shows; nil for table and task_name,
	// which are the record's own.
	col *parquetbox.Column
	// omitEmpty leaves it out of a JSON line when empty: the nullable
	// columns and the times (due_at, a timer's only).
	omitEmpty bool
	// delivery marks the deliveries table's own columns: in JSON only in
	// its records, in CSV only when deliveries are asked for.
	delivery bool
}

// queryColumns are the output's columns, taken from the tables' one
// column list (parquetbox.Columns), so a column added there shows here
// too: the table, then the timers table's columns (every column of
// dispatch_outbox, plus kind and due_at) with its ID column as id and the
// task's name after its Cloud Tasks ID, then the deliveries table's own.
// version is left out, so that the formats stay what scripts read; the
// states are listed in order already. So are the join columns of the
// deliveries table, which repeat its ID.
var queryColumns = func() []queryColumn {
	cols := []queryColumn{{name: "table"}}
	seen := map[string]bool{}
	timers := parquetbox.Columns(outbox.TableTimers)
	for i := range timers {
		c := &timers[i]
		seen[c.Name] = true
		switch {
		case c.Name == "version":
			continue
		case c.ID:
			cols = append(cols, queryColumn{name: "id", col: c})
			continue
		}
		cols = append(cols, queryColumn{name: c.Name, col: c, omitEmpty: c.Optional || c.Kind == parquetbox.ColumnTime})
		if c.Name == "cloud_task_id" {
			cols = append(cols, queryColumn{name: "task_name"})
		}
	}
	deliveries := parquetbox.Columns(outbox.TableDeliveries)
	for i := range deliveries {
		c := &deliveries[i]
		if !seen[c.Name] && !c.Derived && !c.ID {
			cols = append(cols, queryColumn{name: c.Name, col: c, delivery: true})
		}
	}
	return cols
}()

// csvHeader and csvDeliveryHeader are the CSV header's columns, and those
// added when deliveries are asked for.
var csvHeader, csvDeliveryHeader = func() (base, delivery []string) {
	for _, c := range queryColumns {
		if c.delivery {
			delivery = append(delivery, c.name)
		} else {
			base = append(base, c.name)
		}
	}
	return base, delivery
}()

// summaryColumn is a column of the table format's records: one of
// queryColumns under a heading of its own.
type summaryColumn struct {
	queryColumn
	heading string
}

// summaryColumns are the table format's columns for records, a summary
// (the deliveries have a layout of their own); an empty value shows as -.
var summaryColumns = func() []summaryColumn {
	var out []summaryColumn
	for _, h := range []struct{ name, heading string }{
		{"id", "ID"}, {"status", "STATUS"}, {"cloud_task_id", "CLOUD TASK ID"}, {"error_code", "ERROR"},
		{"create_calls", "CALLS"}, {"updated_at", "UPDATED AT"}, {"due_at", "DUE AT"},
		{"processor_uuid", "PROCESSOR"}, {"trace_id", "TRACE ID"},
	} {
		i := slices.IndexFunc(queryColumns, func(c queryColumn) bool { return c.name == h.name })
		if i < 0 {
			panic("cli: the table format names " + h.name + ", which is not a column")
		}
		out = append(out, summaryColumn{queryColumns[i], h.heading})
	}
	return out
}()

// queryValue is a column's value in a record: text for CSV and tables,
// number for JSON's integers.
type queryValue struct {
	text   string
	number bool
}

// value returns c's value in r.
func (c queryColumn) value(r *outbox.Record) queryValue {
	switch c.name {
	case "table":
		return queryValue{text: string(r.Table)}
	case "task_name":
		return queryValue{text: r.TaskName}
	}
	return queryValue{text: c.col.Text(r), number: c.col.Kind == parquetbox.ColumnInt}
}

// appendJSON appends r as one JSON object, keys as the columns', and a
// newline.
func appendJSON(b []byte, r *outbox.Record) []byte {
	b = append(b, '{')
	first := true
	for _, c := range queryColumns {
		if c.delivery && r.Table != outbox.TableDeliveries {
			continue
		}
		v := c.value(r)
		if c.omitEmpty && v.text == "" {
			continue
		}
		if !first {
			b = append(b, ',')
		}
		first = false
		key, _ := json.Marshal(c.name)
		b = append(append(b, key...), ':')
		if v.number {
			b = append(b, v.text...)
		} else {
			text, _ := json.Marshal(v.text)
			b = append(b, text...)
		}
	}
	return append(b, '}', '\n')
}

// csvRow returns r's CSV fields; with deliveries, the deliveries table's
// own columns too (empty for the records of other tables).
func csvRow(r *outbox.Record, deliveries bool) []string {
	out := make([]string, 0, len(queryColumns))
	for _, c := range queryColumns {
		switch {
		case c.delivery && !deliveries:
		case c.delivery && r.Table != outbox.TableDeliveries:
			out = append(out, "")
		default:
			out = append(out, c.value(r).text)
		}
	}
	return out
}

// writeRecords prints recs and then, when deliveries is set (the command
// was given a worker's outbox), dels, in format. The output is buffered
// and written at once: the table writer alone would make a write call per
// cell.
func writeRecords(w io.Writer, format string, recs []outbox.Record, deliveries bool, dels []outbox.Record) error {
	bw := bufio.NewWriter(w)
	if err := formatRecords(bw, format, recs, deliveries, dels); err != nil {
		return err
	}
	return bw.Flush()
}

func formatRecords(w io.Writer, format string, recs []outbox.Record, deliveries bool, dels []outbox.Record) error {
	switch format {
	case "json":
		var line []byte
		for _, r := range append(recs[:len(recs):len(recs)], dels...) {
			line = appendJSON(line[:0], &r)
			if _, err := w.Write(line); err != nil {
				return err
			}
		}
		return nil
	case "csv":
		cw := csv.NewWriter(w)
		header := csvHeader
		if deliveries {
			header = append(header[:len(header):len(header)], csvDeliveryHeader...)
		}
		if err := cw.Write(header); err != nil {
			return err
		}
		for _, r := range append(recs[:len(recs):len(recs)], dels...) {
			if err := cw.Write(csvRow(&r, deliveries)); err != nil {
				return err
			}
		}
		cw.Flush()
		return cw.Error()
	}
	if len(recs) > 0 {
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		cells := make([]string, len(summaryColumns))
		for i, c := range summaryColumns {
			cells[i] = c.heading
		}
		fmt.Fprintln(tw, strings.Join(cells, "\t"))
		for _, r := range recs {
			for i, c := range summaryColumns {
				cells[i] = dash(c.value(&r).text)
			}
			fmt.Fprintln(tw, strings.Join(cells, "\t"))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if len(dels) == 0 {
		return nil
	}
	if len(recs) > 0 {
		fmt.Fprintln(w)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "DELIVERY ID\tSTATUS\tHTTP\tRETRY\tEXEC\tLATENCY\tARRIVED AT\tUPDATED AT\tPROCESSOR\tTRACE ID")
	for _, r := range dels {
		d := r.Delivery
		status := "-"
		if d.HTTPStatus != 0 {
			status = strconv.Itoa(int(d.HTTPStatus))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%s\t%s\t%s\t%s\t%s\n", r.ID, r.Status, status, d.RetryCount, d.ExecutionCount,
			d.Latency, formatTime(r.CreatedAt), formatTime(r.UpdatedAt), r.ProcessorUUID, dash(r.TraceID))
	}
	return tw.Flush()
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func newQueryCmd(env *Env) *cobra.Command {
	var (
		dir, workerDir, dispatchID, timerID, cloudTaskID, run, format, asOf string
		history                                                             bool
	)
	cmd := &cobra.Command{
		Use:   "query [--outbox DIR] [--worker-outbox DIR] (--dispatch-id ID | --timer-id ID | --cloud-task-id ID | --run RUN) [--history] [--format table|json|csv]",
		Short: "Show the outbox records of a dispatch, a timer, a Cloud Tasks task or a run, and their deliveries",
		Long: `Show the outbox records of a dispatch, a timer, a Cloud Tasks task or a run.

The search covers every Parquet file of the outbox and the write-ahead logs of
running dispatchers, using the files' bloom filters and page indexes, so a
lookup by ID reads a small part of even a large table. By default each ID shows
its latest state; --history shows every recorded state not yet folded by
compaction.

--worker-outbox names the outbox a worker (package cloudtasks/worker)
records its deliveries in; the deliveries of what was asked for follow the
dispatcher's records: one line per delivery (its outcome, or started when
its worker never answered; --history shows both). Either outbox may be
given alone; at least one is required. The two are separate flags because
they are different stores: a dispatcher's outbox holds dispatch_outbox and
timers, a worker's holds deliveries, and each is written by its own fleet.

--as-of TIME (RFC 3339) reads the outbox's Iceberg tables (see compact
--iceberg) as the snapshot current at TIME had them: each ID in the state
it had then, with iceberg-go's own scan, as an engine reading that
snapshot does. Snapshots that a newer one replaced stay readable for the
outbox's grace (compact --iceberg-grace, an hour by default); a TIME older
than every snapshot kept is an error saying so. It reads --outbox only
(a file or bucket outbox; an export's Parquet root for a PostgreSQL
one), and not with --history: a snapshot holds what the files held.

Formats: table (aligned columns, the default), json (JSON Lines: one object
per line, keys as the Parquet columns) and csv (with a header). Exits 1 when
nothing matches.

Damaged or foreign files are skipped, so the answer may be incomplete: they
are then listed on stderr (one line), added to the json output as lines
{"skipped_file":PATH,"reason":…,"damaged":BOOL} after the records, and the
exit status is 3.`,
		Example: `  ctdispatch query --outbox ./outbox --dispatch-id dispatch:run1:extract:1
  ctdispatch query --outbox ./outbox --cloud-task-id d_cxtoltqhbncw6nevn7hy53kqn6 --history
  ctdispatch query --outbox ./outbox --run run1 --format csv
  ctdispatch query --outbox ./outbox --run run1 --as-of 2026-11-29T09:00:00Z
  ctdispatch query --outbox ./outbox --worker-outbox ./worker-outbox --dispatch-id dispatch:run1:extract:1`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var q outbox.Query
			var what string
			n := 0
			for _, sel := range []struct {
				v, flag string
				set     func()
			}{
				{dispatchID, "dispatch_id", func() { q.ID, q.Table = dispatchID, outbox.TableDispatch }},
				{timerID, "timer_id", func() { q.ID, q.Table = timerID, outbox.TableTimers }},
				{cloudTaskID, "cloud_task_id", func() { q.CloudTaskID = cloudTaskID }},
				{run, "run_id", func() { q.RunID = run }},
			} {
				if sel.v != "" {
					n++
					sel.set()
					what = fmt.Sprintf("%s %q", sel.flag, sel.v)
				}
			}
			if n != 1 {
				return usagef("give exactly one of --dispatch-id, --timer-id, --cloud-task-id, --run")
			}
			switch format {
			case "table", "json", "csv":
			default:
				return usagef("--format %q unknown; allowed: table, json, csv", format)
			}
			if dir == "" && workerDir == "" {
				return usagef("--outbox DIR is required (or --worker-outbox DIR for deliveries only)")
			}
			q.History = history
			ctx := cmd.Context()
			if asOf != "" {
				return queryAsOf(ctx, env, cmd.OutOrStdout(), dir, asOf, q, what, format, workerDir != "")
			}
			var (
				recs, dels []outbox.Record
				skipped    []*parquetbox.FileError
				where      []string
			)
			if dir != "" {
				o, err := openReadOutbox(ctx, env, dir)
				if err != nil {
					return err
				}
				defer o.close()
				sq := q
				sq.Summary = format == "table" // the table shows no more than a summary
				if recs, err = o.Lookup(ctx, sq); err != nil {
					return err
				}
				// A worker's outbox given as --outbox shows its
				// deliveries below, not among the dispatches.
				recs = slices.DeleteFunc(recs, func(r outbox.Record) bool { return r.Table == outbox.TableDeliveries })
				skipped, where = append(skipped, o.skipped()...), append(where, redact(dir))
			}
			if workerDir != "" {
				w, err := openReadOutbox(ctx, env, workerDir)
				if err != nil {
					return err
				}
				defer w.close()
				if dels, err = outbox.LookupDeliveries(ctx, w, q); err != nil {
					return err
				}
				skipped, where = append(skipped, w.skipped()...), append(where, redact(workerDir))
			}
			out := cmd.OutOrStdout()
			if len(recs) == 0 && len(dels) == 0 {
				// Exit 1, or 3 when the record may be in a skipped file.
				return reportSkipped(out, format == "json", skipped, "no record with "+what+" in "+strings.Join(where, " or "))
			}
			if err := writeRecords(out, format, recs, workerDir != "", dels); err != nil {
				return err
			}
			return reportSkipped(out, format == "json", skipped, "")
		},
	}
	f := cmd.Flags()
	f.StringVar(&dir, "outbox", "", "the dispatchers' outbox: a directory, a bucket URL (gs://BUCKET?prefix=P/) or a PostgreSQL URL (postgres://…)")
	f.StringVar(&workerDir, "worker-outbox", "", "a worker's outbox, whose deliveries table shows how each task was delivered: a directory, bucket URL or PostgreSQL URL")
	f.StringVar(&dispatchID, "dispatch-id", "", "internal dispatch ID, e.g. dispatch:run1:extract:1")
	f.StringVar(&timerID, "timer-id", "", "internal timer ID, e.g. timer:retry:run1:extract:1:1705340400")
	f.StringVar(&cloudTaskID, "cloud-task-id", "", "Cloud Tasks task ID (d_… or t_…)")
	f.StringVar(&run, "run", "", "run ID: every dispatch and timer of the run")
	f.BoolVar(&history, "history", false, "show every recorded state, not only the latest")
	f.StringVar(&format, "format", "table", "output format: table, json (JSON Lines) or csv")
	f.StringVar(&asOf, "as-of", "", "read the Iceberg snapshot current at this time (RFC 3339) instead of the outbox now")
	return cmd
}

// queryAsOf answers q from the outbox's Iceberg snapshots current at the
// time asOf names.
func queryAsOf(ctx context.Context, env *Env, out io.Writer, dir, asOf string, q outbox.Query, what, format string, worker bool) error {
	at, err := time.Parse(time.RFC3339, asOf)
	if err != nil {
		return usagef("--as-of %q is not an RFC 3339 time (2026-11-29T09:00:00Z)", asOf)
	}
	switch {
	case worker:
		return usagef("--as-of reads --outbox only; query a worker's outbox at a time with --outbox WORKER-OUTBOX --as-of")
	case q.History:
		return usagef("--as-of and --history exclude each other: a snapshot is read as each ID's state at that time")
	case dir == "":
		return usagef("--as-of needs --outbox DIR")
	case isPostgresURL(dir):
		return usagef("--as-of reads Iceberg tables, which a PostgreSQL outbox has not; give its export's root (export --to) as --outbox")
	}
	o, err := openOutbox(ctx, env, dir, true)
	if err != nil {
		return err
	}
	defer o.Close()
	cfg, on, err := publishedConfig(ctx, env, o)
	if err != nil {
		return err
	}
	if !on {
		return errNotPublished(dir)
	}
	status, err := lakeStatus(ctx, o, cfg)
	if err != nil {
		return fmt.Errorf("iceberg tables: %w", err)
	}
	var recs []outbox.Record
	for _, st := range status {
		// A worker's deliveries are shown with --worker-outbox only, which
		// --as-of does not read.
		if !st.Published || st.Table == outbox.TableDeliveries || (q.Table != "" && st.Table != q.Table) {
			continue
		}
		got, err := lakeReadAsOf(ctx, o, cfg, st.Table, at)
		if errors.Is(err, errNoLakeSnapshot) {
			return fmt.Errorf("--as-of %s: no snapshot of %s that old remains (replaced snapshots are kept for the outbox's grace, %s): %w",
				formatTime(at), st.Table, cfg.Grace, err)
		}
		if err != nil {
			return err
		}
		for _, r := range got {
			if matches(q, &r) {
				recs = append(recs, r)
			}
		}
	}
	if len(recs) == 0 {
		return fmt.Errorf("no record with %s in %s as of %s", what, redact(dir), formatTime(at))
	}
	return writeRecords(out, format, recs, false, nil)
}

// matches reports whether r is a record q asks for.
func matches(q outbox.Query, r *outbox.Record) bool {
	switch {
	case q.ID != "":
		return r.ID == q.ID
	case q.CloudTaskID != "":
		return r.CloudTaskID == q.CloudTaskID
	}
	return r.RunID == q.RunID
}
