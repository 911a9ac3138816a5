package cli

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/ctdispatch/ctdispatch/outbox"
	"github.com/ctdispatch/ctdispatch/outbox/parquetbox"
)

// The table format's TRACE ID column shows the trace of dispatch and
// timer rows that carry one (as --format json and csv do), and - for a
// row without: the summary it prints from keeps the trace ID.
func TestQueryTableShowsTraceIDs(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ctx := context.Background()
	clock := clockwork.NewFakeClockAt(cliT0)
	o, err := parquetbox.Open(ctx, parquetbox.Config{Root: dir, ProcessorUUID: uuid.MustParse(cliProc), Clock: clock})
	require.NoError(t, err)
	d := outbox.Record{Table: outbox.TableDispatch, ID: "dispatch:run1:extract:1", CloudTaskID: "d_cxtoltqhbncw6nevn7hy53kqn6",
		Queue: cliQueue, RunID: "run1", TaskKey: "extract", Attempt: "1", Status: outbox.StatusPending,
		TraceID: "4bf92f3577b34da6a3ce929d0e0e4736", SpanID: "00f067aa0ba902b7"}
	require.NoError(t, outbox.AppendAndWait(ctx, o, d))
	clock.Advance(time.Second)
	d.Status, d.CreateCalls = outbox.StatusCreated, 1
	require.NoError(t, outbox.AppendAndWait(ctx, o, d))
	untraced := outbox.Record{Table: outbox.TableDispatch, ID: "dispatch:run1:load:2", CloudTaskID: "d_jbmde3fgfum6suqbrrywrudv7g",
		Queue: cliQueue, RunID: "run1", TaskKey: "load", Attempt: "2", Status: outbox.StatusCreated, CreateCalls: 1}
	require.NoError(t, outbox.AppendAndWait(ctx, o, untraced))
	tm := outbox.Record{Table: outbox.TableTimers, ID: "timer:retry:run1:extract:1:1772370000", CloudTaskID: "t_r36kq5aw4etqdihtwlvv5mky3q",
		Queue: cliQueue, RunID: "run1", TaskKey: "extract", Attempt: "1", Kind: "retry", Status: outbox.StatusCreated,
		CreateCalls: 1, DueAt: time.Unix(1772370000, 0), TraceID: "0af7651916cd43dd8448eb211c80319c", SpanID: "b7ad6b7169203331"}
	require.NoError(t, outbox.AppendAndWait(ctx, o, tm))
	require.NoError(t, o.Close())

	var got string
	for _, flags := range []string{"--run run1", "--run run1 --history", "--timer-id " + tm.ID} {
		code, stdout, stderr := runCLI(t, append([]string{"query", "--outbox", dir}, strings.Fields(flags)...)...)
		require.Equal(t, 0, code, stderr)
		got += "$ ctdispatch query --outbox DIR " + flags + "\n" + stdout
	}
	golden(t, "query_trace_table.golden", got)
}
