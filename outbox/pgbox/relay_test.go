package pgbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"sync/atomic"
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

// listener returns a listener on the world's database that reconnects
// within milliseconds.
func (w *txWorld) listener(t testing.TB) *pgxlisten.Listener {
	t.Helper()
	l, err := pgxlisten.New(pgxlisten.Config{ConnString: w.dsn, ReconnectInitial: time.Millisecond, ReconnectMax: 20 * time.Millisecond})
	require.NoError(t, err)
	return l
}

// commitIntents records dispatches of keys in one committed transaction
// of d's and returns their IDs.
func commitIntents(t *testing.T, db *sql.DB, d *cloudtasks.Dispatcher, keys ...string) []string {
	t.Helper()
	var ids []string
	inTx(t, db, true, func(tx outbox.Tx) {
		for _, k := range keys {
			res, err := d.DispatchTx(t.Context(), tx, txRequest(k, k))
			require.NoError(t, err)
			ids = append(ids, res.ID)
		}
	})
	return ids
}

// intentClaims counts the intents of the world's schema: claimed (with
// an unexpired claim) and not.
func intentClaims(t *testing.T, db *sql.DB, opts pgbox.Config) (claimed, free int) {
	t.Helper()
	require.NoError(t, db.QueryRowContext(t.Context(), `SELECT count(*) FILTER (WHERE claim_expires > now()), count(*) FILTER (WHERE claim_expires IS NULL OR claim_expires <= now())
		FROM `+pgbox.IntentTableName(opts)).Scan(&claimed, &free))
	return claimed, free
}

// outcomes returns the statuses of id's records after the pending ones.
func outcomes(t *testing.T, box *pgbox.Outbox, id string) []outbox.Status {
	t.Helper()
	hist, err := box.Lookup(t.Context(), outbox.Query{ID: id, History: true})
	require.NoError(t, err)
	var out []outbox.Status
	for _, r := range hist {
		if r.Status != outbox.StatusPending {
			out = append(out, r.Status)
		}
	}
	return out
}

// With a listener, a relay that never polls (RelayInterval of an hour)
// creates a task at its transaction's commit, and a waiter in another
// dispatcher, which never polls either, hears of the outcome. When both
// listening connections are killed (pg_terminate_backend), the intents
// committed meanwhile are not lost: each listener, back, has its
// dispatcher look at once. The test starts once both listeners listen
// (each has told its dispatcher so), whatever the machine's speed. About
// 2 s.
func TestRelayWokenByTheCommit(t *testing.T) {
	t.Parallel()
	w := newTxWorld(t, clockwork.NewRealClock())
	w.opts.NotifyGap = -1 // every transaction notifies
	never := cloudtasks.Config{RelayInterval: time.Hour}
	relayCfg, waiterCfg := never, never
	relayListener, waiterListener := newHeardListener(w.listener(t)), newHeardListener(w.listener(t))
	relayCfg.Listener = relayListener
	waiterCfg.Listener, waiterCfg.NoRelay = waiterListener, true
	w.dispatcher(t, relayCfg)
	waiter, box := w.dispatcher(t, waiterCfg)
	relayListener.await(t, "")
	waiterListener.await(t, "")
	wait := func(ids ...string) {
		t.Helper()
		for _, id := range ids {
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			rec, err := waiter.WaitOutcome(ctx, id)
			cancel()
			require.NoError(t, err)
			require.Equal(t, outbox.StatusCreated, rec.Status, id)
		}
	}
	wait(commitIntents(t, w.db, waiter, "first")...)

	var ended int
	require.NoError(t, w.db.QueryRowContext(t.Context(), `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE datname = current_database() AND query LIKE 'LISTEN %'`).Scan(&ended))
	require.Equal(t, 2, ended, "the relay's and the waiter's listeners")
	wait(commitIntents(t, w.db, waiter, "during", "the", "gap")...)
	require.Equal(t, 4, w.emu.TaskCount())
	require.Equal(t, int64(4), w.calls.Load())
	require.Equal(t, []outbox.Status{outbox.StatusCreated}, outcomes(t, box, "dispatch:tx:gap:1"))
}

