package pgxtx_test

import (
	"context"
	"database/sql"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/ctdispatch/ctdispatch/cloudtasks"
	"github.com/ctdispatch/ctdispatch/cloudtasks/emulator"
	"github.com/ctdispatch/ctdispatch/internal/testtools/pgtest"
	"github.com/ctdispatch/ctdispatch/naming"
	"github.com/ctdispatch/ctdispatch/outbox"
	"github.com/ctdispatch/ctdispatch/outbox/pgbox"
	"github.com/ctdispatch/ctdispatch/outbox/pgbox/pgxtx"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// A dispatch recorded in a pgx transaction is created after commit with
// the whole request the intent held: target, method, headers, body, OIDC
// settings, schedule time and dispatch deadline; one rolled back is not.
// About 1 s.
func TestDispatchTxThroughPgx(t *testing.T) {
	t.Parallel()
	const queue = "projects/p/locations/l/queues/q"
	ctx := t.Context()
	clock := clockwork.NewFakeClockAt(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	emu, err := emulator.New(emulator.Config{DisableDelivery: true, Clock: clock, Queues: []emulator.QueueConfig{{Name: queue}}})
	require.NoError(t, err)
	t.Cleanup(func() { emu.Close() })
	dsn := pgtest.New(t)
	db, err := sql.Open("pgx", dsn)
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	box, err := pgbox.New(db, pgbox.Config{Clock: clock})
	require.NoError(t, err)
	require.NoError(t, box.Migrate(ctx))
	d, err := cloudtasks.NewDispatcher(ctx, box, &cloudtasks.Config{Project: "p", Location: "l", Queue: "q",
		EmulatorAddr: emu.Addr(), Clock: clock, NoRelay: true})
	require.NoError(t, err)
	t.Cleanup(func() { d.Close(context.Background()) })
	conn, err := pgx.Connect(ctx, dsn)
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close(context.Background()) })

	req := cloudtasks.DispatchRequest{RunID: "pgx", TaskKey: "load", Identity: naming.Attempt(1), Task: cloudtasks.Task{
		URL: "https://worker.example/load", Method: "PUT", Headers: map[string]string{"X-Tenant": "acme"}, Body: []byte(`{"rows":3}`),
		OIDC:         &cloudtasks.OIDCToken{ServiceAccountEmail: "relay@p.iam.gserviceaccount.com", Audience: "https://worker.example"},
		ScheduleTime: clock.Now().Add(time.Hour), DispatchDeadline: time.Minute,
	}}
	for _, commit := range []bool{false, true} {
		tx, err := conn.Begin(ctx)
		require.NoError(t, err)
		res, err := d.DispatchTx(ctx, pgxtx.Tx(tx), req)
		require.NoError(t, err)
		require.Equal(t, cloudtasks.OutcomeQueued, res.Outcome)
		if commit {
			require.NoError(t, tx.Commit(ctx))
		} else {
			require.NoError(t, tx.Rollback(ctx))
		}
	}
	st, err := d.Relay(ctx)
	require.NoError(t, err)
	require.Equal(t, cloudtasks.RelayStats{Claimed: 1, Created: 1}, st)
	rec, err := d.WaitOutcome(ctx, "dispatch:pgx:load:1")
	require.NoError(t, err)
	require.Equal(t, outbox.StatusCreated, rec.Status)
	require.Equal(t, int64(2), rec.Version, "one pending record, from the committed transaction")

	tasks := emu.Tasks(queue)
	require.Len(t, tasks, 1)
	task := tasks[0]
	hr := task.GetHttpRequest()
	require.Equal(t, "https://worker.example/load", hr.GetUrl())
	require.Equal(t, "PUT", hr.GetHttpMethod().String())
	require.Equal(t, `{"rows":3}`, string(hr.GetBody()))
	require.Equal(t, "acme", hr.GetHeaders()["X-Tenant"])
	require.Equal(t, "dispatch:pgx:load:1", hr.GetHeaders()[cloudtasks.HeaderIdempotencyKey])
	require.Equal(t, "relay@p.iam.gserviceaccount.com", hr.GetOidcToken().GetServiceAccountEmail())
	require.Equal(t, "https://worker.example", hr.GetOidcToken().GetAudience())
	require.Equal(t, clock.Now().Add(time.Hour), task.GetScheduleTime().AsTime())
	require.Equal(t, time.Minute, task.GetDispatchDeadline().AsDuration())
}
