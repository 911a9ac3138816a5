package emulator_test

import (
	"context"
	"strings"
	"testing"
	"time"

	cloudtasks "cloud.google.com/go/cloudtasks/apiv2"
	"cloud.google.com/go/cloudtasks/apiv2/cloudtaskspb"
	"cloud.google.com/go/iam/apiv1/iampb"
	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"
	"google.golang.org/api/iterator"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/fieldmaskpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/ctdispatch/ctdispatch/cloudtasks/emulator"
	"github.com/ctdispatch/ctdispatch/cloudtasks/internal/tasksize"
)

const (
	loc   = "projects/p/locations/l"
	queue = loc + "/queues/q"
)

var epoch = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

type testBundle struct {
	srv    *emulator.Server
	client *cloudtasks.Client
	clock  *clockwork.FakeClock
}

// setup starts an emulator with one queue, a fake clock and manual
// delivery (RunDue), and the official client over loopback gRPC.
func setup(t *testing.T, mutate ...func(*emulator.Config)) *testBundle {
	t.Helper()
	clock := clockwork.NewFakeClockAt(epoch)
	cfg := emulator.Config{Clock: clock, Queues: []emulator.QueueConfig{{Name: queue}}, SigningKey: testKey, ManualDelivery: true}
	for _, m := range mutate {
		m(&cfg)
	}
	srv, err := emulator.New(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, srv.Close()) })
	client, err := srv.NewClient(context.Background())
	require.NoError(t, err)
	t.Cleanup(func() { client.Close() })
	return &testBundle{srv: srv, client: client, clock: clock}
}

func httpTask(name string) *cloudtaskspb.Task {
	return &cloudtaskspb.Task{
		Name: name,
		MessageType: &cloudtaskspb.Task_HttpRequest{HttpRequest: &cloudtaskspb.HttpRequest{
			Url: "http://127.0.0.1:1/work", Body: []byte(`{"a":1}`),
		}},
	}
}

func requireCode(t *testing.T, err error, want codes.Code, msgPart string) {
	t.Helper()
	require.Error(t, err)
	st, ok := status.FromError(err)
	require.True(t, ok, "not a status error: %v", err)
	require.Equal(t, want, st.Code(), st.Message())
	require.Contains(t, st.Message(), msgPart)
}

