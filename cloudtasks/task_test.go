package cloudtasks_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/cloudtasks/apiv2/cloudtaskspb"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"

	"github.com/ctdispatch/ctdispatch/cloudtasks"
	"github.com/ctdispatch/ctdispatch/naming"
)

// Every Task a user can write that the service would refuse is refused by
// Dispatch before any call, with the field, the value (never a body or a
// header value) and the rule.
func TestTaskRefused(t *testing.T) {
	t.Parallel()
	const badURL = "is not an absolute http or https URL"
	const notGiven = "is set by the dispatcher or the service and may not be given"
	const badDeadline = "is out of range; allowed: 15s to 30m"
	longURL := "https://h/" + strings.Repeat("a", 2100)
	tests := []struct {
		name string
		edit func(*cloudtasks.Task)
		want cloudtasks.RequestError
	}{
		{"no URL", func(k *cloudtasks.Task) { k.URL = "" }, cloudtasks.RequestError{Field: "URL", Rule: "is required"}},
		{"relative URL", func(k *cloudtasks.Task) { k.URL = "/x" }, cloudtasks.RequestError{Field: "URL", Value: "/x", Rule: badURL}},
		{"ftp URL", func(k *cloudtasks.Task) { k.URL = "ftp://h/x" }, cloudtasks.RequestError{Field: "URL", Value: "ftp://h/x", Rule: badURL}},
		{"URL without host", func(k *cloudtasks.Task) { k.URL = "https:///x" }, cloudtasks.RequestError{Field: "URL", Value: "https:///x", Rule: badURL}},
		{"URL too long", func(k *cloudtasks.Task) { k.URL = longURL },
			cloudtasks.RequestError{Field: "URL", Value: longURL[:77] + "…", Rule: "is 2110 characters long; at most 2083 allowed"}},
		{"unknown method", func(k *cloudtasks.Task) { k.Method = "FETCH" },
			cloudtasks.RequestError{Field: "Method", Value: "FETCH", Rule: "is not allowed; allowed: POST, GET, HEAD, PUT, DELETE, PATCH, OPTIONS"}},
		{"unknown lower-case method", func(k *cloudtasks.Task) { k.Method = "fetch" },
			cloudtasks.RequestError{Field: "Method", Value: "fetch", Rule: "is not allowed; allowed: POST, GET, HEAD, PUT, DELETE, PATCH, OPTIONS"}},
		{"body with GET", func(k *cloudtasks.Task) { k.Method, k.Body = "GET", []byte("{}") },
			cloudtasks.RequestError{Field: "Body", Value: "2 bytes", Rule: "is only allowed with POST, PUT or PATCH; method is GET"}},
		{"body with lower-case get", func(k *cloudtasks.Task) { k.Method, k.Body = "get", []byte("{}") },
			cloudtasks.RequestError{Field: "Body", Value: "2 bytes", Rule: "is only allowed with POST, PUT or PATCH; method is GET"}},
		{"body with DELETE", func(k *cloudtasks.Task) { k.Method, k.Body = "DELETE", []byte("x") },
			cloudtasks.RequestError{Field: "Body", Value: "1 bytes", Rule: "is only allowed with POST, PUT or PATCH; method is DELETE"}},
		{"body with HEAD", func(k *cloudtasks.Task) { k.Method, k.Body = "HEAD", []byte("x") },
			cloudtasks.RequestError{Field: "Body", Value: "1 bytes", Rule: "is only allowed with POST, PUT or PATCH; method is HEAD"}},
		{"body with OPTIONS", func(k *cloudtasks.Task) { k.Method, k.Body = "OPTIONS", []byte("x") },
			cloudtasks.RequestError{Field: "Body", Value: "1 bytes", Rule: "is only allowed with POST, PUT or PATCH; method is OPTIONS"}},
		{"Idempotency-Key in lower case", func(k *cloudtasks.Task) { k.Headers = map[string]string{"idempotency-key": "x"} },
			cloudtasks.RequestError{Field: "Headers", Value: "idempotency-key", Rule: notGiven}},
		{"the task ID header", func(k *cloudtasks.Task) { k.Headers = map[string]string{"X-Ctdispatch-Task-Id": "x"} },
			cloudtasks.RequestError{Field: "Headers", Value: "X-Ctdispatch-Task-Id", Rule: notGiven}},
		{"Host", func(k *cloudtasks.Task) { k.Headers = map[string]string{"host": "x"} },
			cloudtasks.RequestError{Field: "Headers", Value: "host", Rule: notGiven}},
		{"Content-Length", func(k *cloudtasks.Task) { k.Headers = map[string]string{"Content-Length": "1"} },
			cloudtasks.RequestError{Field: "Headers", Value: "Content-Length", Rule: notGiven}},
		{"Transfer-Encoding", func(k *cloudtasks.Task) { k.Headers = map[string]string{"Transfer-Encoding": "chunked"} },
			cloudtasks.RequestError{Field: "Headers", Value: "Transfer-Encoding", Rule: notGiven}},
		{"Connection", func(k *cloudtasks.Task) { k.Headers = map[string]string{"Connection": "close"} },
			cloudtasks.RequestError{Field: "Headers", Value: "Connection", Rule: notGiven}},
		{"User-Agent", func(k *cloudtasks.Task) { k.Headers = map[string]string{"user-agent": "me"} },
			cloudtasks.RequestError{Field: "Headers", Value: "user-agent", Rule: notGiven}},
		{"Authorization", func(k *cloudtasks.Task) { k.Headers = map[string]string{"Authorization": "Bearer SECRET"} },
			cloudtasks.RequestError{Field: "Headers", Value: "Authorization", Rule: notGiven}},
		{"X-Google- prefix", func(k *cloudtasks.Task) { k.Headers = map[string]string{"x-google-foo": "x"} },
			cloudtasks.RequestError{Field: "Headers", Value: "x-google-foo", Rule: "is reserved by Cloud Tasks (prefix X-Google-)"}},
		{"X-AppEngine- prefix", func(k *cloudtasks.Task) { k.Headers = map[string]string{"X-AppEngine-QueueName": "x"} },
			cloudtasks.RequestError{Field: "Headers", Value: "X-AppEngine-QueueName", Rule: "is reserved by Cloud Tasks (prefix X-Appengine-)"}},
		{"X-CloudTasks- prefix", func(k *cloudtasks.Task) { k.Headers = map[string]string{"X-CloudTasks-TaskName": "x"} },
			cloudtasks.RequestError{Field: "Headers", Value: "X-CloudTasks-TaskName", Rule: "is reserved by Cloud Tasks (prefix X-Cloudtasks-)"}},
		{"empty header name", func(k *cloudtasks.Task) { k.Headers = map[string]string{"": "x"} },
			cloudtasks.RequestError{Field: "Headers", Value: "", Rule: "is not a valid header name"}},
		{"header name with a space", func(k *cloudtasks.Task) { k.Headers = map[string]string{"a b": "x"} },
			cloudtasks.RequestError{Field: "Headers", Value: "a b", Rule: "is not a valid header name"}},
		{"header name with a colon", func(k *cloudtasks.Task) { k.Headers = map[string]string{"a:b": "x"} },
			cloudtasks.RequestError{Field: "Headers", Value: "a:b", Rule: "is not a valid header name"}},
		{"header value with a line break", func(k *cloudtasks.Task) { k.Headers = map[string]string{"X-A": "SECRET\r\nX-B: y"} },
			cloudtasks.RequestError{Field: "Headers", Value: "X-A", Rule: "has a value with a line break"}},
		{"headers too big", func(k *cloudtasks.Task) { k.Headers = map[string]string{"X-Big": strings.Repeat("a", 80_000)} },
			cloudtasks.RequestError{Field: "Headers", Value: "80009 bytes", Rule: "exceed 80000 bytes"}},
		{"task too big", func(k *cloudtasks.Task) { k.Body = make([]byte, cloudtasks.MaxTaskSize) },
			cloudtasks.RequestError{Field: "Body", Value: "1000000 bytes", Rule: "makes the task 1000199 bytes as encoded; at most 1000000 allowed"}},
		{"OIDC without email", func(k *cloudtasks.Task) { k.OIDC = &cloudtasks.OIDCToken{Audience: "a"} },
			cloudtasks.RequestError{Field: "OIDC.ServiceAccountEmail", Rule: "is required when OIDC is set"}},
		{"zero OIDC", func(k *cloudtasks.Task) { k.OIDC = &cloudtasks.OIDCToken{} },
			cloudtasks.RequestError{Field: "OIDC.ServiceAccountEmail", Rule: "is required when OIDC is set"}},
		{"ScheduleTime past 30 days", func(k *cloudtasks.Task) { k.ScheduleTime = t0.Add(cloudtasks.MaxScheduleAhead + time.Second) },
			cloudtasks.RequestError{Field: "ScheduleTime", Value: "2026-01-31T12:00:01Z", Rule: "is 720h0m1s ahead; Cloud Tasks allows at most 30 days (720h)"}},
		{"DispatchDeadline below 15s", func(k *cloudtasks.Task) { k.DispatchDeadline = cloudtasks.MinDispatchDeadline - time.Nanosecond },
			cloudtasks.RequestError{Field: "DispatchDeadline", Value: "14.999999999s", Rule: badDeadline}},
		{"DispatchDeadline above 30m", func(k *cloudtasks.Task) { k.DispatchDeadline = cloudtasks.MaxDispatchDeadline + time.Second },
			cloudtasks.RequestError{Field: "DispatchDeadline", Value: "30m1s", Rule: badDeadline}},
		{"negative DispatchDeadline", func(k *cloudtasks.Task) { k.DispatchDeadline = -time.Minute },
			cloudtasks.RequestError{Field: "DispatchDeadline", Value: "-1m0s", Rule: badDeadline}},
		{"queue ID with a slash", func(k *cloudtasks.Task) { k.Queue = "q/1" },
			cloudtasks.RequestError{Field: "Queue", Value: "q/1", Rule: "is not a queue ID; allowed: 1 to 100 of [A-Za-z0-9-]"}},
		{"queue given as a path", func(k *cloudtasks.Task) { k.Queue = otherQueue },
			cloudtasks.RequestError{Field: "Queue", Value: otherQueue, Rule: "is not a queue ID; allowed: 1 to 100 of [A-Za-z0-9-]"}},
	}
	b := openDoor(t, nil)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			k := cloudtasks.Task{URL: "https://worker.example/x"}
			tt.edit(&k)
			_, err := b.d.Dispatch(context.Background(), cloudtasks.DispatchRequest{RunID: "r", TaskKey: "t", Identity: naming.Attempt(1), Task: k})
			require.ErrorIs(t, err, cloudtasks.ErrInvalidRequest)
			var re *cloudtasks.RequestError
			require.ErrorAs(t, err, &re)
			require.Equal(t, tt.want, *re)
			require.NotContains(t, err.Error(), "SECRET")
			require.NotContains(t, err.Error(), strings.Repeat("a", 100), "no long values in messages")
		})
	}
	t.Cleanup(func() {
		require.Zero(t, b.emu.TaskCount(), "nothing refused reached the service")
		require.Empty(t, b.emu.RememberedNames())
	})
}

