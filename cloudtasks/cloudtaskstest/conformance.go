package cloudtaskstest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	cloudtasks "cloud.google.com/go/cloudtasks/apiv2"
	"cloud.google.com/go/cloudtasks/apiv2/cloudtaskspb"
	"github.com/stretchr/testify/require"
	"google.golang.org/api/iterator"
	locationpb "google.golang.org/genproto/googleapis/cloud/location"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/fieldmaskpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/ctdispatch/ctdispatch/cloudtasks/internal/tasksize"
)

// Target is a Cloud Tasks endpoint under test.
type Target struct {
	// Client is the official client connected to the target.
	Client *cloudtasks.Client
	// Location is where the suite creates its queues:
	// projects/PROJECT/locations/LOCATION.
	Location string
	// Now is the target's current time. Defaults to time.Now.
	Now func() time.Time
	// Advance moves the target's clock forward. Nil for a target on real
	// time (the real service): tests that need to wait out the name reuse
	// window are skipped.
	Advance func(time.Duration)
	// NameReuseWindow is how long the target keeps a departed task's name
	// taken; only used with Advance. Defaults to 24h.
	NameReuseWindow time.Duration
	// InjectFault makes every later call of the RPC method (for example
	// "BatchCreateTasks") fail with code until stop is called; with commit
	// the call takes effect before it fails. Nil for a target that cannot
	// inject faults (the real service): the fault tests are skipped.
	InjectFault func(method string, code codes.Code, commit bool) (stop func())
}

// RunConformanceTests asserts, through the official client, the behaviours
// of Cloud Tasks that ctdispatch relies on. newTarget is called once per
// subtest. Every subtest creates its own paused queue, so nothing is ever
// delivered, and deletes it afterwards.
func RunConformanceTests(t *testing.T, newTarget func(t *testing.T) Target) {
	tests := []struct {
		name string
		fn   func(t *testing.T, h *harness)
	}{
		{"CreateGetDuplicate", testCreateGetDuplicate},
		{"NotFound", testNotFound},
		{"InvalidArguments", testInvalidArguments},
		{"TaskSizeLimit", testTaskSizeLimit},
		{"Views", testViews},
		{"ListTasksPaging", testListTasksPaging},
		{"PageTokensBoundToRequest", testPageTokensBoundToRequest},
		{"DeletedNameStaysTaken", testDeletedNameStaysTaken},
		{"PurgedNameStaysTaken", testPurgedNameStaysTaken},
		{"NameFreeAfterWindow", testNameFreeAfterWindow},
		{"BatchCreate", testBatchCreate},
		{"BatchCreateOperation", testBatchCreateOperation},
		{"BatchCreatePerRequestFailures", testBatchCreatePerRequestFailures},
		{"BatchCreateRefused", testBatchCreateRefused},
		{"BatchCreateFaults", testBatchCreateFaults},
		{"QueueStateAndUpdate", testQueueStateAndUpdate},
		{"ListQueuesStateFilter", testListQueuesStateFilter},
		{"Locations", testLocations},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.fn(t, newHarness(t, newTarget(t)))
		})
	}
}

// harness is one subtest's target and its queue.
type harness struct {
	Target
	ctx   context.Context
	queue string
}

func newHarness(t *testing.T, tg Target) *harness {
	t.Helper()
	if tg.Now == nil {
		tg.Now = time.Now
	}
	if tg.NameReuseWindow == 0 {
		tg.NameReuseWindow = 24 * time.Hour
	}
	ctx := context.Background()
	h := &harness{Target: tg, ctx: ctx, queue: tg.Location + "/queues/ctd-conformance-" + randomID(8)}
	_, err := tg.Client.CreateQueue(ctx, &cloudtaskspb.CreateQueueRequest{Parent: tg.Location, Queue: &cloudtaskspb.Queue{Name: h.queue}})
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = tg.Client.DeleteQueue(context.Background(), &cloudtaskspb.DeleteQueueRequest{Name: h.queue})
	})
	_, err = tg.Client.PauseQueue(ctx, &cloudtaskspb.PauseQueueRequest{Name: h.queue})
	require.NoError(t, err)
	return h
}

