package parquetbox

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ctdispatch/ctdispatch/outbox"

	"github.com/stretchr/testify/require"
	"gocloud.dev/blob/memblob"

	"github.com/ctdispatch/ctdispatch/outbox/internal/pqtable"
)

// manifestDays writes 20 IDs a day on three days (runs r0, r1, r2, so
// each day's file covers its own range of IDs) and compacts them; it
// returns the manifest's path.
func manifestDays(t *testing.T, b *testBundle, opts Config) string {
	t.Helper()
	ctx := context.Background()
	o, err := Open(ctx, opts)
	require.NoError(t, err)
	defer o.Close()
	for day := range 3 {
		for i := range 20 {
			require.NoError(t, outbox.AppendAndWait(ctx, o, dispatchRec(fmt.Sprintf("r%d", day), fmt.Sprintf("t%02d", i), "1", outbox.StatusCreated)))
		}
		require.NoError(t, o.Flush(ctx))
		b.clock.Advance(24 * time.Hour)
	}
	st, err := o.compact(ctx, CompactConfig{Tables: []outbox.Table{outbox.TableDispatch}})
	require.NoError(t, err)
	m := st.Tables[0].Manifest
	require.Equal(t, ManifestWritten, m.Action)
	require.Equal(t, 3, m.Files)
	require.Equal(t, 3, m.RowGroups)
	return filepath.Join(b.root, manifestDir, string(outbox.TableDispatch))
}

// readOnly opens the outbox as a query does: a new process, nothing open.
func readOnly(t *testing.T, b *testBundle, opts Config) *Outbox {
	t.Helper()
	opts.ReadOnly, opts.ProcessorUUID = true, [16]byte{}
	o, err := Open(context.Background(), opts)
	require.NoError(t, err)
	t.Cleanup(func() { o.Close() })
	return o
}

// lookupBoth looks rec up by ID and by cloud_task_id and checks both find
// exactly it.
func lookupBoth(t *testing.T, o *Outbox, rec outbox.Record) {
	t.Helper()
	for _, q := range []outbox.Query{{ID: rec.ID}, {CloudTaskID: rec.CloudTaskID}} {
		got, err := o.Lookup(context.Background(), q)
		require.NoError(t, err)
		require.Len(t, got, 1, "%+v", q)
		require.Equal(t, rec.ID, got[0].ID)
		require.Equal(t, rec.Status, got[0].Status)
	}
}

func TestManifestLetsALookupOpenOnlyTheFileThatHoldsTheID(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	manifestDays(t, b, b.options(procA))

	for _, tc := range []struct {
		name   string
		q      outbox.Query
		found  int
		opened int
	}{
		{name: "by ID", q: outbox.Query{ID: "dispatch:r1:t07:1"}, found: 1, opened: 1},
		{name: "by cloud_task_id", q: outbox.Query{CloudTaskID: mustHash("dispatch:r2:t13:1")}, found: 1, opened: 1},
		{name: "ID past every file's bounds", q: outbox.Query{ID: "dispatch:r9:t00:1"}, found: 0, opened: 0},
		{name: "by run: no manifest use", q: outbox.Query{RunID: "r0"}, found: 20, opened: 3},
	} {
		o := readOnly(t, b, b.options(""))
		got, err := o.Lookup(ctx, tc.q)
		require.NoError(t, err, tc.name)
		require.Len(t, got, tc.found, tc.name)
		require.Equal(t, tc.opened, o.files[outbox.TableDispatch].openFiles(), tc.name)
	}
	require.NotContains(t, b.logs.String(), "manifest")

	// A dispatcher's Latest (bloom filters kept in memory) goes the same
	// way: it opens the one file, and a new ID opens none.
	d := b.open(t, procB)
	got, ok, err := d.Latest(ctx, outbox.TableDispatch, "dispatch:r0:t11:1")
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, outbox.StatusCreated, got.Status)
	_, ok, err = d.Latest(ctx, outbox.TableDispatch, "dispatch:r9:new:1")
	require.NoError(t, err)
	require.False(t, ok)
	require.Equal(t, 1, d.files[outbox.TableDispatch].openFiles())

	// The files live in hive partitions only: the manifest is outside the
	// table's directory, where no engine reading the table looks.
	entries, err := os.ReadDir(filepath.Join(b.root, string(outbox.TableDispatch)))
	require.NoError(t, err)
	for _, e := range entries {
		require.True(t, strings.HasPrefix(e.Name(), "created_date="), e.Name())
	}
}

