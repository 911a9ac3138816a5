package parquetbox

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"syscall"
	"testing"
	"time"

	"github.com/ctdispatch/ctdispatch/outbox"

	"github.com/parquet-go/parquet-go"
	"github.com/stretchr/testify/require"
)

var update = flag.Bool("update", false, "rewrite the files under testdata/")

// Rows of dispatch_outbox files whose columns have types other than the
// table schema's. Each holds one row for dispatch:foreign:t:1.
type (
	int32Status struct {
		DispatchID string `parquet:"dispatch_id"`
		Status     int32  `parquet:"status"`
	}
	int32CloudTaskID struct {
		DispatchID  string `parquet:"dispatch_id"`
		CloudTaskID int32  `parquet:"cloud_task_id"`
		Status      string `parquet:"status"`
	}
	int64ID struct {
		DispatchID int64  `parquet:"dispatch_id"`
		Status     string `parquet:"status"`
	}
	stringTime struct {
		DispatchID string `parquet:"dispatch_id"`
		UpdatedAt  string `parquet:"updated_at"`
	}
	floatCalls struct {
		DispatchID  string  `parquet:"dispatch_id"`
		CreateCalls float64 `parquet:"create_calls"`
	}
	repeatedStatus struct {
		DispatchID string   `parquet:"dispatch_id"`
		Status     []string `parquet:"status"`
	}
	dateCreated struct {
		DispatchID string    `parquet:"dispatch_id"`
		CreatedAt  time.Time `parquet:"created_at,date"`
	}
)

// foreignTypeFiles are the files of TestForeignColumnTypes, with the reason
// each must be skipped for. They are kept under testdata/foreign (rewrite
// them with -update).
var foreignTypeFiles = []struct {
	name   string
	write  func(*bytes.Buffer) error
	reason string
}{
	{"int32_status.parquet", func(b *bytes.Buffer) error {
		return parquet.Write(b, []int32Status{{"dispatch:foreign:t:1", 7}})
	}, "column status is INT32 (INT(32,true)); want BYTE_ARRAY (STRING)"},
	{"int32_cloud_task_id.parquet", func(b *bytes.Buffer) error {
		return parquet.Write(b, []int32CloudTaskID{{"dispatch:foreign:t:1", 7, "created"}})
	}, "column cloud_task_id is INT32 (INT(32,true)); want BYTE_ARRAY (STRING)"},
	{"int64_id.parquet", func(b *bytes.Buffer) error {
		return parquet.Write(b, []int64ID{{42, "created"}})
	}, "column dispatch_id is INT64 (INT(64,true)); want BYTE_ARRAY (STRING)"},
	{"string_time.parquet", func(b *bytes.Buffer) error {
		return parquet.Write(b, []stringTime{{"dispatch:foreign:t:1", "2026-03-01"}})
	}, "column updated_at is BYTE_ARRAY (STRING); want INT64 (TIMESTAMP)"},
	{"float_calls.parquet", func(b *bytes.Buffer) error {
		return parquet.Write(b, []floatCalls{{"dispatch:foreign:t:1", 1.5}})
	}, "column create_calls is DOUBLE; want INT32 or INT64"},
	{"repeated_status.parquet", func(b *bytes.Buffer) error {
		return parquet.Write(b, []repeatedStatus{{"dispatch:foreign:t:1", []string{"created", "failed"}}})
	}, "column status is repeated BYTE_ARRAY (STRING); a repeated column; want one value per row"},
	{"date_created.parquet", func(b *bytes.Buffer) error {
		return parquet.Write(b, []dateCreated{{"dispatch:foreign:t:1", t0}})
	}, "column created_at is INT32 (DATE); want INT64 (TIMESTAMP)"},
}

