package parquetbox

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gocloud.dev/blob"

	"github.com/ctdispatch/ctdispatch/outbox"
)

// fenceStorages are the storages the fencing specifications run on: a
// directory, and a bucket on fake-gcs-server.
var fenceStorages = []string{"directory", "fake GCS"}

// fenceOptions returns options for proc (read-only when proc is "") on
// the storage named, sharing b's clock and root.
func fenceOptions(b *testBundle, storage string, bkt *blob.Bucket, proc string) Config {
	opts := b.options(proc)
	opts.ReadOnly = proc == ""
	if storage != "directory" {
		opts.Root, opts.Bucket = "", bkt
		if proc == "" {
			opts.LogDir = ""
		} else {
			opts.LogDir = b.root + "/log-" + proc
		}
	}
	return opts
}

func openFenced(t *testing.T, opts Config) *Outbox {
	t.Helper()
	o, err := Open(context.Background(), opts)
	require.NoError(t, err)
	t.Cleanup(func() { o.Close() })
	return o
}

// tableRows counts the rows of table t two ways: in the files o's
// readers read (commits honoured), and in every file listed (what an
// engine globbing the table, such as DuckDB, counts).
func tableRows(t *testing.T, o *Outbox, tbl outbox.Table) (read, listed int64) {
	t.Helper()
	ctx := context.Background()
	fs := o.files[tbl]
	fs.invalidate()
	files, err := fs.acquire(ctx)
	require.NoError(t, err)
	for _, f := range files {
		read += f.NumRows()
	}
	fs.release(files)
	entries, err := o.store.list(ctx, tbl)
	require.NoError(t, err)
	for _, e := range entries {
		p, err := fs.open(ctx, e.name)
		require.NoError(t, err)
		listed += p.NumRows()
		p.close()
	}
	return read, listed
}

// A compactor paused after its last lease check, while a second one takes
// the unit over and commits, is refused its own commit when it resumes:
// it reports the unit lost, discards its outputs, and no row is counted
// twice nor comes back after the second one's retention.
func TestLateCompactorIsFencedOut(t *testing.T) {
	t.Parallel()
	const ids = 400
	for _, storage := range fenceStorages {
		for _, retention := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/retention=%t", storage, retention), func(t *testing.T) {
				t.Parallel()
				ctx := context.Background()
				b := setup(t)
				var bkt *blob.Bucket
				if storage != "directory" {
					bkt = fakeGCSBucket(t)
				}
				w := openFenced(t, fenceOptions(b, storage, bkt, procA))
				// Four log conversions: one run of each ID's pending
				// record, three of other IDs already created.
				for i := range ids {
					require.NoError(t, outbox.AppendAndWait(ctx, w, dispatchRec("r", fmt.Sprint(i), "1", outbox.StatusPending)))
				}
				require.NoError(t, w.Flush(ctx))
				for f := range 3 {
					for i := range ids / 4 {
						require.NoError(t, outbox.AppendAndWait(ctx, w, dispatchRec("done", fmt.Sprintf("%d-%d", f, i), "1", outbox.StatusCreated)))
					}
					require.NoError(t, w.Flush(ctx))
				}
				const others = 3 * ids / 4

				// Compactor A merges the four runs and stops before
				// its commit.
				a := openFenced(t, fenceOptions(b, storage, bkt, ""))
				reached, release := make(chan struct{}), make(chan struct{})
				var aUnits []UnitCompaction
				aDone := make(chan error, 1)
				go func() {
					_, err := a.compact(ctx, CompactConfig{Tables: []outbox.Table{outbox.TableDispatch},
						Trace: &CompactTrace{
							Unit: func(_ outbox.Table, p UnitCompaction) { aUnits = append(aUnits, p) },
						},
						BeforeCommit: func(context.Context) {
							close(reached)
							<-release
						},
					})
					aDone <- err
				}()
				<-reached

				// Meanwhile a recovery records every pending ID's
				// outcome, A's lease runs out, and compactor B folds
				// the unit (dropping every terminal record with
				// retention).
				b.clock.Advance(time.Minute)
				rec := openFenced(t, fenceOptions(b, storage, bkt, procB))
				for i := range ids {
					require.NoError(t, outbox.AppendAndWait(ctx, rec, dispatchRec("r", fmt.Sprint(i), "1", outbox.StatusAlreadyExisted)))
				}
				require.NoError(t, rec.Flush(ctx))
				b.clock.Advance(11 * time.Minute)
				bc := openFenced(t, fenceOptions(b, storage, bkt, ""))
				opts := CompactConfig{Tables: []outbox.Table{outbox.TableDispatch}, Full: true}
				want := int64(ids + others)
				if retention {
					opts.Retention, want = Retention{"*": 0}, 0
				}
				st, err := bc.compact(ctx, opts)
				require.NoError(t, err)
				require.Equal(t, want, st.Tables[0].RowsOut)
				read, listed := tableRows(t, bc, outbox.TableDispatch)
				require.Equal(t, [2]int64{want, want}, [2]int64{read, listed})

				close(release)
				err = <-aDone
				require.ErrorIs(t, err, ErrUnitLost)
				var lost *UnitLostError
				require.ErrorAs(t, err, &lost)
				require.Equal(t, UnitLostError{Table: outbox.TableDispatch, Unit: "created_date=2026-03-01", Gen: 1}, *lost)
				require.Len(t, aUnits, 1)
				require.Equal(t, UnitLost, aUnits[0].Action)
				require.Equal(t, "lost its lease on unit dispatch_outbox/created_date=2026-03-01 (commit 1 was made by another compaction); stepped back: its outputs were discarded and nothing changed", aUnits[0].Reason)
				require.Contains(t, b.logs.String(), "lost its lease on unit dispatch_outbox/created_date=2026-03-01")

				fresh := openFenced(t, fenceOptions(b, storage, bkt, ""))
				read, listed = tableRows(t, fresh, outbox.TableDispatch)
				require.Equal(t, [2]int64{want, want}, [2]int64{read, listed}, "rows read, rows in every listed file")
				pending, err := fresh.Pending(ctx, outbox.TableDispatch, 0)
				require.NoError(t, err)
				require.Empty(t, pending, "no pending record comes back")
				got, ok, err := fresh.Latest(ctx, outbox.TableDispatch, "dispatch:r:7:1")
				require.NoError(t, err)
				require.Equal(t, !retention, ok)
				if ok {
					require.Equal(t, outbox.StatusAlreadyExisted, got.Status)
				}

				// A later tiered compaction leaves it so.
				st, err = fresh.compact(ctx, CompactConfig{Tables: []outbox.Table{outbox.TableDispatch}})
				require.NoError(t, err)
				read, listed = tableRows(t, fresh, outbox.TableDispatch)
				require.Equal(t, [2]int64{want, want}, [2]int64{read, listed})
			})
		}
	}
}

