package cloudtasks

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"
	"google.golang.org/api/option"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ctdispatch/ctdispatch/naming"
	"github.com/ctdispatch/ctdispatch/outbox"
)

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		edit  func(*Config)
		field string
	}{
		{"no project", func(c *Config) { c.Project = "" }, "Project"},
		{"bad location", func(c *Config) { c.Location = "Europe West" }, "Location"},
		{"bad queue", func(c *Config) { c.Queue = "a_b" }, "Queue"},
		{"negative stale", func(c *Config) { c.StaleAfter = -time.Second }, "StaleAfter"},
		{"negative batch in flight", func(c *Config) { c.BatchInFlight = -1 }, "BatchInFlight"},
		{"max below initial", func(c *Config) { c.Retry = RetryPolicy{Initial: time.Second, Max: time.Millisecond} }, "Retry.Max"},
		{"multiplier", func(c *Config) { c.Retry.Multiplier = 0.5 }, "Retry.Multiplier"},
		{"jitter", func(c *Config) { c.Retry.Jitter = 2 }, "Retry.Jitter"},
		{"max calls", func(c *Config) { c.Retry.MaxCalls = -1 }, "Retry.MaxCalls"},
		{"negative name hold", func(c *Config) { c.NameHold = -time.Hour }, "NameHold"},
		{"unknown durability", func(c *Config) { c.Durability = "memory" }, "Durability"},
		{"two clients", func(c *Config) {
			c.EmulatorAddr, c.ClientOptions = "127.0.0.1:1", []option.ClientOption{option.WithoutAuthentication()}
		}, "Client"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg := testConfig()
			tt.edit(&cfg)
			_, err := NewDispatcher(context.Background(), outbox.NewMemory(nil), &cfg)
			require.ErrorIs(t, err, ErrInvalidConfig)
			var ce *ConfigError
			require.ErrorAs(t, err, &ce)
			require.Equal(t, tt.field, ce.Field)
			require.Contains(t, err.Error(), "Config."+tt.field)
		})
	}
}

func TestConfigDefaults(t *testing.T) {
	t.Parallel()
	c := testConfig().WithDefaults()
	require.Equal(t, DefaultBatchInFlight, c.BatchInFlight)
	require.Equal(t, DefaultStaleAfter, c.StaleAfter)
	require.Equal(t, RetryPolicy{Initial: 50 * time.Millisecond, Max: 5 * time.Second, Multiplier: 2, Jitter: 0.5, MaxCalls: 10, MaxElapsed: time.Minute}, c.Retry)
	require.Equal(t, DefaultNameHold, c.NameHold)
	require.Equal(t, DurabilityOverlapped, c.Durability)
	require.False(t, c.EnforceOwnership)
	require.NoError(t, c.validate())
}