// What each Task field a user may leave zero, or set at the edge of its
// range, becomes in the task the service stores.
func TestTaskAccepted(t *testing.T) {
	t.Parallel()
	email := "sa@p.iam.gserviceaccount.com"
	tests := []struct {
		name      string
		edit      func(*cloudtasks.Task)
		queue     string
		method    cloudtaskspb.HttpMethod
		headers   map[string]string
		body      string
		schedule  time.Time
		deadline  time.Duration
		oidc      *cloudtaskspb.OidcToken
		wantQueue string
	}{
		{name: "zero fields", edit: func(*cloudtasks.Task) {}},
		{name: "lower-case method", edit: func(k *cloudtasks.Task) { k.Method, k.Body = "put", []byte("b") }, method: cloudtaskspb.HttpMethod_PUT, body: "b"},
		{name: "PATCH with a body", edit: func(k *cloudtasks.Task) { k.Method, k.Body = "PATCH", []byte("b") }, method: cloudtaskspb.HttpMethod_PATCH, body: "b"},
		{name: "GET without a body", edit: func(k *cloudtasks.Task) { k.Method = "GET" }, method: cloudtaskspb.HttpMethod_GET},
		{name: "headers", edit: func(k *cloudtasks.Task) {
			k.Headers = map[string]string{"Content-Type": "application/json", "x-trace": ""}
		},
			headers: map[string]string{"Content-Type": "application/json", "x-trace": ""}},
		{name: "ScheduleTime in the past fires now", edit: func(k *cloudtasks.Task) { k.ScheduleTime = t0.Add(-time.Hour) }},
		{name: "ScheduleTime 30 days ahead", edit: func(k *cloudtasks.Task) { k.ScheduleTime = t0.Add(cloudtasks.MaxScheduleAhead) },
			schedule: t0.Add(720 * time.Hour)},
		{name: "DispatchDeadline 15s", edit: func(k *cloudtasks.Task) { k.DispatchDeadline = 15 * time.Second }, deadline: 15 * time.Second},
		{name: "DispatchDeadline 30m", edit: func(k *cloudtasks.Task) { k.DispatchDeadline = 30 * time.Minute }, deadline: 30 * time.Minute},
		{name: "OIDC without audience", edit: func(k *cloudtasks.Task) { k.OIDC = &cloudtasks.OIDCToken{ServiceAccountEmail: email} },
			oidc: &cloudtaskspb.OidcToken{ServiceAccountEmail: email}},
		{name: "OIDC with audience", edit: func(k *cloudtasks.Task) { k.OIDC = &cloudtasks.OIDCToken{ServiceAccountEmail: email, Audience: "aud"} },
			oidc: &cloudtaskspb.OidcToken{ServiceAccountEmail: email, Audience: "aud"}},
		{name: "Queue override", edit: func(k *cloudtasks.Task) { k.Queue = "other" }, wantQueue: otherQueue},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := openDoor(t, nil)
			k := cloudtasks.Task{URL: "https://worker.example/x"}
			tt.edit(&k)
			res, err := b.d.Dispatch(context.Background(), cloudtasks.DispatchRequest{RunID: "r", TaskKey: "t", Identity: naming.Attempt(1), Task: k})
			require.NoError(t, err)
			require.Equal(t, cloudtasks.OutcomeCreated, res.Outcome)

			queue := doorQueue
			if tt.wantQueue != "" {
				queue = tt.wantQueue
			}
			require.Equal(t, queue+"/tasks/"+res.CloudTaskID, res.TaskName)
			tasks := b.emu.Tasks(queue)
			require.Len(t, tasks, 1)
			got := tasks[0]
			require.Equal(t, res.TaskName, got.GetName())
			hr := got.GetHttpRequest()
			method := tt.method
			if method == cloudtaskspb.HttpMethod_HTTP_METHOD_UNSPECIFIED {
				method = cloudtaskspb.HttpMethod_POST
			}
			require.Equal(t, method, hr.GetHttpMethod())
			require.Equal(t, "https://worker.example/x", hr.GetUrl())
			headers := map[string]string{cloudtasks.HeaderIdempotencyKey: "dispatch:r:t:1", cloudtasks.HeaderTaskID: res.CloudTaskID}
			for name, v := range tt.headers {
				headers[name] = v
			}
			require.Equal(t, headers, hr.GetHeaders())
			require.Equal(t, tt.headers, k.Headers, "the caller's map is not changed")
			require.Equal(t, tt.body, string(hr.GetBody()))
			schedule := tt.schedule
			if schedule.IsZero() {
				schedule = t0
			}
			require.Equal(t, schedule, got.GetScheduleTime().AsTime())
			deadline := tt.deadline
			if deadline == 0 {
				deadline = 10 * time.Minute // the service's default
			}
			require.Equal(t, deadline, got.GetDispatchDeadline().AsDuration())
			require.Equal(t, tt.oidc.GetServiceAccountEmail(), hr.GetOidcToken().GetServiceAccountEmail())
			require.Equal(t, tt.oidc.GetAudience(), hr.GetOidcToken().GetAudience())
			require.Equal(t, tt.oidc != nil, hr.GetOidcToken() != nil)
		})
	}
}

