package parquetbox

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gocloud.dev/blob/memblob"

	"github.com/ctdispatch/ctdispatch/outbox"
)

// A process whose view of others is reused (RefreshInterval of an hour,
// on a clock that does not move) misses another process's cancel in
// Latest; LatestFresh reads it, from the other's log and, once that is
// converted, from its Parquet file. On a directory that also holds the
// logs it sees every kept record: unseen is 0.
func TestLatestFreshReadsAnotherProcessWriteLatestReuses(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, flushed := range []bool{false, true} {
		b, a, bb := staleB(t)

		created := timerRec("r", "t", t0.Add(time.Hour), outbox.StatusCreated)
		created.Follow(nil, b.clock.Now())
		require.NoError(t, outbox.AppendAndWait(ctx, bb, created))
		got, ok, err := bb.Latest(ctx, outbox.TableTimers, created.ID) // B's view is taken now
		require.NoError(t, err)
		require.True(t, ok)

		cancel := created
		cancel.Status = outbox.StatusCancelled
		cancel.Follow(&got, b.clock.Now())
		require.NoError(t, outbox.AppendAndWait(ctx, a, cancel))
		if flushed {
			require.NoError(t, a.Flush(ctx))
		}

		got, _, err = bb.Latest(ctx, outbox.TableTimers, created.ID)
		require.NoError(t, err)
		require.Equal(t, outbox.StatusCreated, got.Status, "flushed=%v: Latest reuses B's view", flushed)
		got, ok, unseen, err := bb.LatestFresh(ctx, outbox.TableTimers, created.ID)
		require.NoError(t, err)
		require.True(t, ok)
		require.Equal(t, outbox.StatusCancelled, got.Status, "flushed=%v", flushed)
		require.Equal(t, int64(2), got.Version)
		require.Equal(t, procA, got.ProcessorUUID)
		require.Equal(t, time.Duration(0), unseen)
	}
}

// Where others' logs cannot be read (a bucket; a directory whose log is
// kept elsewhere), LatestFresh's unseen is the publication interval; a
// log in the root itself, however spelled, is read by the others.
func TestLatestFreshUnseenIsThePublicationIntervalWhereLogsAreNotShared(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	for _, tc := range []struct {
		name   string
		edit   func(*Config)
		unseen time.Duration
	}{
		{"directory, log in it", func(*Config) {}, 0},
		{"directory, log dir named as the root", func(o *Config) { o.LogDir = b.root + "/." }, 0},
		{"directory, log elsewhere", func(o *Config) { o.LogDir = filepath.Join(t.TempDir(), "log") }, DefaultPublishInterval},
		{"bucket", func(o *Config) { o.Root, o.Bucket, o.LogDir = "", memblob.OpenBucket(nil), t.TempDir() }, DefaultPublishInterval},
		{"bucket publishing every minute", func(o *Config) {
			o.Root, o.Bucket, o.LogDir, o.PublishInterval = "", memblob.OpenBucket(nil), t.TempDir(), time.Minute
		}, time.Minute},
	} {
		opts := b.options("")
		tc.edit(&opts)
		o, err := Open(ctx, opts)
		require.NoError(t, err, tc.name)
		_, ok, unseen, err := o.LatestFresh(ctx, outbox.TableDispatch, "dispatch:r:t:1")
		require.NoError(t, err, tc.name)
		require.False(t, ok, tc.name)
		require.Equal(t, tc.unseen, unseen, tc.name)
		require.NoError(t, o.Close(), tc.name)
	}
	o := b.open(t, procA)
	_, _, _, err := o.LatestFresh(ctx, "nope", "dispatch:r:t:1")
	var re *outbox.RecordError
	require.ErrorAs(t, err, &re)
	require.Equal(t, outbox.RecordError{Field: "Table", Value: "nope", Rule: re.Rule}, *re)
}
