package parquetbox

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ctdispatch/ctdispatch/naming"
	"github.com/ctdispatch/ctdispatch/outbox"
)

// Records walks a table's whole history, from the live log before it is
// converted and from the Parquet files after, and an error of its
// function stops it.
func TestRecordsWalksTheWholeHistory(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	o, err := Open(ctx, Config{Root: dir})
	require.NoError(t, err)
	for _, key := range []string{"a", "b"} {
		id, err := naming.NewDispatch("walk", key, naming.Attempt(1))
		require.NoError(t, err)
		r := outbox.RecordOf(id)
		r.Queue = "projects/p/locations/l/queues/q"
		for v, st := range []outbox.Status{outbox.StatusPending, outbox.StatusCreated} {
			r.Status, r.Version = st, int64(v+1)
			require.NoError(t, outbox.AppendAndWait(ctx, o, r))
		}
	}
	walk := func(o *Outbox, tb outbox.Table) []string {
		var got []string
		require.NoError(t, o.Records(ctx, tb, func(r outbox.Record) error {
			got = append(got, r.TaskKey+" "+string(r.Status))
			return nil
		}))
		return got
	}
	want := []string{"a pending", "a created", "b pending", "b created"}
	require.ElementsMatch(t, want, walk(o, outbox.TableDispatch), "from the live log")
	require.Empty(t, walk(o, outbox.TableTimers))
	require.NoError(t, o.Close())

	ro, err := Open(ctx, Config{Root: dir, ReadOnly: true})
	require.NoError(t, err)
	t.Cleanup(func() { ro.Close() })
	require.ElementsMatch(t, want, walk(ro, outbox.TableDispatch), "from the files")

	stop := errors.New("stop here")
	calls := 0
	err = ro.Records(ctx, outbox.TableDispatch, func(outbox.Record) error { calls++; return stop })
	require.ErrorIs(t, err, stop)
	require.Equal(t, 1, calls)
	require.Empty(t, ro.Damaged(), "the function's error is not the file's")
	require.ErrorContains(t, ro.Records(ctx, "nope", func(outbox.Record) error { return nil }), "nope")
}