func randomID(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func (h *harness) taskName(id string) string { return h.queue + "/tasks/" + id }

// task is an HTTP task an hour ahead, so even an unpaused queue would not
// deliver it during the test.
func (h *harness) task(name string) *cloudtaskspb.Task {
	return &cloudtaskspb.Task{
		Name:         name,
		ScheduleTime: timestamppb.New(h.Now().Add(time.Hour)),
		MessageType: &cloudtaskspb.Task_HttpRequest{HttpRequest: &cloudtaskspb.HttpRequest{
			Url:     "https://example.com/ctdispatch-conformance",
			Headers: map[string]string{"Content-Type": "application/json"},
			Body:    []byte(`{"conformance":true}`),
		}},
	}
}

func (h *harness) create(task *cloudtaskspb.Task) (*cloudtaskspb.Task, error) {
	return h.Client.CreateTask(h.ctx, &cloudtaskspb.CreateTaskRequest{Parent: h.queue, Task: task})
}

func requireCode(t *testing.T, err error, want codes.Code) {
	t.Helper()
	require.Error(t, err)
	require.Equal(t, want.String(), status.Code(err).String(), "error: %v", err)
}

func testCreateGetDuplicate(t *testing.T, h *harness) {
	name := h.taskName("d_" + randomID(13))
	created, err := h.create(h.task(name))
	require.NoError(t, err)
	require.Equal(t, name, created.Name)
	got, err := h.Client.GetTask(h.ctx, &cloudtaskspb.GetTaskRequest{Name: name})
	require.NoError(t, err)
	require.Equal(t, name, got.Name)
	require.Equal(t, int32(0), got.DispatchCount)
	_, err = h.create(h.task(name))
	requireCode(t, err, codes.AlreadyExists)
}

func testNotFound(t *testing.T, h *harness) {
	_, err := h.Client.GetTask(h.ctx, &cloudtaskspb.GetTaskRequest{Name: h.taskName("missing")})
	requireCode(t, err, codes.NotFound)
	err = h.Client.DeleteTask(h.ctx, &cloudtaskspb.DeleteTaskRequest{Name: h.taskName("missing")})
	requireCode(t, err, codes.NotFound)
	deleted := h.taskName("deleted-twice")
	_, err = h.create(h.task(deleted))
	require.NoError(t, err)
	require.NoError(t, h.Client.DeleteTask(h.ctx, &cloudtaskspb.DeleteTaskRequest{Name: deleted}))
	err = h.Client.DeleteTask(h.ctx, &cloudtaskspb.DeleteTaskRequest{Name: deleted})
	requireCode(t, err, codes.NotFound)
	missingQueue := h.Location + "/queues/ctd-missing-" + randomID(8)
	_, err = h.Client.CreateTask(h.ctx, &cloudtaskspb.CreateTaskRequest{Parent: missingQueue, Task: h.task("")})
	requireCode(t, err, codes.NotFound)
	_, err = h.Client.GetQueue(h.ctx, &cloudtaskspb.GetQueueRequest{Name: missingQueue})
	requireCode(t, err, codes.NotFound)
}

func testInvalidArguments(t *testing.T, h *harness) {
	tests := []struct {
		name   string
		mutate func(*cloudtaskspb.Task)
	}{
		{"task ID with a dot", func(tk *cloudtaskspb.Task) { tk.Name = h.taskName("a.b") }},
		{"task ID with padding", func(tk *cloudtaskspb.Task) { tk.Name = h.taskName("d_abc=") }},
		{"task ID too long", func(tk *cloudtaskspb.Task) { tk.Name = h.taskName(strings.Repeat("a", 501)) }},
		{"task named into another queue", func(tk *cloudtaskspb.Task) {
			tk.Name = h.Location + "/queues/ctd-other/tasks/t1"
		}},
		{"schedule more than 30 days ahead", func(tk *cloudtaskspb.Task) {
			tk.ScheduleTime = timestamppb.New(h.Now().Add(31 * 24 * time.Hour))
		}},
		{"dispatch deadline under 15s", func(tk *cloudtaskspb.Task) { tk.DispatchDeadline = durationpb.New(5 * time.Second) }},
		{"dispatch deadline over 30m", func(tk *cloudtaskspb.Task) { tk.DispatchDeadline = durationpb.New(31 * time.Minute) }},
		{"body with GET", func(tk *cloudtaskspb.Task) {
			tk.GetHttpRequest().HttpMethod = cloudtaskspb.HttpMethod_GET
		}},
		{"URL without scheme", func(tk *cloudtaskspb.Task) { tk.GetHttpRequest().Url = "example.com/x" }},
		// Over 1 MB under either reading (10^6 or 2^20 bytes): the docs'
		// "1MB" does not say which, so the suite asserts only what both
		// readings agree on; the emulator's own tests hold it to 10^6.
		{"task over 2^20 bytes", func(tk *cloudtaskspb.Task) { tk.GetHttpRequest().Body = make([]byte, 1<<20+1) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			task := h.task(h.taskName("valid"))
			tt.mutate(task)
			_, err := h.create(task)
			requireCode(t, err, codes.InvalidArgument)
		})
	}
}

// testTaskSizeLimit: a task of exactly tasksize.Max bytes, as tasksize.Of
// measures it, is accepted: it is within 1 MB under every reading, so the
// dispatcher may send anything up to it.
func testTaskSizeLimit(t *testing.T, h *harness) {
	task := h.task(h.taskName("largest"))
	hr := task.GetHttpRequest()
	// The body's length prefix grows with the body: aim, then adjust.
	hr.Body = make([]byte, tasksize.Max-tasksize.Of(task))
	for n := tasksize.Of(task); n != tasksize.Max; n = tasksize.Of(task) {
		hr.Body = make([]byte, len(hr.Body)+tasksize.Max-n)
	}
	_, err := h.create(task)
	require.NoError(t, err)
}

func testViews(t *testing.T, h *harness) {
	name := h.taskName("view")
	_, err := h.create(h.task(name))
	require.NoError(t, err)
	basic, err := h.Client.GetTask(h.ctx, &cloudtaskspb.GetTaskRequest{Name: name})
	require.NoError(t, err)
	require.Empty(t, basic.GetHttpRequest().GetBody(), "BASIC view leaves the body out")
	full, err := h.Client.GetTask(h.ctx, &cloudtaskspb.GetTaskRequest{Name: name, ResponseView: cloudtaskspb.Task_FULL})
	require.NoError(t, err)
	require.Equal(t, []byte(`{"conformance":true}`), full.GetHttpRequest().GetBody())
	require.Equal(t, "application/json", full.GetHttpRequest().GetHeaders()["Content-Type"])
}

func testListTasksPaging(t *testing.T, h *harness) {
	want := []string{h.taskName("list-a"), h.taskName("list-b"), h.taskName("list-c")}
	for _, n := range want {
		_, err := h.create(h.task(n))
		require.NoError(t, err)
	}
	var got []string
	it := h.Client.ListTasks(h.ctx, &cloudtaskspb.ListTasksRequest{Parent: h.queue, PageSize: 2})
	for {
		tk, err := it.Next()
		if errors.Is(err, iterator.Done) {
			break
		}
		require.NoError(t, err)
		got = append(got, tk.Name)
	}
	require.ElementsMatch(t, want, got)
}

// firstPageToken makes one ListTasks call of page size 1 on parent and
// returns its next_page_token.
func (h *harness) firstPageToken(t *testing.T, parent string) string {
	t.Helper()
	it := h.Client.ListTasks(h.ctx, &cloudtaskspb.ListTasksRequest{Parent: parent, PageSize: 1})
	_, err := it.Next()
	require.NoError(t, err)
	resp, _ := it.Response.(*cloudtaskspb.ListTasksResponse)
	require.NotEmpty(t, resp.GetNextPageToken())
	return resp.GetNextPageToken()
}

// listTasksPage makes one ListTasks call with a page token and returns
// its error.
func (h *harness) listTasksPage(parent, token string) error {
	_, err := h.Client.ListTasks(h.ctx, &cloudtaskspb.ListTasksRequest{Parent: parent, PageToken: token}).Next()
	if errors.Is(err, iterator.Done) {
		return nil
	}
	return err
}

// testPageTokensBoundToRequest: "page_token must be the value of
// next_page_token returned from the previous call" and, for ListQueues,
// "It is an error to switch the value of the filter while iterating
// through pages": a token the target did not return for this request is
// InvalidArgument. The same holds for ListLocations ("Send that page
// token to receive the subsequent page"): a token another method returned
// or a forged one is InvalidArgument, as AIP-158 has it for a page token
// the service did not issue for the request. "The page token is valid for
// only 2 hours": checked when the target's clock can be advanced.
func testPageTokensBoundToRequest(t *testing.T, h *harness) {
	other := h.Location + "/queues/ctd-conformance-" + randomID(8)
	_, err := h.Client.CreateQueue(h.ctx, &cloudtaskspb.CreateQueueRequest{Parent: h.Location, Queue: &cloudtaskspb.Queue{Name: other}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = h.Client.DeleteQueue(context.Background(), &cloudtaskspb.DeleteQueueRequest{Name: other}) })
	_, err = h.Client.PauseQueue(h.ctx, &cloudtaskspb.PauseQueueRequest{Name: other})
	require.NoError(t, err)
	for _, q := range []string{h.queue, other} {
		for _, id := range []string{"page-a", "page-b"} {
			_, err := h.Client.CreateTask(h.ctx, &cloudtaskspb.CreateTaskRequest{Parent: q, Task: h.task(q + "/tasks/" + id)})
			require.NoError(t, err)
		}
	}
	mine, theirs := h.firstPageToken(t, h.queue), h.firstPageToken(t, other)
	require.NoError(t, h.listTasksPage(h.queue, mine))
	requireCode(t, h.listTasksPage(h.queue, theirs), codes.InvalidArgument)
	requireCode(t, h.listTasksPage(h.queue, "bm90LWEtdG9rZW4"), codes.InvalidArgument) // base64url of "not-a-token"
	requireCode(t, h.listTasksPage(h.queue, "not a token!"), codes.InvalidArgument)

	it := h.Client.ListQueues(h.ctx, &cloudtaskspb.ListQueuesRequest{Parent: h.Location, PageSize: 1})
	_, err = it.Next()
	require.NoError(t, err)
	qtok := it.Response.(*cloudtaskspb.ListQueuesResponse).GetNextPageToken()
	require.NotEmpty(t, qtok, "the location holds at least two queues")
	_, err = h.Client.ListQueues(h.ctx, &cloudtaskspb.ListQueuesRequest{Parent: h.Location, PageToken: qtok, Filter: "state: PAUSED"}).Next()
	requireCode(t, err, codes.InvalidArgument)

	project := h.Location[:strings.Index(h.Location, "/locations/")]
	for _, tok := range []string{
		qtok,              // ListQueues' token for a location of this project
		theirs,            // ListTasks' token
		"bm90LWEtdG9rZW4", // forged: base64url of "not-a-token"
		"not a token!",
	} {
		_, err = h.Client.ListLocations(h.ctx, &locationpb.ListLocationsRequest{Name: project, PageToken: tok}).Next()
		requireCode(t, err, codes.InvalidArgument)
	}

	if h.Advance == nil {
		return
	}
	h.Advance(2*time.Hour + time.Second)
	requireCode(t, h.listTasksPage(h.queue, mine), codes.InvalidArgument)
}

func testDeletedNameStaysTaken(t *testing.T, h *harness) {
	name := h.taskName("deleted")
	_, err := h.create(h.task(name))
	require.NoError(t, err)
	require.NoError(t, h.Client.DeleteTask(h.ctx, &cloudtaskspb.DeleteTaskRequest{Name: name}))
	_, err = h.Client.GetTask(h.ctx, &cloudtaskspb.GetTaskRequest{Name: name})
	requireCode(t, err, codes.NotFound)
	_, err = h.create(h.task(name))
	requireCode(t, err, codes.AlreadyExists)
}

func testPurgedNameStaysTaken(t *testing.T, h *harness) {
	name := h.taskName("purged")
	_, err := h.create(h.task(name))
	require.NoError(t, err)
	_, err = h.Client.PurgeQueue(h.ctx, &cloudtaskspb.PurgeQueueRequest{Name: h.queue})
	require.NoError(t, err)
	_, err = h.Client.GetTask(h.ctx, &cloudtaskspb.GetTaskRequest{Name: name})
	requireCode(t, err, codes.NotFound)
	_, err = h.create(h.task(name))
	requireCode(t, err, codes.AlreadyExists)
}

func testNameFreeAfterWindow(t *testing.T, h *harness) {
	if h.Advance == nil {
		t.Skip("the target runs on real time; waiting out the name reuse window is impractical")
	}
	name := h.taskName("reused")
	_, err := h.create(h.task(name))
	require.NoError(t, err)
	require.NoError(t, h.Client.DeleteTask(h.ctx, &cloudtaskspb.DeleteTaskRequest{Name: name}))
	h.Advance(h.NameReuseWindow)
	_, err = h.create(h.task(name))
	require.NoError(t, err)
}

func testBatchCreate(t *testing.T, h *harness) {
	dup := h.taskName("batch-dup")
	_, err := h.create(h.task(dup))
	require.NoError(t, err)
	op, err := h.Client.BatchCreateTasks(h.ctx, &cloudtaskspb.BatchCreateTasksRequest{Parent: h.queue, Requests: []*cloudtaskspb.CreateTaskRequest{
		{Parent: h.queue, Task: h.task(h.taskName("batch-1"))},
		{Parent: h.queue, Task: h.task(dup)},
	}})
	if status.Code(err) == codes.Unimplemented {
		t.Skip("BatchCreateTasks is not available on this target")
	}
	require.NoError(t, err)
	resp, err := op.Wait(h.ctx)
	require.NoError(t, err)
	require.Len(t, resp.GetTasks(), 1)
	require.Equal(t, h.taskName("batch-1"), resp.GetTasks()[0].Name)
	meta, err := op.Metadata()
	require.NoError(t, err)
	require.Len(t, meta.GetFailedRequests(), 1)
	require.Equal(t, int32(codes.AlreadyExists), meta.GetFailedRequests()[1].GetCode())
}

func testQueueStateAndUpdate(t *testing.T, h *harness) {
	q, err := h.Client.GetQueue(h.ctx, &cloudtaskspb.GetQueueRequest{Name: h.queue})
	require.NoError(t, err)
	require.Equal(t, cloudtaskspb.Queue_PAUSED, q.State)
	before := q.GetRetryConfig().GetMaxAttempts()

	q, err = h.Client.UpdateQueue(h.ctx, &cloudtaskspb.UpdateQueueRequest{
		Queue: &cloudtaskspb.Queue{
			Name:        h.queue,
			RateLimits:  &cloudtaskspb.RateLimits{MaxDispatchesPerSecond: 7},
			RetryConfig: &cloudtaskspb.RetryConfig{MaxAttempts: before + 1},
		},
		UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"rate_limits.max_dispatches_per_second"}},
	})
	require.NoError(t, err)
	require.Equal(t, 7.0, q.GetRateLimits().GetMaxDispatchesPerSecond())
	require.Equal(t, before, q.GetRetryConfig().GetMaxAttempts(), "fields outside the mask keep their value")
	require.Equal(t, cloudtaskspb.Queue_PAUSED, q.State, "UpdateQueue does not change the state")

	q, err = h.Client.ResumeQueue(h.ctx, &cloudtaskspb.ResumeQueueRequest{Name: h.queue})
	require.NoError(t, err)
	require.Equal(t, cloudtaskspb.Queue_RUNNING, q.State)
	q, err = h.Client.PauseQueue(h.ctx, &cloudtaskspb.PauseQueueRequest{Name: h.queue})
	require.NoError(t, err)
	require.Equal(t, cloudtaskspb.Queue_PAUSED, q.State)

	require.True(t, h.listed(t, ""), "ListQueues lists %s", h.queue)
}

