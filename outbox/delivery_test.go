package outbox_test

import (
	"context"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/ctdispatch/ctdispatch/naming"
	"github.com/ctdispatch/ctdispatch/outbox"
)

// Time budget: under 0.1 s.

// LookupDeliveries finds an ID's deliveries by its Cloud Tasks ID and
// keeps that ID's only; a task's and a run's as Lookup would.
func TestLookupDeliveries(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clock := clockwork.NewFakeClockAt(time.Date(2026, 11, 25, 9, 0, 0, 0, time.UTC))
	box := outbox.NewMemory(clock)
	extract, err := naming.NewDispatch("run1", "extract", naming.Attempt(1))
	require.NoError(t, err)
	load, err := naming.NewDispatch("run1", "load", naming.Attempt(1))
	require.NoError(t, err)
	for _, d := range []struct {
		id     naming.ID
		suffix string
	}{{extract, "a"}, {extract, "b"}, {load, "c"}} {
		r := outbox.DeliveryRecordOf(d.id, d.suffix)
		r.Queue, r.Status = "work", outbox.StatusStarted
		require.NoError(t, outbox.AppendAndWait(ctx, box, r))
		r.Status, r.Delivery.HTTPStatus = outbox.StatusDone, 200
		require.NoError(t, outbox.AppendAndWait(ctx, box, r))
	}
	require.NoError(t, outbox.AppendAndWait(ctx, box, outbox.Record{Table: outbox.TableDispatch, ID: extract.String(),
		Queue: "projects/p/locations/l/queues/work", Status: outbox.StatusCreated}))

	ids := func(q outbox.Query) []string {
		recs, err := outbox.LookupDeliveries(ctx, box, q)
		require.NoError(t, err)
		var out []string
		for _, r := range recs {
			out = append(out, r.ID+" "+string(r.Status))
		}
		return out
	}
	tests := []struct {
		name string
		q    outbox.Query
		want []string
	}{
		{"by internal ID", outbox.Query{ID: extract.String()}, []string{"dispatch:run1:extract:1#a done", "dispatch:run1:extract:1#b done"}},
		{"by internal ID, history", outbox.Query{ID: load.String(), History: true}, []string{"dispatch:run1:load:1#c started", "dispatch:run1:load:1#c done"}},
		{"by Cloud Tasks ID", outbox.Query{CloudTaskID: load.CloudTaskID(), Table: outbox.TableDispatch}, []string{"dispatch:run1:load:1#c done"}},
		{"by run", outbox.Query{RunID: "run1"}, []string{"dispatch:run1:extract:1#a done", "dispatch:run1:extract:1#b done", "dispatch:run1:load:1#c done"}},
		{"nothing", outbox.Query{RunID: "run2"}, nil},
		{"not an internal ID", outbox.Query{ID: "job-17"}, nil},
	}
	for _, tt := range tests {
		require.Equal(t, tt.want, ids(tt.q), tt.name)
	}
	_, err = outbox.LookupDeliveries(ctx, box, outbox.Query{})
	require.ErrorContains(t, err, "Query needs exactly one of ID, CloudTaskID, RunID")
}