// A file whose columns have other types than the table's is foreign:
// every reader skips it, names it with the reason, and goes on; none
// crashes (an INT32 status used to panic in every command).
func TestForeignColumnTypes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	rec := dispatchRec("r", "t", "1", outbox.StatusPending)
	o, dir := b.openWith(t, rec)
	want := map[string]string{}
	for _, f := range foreignTypeFiles {
		path := filepath.Join("testdata", "foreign", f.name)
		if *update {
			var buf bytes.Buffer
			require.NoError(t, f.write(&buf))
			require.NoError(t, os.WriteFile(path, buf.Bytes(), 0o644))
		}
		data, err := os.ReadFile(path)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dir, f.name), data, 0o600))
		want[f.name] = f.reason
	}
	b.clock.Advance(time.Hour)

	reported := func(skipped []*FileError) map[string]string {
		got := map[string]string{}
		for _, fe := range skipped {
			require.ErrorIs(t, fe, ErrForeignFile)
			require.NotErrorIs(t, fe, ErrDamaged)
			got[filepath.Base(fe.Path)] = fe.Reason
		}
		return got
	}
	st, err := o.Stats(ctx)
	require.NoError(t, err)
	require.Equal(t, want, reported(st[0].Skipped))
	require.Equal(t, int64(1), st[0].IDs)

	got, ok, err := o.Latest(ctx, outbox.TableDispatch, "dispatch:foreign:t:1")
	require.NoError(t, err)
	require.False(t, ok)
	byID, err := o.Lookup(ctx, outbox.Query{ID: rec.ID})
	require.NoError(t, err)
	require.Len(t, byID, 1)
	require.Equal(t, outbox.Record{}, got)
	pending, err := o.Pending(ctx, outbox.TableDispatch, time.Minute)
	require.NoError(t, err)
	require.Len(t, pending, 1)
	require.Equal(t, rec.ID, pending[0].ID)

	cs, err := o.compact(ctx, CompactConfig{Tables: []outbox.Table{outbox.TableDispatch}, Full: true})
	require.NoError(t, err)
	require.Equal(t, want, reported(fileErrors(cs.Tables[0].Skipped)))
	require.Equal(t, int64(1), cs.Tables[0].RowsOut)
	for name := range want {
		require.FileExists(t, filepath.Join(dir, name), "a foreign file is never removed")
	}
	require.Equal(t, want, reported(o.Damaged()))
	require.Equal(t, 1, countLines(b.logs.String(), "int32_status.parquet"), "each skipped file is logged once")
}

func countLines(s, sub string) int {
	n := 0
	for _, l := range bytes.Split([]byte(s), []byte("\n")) {
		if bytes.Contains(l, []byte(sub)) {
			n++
		}
	}
	return n
}

// bareRow is what a person or another program might add by hand: an ID
// and a status, nothing else.
type bareRow struct {
	DispatchID string `parquet:"dispatch_id"`
	Status     string `parquet:"status"`
}

// A row whose cloud_task_id is not its ID's hash is not a record of this
// system: it never answers Latest, Lookup or Pending (so it cannot make a
// Dispatch skip its CreateTask, nor hide a real pending state), and
// compaction leaves it out of its output and its file in place.
func TestForeignRowsAreNeverTrusted(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	real := dispatchRec("r", "real", "1", outbox.StatusPending)
	o, dir := b.openWith(t, real)

	var buf bytes.Buffer
	require.NoError(t, parquet.Write(&buf, []bareRow{{"dispatch:r:bare:1", "created"}, {real.ID, "created"}}))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "bare.parquet"), buf.Bytes(), 0o600))
	copyTestdata(t, b.root, outbox.TableDispatch, "duckdb_foreign_rows.parquet")
	b.clock.Advance(time.Hour)

	for _, id := range []string{"dispatch:r:bare:1", duckRecord(1).ID} {
		_, ok, err := o.Latest(ctx, outbox.TableDispatch, id)
		require.NoError(t, err)
		require.False(t, ok, "%s must not look recorded", id)
		got, err := o.Lookup(ctx, outbox.Query{ID: id, History: true})
		require.NoError(t, err)
		require.Empty(t, got)
	}
	got, ok, err := o.Latest(ctx, outbox.TableDispatch, real.ID)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, outbox.StatusPending, got.Status)
	pending, err := o.Pending(ctx, outbox.TableDispatch, time.Minute)
	require.NoError(t, err)
	require.Len(t, pending, 1, "a foreign created row must not hide a real pending state")
	require.Equal(t, real.ID, pending[0].ID)

	st, err := o.Stats(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(1), st[0].IDs)
	require.Equal(t, int64(2002), st[0].ForeignRows)
	require.Equal(t, map[string]int64{"pending": 1}, st[0].ByStatus)

	cs, err := o.compact(ctx, CompactConfig{Tables: []outbox.Table{outbox.TableDispatch}, Full: true})
	require.NoError(t, err)
	tc := cs.Tables[0]
	require.Equal(t, int64(1), tc.RowsOut)
	require.Equal(t, int64(2002), tc.ForeignRows)
	var kept []string
	for _, k := range tc.Kept {
		kept = append(kept, filepath.Base(k))
	}
	sort.Strings(kept)
	require.Equal(t, []string{"bare.parquet", "duckdb_foreign_rows.parquet"}, kept)
	out, err := openLocalParquet(tc.Output, outbox.TableDispatch)
	require.NoError(t, err)
	defer out.close()
	var ids []string
	require.NoError(t, out.scan(func(r outbox.Record) error { ids = append(ids, r.ID); return nil }))
	require.Equal(t, []string{real.ID}, ids)
}