// heardListener passes a listener's notifications to the dispatcher and
// then tells the test of each on heard, once the dispatcher is done with
// it (a relay's nudge and its look again are set): "" when it listens. A
// test that hears more than heard holds (100) reads them.
type heardListener struct {
	outbox.Listener
	heard chan string
}

func newHeardListener(l outbox.Listener) heardListener {
	return heardListener{Listener: l, heard: make(chan string, 100)}
}

func (h heardListener) Listen(ctx context.Context, channel string, notify func(string)) error {
	return h.Listener.Listen(ctx, channel, func(payload string) {
		notify(payload)
		h.heard <- payload
	})
}

// await returns once the dispatcher has heard payload, or fails the test
// after a minute.
func (h heardListener) await(t *testing.T, payload string) {
	t.Helper()
	timeout := time.After(time.Minute)
	for {
		select {
		case p := <-h.heard:
			if p == payload {
				return
			}
		case <-timeout:
			t.Fatalf("the dispatcher did not hear %q within a minute", payload)
		}
	}
}

// taskNames returns the names in txQueue of the tasks of ids.
func taskNames(t *testing.T, ids []string) []string {
	t.Helper()
	names := make([]string, len(ids))
	for i, id := range ids {
		nid, err := naming.Parse(id)
		require.NoError(t, err)
		names[i] = nid.TaskName(txQueue)
	}
	return names
}

// A transaction that records intents within the notify gap of another
// sends no notification of its own; the relay woken by the other's looks
// again one gap later and finds them, though it never polls. Keyed to
// events, not to the machine's speed: the relay listens before the first
// transaction commits; the gap is an hour of real time (the outbox's
// clock for it), so the second transaction falls within it however slow
// the run; and the relay's look again runs on a fake clock of its own,
// which the test moves by the gap only once the relay has heard the first
// notification and the second transaction has committed. Its RelayInterval (a thousand hours on that clock) never
// comes: without the second look nothing finds them, and the gate waits
// out its minute. About 1 s.
func TestRelayLooksAgainAfterTheGap(t *testing.T) {
	t.Parallel()
	const gap = time.Hour
	w := newTxWorld(t, clockwork.NewRealClock())
	w.opts.NotifyGap = gap
	w.gate = newGate()
	w.gate.open() // holds nothing; tells of each CreateTask call
	relayClock := clockwork.NewFakeClockAt(time.Now())
	listener := newHeardListener(w.listener(t))
	relay, _ := w.dispatcher(t, cloudtasks.Config{Listener: listener, RelayInterval: 1000 * time.Hour, Clock: relayClock})
	writer, _ := w.dispatcher(t, cloudtasks.Config{NoRelay: true})
	listener.await(t, "") // listening: the first commit's notification reaches the relay

	first := commitIntents(t, w.db, writer, "notifies")
	listener.await(t, outbox.NoticeIntents)
	require.Equal(t, taskNames(t, first), w.gate.await(t, 1))
	within := commitIntents(t, w.db, writer, "within", "the-gap")
	relayClock.Advance(gap)
	require.ElementsMatch(t, taskNames(t, within), w.gate.await(t, 2), "the relay looked again")
	for _, id := range append(first, within...) {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		rec, err := relay.WaitOutcome(ctx, id)
		cancel()
		require.NoError(t, err)
		require.Equal(t, outbox.StatusCreated, rec.Status, id)
	}
	require.Equal(t, int64(3), w.calls.Load())
}

// An intent whose transaction sent no notification (an outbox with
// NoNotify; as with a pooler that delivers none) is found by the
// listening relay's poll: nothing is lost. About 1 s.
func TestRelayPollsForWhatNoNotificationAnnounced(t *testing.T) {
	t.Parallel()
	w := newTxWorld(t, clockwork.NewRealClock())
	w.dispatcher(t, cloudtasks.Config{Listener: w.listener(t), RelayInterval: 50 * time.Millisecond})
	quietOpts := w.opts
	quietOpts.NoNotify = true
	quiet, err := pgbox.New(w.db, quietOpts)
	require.NoError(t, err)
	writer, err := cloudtasks.NewDispatcher(t.Context(), quiet, &cloudtasks.Config{Project: "p", Location: "l", Queue: "q",
		EmulatorAddr: w.emu.Addr(), NoRelay: true, RelayInterval: 10 * time.Millisecond})
	require.NoError(t, err)
	t.Cleanup(func() { writer.Close(context.Background()) })
	for _, id := range commitIntents(t, w.db, writer, "unannounced", "ones") {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		rec, err := writer.WaitOutcome(ctx, id)
		cancel()
		require.NoError(t, err)
		require.Equal(t, outbox.StatusCreated, rec.Status)
	}
	require.Equal(t, int64(2), w.calls.Load())
}