// batch sends one BatchCreateTasks call creating tasks with these IDs in
// the harness's queue (an empty ID lets the target name the task).
func (h *harness) batch(ids ...string) (*cloudtasks.BatchCreateTasksOperation, error) {
	reqs := make([]*cloudtaskspb.CreateTaskRequest, len(ids))
	for i, id := range ids {
		name := ""
		if id != "" {
			name = h.taskName(id)
		}
		reqs[i] = &cloudtaskspb.CreateTaskRequest{Parent: h.queue, Task: h.task(name)}
	}
	return h.Client.BatchCreateTasks(h.ctx, &cloudtaskspb.BatchCreateTasksRequest{Parent: h.queue, Requests: reqs})
}

// failedCodes reads the operation's metadata: the status code of each
// failed request by its index.
func failedCodes(t *testing.T, op *cloudtasks.BatchCreateTasksOperation) map[int32]codes.Code {
	t.Helper()
	meta, err := op.Metadata()
	require.NoError(t, err)
	out := make(map[int32]codes.Code, len(meta.GetFailedRequests()))
	for i, st := range meta.GetFailedRequests() {
		out[i] = codes.Code(st.GetCode())
	}
	return out
}

func taskNames(tasks []*cloudtaskspb.Task) []string {
	out := make([]string, len(tasks))
	for i, tk := range tasks {
		out[i] = tk.GetName()
	}
	return out
}

