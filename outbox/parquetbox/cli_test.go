package parquetbox_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ctdispatch/ctdispatch/outbox/parquetbox"

	"github.com/google/uuid"
	"github.com/parquet-go/parquet-go"
	"github.com/stretchr/testify/require"

	"github.com/ctdispatch/ctdispatch/naming"
	"github.com/ctdispatch/ctdispatch/outbox"
)

var (
	buildOnce sync.Once
	binary    string
	buildErr  error
)

// ctdispatch builds the CLI once and runs it, giving it a minute at most.
func ctdispatch(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "ctdispatch-bin")
		if err != nil {
			buildErr = err
			return
		}
		binary = filepath.Join(dir, "ctdispatch")
		out, err := exec.Command("go", "build", "-o", binary, "github.com/ctdispatch/ctdispatch/cmd/ctdispatch").CombinedOutput()
		if err != nil {
			buildErr = &os.PathError{Op: "go build", Path: binary, Err: err}
			t.Log(string(out))
		}
	})
	require.NoError(t, buildErr)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, args...)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	require.NoError(t, ctx.Err(), "ctdispatch %v did not finish: %s", args, e.String())
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode(), o.String(), e.String()
	}
	require.NoError(t, err)
	return 0, o.String(), e.String()
}

// What a user of the built CLI sees with hostile files in the outbox: a
// named pipe, a file whose status column is INT32, and a hand-written row
// claiming a task was created. Every command answers (none hangs or
// crashes), names the skipped files, and never takes the foreign row for a
// record.
func TestCLIWithHostileFiles(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the CLI")
	}
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	o, err := parquetbox.Open(ctx, parquetbox.Config{Root: dir, ProcessorUUID: uuid.MustParse("00000000-0000-4000-8000-00000000000a")})
	require.NoError(t, err)
	id, err := naming.NewDispatch("r", "real", naming.Attempt(1))
	require.NoError(t, err)
	require.NoError(t, outbox.AppendAndWait(ctx, o, outbox.Record{Table: outbox.TableDispatch, ID: id.String(), Queue: "projects/p/locations/l/queues/q",
		RunID: "r", TaskKey: "real", Attempt: "1", Status: outbox.StatusCreated}))
	require.NoError(t, o.Close())

	// The hostile files go into the partition the real record made (not
	// the schema file's, 1970-01-01).
	parts, err := filepath.Glob(filepath.Join(dir, string(outbox.TableDispatch), "created_date=2*"))
	require.NoError(t, err)
	require.Len(t, parts, 1)
	table := parts[0]
	require.NoError(t, syscall.Mkfifo(filepath.Join(table, "pipe.parquet"), 0o600))
	type int32Status struct {
		DispatchID string `parquet:"dispatch_id"`
		Status     int32  `parquet:"status"`
	}
	var buf bytes.Buffer
	require.NoError(t, parquet.Write(&buf, []int32Status{{"dispatch:r:x:1", 1}}))
	require.NoError(t, os.WriteFile(filepath.Join(table, "int32.parquet"), buf.Bytes(), 0o600))
	type bare struct {
		DispatchID string `parquet:"dispatch_id"`
		Status     string `parquet:"status"`
	}
	buf.Reset()
	require.NoError(t, parquet.Write(&buf, []bare{{"dispatch:r:bare:1", "created"}}))
	require.NoError(t, os.WriteFile(filepath.Join(table, "bare.parquet"), buf.Bytes(), 0o600))

	// The answers come, and exit status 3 says they may miss what the
	// skipped files hold.
	code, stdout, stderr := ctdispatch(t, "stats", "--outbox", dir, "--format", "json")
	require.Equal(t, 3, code, stderr)
	require.Contains(t, stdout, `"ids":1`)
	require.Contains(t, stderr, "int32.parquet")
	require.Contains(t, stderr, "column status is INT32 (INT(32,true)); want BYTE_ARRAY (STRING)")
	require.Contains(t, stderr, "pipe.parquet")
	require.Contains(t, stderr, "not a regular file")

	code, _, stderr = ctdispatch(t, "query", "--outbox", dir, "--dispatch-id", "dispatch:r:bare:1")
	require.Equal(t, 3, code)
	require.Contains(t, stderr, `no record with dispatch_id "dispatch:r:bare:1"`)
	require.Contains(t, stderr, "the answer may be incomplete: 2 files skipped")
	code, stdout, _ = ctdispatch(t, "query", "--outbox", dir, "--dispatch-id", id.String())
	require.Equal(t, 3, code)
	require.Contains(t, stdout, id.CloudTaskID())

	code, stdout, stderr = ctdispatch(t, "compact", "--outbox", dir, "--full")
	require.Equal(t, 3, code, "what was skipped was not compacted: %s", stderr)
	for _, want := range []string{
		// The unit of the day's files without a bucket holds the foreign
		// file; the record's own file is a bucket's single run.
		"dispatch_outbox/" + filepath.Base(table) + ": compacted: 1 files, 1 rows",
		"dispatch_outbox: skipped " + filepath.Join(table, "int32.parquet") + ": column status is INT32",
		"dispatch_outbox: skipped " + filepath.Join(table, "pipe.parquet") + ": not a regular file (mode p---------); only regular files are read",
		"dispatch_outbox: kept " + filepath.Join(table, "bare.parquet") + ": it holds rows this system did not write",
	} {
		require.True(t, strings.Contains(stdout, want), "missing %q in:\n%s", want, stdout)
	}
}
