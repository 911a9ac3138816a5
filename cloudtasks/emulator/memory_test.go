package emulator

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"testing"
	"time"

	"cloud.google.com/go/cloudtasks/apiv2/cloudtaskspb"
	"github.com/stretchr/testify/require"
)

// TestMemoryPendingTasks holds CTDISPATCH_EMULATOR_MEM_TASKS pending tasks
// (for example 1000000) and reports the heap they take. It goes through
// the CreateTask handler (the gRPC transport is left out to keep the run
// short; the stored message is the one the transport would hand over).
//
//	CTDISPATCH_EMULATOR_MEM_TASKS=1000000 go test -run TestMemoryPendingTasks -v ./cloudtasks/emulator
func TestMemoryPendingTasks(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("CTDISPATCH_EMULATOR_MEM_TASKS"))
	if n <= 0 {
		t.Skip("set CTDISPATCH_EMULATOR_MEM_TASKS=1000000 to measure the heap of a large backlog")
	}
	const parent = "projects/p/locations/l/queues/q"
	srv, err := New(Config{Queues: []QueueConfig{{Name: parent}}, DisableDelivery: true})
	require.NoError(t, err)
	defer srv.Close()
	svc := &service{s: srv}
	ctx := context.Background()
	before := heapInUse()
	start := time.Now()
	for i := range n {
		// The same shape as a dispatcher's task: hashed name, JSON body,
		// idempotency header, OIDC token.
		req := &cloudtaskspb.CreateTaskRequest{Parent: parent, Task: &cloudtaskspb.Task{
			Name: fmt.Sprintf("%s/tasks/d_%026d", parent, i),
			MessageType: &cloudtaskspb.Task_HttpRequest{HttpRequest: &cloudtaskspb.HttpRequest{
				Url:     "https://worker.example.com/tasks/run",
				Headers: map[string]string{"Content-Type": "application/json", "Idempotency-Key": fmt.Sprintf("dispatch:run-%d:extract:1", i)},
				Body:    []byte(`{"run_id":"run-000001","task_key":"extract","attempt":1,"input":{"table":"events","day":"2026-01-02"}}`),
				AuthorizationHeader: &cloudtaskspb.HttpRequest_OidcToken{OidcToken: &cloudtaskspb.OidcToken{
					ServiceAccountEmail: "dispatcher@project.iam.gserviceaccount.com",
				}},
			}},
		}}
		_, err := svc.CreateTask(ctx, req)
		require.NoError(t, err)
	}
	elapsed := time.Since(start)
	after := heapInUse()
	require.Equal(t, n, srv.TaskCount())
	used := after - before
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	t.Logf("%d pending tasks: live heap %.1f MiB (%.0f bytes/task); memory obtained from the OS %.1f MiB; created in %s",
		n, float64(used)/(1<<20), float64(used)/float64(n), float64(m.Sys)/(1<<20), elapsed.Round(time.Millisecond))
	if n >= 1_000_000 {
		require.Less(t, used, uint64(1<<30), "a million pending tasks must fit in 1 GiB")
	}
}

func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}