func skipWithoutBatch(t *testing.T, err error) {
	t.Helper()
	if status.Code(err) == codes.Unimplemented {
		t.Skip("BatchCreateTasks is not available on this target")
	}
}

// testBatchCreateOperation: the operation is finished when the call
// returns, its metadata says SUCCEEDED with no failures, and the official
// client fetches it again by name (GetOperation).
func testBatchCreateOperation(t *testing.T, h *harness) {
	op, err := h.batch("lro-a", "lro-b", "lro-c")
	skipWithoutBatch(t, err)
	require.NoError(t, err)
	require.True(t, op.Done(), "the operation is done when BatchCreateTasks returns")
	resp, err := op.Wait(h.ctx)
	require.NoError(t, err)
	want := []string{h.taskName("lro-a"), h.taskName("lro-b"), h.taskName("lro-c")}
	require.ElementsMatch(t, want, taskNames(resp.GetTasks()))
	meta, err := op.Metadata()
	require.NoError(t, err)
	require.Equal(t, cloudtaskspb.BatchCreateTasksMetadata_SUCCEEDED.String(), meta.GetState().String())
	require.Empty(t, meta.GetFailedRequests())
	require.NotNil(t, meta.GetStartTime())
	require.NotNil(t, meta.GetEndTime())
	require.False(t, meta.GetEndTime().AsTime().Before(meta.GetStartTime().AsTime()))

	again := h.Client.BatchCreateTasksOperation(op.Name())
	resp, err = again.Poll(h.ctx)
	require.NoError(t, err)
	require.True(t, again.Done())
	require.ElementsMatch(t, want, taskNames(resp.GetTasks()))
	for _, n := range want {
		_, err := h.Client.GetTask(h.ctx, &cloudtaskspb.GetTaskRequest{Name: n})
		require.NoError(t, err, n)
	}
}

