package emulator_test

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/cloudtasks/apiv2/cloudtaskspb"
	"github.com/golang-jwt/jwt/v5"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/ctdispatch/ctdispatch/cloudtasks/emulator"
	"github.com/ctdispatch/ctdispatch/cloudtasks/emulator/emuproto"
)

// received is one request as the worker saw it.
type received struct {
	header        http.Header
	body          []byte
	method        string
	path          string
	host          string
	contentLength int64
}

// worker is an HTTP target that answers with a scripted sequence of status
// codes (the last one repeats) and records every request.
type worker struct {
	mu      sync.Mutex
	codes   []int
	headers map[string]string // extra response headers
	got     []received
	arrived chan struct{}
	block   chan struct{} // if set, each request waits for it or its context
	srv     *httptest.Server
}

func newWorker(t *testing.T, codes ...int) *worker {
	w := &worker{codes: codes, arrived: make(chan struct{}, 100)}
	w.srv = httptest.NewServer(http.HandlerFunc(w.serve))
	t.Cleanup(w.srv.Close)
	return w
}

func (w *worker) serve(rw http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	w.mu.Lock()
	w.got = append(w.got, received{header: r.Header.Clone(), body: body, method: r.Method, path: r.URL.Path, host: r.Host, contentLength: r.ContentLength})
	code := w.codes[min(len(w.got), len(w.codes))-1]
	for k, v := range w.headers {
		rw.Header().Set(k, v)
	}
	block := w.block
	w.mu.Unlock()
	w.arrived <- struct{}{}
	if block != nil {
		select {
		case <-block:
		case <-r.Context().Done():
			return
		}
	}
	rw.WriteHeader(code)
}

func (w *worker) requests() []received {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]received(nil), w.got...)
}

func (w *worker) task(name string) *cloudtaskspb.Task {
	return &cloudtaskspb.Task{Name: name, MessageType: &cloudtaskspb.Task_HttpRequest{HttpRequest: &cloudtaskspb.HttpRequest{
		Url: w.srv.URL + "/work", Body: []byte("payload"),
	}}}
}

func runDue(t *testing.T, b *testBundle) int {
	t.Helper()
	n, err := b.srv.RunDue(context.Background())
	require.NoError(t, err)
	return n
}

