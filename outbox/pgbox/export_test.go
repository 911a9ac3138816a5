package pgbox_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ctdispatch/ctdispatch/internal/testtools/duckdbtest"
	"github.com/ctdispatch/ctdispatch/internal/testtools/pgtest"
	"github.com/ctdispatch/ctdispatch/naming"
	"github.com/ctdispatch/ctdispatch/outbox"
	"github.com/ctdispatch/ctdispatch/outbox/parquetbox"
	"github.com/ctdispatch/ctdispatch/outbox/pgbox"
)

const testQueue = "projects/p/locations/l/queues/q"

// appendStates appends a dispatch of task under run with the given states
// (versions 1, 2, …), through o.
func appendStates(t *testing.T, o outbox.Outbox, run, task string, statuses ...outbox.Status) {
	t.Helper()
	id, err := naming.NewDispatch(run, task, naming.Attempt(1))
	require.NoError(t, err)
	r := outbox.RecordOf(id)
	r.Queue = testQueue
	for i, st := range statuses {
		r.Status, r.Version = st, int64(i+1)
		require.NoError(t, outbox.AppendAndWait(t.Context(), o, r))
	}
}

// exportedTree reads the Parquet tables at root: each table's row count
// (every row of every file) and the whole history of run there.
func exportedTree(t *testing.T, root, run string) (rows [3]int64, history []outbox.Record) {
	t.Helper()
	pq, err := parquetbox.Open(t.Context(), parquetbox.Config{Root: root, ReadOnly: true, RefreshInterval: -1})
	require.NoError(t, err)
	defer pq.Close()
	st, err := pq.Stats(t.Context())
	require.NoError(t, err)
	for i, s := range st {
		rows[i] = s.Rows
		require.Empty(t, s.Skipped)
	}
	history, err = pq.Lookup(t.Context(), outbox.Query{RunID: run, History: true})
	require.NoError(t, err)
	return rows, history
}

// files lists the data files under root, relative to it (not the
// tables' schema files, which hold no rows).
func files(t *testing.T, root string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(p, ".parquet") && !strings.Contains(p, "/_schema/") {
			rel, _ := filepath.Rel(root, p)
			out = append(out, rel)
		}
		return err
	})
	require.NoError(t, err)
	sort.Strings(out)
	return out
}

// parquetTables is the tests' ExportConfig.Open: the Parquet tables at
// root, one bucket per day so that a batch writes one file per table and
// day.
func parquetTables(ctx context.Context, root string) (outbox.RunWriter, error) {
	if err := os.MkdirAll(root, 0o700); err != nil {
		return nil, err
	}
	files, err := parquetbox.Open(ctx, parquetbox.Config{Root: root, ReadOnly: true, Buckets: 1})
	if err != nil {
		return nil, err
	}
	return files, nil
}

// newExporter returns an exporter of o to root.
func newExporter(t *testing.T, o *pgbox.Outbox, root string) *pgbox.Exporter {
	t.Helper()
	e, err := pgbox.NewExporter(o, pgbox.ExportConfig{Root: root, Open: parquetTables})
	require.NoError(t, err)
	t.Cleanup(func() { e.Close() })
	return e
}