// testBatchCreatePerRequestFailures: a request that cannot be created fails
// alone, with its own status in the metadata under its index; the others
// are created.
func testBatchCreatePerRequestFailures(t *testing.T, h *harness) {
	_, err := h.create(h.task(h.taskName("pre-existing")))
	require.NoError(t, err)
	reqs := []*cloudtaskspb.Task{
		h.task(h.taskName("new-a")),        // 0 created
		h.task(h.taskName("pre-existing")), // 1 taken before the batch
		h.task(h.taskName("new-a")),        // 2 taken earlier in the same batch
		h.task(h.taskName("a.b")),          // 3 invalid ID
		h.task(h.taskName("new-b")),        // 4 created
		h.task(h.taskName("far-future")),   // 5 scheduled over 30 days ahead
	}
	reqs[5].ScheduleTime = timestamppb.New(h.Now().Add(31 * 24 * time.Hour))
	batch := &cloudtaskspb.BatchCreateTasksRequest{Parent: h.queue}
	for _, tk := range reqs {
		batch.Requests = append(batch.Requests, &cloudtaskspb.CreateTaskRequest{Parent: h.queue, Task: tk})
	}
	op, err := h.Client.BatchCreateTasks(h.ctx, batch)
	skipWithoutBatch(t, err)
	require.NoError(t, err)
	resp, err := op.Wait(h.ctx)
	require.NoError(t, err)
	require.ElementsMatch(t, []string{h.taskName("new-a"), h.taskName("new-b")}, taskNames(resp.GetTasks()))
	require.Equal(t, map[int32]codes.Code{1: codes.AlreadyExists, 2: codes.AlreadyExists, 3: codes.InvalidArgument, 5: codes.InvalidArgument}, failedCodes(t, op))
	meta, err := op.Metadata()
	require.NoError(t, err)
	require.Equal(t, cloudtaskspb.BatchCreateTasksMetadata_PARTIALLY_SUCCEEDED.String(), meta.GetState().String())

	// Across batches: a name created by an earlier batch is taken. When no
	// request succeeds the metadata still lists each failure; the
	// operation's own result is not relied on.
	op, err = h.batch("new-b")
	require.NoError(t, err)
	_, _ = op.Wait(h.ctx)
	require.Equal(t, map[int32]codes.Code{0: codes.AlreadyExists}, failedCodes(t, op))
}

