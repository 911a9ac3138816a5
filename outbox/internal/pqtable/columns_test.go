package pqtable

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/parquet-go/parquet-go"
	"github.com/stretchr/testify/require"

	"github.com/ctdispatch/ctdispatch/outbox"
	"github.com/ctdispatch/ctdispatch/outbox/internal/pqfile"
	"github.com/ctdispatch/ctdispatch/outbox/internal/tableschema"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

var schemas = []tableschema.Schema{tableschema.DispatchSchema, tableschema.TimerSchema, tableschema.DeliverySchema}

// writeOne writes a file of schema s holding row r and opens it.
func writeOne(t *testing.T, s tableschema.Schema, r tableschema.Row) *parquet.File {
	t.Helper()
	var buf bytes.Buffer
	w := NewWriter(&buf, s.Table, s.Columns[0].Name, pqfile.FlushLayout)
	require.NoError(t, w.Write(&r))
	require.NoError(t, w.Close())
	pf, err := parquet.OpenFile(bytes.NewReader(buf.Bytes()), int64(buf.Len()))
	require.NoError(t, err)
	return pf
}

// The files a Writer writes have the schema their column list says, in
// its order, with each column's encoding; testdata/schema_<table>.txt
// holds it as the files were first written (from Go structs, before the
// list), so a change to what is on disk shows as a diff.
func TestWrittenSchemaIsTheColumnList(t *testing.T) {
	t.Parallel()
	for _, s := range schemas {
		t.Run(s.Table, func(t *testing.T) {
			t.Parallel()
			pf := writeOne(t, s, tableschema.Row{ID: "dispatch:r:t:1#x", Kind: "dispatch", Status: "created", CreatedAt: 1, UpdatedAt: 2})
			var got strings.Builder
			fmt.Fprintln(&got, pf.Schema())
			leaves := pf.Schema().Columns()
			require.Len(t, leaves, len(s.Columns))
			for i, c := range pf.Metadata().RowGroups[0].Columns {
				require.Equal(t, []string{s.Columns[i].Name}, leaves[i], "column %d", i)
				var encs []string
				for _, e := range c.MetaData.Encoding {
					encs = append(encs, e.String())
				}
				fmt.Fprintf(&got, "%s: %s %s\n", leaves[i][0], c.MetaData.Type, strings.Join(encs, ","))
				leaf, _ := pf.Schema().Lookup(leaves[i]...)
				require.NoError(t, checkColumn(s.Columns[i].Kind, leaf.Node), "column %s", s.Columns[i].Name)
			}
			golden := filepath.Join("testdata", "schema_"+s.Table+".txt")
			if *update {
				require.NoError(t, os.MkdirAll("testdata", 0o755))
				require.NoError(t, os.WriteFile(golden, []byte(got.String()), 0o644))
			}
			want, err := os.ReadFile(golden)
			require.NoError(t, err)
			require.Equal(t, string(want), got.String())
		})
	}
}

// A record goes through a file and back unchanged, every column of its
// table included: a column missing from tableschema.RowOf, Row.Record or the list
// loses its value here.
func TestRecordRoundTripsThroughEachTable(t *testing.T) {
	t.Parallel()
	at := func(s int) time.Time { return time.Date(2026, 11, 27, 10, 0, s, 123000, time.UTC) }
	base := outbox.Record{
		ID: "dispatch:run1:extract:1", CloudTaskID: "d_abc", Queue: "projects/p/locations/l/queues/q", RunID: "run1",
		TaskKey: "extract", Attempt: "1", Status: outbox.StatusFailed, ErrorCode: "Unavailable", CreateCalls: 3,
		PayloadSHA256: "ab12", ProcessorUUID: "proc", CreatedAt: at(1), UpdatedAt: at(2),
	}
	timer := base
	timer.ID, timer.Kind, timer.DueAt = "timer:run1:extract:1", "retry", at(3)
	delivery := outbox.Record{
		ID: "dispatch:run1:extract:1#d1", CloudTaskID: "d_abc", Queue: "q", RunID: "run1", TaskKey: "extract",
		Attempt: "1", Kind: "dispatch", Status: "done", ProcessorUUID: "worker", CreatedAt: at(1), UpdatedAt: at(2),
		Delivery: outbox.DeliveryFields{RetryCount: 2, ExecutionCount: 1, HTTPStatus: 200, Latency: 1500 * time.Microsecond},
	}
	for _, tc := range []struct {
		schema tableschema.Schema
		table  outbox.Table
		rec    outbox.Record
	}{
		{tableschema.DispatchSchema, outbox.TableDispatch, base},
		{tableschema.TimerSchema, outbox.TableTimers, timer},
		{tableschema.DeliverySchema, outbox.TableDeliveries, delivery},
	} {
		t.Run(tc.schema.Table, func(t *testing.T) {
			t.Parallel()
			tc.rec.Table = tc.table
			require.Equal(t, string(tc.table), tc.schema.Table)
			require.Equal(t, tc.table.IDColumn(), tc.schema.Columns[0].Name)
			row := tableschema.RowOf(&tc.rec)
			var buf bytes.Buffer
			w := NewWriter(&buf, tc.schema.Table, tc.schema.Columns[0].Name, pqfile.FlushLayout)
			require.NoError(t, w.Write(&row))
			require.NoError(t, w.Close())
			f, err := Open(bytes.NewReader(buf.Bytes()), int64(buf.Len()), tc.schema.Table, tc.schema.Columns[0].Name)
			require.NoError(t, err)
			var got []outbox.Record
			require.NoError(t, f.Scan(func(r *tableschema.Row) error {
				got = append(got, r.Record(tc.table))
				return nil
			}))
			require.Equal(t, []outbox.Record{tc.rec}, got)
		})
	}
}