func TestQueueLifecycle(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()

	q, err := b.client.CreateQueue(ctx, &cloudtaskspb.CreateQueueRequest{Parent: loc, Queue: &cloudtaskspb.Queue{
		Name:       loc + "/queues/second",
		RateLimits: &cloudtaskspb.RateLimits{MaxDispatchesPerSecond: 10},
	}})
	require.NoError(t, err)
	require.Equal(t, cloudtaskspb.Queue_RUNNING, q.State)
	require.Equal(t, 10.0, q.RateLimits.MaxDispatchesPerSecond)
	require.Equal(t, int32(10), q.RateLimits.MaxBurstSize)
	require.Equal(t, int32(emulator.DefaultMaxConcurrentDispatches), q.RateLimits.MaxConcurrentDispatches)
	require.Equal(t, int32(emulator.DefaultMaxAttempts), q.RetryConfig.MaxAttempts)

	_, err = b.client.CreateQueue(ctx, &cloudtaskspb.CreateQueueRequest{Parent: loc, Queue: &cloudtaskspb.Queue{Name: loc + "/queues/second"}})
	requireCode(t, err, codes.AlreadyExists, "already exists")

	var names []string
	it := b.client.ListQueues(ctx, &cloudtaskspb.ListQueuesRequest{Parent: loc, PageSize: 1})
	for {
		q, err := it.Next()
		if err == iterator.Done {
			break
		}
		require.NoError(t, err)
		names = append(names, q.Name)
	}
	require.Equal(t, []string{queue, loc + "/queues/second"}, names)

	q, err = b.client.UpdateQueue(ctx, &cloudtaskspb.UpdateQueueRequest{
		Queue:      &cloudtaskspb.Queue{Name: loc + "/queues/second", RateLimits: &cloudtaskspb.RateLimits{MaxConcurrentDispatches: 7}, RetryConfig: &cloudtaskspb.RetryConfig{MaxAttempts: 3}},
		UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"rate_limits.max_concurrent_dispatches"}},
	})
	require.NoError(t, err)
	require.Equal(t, int32(7), q.RateLimits.MaxConcurrentDispatches)
	require.Equal(t, 10.0, q.RateLimits.MaxDispatchesPerSecond, "fields outside the mask are kept")
	require.Equal(t, int32(emulator.DefaultMaxAttempts), q.RetryConfig.MaxAttempts, "fields outside the mask are kept")

	_, err = b.client.UpdateQueue(ctx, &cloudtaskspb.UpdateQueueRequest{
		Queue:      &cloudtaskspb.Queue{Name: loc + "/queues/second"},
		UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"state"}},
	})
	requireCode(t, err, codes.InvalidArgument, `"state" cannot be updated`)

	q, err = b.client.PauseQueue(ctx, &cloudtaskspb.PauseQueueRequest{Name: queue})
	require.NoError(t, err)
	require.Equal(t, cloudtaskspb.Queue_PAUSED, q.State)
	q, err = b.client.ResumeQueue(ctx, &cloudtaskspb.ResumeQueueRequest{Name: queue})
	require.NoError(t, err)
	require.Equal(t, cloudtaskspb.Queue_RUNNING, q.State)

	require.NoError(t, b.client.DeleteQueue(ctx, &cloudtaskspb.DeleteQueueRequest{Name: loc + "/queues/second"}))
	_, err = b.client.GetQueue(ctx, &cloudtaskspb.GetQueueRequest{Name: loc + "/queues/second"})
	requireCode(t, err, codes.NotFound, "does not exist")
	_, err = b.client.CreateQueue(ctx, &cloudtaskspb.CreateQueueRequest{Parent: loc, Queue: &cloudtaskspb.Queue{Name: loc + "/queues/second"}})
	requireCode(t, err, codes.FailedPrecondition, "deleted recently")
	b.clock.Advance(7*24*time.Hour - time.Nanosecond)
	_, err = b.client.CreateQueue(ctx, &cloudtaskspb.CreateQueueRequest{Parent: loc, Queue: &cloudtaskspb.Queue{Name: loc + "/queues/second"}})
	requireCode(t, err, codes.FailedPrecondition, "its name can be used again at 2026-01-09T03:04:05Z")
	b.clock.Advance(time.Nanosecond)
	_, err = b.client.CreateQueue(ctx, &cloudtaskspb.CreateQueueRequest{Parent: loc, Queue: &cloudtaskspb.Queue{Name: loc + "/queues/second"}})
	require.NoError(t, err)
}

func TestQueueErrors(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	tests := []struct {
		name string
		call func() error
		code codes.Code
		msg  string
	}{
		{"get missing", func() error {
			_, err := b.client.GetQueue(ctx, &cloudtaskspb.GetQueueRequest{Name: loc + "/queues/nope"})
			return err
		}, codes.NotFound, "queue projects/p/locations/l/queues/nope does not exist"},
		{"queue id with underscore", func() error {
			_, err := b.client.CreateQueue(ctx, &cloudtaskspb.CreateQueueRequest{Parent: loc, Queue: &cloudtaskspb.Queue{Name: loc + "/queues/a_b"}})
			return err
		}, codes.InvalidArgument, "[A-Za-z0-9-]"},
		{"queue id too long", func() error {
			_, err := b.client.CreateQueue(ctx, &cloudtaskspb.CreateQueueRequest{Parent: loc, Queue: &cloudtaskspb.Queue{Name: loc + "/queues/" + strings.Repeat("a", 101)}})
			return err
		}, codes.InvalidArgument, "1 to 100 characters"},
		{"queue in another location", func() error {
			_, err := b.client.CreateQueue(ctx, &cloudtaskspb.CreateQueueRequest{Parent: loc, Queue: &cloudtaskspb.Queue{Name: "projects/p/locations/other/queues/x"}})
			return err
		}, codes.InvalidArgument, "not in the location"},
		{"rate too high", func() error {
			_, err := b.client.CreateQueue(ctx, &cloudtaskspb.CreateQueueRequest{Parent: loc, Queue: &cloudtaskspb.Queue{Name: loc + "/queues/fast", RateLimits: &cloudtaskspb.RateLimits{MaxDispatchesPerSecond: 501}}})
			return err
		}, codes.InvalidArgument, "max_dispatches_per_second 501 must be between 0 and 500"},
		{"min backoff over max", func() error {
			_, err := b.client.CreateQueue(ctx, &cloudtaskspb.CreateQueueRequest{Parent: loc, Queue: &cloudtaskspb.Queue{Name: loc + "/queues/b", RetryConfig: &cloudtaskspb.RetryConfig{MinBackoff: durationpb.New(time.Minute), MaxBackoff: durationpb.New(time.Second)}}})
			return err
		}, codes.InvalidArgument, "min_backoff 1m0s must not exceed max_backoff 1s"},
		{"purge missing", func() error {
			_, err := b.client.PurgeQueue(ctx, &cloudtaskspb.PurgeQueueRequest{Name: loc + "/queues/nope"})
			return err
		}, codes.NotFound, "does not exist"},
		{"iam of a missing queue", func() error {
			_, err := b.client.GetIamPolicy(ctx, &iampb.GetIamPolicyRequest{Resource: loc + "/queues/nope"})
			return err
		}, codes.NotFound, "queue projects/p/locations/l/queues/nope does not exist"},
		{"cmek", func() error {
			_, err := b.client.GetCmekConfig(ctx, &cloudtaskspb.GetCmekConfigRequest{Name: loc + "/cmekConfig"})
			return err
		}, codes.Unimplemented, "not emulated"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			requireCode(t, tt.call(), tt.code, tt.msg)
		})
	}
}