// testBatchCreateRefused: a batch that breaks the method's own rules is
// refused as a whole, before any task is created.
func testBatchCreateRefused(t *testing.T, h *harness) {
	ids := make([]string, 101)
	for i := range ids {
		ids[i] = fmt.Sprintf("over-%03d", i)
	}
	_, err := h.batch(ids...)
	skipWithoutBatch(t, err)
	requireCode(t, err, codes.InvalidArgument)
	_, err = h.batch()
	requireCode(t, err, codes.InvalidArgument)

	other := h.Location + "/queues/ctd-other-" + randomID(4)
	_, err = h.Client.BatchCreateTasks(h.ctx, &cloudtaskspb.BatchCreateTasksRequest{Parent: h.queue, Requests: []*cloudtaskspb.CreateTaskRequest{
		{Parent: h.queue, Task: h.task(h.taskName("mixed-1"))},
		{Parent: other, Task: h.task(other + "/tasks/mixed-2")},
	}})
	requireCode(t, err, codes.InvalidArgument)

	missing := h.Location + "/queues/ctd-missing-" + randomID(8)
	_, err = h.Client.BatchCreateTasks(h.ctx, &cloudtaskspb.BatchCreateTasksRequest{Parent: missing, Requests: []*cloudtaskspb.CreateTaskRequest{
		{Parent: missing, Task: h.task("")},
	}})
	requireCode(t, err, codes.NotFound)

	for _, id := range []string{ids[0], "mixed-1"} {
		_, err := h.Client.GetTask(h.ctx, &cloudtaskspb.GetTaskRequest{Name: h.taskName(id)})
		requireCode(t, err, codes.NotFound)
	}
}

