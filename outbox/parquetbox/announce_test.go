package parquetbox

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ctdispatch/ctdispatch/outbox"
)

// Processes sharing a directory read each other's announcements while
// they live: sorted by processor, the latest of each, without those that
// announced nothing or have closed.
func TestAnnouncedListsTheLiveProcesses(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	a, bb := b.open(t, procA), b.open(t, procB)
	silent := b.open(t, "00000000-0000-4000-8000-00000000000c") // as a version before announcements

	qa, qb := "projects/p/locations/l/queues/a", "projects/p/locations/l/queues/b"
	require.NoError(t, bb.Announce(ctx, outbox.Process{ProcessorUUID: procB, DefaultQueue: qa}))
	require.NoError(t, bb.Announce(ctx, outbox.Process{ProcessorUUID: procB, DefaultQueue: qb})) // replaces
	require.NoError(t, a.Announce(ctx, outbox.Process{ProcessorUUID: procA, DefaultQueue: qa}))
	want := []outbox.Process{{ProcessorUUID: procA, DefaultQueue: qa}, {ProcessorUUID: procB, DefaultQueue: qb}}
	for _, o := range []*Outbox{a, bb, silent} {
		got, err := o.Announced(ctx)
		require.NoError(t, err)
		require.Equal(t, want, got)
	}
	require.True(t, outbox.DefaultQueuesDiffer(want))

	ro, err := Open(ctx, Config{Root: b.root, ReadOnly: true})
	require.NoError(t, err)
	defer ro.Close()
	got, err := ro.Announced(ctx)
	require.NoError(t, err)
	require.Equal(t, want, got, "a read-only outbox (ctdispatch stats) reads them too")
	require.ErrorIs(t, ro.Announce(ctx, outbox.Process{}), ErrReadOnly)

	require.NoError(t, bb.Close())
	require.NoFileExists(t, filepath.Join(b.root, walDirName, procB+".json"), "withdrawn on Close")
	got, err = a.Announced(ctx)
	require.NoError(t, err)
	require.Equal(t, want[:1], got)
	require.False(t, outbox.DefaultQueuesDiffer(got))
}

// An announcement whose processor's lock is free (it died) is not
// listed, and a writable outbox removes it; one that is not JSON is
// logged and skipped; a process announces only itself.
func TestAnnouncedSkipsTheDeadAndTheUnreadable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	a := b.open(t, procA)
	wal := filepath.Join(b.root, walDirName)
	dead := filepath.Join(wal, procB+".json")
	require.NoError(t, os.WriteFile(dead, []byte(`{"processor_uuid":"`+procB+`","default_queue":"projects/p/locations/l/queues/b"}`), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(wal, procA+".json"), []byte("not json"), 0o600))

	ro, err := Open(ctx, Config{Root: b.root, ReadOnly: true})
	require.NoError(t, err)
	defer ro.Close()
	got, err := ro.Announced(ctx)
	require.NoError(t, err)
	require.Empty(t, got)
	require.FileExists(t, dead, "a read-only outbox removes nothing")

	got, err = a.Announced(ctx)
	require.NoError(t, err)
	require.Empty(t, got)
	require.NoFileExists(t, dead)
	require.Contains(t, b.logs.String(), "outbox: skipped announcement")
	require.Contains(t, b.logs.String(), "not an announcement")

	err = a.Announce(ctx, outbox.Process{ProcessorUUID: procB})
	require.EqualError(t, err, `outbox: announce: processor "`+procB+`" is not this outbox's (`+procA+`); a process announces only itself`)
}
