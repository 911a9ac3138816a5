package emulator_test

import (
	"context"
	"fmt"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	cloudtasks "cloud.google.com/go/cloudtasks/apiv2"
	"cloud.google.com/go/cloudtasks/apiv2/cloudtaskspb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ctdispatch/ctdispatch/cloudtasks/emulator"
)

// benchCallers is the number of concurrent CreateTask callers.
const benchCallers = 64

// floorServer is the least a Cloud Tasks server can do: keep the task in a
// map. It bounds what the emulator can reach over the same transport.
type floorServer struct {
	cloudtaskspb.UnimplementedCloudTasksServer
	mu    sync.Mutex
	tasks map[string]*cloudtaskspb.Task
}

func (f *floorServer) CreateTask(_ context.Context, req *cloudtaskspb.CreateTaskRequest) (*cloudtaskspb.Task, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.tasks[req.Task.Name]; ok {
		return nil, status.Error(codes.AlreadyExists, "exists")
	}
	f.tasks[req.Task.Name] = req.Task
	return req.Task, nil
}

func startFloor(b *testing.B) string {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	gs := grpc.NewServer()
	cloudtaskspb.RegisterCloudTasksServer(gs, &floorServer{tasks: make(map[string]*cloudtaskspb.Task)})
	go func() { _ = gs.Serve(lis) }()
	b.Cleanup(gs.Stop)
	return lis.Addr().String()
}

// benchTask is a dispatcher-like task: a hashed name, a JSON body, an
// idempotency header and an OIDC token.
func benchTask(parent string, i uint64) *cloudtaskspb.Task {
	return &cloudtaskspb.Task{
		Name: fmt.Sprintf("%s/tasks/d_%026d", parent, i),
		MessageType: &cloudtaskspb.Task_HttpRequest{HttpRequest: &cloudtaskspb.HttpRequest{
			Url:     "https://worker.example.com/tasks/run",
			Headers: map[string]string{"Content-Type": "application/json", "Idempotency-Key": fmt.Sprintf("dispatch:run-%d:extract:1", i)},
			Body:    []byte(`{"run_id":"run-000001","task_key":"extract","attempt":1,"input":{"table":"events","day":"2026-01-02"}}`),
			AuthorizationHeader: &cloudtaskspb.HttpRequest_OidcToken{OidcToken: &cloudtaskspb.OidcToken{
				ServiceAccountEmail: "dispatcher@project.iam.gserviceaccount.com",
			}},
		}},
	}
}

func runCreateTasks(b *testing.B, client *cloudtasks.Client) {
	var n atomic.Uint64
	ctx := context.Background()
	b.SetParallelism((benchCallers + runtime.GOMAXPROCS(0) - 1) / runtime.GOMAXPROCS(0))
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			req := &cloudtaskspb.CreateTaskRequest{Parent: queue, Task: benchTask(queue, n.Add(1))}
			if _, err := client.CreateTask(ctx, req); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "tasks/s")
}

// BenchmarkCreateTask compares CreateTask through the official client over
// loopback gRPC, 64 callers at a time, against the emulator and against a
// floor server that only stores the task in a map.
//
//	go test -run '^$' -bench CreateTask -count 6 ./cloudtasks/emulator | benchstat -
func BenchmarkCreateTask(b *testing.B) {
	b.Run("floor", func(b *testing.B) {
		client, err := cloudtasks.NewClient(context.Background(), emulator.ClientOptions(startFloor(b))...)
		if err != nil {
			b.Fatal(err)
		}
		defer client.Close()
		runCreateTasks(b, client)
	})
	b.Run("emulator", func(b *testing.B) {
		srv, err := emulator.New(emulator.Config{Queues: []emulator.QueueConfig{{Name: queue}}, DisableDelivery: true, SigningKey: testKey})
		if err != nil {
			b.Fatal(err)
		}
		defer srv.Close()
		client, err := srv.NewClient(context.Background())
		if err != nil {
			b.Fatal(err)
		}
		defer client.Close()
		runCreateTasks(b, client)
	})
}
