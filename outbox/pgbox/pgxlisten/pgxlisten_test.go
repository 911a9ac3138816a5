package pgxlisten_test

import (
	"context"
	"database/sql"
	"os"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/ctdispatch/ctdispatch/cloudtasks"
	"github.com/ctdispatch/ctdispatch/cloudtasks/emulator"
	"github.com/ctdispatch/ctdispatch/internal/testtools/pgtest"
	"github.com/ctdispatch/ctdispatch/naming"
	"github.com/ctdispatch/ctdispatch/outbox"
	"github.com/ctdispatch/ctdispatch/outbox/pgbox"
	"github.com/ctdispatch/ctdispatch/outbox/pgbox/pgxlisten"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// marker is a payload the tests send themselves after what they test:
// PostgreSQL delivers notifications in commit order, so what arrives
// before the marker is all that the statements before it sent.
const marker = "marker"

// heard runs l on channel until the test ends and returns the payloads
// it delivers, "" for each time it starts listening.
func heard(t *testing.T, l *pgxlisten.Listener, channel string) <-chan string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	got := make(chan string, 100)
	done := make(chan error, 1)
	go func() { done <- l.Listen(ctx, channel, func(p string) { got <- p }) }()
	t.Cleanup(func() {
		cancel()
		require.ErrorIs(t, <-done, context.Canceled)
	})
	return got
}

// until returns what got delivers up to and including marker.
func until(t *testing.T, got <-chan string) []string {
	t.Helper()
	var out []string
	for {
		select {
		case p := <-got:
			out = append(out, p)
			if p == marker {
				return out
			}
		case <-time.After(time.Minute):
			t.Fatalf("no marker within a minute; heard %q", out)
		}
	}
}

// sendMarker commits a notification of marker on channel.
func sendMarker(t *testing.T, db *sql.DB, channel string) {
	t.Helper()
	_, err := db.ExecContext(t.Context(), `SELECT pg_notify($1, $2)`, channel, marker)
	require.NoError(t, err)
}

// A transaction that records several intents (dispatches, a timer, a
// cancel) sends one notification, when it commits; one that rolls back
// sends none; one within the NotifyGap of the one before sends none; a
// release of claimed intents sends one, and NotifyOutcomes the outcomes'
// one. An outbox with NoNotify sends none. About 2 s.
func TestOneNotificationPerCommit(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	dsn := pgtest.New(t)
	db, err := sql.Open("pgx", dsn)
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	box, err := pgbox.New(db, pgbox.Config{NotifyGap: -1})
	require.NoError(t, err)
	require.NoError(t, box.Migrate(ctx))
	quiet, err := pgbox.New(db, pgbox.Config{NoNotify: true})
	require.NoError(t, err)
	spaced, err := pgbox.New(db, pgbox.Config{NotifyGap: time.Hour})
	require.NoError(t, err)
	byDefault, err := pgbox.New(db, pgbox.Config{})
	require.NoError(t, err)
	require.Equal(t, "public.ctdispatch_intents", box.NoticeChannel())
	require.Empty(t, quiet.NoticeChannel())
	require.Equal(t, []time.Duration{0, time.Hour, pgbox.DefaultNotifyGap}, []time.Duration{box.NoticeGap(), spaced.NoticeGap(), byDefault.NoticeGap()})

	emu, err := emulator.New(emulator.Config{DisableDelivery: true})
	require.NoError(t, err)
	t.Cleanup(func() { emu.Close() })
	open := func(box outbox.Outbox) *cloudtasks.Dispatcher {
		d, err := cloudtasks.NewDispatcher(ctx, box, &cloudtasks.Config{Project: "p", Location: "l", Queue: "q", EmulatorAddr: emu.Addr(), NoRelay: true})
		require.NoError(t, err)
		t.Cleanup(func() { d.Close(context.Background()) })
		return d
	}
	d, dq, ds := open(box), open(quiet), open(spaced)
	l, err := pgxlisten.New(pgxlisten.Config{ConnString: dsn})
	require.NoError(t, err)
	got := heard(t, l, box.NoticeChannel())
	require.Equal(t, "", <-got, "listening")

	record := func(d *cloudtasks.Dispatcher, commit bool, keys ...string) {
		tx, err := db.BeginTx(ctx, nil)
		require.NoError(t, err)
		for _, k := range keys {
			_, err := d.DispatchTx(ctx, pgbox.SQLTx(tx), cloudtasks.DispatchRequest{RunID: "n", TaskKey: k, Identity: naming.Attempt(1),
				Task: cloudtasks.Task{URL: "https://worker.example/" + k}})
			require.NoError(t, err)
		}
		_, err = d.ScheduleTimerTx(ctx, pgbox.SQLTx(tx), cloudtasks.TimerRequest{Kind: naming.KindHeartbeat, RunID: "n", TaskKey: keys[0],
			At: time.Now().Add(time.Hour), Task: cloudtasks.Task{URL: "https://worker.example/check"}})
		require.NoError(t, err)
		_, err = d.CancelTx(ctx, pgbox.SQLTx(tx), "dispatch:n:"+keys[0]+":1", "")
		require.NoError(t, err)
		if commit {
			require.NoError(t, tx.Commit())
		} else {
			require.NoError(t, tx.Rollback())
		}
	}
	record(d, false, "a", "b", "c")
	sendMarker(t, db, box.NoticeChannel())
	require.Equal(t, []string{marker}, until(t, got), "a rolled-back transaction wakes nobody")

	record(d, true, "a", "b", "c")
	sendMarker(t, db, box.NoticeChannel())
	require.Equal(t, []string{outbox.NoticeIntents, marker}, until(t, got), "one notification for the transaction's five intents")

	record(dq, true, "d", "e")
	sendMarker(t, db, box.NoticeChannel())
	require.Equal(t, []string{marker}, until(t, got), "NoNotify sends none")

	record(ds, true, "s1")
	record(ds, true, "s2")
	sendMarker(t, db, box.NoticeChannel())
	require.Equal(t, []string{outbox.NoticeIntents, marker}, until(t, got), "the second transaction fell within the gap of the first")

	claimed, err := box.ClaimIntents(ctx, []string{"projects/p/locations/l/queues/q"}, 20, time.Hour)
	require.NoError(t, err)
	require.Len(t, claimed, 11, "per transaction: its dispatches, a timer and a cancel, which replaced the first dispatch")
	require.NoError(t, box.ReleaseIntents(ctx, claimed[:2]))
	require.NoError(t, box.ReleaseIntents(ctx, claimed[:2]), "released already: nothing to release, nothing sent")
	require.NoError(t, box.NotifyOutcomes(ctx))
	require.NoError(t, quiet.NotifyOutcomes(ctx))
	sendMarker(t, db, box.NoticeChannel())
	require.Equal(t, []string{outbox.NoticeIntents, outbox.NoticeOutcomes, marker}, until(t, got))
	again, err := box.ClaimIntents(ctx, []string{"projects/p/locations/l/queues/q"}, 20, time.Hour)
	require.NoError(t, err)
	require.Equal(t, []string{claimed[0].ID, claimed[1].ID}, []string{again[0].ID, again[1].ID}, "the released intents are claimable at once")
	require.Len(t, again, 2)
}