// A writer hung past a compaction whose retention dropped an ID cannot
// bring the ID's old pending record back: neither from its log (read by
// others on a directory) nor from its late publication. Newer pending
// records, and old ones of a queue retention did not touch, are served.
func TestLatePendingAfterRetentionIsNotServed(t *testing.T) {
	t.Parallel()
	for _, storage := range fenceStorages {
		t.Run(storage, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			b := setup(t)
			var bkt *blob.Bucket
			if storage != "directory" {
				bkt = fakeGCSBucket(t)
			}
			const otherQueue = "projects/p/locations/l/queues/untouched"
			// The hung writer publishes nothing until it is flushed.
			hopts := fenceOptions(b, storage, bkt, procA)
			hopts.PublishInterval = 1000 * time.Hour
			hung := openFenced(t, hopts)
			require.NoError(t, outbox.AppendAndWait(ctx, hung, dispatchRec("r", "x", "1", outbox.StatusPending)))
			other := dispatchRec("r", "y", "1", outbox.StatusPending)
			other.Queue = otherQueue
			require.NoError(t, outbox.AppendAndWait(ctx, hung, other))

			// Recovery settles x elsewhere; retention drops it.
			b.clock.Advance(time.Hour)
			rec := openFenced(t, fenceOptions(b, storage, bkt, procB))
			require.NoError(t, outbox.AppendAndWait(ctx, rec, dispatchRec("r", "x", "1", outbox.StatusAlreadyExisted)))
			require.NoError(t, rec.Flush(ctx))
			b.clock.Advance(time.Minute)
			c := openFenced(t, fenceOptions(b, storage, bkt, ""))
			st, err := c.compact(ctx, CompactConfig{Tables: []outbox.Table{outbox.TableDispatch}, Retention: Retention{"*": 0}})
			require.NoError(t, err)
			require.Equal(t, int64(1), st.Tables[0].Dropped)

			// A new attempt at x's task, after the drop, is served.
			require.NoError(t, outbox.AppendAndWait(ctx, rec, dispatchRec("r", "x", "2", outbox.StatusPending)))
			require.NoError(t, rec.Flush(ctx))
			reader := openFenced(t, fenceOptions(b, storage, bkt, ""))
			pendingIDs := func() []string {
				t.Helper()
				recs, err := reader.Pending(ctx, outbox.TableDispatch, 0)
				require.NoError(t, err)
				var out []string
				for _, r := range recs {
					out = append(out, r.ID)
				}
				return out
			}
			want := []string{"dispatch:r:x:2"}
			if storage == "directory" {
				// Others' live logs are read on a directory.
				want = []string{"dispatch:r:y:1", "dispatch:r:x:2"}
				_, ok, err := reader.Latest(ctx, outbox.TableDispatch, "dispatch:r:x:1")
				require.NoError(t, err)
				require.False(t, ok, "the hung writer's log does not bring x back")
			}
			require.Equal(t, want, pendingIDs())

			// The hung writer resumes and publishes its old records.
			require.NoError(t, hung.Flush(ctx))
			require.Equal(t, []string{"dispatch:r:y:1", "dispatch:r:x:2"}, pendingIDs())
			_, ok, err := reader.Latest(ctx, outbox.TableDispatch, "dispatch:r:x:1")
			require.NoError(t, err)
			require.False(t, ok, "the late publication does not bring x back")
			hist, err := reader.Lookup(ctx, outbox.Query{ID: "dispatch:r:x:1", History: true})
			require.NoError(t, err)
			require.Empty(t, hist)

			// Nor does a compaction folding the late file into an
			// output, which readers serve whole.
			st, err = c.compact(ctx, CompactConfig{Tables: []outbox.Table{outbox.TableDispatch}, Full: true})
			require.NoError(t, err)
			require.Equal(t, UnitCompacted, st.Tables[0].Partitions[0].Action)
			require.Equal(t, []string{"dispatch:r:y:1", "dispatch:r:x:2"}, pendingIDs())
			_, ok, err = reader.Latest(ctx, outbox.TableDispatch, "dispatch:r:x:1")
			require.NoError(t, err)
			require.False(t, ok, "the fold did not carry x's old pending record into its output")
		})
	}
}

