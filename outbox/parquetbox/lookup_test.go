package parquetbox

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ctdispatch/ctdispatch/outbox"

	"github.com/stretchr/testify/require"

	"github.com/ctdispatch/ctdispatch/naming"
	"github.com/ctdispatch/ctdispatch/outbox/internal/pqtable"
)

// countingFile counts the bytes read through it.
type countingFile struct {
	*os.File
	n atomic.Int64
}

func (c *countingFile) ReadAt(p []byte, off int64) (int, error) {
	n, err := c.File.ReadAt(p, off)
	c.n.Add(int64(n))
	return n, err
}

func TestLookupReadsASmallFractionOfTheFile(t *testing.T) {
	t.Parallel()
	const rows = 150_000
	recs := make([]outbox.Record, 0, rows)
	for i := range rows {
		r := dispatchRec(fmt.Sprintf("run%d", i/1000), fmt.Sprintf("task%d", i%1000), "1", outbox.StatusCreated)
		r.CloudTaskID = fmt.Sprintf("d_%026x", uint64(i)*0x9E3779B97F4A7C15)
		r.PayloadSHA256 = fmt.Sprintf("%064x", uint64(i)*0x9E3779B97F4A7C15)
		r.CreatedAt, r.UpdatedAt = t0, t0
		recs = append(recs, r)
	}
	sortRecords(recs)
	path := filepath.Join(t.TempDir(), "big.parquet")
	require.NoError(t, writeParquet(path, outbox.TableDispatch, recs))

	for _, tc := range []struct {
		name  string
		fld   field
		value string
		hits  int
		max   float64 // fraction of the file's bytes
	}{
		// A hit reads the footer, one page of the ID column and one page of
		// each column for the row: a fixed cost, so the fraction shrinks as
		// the file grows (0.10% of a 5M-row file; see TestLookupLargeFile).
		{"hit by ID", fieldID, "dispatch:run123:task456:1", 1, 0.03},
		{"miss by ID", fieldID, "dispatch:run123:task456:2", 0, 0.005},
		{"hit by run", fieldRunID, "run77", 1000, 0.03},
	} {
		f, err := os.Open(path)
		require.NoError(t, err)
		st, _ := f.Stat()
		cf := &countingFile{File: f}
		p, err := openParquet(path, outbox.TableDispatch, cf, st.Size())
		require.NoError(t, err)
		got, err := p.find(tc.fld, tc.value, pqtable.FindOptions{})
		require.NoError(t, err)
		require.Len(t, got, tc.hits, tc.name)
		frac := float64(cf.n.Load()) / float64(st.Size())
		t.Logf("%s: read %d of %d bytes (%.2f%%)", tc.name, cf.n.Load(), st.Size(), 100*frac)
		require.Less(t, frac, tc.max, tc.name)
		p.close()
	}
}

// TestLookupLargeFile measures the bytes a lookup reads in a large file,
// such as the output of gendata + compact (see the README):
//
//	CTDISPATCH_LOOKUP_FILE=/tmp/ob5m/dispatch_outbox/compacted-….parquet go test -run LookupLargeFile -v ./outbox/
//
// A lookup by cloud_task_id reads a whole column chunk of each row group
// its bloom filter admits, so what one ID costs depends on its false
// positives; the test also reports the spread over a sample of gendata's IDs.
func TestLookupLargeFile(t *testing.T) {
	path := os.Getenv("CTDISPATCH_LOOKUP_FILE")
	if path == "" {
		t.Skip("set CTDISPATCH_LOOKUP_FILE to a dispatch_outbox Parquet file")
	}
	for _, tc := range []struct {
		name  string
		fld   field
		value string
		rows  int
	}{
		{"dispatch_id hit", fieldID, "dispatch:run2500:task250:1", 1},
		{"dispatch_id miss", fieldID, "dispatch:run2500:task250:3", 0},
		{"cloud_task_id hit", fieldCloudTaskID, mustCloudTaskID(t, "dispatch:run2500:task250:1"), 1},
		{"run_id hit", fieldRunID, "run2500", 1000},
	} {
		got, read, size := lookupBytes(t, path, tc.fld, tc.value, pqtable.FindOptions{})
		require.Len(t, got, tc.rows, tc.name)
		t.Logf("%-18s %5d rows: read %8d of %d bytes (%.3f%%)", tc.name, len(got), read, size, 100*float64(read)/float64(size))
	}

	// gendata writes runs 0-4999 of 500 tasks, each with attempts 1 and 2.
	const sample = 200
	fracs := make([]float64, 0, sample)
	for k := range sample {
		id := fmt.Sprintf("dispatch:run%d:task%d:1", k*7919%5000, k*104729%500)
		got, read, size := lookupBytes(t, path, fieldCloudTaskID, mustCloudTaskID(t, id), pqtable.FindOptions{})
		require.Len(t, got, 1, id)
		require.Equal(t, id, got[0].ID)
		fracs = append(fracs, 100*float64(read)/float64(size))
	}
	sort.Float64s(fracs)
	mean, over := 0.0, 0
	for _, f := range fracs {
		mean += f / sample
		if f >= 1 {
			over++
		}
	}
	t.Logf("cloud_task_id, %d IDs: mean %.3f%%, median %.3f%%, 90th percentile %.3f%%, max %.3f%%; %d of %d read 1%% or more",
		sample, mean, fracs[sample/2], fracs[sample*9/10], fracs[sample-1], over, sample)
}