// testBatchCreateFaults: a failed call either created nothing or, after a
// commit-then-fail, every task, so a retry of the same batch meets
// ALREADY_EXISTS for each request.
func testBatchCreateFaults(t *testing.T, h *harness) {
	if h.InjectFault == nil {
		t.Skip("the target cannot inject faults")
	}
	stop := h.InjectFault("BatchCreateTasks", codes.Unavailable, false)
	_, err := h.batch("lost-a", "lost-b")
	stop()
	requireCode(t, err, codes.Unavailable)
	for _, id := range []string{"lost-a", "lost-b"} {
		_, err := h.Client.GetTask(h.ctx, &cloudtaskspb.GetTaskRequest{Name: h.taskName(id)})
		requireCode(t, err, codes.NotFound)
	}

	stop = h.InjectFault("BatchCreateTasks", codes.DeadlineExceeded, true)
	_, err = h.batch("kept-a", "kept-b")
	stop()
	requireCode(t, err, codes.DeadlineExceeded)
	for _, id := range []string{"kept-a", "kept-b"} {
		_, err := h.Client.GetTask(h.ctx, &cloudtaskspb.GetTaskRequest{Name: h.taskName(id)})
		require.NoError(t, err, "committed before the call failed: %s", id)
	}
	op, err := h.batch("kept-a", "kept-b")
	require.NoError(t, err)
	_, _ = op.Wait(h.ctx)
	require.Equal(t, map[int32]codes.Code{0: codes.AlreadyExists, 1: codes.AlreadyExists}, failedCodes(t, op))
}