func TestCreateTaskValidation(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	withReq := func(f func(*cloudtaskspb.Task, *cloudtaskspb.HttpRequest)) *cloudtaskspb.Task {
		task := httpTask("")
		f(task, task.GetHttpRequest())
		return task
	}
	tests := []struct {
		name   string
		parent string
		task   *cloudtaskspb.Task
		code   codes.Code
		msg    string
	}{
		{"missing queue", loc + "/queues/nope", httpTask(""), codes.NotFound, "does not exist"},
		{"task ID with a dot", queue, httpTask(queue + "/tasks/a.b"), codes.InvalidArgument, "[A-Za-z0-9_-]"},
		{"task ID too long", queue, httpTask(queue + "/tasks/" + strings.Repeat("a", 501)), codes.InvalidArgument, "1 to 500 characters"},
		{"padded base32", queue, httpTask(queue + "/tasks/d_abc="), codes.InvalidArgument, "[A-Za-z0-9_-]"},
		{"task in another queue", queue, httpTask(loc + "/queues/other/tasks/t1"), codes.InvalidArgument, "is not in the queue"},
		{"name is a prefix match only", queue, httpTask(queue + "/tasks/ok/extra"), codes.InvalidArgument, "is not a task name"},
		{"no target", queue, &cloudtaskspb.Task{}, codes.InvalidArgument, "http_request is required"},
		{"relative url", queue, withReq(func(_ *cloudtaskspb.Task, r *cloudtaskspb.HttpRequest) { r.Url = "/work" }), codes.InvalidArgument, "absolute http:// or https://"},
		{"long url", queue, withReq(func(_ *cloudtaskspb.Task, r *cloudtaskspb.HttpRequest) {
			r.Url = "http://h/" + strings.Repeat("a", 2100)
		}), codes.InvalidArgument, "at most 2083"},
		{"body with GET", queue, withReq(func(_ *cloudtaskspb.Task, r *cloudtaskspb.HttpRequest) { r.HttpMethod = cloudtaskspb.HttpMethod_GET }), codes.InvalidArgument, "only with POST, PUT or PATCH"},
		{"a body of 10^6 + 1 bytes", queue, withReq(func(_ *cloudtaskspb.Task, r *cloudtaskspb.HttpRequest) { r.Body = make([]byte, 1_000_001) }), codes.InvalidArgument,
			"task is 1000034 bytes (its wire size); the limit for HTTP tasks is 1000000 bytes (1 MB)"},
		{"one byte over the limit", queue, sizedTask(tasksize.Max + 1), codes.InvalidArgument,
			"task is 1000001 bytes (its wire size); the limit for HTTP tasks is 1000000 bytes (1 MB)"},
		{"schedule too far", queue, withReq(func(tk *cloudtaskspb.Task, _ *cloudtaskspb.HttpRequest) {
			tk.ScheduleTime = timestamppb.New(epoch.Add(30*24*time.Hour + time.Second))
		}), codes.InvalidArgument, "more than 30 days"},
		{"deadline too short", queue, withReq(func(tk *cloudtaskspb.Task, _ *cloudtaskspb.HttpRequest) {
			tk.DispatchDeadline = durationpb.New(14 * time.Second)
		}), codes.InvalidArgument, "between 15s and 30m"},
		{"deadline too long", queue, withReq(func(tk *cloudtaskspb.Task, _ *cloudtaskspb.HttpRequest) {
			tk.DispatchDeadline = durationpb.New(31 * time.Minute)
		}), codes.InvalidArgument, "between 15s and 30m"},
		{"oidc without account", queue, withReq(func(_ *cloudtaskspb.Task, r *cloudtaskspb.HttpRequest) {
			r.AuthorizationHeader = &cloudtaskspb.HttpRequest_OidcToken{OidcToken: &cloudtaskspb.OidcToken{}}
		}), codes.InvalidArgument, "service_account_email is required"},
		{"headers too large", queue, withReq(func(_ *cloudtaskspb.Task, r *cloudtaskspb.HttpRequest) {
			r.Headers = map[string]string{"X-Big": strings.Repeat("a", 80<<10)}
		}), codes.InvalidArgument, "under 80 KB"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := b.client.CreateTask(ctx, &cloudtaskspb.CreateTaskRequest{Parent: tt.parent, Task: tt.task})
			requireCode(t, err, tt.code, tt.msg)
		})
	}
	require.Empty(t, b.srv.Tasks(queue))

	// The limits themselves are accepted.
	ok := withReq(func(tk *cloudtaskspb.Task, r *cloudtaskspb.HttpRequest) {
		tk.Name = queue + "/tasks/" + strings.Repeat("a", 500)
		tk.ScheduleTime = timestamppb.New(epoch.Add(30 * 24 * time.Hour))
		tk.DispatchDeadline = durationpb.New(15 * time.Second)
		r.Url = "https://h/" + strings.Repeat("a", 2083-len("https://h/"))
	})
	_, err := b.client.CreateTask(ctx, &cloudtaskspb.CreateTaskRequest{Parent: queue, Task: ok})
	require.NoError(t, err)
	_, err = b.client.CreateTask(ctx, &cloudtaskspb.CreateTaskRequest{Parent: queue, Task: sizedTask(tasksize.Max)})
	require.NoError(t, err, "a task of exactly tasksize.Max bytes")
}