func TestWorkerReceivesEveryHeader(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	w := newWorker(t, 404, 500, 200)
	name := queue + "/tasks/d_every_header"
	task := w.task(name)
	task.ScheduleTime = timestamppb.New(epoch.Add(10*time.Second + 250*time.Millisecond))
	hr := task.GetHttpRequest()
	hr.HttpMethod = cloudtaskspb.HttpMethod_PUT
	hr.Headers = map[string]string{"Content-Type": "application/json", "Idempotency-Key": "dispatch:r:t:1"}
	hr.AuthorizationHeader = &cloudtaskspb.HttpRequest_OidcToken{OidcToken: &cloudtaskspb.OidcToken{ServiceAccountEmail: "worker@p.iam.gserviceaccount.com"}}
	_, err := b.client.CreateTask(ctx, &cloudtaskspb.CreateTaskRequest{Parent: queue, Task: task})
	require.NoError(t, err)

	require.Equal(t, 0, runDue(t, b), "not due yet")
	b.clock.Advance(10*time.Second + 250*time.Millisecond)
	require.Equal(t, 1, runDue(t, b)) // 404
	b.clock.Advance(emulator.DefaultMinBackoff)
	require.Equal(t, 1, runDue(t, b)) // 500
	b.clock.Advance(2 * emulator.DefaultMinBackoff)
	require.Equal(t, 1, runDue(t, b)) // 200

	got := w.requests()
	require.Len(t, got, 3)
	want := []map[string]string{
		{"X-Cloudtasks-Taskretrycount": "0", "X-Cloudtasks-Taskexecutioncount": "0", "X-Cloudtasks-Taskpreviousresponse": "", "X-Cloudtasks-Taskretryreason": ""},
		{"X-Cloudtasks-Taskretrycount": "1", "X-Cloudtasks-Taskexecutioncount": "1", "X-Cloudtasks-Taskpreviousresponse": "404", "X-Cloudtasks-Taskretryreason": "HTTP_STATUS_404"},
		// A 5xx does not count as an execution.
		{"X-Cloudtasks-Taskretrycount": "2", "X-Cloudtasks-Taskexecutioncount": "1", "X-Cloudtasks-Taskpreviousresponse": "500", "X-Cloudtasks-Taskretryreason": "HTTP_STATUS_500"},
	}
	etas := []time.Time{epoch.Add(10250 * time.Millisecond), epoch.Add(10350 * time.Millisecond), epoch.Add(10550 * time.Millisecond)}
	for i, r := range got {
		require.Equal(t, "PUT", r.method)
		require.Equal(t, "/work", r.path)
		require.Equal(t, []byte("payload"), r.body)
		require.Equal(t, "Google-Cloud-Tasks", r.header.Get("User-Agent"))
		require.Equal(t, "q", r.header.Get("X-CloudTasks-QueueName"))
		require.Equal(t, "d_every_header", r.header.Get("X-CloudTasks-TaskName"))
		require.Equal(t, "application/json", r.header.Get("Content-Type"))
		require.Equal(t, "dispatch:r:t:1", r.header.Get("Idempotency-Key"))
		eta, err := strconv.ParseFloat(r.header.Get("X-CloudTasks-TaskETA"), 64)
		require.NoError(t, err)
		require.Equal(t, etas[i].UnixMicro(), int64(eta*1e6+0.5), "attempt %d", i+1)
		for k, v := range want[i] {
			require.Equal(t, v, r.header.Get(k), "attempt %d header %s", i+1, k)
		}
		claims := verifyOIDC(t, b, r.header.Get("Authorization"), w.srv.URL+"/work")
		require.Equal(t, "worker@p.iam.gserviceaccount.com", claims.Email)
	}

	// Success deletes the task and keeps its name taken.
	_, err = b.client.GetTask(ctx, &cloudtaskspb.GetTaskRequest{Name: name})
	requireCode(t, err, codes.NotFound, "does not exist")
	_, err = b.client.CreateTask(ctx, &cloudtaskspb.CreateTaskRequest{Parent: queue, Task: w.task(name)})
	requireCode(t, err, codes.AlreadyExists, "already exists")
	ds := b.srv.Deliveries()
	require.Len(t, ds, 3)
	require.Equal(t, []string{emulator.OutcomeRetry, emulator.OutcomeRetry, emulator.OutcomeSucceeded}, []string{ds[0].Outcome, ds[1].Outcome, ds[2].Outcome})
	require.Equal(t, []int{404, 500, 200}, []int{ds[0].StatusCode, ds[1].StatusCode, ds[2].StatusCode})
}

// verifyOIDC checks a bearer token the way a worker would: with the key
// fetched from the emulator's JWKS endpoint.
func verifyOIDC(t *testing.T, b *testBundle, authz, audience string) *emulator.OIDCClaims {
	t.Helper()
	resp, err := http.Get(b.srv.JWKSURL())
	require.NoError(t, err)
	defer resp.Body.Close()
	var set emuproto.JWKS
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&set))
	require.Len(t, set.Keys, 1)
	pub, err := set.Keys[0].PublicKey()
	require.NoError(t, err)
	require.Greater(t, len(authz), len("Bearer "))
	claims := &emulator.OIDCClaims{}
	_, err = jwt.ParseWithClaims(authz[len("Bearer "):], claims, func(tok *jwt.Token) (any, error) {
		require.Equal(t, set.Keys[0].Kid, tok.Header["kid"])
		return pub, nil
	}, jwt.WithValidMethods([]string{"RS256"}), jwt.WithAudience(audience), jwt.WithIssuer(b.srv.Issuer()),
		jwt.WithTimeFunc(b.clock.Now), jwt.WithExpirationRequired())
	require.NoError(t, err)
	return claims
}

// scheduleOf returns the task's next schedule time.
func scheduleOf(t *testing.T, b *testBundle, name string) time.Time {
	t.Helper()
	tk, err := b.client.GetTask(context.Background(), &cloudtaskspb.GetTaskRequest{Name: name})
	require.NoError(t, err)
	return tk.ScheduleTime.AsTime()
}

