package parquetbox

import (
	"context"
	"os"
	"path/filepath"
	"sort"
	"testing"

	"github.com/ctdispatch/ctdispatch/outbox"

	"github.com/stretchr/testify/require"
	"gocloud.dev/blob/memblob"
)

// writeRecordsFile writes recs as one Parquet file at path.
func writeRecordsFile(t *testing.T, path string, recs ...outbox.Record) {
	t.Helper()
	require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o700))
	for i := range recs {
		recs[i].CreatedAt, recs[i].UpdatedAt = t0, t0
	}
	require.NoError(t, writeParquet(path, outbox.TableDispatch, recs))
}

// Entries under a table that are outside the layout (a file directly
// under it, directories with another name or an impossible date, a
// symbolic link to a partition) are never read, and every read that lists
// the table reports each of them, with its reason, where damaged files
// are reported: Damaged, Stats' and Compact's Skipped. Compaction leaves
// them where they are. (A partition the process cannot read is tested
// through the binary, as another user: see internal/cli.)
//
// Time budget: well under a second, like the bucket test below.
func TestEntriesOutsideTheLayoutAreReportedNeverRead(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	o, _ := b.openWith(t, dispatchRec("r", "kept", "1", outbox.StatusCreated))
	table := filepath.Join(b.root, string(outbox.TableDispatch))
	writeRecordsFile(t, filepath.Join(table, "old.parquet"), dispatchRec("r", "flat", "1", outbox.StatusCreated))
	writeRecordsFile(t, filepath.Join(table, "created_date=garbage", "x.parquet"), dispatchRec("r", "garbage", "1", outbox.StatusCreated))
	writeRecordsFile(t, filepath.Join(table, "created_date=2026-13-45", "x.parquet"), dispatchRec("r", "month13", "1", outbox.StatusCreated))
	elsewhere := filepath.Join(t.TempDir(), "created_date=2026-03-02")
	writeRecordsFile(t, filepath.Join(elsewhere, "x.parquet"), dispatchRec("r", "linked", "1", outbox.StatusCreated))
	require.NoError(t, os.Symlink(elsewhere, filepath.Join(table, "created_date=2026-03-02")))
	require.NoError(t, os.WriteFile(filepath.Join(table, ".hidden-work-file"), nil, 0o600))

	want := []string{
		table + "/created_date=2026-03-02/ (dir): a symbolic link; partitions are read only as real directories",
		table + "/created_date=2026-13-45/ (dir): not a partition directory; want created_date=YYYY-MM-DD with a real date",
		table + "/created_date=garbage/ (dir): not a partition directory; want created_date=YYYY-MM-DD with a real date",
		table + "/old.parquet: not in a partition directory; table files are read only under created_date=YYYY-MM-DD/",
	}
	reported := func(skipped []*FileError) []string {
		var out []string
		for _, fe := range skipped {
			require.ErrorIs(t, fe, ErrOutsideLayout)
			require.NotErrorIs(t, fe, ErrDamaged)
			line := fe.Path
			if fe.Dir {
				line += " (dir)"
			}
			out = append(out, line+": "+fe.Reason)
		}
		sort.Strings(out)
		return out
	}

	got, err := o.Lookup(ctx, outbox.Query{RunID: "r"})
	require.NoError(t, err)
	require.Len(t, got, 1, "only the record inside the layout")
	require.Equal(t, "dispatch:r:kept:1", got[0].ID)
	require.Equal(t, want, reported(o.Damaged()))
	require.Contains(t, b.logs.String(), "outbox: skipped entry outside the table layout")

	st, err := o.Stats(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(1), st[0].IDs)
	require.Equal(t, want, reported(st[0].Skipped))

	cs, err := o.compact(ctx, CompactConfig{Tables: []outbox.Table{outbox.TableDispatch}, Full: true})
	require.NoError(t, err)
	require.Equal(t, []string{"created_date=2026-03-01 compacted in=1 out=1 dropped=0"}, actions(cs.Tables[0]))
	require.Equal(t, want, reported(fileErrors(cs.Tables[0].Skipped)))
	for _, p := range []string{"old.parquet", "created_date=garbage/x.parquet", "created_date=2026-13-45/x.parquet", "created_date=2026-03-02/x.parquet"} {
		require.FileExists(t, filepath.Join(table, p), "compaction leaves what it does not read")
	}
}

// The same in a bucket, which has neither links nor directories: an
// object directly under a table, and objects under a prefix that is not a
// partition, reported once per prefix.
func TestBucketObjectsOutsideTheLayoutAreReported(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	bkt := memblob.OpenBucket(nil)
	defer bkt.Close()
	good := filepath.Join(t.TempDir(), "good.parquet")
	writeRecordsFile(t, good, dispatchRec("r", "t", "1", outbox.StatusCreated))
	data, err := os.ReadFile(good)
	require.NoError(t, err)
	for _, key := range []string{
		"dispatch_outbox/created_date=2026-03-01/good.parquet",
		"dispatch_outbox/old.parquet",
		"dispatch_outbox/created_date=garbage/a.parquet",
		"dispatch_outbox/created_date=garbage/b.parquet",
	} {
		require.NoError(t, bkt.WriteAll(ctx, key, data, nil))
	}
	o, err := Open(ctx, Config{Bucket: bkt, ReadOnly: true})
	require.NoError(t, err)
	defer o.Close()
	st, err := o.Stats(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, st[0].Files)
	var got []string
	for _, fe := range st[0].Skipped {
		require.ErrorIs(t, fe, ErrOutsideLayout)
		got = append(got, fe.Path+": "+fe.Reason)
	}
	sort.Strings(got)
	require.Equal(t, []string{
		"bucket:/dispatch_outbox/created_date=garbage/: not a partition directory; want created_date=YYYY-MM-DD with a real date",
		"bucket:/dispatch_outbox/old.parquet: not in a partition directory; table files are read only under created_date=YYYY-MM-DD/",
	}, got)
}