func TestTaskValidate(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	ok := func() Task { return Task{URL: "https://w.example/x", Body: []byte("b")} }
	tests := []struct {
		name  string
		edit  func(*Task)
		field string
		rule  string
	}{
		{"no url", func(t *Task) { t.URL = "" }, "URL", "is required"},
		{"relative url", func(t *Task) { t.URL = "/x" }, "URL", "is not an absolute http or https URL"},
		{"ftp url", func(t *Task) { t.URL = "ftp://h/x" }, "URL", "is not an absolute http or https URL"},
		{"long url", func(t *Task) { t.URL = "https://h/" + strings.Repeat("a", 2100) }, "URL", "is 2110 characters long; at most 2083 allowed"},
		{"method", func(t *Task) { t.Method = "FETCH" }, "Method", "is not allowed; allowed: POST, GET, HEAD, PUT, DELETE, PATCH, OPTIONS"},
		{"body with GET", func(t *Task) { t.Method = "get" }, "Body", "is only allowed with POST, PUT or PATCH; method is GET"},
		{"reserved header", func(t *Task) { t.Headers = map[string]string{"idempotency-key": "x"} }, "Headers", "is set by the dispatcher or the service and may not be given"},
		{"cloudtasks header", func(t *Task) { t.Headers = map[string]string{"X-CloudTasks-QueueName": "x"} }, "Headers", "is reserved by Cloud Tasks (prefix X-Cloudtasks-)"},
		{"bad header name", func(t *Task) { t.Headers = map[string]string{"a b": "x"} }, "Headers", "is not a valid header name"},
		{"big headers", func(t *Task) { t.Headers = map[string]string{"X-Big": strings.Repeat("a", 80_000)} }, "Headers", "exceed 80000 bytes"},
		{"oidc without account", func(t *Task) { t.OIDC = &OIDCToken{Audience: "a"} }, "OIDC.ServiceAccountEmail", "is required when OIDC is set"},
		{"too far", func(t *Task) { t.ScheduleTime = now.Add(MaxScheduleAhead + time.Second) }, "ScheduleTime", "is 720h0m1s ahead; Cloud Tasks allows at most 30 days (720h)"},
		{"short deadline", func(t *Task) { t.DispatchDeadline = 10 * time.Second }, "DispatchDeadline", "is out of range; allowed: 15s to 30m"},
		{"long deadline", func(t *Task) { t.DispatchDeadline = time.Hour }, "DispatchDeadline", "is out of range; allowed: 15s to 30m"},
		{"bad queue", func(t *Task) { t.Queue = "q/1" }, "Queue", "is not a queue ID; allowed: 1 to 100 of [A-Za-z0-9-]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			task := ok()
			tt.edit(&task)
			err := task.validate(now)
			require.ErrorIs(t, err, ErrInvalidRequest)
			var re *RequestError
			require.ErrorAs(t, err, &re)
			require.Equal(t, tt.field, re.Field)
			require.Equal(t, tt.rule, re.Rule)
			require.NotContains(t, err.Error(), strings.Repeat("a", 100), "no long values in messages")
		})
	}
	edge := ok()
	edge.ScheduleTime = now.Add(MaxScheduleAhead)
	edge.DispatchDeadline = MinDispatchDeadline
	require.NoError(t, edge.validate(now))
}

func TestDispatchRequestID(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		req   DispatchRequest
		field string
	}{
		{"separator in run", DispatchRequest{RunID: "a:b", TaskKey: "t", Identity: naming.Attempt(1)}, "RunID"},
		{"empty task", DispatchRequest{RunID: "r", Identity: naming.Attempt(1)}, "TaskKey"},
		{"no identity", DispatchRequest{RunID: "r", TaskKey: "t"}, "Identity.Strategy"},
		{"missing key", DispatchRequest{RunID: "r", TaskKey: "t", Identity: naming.Identity{Strategy: naming.StrategyCallerKey}}, "Identity.Key"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := tt.req.ID()
			require.ErrorIs(t, err, ErrInvalidRequest)
			require.ErrorIs(t, err, naming.ErrInvalidID)
			var re *RequestError
			require.ErrorAs(t, err, &re)
			require.Equal(t, tt.field, re.Field)
		})
	}
	_, err := (&DispatchRequest{RunID: "r", TaskKey: "t", Identity: naming.Identity{Strategy: naming.StrategyCallerKey}}).ID()
	require.ErrorIs(t, err, naming.ErrMissingKey)
}

func TestCreateRequest(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	id, err := naming.NewDispatch("run1", "extract", "3")
	require.NoError(t, err)
	task := Task{
		URL: "https://w.example/x", Method: "put", Headers: map[string]string{"Content-Type": "application/json"},
		Body: []byte(`{}`), OIDC: &OIDCToken{ServiceAccountEmail: "sa@p.iam.gserviceaccount.com", Audience: "aud"},
		ScheduleTime: now.Add(time.Hour), DispatchDeadline: time.Minute,
	}
	queue := "projects/p/locations/l/queues/q"
	req := task.createRequest(id, queue, now)
	require.Equal(t, queue, req.GetParent())
	require.Equal(t, queue+"/tasks/"+id.CloudTaskID(), req.GetTask().GetName())
	hr := req.GetTask().GetHttpRequest()
	require.Equal(t, "PUT", hr.GetHttpMethod().String())
	require.Equal(t, map[string]string{
		"Content-Type": "application/json", "Idempotency-Key": "dispatch:run1:extract:3", "X-Ctdispatch-Task-Id": id.CloudTaskID(),
	}, hr.GetHeaders())
	require.Equal(t, "sa@p.iam.gserviceaccount.com", hr.GetOidcToken().GetServiceAccountEmail())
	require.Equal(t, "aud", hr.GetOidcToken().GetAudience())
	require.Equal(t, now.Add(time.Hour), req.GetTask().GetScheduleTime().AsTime())
	require.Equal(t, time.Minute, req.GetTask().GetDispatchDeadline().AsDuration())
	require.Equal(t, map[string]string{"Content-Type": "application/json"}, task.Headers, "the caller's map is not changed")

	// A past schedule time fires at once: no schedule_time is sent.
	task.ScheduleTime = now.Add(-time.Hour)
	require.Nil(t, task.createRequest(id, queue, now).GetTask().GetScheduleTime())
}