func TestRetryBackoffAndExhaustion(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *emulator.Config) {
		c.Queues = append(c.Queues, emulator.QueueConfig{
			Name: loc + "/queues/retry", MinBackoff: time.Second, MaxBackoff: 10 * time.Second, MaxDoublings: 2, MaxAttempts: 7,
		})
	})
	w := newWorker(t, 503)
	name := loc + "/queues/retry/tasks/t1"
	_, err := b.client.CreateTask(context.Background(), &cloudtaskspb.CreateTaskRequest{Parent: loc + "/queues/retry", Task: w.task(name)})
	require.NoError(t, err)

	var gaps []time.Duration
	for attempt := 1; ; attempt++ {
		require.Equal(t, 1, runDue(t, b), "attempt %d", attempt)
		if attempt == 7 {
			break
		}
		next := scheduleOf(t, b, name)
		gaps = append(gaps, next.Sub(b.clock.Now()))
		b.clock.Advance(next.Sub(b.clock.Now()))
	}
	// Doubles twice, then grows by the last doubled interval, capped at max_backoff.
	require.Equal(t, []time.Duration{1 * time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 10 * time.Second, 10 * time.Second}, gaps)
	_, err = b.client.GetTask(context.Background(), &cloudtaskspb.GetTaskRequest{Name: name})
	requireCode(t, err, codes.NotFound, "does not exist")
	ds := b.srv.Deliveries()
	require.Len(t, ds, 7)
	require.Equal(t, emulator.OutcomeExhausted, ds[6].Outcome)
	require.Contains(t, b.srv.RememberedNames(), name)
}

func TestMaxRetryDurationAndTaskRetryConfig(t *testing.T) {
	t.Parallel()
	b := setup(t)
	w := newWorker(t, 500)
	name := queue + "/tasks/t1"
	task := w.task(name)
	// The task's own retry config overrides the queue's: at least 2
	// attempts and 30 s, 10 s apart, so attempts at 0, 10, 20 and 30 s.
	task.RetryConfig = &cloudtaskspb.RetryConfig{MaxAttempts: 2, MaxRetryDuration: durationpb.New(30 * time.Second), MinBackoff: durationpb.New(10 * time.Second), MaxBackoff: durationpb.New(10 * time.Second)}
	_, err := b.client.CreateTask(context.Background(), &cloudtaskspb.CreateTaskRequest{Parent: queue, Task: task})
	require.NoError(t, err)
	for range 4 {
		require.Equal(t, 1, runDue(t, b))
		b.clock.Advance(10 * time.Second)
	}
	require.Equal(t, 0, runDue(t, b))
	ds := b.srv.Deliveries()
	require.Len(t, ds, 4)
	require.Equal(t, emulator.OutcomeExhausted, ds[3].Outcome)
	require.Equal(t, 30*time.Second, ds[3].DispatchTime.Sub(ds[0].DispatchTime))
}

func TestRetryAfterIsHonoured(t *testing.T) {
	t.Parallel()
	b := setup(t)
	w := newWorker(t, 429, 200)
	w.headers = map[string]string{"Retry-After": "120"}
	name := queue + "/tasks/t1"
	_, err := b.client.CreateTask(context.Background(), &cloudtaskspb.CreateTaskRequest{Parent: queue, Task: w.task(name)})
	require.NoError(t, err)
	require.Equal(t, 1, runDue(t, b))
	require.Equal(t, epoch.Add(120*time.Second), scheduleOf(t, b, name))
}

func TestDeleteTaskStopsAPendingTask(t *testing.T) {
	t.Parallel()
	b := setup(t)
	w := newWorker(t, 200)
	name := queue + "/tasks/later"
	task := w.task(name)
	task.ScheduleTime = timestamppb.New(epoch.Add(time.Minute))
	_, err := b.client.CreateTask(context.Background(), &cloudtaskspb.CreateTaskRequest{Parent: queue, Task: task})
	require.NoError(t, err)
	require.NoError(t, b.client.DeleteTask(context.Background(), &cloudtaskspb.DeleteTaskRequest{Name: name}))
	b.clock.Advance(time.Hour)
	require.Equal(t, 0, runDue(t, b))
	require.Empty(t, w.requests())
	require.Empty(t, b.srv.Deliveries())
}

