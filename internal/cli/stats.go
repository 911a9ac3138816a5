package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/ctdispatch/ctdispatch/outbox/parquetbox"

	"github.com/spf13/cobra"

	"github.com/ctdispatch/ctdispatch/outbox"
)

// statsJSON is the --format json form of one table's statistics.
type statsJSON struct {
	Table       string           `json:"table"`
	Files       int              `json:"files"`
	Bytes       int64            `json:"bytes"`
	Rows        int64            `json:"rows"`
	LogRecords  int64            `json:"log_records"`
	IDs         int64            `json:"ids"`
	ByStatus    map[string]int64 `json:"by_status"`
	ByQueue     map[string]int64 `json:"by_queue"`
	ByKind      map[string]int64 `json:"by_kind"`
	ByProcessor map[string]int64 `json:"by_processor"`
	// Unexported is a PostgreSQL outbox's rows not yet exported to
	// Parquet, once an exporter has run on it.
	Unexported *int64 `json:"unexported,omitempty"`
	// Refused is a PostgreSQL outbox's rows the exporter refused to write
	// (see "ctdispatch export refused"), when there are any.
	Refused int64 `json:"refused,omitempty"`
	// Iceberg is the table's current Iceberg snapshot, when the outbox
	// publishes its tables.
	Iceberg *icebergJSON `json:"iceberg,omitempty"`
}

// icebergJSON is the --format json form of a table's current Iceberg
// snapshot.
type icebergJSON struct {
	SnapshotID int64  `json:"snapshot_id"`
	Time       string `json:"snapshot_time"`
	Files      int64  `json:"files"`
	Rows       int64  `json:"rows"`
	Snapshots  int    `json:"snapshots"`
	Metadata   string `json:"metadata"`
}

// exportBacklog is what a PostgreSQL outbox's exporter left of a table:
// rows not yet exported, and rows it refused.
type exportBacklog struct {
	unexported, refused int64
}

func writeStats(w io.Writer, stats []parquetbox.TableStats) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TABLE\tIDS\tFILES\tBYTES\tROWS\tLOG RECORDS")
	for _, s := range stats {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\n", s.Table, s.IDs, s.Files, s.Bytes, s.Rows, s.LogRecords)
	}
	for _, s := range stats {
		if s.IDs == 0 {
			continue
		}
		for _, g := range []struct {
			name string
			m    map[string]int64
		}{{"status", s.ByStatus}, {"queue", s.ByQueue}, {"kind", s.ByKind}, {"processor", s.ByProcessor}} {
			fmt.Fprintf(tw, "\n%s BY %s\tIDS\n", s.Table, g.name)
			keys := make([]string, 0, len(g.m))
			for k := range g.m {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			for _, k := range keys {
				fmt.Fprintf(tw, "  %s\t%d\n", dash(k), g.m[k])
			}
		}
	}
	return tw.Flush()
}

// defaultQueuesJSON is the --format json line that names the live
// processes when their default queues differ.
type defaultQueuesJSON struct {
	DefaultQueuesDiffer []outbox.Process `json:"default_queues_differ"`
}

// writeDefaultQueues warns, after the tables, when the live processes on
// the outbox announced different default queues: a new ID two of them
// dispatch at once without naming a queue can then become a task in each
// (docs/consistency.md).
func writeDefaultQueues(w io.Writer, procs []outbox.Process) {
	if !outbox.DefaultQueuesDiffer(procs) {
		return
	}
	named := make([]string, len(procs))
	for i, p := range procs {
		named[i] = p.ProcessorUUID + " " + dash(p.DefaultQueue)
	}
	fmt.Fprintf(w, "\nwarning: live processes on this outbox have different default queues; a new ID two of them dispatch at once without naming a queue can become a task in each (docs/consistency.md): %s\n",
		strings.Join(named, ", "))
}

// writeUnexported says, after the tables, how many rows of each a
// PostgreSQL outbox's exporter has still to write, and has refused.
func writeUnexported(w io.Writer, stats []parquetbox.TableStats, unexported map[outbox.Table]exportBacklog) {
	if len(unexported) == 0 {
		return
	}
	fmt.Fprintln(w)
	for _, s := range stats {
		if b, ok := unexported[s.Table]; ok {
			fmt.Fprintf(w, "%s: %d rows not yet exported to Parquet", s.Table, b.unexported)
			if b.refused > 0 {
				fmt.Fprintf(w, `, %d refused (see "ctdispatch export refused")`, b.refused)
			}
			fmt.Fprintln(w)
		}
	}
}

