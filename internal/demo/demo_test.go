package demo

import (
	"context"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestRunKeepsEveryPromise(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "outbox")
	sum, env, err := Run(context.Background(), Options{Runs: 3, OutboxDir: dir, Keep: true})
	require.NoError(t, err)
	require.NoError(t, env.Close())

	distinct := 3*4 + 3*2 // tasks, then one retry timer and one heartbeat per run
	require.Equal(t, 24, sum.DispatchCalls)
	require.Equal(t, 12, sum.TimerCalls)
	// Every distinct ID became exactly one task, whatever the duplicates and
	// the commit-then-fail faults did.
	require.Equal(t, distinct, sum.TasksInQueueAfterDispatch)
	require.Equal(t, 12, sum.Dispatch.Created+sum.Dispatch.AlreadyExisted-sum.Dispatch.Skipped,
		"each attempt's first call either created its task or met the one a lost answer created")
	require.Equal(t, 12, sum.Dispatch.Skipped, "each repeated call is answered by the outbox")
	require.Equal(t, 6, sum.Timers.Skipped)
	require.Greater(t, sum.Dispatch.CreateCalls, 12, "the seeded faults force retries")
	require.Equal(t, 0, sum.TasksLeft)
	require.Equal(t, WorkerStats{Deliveries: distinct + 3, Unique: distinct, Repeats: 3}, sum.Worker,
		"the three report tasks fail after their work and are delivered again")

	files, err := filepath.Glob(filepath.Join(dir, "dispatch_outbox", "created_date=*", "*.parquet"))
	require.NoError(t, err)
	require.NotEmpty(t, files, "closing the dispatcher rolls the outbox into Parquet")
}

func TestRunIsRepeatable(t *testing.T) {
	t.Parallel()
	a, envA, err := Run(context.Background(), Options{Runs: 2})
	require.NoError(t, err)
	require.NoError(t, envA.Close())
	b, envB, err := Run(context.Background(), Options{Runs: 2})
	require.NoError(t, err)
	require.NoError(t, envB.Close())
	a.OutboxDir, b.OutboxDir = "", ""
	require.Equal(t, a, b, "the same seed gives the same run")
}

func TestRunRemovesItsTemporaryOutbox(t *testing.T) {
	t.Parallel()
	sum, env, err := Run(context.Background(), Options{Runs: 1})
	require.NoError(t, err)
	require.DirExists(t, sum.OutboxDir)
	require.NoError(t, env.Close())
	require.NoDirExists(t, sum.OutboxDir)
}

func TestRunRejectsBadOptions(t *testing.T) {
	t.Parallel()
	_, _, err := Run(context.Background(), Options{Runs: -1})
	require.EqualError(t, err, "demo: runs -1 out of range; allowed: 1 to 1000")
	_, _, err = Run(context.Background(), Options{CommitThenFailRate: 2})
	require.EqualError(t, err, "demo: commit-then-fail rate 2 out of range; allowed: 0 to 1")
}

// The demo's worker is cloudtasks/worker: a request whose headers do not
// fit is answered 200 (Cloud Tasks must not retry it) and counted as
// rejected; a repeat is acknowledged without the work.
func TestWorkerChecksHeaders(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, key, task string
		wantBody        string
		want            WorkerStats
	}{
		{"consistent", "dispatch:run1:extract:1", "d_cxtoltqhbncw6nevn7hy53kqn6", "done\n", WorkerStats{Deliveries: 1, Unique: 1}},
		{"missing key", "", "d_cxtoltqhbncw6nevn7hy53kqn6", "rejected\n", WorkerStats{Rejected: 1}},
		{"key of another task", "dispatch:run1:extract:2", "d_cxtoltqhbncw6nevn7hy53kqn6", "rejected\n", WorkerStats{Rejected: 1}},
		{"not an internal ID", "evt-42", "d_cxtoltqhbncw6nevn7hy53kqn6", "rejected\n", WorkerStats{Rejected: 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			w, err := NewWorker(nil)
			require.NoError(t, err)
			req := httptest.NewRequest(http.MethodPost, "/extract", nil)
			for k, v := range map[string]string{
				"X-CloudTasks-QueueName": "work", "X-CloudTasks-TaskName": tt.task, "X-CloudTasks-TaskRetryCount": "0",
				"X-CloudTasks-TaskExecutionCount": "0", "X-CloudTasks-TaskETA": "1764061200.0", "Idempotency-Key": tt.key,
			} {
				if v != "" {
					req.Header.Set(k, v)
				}
			}
			rec := httptest.NewRecorder()
			w.ServeHTTP(rec, req)
			require.Equal(t, 200, rec.Code)
			require.Equal(t, tt.wantBody, rec.Body.String())
			require.Equal(t, tt.want, w.Stats())
		})
	}
}
