package worker_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/ctdispatch/ctdispatch/cloudtasks/worker"
	"github.com/ctdispatch/ctdispatch/naming"
)

// A worker with the in-memory inbox and verification off, so it runs
// here; a service sets Audiences and ServiceAccounts and uses NewSQLInbox
// (see docs/worker.md).
func Example() {
	w, err := worker.New(context.Background(), &worker.Config{
		InsecureSkipVerify: true,
		Inbox:              worker.NewMemoryInbox(),
	}, func(ctx context.Context, d *worker.Delivery) error {
		fmt.Printf("run %s, task %s, attempt %s: %s\n", d.ID.RunID(), d.ID.TaskKey(), d.ID.Attempt(), d.Body)
		return nil
	})
	if err != nil {
		panic(err)
	}
	srv := httptest.NewServer(w)
	defer srv.Close()

	// What Cloud Tasks sends for a task ctdispatch dispatched, twice.
	id, _ := naming.NewDispatch("run1", "extract", naming.Attempt(1))
	for range 2 {
		req, _ := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader(`{"table":"orders"}`))
		req.Header.Set("X-CloudTasks-QueueName", "work")
		req.Header.Set("X-CloudTasks-TaskName", id.CloudTaskID())
		req.Header.Set("X-CloudTasks-TaskRetryCount", "0")
		req.Header.Set("X-CloudTasks-TaskExecutionCount", "0")
		req.Header.Set("X-CloudTasks-TaskETA", "1764061200.0")
		req.Header.Set("Idempotency-Key", id.String())
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			panic(err)
		}
		resp.Body.Close()
		fmt.Println(resp.Status)
	}
	// Output:
	// run run1, task extract, attempt 1: {"table":"orders"}
	// 200 OK
	// 200 OK
}
