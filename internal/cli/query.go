package cli

import (
	"bufio"
	"context"
	"encoding/csv"
	"encoding/json"
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
		return parquetbox.Open(ctx, parquetbox.Options{Root: dir, ReadOnly: true, Logger: env.Logger})
	}
	info, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("outbox %s: %w", dir, err)
	}
	if !info.IsDir() {
		return nil, fmt.Errorf("outbox %s: not a directory", dir)
	}
	return parquetbox.Open(ctx, parquetbox.Options{Root: dir, ReadOnly: readOnly, Logger: env.Logger})
}

const timeLayout = "2006-01-02T15:04:05.000000Z07:00"

func formatTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(timeLayout)
}

// recordJSON is the JSON form of a record; keys are the Parquet column
// names, plus table and the derived task_name.
type recordJSON struct {
	Table         string `json:"table"`
	ID            string `json:"id"`
	CloudTaskID   string `json:"cloud_task_id"`
	TaskName      string `json:"task_name"`
	Queue         string `json:"queue"`
	RunID         string `json:"run_id"`
	TaskKey       string `json:"task_key"`
	Attempt       string `json:"attempt"`
	Kind          string `json:"kind"`
	Status        string `json:"status"`
	ErrorCode     string `json:"error_code"`
	CreateCalls   int32  `json:"create_calls"`
	PayloadSHA256 string `json:"payload_sha256"`
	ProcessorUUID string `json:"processor_uuid"`
	CreatedAt     string `json:"created_at"`
	UpdatedAt     string `json:"updated_at"`
	DueAt         string `json:"due_at,omitempty"`
	TraceID       string `json:"trace_id,omitempty"`
	SpanID        string `json:"span_id,omitempty"`
	// The deliveries table's own columns, only in its records.
	RetryCount     *int32 `json:"retry_count,omitempty"`
	ExecutionCount *int32 `json:"execution_count,omitempty"`
	HTTPStatus     *int32 `json:"http_status,omitempty"`
	LatencyMicros  *int64 `json:"latency_us,omitempty"`
}

func toRecordJSON(r outbox.Record) recordJSON {
	j := recordJSON{
		Table: string(r.Table), ID: r.ID, CloudTaskID: r.CloudTaskID, TaskName: r.TaskName, Queue: r.Queue,
		RunID: r.RunID, TaskKey: r.TaskKey, Attempt: r.Attempt, Kind: r.Kind, Status: string(r.Status),
		ErrorCode: r.ErrorCode, CreateCalls: r.CreateCalls, PayloadSHA256: r.PayloadSHA256,
		ProcessorUUID: r.ProcessorUUID, CreatedAt: formatTime(r.CreatedAt), UpdatedAt: formatTime(r.UpdatedAt),
		DueAt: formatTime(r.DueAt), TraceID: r.TraceID, SpanID: r.SpanID,
	}
	if r.Table == outbox.TableDeliveries {
		d := r.Delivery
		latency := d.Latency.Microseconds()
		j.RetryCount, j.ExecutionCount, j.HTTPStatus, j.LatencyMicros = &d.RetryCount, &d.ExecutionCount, &d.HTTPStatus, &latency
	}
	return j
}

var csvHeader = []string{"table", "id", "cloud_task_id", "task_name", "queue", "run_id", "task_key", "attempt",
	"kind", "status", "error_code", "create_calls", "payload_sha256", "processor_uuid", "created_at", "updated_at", "due_at",
	"trace_id", "span_id"}

// csvDeliveryHeader are the columns added when deliveries are asked for.
var csvDeliveryHeader = []string{"retry_count", "execution_count", "http_status", "latency_us"}

func (j recordJSON) csvRow(deliveries bool) []string {
	row := []string{j.Table, j.ID, j.CloudTaskID, j.TaskName, j.Queue, j.RunID, j.TaskKey, j.Attempt, j.Kind,
		j.Status, j.ErrorCode, strconv.Itoa(int(j.CreateCalls)), j.PayloadSHA256, j.ProcessorUUID,
		j.CreatedAt, j.UpdatedAt, j.DueAt, j.TraceID, j.SpanID}
	if !deliveries {
		return row
	}
	if j.HTTPStatus == nil {
		return append(row, "", "", "", "")
	}
	return append(row, strconv.Itoa(int(*j.RetryCount)), strconv.Itoa(int(*j.ExecutionCount)),
		strconv.Itoa(int(*j.HTTPStatus)), strconv.FormatInt(*j.LatencyMicros, 10))
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
		enc := json.NewEncoder(w)
		for _, r := range append(recs[:len(recs):len(recs)], dels...) {
			if err := enc.Encode(toRecordJSON(r)); err != nil {
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
			if err := cw.Write(toRecordJSON(r).csvRow(deliveries)); err != nil {
				return err
			}
		}
		cw.Flush()
		return cw.Error()
	}
	if len(recs) > 0 {
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tSTATUS\tCLOUD TASK ID\tERROR\tCALLS\tUPDATED AT\tDUE AT\tPROCESSOR\tTRACE ID")
		for _, r := range recs {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\n", r.ID, r.Status, r.CloudTaskID, dash(r.ErrorCode),
				r.CreateCalls, formatTime(r.UpdatedAt), dash(formatTime(r.DueAt)), r.ProcessorUUID, dash(r.TraceID))
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
		dir, workerDir, dispatchID, timerID, cloudTaskID, run, format string
		history                                                       bool
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
	return cmd
}
