package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ctdispatch/ctdispatch/cloudtasks/emulator"
	"github.com/ctdispatch/ctdispatch/outbox/parquetbox"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/ctdispatch/ctdispatch/naming"
	"github.com/ctdispatch/ctdispatch/outbox"
)

var timerArgs = []string{"timer", "--project", "p", "--location", "europe-west1", "--queue", "work"}

func TestTimerCommand(t *testing.T) {
	t.Parallel()
	emu := startCLIEmulator(t)
	box := filepath.Join(t.TempDir(), "outbox")
	due := time.Now().Add(time.Hour).Truncate(time.Second).UTC()
	args := append(append([]string(nil), timerArgs...), "--outbox", box, "--run", "run1", "--task", "extract",
		"--attempt", "2", "--due", due.Format(time.RFC3339), "--url", "https://worker.example/retry", "--json")
	code, stdout, stderr := runWithEnv(t, emu.Addr(), "", args...)
	require.Equal(t, 0, code, stderr)
	var got map[string]any
	require.NoError(t, json.Unmarshal([]byte(stdout), &got))
	id := fmt.Sprintf("timer:retry:run1:extract:2:%d", due.Unix())
	require.Equal(t, id, got["timer_id"])
	require.Equal(t, "created", got["outcome"])
	require.Equal(t, formatTime(due), got["due"])
	tasks := emu.Tasks(dqQueue)
	require.Len(t, tasks, 1)
	require.Equal(t, due, tasks[0].GetScheduleTime().AsTime())

	// Heartbeat, plain output.
	code, stdout, stderr = runWithEnv(t, emu.Addr(), "", append(append([]string(nil), timerArgs...), "--run", "run1", "--task", "extract",
		"--check", "1", "--url", "https://worker.example/hb", "--method", "GET")...)
	require.Equal(t, 0, code, stderr)
	require.True(t, strings.HasPrefix(stdout, "created timer:heartbeat:run1:extract:1 "+dqQueue+"/tasks/t_"), stdout)

	// Cancel, twice: the second finds it gone.
	for _, want := range []string{"deleted", "already gone"} {
		code, stdout, stderr = runWithEnv(t, emu.Addr(), "", append(append([]string(nil), timerArgs...), "--outbox", box, "--cancel", id)...)
		require.Equal(t, 0, code, stderr)
		require.Equal(t, fmt.Sprintf("cancelled %s %s/tasks/%s (%s)\n", id, dqQueue, got["cloud_task_id"], want), stdout)
	}

	// Scheduled again after a cancel deleted its task: the name is held,
	// and the command says so instead of "already_existed".
	code, _, stderr = runWithEnv(t, emu.Addr(), "", args...)
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "its task was deleted by a cancel at ")
	require.Contains(t, stderr, "holds the name until about ")

	code, _, stderr = runWithEnv(t, emu.Addr(), "", append(append([]string(nil), timerArgs...), "--run", "r", "--task", "t", "--attempt", "1",
		"--due", time.Now().Add(40*24*time.Hour).Format(time.RFC3339), "--url", "https://w/x")...)
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "Cloud Tasks schedules at most 30 days (720h) ahead")

	code, _, stderr = runWithEnv(t, emu.Addr(), "", append(append([]string(nil), timerArgs...), "--run", "r", "--task", "t", "--url", "https://w/x")...)
	require.Equal(t, 2, code)
	require.Equal(t, "ctdispatch: --due TIME (a retry timer) or --check TIME (a heartbeat) is required\n", stderr)
}

