package cloudtasks

import (
	"context"
	"net"
	"strings"
	"sync"
	"testing"

	ctapi "cloud.google.com/go/cloudtasks/apiv2"
	"cloud.google.com/go/cloudtasks/apiv2/cloudtaskspb"
	"github.com/stretchr/testify/require"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/emptypb"
)

// fakeServer is a minimal Cloud Tasks server over real gRPC: named
// CreateTask with AlreadyExists, GetTask, DeleteTask, and a fault hook. It
// stands in for the service in this package's unit tests.
type fakeServer struct {
	cloudtaskspb.UnimplementedCloudTasksServer
	mu    sync.Mutex
	tasks map[string]*cloudtaskspb.Task
	// fault, when set, is asked before each call; commit reports whether
	// the call takes effect before the returned error is sent.
	fault   func(method string, n int) (err error, commit bool)
	calls   map[string]int
	srv     *grpc.Server
	addr    string
	created int
}

func startFake(t testing.TB) *fakeServer {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	f := &fakeServer{tasks: map[string]*cloudtaskspb.Task{}, calls: map[string]int{}, srv: grpc.NewServer(), addr: lis.Addr().String()}
	cloudtaskspb.RegisterCloudTasksServer(f.srv, f)
	go f.srv.Serve(lis)
	t.Cleanup(f.srv.Stop)
	return f
}

func (f *fakeServer) client(t testing.TB) *ctapi.Client {
	t.Helper()
	c, err := ctapi.NewClient(context.Background(),
		option.WithEndpoint(f.addr), option.WithoutAuthentication(),
		option.WithGRPCDialOption(grpc.WithTransportCredentials(insecure.NewCredentials())))
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return c
}

func (f *fakeServer) setFault(fn func(method string, n int) (error, bool)) {
	f.mu.Lock()
	f.fault = fn
	f.mu.Unlock()
}

// before counts the call and applies the fault hook.
func (f *fakeServer) before(method string) (error, bool) {
	f.calls[method]++
	if f.fault == nil {
		return nil, true
	}
	return f.fault(method, f.calls[method])
}

func (f *fakeServer) CreateTask(_ context.Context, req *cloudtaskspb.CreateTaskRequest) (*cloudtaskspb.Task, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	ferr, commit := f.before("CreateTask")
	if !commit {
		return nil, ferr
	}
	name := req.GetTask().GetName()
	if !strings.HasPrefix(name, req.GetParent()+"/tasks/") {
		return nil, status.Errorf(codes.InvalidArgument, "task name %q not in queue %q", name, req.GetParent())
	}
	if _, ok := f.tasks[name]; ok {
		if ferr != nil {
			return nil, ferr
		}
		return nil, status.Errorf(codes.AlreadyExists, "task %s exists", name)
	}
	task := proto.Clone(req.GetTask()).(*cloudtaskspb.Task)
	f.tasks[name] = task
	f.created++
	if ferr != nil {
		return nil, ferr
	}
	return task, nil
}

func (f *fakeServer) GetTask(_ context.Context, req *cloudtaskspb.GetTaskRequest) (*cloudtaskspb.Task, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if ferr, _ := f.before("GetTask"); ferr != nil {
		return nil, ferr
	}
	if task, ok := f.tasks[req.GetName()]; ok {
		return task, nil
	}
	return nil, status.Errorf(codes.NotFound, "no task %s", req.GetName())
}

func (f *fakeServer) DeleteTask(_ context.Context, req *cloudtaskspb.DeleteTaskRequest) (*emptypb.Empty, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if ferr, _ := f.before("DeleteTask"); ferr != nil {
		return nil, ferr
	}
	if _, ok := f.tasks[req.GetName()]; !ok {
		return nil, status.Errorf(codes.NotFound, "no task %s", req.GetName())
	}
	delete(f.tasks, req.GetName())
	return &emptypb.Empty{}, nil
}

func (f *fakeServer) address() string { return f.addr }

// counts returns the number of tasks stored and created so far.
func (f *fakeServer) counts() (stored, created int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.tasks), f.created
}
