package worker_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/ctdispatch/ctdispatch/cloudtasks"
	"github.com/ctdispatch/ctdispatch/cloudtasks/emulator"
	"github.com/ctdispatch/ctdispatch/cloudtasks/worker"
	"github.com/ctdispatch/ctdispatch/naming"
	"github.com/ctdispatch/ctdispatch/outbox"
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

// A worker that verifies the emulator's tokens, as in a test of a service:
// the emulator signs each delivery's OIDC token with a key of its own and
// names itself as the issuer, so the worker is given both (Issuers and
// KeysClient) beside the tasks' audience and service account. The
// dispatcher sets the key headers; the emulator delivers with a token.
func ExampleNew_emulator() {
	ctx := context.Background()
	emu, err := emulator.New(emulator.Config{ManualDelivery: true,
		Queues: []emulator.QueueConfig{{Name: "projects/demo/locations/local/queues/work"}}})
	if err != nil {
		panic(err)
	}
	defer emu.Close()
	mux := http.NewServeMux()
	srv := httptest.NewServer(mux)
	defer srv.Close()
	url := srv.URL + "/tasks" // the tasks' URL, also their default OIDC audience
	const account = "tasks@demo.iam.gserviceaccount.com"
	w, err := worker.New(ctx, &worker.Config{
		Audiences:       []string{url},
		ServiceAccounts: []string{account},
		Issuers:         []string{emu.Issuer()},
		KeysClient:      emu.KeysClient(),
		Inbox:           worker.NewMemoryInbox(),
	}, func(ctx context.Context, d *worker.Delivery) error {
		fmt.Printf("handled %s from %s: %s\n", d.ID, d.ServiceAccount, d.Body)
		return nil
	})
	if err != nil {
		panic(err)
	}
	mux.Handle("/tasks", w)

	d, err := cloudtasks.NewDispatcher(ctx, outbox.NewMemory(nil), &cloudtasks.Config{
		Project: "demo", Location: "local", Queue: "work", EmulatorAddr: emu.Addr()})
	if err != nil {
		panic(err)
	}
	defer d.Close(ctx)
	task := cloudtasks.Task{URL: url, Body: []byte(`{"table":"orders"}`), OIDC: &cloudtasks.OIDCToken{ServiceAccountEmail: account}}
	if _, err := d.Dispatch(ctx, cloudtasks.DispatchRequest{RunID: "run1", TaskKey: "extract", Identity: naming.Attempt(1), Task: task}); err != nil {
		panic(err)
	}
	if _, err := emu.RunDue(ctx); err != nil {
		panic(err)
	}
	for _, del := range emu.Deliveries() {
		fmt.Printf("attempt %d answered %d %s", del.Attempt, del.StatusCode, del.ResponseBody)
	}
	// Output:
	// handled dispatch:run1:extract:1 from tasks@demo.iam.gserviceaccount.com: {"table":"orders"}
	// attempt 1 answered 200 done
}