func TestRateLimitAndPause(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *emulator.Config) {
		c.Queues = []emulator.QueueConfig{{Name: queue, MaxDispatchesPerSecond: 1, Paused: true}}
	})
	w := newWorker(t, 200)
	for _, id := range []string{"a", "b", "c"} {
		_, err := b.client.CreateTask(context.Background(), &cloudtaskspb.CreateTaskRequest{Parent: queue, Task: w.task(queue + "/tasks/" + id)})
		require.NoError(t, err)
	}
	require.Equal(t, 0, runDue(t, b), "paused")
	_, err := b.client.ResumeQueue(context.Background(), &cloudtaskspb.ResumeQueueRequest{Name: queue})
	require.NoError(t, err)
	require.Equal(t, 1, runDue(t, b), "a bucket of one token")
	b.clock.Advance(500 * time.Millisecond)
	require.Equal(t, 0, runDue(t, b), "half a token")
	b.clock.Advance(500 * time.Millisecond)
	require.Equal(t, 1, runDue(t, b))
	b.clock.Advance(10 * time.Second)
	require.Equal(t, 1, runDue(t, b), "the bucket holds at most one token")
	require.Len(t, w.requests(), 3)
}

func TestMaxConcurrentDispatches(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *emulator.Config) {
		c.ManualDelivery = false // the background loop sends the first task
		c.Queues = []emulator.QueueConfig{{Name: queue, MaxConcurrentDispatches: 1}}
	})
	w := newWorker(t, 200)
	w.block = make(chan struct{})
	for _, id := range []string{"a", "b"} {
		_, err := b.client.CreateTask(context.Background(), &cloudtaskspb.CreateTaskRequest{Parent: queue, Task: w.task(queue + "/tasks/" + id)})
		require.NoError(t, err)
	}
	<-w.arrived // the loop sent one
	require.Equal(t, 0, emulator.DispatchOnce(b.srv), "the second waits for the first")
	close(w.block)
	<-w.arrived
	runDue(t, b)
	require.Len(t, w.requests(), 2)
}

func TestDispatchDeadline(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *emulator.Config) { c.ManualDelivery = false })
	w := newWorker(t, 200)
	w.block = make(chan struct{}) // never released: only the deadline ends the attempt
	name := queue + "/tasks/slow"
	task := w.task(name)
	task.DispatchDeadline = durationpb.New(15 * time.Second)
	_, err := b.client.CreateTask(context.Background(), &cloudtaskspb.CreateTaskRequest{Parent: queue, Task: task})
	require.NoError(t, err)
	<-w.arrived
	b.clock.Advance(15 * time.Second)
	_, err = b.srv.RunDue(context.Background())
	require.NoError(t, err)
	ds := b.srv.Deliveries()
	require.NotEmpty(t, ds)
	require.Contains(t, ds[0].Err, "dispatch deadline exceeded")
	require.Equal(t, 0, ds[0].StatusCode)
	require.Equal(t, emulator.OutcomeRetry, ds[0].Outcome)
}

func TestRunTaskIgnoresScheduleAndPause(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *emulator.Config) { c.Queues = []emulator.QueueConfig{{Name: queue, Paused: true}} })
	w := newWorker(t, 200)
	name := queue + "/tasks/now"
	task := w.task(name)
	task.ScheduleTime = timestamppb.New(epoch.Add(time.Hour))
	_, err := b.client.CreateTask(context.Background(), &cloudtaskspb.CreateTaskRequest{Parent: queue, Task: task})
	require.NoError(t, err)
	got, err := b.client.RunTask(context.Background(), &cloudtaskspb.RunTaskRequest{Name: name})
	require.NoError(t, err)
	require.Equal(t, int32(1), got.DispatchCount)
	runDue(t, b)
	require.Len(t, w.requests(), 1)
	_, err = b.client.RunTask(context.Background(), &cloudtaskspb.RunTaskRequest{Name: name})
	requireCode(t, err, codes.NotFound, "does not exist")
}

