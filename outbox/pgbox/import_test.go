package pgbox_test

import (
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/ctdispatch/ctdispatch/cloudtasks"
	"github.com/ctdispatch/ctdispatch/cloudtasks/emulator"
	"github.com/ctdispatch/ctdispatch/internal/testtools/pgtest"
	"github.com/ctdispatch/ctdispatch/naming"
	"github.com/ctdispatch/ctdispatch/outbox"
	"github.com/ctdispatch/ctdispatch/outbox/parquetbox"
)

// An outbox moved from Parquet files to PostgreSQL keeps its answers: an
// ID dispatched through the Parquet store and repeated through this one
// after Import is already_existed without a CreateTask call, and a
// repeat with another payload is still a conflict. A second Import
// imports nothing. About 2 s.
func TestImportKeepsAnswers(t *testing.T) {
	t.Parallel()
	const queue = "projects/p/locations/l/queues/q"
	clock := clockwork.NewFakeClockAt(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	emu, err := emulator.New(emulator.Config{DisableDelivery: true, Clock: clock, Queues: []emulator.QueueConfig{{Name: queue}}})
	require.NoError(t, err)
	t.Cleanup(func() { emu.Close() })
	cfg := &cloudtasks.Config{Project: "p", Location: "l", Queue: "q", EmulatorAddr: emu.Addr(), Clock: clock}
	task := func(body string) cloudtasks.Task {
		return cloudtasks.Task{URL: "https://example.com/work", Body: []byte(body)}
	}
	req := func(key, body string) cloudtasks.DispatchRequest {
		return cloudtasks.DispatchRequest{RunID: "moved", TaskKey: key, Identity: naming.Attempt(1), Task: task(body)}
	}

	dir := t.TempDir()
	files, err := parquetbox.Open(t.Context(), parquetbox.Config{Root: dir, Clock: clock})
	require.NoError(t, err)
	d, err := cloudtasks.NewDispatcher(t.Context(), files, cfg)
	require.NoError(t, err)
	for _, key := range []string{"a", "b", "c"} {
		res, err := d.Dispatch(t.Context(), req(key, `{"n":1}`))
		require.NoError(t, err)
		require.Equal(t, cloudtasks.OutcomeCreated, res.Outcome)
	}
	require.NoError(t, d.Close(t.Context()))
	require.NoError(t, files.Close())

	src, err := parquetbox.Open(t.Context(), parquetbox.Config{Root: dir, ReadOnly: true, Clock: clock})
	require.NoError(t, err)
	t.Cleanup(func() { src.Close() })
	box := openIn(t, pgtest.Open(t), clock)
	stats, err := box.Import(t.Context(), src)
	require.NoError(t, err)
	require.Len(t, stats, 3)
	require.Equal(t, outbox.TableDispatch, stats[0].Table)
	require.Equal(t, [3]int64{6, 6, 0}, [3]int64{stats[0].Read, stats[0].Imported, stats[0].Skipped}, "pending and created of three IDs")
	for _, st := range stats[1:] {
		require.Zero(t, st.Read, st.Table)
	}
	again, err := box.Import(t.Context(), src)
	require.NoError(t, err)
	require.Equal(t, [3]int64{6, 0, 6}, [3]int64{again[0].Read, again[0].Imported, again[0].Skipped}, "a second import")

	tasks := emu.TaskCount()
	d, err = cloudtasks.NewDispatcher(t.Context(), box, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { d.Close(t.Context()) })
	res, err := d.Dispatch(t.Context(), req("a", `{"n":1}`))
	require.NoError(t, err)
	require.Equal(t, cloudtasks.OutcomeAlreadyExisted, res.Outcome)
	require.True(t, res.Skipped)
	require.Zero(t, res.Calls)
	_, err = d.Dispatch(t.Context(), req("b", `{"n":2}`))
	var conflict *cloudtasks.ConflictError
	require.ErrorAs(t, err, &conflict)
	require.Equal(t, tasks, emu.TaskCount(), "no task created by the repeats")

	hist, err := box.Lookup(t.Context(), outbox.Query{RunID: "moved", History: true})
	require.NoError(t, err)
	require.Len(t, hist, 6, "the repeats recorded nothing")
}