// lookupBytes finds value in column fld of the file at path and returns
// the records and how many of the file's bytes that read.
func lookupBytes(t *testing.T, path string, fld field, value string, o pqtable.FindOptions) (recs []outbox.Record, read, size int64) {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	st, err := f.Stat()
	require.NoError(t, err)
	cf := &countingFile{File: f}
	p, err := openParquet(path, outbox.TableDispatch, cf, st.Size())
	require.NoError(t, err)
	defer p.close()
	recs, err = p.find(fld, value, o)
	require.NoError(t, err)
	return recs, cf.n.Load(), st.Size()
}

// In a file with one row per cloud_task_id (a compaction's output), a
// lookup by cloud_task_id ends at the match instead of reading the rest
// of the column chunk.
func TestUniqueLookupStopsAtTheMatch(t *testing.T) {
	t.Parallel()
	recs := make([]outbox.Record, 0, 60_000)
	for i := range cap(recs) {
		r := dispatchRec(fmt.Sprintf("run%d", i/1000), fmt.Sprintf("task%d", i%1000), "1", outbox.StatusCreated)
		r.CreatedAt, r.UpdatedAt = t0, t0
		recs = append(recs, r)
	}
	sortRecords(recs)
	path := filepath.Join(t.TempDir(), "compacted.parquet")
	require.NoError(t, writeParquet(path, outbox.TableDispatch, recs))

	first := recs[0]
	all, readAll, size := lookupBytes(t, path, fieldCloudTaskID, first.CloudTaskID, pqtable.FindOptions{})
	one, readOne, _ := lookupBytes(t, path, fieldCloudTaskID, first.CloudTaskID, pqtable.FindOptions{Unique: true})
	require.Len(t, all, 1)
	require.Equal(t, all, one)
	require.Equal(t, first.ID, one[0].ID)
	t.Logf("first row: %d bytes read instead of %d, of %d", readOne, readAll, size)
	require.Less(t, readOne*4, readAll, "the first of the chunk's pages, not all of them")

	last := recs[len(recs)-1]
	one, _, _ = lookupBytes(t, path, fieldCloudTaskID, last.CloudTaskID, pqtable.FindOptions{Unique: true})
	require.Len(t, one, 1)
	require.Equal(t, last.ID, one[0].ID)
}

func mustCloudTaskID(t *testing.T, id string) string {
	t.Helper()
	c, err := naming.CloudTaskID(id)
	require.NoError(t, err)
	return c
}

// TestPendingLargeOutbox times Pending over a large outbox, such as the
// output of gendata (whose final states are 1% pending):
//
//	CTDISPATCH_PENDING_ROOT=/tmp/ob5m go test -run PendingLargeOutbox -v ./outbox/
func TestPendingLargeOutbox(t *testing.T) {
	root := os.Getenv("CTDISPATCH_PENDING_ROOT")
	if root == "" {
		t.Skip("set CTDISPATCH_PENDING_ROOT to an outbox directory")
	}
	o, err := Open(context.Background(), Config{Root: root, ReadOnly: true})
	require.NoError(t, err)
	defer o.Close()
	start := time.Now()
	got, err := o.Pending(context.Background(), outbox.TableDispatch, time.Hour)
	require.NoError(t, err)
	t.Logf("Pending: %d records in %v", len(got), time.Since(start))
}