func TestRunTaskDispatchesARunningTaskAgain(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		codes    []int
		outcomes []string // sorted
		left     int      // tasks left once both attempts are done
	}{
		{"both succeed", []int{200}, []string{emulator.OutcomeDeleted, emulator.OutcomeSucceeded}, 0},
		{"both fail: one retry is scheduled", []int{500}, []string{emulator.OutcomeRetry, emulator.OutcomeRetry}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			ctx := context.Background()
			w := newWorker(t, tc.codes...)
			w.block = make(chan struct{})
			release := sync.OnceFunc(func() { close(w.block) })
			t.Cleanup(release) // a failed check must not leave the worker waiting
			name := queue + "/tasks/twice"
			_, err := b.client.CreateTask(ctx, &cloudtaskspb.CreateTaskRequest{Parent: queue, Task: w.task(name)})
			require.NoError(t, err)
			got, err := b.client.RunTask(ctx, &cloudtaskspb.RunTaskRequest{Name: name})
			require.NoError(t, err)
			require.Equal(t, int32(1), got.DispatchCount)
			<-w.arrived
			got, err = b.client.RunTask(ctx, &cloudtaskspb.RunTaskRequest{Name: name})
			require.NoError(t, err, "RunTask on a running task")
			require.Equal(t, int32(2), got.DispatchCount)
			<-w.arrived
			release()
			runDue(t, b)

			var retries []string
			for _, r := range w.requests() {
				retries = append(retries, r.header.Get("X-CloudTasks-TaskRetryCount"))
			}
			require.Equal(t, []string{"0", "1"}, retries)
			var outcomes []string
			for _, d := range b.srv.Deliveries() {
				outcomes = append(outcomes, d.Outcome)
			}
			slices.Sort(outcomes)
			require.Equal(t, tc.outcomes, outcomes)
			require.Equal(t, tc.left, b.srv.TaskCount())
			if tc.left == 0 {
				return
			}
			// The retry is in the schedule once: it goes out once.
			b.clock.Advance(time.Hour)
			require.Equal(t, 1, runDue(t, b))
			require.Len(t, w.requests(), 3)
		})
	}
}

func TestResetAndResponseBody(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	w := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, _ *http.Request) {
		rw.WriteHeader(http.StatusBadRequest)
		_, _ = io.WriteString(rw, "no such run")
	}))
	t.Cleanup(w.Close)
	_, err := b.client.CreateQueue(ctx, &cloudtaskspb.CreateQueueRequest{Parent: loc, Queue: &cloudtaskspb.Queue{Name: loc + "/queues/extra"}})
	require.NoError(t, err)
	name := queue + "/tasks/t1"
	task := &cloudtaskspb.Task{Name: name, MessageType: &cloudtaskspb.Task_HttpRequest{HttpRequest: &cloudtaskspb.HttpRequest{Url: w.URL}}}
	_, err = b.client.CreateTask(ctx, &cloudtaskspb.CreateTaskRequest{Parent: queue, Task: task})
	require.NoError(t, err)
	require.Equal(t, 1, runDue(t, b))
	ds := b.srv.Deliveries()
	require.Len(t, ds, 1)
	require.Equal(t, 400, ds[0].StatusCode)
	require.Equal(t, "no such run", string(ds[0].ResponseBody))
	got, err := b.client.GetTask(ctx, &cloudtaskspb.GetTaskRequest{Name: name})
	require.NoError(t, err)
	require.Equal(t, int32(codes.InvalidArgument), got.LastAttempt.ResponseStatus.Code)
	require.Equal(t, int32(1), got.ResponseCount)

	b.srv.Reset()
	require.Empty(t, b.srv.Deliveries())
	require.Empty(t, b.srv.Tasks(queue))
	require.Empty(t, b.srv.RememberedNames())
	require.Len(t, b.srv.Queues(), 1, "only the configured queues come back")
	_, err = b.client.CreateTask(ctx, &cloudtaskspb.CreateTaskRequest{Parent: queue, Task: task})
	require.NoError(t, err, "Reset forgets names")
}