// drainWorld commits six intents and starts a relay that works on two at
// a time, both held at the gate: mid-batch, with four claimed and not
// started. The relay's outbox is wrap's when given.
func drainWorld(t *testing.T, cfg cloudtasks.Config, wrap func(*pgbox.Outbox) outbox.Outbox) (w *txWorld, relay, other *cloudtasks.Dispatcher, ids []string) {
	t.Helper()
	w = newTxWorld(t, clockwork.NewRealClock())
	w.gate = newGate()
	t.Cleanup(w.gate.open)
	other, _ = w.dispatcher(t, cloudtasks.Config{NoRelay: true})
	ids = commitIntents(t, w.db, other, "t0", "t1", "t2", "t3", "t4", "t5")
	cfg.RelayConcurrency, cfg.RelayInterval = 2, time.Hour
	w.wrap = wrap
	relay, _ = w.dispatcher(t, cfg)
	held := w.gate.await(t, 2)
	require.Len(t, held, 2)
	claimed, free := intentClaims(t, w.db, w.opts)
	require.Equal(t, [2]int{6, 0}, [2]int{claimed, free}, "the relay claimed the batch")
	return w, relay, other, ids
}

// Close drains a relay mid-batch: it releases at once the intents it
// claimed and did not start, lets the two in flight finish, and returns
// nil with nothing left claimed. Another relay then creates the rest:
// every task once. About 2 s.
func TestRelayCloseDrains(t *testing.T) {
	t.Parallel()
	w, relay, other, ids := drainWorld(t, cloudtasks.Config{}, nil)
	closed := make(chan error, 1)
	go func() { closed <- relay.Close(context.Background()) }()
	require.Eventually(t, func() bool {
		claimed, free := intentClaims(t, w.db, w.opts)
		return claimed == 2 && free == 4
	}, time.Minute, 5*time.Millisecond, "the four not started are released while the two in flight run")
	w.gate.open()
	require.NoError(t, <-closed)
	claimed, free := intentClaims(t, w.db, w.opts)
	require.Equal(t, [2]int{0, 4}, [2]int{claimed, free}, "nothing left claimed")
	require.Equal(t, 2, w.emu.TaskCount(), "the two in flight finished")

	st, err := other.Relay(t.Context())
	require.NoError(t, err)
	require.Equal(t, cloudtasks.RelayStats{Claimed: 4, Created: 4}, st)
	require.Equal(t, 6, w.emu.TaskCount())
	require.Equal(t, int64(6), w.calls.Load(), "one call per task")
	box, err := pgbox.New(w.db, w.opts)
	require.NoError(t, err)
	for _, id := range ids {
		require.Equal(t, []outbox.Status{outbox.StatusCreated}, outcomes(t, box, id), id)
	}
}

// slowRelease is an outbox whose ReleaseIntents first waits for before:
// a database slow to answer.
type slowRelease struct {
	*pgbox.Outbox
	before func() error
}

func (s slowRelease) ReleaseIntents(ctx context.Context, ins []outbox.Intent) error {
	if err := s.before(); err != nil {
		return err
	}
	return s.Outbox.ReleaseIntents(ctx, ins)
}

