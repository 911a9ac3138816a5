package pgbox_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/ctdispatch/ctdispatch/cloudtasks"
	"github.com/ctdispatch/ctdispatch/internal/testtools/pgtest"
	"github.com/ctdispatch/ctdispatch/outbox"
	"github.com/ctdispatch/ctdispatch/outbox/pgbox"
)

// notMigrated is the hint every call on a database without the tables
// ends with.
const notMigrated = `the outbox tables do not exist; create them with "ctdispatch migrate --outbox postgres://…" or pgbox.Migrate`

// Check names what Migrate has not made: every table (said once), one
// table, or the columns a later Migrate added; nil once migrated.
func TestCheckNamesWhatIsMissing(t *testing.T) {
	t.Parallel()
	db := pgtest.Open(t)
	ctx := t.Context()
	schema := fmt.Sprintf("s%d", schemas.Add(1))
	box, err := pgbox.New(db, pgbox.Config{Schema: schema})
	require.NoError(t, err)
	for _, c := range []struct {
		name, setup, want string
	}{
		{"nothing made", "", "pgbox: " + notMigrated},
		{"migrated", "MIGRATE", ""},
		{"a table dropped", `DROP TABLE "` + schema + `"."ctdispatch_intents"`,
			`pgbox: "` + schema + `"."ctdispatch_intents" missing: ` + notMigrated},
		{"a column dropped", `MIGRATE; ALTER TABLE "` + schema + `"."ctdispatch_timers" DROP COLUMN trace_id`,
			`pgbox: columns "` + schema + `"."ctdispatch_timers".trace_id missing (the tables were made by an older Migrate); add them with "ctdispatch migrate --outbox postgres://…" or pgbox.Migrate`},
	} {
		for s := range strings.SplitSeq(c.setup, "; ") {
			switch s {
			case "":
			case "MIGRATE":
				require.NoError(t, box.Migrate(ctx))
			default:
				_, err := db.ExecContext(ctx, s)
				require.NoError(t, err)
			}
		}
		err := box.Check(ctx)
		if c.want == "" {
			require.NoError(t, err, c.name)
			continue
		}
		require.EqualError(t, err, c.want, c.name)
		require.ErrorIs(t, err, outbox.ErrNotReady, c.name)
	}
}

