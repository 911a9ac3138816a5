package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/ctdispatch/ctdispatch/outbox/parquetbox"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/ctdispatch/ctdispatch/internal/gcsjson"
	"github.com/ctdispatch/ctdispatch/naming"
	"github.com/ctdispatch/ctdispatch/outbox"
)

// startFakeGCS runs internal/testtools/fakegcs as its own process with one
// bucket and returns the STORAGE_EMULATOR_HOST value that reaches it. The
// process ends when the test closes its standard input.
func startFakeGCS(t *testing.T, bucket string) string {
	t.Helper()
	cmd := exec.Command(buildBinary(t, "github.com/ctdispatch/ctdispatch/internal/testtools/fakegcs"), "-bucket", bucket)
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	cmd.Stderr = os.Stderr
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		stdin.Close()
		_ = cmd.Wait()
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	require.NoError(t, err)
	host, ok := strings.CutPrefix(strings.TrimSpace(line), gcsjson.EmulatorEnv+"=")
	require.True(t, ok, line)
	return host
}

// Every outbox command reaches a gs:// outbox through the built binary,
// with fake-gcs-server standing in for Cloud Storage.
func TestBinaryBucketOutbox(t *testing.T) {
	gcs := startFakeGCS(t, "outbox-test")
	// The test process opens the bucket too, to plant a stale record.
	t.Setenv(gcsjson.EmulatorEnv, gcs)
	emu := startCLIEmulator(t)
	env := []string{gcsjson.EmulatorEnv + "=" + gcs, emulatorEnv + "=" + emu.Addr()}
	root := "gs://outbox-test?prefix=prod/"
	logDir := t.TempDir()
	dispatch := append(append([]string(nil), dispatchArgs...), "--outbox", root, "--run", "r", "--url", "https://w/x")

	res := runBinary(t, env, "", append(dispatch, "--task", "a", "--attempt", "1")...)
	require.Equal(t, 2, res.code)
	require.Equal(t, "ctdispatch: --log-dir DIR is required with a bucket outbox ("+root+"): the write-ahead log stays on local disk\n", res.stderr)

	for _, want := range []string{"created", "already_existed"} {
		res = runBinary(t, env, "", append(dispatch, "--task", "a", "--attempt", "1", "--log-dir", logDir)...)
		require.Equal(t, 0, res.code, res.stderr)
		require.True(t, strings.HasPrefix(res.stdout, want+" dispatch:r:a:1 "), res.stdout)
	}
	res = runBinary(t, env, "", append(append([]string(nil), timerArgs...), "--outbox", root, "--log-dir", logDir,
		"--run", "r", "--task", "a", "--attempt", "2", "--due", "1772368200", "--url", "https://w/retry")...)
	require.Equal(t, 0, res.code, res.stderr)

	// A dispatcher died after recording "pending" in the bucket.
	ctx := context.Background()
	box, err := parquetbox.Open(ctx, parquetbox.Config{Root: root, LogDir: t.TempDir(), ProcessorUUID: uuid.Must(uuid.NewV7())})
	require.NoError(t, err)
	id, err := naming.NewDispatch("r", "lost", naming.Attempt(1))
	require.NoError(t, err)
	require.NoError(t, outbox.AppendAndWait(ctx, box, outbox.Record{Table: outbox.TableDispatch, ID: id.String(), CloudTaskID: id.CloudTaskID(),
		Queue: dqQueue, RunID: "r", TaskKey: "lost", Attempt: "1", Status: outbox.StatusPending, UpdatedAt: time.Now().Add(-time.Hour)}))
	require.NoError(t, box.Close())

	res = runBinary(t, env, "", "query", "--outbox", root, "--run", "r", "--format", "json")
	require.Equal(t, 0, res.code, res.stderr)
	require.Len(t, strings.Split(strings.TrimSpace(res.stdout), "\n"), 3, res.stdout)

	res = runBinary(t, env, "", "compact", "--outbox", root)
	require.Equal(t, 0, res.code, res.stderr)
	require.Contains(t, res.stdout, "dispatch_outbox: ")

	res = runBinary(t, env, "", "recover", "--outbox", root, "--json")
	require.Equal(t, 2, res.code, "recover writes: it needs --log-dir")
	res = runBinary(t, env, "", "recover", "--outbox", root, "--log-dir", logDir, "--json")
	require.Equal(t, 0, res.code, res.stderr)
	var rec map[string]any
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &rec))
	require.Equal(t, 1.0, rec["stale"])
	require.Equal(t, 1.0, rec["not_found"])

	res = runBinary(t, env, "", "query", "--outbox", root, "--dispatch-id", id.String(), "--format", "csv")
	require.Equal(t, 0, res.code, res.stderr)
	require.Contains(t, res.stdout, ",not_found,NotFound,")

	res = runBinary(t, env, "", "stats", "--outbox", root, "--format", "json")
	require.Equal(t, 0, res.code, res.stderr)
	require.Contains(t, res.stdout, `"table":"dispatch_outbox","files":3,`, "a run in each of the two IDs' buckets (one run each is within the tiers' bounds: left as it is) and recover's")
	require.Contains(t, res.stdout, `"ids":2,"by_status":{"created":1,"not_found":1}`)
}

func TestBucketSchemes(t *testing.T) {
	t.Parallel()
	code, _, stderr := runCLI(t, "stats", "--outbox", "ftp://host/x")
	require.Equal(t, 2, code)
	require.Equal(t, "ctdispatch: --outbox \"ftp://host/x\": scheme \"ftp\" unknown; allowed: a directory, gs://BUCKET[?prefix=P/], s3://BUCKET[?region=R&prefix=P/] or mem://\n", stderr)
	if s3Linked {
		t.Skip("built with -tags s3: s3:// is opened")
	}
	code, _, stderr = runCLI(t, "stats", "--outbox", "s3://bucket?region=eu-west-1")
	require.Equal(t, 1, code)
	require.Equal(t, "ctdispatch: --outbox s3://bucket?region=eu-west-1: this ctdispatch was built without the S3 driver; build one with: go build -tags s3 -o bin/ctdispatch ./cmd/ctdispatch\n", stderr)
}