// A cancel goes to the queue the outbox recorded: --queue is not needed,
// and a --queue that differs is refused before anything is deleted.
func TestTimerCancelFindsTheQueue(t *testing.T) {
	t.Parallel()
	emu := startCLIEmulator(t)
	require.NoError(t, emu.CreateQueue(context.Background(), emulator.QueueConfig{Name: "projects/p/locations/europe-west1/queues/timers"}))
	box := filepath.Join(t.TempDir(), "outbox")
	base := []string{"timer", "--project", "p", "--location", "europe-west1"}
	check := time.Now().Add(time.Hour).Unix()
	code, stdout, stderr := runWithEnv(t, emu.Addr(), "", append(append([]string(nil), base...), "--queue", "timers", "--outbox", box,
		"--run", "r1", "--task", "t", "--check", fmt.Sprint(check), "--url", "https://w.example/hb")...)
	require.Equal(t, 0, code, stderr)
	id := fmt.Sprintf("timer:heartbeat:r1:t:%d", check)
	require.True(t, strings.HasPrefix(stdout, "created "+id+" "), stdout)

	code, _, stderr = runWithEnv(t, emu.Addr(), "", append(append([]string(nil), base...), "--queue", "work", "--outbox", box, "--cancel", id)...)
	require.Equal(t, 1, code)
	require.Contains(t, stderr, `Queue "work" differs from the queue the outbox recorded for `+id+" (projects/p/locations/europe-west1/queues/timers)")
	require.Len(t, emu.Tasks("projects/p/locations/europe-west1/queues/timers"), 1, "a refused cancel deletes nothing")

	code, stdout, stderr = runWithEnv(t, emu.Addr(), "", append(append([]string(nil), base...), "--outbox", box, "--cancel", id)...)
	require.Equal(t, 0, code, stderr)
	require.True(t, strings.HasPrefix(stdout, "cancelled "+id+" projects/p/locations/europe-west1/queues/timers/tasks/t_"), stdout)
	require.Empty(t, emu.Tasks("projects/p/locations/europe-west1/queues/timers"))
}

func TestRecoverCommand(t *testing.T) {
	t.Parallel()
	emu := startCLIEmulator(t)
	dir := filepath.Join(t.TempDir(), "outbox")
	// One task exists; its dispatcher died before recording the outcome.
	code, _, stderr := runWithEnv(t, emu.Addr(), "", append(append([]string(nil), dispatchArgs...),
		"--run", "r", "--task", "a", "--attempt", "1", "--url", "https://w/x")...)
	require.Equal(t, 0, code, stderr)

	ctx := context.Background()
	dead := uuid.Must(uuid.NewV7())
	box, err := parquetbox.Open(ctx, parquetbox.Config{Root: dir, ProcessorUUID: dead})
	require.NoError(t, err)
	for _, task := range []string{"a", "b"} {
		id, err := naming.NewDispatch("r", task, naming.Attempt(1))
		require.NoError(t, err)
		require.NoError(t, outbox.AppendAndWait(ctx, box, outbox.Record{
			Table: outbox.TableDispatch, ID: id.String(), CloudTaskID: id.CloudTaskID(), Queue: dqQueue,
			RunID: "r", TaskKey: task, Attempt: "1", Status: outbox.StatusPending, UpdatedAt: time.Now().Add(-time.Hour),
		}))
	}
	require.NoError(t, box.Close())

	code, stdout, stderr := runWithEnv(t, emu.Addr(), "", "recover", "--outbox", dir, "--json")
	require.Equal(t, 0, code, stderr)
	var got map[string]any
	require.NoError(t, json.Unmarshal([]byte(stdout), &got))
	me := got["processor_uuid"].(string)
	delete(got, "processor_uuid")
	require.Equal(t, map[string]any{"stale": 2.0, "found": 1.0, "not_found": 1.0, "handed_over": 2.0, "skipped_not_owned": 0.0, "errors": 0.0}, got)

	code, stdout, _ = runCLI(t, "query", "--outbox", dir, "--dispatch-id", "dispatch:r:a:1", "--history", "--format", "csv")
	require.Equal(t, 0, code)
	require.Contains(t, stdout, ",pending,")
	require.Contains(t, stdout, ",already_existed,")
	require.Contains(t, stdout, dead.String())
	require.Contains(t, stdout, me)

	code, stdout, _ = runWithEnv(t, emu.Addr(), "", "recover", "--outbox", dir)
	require.Equal(t, 0, code)
	require.Equal(t, "0 stale pending: 0 found (already_existed), 0 not found (not_found), 0 taken over from other processors, 0 left to their owners, 0 errors\n", stdout)

	code, _, stderr = runCLI(t, "recover")
	require.Equal(t, 2, code)
	require.Equal(t, "ctdispatch: --outbox DIR is required\n", stderr)
}
