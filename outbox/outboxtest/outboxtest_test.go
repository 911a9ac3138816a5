package outboxtest_test

import (
	"context"
	"testing"
	"time"

	"github.com/ctdispatch/ctdispatch/outbox/parquetbox"

	"github.com/google/uuid"
	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/ctdispatch/ctdispatch/outbox"
	"github.com/ctdispatch/ctdispatch/outbox/outboxtest"
)

const proc = "00000000-0000-4000-8000-000000000001"

func TestMemory(t *testing.T) {
	t.Parallel()
	newStore := func(t *testing.T, clock clockwork.Clock) outbox.Outbox { return outbox.NewMemory(clock) }
	outboxtest.Run(t, newStore)
	outboxtest.RunVersions(t, newStore)
}

func TestMemoryIntents(t *testing.T) {
	t.Parallel()
	outboxtest.RunIntents(t, func(t *testing.T, clock clockwork.Clock) (outboxtest.TxStore, outboxtest.Begin) {
		m := outbox.NewMemory(clock)
		return m, func(context.Context) (outbox.Tx, func() error, func() error, error) {
			tx := m.Begin()
			return tx, tx.Commit, tx.Rollback, nil
		}
	})
}

func TestFileOutbox(t *testing.T) {
	t.Parallel()
	newStore := func(t *testing.T, clock clockwork.Clock) outbox.Outbox {
		o, err := parquetbox.Open(context.Background(), parquetbox.Config{
			Root: t.TempDir(), ProcessorUUID: uuid.MustParse(proc), Clock: clock, RefreshInterval: -1,
		})
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, o.Close()) })
		return o
	}
	outboxtest.Run(t, newStore)
	outboxtest.RunVersions(t, newStore)
}

// flushed reads everything back from Parquet files: each Append is
// followed by a Flush, and a second outbox (another processor) answers
// the reads, so the suite checks the files' precision and order too.
type flushed struct {
	*parquetbox.Outbox
	reader *parquetbox.Outbox
}

func (f flushed) Append(ctx context.Context, r outbox.Record, done func(error)) error {
	if err := outbox.AppendAndWait(ctx, f.Outbox, r); err != nil {
		return err
	}
	err := f.Flush(ctx)
	if done != nil {
		done(err)
	}
	return nil
}

func (f flushed) Latest(ctx context.Context, t outbox.Table, id string) (outbox.Record, bool, error) {
	return f.reader.Latest(ctx, t, id)
}

func (f flushed) Lookup(ctx context.Context, q outbox.Query) ([]outbox.Record, error) {
	return f.reader.Lookup(ctx, q)
}

func (f flushed) Pending(ctx context.Context, t outbox.Table, olderThan time.Duration) ([]outbox.Record, error) {
	return f.reader.Pending(ctx, t, olderThan)
}

func TestFileOutboxReadFromParquet(t *testing.T) {
	t.Parallel()
	newStore := func(t *testing.T, clock clockwork.Clock) outbox.Outbox {
		root := t.TempDir()
		o, err := parquetbox.Open(context.Background(), parquetbox.Config{
			Root: root, ProcessorUUID: uuid.MustParse(proc), Clock: clock, RefreshInterval: -1,
		})
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, o.Close()) })
		r, err := parquetbox.Open(context.Background(), parquetbox.Config{Root: root, ReadOnly: true, Clock: clock, RefreshInterval: -1})
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, r.Close()) })
		return flushed{Outbox: o, reader: r}
	}
	outboxtest.Run(t, newStore)
	outboxtest.RunVersions(t, newStore)
}