// Outputs are named for the commit meant to name them; other names carry
// no generation.
func TestOutputGen(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		gen  uint64
		ok   bool
	}{
		{"created_date=2026-03-01/b3of8-compacted-1795791313755466-b3a1b762-g12-w4-0.parquet", 12, true},
		{"created_date=2026-03-01/compacted-1795791313755466-b3a1b762-g1-w2-3.parquet", 1, true},
		{"created_date=2026-03-01/compacted-1795791313755466-b3a1b762-w2-0.parquet", 0, false},
		{"created_date=2026-03-01/b3of8-" + procA + "-0000000000000001.parquet", 0, false},
		{"created_date=2026-03-01/compacted-1-gx-w2-0.parquet", 0, false},
	} {
		gen, ok := outputGen(tc.name)
		require.Equal(t, tc.gen, gen, tc.name)
		require.Equal(t, tc.ok, ok, tc.name)
	}
}

// Readers honour the newest commit of a unit: generation-named outputs
// only if it names them, other files unless it consumed them; a unit
// without a commit reads what it read before commits existed.
func TestCommitVisibility(t *testing.T) {
	t.Parallel()
	const part = "created_date=2026-03-01/"
	c := newUnitCommit(commitBody{Gen: 2, Outputs: []string{part + "compacted-1-aa-g2-w4-0.parquet"}, Consumed: []string{part + procA + "-0000000000000001.parquet"}})
	for _, tc := range []struct {
		name      string
		committed bool
		none      bool
	}{
		{part + "compacted-1-aa-g2-w4-0.parquet", true, false},
		{part + "compacted-1-bb-g2-w4-0.parquet", false, false},
		{part + "compacted-1-cc-g3-w4-0.parquet", false, false},
		{part + "compacted-1-dd-w4-0.parquet", true, true},
		{part + procA + "-0000000000000001.parquet", false, true},
		{part + procA + "-0000000000000002.parquet", true, true},
	} {
		require.Equal(t, tc.committed, c.visible(tc.name), tc.name)
		require.Equal(t, tc.none, (*unitCommit)(nil).visible(tc.name), tc.name)
		require.True(t, (&unitCommit{damaged: true}).visible(tc.name), tc.name)
	}
	require.True(t, strings.HasSuffix(commitPrefix(outbox.TableDispatch, "created_date=2026-03-01/b3of8"), "created_date=2026-03-01~b3of8."))
	require.True(t, errors.Is(&UnitLostError{}, ErrUnitLost))
}