// sizedTask is an HTTP task whose wire size, as tasksize.Of measures it,
// is exactly size bytes.
func sizedTask(size int) *cloudtaskspb.Task {
	task := httpTask("")
	hr := task.GetHttpRequest()
	// The body's length prefix grows with the body: aim, then adjust.
	hr.Body = make([]byte, size-tasksize.Of(task))
	for n := tasksize.Of(task); n != size; n = tasksize.Of(task) {
		hr.Body = make([]byte, len(hr.Body)+size-n)
	}
	return task
}

func TestTaskViewsAndListing(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *emulator.Config) { c.DisableDelivery = true })
	ctx := context.Background()
	for _, id := range []string{"c", "a", "b"} {
		_, err := b.client.CreateTask(ctx, &cloudtaskspb.CreateTaskRequest{Parent: queue, Task: httpTask(queue + "/tasks/" + id)})
		require.NoError(t, err)
	}
	got, err := b.client.GetTask(ctx, &cloudtaskspb.GetTaskRequest{Name: queue + "/tasks/a"})
	require.NoError(t, err)
	require.Equal(t, cloudtaskspb.Task_BASIC, got.View)
	require.Nil(t, got.GetHttpRequest().Body, "BASIC leaves the body out")
	require.Equal(t, epoch, got.ScheduleTime.AsTime())
	require.Equal(t, epoch, got.CreateTime.AsTime())
	require.Equal(t, 10*time.Minute, got.DispatchDeadline.AsDuration())
	require.Equal(t, cloudtaskspb.HttpMethod_POST, got.GetHttpRequest().HttpMethod)

	got, err = b.client.GetTask(ctx, &cloudtaskspb.GetTaskRequest{Name: queue + "/tasks/a", ResponseView: cloudtaskspb.Task_FULL})
	require.NoError(t, err)
	require.Equal(t, []byte(`{"a":1}`), got.GetHttpRequest().Body)

	var names []string
	it := b.client.ListTasks(ctx, &cloudtaskspb.ListTasksRequest{Parent: queue, PageSize: 2})
	for {
		tk, err := it.Next()
		if err == iterator.Done {
			break
		}
		require.NoError(t, err)
		names = append(names, strings.TrimPrefix(tk.Name, queue+"/tasks/"))
	}
	require.Equal(t, []string{"a", "b", "c"}, names)

	unnamed, err := b.client.CreateTask(ctx, &cloudtaskspb.CreateTaskRequest{Parent: queue, Task: httpTask("")})
	require.NoError(t, err)
	require.Regexp(t, `^`+queue+`/tasks/[0-9]+$`, unnamed.Name)

	_, err = b.client.GetTask(ctx, &cloudtaskspb.GetTaskRequest{Name: queue + "/tasks/zzz"})
	requireCode(t, err, codes.NotFound, "does not exist")
	_, err = b.client.RunTask(ctx, &cloudtaskspb.RunTaskRequest{Name: queue + "/tasks/a"})
	requireCode(t, err, codes.FailedPrecondition, "delivery is disabled")
}

