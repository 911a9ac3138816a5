package emulator_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"

	"cloud.google.com/go/cloudtasks/apiv2/cloudtaskspb"
	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/ctdispatch/ctdispatch/cloudtasks/emulator"
	"github.com/ctdispatch/ctdispatch/cloudtasks/emulator/emuproto"
)

// inspect fetches the inspection endpoint with query q.
func inspect(t *testing.T, srv *emulator.Server, q url.Values) (int, emuproto.Inspection) {
	t.Helper()
	resp, err := http.Get("http://" + srv.HTTPAddr() + emuproto.InspectPath + "?" + q.Encode())
	require.NoError(t, err)
	defer resp.Body.Close()
	var ins emuproto.Inspection
	if resp.StatusCode == http.StatusOK {
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&ins))
	}
	return resp.StatusCode, ins
}

func TestInspectionCountsTasksAndRedactsHeaders(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusAccepted) }))
	defer target.Close()
	const a, b = "projects/p/locations/l/queues/a", "projects/p/locations/l/queues/b"
	start := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	srv, err := emulator.New(emulator.Config{
		Addr: "127.0.0.1:0", Clock: clockwork.NewFakeClockAt(start), ManualDelivery: true,
		Queues: []emulator.QueueConfig{{Name: a}, {Name: b, Paused: true}},
	})
	require.NoError(t, err)
	defer srv.Close()
	client, err := srv.NewClient(ctx)
	require.NoError(t, err)
	defer client.Close()
	create := func(queue, id string, at time.Time) {
		_, err := client.CreateTask(ctx, &cloudtaskspb.CreateTaskRequest{Parent: queue, Task: &cloudtaskspb.Task{
			Name: queue + "/tasks/" + id, ScheduleTime: timestamppb.New(at),
			MessageType: &cloudtaskspb.Task_HttpRequest{HttpRequest: &cloudtaskspb.HttpRequest{
				Url: target.URL, HttpMethod: cloudtaskspb.HttpMethod_POST, Body: []byte("12345"),
				Headers: map[string]string{
					"Content-Type": "application/json", "traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
					"Idempotency-Key": "run1:sent:1", "X-Ctdispatch-Task-Id": "sent",
					"X-Api-Key": "secret", "Cookie": "session=secret",
				},
				AuthorizationHeader: &cloudtaskspb.HttpRequest_OidcToken{OidcToken: &cloudtaskspb.OidcToken{ServiceAccountEmail: "w@p.iam.gserviceaccount.com"}},
			}},
		}})
		require.NoError(t, err)
	}
	create(a, "sent", start)
	_, err = srv.RunDue(ctx)
	require.NoError(t, err)
	create(a, "later", start.Add(time.Hour))
	create(b, "held1", start)
	create(b, "held2", start)

	code, ins := inspect(t, srv, nil)
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, start, ins.Now.UTC())
	require.Equal(t, []emuproto.QueueLoad{
		{Name: a, Tasks: 1, Scheduled: 1},
		{Name: b, Tasks: 2, Waiting: 2},
	}, ins.Queues)
	require.Len(t, ins.Deliveries, 1)
	d := ins.Deliveries[0]
	require.Equal(t, []string{a + "/tasks/sent", "POST", target.URL, "succeeded"}, []string{d.Task, d.Method, d.URL, d.Outcome})
	require.Equal(t, []int{http.StatusAccepted, 5, 1}, []int{d.StatusCode, d.BodyBytes, int(d.Attempt)})
	// Only headers known to carry no secret show their values.
	redacted := []string{emuproto.RedactedValue}
	require.Equal(t, http.Header{
		"Authorization": redacted, "X-Api-Key": redacted, "Cookie": redacted,
		"Content-Type": {"application/json"}, "Traceparent": {"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},
		"Idempotency-Key": {"run1:sent:1"}, "X-Ctdispatch-Task-Id": {"sent"}, "User-Agent": {"Google-Cloud-Tasks"},
		"X-Cloudtasks-Queuename": {"a"}, "X-Cloudtasks-Taskname": {"sent"}, "X-Cloudtasks-Taskretrycount": {"0"},
		"X-Cloudtasks-Taskexecutioncount": {"0"}, "X-Cloudtasks-Tasketa": {"1795428000.000000"},
	}, d.Header)
	// What the worker was sent still holds the token.
	require.Regexp(t, `^Bearer \S+$`, srv.Deliveries()[0].Header.Get("Authorization"))

	_, ins = inspect(t, srv, url.Values{"queue": {b}})
	require.Empty(t, ins.Deliveries)
	_, ins = inspect(t, srv, url.Values{"task": {a + "/tasks/sent"}, "limit": {"1"}})
	require.Len(t, ins.Deliveries, 1)
	_, ins = inspect(t, srv, url.Values{"limit": {"0"}})
	require.Empty(t, ins.Deliveries)
	code, _ = inspect(t, srv, url.Values{"limit": {"-1"}})
	require.Equal(t, http.StatusBadRequest, code)
	// The OIDC documents are still served next to it.
	resp, err := http.Get(srv.JWKSURL())
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
}