func TestStaleManifestNeverHidesARecord(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	path := manifestDays(t, b, b.options(procA))
	first, err := os.ReadFile(path)
	require.NoError(t, err)

	// A record written after the compaction is in a file the manifest
	// does not list, and a later state of a listed ID too.
	w := b.open(t, procB)
	added := dispatchRec("r2", "late", "1", outbox.StatusCreated)
	later := dispatchRec("r1", "t03", "1", outbox.StatusFailed)
	require.NoError(t, outbox.AppendAndWait(ctx, w, added))
	require.NoError(t, outbox.AppendAndWait(ctx, w, later))
	require.NoError(t, w.Flush(ctx))
	o := readOnly(t, b, b.options(""))
	lookupBoth(t, o, added)
	lookupBoth(t, o, later)
	lookupBoth(t, o, dispatchRec("r0", "t05", "1", outbox.StatusCreated))

	// Another compaction replaces the day files those went into; the
	// manifest put back is the first one, which names files now gone and
	// misses their replacements.
	st, err := w.compact(ctx, CompactConfig{Tables: []outbox.Table{outbox.TableDispatch}})
	require.NoError(t, err)
	require.Equal(t, ManifestWritten, st.Tables[0].Manifest.Action)
	require.NoError(t, os.WriteFile(path, first, 0o600))
	o = readOnly(t, b, b.options(""))
	lookupBoth(t, o, added)
	lookupBoth(t, o, later)
	lookupBoth(t, o, dispatchRec("r0", "t05", "1", outbox.StatusCreated))
	lookupBoth(t, o, dispatchRec("r2", "t19", "1", outbox.StatusCreated))

	// The next compaction, with every partition untouched, sees the
	// manifest is stale and writes it again.
	st, err = w.compact(ctx, CompactConfig{Tables: []outbox.Table{outbox.TableDispatch}})
	require.NoError(t, err)
	for _, p := range st.Tables[0].Partitions {
		require.Equal(t, UnitUntouched, p.Action)
	}
	require.Equal(t, ManifestWritten, st.Tables[0].Manifest.Action)
	st, err = w.compact(ctx, CompactConfig{Tables: []outbox.Table{outbox.TableDispatch}})
	require.NoError(t, err)
	require.Equal(t, ManifestCurrent, st.Tables[0].Manifest.Action)
	require.NoError(t, os.Remove(path))
	// A crashed writer's temporary goes once it is an hour old.
	old, fresh := filepath.Join(filepath.Dir(path), ".dispatch_outbox.tmp-1"), filepath.Join(filepath.Dir(path), ".dispatch_outbox.tmp-2")
	for f, age := range map[string]time.Duration{old: 2 * time.Hour, fresh: time.Minute} {
		require.NoError(t, os.WriteFile(f, []byte("CTDMANI1"), 0o600))
		require.NoError(t, os.Chtimes(f, b.clock.Now().Add(-age), b.clock.Now().Add(-age)))
	}
	st, err = w.compact(ctx, CompactConfig{Tables: []outbox.Table{outbox.TableDispatch}})
	require.NoError(t, err)
	require.Equal(t, ManifestWritten, st.Tables[0].Manifest.Action, "a missing manifest is written again")
	require.NoFileExists(t, old)
	require.FileExists(t, fresh)
}

