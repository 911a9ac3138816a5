package worker

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/cloudtasks/apiv2/cloudtaskspb"
	"github.com/stretchr/testify/require"

	"github.com/ctdispatch/ctdispatch/cloudtasks/emulator"
	"github.com/ctdispatch/ctdispatch/naming"
)

// Time budget: under 1 s (the fuzz target runs only its seeds here).

func TestParseDeliveryReadsEveryHeader(t *testing.T) {
	t.Parallel()
	id := mustID(t, "run1", "extract", "1")
	h := cloudTasksHeaders(id)
	h.Set(HeaderRetryCount, "3")
	h.Set(HeaderExecutionCount, "2")
	h.Set(HeaderETA, "1764061200.000000123")
	h.Set(HeaderPreviousResponse, "500")
	h.Set(HeaderRetryReason, "HTTP_STATUS_500")
	d, err := parseDelivery(h, false)
	require.NoError(t, err)
	require.Equal(t, Delivery{
		ID: id, Queue: "work", TaskName: "d_cxtoltqhbncw6nevn7hy53kqn6", RetryCount: 3, ExecutionCount: 2,
		ETA: time.Date(2025, 11, 25, 9, 0, 0, 123, time.UTC), PreviousResponse: 500, RetryReason: "HTTP_STATUS_500", Header: h,
	}, d)
}

func TestParseDeliveryErrors(t *testing.T) {
	t.Parallel()
	id := mustID(t, "run1", "extract", "1")
	other := mustID(t, "run1", "extract", "2")
	tests := []struct {
		name   string
		header string
		value  string // "" deletes the header
		want   string
	}{
		{"no queue", HeaderQueueName, "", `header X-CloudTasks-QueueName "" is missing; Cloud Tasks sets it on every delivery`},
		{"no task name", HeaderTaskName, "", `header X-CloudTasks-TaskName "" is missing; Cloud Tasks sets it on every delivery`},
		{"no retry count", HeaderRetryCount, "", `header X-CloudTasks-TaskRetryCount "" is missing; Cloud Tasks sets it on every delivery`},
		{"negative retry count", HeaderRetryCount, "-1", `header X-CloudTasks-TaskRetryCount "-1" is not a count; allowed: a decimal number from 0`},
		{"signed execution count", HeaderExecutionCount, "+1", `header X-CloudTasks-TaskExecutionCount "+1" is not a count; allowed: a decimal number from 0`},
		{"bad previous response", HeaderPreviousResponse, "5xx", `header X-CloudTasks-TaskPreviousResponse "5xx" is not a count; allowed: a decimal number from 0`},
		{"no ETA", HeaderETA, "", `header X-CloudTasks-TaskETA "" is missing; Cloud Tasks sets it on every delivery`},
		{"ETA in exponent form", HeaderETA, "1.7e9", `header X-CloudTasks-TaskETA "1.7e9" is not a time; allowed: seconds since the Unix epoch, with up to 9 decimals`},
		{"ETA with 10 decimals", HeaderETA, "1.0000000001", `header X-CloudTasks-TaskETA "1.0000000001" is not a time; allowed: seconds since the Unix epoch, with up to 9 decimals`},
		{"ETA with an empty fraction", HeaderETA, "1.", `header X-CloudTasks-TaskETA "1." is not a time; allowed: seconds since the Unix epoch, with up to 9 decimals`},
		{"no key", HeaderIdempotencyKey, "", `header Idempotency-Key "" is missing; this worker accepts only tasks dispatched by ctdispatch (Config.AcceptUnkeyed lets others through)`},
		{"key not an ID", HeaderIdempotencyKey, "order-7", `header Idempotency-Key "order-7" is not an internal ID: ` + parseErr(t, "order-7")},
		{"key of another task", HeaderIdempotencyKey, other.String(), `header Idempotency-Key "dispatch:run1:extract:2" names task ` + other.CloudTaskID() + ` but was delivered by task "` + id.CloudTaskID() + `" (X-CloudTasks-TaskName)`},
		{"ctdispatch ID of another task", HeaderCtdispatchTaskID, other.CloudTaskID(), `header X-Ctdispatch-Task-Id "` + other.CloudTaskID() + `" differs from task ` + id.CloudTaskID() + `, which Idempotency-Key "dispatch:run1:extract:1" names`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := cloudTasksHeaders(id)
			if tt.value == "" {
				h.Del(tt.header)
			} else {
				h.Set(tt.header, tt.value)
			}
			_, err := parseDelivery(h, false)
			require.EqualError(t, err, tt.want)
			require.ErrorIs(t, err, ErrRejected)
			var he *HeaderError
			require.True(t, errors.As(err, &he))
			require.Equal(t, tt.header, he.Header)
		})
	}
}