// A queue the service does not have is the service's answer: a permanent
// NOT_FOUND, recorded as failed.
func TestTaskQueueUnknownToTheService(t *testing.T) {
	t.Parallel()
	b := openDoor(t, nil)
	k := task()
	k.Queue = "missing"
	_, err := b.d.Dispatch(context.Background(), cloudtasks.DispatchRequest{RunID: "r", TaskKey: "t", Identity: naming.Attempt(1), Task: k})
	require.ErrorIs(t, err, cloudtasks.ErrCreateFailed)
	var ce *cloudtasks.CallError
	require.ErrorAs(t, err, &ce)
	require.Equal(t, codes.NotFound, ce.Code)
	require.Equal(t, 1, ce.Calls)
	require.Zero(t, b.emu.TaskCount())
}

// A request whose run ID, task key or identity cannot make an ID is refused
// naming the request field, and still matches naming's errors.
func TestDispatchRequestRefused(t *testing.T) {
	t.Parallel()
	const empty = "is empty; it needs 1 to 100 characters from [A-Za-z0-9._-]"
	long := strings.Repeat("r", 101)
	tests := []struct {
		name string
		req  cloudtasks.DispatchRequest
		want cloudtasks.RequestError
	}{
		{"separator in run ID", cloudtasks.DispatchRequest{RunID: "a:b", TaskKey: "t", Identity: naming.Attempt(1)},
			cloudtasks.RequestError{Field: "RunID", Value: "a:b", Rule: "contains ':' (the separator); allowed: [A-Za-z0-9._-]"}},
		{"empty run ID", cloudtasks.DispatchRequest{TaskKey: "t", Identity: naming.Attempt(1)},
			cloudtasks.RequestError{Field: "RunID", Rule: empty}},
		{"run ID too long", cloudtasks.DispatchRequest{RunID: long, TaskKey: "t", Identity: naming.Attempt(1)},
			cloudtasks.RequestError{Field: "RunID", Value: long[:77] + "…", Rule: "is 101 bytes long; at most 100 allowed"}},
		{"empty task key", cloudtasks.DispatchRequest{RunID: "r", Identity: naming.Attempt(1)},
			cloudtasks.RequestError{Field: "TaskKey", Rule: empty}},
		{"no identity", cloudtasks.DispatchRequest{RunID: "r", TaskKey: "t"},
			cloudtasks.RequestError{Field: "Identity", Rule: "is not set: the request must say which attempt it is; use naming.Attempt(n), naming.CallerKey(key) or naming.Unique()"}},
		{"caller key missing", cloudtasks.DispatchRequest{RunID: "r", TaskKey: "t", Identity: naming.CallerKey("")},
			cloudtasks.RequestError{Field: "Identity", Rule: "is missing; naming.CallerKey needs a non-empty key"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := tt.req.ID()
			require.ErrorIs(t, err, cloudtasks.ErrInvalidRequest)
			require.ErrorIs(t, err, naming.ErrInvalidID)
			var re *cloudtasks.RequestError
			require.ErrorAs(t, err, &re)
			var ne *naming.Error
			require.ErrorAs(t, err, &ne, "the cause is naming's")
			got := *re
			got.Err = nil
			require.Equal(t, tt.want, got)
		})
	}
	_, err := (&cloudtasks.DispatchRequest{RunID: "r", TaskKey: "t", Identity: naming.CallerKey("")}).ID()
	require.ErrorIs(t, err, naming.ErrMissingKey)
}
