package worker

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"
)

// Time budget: about 2 s (a database per test; the busy test waits out
// two 100 ms lock timeouts on purpose).

// inboxUnderTest is one implementation with what the suite needs to look
// inside it.
type inboxUnderTest struct {
	inbox Inbox
	// effects counts the work's committed writes: rows in the effects
	// table for SQL, calls that returned nil for memory.
	effects func() int
	// work writes one effect through the inbox's transaction.
	work     func(ctx context.Context, tx *sql.Tx) error
	finished func(key string) (Outcome, bool)
	cleanup  func(ctx context.Context, olderThan time.Duration) (int64, error)
	// age makes key look finished that long ago.
	age func(key string, by time.Duration)
}

func memoryUnderTest(*testing.T) inboxUnderTest {
	m := NewMemoryInbox()
	m.now = func() time.Time { return time.Date(2026, 11, 25, 0, 0, 0, 0, time.UTC) }
	var n int
	return inboxUnderTest{
		inbox: m, effects: func() int { return n },
		work:     func(context.Context, *sql.Tx) error { n++; return nil },
		finished: m.Finished, cleanup: m.Cleanup,
		age: func(key string, by time.Duration) {
			m.mu.Lock()
			defer m.mu.Unlock()
			e := m.finished[key]
			e.at = e.at.Add(-by)
			m.finished[key] = e
		},
	}
}

func sqlUnderTest(t *testing.T) inboxUnderTest {
	db, in := openDB(t)
	return inboxUnderTest{
		inbox: in,
		effects: func() int {
			rows, _ := effects(t, db)
			return rows
		},
		work: func(ctx context.Context, tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, `INSERT INTO effects (id, pid) VALUES ('x', 1)`)
			return err
		},
		finished: func(key string) (Outcome, bool) {
			o, ok, err := in.Finished(context.Background(), key)
			require.NoError(t, err)
			return o, ok
		},
		cleanup: in.Cleanup,
		age: func(key string, by time.Duration) {
			_, err := db.Exec(`UPDATE ctdispatch_inbox SET finished_at = finished_at - make_interval(secs => $2) WHERE id = $1`, key, by.Seconds())
			require.NoError(t, err)
		},
	}
}

// The same contract holds for both inboxes.
func TestInboxContract(t *testing.T) {
	t.Parallel()
	for name, make := range map[string]func(*testing.T) inboxUnderTest{"memory": memoryUnderTest, "sql": sqlUnderTest} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			t.Run("done once, then duplicate", func(t *testing.T) {
				u := make(t)
				calls := 0
				work := func(ctx context.Context, tx *sql.Tx) error { calls++; return u.work(ctx, tx) }
				for i, want := range []Outcome{OutcomeDone, OutcomeDuplicate, OutcomeDuplicate} {
					got, err := u.inbox.Process(ctx, "k", time.Second, work)
					require.NoError(t, err, i)
					require.Equal(t, want, got, i)
				}
				require.Equal(t, 1, calls)
				require.Equal(t, 1, u.effects())
				o, ok := u.finished("k")
				require.True(t, ok)
				require.Equal(t, OutcomeDone, o)
			})
			t.Run("a retryable error undoes the work and leaves the key open", func(t *testing.T) {
				u := make(t)
				boom := errors.New("boom")
				_, err := u.inbox.Process(ctx, "k", time.Second, func(ctx context.Context, tx *sql.Tx) error {
					if err := u.work(ctx, tx); err != nil {
						return err
					}
					return boom
				})
				require.ErrorIs(t, err, boom)
				_, ok := u.finished("k")
				require.False(t, ok)
				if name == "sql" {
					require.Equal(t, 0, u.effects(), "rolled back")
				}
				got, err := u.inbox.Process(ctx, "k", time.Second, u.work)
				require.NoError(t, err)
				require.Equal(t, OutcomeDone, got)
			})
			t.Run("a permanent error undoes the work and finishes the key as failed", func(t *testing.T) {
				u := make(t)
				got, err := u.inbox.Process(ctx, "k", time.Second, func(ctx context.Context, tx *sql.Tx) error {
					if err := u.work(ctx, tx); err != nil {
						return err
					}
					return Permanent(errors.New("no such order\x00\xff"))
				})
				require.NoError(t, err)
				require.Equal(t, OutcomeFailed, got)
				o, ok := u.finished("k")
				require.True(t, ok)
				require.Equal(t, OutcomeFailed, o)
				if name == "sql" {
					require.Equal(t, 0, u.effects(), "rolled back")
				}
				got, err = u.inbox.Process(ctx, "k", time.Second, u.work)
				require.NoError(t, err)
				require.Equal(t, OutcomeDuplicate, got)
			})
			t.Run("cleanup keeps keys for 31 days", func(t *testing.T) {
				u := make(t)
				_, err := u.cleanup(ctx, 30*24*time.Hour)
				require.EqualError(t, err, "worker: cleanup age 720h0m0s is below MinRetention (744h0m0s, 31 days): a task can still deliver its key until then")
				for _, k := range []string{"old", "new"} {
					_, err := u.inbox.Process(ctx, k, time.Second, u.work)
					require.NoError(t, err)
				}
				u.age("old", 32*24*time.Hour)
				n, err := u.cleanup(ctx, MinRetention)
				require.NoError(t, err)
				require.Equal(t, int64(1), n)
				_, ok := u.finished("old")
				require.False(t, ok)
				_, ok = u.finished("new")
				require.True(t, ok)
			})
		})
	}
}