func parseErr(t *testing.T, s string) string {
	_, err := naming.Parse(s)
	require.Error(t, err)
	return err.Error()
}

// The parser never panics, and what it accepts fits together: the key's
// Cloud Tasks ID is the task name, the counts are not negative.
func FuzzDelivery(f *testing.F) {
	id, _ := naming.NewDispatch("run1", "extract", naming.Attempt(1))
	timer, _ := naming.NewHeartbeat("run1", "load", time.Unix(1772368200, 0))
	for _, key := range []string{id.String(), timer.String(), "", "dispatch:a:b:", "timer:retry:x"} {
		f.Add(key, id.CloudTaskID(), "0", "1", "1764061200.25", "", true)
	}
	f.Add(timer.String(), timer.CloudTaskID(), "7", "3", "0", "503", false)
	f.Fuzz(func(t *testing.T, key, task, retries, executions, eta, prev string, unkeyed bool) {
		h := http.Header{}
		for name, v := range map[string]string{
			HeaderQueueName: "q", HeaderTaskName: task, HeaderRetryCount: retries, HeaderExecutionCount: executions,
			HeaderETA: eta, HeaderPreviousResponse: prev, HeaderIdempotencyKey: key,
		} {
			if v != "" {
				h.Set(name, v)
			}
		}
		d, err := parseDelivery(h, unkeyed)
		if err != nil {
			require.ErrorIs(t, err, ErrRejected)
			return
		}
		require.GreaterOrEqual(t, d.RetryCount, 0)
		require.GreaterOrEqual(t, d.ExecutionCount, 0)
		if key == "" {
			require.True(t, unkeyed)
			require.True(t, d.ID.IsZero())
			return
		}
		require.Equal(t, task, d.ID.CloudTaskID())
		require.Equal(t, key, d.ID.String())
	})
}

// A reply lost after the work committed, and a manual RunTask, make three
// deliveries of one key; the effect happens once. The emulator is told
// to see the first two answers as failures (a 500 in place of the
// worker's 200), as it would when the connection broke after the commit.
func TestLostRepliesAndRunTaskMakeOneEffect(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var answers []string
	lose := 2
	e := startEmulator(t, func(c *emulator.Config) {
		c.HTTPClient = &http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
			resp, err := http.DefaultTransport.RoundTrip(r)
			if err != nil {
				return nil, err
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			mu.Lock()
			defer mu.Unlock()
			answers = append(answers, resp.Status+" "+strings.TrimSpace(string(body)))
			if lose > 0 {
				lose--
				resp.StatusCode, resp.Status = 500, "500 reply lost"
			}
			resp.Body = io.NopCloser(strings.NewReader(""))
			return resp, nil
		})}
	})
	db, inbox := openDB(t)
	mux := http.NewServeMux()
	url := serve(t, mux) + "/work"
	w, err := New(context.Background(), e.verifiedConfig(url, inbox), writeEffect)
	require.NoError(t, err)
	mux.Handle("/work", w)

	id := mustID(t, "lost", "t", "1")
	name := e.createTask(t, id, url)
	_, err = e.srv.RunDue(context.Background())
	require.NoError(t, err)
	_, err = e.client.RunTask(context.Background(), &cloudtaskspb.RunTaskRequest{Name: name})
	require.NoError(t, err)
	e.deliverAll(t, 5)

	require.Equal(t, []int{500, 500, 200}, e.statuses())
	require.Equal(t, []string{"200 OK done", "200 OK duplicate", "200 OK duplicate"}, answers)
	rows, distinct := effects(t, db)
	require.Equal(t, [2]int{1, 1}, [2]int{rows, distinct})
}