// A dispatcher made on a database that was never migrated is refused at
// once with the migrate hint; with Config.SkipOutboxCheck it is made, its
// calls fail until the tables exist, and then work. A database that
// cannot be reached gives no answer: the dispatcher is made, and its
// calls fail closed.
func TestNewDispatcherChecksTheTables(t *testing.T) {
	t.Parallel()
	clock := clockwork.NewFakeClockAt(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	w := newTxWorld(t, clock)
	opts := pgbox.Config{Schema: fmt.Sprintf("s%d", schemas.Add(1)), Clock: clock}
	box, err := pgbox.New(w.db, opts)
	require.NoError(t, err)
	cfg := cloudtasks.Config{Project: "p", Location: "l", Queue: "q", EmulatorAddr: w.emu.Addr(), Clock: clock}
	_, err = cloudtasks.NewDispatcher(t.Context(), box, &cfg)
	require.EqualError(t, err, "cloudtasks: the outbox cannot keep records (Config.SkipOutboxCheck starts the dispatcher anyway): pgbox: "+notMigrated)

	cfg.SkipOutboxCheck = true
	d, err := cloudtasks.NewDispatcher(t.Context(), box, &cfg)
	require.NoError(t, err)
	t.Cleanup(func() { d.Close(context.Background()) })
	_, err = d.Dispatch(t.Context(), txRequest("early", "b"))
	require.ErrorIs(t, err, cloudtasks.ErrOutboxUnavailable)
	require.ErrorContains(t, err, notMigrated)

	require.NoError(t, box.Migrate(t.Context()))
	res, err := d.Dispatch(t.Context(), txRequest("early", "b"))
	require.NoError(t, err)
	require.Equal(t, cloudtasks.OutcomeCreated, res.Outcome)

	closed := w.open(t)
	require.NoError(t, closed.Close())
	unreachable, err := pgbox.New(closed, opts)
	require.NoError(t, err)
	require.Error(t, unreachable.Check(t.Context()))
	cfg.SkipOutboxCheck = false
	d, err = cloudtasks.NewDispatcher(t.Context(), unreachable, &cfg)
	require.NoError(t, err)
	t.Cleanup(func() { d.Close(context.Background()) })
	_, err = d.Dispatch(t.Context(), txRequest("unreachable", "b"))
	require.ErrorIs(t, err, cloudtasks.ErrOutboxUnavailable)
}

// cutter is a connection to the server that, once armed, sends the next
// statement that inserts, lets the server run it to its end (its
// ReadyForQuery: committed), and then drops the connection instead of
// passing the answer on: a commit whose acknowledgement was lost.
type cutter struct {
	net.Conn
	armed   *atomic.Bool
	cutting atomic.Bool
	written chan struct{} // closed once the cut statement is written
	buf     []byte
}

func (c *cutter) Write(p []byte) (int, error) {
	// QueryExecModeExec: a statement is one write, Parse (with its text)
	// to Sync.
	if !bytes.Contains(p, []byte("INSERT INTO")) || !c.armed.CompareAndSwap(true, false) {
		return c.Conn.Write(p)
	}
	c.written = make(chan struct{})
	c.cutting.Store(true)
	defer close(c.written)
	return c.Conn.Write(p)
}

func (c *cutter) Read(p []byte) (int, error) {
	if !c.cutting.Load() {
		return c.Conn.Read(p)
	}
	// pgx reads in the background while it writes; the lost answer is
	// reported once the write is over, as a connection that died after it.
	defer func() { <-c.written }()
	chunk := make([]byte, 4096)
	for {
		// Messages are a type byte and a length that counts itself.
		for len(c.buf) >= 5 {
			n := 1 + int(binary.BigEndian.Uint32(c.buf[1:5]))
			if len(c.buf) < n {
				break
			}
			if c.buf[0] == 'Z' {
				c.Conn.Close()
				return 0, io.ErrUnexpectedEOF
			}
			c.buf = c.buf[n:]
		}
		n, err := c.Conn.Read(chunk)
		c.buf = append(c.buf, chunk[:n]...)
		if err != nil {
			return 0, err
		}
	}
}

// After a lost commit acknowledgement of the pending record, Dispatch
// says that whether the record is kept is unknown, not that it could not
// be recorded: the record did commit, no Cloud Tasks call was made, and
// the error still matches ErrOutboxUnavailable. The repeat creates the
// task once. A statement the server refused before its commit (a table
// gone) stays "could not record". About 1 s.
func TestLostCommitAcknowledgement(t *testing.T) {
	t.Parallel()
	clock := clockwork.NewFakeClockAt(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	w := newTxWorld(t, clock)
	cfg, err := pgx.ParseConfig(w.dsn)
	require.NoError(t, err)
	cfg.DefaultQueryExecMode = pgx.QueryExecModeExec
	var armed atomic.Bool
	dial := cfg.DialFunc
	cfg.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &cutter{Conn: conn, armed: &armed}, nil
	}
	db := stdlib.OpenDB(*cfg)
	t.Cleanup(func() { db.Close() })
	box, err := pgbox.New(db, w.opts)
	require.NoError(t, err)
	cl, err := w.emu.NewClient(t.Context())
	require.NoError(t, err)
	t.Cleanup(func() { cl.Close() })
	d, err := cloudtasks.NewDispatcher(t.Context(), box, &cloudtasks.Config{Project: "p", Location: "l", Queue: "q", Clock: clock,
		Client: countingClient{Client: cl, n: &w.calls}, NoRelay: true})
	require.NoError(t, err)
	t.Cleanup(func() { d.Close(context.Background()) })

	const id = "dispatch:tx:lost-ack:1"
	armed.Store(true)
	_, err = d.Dispatch(t.Context(), txRequest("lost-ack", "b"))
	require.False(t, armed.Load(), "the pending record's statement was cut")
	require.ErrorIs(t, err, cloudtasks.ErrOutboxUnavailable)
	require.ErrorIs(t, err, cloudtasks.ErrIndeterminate)
	require.ErrorIs(t, err, outbox.ErrKeptUnknown)
	var ie *cloudtasks.IndeterminateError
	require.ErrorAs(t, err, &ie)
	require.Equal(t, cloudtasks.UnknownPendingRecord, ie.Unknown)
	var oe *cloudtasks.OutboxError
	require.ErrorAs(t, err, &oe)
	require.Equal(t, []any{cloudtasks.OpRecordPending, true}, []any{oe.Op, oe.BeforeCall})
	require.EqualError(t, err, "cloudtasks: "+id+": outcome indeterminate (pending_record unknown): unknown whether the outbox could record the pending state, whose answer was lost (the Cloud Tasks call was not made): pgbox: append dispatch_outbox "+id+": unexpected EOF (outbox: whether the record was kept is unknown)")
	require.Zero(t, w.calls.Load(), "no Cloud Tasks call")
	rec, ok, err := box.Latest(t.Context(), outbox.TableDispatch, id)
	require.NoError(t, err)
	require.True(t, ok, "the record committed")
	require.Equal(t, outbox.StatusPending, rec.Status)

	res, err := d.Dispatch(t.Context(), txRequest("lost-ack", "b"))
	require.NoError(t, err)
	require.Equal(t, cloudtasks.OutcomeCreated, res.Outcome)
	require.Equal(t, int64(1), w.calls.Load())

	_, err = db.ExecContext(t.Context(), `ALTER TABLE "`+w.opts.Schema+`"."ctdispatch_dispatch_outbox" RENAME TO gone`)
	require.NoError(t, err)
	_, err = d.Dispatch(t.Context(), txRequest("refused", "b"))
	require.ErrorIs(t, err, cloudtasks.ErrOutboxUnavailable)
	require.False(t, errors.Is(err, cloudtasks.ErrIndeterminate), "refused before its commit: not kept")
	require.EqualError(t, err, "cloudtasks: dispatch:tx:refused:1: outbox could not record the pending state (the Cloud Tasks call was not made): pgbox: append dispatch_outbox dispatch:tx:refused:1: "+notMigrated)
}