func TestQueueHTTPTargetOverrides(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	w := newWorker(t, 200)
	host, portText, err := net.SplitHostPort(strings.TrimPrefix(w.srv.URL, "http://"))
	require.NoError(t, err)
	port, err := strconv.ParseInt(portText, 10, 64)
	require.NoError(t, err)
	scheme := cloudtaskspb.UriOverride_HTTP
	const routed = loc + "/queues/routed"
	_, err = b.client.CreateQueue(ctx, &cloudtaskspb.CreateQueueRequest{Parent: loc, Queue: &cloudtaskspb.Queue{
		Name: routed,
		HttpTarget: &cloudtaskspb.HttpTarget{
			UriOverride: &cloudtaskspb.UriOverride{
				Scheme: &scheme, Host: &host, Port: &port,
				PathOverride:  &cloudtaskspb.PathOverride{Path: "/from-queue"},
				QueryOverride: &cloudtaskspb.QueryOverride{QueryParams: "q=1"},
			},
			HttpMethod:      cloudtaskspb.HttpMethod_PATCH,
			HeaderOverrides: []*cloudtaskspb.HttpTarget_HeaderOverride{{Header: &cloudtaskspb.HttpTarget_Header{Key: "X-Queue", Value: "routed"}}},
			AuthorizationHeader: &cloudtaskspb.HttpTarget_OidcToken{OidcToken: &cloudtaskspb.OidcToken{
				ServiceAccountEmail: "queue@p.iam.gserviceaccount.com", Audience: "https://aud.example",
			}},
		},
	}})
	require.NoError(t, err)
	task := &cloudtaskspb.Task{Name: routed + "/tasks/t1", MessageType: &cloudtaskspb.Task_HttpRequest{HttpRequest: &cloudtaskspb.HttpRequest{
		Url: "https://elsewhere.invalid/task-path", Headers: map[string]string{"X-Queue": "task", "X-Task": "kept"}, Body: []byte("b"),
	}}}
	_, err = b.client.CreateTask(ctx, &cloudtaskspb.CreateTaskRequest{Parent: routed, Task: task})
	require.NoError(t, err)
	require.Equal(t, 1, runDue(t, b))
	got := w.requests()
	require.Len(t, got, 1)
	require.Equal(t, "PATCH", got[0].method)
	require.Equal(t, "/from-queue", got[0].path)
	require.Equal(t, "routed", got[0].header.Get("X-Queue"))
	require.Equal(t, "kept", got[0].header.Get("X-Task"))
	require.Equal(t, "http://"+host+":"+portText+"/from-queue?q=1", b.srv.Deliveries()[0].URL)
	claims := verifyOIDC(t, b, got[0].header.Get("Authorization"), "https://aud.example")
	require.Equal(t, "queue@p.iam.gserviceaccount.com", claims.Email)
}

// A worker that drops the connection without an answer is a failed
// attempt, recorded at once: with the fake clock, the attempt's deadline
// context is not asked for its error until it has ended (a fake clock's
// context blocks in Err until its deadline).
func TestCutConnectionIsAFailedAttemptOnAFakeClock(t *testing.T) {
	t.Parallel()
	b := setup(t, func(*emulator.Config) {})
	srv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		conn, _, err := rw.(http.Hijacker).Hijack()
		if err == nil {
			conn.Close()
		}
	}))
	t.Cleanup(srv.Close)
	task := &cloudtaskspb.Task{Name: queue + "/tasks/cut", MessageType: &cloudtaskspb.Task_HttpRequest{HttpRequest: &cloudtaskspb.HttpRequest{
		Url: srv.URL + "/work"}}}
	_, err := b.client.CreateTask(context.Background(), &cloudtaskspb.CreateTaskRequest{Parent: queue, Task: task})
	require.NoError(t, err)
	done := make(chan int, 1)
	go func() { done <- runDue(t, b) }()
	select {
	case n := <-done:
		require.Equal(t, 1, n)
	case <-time.After(30 * time.Second):
		t.Fatal("RunDue hung on an attempt whose connection was cut")
	}
	ds := b.srv.Deliveries()
	require.Len(t, ds, 1)
	require.Equal(t, 0, ds[0].StatusCode)
	require.Equal(t, emulator.OutcomeRetry, ds[0].Outcome)
	require.NotEmpty(t, ds[0].Err)
}