func TestNameReuseWindow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tests := []struct {
		name   string
		window time.Duration
		remove func(b *testBundle, task string) error
	}{
		{"delete", 0, func(b *testBundle, task string) error {
			return b.client.DeleteTask(ctx, &cloudtaskspb.DeleteTaskRequest{Name: task})
		}},
		{"purge", 0, func(b *testBundle, _ string) error {
			_, err := b.client.PurgeQueue(ctx, &cloudtaskspb.PurgeQueueRequest{Name: queue})
			return err
		}},
		{"batch delete", time.Hour, func(b *testBundle, task string) error {
			op, err := b.client.BatchDeleteTasks(ctx, &cloudtaskspb.BatchDeleteTasksRequest{Parent: queue, Names: []string{task}})
			if err != nil {
				return err
			}
			return op.Wait(ctx)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, func(c *emulator.Config) { c.NameReuseWindow = tt.window; c.DisableDelivery = true })
			window := tt.window
			if window == 0 {
				window = emulator.DefaultNameReuseWindow
			}
			name := queue + "/tasks/d_reuse"
			create := func() error {
				_, err := b.client.CreateTask(ctx, &cloudtaskspb.CreateTaskRequest{Parent: queue, Task: httpTask(name)})
				return err
			}
			require.NoError(t, create())
			requireCode(t, create(), codes.AlreadyExists, "already exists")
			require.NoError(t, tt.remove(b, name))
			_, err := b.client.GetTask(ctx, &cloudtaskspb.GetTaskRequest{Name: name})
			requireCode(t, err, codes.NotFound, "does not exist")
			requireCode(t, create(), codes.AlreadyExists, "name reuse window")
			require.Equal(t, map[string]time.Time{name: epoch.Add(window)}, b.srv.RememberedNames())

			b.clock.Advance(window - time.Nanosecond)
			requireCode(t, create(), codes.AlreadyExists, "already exists")
			b.clock.Advance(time.Nanosecond)
			require.NoError(t, create())
		})
	}
}