// A relay whose calls in flight outlast Config.RelayDrainTimeout still
// releases what it did not start, even when the database answers the
// release only after that bound (here it takes four times the bound, a
// simulated slow server: the release has a bound of its own, so the
// result does not depend on the machine's speed), and Close's error
// names the intents left, when their claims expire and who takes them
// then. About 1 s.
func TestRelayCloseNamesWhatTheDrainLeft(t *testing.T) {
	t.Parallel()
	const bound = 50 * time.Millisecond
	slowly := func() error { time.Sleep(4 * bound); return nil }
	w, relay, _, ids := drainWorld(t, cloudtasks.Config{RelayDrainTimeout: bound, RelayClaim: time.Hour},
		func(box *pgbox.Outbox) outbox.Outbox { return slowRelease{Outbox: box, before: slowly} })
	err := relay.Close(context.Background())
	require.Error(t, err)
	require.Regexp(t, `^cloudtasks: close: the relay's drain left claims: 2 intents were still being created or cancelled when it ended `+
		`\(Config.RelayDrainTimeout 50ms, or Close's context\): (`+ids[0]+`, `+ids[1]+`|`+ids[1]+`, `+ids[0]+`); `+
		`unless finished meanwhile they stay claimed until \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ, when another relay takes them `+
		`\(its create finds a task this one made; Recover leaves IDs with an intent to the relays\)$`, err.Error())
	claimed, free := intentClaims(t, w.db, w.opts)
	require.Equal(t, [2]int{2, 4}, [2]int{claimed, free}, "the two in flight stay claimed; the rest are released")
}

// A database restart under a live relay leaves it no claim to wait out:
// its six creates, held in flight while the server goes down, succeed,
// and their outcomes cannot be recorded; once the server is back the
// relay takes those intents again at once, instead of after its claim
// (an hour here), and records already_existed: each task exists once,
// each ID has one outcome. About 5 s (a cluster of its own, crashed and
// started again).
func TestRelayTakesBackItsClaimsAfterADatabaseRestart(t *testing.T) {
	t.Parallel()
	cluster := pgtest.OwnCluster(t)
	dsn, _, err := cluster.CreateDatabase(t.Context())
	require.NoError(t, err)
	emu, err := emulator.New(emulator.Config{DisableDelivery: true, Queues: []emulator.QueueConfig{{Name: txQueue}}})
	require.NoError(t, err)
	t.Cleanup(func() { emu.Close() })
	w := &txWorld{emu: emu, dsn: dsn, clock: clockwork.NewRealClock(), opts: pgbox.Config{Schema: "restart"}, gate: newGate()}
	t.Cleanup(w.gate.open)
	w.db = w.open(t)
	require.NoError(t, pgbox.Migrate(t.Context(), w.db, w.opts))
	left := &leftCounter{}
	w.dispatcher(t, cloudtasks.Config{Listener: w.listener(t), RelayClaim: time.Hour, RelayInterval: 100 * time.Millisecond, Logger: slog.New(left)})
	writer, _ := w.dispatcher(t, cloudtasks.Config{NoRelay: true})
	keys := make([]string, 6)
	for i := range keys {
		keys[i] = fmt.Sprintf("r%d", i)
	}
	ids := commitIntents(t, w.db, writer, keys...)
	w.gate.await(t, len(ids))

	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	require.NoError(t, cluster.Crash(ctx))
	w.gate.open()
	require.Eventually(t, func() bool { return left.n.Load() == int64(len(ids)) }, time.Minute, 5*time.Millisecond,
		"the relay created the tasks and could not record them")
	require.NoError(t, cluster.StartAgain(ctx))
	probe := w.open(t) // a pool of its own, born after the restart
	require.Eventually(t, func() bool {
		claimed, free := intentClaims(t, probe, w.opts)
		return claimed == 0 && free == 0
	}, time.Minute, 20*time.Millisecond, "every intent finished well within the relay's one-hour claim")
	require.Equal(t, len(ids), emu.TaskCount())
	require.Equal(t, int64(2*len(ids)), w.calls.Load(), "each create once more, answered AlreadyExists")
	fresh, err := pgbox.New(probe, w.opts)
	require.NoError(t, err)
	for _, id := range ids {
		require.Equal(t, []outbox.Status{outbox.StatusAlreadyExisted}, outcomes(t, fresh, id), id)
	}
}

// leftCounter is a slog handler that counts the relay's "intent left for
// a later pass" warnings.
type leftCounter struct{ n atomic.Int64 }

func (c *leftCounter) Enabled(context.Context, slog.Level) bool { return true }
func (c *leftCounter) Handle(_ context.Context, r slog.Record) error {
	if r.Message == "relay: intent left for a later pass" {
		c.n.Add(1)
	}
	return nil
}
func (c *leftCounter) WithAttrs([]slog.Attr) slog.Handler { return c }
func (c *leftCounter) WithGroup(string) slog.Handler      { return c }
