package cli

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ctdispatch/ctdispatch/outbox/parquetbox"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/ctdispatch/ctdispatch/naming"
	"github.com/ctdispatch/ctdispatch/outbox"
)

// A query answers from the files as they are, whatever the table's
// manifest says: a file written after the compaction that wrote the
// manifest is read, and so is a file another compaction wrote in place of
// one the manifest names.
func TestBinaryQueryWithAStaleManifest(t *testing.T) {
	t.Parallel()
	dir := seedOutbox(t)
	res := runBinary(t, nil, "", "compact", "--outbox", dir)
	require.Equal(t, 0, res.code, res.stderr)
	manifest := filepath.Join(dir, "_manifests", "dispatch_outbox")
	require.Contains(t, res.stdout, "dispatch_outbox: manifest written: 2 files, 2 row groups ("+manifest+")\n")
	first, err := os.ReadFile(manifest)
	require.NoError(t, err)

	ctx := context.Background()
	id, err := naming.NewDispatch("run2", "late", naming.Attempt(1))
	require.NoError(t, err)
	box, err := parquetbox.Open(ctx, parquetbox.Config{Root: dir, ProcessorUUID: uuid.MustParse("00000000-0000-4000-8000-0000000000bb")})
	require.NoError(t, err)
	require.NoError(t, outbox.AppendAndWait(ctx, box, outbox.Record{Table: outbox.TableDispatch, ID: id.String(), CloudTaskID: id.CloudTaskID(),
		Queue: cliQueue, RunID: "run2", TaskKey: "late", Attempt: "1", Status: outbox.StatusCreated, CreateCalls: 1,
		CreatedAt: cliT0.Add(time.Hour), UpdatedAt: cliT0.Add(time.Hour)}))
	require.NoError(t, box.Close())

	query := func(flag, value, want string) {
		t.Helper()
		res := runBinary(t, nil, "", "query", "--outbox", dir, flag, value, "--format", "csv")
		require.Equal(t, 0, res.code, res.stderr)
		require.Contains(t, res.stdout, want, "query %s %s", flag, value)
		require.Len(t, strings.Split(strings.TrimSpace(res.stdout), "\n"), 2, res.stdout)
	}
	check := func() {
		t.Helper()
		query("--dispatch-id", id.String(), id.String()+","+id.CloudTaskID()+",")
		query("--cloud-task-id", id.CloudTaskID(), id.String()+",")
		query("--dispatch-id", "dispatch:run1:extract:1", "dispatch:run1:extract:1,d_cxtoltqhbncw6nevn7hy53kqn6,")
		query("--cloud-task-id", "d_jbmde3fgfum6suqbrrywrudv7g", "dispatch:run1:load:2,")
	}
	check() // the new record's file is not in the manifest

	res = runBinary(t, nil, "", "compact", "--outbox", dir, "--full")
	require.Equal(t, 0, res.code, res.stderr)
	require.Regexp(t, `dispatch_outbox/created_date=2026-03-01 b\dof8: compacted: 1 files`, res.stdout)
	require.NoError(t, os.WriteFile(manifest, first, 0o600))
	check() // the manifest names a file that is gone, not the one that replaced it
}