func TestBatchCreateOperation(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *emulator.Config) { c.DisableDelivery = true })
	ctx := context.Background()
	_, err := b.client.CreateTask(ctx, &cloudtaskspb.CreateTaskRequest{Parent: queue, Task: httpTask(queue + "/tasks/dup")})
	require.NoError(t, err)

	op, err := b.client.BatchCreateTasks(ctx, &cloudtaskspb.BatchCreateTasksRequest{Parent: queue, Requests: []*cloudtaskspb.CreateTaskRequest{
		{Parent: queue, Task: httpTask(queue + "/tasks/b1")},
		{Parent: queue, Task: httpTask(queue + "/tasks/dup")},
		{Parent: queue, Task: httpTask(queue + "/tasks/b3")},
	}})
	require.NoError(t, err)
	resp, err := op.Wait(ctx)
	require.NoError(t, err)
	require.Len(t, resp.Tasks, 2)
	require.Equal(t, queue+"/tasks/b1", resp.Tasks[0].Name)
	meta, err := op.Metadata()
	require.NoError(t, err)
	require.Equal(t, cloudtaskspb.BatchCreateTasksMetadata_PARTIALLY_SUCCEEDED, meta.State)
	require.Len(t, meta.FailedRequests, 1)
	require.Equal(t, int32(codes.AlreadyExists), meta.FailedRequests[1].Code)

	// The operation can be fetched again by name through the client's
	// operations client, on the same connection.
	again := b.client.BatchCreateTasksOperation(op.Name())
	resp2, err := again.Poll(ctx)
	require.NoError(t, err)
	require.True(t, again.Done())
	require.Len(t, resp2.Tasks, 2)

	_, err = b.client.BatchCreateTasks(ctx, &cloudtaskspb.BatchCreateTasksRequest{Parent: queue, Requests: []*cloudtaskspb.CreateTaskRequest{
		{Parent: loc + "/queues/other", Task: httpTask("")},
	}})
	requireCode(t, err, codes.InvalidArgument, "a batch targets one queue")

	dop, err := b.client.BatchDeleteTasks(ctx, &cloudtaskspb.BatchDeleteTasksRequest{Parent: queue, Names: []string{queue + "/tasks/b1", queue + "/tasks/missing"}})
	require.NoError(t, err)
	require.NoError(t, dop.Wait(ctx))
	dmeta, err := dop.Metadata()
	require.NoError(t, err)
	require.Equal(t, cloudtaskspb.BatchDeleteTasksMetadata_PARTIALLY_SUCCEEDED, dmeta.State)
	require.Equal(t, int32(codes.NotFound), dmeta.FailedRequests[1].Code)
	require.Len(t, b.srv.Tasks(queue), 2)
}

func TestConfigValidation(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		cfg  emulator.Config
		msg  string
	}{
		{"bad queue", emulator.Config{Queues: []emulator.QueueConfig{{Name: "q"}}}, "Config.Queues[0].Name"},
		{"rate", emulator.Config{Faults: emulator.Faults{Rules: []emulator.FaultRule{{Rate: 2}}}}, "Config.Faults.Rules[0].Rate"},
		{"method", emulator.Config{Faults: emulator.Faults{Rules: []emulator.FaultRule{{Rate: 1, Methods: []string{"Create"}}}}}, "is not a Cloud Tasks RPC name"},
		{"commit without code", emulator.Config{Faults: emulator.Faults{Rules: []emulator.FaultRule{{Rate: 1, CommitThenFail: true}}}}, "Config.Faults.Rules[0].Code"},
		{"per request on a single RPC", emulator.Config{Faults: emulator.Faults{Rules: []emulator.FaultRule{{Rate: 1, Code: codes.Unavailable, PerRequest: true, Methods: []string{"BatchCreateTasks", "CreateTask"}}}}},
			`Config.Faults.Rules[0].Methods[1] "CreateTask" is not a batch RPC; a PerRequest rule names only BatchCreateTasks or BatchDeleteTasks`},
		{"per request on every RPC", emulator.Config{Faults: emulator.Faults{Rules: []emulator.FaultRule{{Rate: 1, Code: codes.Unavailable, PerRequest: true}}}},
			`Config.Faults.Rules[0].Methods "" must name BatchCreateTasks or BatchDeleteTasks when PerRequest is set`},
		{"per request without code", emulator.Config{Faults: emulator.Faults{Rules: []emulator.FaultRule{{Rate: 1, PerRequest: true, Methods: []string{"BatchCreateTasks"}}}}},
			`Config.Faults.Rules[0].Code "OK" must be an error code when PerRequest is set`},
		{"per request with latency", emulator.Config{Faults: emulator.Faults{Rules: []emulator.FaultRule{{Rate: 1, Code: codes.Unavailable, PerRequest: true, Methods: []string{"BatchDeleteTasks"}, Latency: time.Second}}}},
			`Config.Faults.Rules[0].Latency "1s" must be zero when PerRequest is set`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := emulator.New(tt.cfg)
			require.ErrorIs(t, err, emulator.ErrInvalidConfig)
			require.ErrorContains(t, err, tt.msg)
		})
	}
}