// Every state of every table goes to Parquet once, in the layout a
// Parquet outbox writes: one file per table and day per batch, named by
// the database's export source and the batch; the history read from the
// files is the database's.
func TestExportWritesEveryStateOnceInTheParquetLayout(t *testing.T) {
	t.Parallel()
	db := pgtest.Open(t)
	clock := clockwork.NewFakeClockAt(time.Date(2026, 3, 1, 23, 0, 0, 0, time.UTC))
	o := openIn(t, db, clock)
	root := t.TempDir()
	e := newExporter(t, o, root)

	appendStates(t, o, "exp", "a", outbox.StatusPending, outbox.StatusCreated)
	due := clock.Now().Add(time.Hour)
	tid, err := naming.NewRetryTimer("exp", "a", naming.Attempt(2), due)
	require.NoError(t, err)
	timer := outbox.RecordOf(tid)
	timer.Queue, timer.Status, timer.DueAt = testQueue, outbox.StatusCreated, due
	require.NoError(t, outbox.AppendAndWait(t.Context(), o, timer))
	did, err := naming.NewDispatch("exp", "a", naming.Attempt(1))
	require.NoError(t, err)
	delivery := outbox.DeliveryRecordOf(did, "1")
	delivery.Queue, delivery.Status = testQueue, outbox.StatusDone
	delivery.Delivery = outbox.DeliveryFields{RetryCount: 0, ExecutionCount: 1, HTTPStatus: 200, Latency: 1500 * time.Microsecond}
	require.NoError(t, outbox.AppendAndWait(t.Context(), o, delivery))
	clock.Advance(2 * time.Hour) // the next day
	appendStates(t, o, "exp", "b", outbox.StatusPending)

	st, err := e.ExportOnce(t.Context())
	require.NoError(t, err)
	require.Equal(t, pgbox.ExportStats{Batches: []int64{1}, Rows: [3]int64{3, 1, 1}}, st)
	src := e.Source()
	require.Regexp(t, `^[0-9a-f-]{36}$`, src)
	name := func(table, day string, batch int) string {
		return fmt.Sprintf("%s/created_date=%s/%s-%016d.parquet", table, day, src, batch)
	}
	require.Equal(t, []string{
		name("deliveries", "2026-03-01", 1),
		name("dispatch_outbox", "2026-03-01", 1),
		name("dispatch_outbox", "2026-03-02", 1),
		name("timers", "2026-03-01", 1),
	}, files(t, root))

	st, err = e.ExportOnce(t.Context())
	require.NoError(t, err)
	require.Equal(t, pgbox.ExportStats{}, st, "nothing new, no batch")

	appendStates(t, o, "exp", "c", outbox.StatusPending, outbox.StatusFailed)
	st, err = e.ExportOnce(t.Context())
	require.NoError(t, err)
	require.Equal(t, pgbox.ExportStats{Batches: []int64{2}, Rows: [3]int64{2, 0, 0}}, st)
	require.Contains(t, files(t, root), name("dispatch_outbox", "2026-03-02", 2))

	rows, history := exportedTree(t, root, "exp")
	require.Equal(t, [3]int64{5, 1, 1}, rows)
	want, err := o.Lookup(t.Context(), outbox.Query{RunID: "exp", History: true})
	require.NoError(t, err)
	require.Equal(t, want, history)
}