func TestTransient(t *testing.T) {
	t.Parallel()
	var got []codes.Code
	for c := codes.OK; c <= codes.Unauthenticated; c++ {
		if transient(c) {
			got = append(got, c)
		}
	}
	require.Equal(t, []codes.Code{codes.DeadlineExceeded, codes.ResourceExhausted, codes.Aborted, codes.Internal, codes.Unavailable}, got)
}

func TestRetryPolicyDelay(t *testing.T) {
	t.Parallel()
	p := RetryPolicy{Initial: 100 * time.Millisecond, Max: time.Second, Multiplier: 2, Jitter: 0.5}
	var full, jittered []time.Duration
	for n := 1; n <= 6; n++ {
		full = append(full, p.delay(n, 0))
		jittered = append(jittered, p.delay(n, 1))
	}
	require.Equal(t, []time.Duration{100e6, 200e6, 400e6, 800e6, 1e9, 1e9}, full)
	require.Equal(t, []time.Duration{50e6, 100e6, 200e6, 400e6, 500e6, 500e6}, jittered)
}

func TestRetryWaitsOnTheClock(t *testing.T) {
	t.Parallel()
	// A fake clock is advanced by each wait: the calls are made at the
	// times the policy says, and the test does not move the clock.
	clock := clockwork.NewFakeClock()
	start := clock.Now()
	p := RetryPolicy{Initial: time.Second, Max: 4 * time.Second, Multiplier: 2, Jitter: 0, MaxCalls: 4}
	var at []time.Duration
	_, err := p.retry(context.Background(), clock, func() float64 { return 0 }, nil, func(context.Context) error {
		at = append(at, clock.Since(start))
		return status.Error(codes.Unavailable, "down")
	})
	require.Equal(t, codes.Unavailable, status.Code(err))
	require.Equal(t, []time.Duration{0, time.Second, 3 * time.Second, 7 * time.Second}, at)

	// A permanent code stops at once; an ended context stops the retries.
	ctx, cancel := context.WithCancel(context.Background())
	calls2, err := p.retry(ctx, clock, func() float64 { return 0 }, nil, func(context.Context) error {
		cancel()
		return status.Error(codes.Unavailable, "down")
	})
	require.Equal(t, 1, calls2)
	require.Equal(t, codes.Unavailable, status.Code(err))
	calls3, err := p.retry(context.Background(), clock, func() float64 { return 0 }, nil, func(context.Context) error {
		return status.Error(codes.InvalidArgument, "bad")
	})
	require.Equal(t, 1, calls3)
	require.Equal(t, codes.InvalidArgument, status.Code(err))

	// MaxElapsed: after 1s the next wait (2s) would end past 2.5s, so the
	// loop stops at 2 calls.
	p.MaxElapsed = 2500 * time.Millisecond
	calls4, err := p.retry(context.Background(), clock, func() float64 { return 0 }, nil, func(context.Context) error {
		return status.Error(codes.Unavailable, "down")
	})
	require.Equal(t, codes.Unavailable, status.Code(err))
	require.Equal(t, 2, calls4)
}

// A real clock is waited on: the sleep ends when its timer fires or the
// context ends.
func TestSleepOnARealClockEndsWithTheContext(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	require.ErrorIs(t, sleep(ctx, clockwork.NewRealClock(), time.Hour), context.Canceled)
	require.NoError(t, sleep(context.Background(), clockwork.NewRealClock(), time.Microsecond))
}