// TestLookupSummary checks that a Summary lookup returns exactly the
// summary fields (the trace ID among them) of what a full lookup returns, by ID, by cloud_task_id
// and by run, with history and without, from Parquet files and from a
// log, in both tables.
func TestLookupSummary(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	pending := dispatchRec("run1", "extract", "1", outbox.StatusPending)
	pending.CreatedAt = t0
	failed := pending
	failed.Status, failed.ErrorCode, failed.CreateCalls = outbox.StatusFailed, "PERMISSION_DENIED", 3
	failed.TraceID, failed.SpanID = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	timer := timerRec("run1", "extract", t0.Add(time.Hour), outbox.StatusCreated)
	timer.TraceID, timer.SpanID = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"
	o, _ := b.openWith(t, pending, failed, timer)
	unflushed := dispatchRec("run1", "load", "1", outbox.StatusCreated) // stays in the log
	require.NoError(t, outbox.AppendAndWait(ctx, o, unflushed))
	for _, q := range []outbox.Query{
		{ID: failed.ID}, {ID: failed.ID, History: true}, {CloudTaskID: failed.CloudTaskID},
		{ID: timer.ID, Table: outbox.TableTimers}, {RunID: "run1"}, {RunID: "run1", History: true},
		{ID: unflushed.ID},
	} {
		full, err := o.Lookup(ctx, q)
		require.NoError(t, err)
		require.NotEmpty(t, full, "%+v", q)
		q.Summary = true
		got, err := o.Lookup(ctx, q)
		require.NoError(t, err)
		want := make([]outbox.Record, len(full))
		for i := range full {
			require.NotEmpty(t, full[i].Queue)
			want[i] = outbox.Record{Table: full[i].Table, ID: full[i].ID, CloudTaskID: full[i].CloudTaskID, Status: full[i].Status,
				ErrorCode: full[i].ErrorCode, CreateCalls: full[i].CreateCalls, UpdatedAt: full[i].UpdatedAt,
				DueAt: full[i].DueAt, ProcessorUUID: full[i].ProcessorUUID, TraceID: full[i].TraceID}
		}
		require.Equal(t, want, got, "%+v", q)
	}
}

// TestFindFieldsReadsOnlyTheirColumns checks that a find limited to some
// fields fills only those (and the searched one) and reads less of the
// file than a find of whole rows.
func TestFindFieldsReadsOnlyTheirColumns(t *testing.T) {
	t.Parallel()
	recs := make([]outbox.Record, 0, 20_000)
	for i := range cap(recs) {
		r := dispatchRec(fmt.Sprintf("run%d", i/100), fmt.Sprintf("task%d", i%100), "1", outbox.StatusCreated)
		r.PayloadSHA256 = fmt.Sprintf("%064x", uint64(i)*0x9E3779B97F4A7C15)
		r.CreatedAt, r.UpdatedAt = t0.Add(time.Duration(i)*time.Second), t0.Add(time.Duration(i)*time.Second)
		recs = append(recs, r)
	}
	sortRecords(recs)
	path := filepath.Join(t.TempDir(), "t.parquet")
	require.NoError(t, writeParquet(path, outbox.TableDispatch, recs))
	id := "dispatch:run123:task45:1"
	find := func(fields []field) (outbox.Record, int64) {
		got, read, _ := lookupBytes(t, path, fieldID, id, pqtable.FindOptions{Fields: fields})
		require.Len(t, got, 1)
		return got[0], read
	}
	whole, wholeBytes := find(nil)
	require.Equal(t, "run123", whole.RunID)
	part, partBytes := find([]field{fieldStatus, fieldUpdatedAt})
	require.Equal(t, outbox.Record{Table: outbox.TableDispatch, ID: id, Status: outbox.StatusCreated, Kind: "dispatch", UpdatedAt: whole.UpdatedAt}, part)
	require.Less(t, partBytes, wholeBytes)
}