// A transaction held open across an export, whose rows come before rows
// that are exported, still has its rows exported once it commits: the
// exporter tracks unexported rows, not a sequence's high-water mark.
func TestExportTakesATransactionThatCommitsAfterALaterOne(t *testing.T) {
	t.Parallel()
	db := pgtest.Open(t)
	clock := clockwork.NewFakeClockAt(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	o := openSchema(t, db, "held", clock)
	root := t.TempDir()
	e := newExporter(t, o, root)
	writer := openSchema(t, db, "held", clock)

	tx, err := db.BeginTx(t.Context(), nil)
	require.NoError(t, err)
	defer tx.Rollback()
	_, err = tx.ExecContext(t.Context(), `INSERT INTO `+pgbox.TableNames(pgbox.Config{Schema: "held"})[0]+` (dispatch_id, version, cloud_task_id, queue, run_id, task_key,
		attempt, kind, status, error_code, create_calls, payload_sha256, processor_uuid, created_at, updated_at)
		VALUES ($1, 1, $2, $3, 'held', 'early', '1', 'dispatch', 'pending', '', 0, '', $4, $5, $5)`,
		"dispatch:held:early:1", mustCloudTaskID(t, "dispatch:held:early:1"), testQueue, writer.ProcessorUUID(), clock.Now())
	require.NoError(t, err)
	appendStates(t, writer, "held", "late", outbox.StatusPending) // a higher seq, committed first

	st, err := e.ExportOnce(t.Context())
	require.NoError(t, err)
	require.Equal(t, pgbox.ExportStats{Batches: []int64{1}, Rows: [3]int64{1, 0, 0}}, st)
	require.NoError(t, tx.Commit())
	st, err = e.ExportOnce(t.Context())
	require.NoError(t, err)
	require.Equal(t, pgbox.ExportStats{Batches: []int64{2}, Rows: [3]int64{1, 0, 0}}, st)

	rows, history := exportedTree(t, root, "held")
	require.Equal(t, [3]int64{2, 0, 0}, rows)
	var tasks []string
	for _, r := range history {
		tasks = append(tasks, r.TaskKey)
	}
	require.Equal(t, []string{"early", "late"}, tasks)
}

func mustCloudTaskID(t *testing.T, id string) string {
	t.Helper()
	c, err := naming.CloudTaskID(id)
	require.NoError(t, err)
	return c
}

// openSchema returns a migrated outbox in schema of db.
func openSchema(t *testing.T, db *sql.DB, schema string, clock clockwork.Clock) *pgbox.Outbox {
	t.Helper()
	o, err := pgbox.New(db, pgbox.Config{Schema: schema, Clock: clock})
	require.NoError(t, err)
	require.NoError(t, o.Migrate(t.Context()))
	return o
}

// Two exporters on one database, each running passes while records are
// appended, write every row exactly once between them.
func TestTwoExportersRacingExportEveryRowOnce(t *testing.T) {
	t.Parallel()
	const writers, ids = 4, 100
	dsn := pgtest.New(t)
	clock := clockwork.NewRealClock()
	root := t.TempDir()
	var boxes [2]*pgbox.Outbox
	var exporters [2]*pgbox.Exporter
	for i := range boxes {
		db, err := sql.Open("pgx", dsn)
		require.NoError(t, err)
		t.Cleanup(func() { db.Close() })
		boxes[i], err = pgbox.New(db, pgbox.Config{Schema: "racing", Clock: clock})
		require.NoError(t, err)
		require.NoError(t, boxes[i].Migrate(t.Context()))
		exporters[i] = newExporter(t, boxes[i], root)
	}

	var stop atomic.Bool
	var exporting sync.WaitGroup
	var batches [2][]int64
	for i, e := range exporters {
		exporting.Add(1)
		go func() {
			defer exporting.Done()
			for !stop.Load() {
				st, err := e.ExportOnce(t.Context())
				if err != nil {
					t.Errorf("exporter %d: %v", i, err)
					return
				}
				batches[i] = append(batches[i], st.Batches...)
			}
		}()
	}
	var writing sync.WaitGroup
	for w := range writers {
		writing.Add(1)
		go func() {
			defer writing.Done()
			for i := range ids {
				appendStates(t, boxes[w%2], "racing", fmt.Sprintf("w%d-%d", w, i), outbox.StatusPending, outbox.StatusCreated)
			}
		}()
	}
	writing.Wait()
	stop.Store(true)
	exporting.Wait()
	st, err := exporters[0].ExportOnce(t.Context())
	require.NoError(t, err)
	batches[0] = append(batches[0], st.Batches...)

	all := append(append([]int64(nil), batches[0]...), batches[1]...)
	seen := map[int64]bool{}
	for _, b := range all {
		require.False(t, seen[b], "batch %d written twice", b)
		seen[b] = true
	}
	require.NotEmpty(t, batches[0])
	require.NotEmpty(t, batches[1], "both exporters wrote batches")
	rows, history := exportedTree(t, root, "racing")
	require.Equal(t, [3]int64{2 * writers * ids, 0, 0}, rows, "every row once across the files")
	want, err := boxes[0].Lookup(t.Context(), outbox.Query{RunID: "racing", History: true})
	require.NoError(t, err)
	require.Len(t, want, 2*writers*ids)
	require.Equal(t, want, history)
}

// An exporter that died with a batch claimed, or written but not marked
// so, leaves it to the next exporter once its lease expires; that one
// writes the same rows under the same names (the same bytes), and the
// first, back, finds the batch taken and writes nothing.
func TestExportRerunAfterACrashRewritesTheSameFiles(t *testing.T) {
	t.Parallel()
	db := pgtest.Open(t)
	clock := clockwork.NewFakeClockAt(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	o := openSchema(t, db, "crash", clock)
	root := t.TempDir()
	first, second := newExporter(t, o, root), newExporter(t, o, root)
	for i := range 20 {
		appendStates(t, o, "crash", fmt.Sprintf("t%d", i), outbox.StatusPending, outbox.StatusCreated)
	}
	st, err := first.ExportOnce(t.Context())
	require.NoError(t, err)
	require.Equal(t, []int64{1}, st.Batches)
	written := files(t, root)
	require.Len(t, written, 1)
	before, err := os.ReadFile(filepath.Join(root, written[0]))
	require.NoError(t, err)
	// The crash: the files are written, the batch is not marked so.
	const et = `"crash"."ctdispatch_export_batches"`
	_, err = db.ExecContext(t.Context(), `UPDATE `+et+` SET written_at = NULL WHERE batch = 1`)
	require.NoError(t, err)

	st, err = second.ExportOnce(t.Context())
	require.NoError(t, err)
	require.Equal(t, pgbox.ExportStats{}, st, "the lease still holds")
	clock.Advance(pgbox.DefaultExportLease)
	st, err = second.ExportOnce(t.Context())
	require.NoError(t, err)
	require.Equal(t, pgbox.ExportStats{Batches: []int64{1}, Rows: [3]int64{40, 0, 0}}, st)
	require.Equal(t, written, files(t, root))
	after, err := os.ReadFile(filepath.Join(root, written[0]))
	require.NoError(t, err)
	require.Equal(t, before, after)
	rows, _ := exportedTree(t, root, "crash")
	require.Equal(t, [3]int64{40, 0, 0}, rows)

	var writtenAt sql.NullTime
	require.NoError(t, db.QueryRowContext(t.Context(), `SELECT written_at FROM `+et+` WHERE batch = 1`).Scan(&writtenAt))
	require.True(t, writtenAt.Valid)
	st, err = first.ExportOnce(t.Context())
	require.NoError(t, err)
	require.Equal(t, pgbox.ExportStats{}, st)
}

// With the tree published as Iceberg tables (parquetbox.PublicationKey),
// a batch taken over after a crash writes nothing over: the file its first
// write left is kept as it is (the same file, not one written again under
// its name), and once a compaction folded that file in and the publisher
// removed it, the batch taken over again brings no row back.
func TestExportRerunOfAPublishedTreeWritesNothingOver(t *testing.T) {
	t.Parallel()
	db := pgtest.Open(t)
	clock := clockwork.NewFakeClockAt(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	o := openSchema(t, db, "published", clock)
	root := t.TempDir()
	pq, err := parquetbox.Open(t.Context(), parquetbox.Config{Root: root, ReadOnly: true, RefreshInterval: -1, Clock: clock})
	require.NoError(t, err)
	defer pq.Close()
	created, err := pq.CreateRootObject(t.Context(), parquetbox.PublicationKey, []byte(`{}`))
	require.NoError(t, err)
	require.True(t, created)
	first, second := newExporter(t, o, root), newExporter(t, o, root)
	for i := range 20 {
		appendStates(t, o, "pub", fmt.Sprintf("t%d", i), outbox.StatusPending, outbox.StatusCreated)
	}
	st, err := first.ExportOnce(t.Context())
	require.NoError(t, err)
	require.Equal(t, []int64{1}, st.Batches)
	written := files(t, root)
	require.Len(t, written, 1)
	before, err := os.Stat(filepath.Join(root, written[0]))
	require.NoError(t, err)
	const et = `"published"."ctdispatch_export_batches"`
	crash := func() {
		t.Helper()
		_, err := db.ExecContext(t.Context(), `UPDATE `+et+` SET written_at = NULL WHERE batch = 1`)
		require.NoError(t, err)
		clock.Advance(pgbox.DefaultExportLease)
	}

	crash()
	st, err = second.ExportOnce(t.Context())
	require.NoError(t, err)
	require.Equal(t, pgbox.ExportStats{Batches: []int64{1}, Rows: [3]int64{40, 0, 0}}, st)
	require.Equal(t, written, files(t, root))
	after, err := os.Stat(filepath.Join(root, written[0]))
	require.NoError(t, err)
	require.True(t, os.SameFile(before, after), "the file is the one first written")
	require.Equal(t, before.ModTime(), after.ModTime())

	require.NoError(t, pq.Compact(t.Context(), parquetbox.CompactConfig{Full: true}))
	require.Len(t, files(t, root), 2, "the folded file stays while the tree is published")
	name := strings.TrimPrefix(written[0], string(outbox.TableDispatch)+"/")
	require.NoError(t, pq.RemoveReplaced(t.Context(), outbox.TableDispatch, []string{name}))
	output := files(t, root)
	require.Len(t, output, 1)
	require.NotEqual(t, written, output)
	crash()
	st, err = first.ExportOnce(t.Context())
	require.NoError(t, err)
	require.Equal(t, []int64{1}, st.Batches)
	require.Equal(t, output, files(t, root), "the batch's file is not written again")
	rows, history := exportedTree(t, root, "pub")
	require.Equal(t, [3]int64{20, 0, 0}, rows, "one row per ID, none twice")
	require.Len(t, history, 20)
}

// Bad export options are refused with the field, the value and the rule.
func TestExportOptionsAreChecked(t *testing.T) {
	t.Parallel()
	o, err := pgbox.New(&sql.DB{}, pgbox.Config{})
	require.NoError(t, err)
	for _, c := range []struct {
		opts  pgbox.ExportConfig
		field string
	}{
		{pgbox.ExportConfig{}, "ExportConfig.Root"},
		{pgbox.ExportConfig{Root: "x"}, "ExportConfig.Open"},
		{pgbox.ExportConfig{Root: "x", Open: parquetTables, Interval: time.Millisecond}, "ExportConfig.Interval"},
		{pgbox.ExportConfig{Root: "x", Open: parquetTables, BatchRows: -1}, "ExportConfig.BatchRows"},
		{pgbox.ExportConfig{Root: "x", Open: parquetTables, Lease: time.Millisecond}, "ExportConfig.Lease"},
	} {
		_, err := pgbox.NewExporter(o, c.opts)
		var ce *pgbox.ConfigError
		require.ErrorAs(t, err, &ce, c.field)
		require.Equal(t, c.field, ce.Field)
	}
	_, err = pgbox.New(&sql.DB{}, pgbox.Config{Export: pgbox.ExportConfig{Interval: time.Minute}})
	var ce *pgbox.ConfigError
	require.ErrorAs(t, err, &ce)
	require.Equal(t, "Config.Export.Root", ce.Field)
}

// The exporter opens its tables through ExportConfig.Open at its first
// pass, again at the next pass when that failed (the error names Root),
// and never again once it has them; Close closes what Open returned.
func TestExportOpensItsTablesThroughOpen(t *testing.T) {
	t.Parallel()
	o := openIn(t, pgtest.Open(t), clockwork.NewFakeClockAt(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)))
	root := t.TempDir()
	var opened []*closeCounter
	fail := errors.New("bucket unreachable")
	e, err := pgbox.NewExporter(o, pgbox.ExportConfig{Root: root, Open: func(ctx context.Context, at string) (outbox.RunWriter, error) {
		require.Equal(t, root, at)
		if len(opened) == 0 {
			opened = append(opened, nil)
			return nil, fail
		}
		files, err := parquetTables(ctx, at)
		if err != nil {
			return nil, err
		}
		opened = append(opened, &closeCounter{RunWriter: files})
		return opened[len(opened)-1], nil
	}})
	require.NoError(t, err)

	_, err = e.ExportOnce(t.Context())
	require.ErrorIs(t, err, fail)
	require.EqualError(t, err, "pgbox: export: open "+root+": bucket unreachable")
	appendStates(t, o, "open", "a", outbox.StatusPending)
	for range 2 {
		_, err = e.ExportOnce(t.Context())
		require.NoError(t, err)
	}
	require.Len(t, opened, 2, "a failed open, then one that served both passes")
	rows, _ := exportedTree(t, root, "open")
	require.Equal(t, [3]int64{1, 0, 0}, rows)
	require.NoError(t, e.Close())
	require.Equal(t, 1, opened[1].closed)
}

// closeCounter counts the Close calls of the tables it wraps.
type closeCounter struct {
	outbox.RunWriter
	closed int
}

func (c *closeCounter) Close() error {
	c.closed++
	return c.RunWriter.Close()
}

// Config.Export runs an exporter inside the outbox: its first pass at
// New, then one every Interval; Flush exports what is left, and Close
// stops it.
func TestOptionsExportRunsInsideTheOutbox(t *testing.T) {
	t.Parallel()
	db := pgtest.Open(t)
	clock := clockwork.NewFakeClockAt(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	openSchema(t, db, "inside", clock)
	root := t.TempDir()
	o, err := pgbox.New(db, pgbox.Config{Schema: "inside", Clock: clock, Export: pgbox.ExportConfig{Root: root, Open: parquetTables, Interval: time.Minute}})
	require.NoError(t, err)
	t.Cleanup(func() { o.Close() })
	require.NoError(t, clock.BlockUntilContext(t.Context(), 1), "the first pass is done; Run waits for the interval")

	appendStates(t, o, "inside", "a", outbox.StatusPending, outbox.StatusCreated)
	clock.Advance(time.Minute)
	require.NoError(t, clock.BlockUntilContext(t.Context(), 1), "the second pass is done")
	rows, _ := exportedTree(t, root, "inside")
	require.Equal(t, [3]int64{2, 0, 0}, rows, "the interval's pass exported both states")

	appendStates(t, o, "inside", "b", outbox.StatusPending)
	require.NoError(t, o.Flush(t.Context()))
	rows, _ = exportedTree(t, root, "inside")
	require.Equal(t, [3]int64{3, 0, 0}, rows, "Flush exported the rest")
	require.NoError(t, o.Close())
	require.NoError(t, o.Close(), "Close may be called again")
}

// The exported files are runs like any other: a compaction folds them to
// the latest state of each ID, and reads answer the same before and after.
func TestExportedFilesAreCompactedLikeOtherRuns(t *testing.T) {
	t.Parallel()
	db := pgtest.Open(t)
	clock := clockwork.NewFakeClockAt(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	o := openIn(t, db, clock)
	root := t.TempDir()
	e := newExporter(t, o, root)
	// Six batches: each dispatches a task and answers the one before.
	for i := range 6 {
		appendStates(t, o, "fold", fmt.Sprintf("t%d", i), outbox.StatusPending)
		if i > 0 {
			id, err := naming.NewDispatch("fold", fmt.Sprintf("t%d", i-1), naming.Attempt(1))
			require.NoError(t, err)
			r := outbox.RecordOf(id)
			r.Queue, r.Status, r.Version = testQueue, outbox.StatusCreated, 2
			require.NoError(t, outbox.AppendAndWait(t.Context(), o, r))
		}
		st, err := e.ExportOnce(t.Context())
		require.NoError(t, err)
		require.Len(t, st.Batches, 1)
	}
	require.Len(t, files(t, root), 6)
	pq, err := parquetbox.Open(t.Context(), parquetbox.Config{Root: root, ReadOnly: true, RefreshInterval: -1, Clock: clock})
	require.NoError(t, err)
	defer pq.Close()
	before, err := pq.Lookup(t.Context(), outbox.Query{RunID: "fold"})
	require.NoError(t, err)
	want, err := o.Lookup(t.Context(), outbox.Query{RunID: "fold"})
	require.NoError(t, err)
	require.Equal(t, want, before)

	var actions []parquetbox.UnitAction
	trace := &parquetbox.CompactTrace{Unit: func(tb outbox.Table, p parquetbox.UnitCompaction) {
		if tb == outbox.TableDispatch {
			actions = append(actions, p.Action)
		}
	}}
	require.NoError(t, pq.Compact(t.Context(), parquetbox.CompactConfig{Full: true, Trace: trace}))
	require.Equal(t, []parquetbox.UnitAction{parquetbox.UnitCompacted}, actions)
	require.Len(t, files(t, root), 1, "six runs folded into one file")
	rows, after := exportedTree(t, root, "fold")
	require.Equal(t, [3]int64{6, 0, 0}, rows, "one row per ID")
	require.Equal(t, want, after)
}

// A pass goes on while its batches are full: BatchRows bounds a batch,
// not what a pass exports.
func TestExportWritesFullBatchesUntilOneIsNot(t *testing.T) {
	t.Parallel()
	db := pgtest.Open(t)
	clock := clockwork.NewFakeClockAt(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	o := openIn(t, db, clock)
	root := t.TempDir()
	e, err := pgbox.NewExporter(o, pgbox.ExportConfig{Root: root, Open: parquetTables, BatchRows: 3})
	require.NoError(t, err)
	t.Cleanup(func() { e.Close() })
	for i := range 7 {
		appendStates(t, o, "full", fmt.Sprintf("t%d", i), outbox.StatusPending)
	}
	st, err := e.ExportOnce(t.Context())
	require.NoError(t, err)
	require.Equal(t, pgbox.ExportStats{Batches: []int64{1, 2, 3}, Rows: [3]int64{7, 0, 0}}, st)
	rows, _ := exportedTree(t, root, "full")
	require.Equal(t, [3]int64{7, 0, 0}, rows)
}

// Two exporters running on one database write about one batch per
// interval between them, not one each: a pass claims no new batch when
// another exporter claimed one within half the interval. Here B wakes 10 s
// after A, every minute; the rows B finds go out with A's next batch.
func TestRunningExportersShareOneBatchPerInterval(t *testing.T) {
	t.Parallel()
	db := pgtest.Open(t)
	clock := clockwork.NewFakeClockAt(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	o := openSchema(t, db, "spaced", clock)
	root := t.TempDir()
	ctx, cancel := context.WithCancel(t.Context())
	var running sync.WaitGroup
	start := func() {
		e, err := pgbox.NewExporter(o, pgbox.ExportConfig{Root: root, Open: parquetTables, Interval: time.Minute})
		require.NoError(t, err)
		running.Add(1)
		go func() {
			defer running.Done()
			assert.NoError(t, e.Run(ctx))
			assert.NoError(t, e.Close())
		}()
	}
	t.Cleanup(func() {
		cancel()
		running.Wait()
	})
	written := func() (batches, unexported int) {
		require.NoError(t, db.QueryRowContext(t.Context(), `SELECT count(*) FROM "spaced"."ctdispatch_export_batches" WHERE written_at IS NOT NULL`).Scan(&batches))
		require.NoError(t, db.QueryRowContext(t.Context(), `SELECT count(*) FROM "spaced"."ctdispatch_dispatch_outbox" WHERE export_batch IS NULL`).Scan(&unexported))
		return batches, unexported
	}
	step := func(d time.Duration) {
		clock.Advance(d)
		require.NoError(t, clock.BlockUntilContext(t.Context(), 2), "both passes are done")
	}

	start() // A, at 0 s
	require.NoError(t, clock.BlockUntilContext(t.Context(), 1))
	clock.Advance(10 * time.Second)
	start() // B, at 10 s
	require.NoError(t, clock.BlockUntilContext(t.Context(), 2))
	appendStates(t, o, "spaced", "a", outbox.StatusPending)
	step(50 * time.Second) // 60 s: A exports a
	b, u := written()
	require.Equal(t, [2]int{1, 0}, [2]int{b, u})
	appendStates(t, o, "spaced", "b", outbox.StatusPending)
	step(10 * time.Second) // 70 s: B finds A's batch 10 s old
	b, u = written()
	require.Equal(t, [2]int{1, 1}, [2]int{b, u}, "B claimed nothing")
	step(50 * time.Second) // 120 s: A exports b
	b, u = written()
	require.Equal(t, [2]int{2, 0}, [2]int{b, u})
	rows, _ := exportedTree(t, root, "spaced")
	require.Equal(t, [3]int64{2, 0, 0}, rows)
}

// schemaFiles lists the tables' schema files under root, relative to it.
func schemaFiles(t *testing.T, root string) []string {
	t.Helper()
	var out []string
	for _, table := range outbox.Tables() {
		p := filepath.Join(string(table), "created_date=1970-01-01", "_schema", "empty.parquet")
		if _, err := os.Stat(filepath.Join(root, p)); err == nil {
			out = append(out, p)
		}
	}
	return out
}

// The exported tree carries the schema file of every table, as a
// dispatcher's own root does, from the exporter's first pass (nothing to
// export yet) on; the readers still count no row of them.
func TestExportedTreeHasEveryTablesSchemaFile(t *testing.T) {
	t.Parallel()
	db := pgtest.Open(t)
	clock := clockwork.NewFakeClockAt(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	o := openIn(t, db, clock)
	root := t.TempDir()
	e := newExporter(t, o, root)
	st, err := e.ExportOnce(t.Context())
	require.NoError(t, err)
	require.Equal(t, pgbox.ExportStats{}, st)
	want := []string{
		"dispatch_outbox/created_date=1970-01-01/_schema/empty.parquet",
		"timers/created_date=1970-01-01/_schema/empty.parquet",
		"deliveries/created_date=1970-01-01/_schema/empty.parquet",
	}
	require.Equal(t, want, schemaFiles(t, root), "before any row is exported")

	appendStates(t, o, "exp", "a", outbox.StatusPending, outbox.StatusCreated)
	st, err = e.ExportOnce(t.Context())
	require.NoError(t, err)
	require.Equal(t, pgbox.ExportStats{Batches: []int64{1}, Rows: [3]int64{2, 0, 0}}, st)
	require.Equal(t, want, schemaFiles(t, root))
	rows, _ := exportedTree(t, root, "exp")
	require.Equal(t, [3]int64{2, 0, 0}, rows, "the schema files add no row")
}

// duckDB runs SQL statements in DuckDB (see package duckdbtest).
var duckDB = duckdbtest.Query

// docsDuckDBStatements returns the DuckDB statements of docs/outbox.md
// with both documented roots replaced by root: an export holds all three
// tables.
func docsDuckDBStatements(t *testing.T, root string) []string {
	return duckdbtest.DocsStatements(t, root, root)
}

// The docs' DuckDB queries run on an exported tree whose rows are all in
// dispatch_outbox: those that read timers or deliveries answer from
// their schema files (no rows) instead of failing with "No files found".
// The dispatch has the history of a relay resumed after its claim expired
// (pending, already_existed by the relay that took over, then created by
// the resumed one): the per-ID queries still see one latest state,
// created.
func TestDuckDBDocsQueriesOnAnExportWithOnlyDispatches(t *testing.T) {
	t.Parallel()
	db := pgtest.Open(t)
	clock := clockwork.NewFakeClockAt(time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC))
	o := openIn(t, db, clock)
	id, err := naming.NewDispatch("run1", "extract", naming.Attempt(1))
	require.NoError(t, err)
	r := outbox.RecordOf(id)
	r.Queue = testQueue
	for i, status := range []outbox.Status{outbox.StatusPending, outbox.StatusAlreadyExisted, outbox.StatusCreated} {
		r.Status, r.Version = status, int64(i+1)
		require.NoError(t, outbox.AppendAndWait(t.Context(), o, r))
	}
	root := t.TempDir()
	st, err := newExporter(t, o, root).ExportOnce(t.Context())
	require.NoError(t, err)
	require.Equal(t, [3]int64{3, 0, 0}, st.Rows)

	stmts := docsDuckDBStatements(t, root)
	require.Len(t, stmts, 8, "docs/outbox.md's DuckDB statements")
	var counts []int
	var results [][]map[string]any
	for i, got := range duckDB(t, stmts...) {
		var rows []map[string]any
		require.NoError(t, json.Unmarshal([]byte(got), &rows), "statement %d: %s", i, got)
		counts = append(counts, len(rows))
		results = append(results, rows)
	}
	require.Equal(t, []int{
		3, // every state of dispatch:run1:extract:1
		1, // latest state per ID on 2026-11-23: one status
		1, // rows per partition: one day (the schema files' 1970-01-01 holds none)
		1, // the trace of the dispatch's latest state, with no delivery (deliveries/**)
		0, // the rows of a trace the export does not hold
		1, // run1's dispatches with their deliveries: one, none delivered (deliveries/**)
		1, // how often each was delivered: 0
		0, // timers and their deliveries (timers/**, deliveries/**)
	}, counts)
	require.Equal(t, "created", results[1][0]["status"], "the latest of two outcomes")
	require.Equal(t, "created", results[5][0]["dispatched"])
}