// A delivery row repeats its internal ID under the column the other
// tables give it, the other one empty.
func TestDeliveryJoinColumns(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		id, kind, dispatchID, timerID string
	}{
		{"dispatch:r:t:1#u1", "dispatch", "dispatch:r:t:1", ""},
		{"timer:r:t:1#u2", "retry", "", "timer:r:t:1"},
		{"timer:r:t:1", "heartbeat", "", "timer:r:t:1"},
	} {
		pf := writeOne(t, tableschema.DeliverySchema, tableschema.Row{ID: tc.id, Kind: tc.kind})
		type joinRow struct {
			DispatchID string `parquet:"dispatch_id"`
			TimerID    string `parquet:"timer_id"`
		}
		rows := make([]joinRow, 1)
		n, _ := parquet.NewGenericReader[joinRow](pf).Read(rows)
		require.Equal(t, 1, n)
		require.Equal(t, joinRow{tc.dispatchID, tc.timerID}, rows[0], tc.id)
	}
}

// sqlNotColumns are the lower-case words of docs/outbox.md's SQL that are
// not columns of the tables: keywords, functions, aliases, the hive
// partition column, and BigQuery's options.
var sqlNotColumns = []string{
	"select", "from", "where", "order", "by", "group", "all", "and", "or", "as", "desc", "asc", "with",
	"over", "partition", "row_number", "count", "read_parquet", "hive_partitioning", "union_by_name", "true", "false",
	"date", "n", "qualify", "left", "join", "using", "on", "filter", "in", "is", "null", "not",
	"created_date", "dispatches", "deliveries", "dispatched", "delivered", "finished", "unanswered",
	"o", "d", "t", "create", "external", "table", "columns", "options", "format", "uris",
	"hive_partition_uri_prefix", "require_hive_partition_filter", "ops", "timers", "dispatch_outbox",
	"max", "min", "sum", "any_value", "limit", "distinct", "case", "when", "then", "else", "end",
	// the Iceberg tables' queries (DuckDB's iceberg extension, BigQuery's
	// BigLake tables)
	"install", "load", "iceberg", "iceberg_scan", "snapshot_from_timestamp", "timestamp", "between",
	"connection", "replace",
}

// Every column docs/outbox.md's SQL names is in a table's column list: a
// column renamed or dropped breaks this test before it breaks a reader's
// query. (TestDuckDBReadsPartitionedTables and TestDuckDBJoinsDeliveries
// run those queries against written files when DuckDB is installed.)
func TestDocsQueriesNameListedColumns(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile(filepath.Join("..", "..", "..", "docs", "outbox.md"))
	require.NoError(t, err)
	blocks := regexp.MustCompile("(?s)```sql\n(.*?)```").FindAllStringSubmatch(string(doc), -1)
	require.NotEmpty(t, blocks)
	listed := map[string]bool{}
	for _, s := range schemas {
		for _, c := range s.Columns {
			listed[c.Name] = true
		}
	}
	strs := regexp.MustCompile("'[^']*'|--[^\\n]*|`[^`]*`")
	words := regexp.MustCompile(`\b[a-z][a-z0-9_]*\b`)
	used := map[string]bool{}
	for _, b := range blocks {
		for _, w := range words.FindAllString(strs.ReplaceAllString(b[1], ""), -1) {
			if !slices.Contains(sqlNotColumns, w) {
				used[w] = true
			}
		}
	}
	require.NotEmpty(t, used)
	for w := range used {
		require.True(t, listed[w], "docs/outbox.md's SQL names %q, which no table's column list holds", w)
	}
}
