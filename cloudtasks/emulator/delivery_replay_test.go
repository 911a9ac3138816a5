package emulator_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/cloudtasks/apiv2/cloudtaskspb"
	"github.com/stretchr/testify/require"

	"github.com/ctdispatch/ctdispatch/cloudtasks/emulator"
)

// closeOnce is a worker that answers 200, except to the first request
// that arrives on a connection it has already answered on: that
// connection it closes without an answer, which net/http's client would
// answer by sending a replayable request again on a fresh connection.
type closeOnce struct {
	mu     sync.Mutex
	seen   map[string]bool // remote addresses answered before
	closed bool
	got    []string // task name and retry count of every request received
}

func (c *closeOnce) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c.mu.Lock()
	c.got = append(c.got, r.Header.Get("X-CloudTasks-TaskName")+" retry "+r.Header.Get("X-CloudTasks-TaskRetryCount")+" key "+r.Header.Get("Idempotency-Key"))
	reused := c.seen[r.RemoteAddr]
	c.seen[r.RemoteAddr] = true
	cut := reused && !c.closed
	c.closed = c.closed || cut
	c.mu.Unlock()
	if cut {
		conn, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			conn.Close()
		}
	}
}

func (c *closeOnce) hasClosed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed
}

func (c *closeOnce) received() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.got...)
}

// TestAReusedConnectionClosedWithoutAnAnswerIsOneFailedAttempt: the
// emulator's HTTP client never sends an attempt twice, whatever the
// method, body, Idempotency-Key header or Config.HTTPClient; the closed
// connection is one failed attempt, retried after the queue's backoff
// with retry count 1, so what the worker received and Deliveries agree.
func TestAReusedConnectionClosedWithoutAnAnswerIsOneFailedAttempt(t *testing.T) {
	t.Parallel()
	const backoff = time.Second
	tests := []struct {
		name   string
		method cloudtaskspb.HttpMethod
		body   string
		client *http.Client
	}{
		{"POST with a body", cloudtaskspb.HttpMethod_POST, "payload", nil},
		{"POST without a body", cloudtaskspb.HttpMethod_POST, "", nil},
		{"GET", cloudtaskspb.HttpMethod_GET, "", nil},
		{"DELETE", cloudtaskspb.HttpMethod_DELETE, "", nil},
		{"PUT with a body, the caller's client", cloudtaskspb.HttpMethod_PUT, "payload", &http.Client{Transport: &http.Transport{}}},
		{"PATCH without a body, the caller's client", cloudtaskspb.HttpMethod_PATCH, "", &http.Client{Transport: &http.Transport{}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, func(c *emulator.Config) {
				c.Queues = []emulator.QueueConfig{{Name: queue, MinBackoff: backoff, MaxBackoff: backoff}}
				c.HTTPClient = tt.client
			})
			w := &closeOnce{seen: map[string]bool{}}
			srv := httptest.NewServer(w)
			t.Cleanup(srv.Close)
			create := func(id string) {
				_, err := b.client.CreateTask(context.Background(), &cloudtaskspb.CreateTaskRequest{Parent: queue, Task: &cloudtaskspb.Task{
					Name: queue + "/tasks/" + id,
					MessageType: &cloudtaskspb.Task_HttpRequest{HttpRequest: &cloudtaskspb.HttpRequest{
						Url: srv.URL + "/work", HttpMethod: tt.method, Body: []byte(tt.body),
						Headers: map[string]string{"Idempotency-Key": id},
					}},
				}})
				require.NoError(t, err)
			}
			// Tasks are sent one at a time, each on the connection the last
			// one left idle, until one finds it closed. The client usually
			// reuses the first connection; under load it may open another.
			var want []string
			cut := ""
			for i := 0; cut == "" && i < 20; i++ {
				id := fmt.Sprintf("t%d", i)
				create(id)
				require.Equal(t, 1, runDue(t, b))
				want = append(want, id+" retry 0 key "+id)
				if w.hasClosed() {
					cut = id
				}
			}
			require.NotEmpty(t, cut, "no request arrived on a reused connection")
			require.Equal(t, want, w.received(), "the worker got each attempt once")

			b.clock.Advance(backoff - time.Millisecond)
			require.Equal(t, 0, runDue(t, b), "the retry waits for the queue's backoff")
			b.clock.Advance(time.Millisecond)
			require.Equal(t, 1, runDue(t, b))
			require.Equal(t, append(want, cut+" retry 1 key "+cut), w.received())

			var wantRecord []string
			for _, r := range want[:len(want)-1] {
				wantRecord = append(wantRecord, strings.Fields(r)[0]+" 0 succeeded OK")
			}
			wantRecord = append(wantRecord, cut+" 0 retry ", cut+" 1 succeeded OK")
			var got []string
			for _, d := range b.srv.Deliveries() {
				got = append(got, d.Task[len(queue+"/tasks/"):]+" "+d.Header.Get("X-CloudTasks-TaskRetryCount")+" "+d.Outcome+" "+http.StatusText(d.StatusCode))
			}
			require.Equal(t, wantRecord, got)
		})
	}
}