// listed reports whether ListQueues with filter lists the harness's queue.
func (h *harness) listed(t *testing.T, filter string) bool {
	t.Helper()
	it := h.Client.ListQueues(h.ctx, &cloudtaskspb.ListQueuesRequest{Parent: h.Location, Filter: filter})
	for {
		q, err := it.Next()
		if errors.Is(err, iterator.Done) {
			return false
		}
		require.NoError(t, err, "filter %q", filter)
		if q.GetName() == h.queue {
			return true
		}
	}
}

// testListQueuesStateFilter: the documented sample filter "state: PAUSED"
// selects queues by state.
func testListQueuesStateFilter(t *testing.T, h *harness) {
	require.True(t, h.listed(t, "state: PAUSED"), "the paused queue is listed by state: PAUSED")
	require.False(t, h.listed(t, "state: RUNNING"), "the paused queue is not listed by state: RUNNING")
	_, err := h.Client.ResumeQueue(h.ctx, &cloudtaskspb.ResumeQueueRequest{Name: h.queue})
	require.NoError(t, err)
	require.False(t, h.listed(t, "state: PAUSED"))
	require.True(t, h.listed(t, "state: RUNNING"))
	_, err = h.Client.PauseQueue(h.ctx, &cloudtaskspb.PauseQueueRequest{Name: h.queue})
	require.NoError(t, err)
}

// testLocations: the Locations service the client reaches on the same
// connection lists the location of the harness's queue among its
// project's, and GetLocation describes it.
func testLocations(t *testing.T, h *harness) {
	project := h.Location[:strings.Index(h.Location, "/locations/")]
	it := h.Client.ListLocations(h.ctx, &locationpb.ListLocationsRequest{Name: project})
	var names []string
	for {
		l, err := it.Next()
		if errors.Is(err, iterator.Done) {
			break
		}
		require.NoError(t, err)
		names = append(names, l.GetName())
	}
	require.Contains(t, names, h.Location)
	got, err := h.Client.GetLocation(h.ctx, &locationpb.GetLocationRequest{Name: h.Location})
	require.NoError(t, err)
	require.Equal(t, h.Location, got.GetName())
	require.Equal(t, h.Location[strings.LastIndex(h.Location, "/")+1:], got.GetLocationId())
}