// TestFileRewrittenInPlaceIsReadWhole rewrites a file the manifest lists
// under the same name, with IDs the manifest rules out for it: a lookup
// decides from the manifest while the files are listed, and must take the
// listing's word that this is another version of the file.
func TestFileRewrittenInPlaceIsReadWhole(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	manifestDays(t, b, b.options(procA))
	files, err := filepath.Glob(filepath.Join(b.root, string(outbox.TableDispatch), "created_date=*", "*.parquet"))
	require.NoError(t, err)
	require.Len(t, files, 3)
	moved := dispatchRec("r9", "moved", "1", outbox.StatusCreated)
	moved.CreatedAt, moved.UpdatedAt = t0, t0
	require.NoError(t, writeParquet(files[1], outbox.TableDispatch, []outbox.Record{moved}))
	later := b.clock.Now().Add(time.Hour)
	require.NoError(t, os.Chtimes(files[1], later, later))

	for _, q := range []outbox.Query{{ID: moved.ID}, {CloudTaskID: moved.CloudTaskID}, {ID: moved.ID, Summary: true}} {
		o := readOnly(t, b, b.options(""))
		got, err := o.Lookup(ctx, q)
		require.NoError(t, err)
		require.Len(t, got, 1, "%+v", q)
		require.Equal(t, moved.ID, got[0].ID)
		require.Equal(t, 1, o.files[outbox.TableDispatch].openFiles(), "%+v", q)
	}
	// An ID of the file as the manifest knew it is gone with that version.
	o := readOnly(t, b, b.options(""))
	got, err := o.Lookup(ctx, outbox.Query{ID: "dispatch:r1:t07:1"})
	require.NoError(t, err)
	require.Empty(t, got)
}

// TestPrefetchTakesOnlyTableFileNames checks that the files a lookup
// opens before the listing is in are named as a listing names them: a
// manifest naming a file elsewhere gets nothing opened.
func TestPrefetchTakesOnlyTableFileNames(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	manifestDays(t, b, b.options(procA))
	o := readOnly(t, b, b.options(""))
	m, err := readManifest(ctx, o.store, outbox.TableDispatch)
	require.NoError(t, err)
	var want []string
	for name := range m {
		want = append(want, name)
	}
	for _, name := range want {
		mf := m[name]
		for _, bad := range []string{"../" + name, "other/" + name, "created_date=2026-01-01/../../x.parquet", "created_date=2026-01-01/.x.parquet"} {
			cp := *mf
			cp.Name = bad
			m[bad] = &cp
		}
	}
	pre := o.files[outbox.TableDispatch].prefetch(ctx, m, fieldID, "dispatch:r1:t07:1")
	defer pre.close()
	var got []string
	for name := range pre {
		got = append(got, name)
	}
	require.ElementsMatch(t, want, got)
}

func TestUnusableManifestIsIgnoredWithOneLogLine(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		damage func(t *testing.T, path string, good []byte)
		reason string
	}{
		{name: "corrupt", damage: func(t *testing.T, path string, good []byte) {
			bad := append([]byte(nil), good...)
			bad[len(bad)/2] ^= 0x40
			require.NoError(t, os.WriteFile(path, bad, 0o600))
		}, reason: "checksum mismatch"},
		{name: "truncated", damage: func(t *testing.T, path string, good []byte) {
			require.NoError(t, os.WriteFile(path, good[:len(good)/2], 0o600))
		}, reason: "checksum mismatch"},
		{name: "foreign", damage: func(t *testing.T, path string, _ []byte) {
			require.NoError(t, os.WriteFile(path, []byte(`{"files": []}`), 0o600))
		}, reason: `no \"CTDMANI1\" header`},
		{name: "another table's", damage: func(t *testing.T, path string, _ []byte) {
			require.NoError(t, os.WriteFile(path, pqtable.MarshalManifest(&pqtable.Manifest{Table: "timers"}), 0o600))
		}, reason: `a manifest of table \"timers\", not \"dispatch_outbox\"`},
		{name: "FIFO", damage: func(t *testing.T, path string, _ []byte) {
			require.NoError(t, os.Remove(path))
			require.NoError(t, syscall.Mkfifo(path, 0o600))
		}, reason: "not a regular file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			path := manifestDays(t, b, b.options(procA))
			good, err := os.ReadFile(path)
			require.NoError(t, err)
			tc.damage(t, path, good)
			o := readOnly(t, b, b.options(""))
			for range 3 { // each lookup lists and reads the manifest again
				lookupBoth(t, o, dispatchRec("r1", "t07", "1", outbox.StatusCreated))
			}
			require.Equal(t, 3, o.files[outbox.TableDispatch].openFiles(), "every file is opened, as without a manifest")
			logs := b.logs.String()
			require.Equal(t, 1, strings.Count(logs, "ignored manifest"), logs)
			require.Contains(t, logs, tc.reason)
		})
	}
}

