package parquetbox

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ctdispatch/ctdispatch/outbox"
)

// While the tables are published, a run written again (an exporter's
// batch taken over after a crash, a log segment converted again) never
// writes over the file already there: the file is checked and kept. One a
// compaction folded in and the publisher removed is not written again.
// Unpublished, a repeat writes the file again, as it always did.
func TestPublishedRunsAreNeverWrittenOver(t *testing.T) {
	t.Parallel()
	for _, storage := range []string{"directory", "fake GCS"} {
		t.Run(storage, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			r := newLakeRoot(t, storage)
			o := r.open(t, "")
			run := func(updated time.Time, n int) []outbox.Record {
				var recs []outbox.Record
				for i := range n {
					rec := dispatchRec("x", fmt.Sprint(i), "1", outbox.StatusCreated)
					rec.ProcessorUUID, rec.CreatedAt, rec.UpdatedAt, rec.Version = procB, t0, updated, 1
					recs = append(recs, rec)
				}
				return recs
			}
			name := day0 + "exp-0000000000000007.parquet"
			require.NoError(t, o.WriteRun(ctx, "exp", 7, run(t0, 3)))
			first, ok := r.read(t, outbox.TableDispatch, name)
			require.True(t, ok)
			// Unpublished: written again (other update times, other bytes).
			require.NoError(t, o.WriteRun(ctx, "exp", 7, run(t0.Add(time.Second), 3)))
			again, _ := r.read(t, outbox.TableDispatch, name)
			require.NotEqual(t, first, again)

			_, err := o.CreateRootObject(ctx, PublicationKey, nil)
			require.NoError(t, err)
			require.NoError(t, o.WriteRun(ctx, "exp", 7, run(t0.Add(2*time.Second), 3)))
			kept, _ := r.read(t, outbox.TableDispatch, name)
			require.Equal(t, again, kept, "kept as it was")
			err = o.WriteRun(ctx, "exp", 7, run(t0, 2))
			require.EqualError(t, err, fmt.Sprintf("outbox: %s is there with 3 rows where its run has 2: a published file is never written over, and a source's sequence number names one set of records", o.store.where(outbox.TableDispatch, name)))
			kept, _ = r.read(t, outbox.TableDispatch, name)
			require.Equal(t, again, kept)
			require.Contains(t, r.b.logs.String(), "a run's file was there already; kept as it is")

			// Folded, removed by the publisher, then the run again.
			require.NoError(t, o.Compact(ctx, CompactConfig{Tables: []outbox.Table{outbox.TableDispatch}, Full: true}))
			require.NoError(t, o.RemoveReplaced(ctx, outbox.TableDispatch, []string{name}))
			live := liveFiles(t, o, outbox.TableDispatch)
			require.Len(t, live, 1)
			require.NoError(t, o.WriteRun(ctx, "exp", 7, run(t0, 3)))
			_, ok = r.read(t, outbox.TableDispatch, name)
			require.False(t, ok, "not written again")
			require.Equal(t, live, liveFiles(t, o, outbox.TableDispatch))
			st, err := r.open(t, "").Stats(ctx)
			require.NoError(t, err)
			require.Equal(t, [2]int64{3, 3}, [2]int64{st[0].IDs, st[0].Rows})
		})
	}
}