func newStatsCmd(env *Env) *cobra.Command {
	var dir, format string
	cmd := &cobra.Command{
		Use:   "stats --outbox DIR [--format table|json]",
		Short: "Count the outbox's IDs by status, queue, kind and processor",
		Long: `Count the outbox's IDs by status, queue, kind and processor.

Each ID is counted once, in its latest state, across every Parquet file and
the write-ahead logs of running dispatchers. The first table also shows the
files, their bytes and rows (rows include states not yet folded by
compaction). Reads everything, streaming.

A PostgreSQL outbox (postgres://…) shows its rows and size on the server
instead of files, and, once "ctdispatch export" has run on it, the rows of
each table not yet exported to Parquet ("unexported" in JSON) and those
the exporter refused to write ("refused"; see "ctdispatch export
refused").

--format json prints JSON Lines: one object per table.

When the outbox publishes its tables as Iceberg tables (compact
--iceberg), a second table gives each one's current snapshot: its ID, when
it was committed, the data files and rows it names (rows as the files hold
them, every state not yet folded), and its metadata file, the one to point
DuckDB's iceberg_scan or a BigQuery table at ("iceberg" in JSON). A table
with no snapshot yet shows -.

When the running dispatchers on a Parquet outbox (those sharing its log
directory) announced different default queues, a warning line names each
with its queue after the tables ({"default_queues_differ":[…]} in JSON): a
new ID two of them dispatch at once without naming a queue can become a
task in each.

Damaged or foreign files are skipped, so the counts may be incomplete: they
are then listed on stderr (one line), added to the json output as lines
{"skipped_file":PATH,"reason":…,"damaged":BOOL} after the tables, and the
exit status is 3.`,
		Example: `  ctdispatch stats --outbox ./outbox
  ctdispatch stats --outbox ./outbox --format json | jq .`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if format != "table" && format != "json" {
				return usagef("--format %q unknown; allowed: table, json", format)
			}
			ctx := cmd.Context()
			stats, unexported, procs, skipped, err := outboxStats(ctx, env, dir)
			if err != nil {
				return err
			}
			lake, err := icebergStats(ctx, env, dir)
			if err != nil {
				return err
			}
			// Deliveries are in a worker's outbox, not a dispatcher's.
			stats = slices.DeleteFunc(stats, func(s parquetbox.TableStats) bool {
				return s.Table == outbox.TableDeliveries && s.Absent()
			})
			if format == "json" {
				enc := json.NewEncoder(cmd.OutOrStdout())
				for _, s := range stats {
					js := statsJSON{Table: string(s.Table), Files: s.Files, Bytes: s.Bytes, Rows: s.Rows,
						LogRecords: s.LogRecords, IDs: s.IDs, ByStatus: s.ByStatus, ByQueue: s.ByQueue,
						ByKind: s.ByKind, ByProcessor: s.ByProcessor}
					if b, ok := unexported[s.Table]; ok {
						js.Unexported, js.Refused = &b.unexported, b.refused
					}
					if st, ok := lake[s.Table]; ok && st.Published {
						js.Iceberg = &icebergJSON{SnapshotID: st.SnapshotID, Time: formatTime(st.Time), Files: st.Files,
							Rows: st.Rows, Snapshots: st.Snapshots, Metadata: st.MetadataLocation}
					}
					err := enc.Encode(js)
					if err != nil {
						return err
					}
				}
				if outbox.DefaultQueuesDiffer(procs) {
					if err := enc.Encode(defaultQueuesJSON{procs}); err != nil {
						return err
					}
				}
			} else {
				if err := writeStats(cmd.OutOrStdout(), stats); err != nil {
					return err
				}
				writeUnexported(cmd.OutOrStdout(), stats, unexported)
				if err := writeIceberg(cmd.OutOrStdout(), stats, lake); err != nil {
					return err
				}
				writeDefaultQueues(cmd.OutOrStdout(), procs)
			}
			return reportSkipped(cmd.OutOrStdout(), format == "json", skipped, "")
		},
	}
	cmd.Flags().StringVar(&dir, "outbox", "", "outbox directory, bucket URL (gs://BUCKET?prefix=P/) or PostgreSQL URL (postgres://…) (required)")
	cmd.Flags().StringVar(&format, "format", "table", "output format: table or json (JSON Lines)")
	return cmd
}