func TestManifestOnABucket(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	bkt := memblob.OpenBucket(nil)
	t.Cleanup(func() { bkt.Close() })
	opts := b.options(procA)
	opts.Root, opts.Bucket, opts.LogDir = "", bkt, t.TempDir()
	manifestDays(t, b, opts)
	attrs, err := bkt.Attributes(ctx, "_manifests/dispatch_outbox")
	require.NoError(t, err)
	require.Equal(t, "application/octet-stream", attrs.ContentType)

	o := readOnly(t, b, opts)
	lookupBoth(t, o, dispatchRec("r2", "t11", "1", outbox.StatusCreated))
	require.Equal(t, 1, o.files[outbox.TableDispatch].openFiles())

	// A file added after the compaction is read the usual way.
	w, err := Open(ctx, opts)
	require.NoError(t, err)
	added := dispatchRec("r0", "late", "1", outbox.StatusPending)
	require.NoError(t, outbox.AppendAndWait(ctx, w, added))
	require.NoError(t, w.Close())
	o = readOnly(t, b, opts)
	lookupBoth(t, o, added)
	lookupBoth(t, o, dispatchRec("r0", "t00", "1", outbox.StatusCreated))

	// A damaged manifest object is ignored.
	require.NoError(t, bkt.WriteAll(ctx, "_manifests/dispatch_outbox", []byte("CTDMANI1 and then garbage"), nil))
	o = readOnly(t, b, opts)
	lookupBoth(t, o, added)
	require.Contains(t, b.logs.String(), "ignored manifest")
}

// TestManifestOfLargeOutbox writes only the manifest of an outbox made by
// gendata, without compacting it, so lookups on it can be measured with
// and without one:
//
//	CTDISPATCH_MANIFEST_ROOT=/tmp/ob3m go test -run ManifestOfLargeOutbox -v ./outbox/
func TestManifestOfLargeOutbox(t *testing.T) {
	root := os.Getenv("CTDISPATCH_MANIFEST_ROOT")
	if root == "" {
		t.Skip("set CTDISPATCH_MANIFEST_ROOT to an outbox directory")
	}
	ctx := context.Background()
	o, err := Open(ctx, Config{Root: root, ReadOnly: true})
	require.NoError(t, err)
	defer o.Close()
	c := &compaction{o: o, t: outbox.TableDispatch}
	rep := c.refreshManifest(ctx)
	require.NoError(t, rep.Err)
	listed, err := o.store.list(ctx, outbox.TableDispatch)
	require.NoError(t, err)
	require.Len(t, listed, rep.Files)
	t.Logf("manifest %s: %s, %d files, %d row groups", rep.Path, rep.Action, rep.Files, rep.RowGroups)
}

// IDs longer than the page index's bounds (and sharing a long prefix) are
// still found through the manifest: the row-group bounds it keeps must be
// the IDs themselves, never truncated ones that would rule out the largest.
func TestManifestBoundsOfLongIDs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	opts := b.options(procA)
	o, err := Open(ctx, opts)
	require.NoError(t, err)
	run := strings.Repeat("r", 100)
	var recs []outbox.Record
	for i := range 50 {
		rec := dispatchRec(run, fmt.Sprintf("t%s%03d", strings.Repeat("k", 90), i), "1", outbox.StatusCreated)
		recs = append(recs, rec)
		require.NoError(t, outbox.AppendAndWait(ctx, o, rec))
	}
	require.NoError(t, o.Flush(ctx))
	st, err := o.compact(ctx, CompactConfig{Tables: []outbox.Table{outbox.TableDispatch}})
	require.NoError(t, err)
	require.Equal(t, ManifestWritten, st.Tables[0].Manifest.Action)
	require.NoError(t, o.Close())

	r := readOnly(t, b, opts)
	for _, rec := range recs {
		lookupBoth(t, r, rec)
	}
}