// Append fills in an empty cloud_task_id and refuses a wrong one, so this
// process never writes what its readers would refuse.
func TestAppendChecksCloudTaskID(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	o := b.open(t, procA)
	r := dispatchRec("r", "t", "1", outbox.StatusCreated)
	r.CloudTaskID = ""
	require.NoError(t, outbox.AppendAndWait(ctx, o, r))
	got, ok, err := o.Latest(ctx, outbox.TableDispatch, r.ID)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, mustHash(r.ID), got.CloudTaskID)

	r.CloudTaskID = "d_made_up"
	err = outbox.AppendAndWait(ctx, o, r)
	require.ErrorIs(t, err, outbox.ErrForeignRecord)
	require.ErrorIs(t, err, ErrForeignRecord, "the deprecated name is the same error")
	require.EqualError(t, err, `outbox: foreign record: cloud_task_id "d_made_up" of dispatch:r:t:1 is not the Cloud Tasks ID of that ID (want "`+mustHash(r.ID)+`")`)
	r.Table = outbox.TableTimers
	r.CloudTaskID = ""
	require.EqualError(t, outbox.AppendAndWait(ctx, o, r), `outbox: foreign record: ID "dispatch:r:t:1" does not belong in table timers`)
}

// A named pipe named like a table file or a log segment is skipped and
// reported; opening it would block every reader until a writer came.
func TestNamedPipesAreNotOpened(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	o, dir := b.openWith(t, dispatchRec("r", "t", "1", outbox.StatusCreated))
	fifo := filepath.Join(dir, "x.parquet")
	require.NoError(t, syscall.Mkfifo(fifo, 0o600))
	require.NoError(t, syscall.Mkfifo(filepath.Join(b.root, walDirName, procB+"-0000000000000001.wal"), 0o600))

	done := make(chan error, 1)
	var st []TableStats
	go func() {
		var err error
		st, err = o.Stats(ctx)
		if err == nil {
			_, err = o.Lookup(ctx, outbox.Query{RunID: "r"})
		}
		if err == nil {
			o2, err2 := Open(ctx, b.options(procB))
			if err2 == nil {
				err2 = o2.Close()
			}
			err = err2
		}
		done <- err
	}()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(time.Minute):
		t.Fatal("a named pipe blocked the readers")
	}
	require.Equal(t, int64(1), st[0].IDs)
	require.Len(t, st[0].Skipped, 1)
	require.Equal(t, fifo, st[0].Skipped[0].Path)
	require.Equal(t, "not a regular file (mode p---------); only regular files are read", st[0].Skipped[0].Reason)
	require.ErrorIs(t, st[0].Skipped[0], ErrForeignFile)
}

// A cancelled context never enqueues: the select between a free buffer
// slot and ctx.Done() used to pick either, so some cancelled AppendAsync
// calls were written anyway. Many tries make a random choice show.
func TestAppendAsyncOnCancelledContextNeverWrites(t *testing.T) {
	t.Parallel()
	b := setup(t)
	o := b.open(t, procA)
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	for i := range 500 {
		r := dispatchRec("cancelled", "t", string(rune('a'+i%26))+string(rune('a'+i/26)), outbox.StatusCreated)
		err := o.Append(cancelled, r, nil)
		require.True(t, errors.Is(err, context.Canceled), "try %d: %v", i, err)
		require.ErrorIs(t, outbox.AppendAndWait(cancelled, o, r), context.Canceled)
	}
	ctx := context.Background()
	require.NoError(t, o.Flush(ctx))
	got, err := o.Lookup(ctx, outbox.Query{RunID: "cancelled"})
	require.NoError(t, err)
	require.Empty(t, got)
}

// A file whose last bytes claim a footer longer than the file is damaged,
// and refused before the Parquet library allocates the claimed length (4
// GiB here, from 18 bytes; the fuzz target found it).
func TestFooterLongerThanTheFile(t *testing.T) {
	t.Parallel()
	data := []byte("PAR1\x15\x06\x152\x152\xf0\xff\xff\xffPAR1")
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err := openParquet("bomb.parquet", outbox.TableDispatch, nopCloser{bytes.NewReader(data)}, int64(len(data)))
	runtime.ReadMemStats(&after)
	require.ErrorIs(t, err, ErrDamaged)
	require.EqualError(t, err, "outbox: bomb.parquet: not a readable Parquet file: outbox: damaged file: footer of 4294967280 bytes in a file of 18 bytes")
	require.Less(t, after.TotalAlloc-before.TotalAlloc, uint64(1<<20), "bytes allocated")
}
