package emulator_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"cloud.google.com/go/cloudtasks/apiv2/cloudtaskspb"
	"github.com/jonboulle/clockwork"
	"google.golang.org/grpc/status"

	"github.com/ctdispatch/ctdispatch/cloudtasks/emulator"
	ctworker "github.com/ctdispatch/ctdispatch/cloudtasks/worker"
	"github.com/ctdispatch/ctdispatch/naming"
)

// A test starts the emulator in-process, talks to it with the official
// client, and delivers due tasks to a local worker with RunDue.
func Example() {
	ctx := context.Background()
	worker := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		fmt.Printf("worker: %s %s (queue %s, retry %s)\n", r.Header.Get("X-CloudTasks-TaskName"), body,
			r.Header.Get("X-CloudTasks-QueueName"), r.Header.Get("X-CloudTasks-TaskRetryCount"))
	}))
	defer worker.Close()

	const queue = "projects/p/locations/l/queues/q"
	srv, err := emulator.New(emulator.Config{
		Clock:          clockwork.NewFakeClock(),
		Queues:         []emulator.QueueConfig{{Name: queue}},
		ManualDelivery: true,
	})
	if err != nil {
		panic(err)
	}
	defer srv.Close()
	client, err := srv.NewClient(ctx)
	if err != nil {
		panic(err)
	}
	defer client.Close()

	task := &cloudtaskspb.Task{
		Name: queue + "/tasks/d_example",
		MessageType: &cloudtaskspb.Task_HttpRequest{HttpRequest: &cloudtaskspb.HttpRequest{
			Url: worker.URL, Body: []byte(`{"hello":"world"}`),
		}},
	}
	_, err = client.CreateTask(ctx, &cloudtaskspb.CreateTaskRequest{Parent: queue, Task: task})
	fmt.Println("first create:", status.Code(err))
	_, err = client.CreateTask(ctx, &cloudtaskspb.CreateTaskRequest{Parent: queue, Task: task})
	fmt.Println("second create:", status.Code(err))

	n, _ := srv.RunDue(ctx)
	fmt.Println("attempts:", n, "outcome:", srv.Deliveries()[0].Outcome)
	_, err = client.GetTask(ctx, &cloudtaskspb.GetTaskRequest{Name: task.Name})
	fmt.Println("after delivery:", status.Code(err))
	// Output:
	// first create: OK
	// second create: AlreadyExists
	// worker: d_example {"hello":"world"} (queue q, retry 0)
	// attempts: 1 outcome: succeeded
	// after delivery: NotFound
}

// A worker that verifies the emulator's tokens is given the emulator's
// issuer, its keys client and the worker's own audience; SignToken makes
// the tokens its tests send: a valid one, and ones it must refuse.
func ExampleServer_SignToken() {
	srv, err := emulator.New(emulator.Config{})
	if err != nil {
		panic(err)
	}
	defer srv.Close()
	const audience, account = "https://worker.example/tasks", "dispatcher@p.iam.gserviceaccount.com"
	w, err := ctworker.New(context.Background(), &ctworker.Config{
		Audiences:       []string{audience},
		ServiceAccounts: []string{account},
		Issuers:         []string{srv.Issuer()},
		KeysClient:      srv.KeysClient(),
		Inbox:           ctworker.NewMemoryInbox(),
	}, func(context.Context, *ctworker.Delivery) error { return nil })
	if err != nil {
		panic(err)
	}
	ws := httptest.NewServer(w)
	defer ws.Close()

	send := func(what string, spec emulator.TokenSpec) {
		token, err := srv.SignToken(spec)
		if err != nil {
			panic(err)
		}
		id, _ := naming.NewDispatch("run1", "report", naming.Attempt(1))
		req, _ := http.NewRequest(http.MethodPost, ws.URL, strings.NewReader("{}"))
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set(ctworker.HeaderQueueName, "q")
		req.Header.Set(ctworker.HeaderTaskName, id.CloudTaskID())
		req.Header.Set(ctworker.HeaderRetryCount, "0")
		req.Header.Set(ctworker.HeaderExecutionCount, "0")
		req.Header.Set(ctworker.HeaderETA, "1764061200.0")
		req.Header.Set(ctworker.HeaderIdempotencyKey, id.String())
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			panic(err)
		}
		resp.Body.Close()
		fmt.Println(what+":", resp.Status)
	}
	send("valid", emulator.TokenSpec{Audience: audience, Email: account})
	send("expired", emulator.TokenSpec{Audience: audience, Email: account, IssuedAt: time.Now().Add(-2 * time.Hour)})
	send("another audience", emulator.TokenSpec{Audience: "https://elsewhere.example/", Email: account})
	// Output:
	// valid: 200 OK
	// expired: 401 Unauthorized
	// another audience: 403 Forbidden
}

// A worker's test makes the emulator lose the worker's reply to one task,
// named by its Idempotency-Key: the emulator delivers the task again after
// the queue's backoff (on the test's clock), and the worker's inbox answers
// the redelivery as a duplicate without doing the work twice.
func ExampleDeliveryFaults() {
	ctx := context.Background()
	w, err := ctworker.New(ctx, &ctworker.Config{InsecureSkipVerify: true, Inbox: ctworker.NewMemoryInbox()},
		func(_ context.Context, d *ctworker.Delivery) error {
			fmt.Println("work done for", d.ID)
			return nil
		})
	if err != nil {
		panic(err)
	}
	worker := httptest.NewServer(w)
	defer worker.Close()

	id, _ := naming.NewDispatch("run1", "extract", naming.Attempt(1))
	const queue = "projects/p/locations/l/queues/q"
	clock := clockwork.NewFakeClock()
	srv, err := emulator.New(emulator.Config{
		Clock:          clock,
		ManualDelivery: true,
		Queues:         []emulator.QueueConfig{{Name: queue, MinBackoff: time.Second}},
		DeliveryFaults: emulator.DeliveryFaults{Tasks: map[string]emulator.DeliveryFault{
			id.String(): emulator.FaultLoseReply, // or FaultDeliverTwice, FaultReset, FaultDelay, FaultWithhold
		}},
	})
	if err != nil {
		panic(err)
	}
	defer srv.Close()
	client, err := srv.NewClient(ctx)
	if err != nil {
		panic(err)
	}
	defer client.Close()
	_, err = client.CreateTask(ctx, &cloudtaskspb.CreateTaskRequest{Parent: queue, Task: &cloudtaskspb.Task{
		Name: queue + "/tasks/" + id.CloudTaskID(),
		MessageType: &cloudtaskspb.Task_HttpRequest{HttpRequest: &cloudtaskspb.HttpRequest{
			Url: worker.URL, Body: []byte(`{}`), Headers: map[string]string{ctworker.HeaderIdempotencyKey: id.String()},
		}},
	}})
	if err != nil {
		panic(err)
	}

	_, _ = srv.RunDue(ctx)     // the worker answers 200; the answer is lost
	clock.Advance(time.Second) // the queue's backoff
	_, _ = srv.RunDue(ctx)     // the redelivery
	for _, d := range srv.Deliveries() {
		if d.Fault != "" {
			fmt.Printf("attempt %d: %s (%s)\n", d.Attempt, d.Fault, d.Err)
			continue
		}
		fmt.Printf("attempt %d: %d %s", d.Attempt, d.StatusCode, d.ResponseBody)
	}
	// Output:
	// work done for dispatch:run1:extract:1
	// attempt 1: lose_reply (delivery fault: the worker's 200 was lost)
	// attempt 2: 200 duplicate
}
