package emulator

import (
	"context"
	"fmt"
	"testing"

	"cloud.google.com/go/cloudtasks/apiv2/cloudtaskspb"
	"google.golang.org/api/iterator"
)

// listBenchTasks is the size of the queue BenchmarkListTasks pages through.
const listBenchTasks = 100_000

// hashedTaskName is a dispatcher-like task name: the dispatcher's names
// are hashes, so they arrive in no particular order.
func hashedTaskName(parent string, i uint64) string {
	return fmt.Sprintf("%s/tasks/d_%016x", parent, i*0x9E3779B97F4A7C15)
}

// BenchmarkCreateTaskHandler measures the CreateTask handler alone, one
// caller, no gRPC, into a queue that grows by b.N tasks: the store's own
// cost per task (validation, name index, schedule heap), which
// BenchmarkCreateTask hides behind the transport.
//
//	go test -run '^$' -bench CreateTaskHandler -benchtime 200000x -count 6 ./cloudtasks/emulator | benchstat -
func BenchmarkCreateTaskHandler(b *testing.B) {
	_, svc := benchServer(b)
	ctx := context.Background()
	b.ReportAllocs()
	var i uint64
	for b.Loop() {
		i++
		if _, err := svc.CreateTask(ctx, benchTaskRequest(benchParent, i)); err != nil {
			b.Fatal(err)
		}
	}
}

// benchParent is the queue the store benchmarks fill.
const benchParent = "projects/p/locations/l/queues/q"

// benchServer starts an emulator with benchParent and no delivery, and
// returns it with its CreateTask and ListTasks handlers.
func benchServer(b *testing.B) (*Server, *service) {
	srv, err := New(Config{Queues: []QueueConfig{{Name: benchParent}}, DisableDelivery: true})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = srv.Close() })
	return srv, &service{s: srv}
}

// benchTaskRequest creates task i with a hashed name, a JSON body and two
// headers.
func benchTaskRequest(parent string, i uint64) *cloudtaskspb.CreateTaskRequest {
	return &cloudtaskspb.CreateTaskRequest{Parent: benchParent, Task: &cloudtaskspb.Task{
		Name: hashedTaskName(parent, i),
		MessageType: &cloudtaskspb.Task_HttpRequest{HttpRequest: &cloudtaskspb.HttpRequest{
			Url:     "https://worker.example.com/tasks/run",
			Headers: map[string]string{"Content-Type": "application/json", "Idempotency-Key": fmt.Sprintf("dispatch:run-%d:extract:1", i)},
			Body:    []byte(`{"run_id":"run-000001","task_key":"extract","attempt":1}`),
		}},
	}}
}

// BenchmarkListTasks reads one page of 100 tasks (FULL view, as the web
// console asks) through the official client over loopback gRPC from a
// queue of 100,000 tasks: the first page, and a page from the middle of
// the queue resumed with a page token.
//
//	go test -run '^$' -bench ListTasks -count 6 ./cloudtasks/emulator | benchstat -
func BenchmarkListTasks(b *testing.B) {
	srv, svc := benchServer(b)
	ctx := context.Background()
	for i := range uint64(listBenchTasks) {
		if _, err := svc.CreateTask(ctx, benchTaskRequest(benchParent, i)); err != nil {
			b.Fatal(err)
		}
	}
	client, err := srv.NewClient(ctx)
	if err != nil {
		b.Fatal(err)
	}
	defer client.Close()
	// The middle of the queue: the token of the page that ends with the
	// 50,000th name in order.
	firstPage, err := svc.ListTasks(ctx, &cloudtaskspb.ListTasksRequest{Parent: benchParent, PageSize: 1000})
	if err != nil {
		b.Fatal(err)
	}
	middle := firstPage.NextPageToken
	for range listBenchTasks/2/1000 - 1 {
		resp, err := svc.ListTasks(ctx, &cloudtaskspb.ListTasksRequest{Parent: benchParent, PageSize: 1000, PageToken: middle})
		if err != nil {
			b.Fatal(err)
		}
		middle = resp.NextPageToken
	}
	for _, bc := range []struct{ name, token string }{{"first-page", ""}, {"later-page", middle}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				it := client.ListTasks(ctx, &cloudtaskspb.ListTasksRequest{Parent: benchParent, ResponseView: cloudtaskspb.Task_FULL})
				var tasks []*cloudtaskspb.Task
				if _, err := iterator.NewPager(it, 100, bc.token).NextPage(&tasks); err != nil {
					b.Fatal(err)
				}
				if len(tasks) != 100 {
					b.Fatalf("got %d tasks, want 100", len(tasks))
				}
			}
		})
	}
}