// A listener whose connection the server ends (pg_terminate_backend)
// connects again, says so with "", and delivers what is sent after. About
// 1 s.
func TestListenerReconnects(t *testing.T) {
	t.Parallel()
	dsn := pgtest.New(t)
	db, err := sql.Open("pgx", dsn)
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	l, err := pgxlisten.New(pgxlisten.Config{ConnString: dsn, ReconnectInitial: time.Millisecond, ReconnectMax: 10 * time.Millisecond})
	require.NoError(t, err)
	const channel = "a.b_c"
	got := heard(t, l, channel)
	require.Equal(t, "", <-got)
	sendMarker(t, db, channel)
	require.Equal(t, []string{marker}, until(t, got))

	var ended bool
	require.NoError(t, db.QueryRowContext(t.Context(), `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
		WHERE datname = current_database() AND query = 'LISTEN "a.b_c"'`).Scan(&ended))
	require.True(t, ended)
	require.Equal(t, "", <-got, "listening again")
	sendMarker(t, db, channel)
	require.Equal(t, []string{marker}, until(t, got))
}

// New names the field at fault; Listen refuses an empty channel.
func TestListenerConfig(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		cfg  pgxlisten.Config
		want string
	}{
		{"neither", pgxlisten.Config{}, "pgxlisten: Config.ConnString and Config.ConnConfig: set exactly one (ConnString false, ConnConfig false)"},
		{"unparsable", pgxlisten.Config{ConnString: "postgres://h:notaport/db"}, "pgxlisten: Config.ConnString: "},
		{"negative", pgxlisten.Config{ConnString: "host=/tmp", ReconnectInitial: -time.Second}, "pgxlisten: Config.ReconnectInitial -1s is negative"},
		{"inverted", pgxlisten.Config{ConnString: "host=/tmp", ReconnectInitial: time.Minute}, "pgxlisten: Config.ReconnectMax 5s is below ReconnectInitial (1m0s)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := pgxlisten.New(c.cfg)
			require.ErrorContains(t, err, c.want)
		})
	}
	l, err := pgxlisten.New(pgxlisten.Config{ConnString: "host=/nonexistent"})
	require.NoError(t, err)
	require.EqualError(t, l.Listen(t.Context(), "", func(string) {}),
		"pgxlisten: listen: the channel is empty (the outbox sends no notifications: pgbox.Config.NoNotify)")
}

// A dispatcher given a Listener over an outbox that sends no
// notifications is refused, naming the field.
func TestListenerNeedsANotifyingOutbox(t *testing.T) {
	t.Parallel()
	l, err := pgxlisten.New(pgxlisten.Config{ConnString: "host=/nonexistent"})
	require.NoError(t, err)
	_, err = cloudtasks.NewDispatcher(t.Context(), outbox.NewMemory(clockwork.NewRealClock()), &cloudtasks.Config{
		Project: "p", Location: "l", Queue: "q", EmulatorAddr: "127.0.0.1:1", Listener: l})
	require.ErrorIs(t, err, cloudtasks.ErrInvalidConfig)
	require.EqualError(t, err, `cloudtasks: Config.Listener "*pgxlisten.Listener" is set, but the outbox (*outbox.Memory) sends no notifications to listen for; it needs one that implements outbox.Notices (outbox/pgbox without Config.NoNotify)`)
}
