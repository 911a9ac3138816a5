package emulator_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"

	"cloud.google.com/go/cloudtasks/apiv2/cloudtaskspb"
	"github.com/jonboulle/clockwork"
	"google.golang.org/grpc/status"

	"github.com/ctdispatch/ctdispatch/cloudtasks/emulator"
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