// outboxStats reads the statistics of the outbox at where, what its live
// processes announced (a Parquet outbox's) and the files it skipped. A
// PostgreSQL outbox has no files and no log: its rows and its size on the
// server are counted instead, and, once an exporter has run on it, the
// rows of each table not yet exported or refused (unexported; nil
// otherwise).
func outboxStats(ctx context.Context, env *Env, where string) (stats []parquetbox.TableStats, unexported map[outbox.Table]exportBacklog, procs []outbox.Process, skipped []*parquetbox.FileError, err error) {
	if isPostgresURL(where) {
		box, db, err := openPostgres(ctx, where)
		if err != nil {
			return nil, nil, nil, nil, err
		}
		defer db.Close()
		pg, err := box.Stats(ctx)
		if err != nil {
			return nil, nil, nil, nil, err
		}
		stats := make([]parquetbox.TableStats, 0, len(pg))
		for _, s := range pg {
			stats = append(stats, parquetbox.TableStats{Table: s.Table, Bytes: s.Bytes, Rows: s.Rows, IDs: s.IDs,
				ByStatus: s.ByStatus, ByQueue: s.ByQueue, ByKind: s.ByKind, ByProcessor: s.ByProcessor})
			if s.Exporting {
				if unexported == nil {
					unexported = map[outbox.Table]exportBacklog{}
				}
				unexported[s.Table] = exportBacklog{unexported: s.Unexported, refused: s.Refused}
			}
		}
		return stats, unexported, nil, nil, nil
	}
	o, err := openOutbox(ctx, env, where, true)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	defer o.Close()
	if stats, err = o.Stats(ctx); err != nil {
		return nil, nil, nil, nil, err
	}
	procs, err = o.Announced(ctx)
	return stats, nil, procs, o.Damaged(), err
}

// icebergStats returns each table's current Iceberg snapshot when the
// Parquet outbox at where publishes its tables (nil otherwise).
func icebergStats(ctx context.Context, env *Env, where string) (map[outbox.Table]lakeTableStatus, error) {
	if isPostgresURL(where) {
		return nil, nil
	}
	o, err := openOutbox(ctx, env, where, true)
	if err != nil {
		return nil, err
	}
	defer o.Close()
	cfg, on, err := publishedConfig(ctx, env, o)
	if err != nil || !on {
		return nil, err
	}
	if !icebergLinked {
		// The outbox's own statistics are still true; only its snapshots
		// cannot be read here.
		fmt.Fprintln(env.Err, "ctdispatch: the outbox publishes Iceberg tables; their snapshots are not shown: "+errNoIceberg.Error())
		return nil, nil
	}
	status, err := lakeStatus(ctx, o, cfg)
	if err != nil {
		return nil, fmt.Errorf("iceberg tables: %w", err)
	}
	out := make(map[outbox.Table]lakeTableStatus, len(status))
	for _, st := range status {
		out[st.Table] = st
	}
	return out, nil
}

// writeIceberg prints, after the tables, each one's current Iceberg
// snapshot, when the outbox publishes them.
func writeIceberg(w io.Writer, stats []parquetbox.TableStats, lake map[outbox.Table]lakeTableStatus) error {
	if lake == nil {
		return nil
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ICEBERG TABLE\tSNAPSHOT\tCOMMITTED AT\tFILES\tROWS\tMETADATA")
	for _, s := range stats {
		st := lake[s.Table]
		if !st.Published || st.SnapshotID == 0 {
			fmt.Fprintf(tw, "%s\t-\t-\t0\t0\t%s\n", s.Table, dash(st.MetadataLocation))
			continue
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%d\t%d\t%s\n", s.Table, st.SnapshotID, formatTime(st.Time), st.Files, st.Rows, st.MetadataLocation)
	}
	return tw.Flush()
}