// While one transaction holds a key, another delivery waits at most the
// wait given (PostgreSQL's lock_timeout), then gets ErrBusy; once the
// holder commits the key is a duplicate, and had it rolled back the key
// would be free.
func TestSQLInboxWaitsForTheHolder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, in := openDB(t)
	for _, end := range []string{"commit", "rollback"} {
		holder, err := db.BeginTx(ctx, nil)
		require.NoError(t, err)
		_, err = holder.ExecContext(ctx, `INSERT INTO ctdispatch_inbox (id, status) VALUES ($1, 'done')`, end)
		require.NoError(t, err)
		called := false
		_, err = in.Process(ctx, end, 100*time.Millisecond, func(context.Context, *sql.Tx) error { called = true; return nil })
		require.ErrorIs(t, err, ErrBusy)
		require.EqualError(t, err, "another delivery of this key is in progress: key "+end+" still held after 100ms")
		require.False(t, called)
		if end == "commit" {
			require.NoError(t, holder.Commit())
		} else {
			require.NoError(t, holder.Rollback())
		}
		got, err := in.Process(ctx, end, time.Second, func(context.Context, *sql.Tx) error { return nil })
		require.NoError(t, err)
		require.Equal(t, map[string]Outcome{"commit": OutcomeDuplicate, "rollback": OutcomeDone}[end], got)
	}
}

// Migrate is idempotent, safe to run concurrently, and creates the schema
// it is given.
func TestMigrate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, _ := openDB(t)
	in, err := NewSQLInbox(db, SQLConfig{Schema: "jobs", Table: "inbox_v1"})
	require.NoError(t, err)
	var g errgroup.Group
	for range 4 {
		g.Go(func() error { return in.Migrate(ctx) })
	}
	g.Go(func() error { return Migrate(ctx, db, SQLConfig{Schema: "jobs", Table: "inbox_v1"}) })
	require.NoError(t, g.Wait())
	require.NoError(t, in.Migrate(ctx))
	got, err := in.Process(ctx, "k", time.Second, func(context.Context, *sql.Tx) error { return nil })
	require.NoError(t, err)
	require.Equal(t, OutcomeDone, got)
	var n int
	require.NoError(t, db.QueryRow(`SELECT count(*) FROM jobs.inbox_v1`).Scan(&n))
	require.Equal(t, 1, n)
}

// The package-level Migrate refuses what NewSQLInbox refuses, before any
// statement.
func TestMigrateRefusesBadConfig(t *testing.T) {
	t.Parallel()
	err := Migrate(context.Background(), nil, SQLConfig{})
	var ce *ConfigError
	require.ErrorAs(t, err, &ce)
	require.Equal(t, "db", ce.Field)
	err = Migrate(context.Background(), &sql.DB{}, SQLConfig{Table: "Bad"})
	require.ErrorAs(t, err, &ce)
	require.Equal(t, "SQLConfig.Table", ce.Field)
}

func TestSQLConfigIdentifiers(t *testing.T) {
	t.Parallel()
	db := &sql.DB{}
	tests := []struct {
		cfg  SQLConfig
		want string
	}{
		{SQLConfig{}, ""},
		{SQLConfig{Schema: "app_1", Table: "_inbox"}, ""},
		{SQLConfig{Table: `inbox"; DROP TABLE x; --`}, `worker: SQLConfig.Table "inbox\"; DROP TABLE x; --" is not a plain identifier; allowed: [a-z_][a-z0-9_]*, at most 50 bytes`},
		{SQLConfig{Schema: "Public"}, `worker: SQLConfig.Schema "Public" is not a plain identifier; allowed: [a-z_][a-z0-9_]*, at most 63 bytes`},
		{SQLConfig{Table: "1inbox"}, `worker: SQLConfig.Table "1inbox" is not a plain identifier; allowed: [a-z_][a-z0-9_]*, at most 50 bytes`},
		{SQLConfig{Table: "a23456789012345678901234567890123456789012345678901"}, `worker: SQLConfig.Table "a23456789012345678901234567890123456789012345678901" is not a plain identifier; allowed: [a-z_][a-z0-9_]*, at most 50 bytes`},
	}
	for _, tt := range tests {
		_, err := NewSQLInbox(db, tt.cfg)
		if tt.want == "" {
			require.NoError(t, err)
			continue
		}
		require.EqualError(t, err, tt.want)
		require.ErrorIs(t, err, ErrInvalidConfig)
	}
	_, err := NewSQLInbox(nil, SQLConfig{})
	require.EqualError(t, err, "worker: db nil is required")
}
