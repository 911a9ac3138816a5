package worker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Time budget: under 2 s; every test here answers over loopback HTTP
// without token verification (verify_test.go covers that).

func insecure(inbox Inbox) *Config { return &Config{InsecureSkipVerify: true, Inbox: inbox} }

// What the handler returns decides the status, the body, Retry-After and
// what the inbox remembers; a redelivery calls the handler again only
// after a retryable failure.
func TestStatusMap(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name         string
		result       func() error
		status       int
		body         string
		retryAfter   string
		finished     Outcome // "" when the key stays unfinished
		redelivered  int
		redeliveryOK string
	}{
		{"nil", func() error { return nil }, 200, "done\n", "", OutcomeDone, 200, "duplicate\n"},
		{"permanent", func() error { return Permanent(errors.New("order 7 does not exist")) }, 200, "failed\n", "", OutcomeFailed, 200, "duplicate\n"},
		{"retryable", func() error { return errors.New("database is down") }, 500, "retry\n", "", "", 200, "done\n"},
		{"slow down", func() error { return SlowDown(errors.New("quota"), 1500*time.Millisecond) }, 503, "slow_down\n", "2", "", 200, "done\n"},
		{"slow down without a delay", func() error { return SlowDown(errors.New("quota"), 0) }, 503, "slow_down\n", "1", "", 200, "done\n"},
		{"panic", func() error { panic("nil map") }, 500, "panic\n", "", "", 200, "done\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			inbox := NewMemoryInbox()
			var calls atomic.Int32
			w, err := New(context.Background(), insecure(inbox), func(context.Context, *Delivery) error {
				if calls.Add(1) == 1 {
					return tt.result()
				}
				return nil
			})
			require.NoError(t, err)
			url := serve(t, w)
			id := mustID(t, "status", "t", "1")
			code, body, retryAfter := post(t, url, cloudTasksHeaders(id), "{}")
			require.Equal(t, tt.status, code)
			require.Equal(t, tt.body, body)
			require.Equal(t, tt.retryAfter, retryAfter)
			got, ok := inbox.Finished(id.String())
			require.Equal(t, tt.finished, got)
			require.Equal(t, tt.finished != "", ok)

			code, body, _ = post(t, url, cloudTasksHeaders(id), "{}")
			require.Equal(t, tt.redelivered, code)
			require.Equal(t, tt.redeliveryOK, body)
			wantCalls := int32(1)
			if tt.finished == "" {
				wantCalls = 2
			}
			require.Equal(t, wantCalls, calls.Load())
		})
	}
}

// A verified request whose headers do not fit together is a permanent
// failure: 200, so Cloud Tasks stops, and the handler never runs. A task
// without an Idempotency-Key is refused the same way unless AcceptUnkeyed.
func TestHeadersThatDoNotFitAreRejected(t *testing.T) {
	t.Parallel()
	id := mustID(t, "run1", "extract", "1")
	other := mustID(t, "run1", "extract", "2")
	tests := []struct {
		name          string
		acceptUnkeyed bool
		edit          func(h http.Header)
		body          string
		called        bool
	}{
		{"consistent", false, func(http.Header) {}, "done\n", true},
		{"no key", false, func(h http.Header) { h.Del(HeaderIdempotencyKey); h.Del(HeaderCtdispatchTaskID) }, "rejected\n", false},
		{"no key, unkeyed accepted", true, func(h http.Header) { h.Del(HeaderIdempotencyKey); h.Del(HeaderCtdispatchTaskID) }, "done\n", true},
		{"no key but a ctdispatch task ID", true, func(h http.Header) { h.Del(HeaderIdempotencyKey) }, "rejected\n", false},
		{"key not an internal ID", false, func(h http.Header) { h.Set(HeaderIdempotencyKey, "order-7") }, "rejected\n", false},
		{"key of another task", false, func(h http.Header) { h.Set(HeaderIdempotencyKey, other.String()) }, "rejected\n", false},
		{"ctdispatch task ID of another task", false, func(h http.Header) { h.Set(HeaderCtdispatchTaskID, other.CloudTaskID()) }, "rejected\n", false},
		{"no task name", false, func(h http.Header) { h.Del(HeaderTaskName) }, "rejected\n", false},
		{"bad retry count", false, func(h http.Header) { h.Set(HeaderRetryCount, "-1") }, "rejected\n", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var got *Delivery
			cfg := insecure(NewMemoryInbox())
			cfg.AcceptUnkeyed = tt.acceptUnkeyed
			w, err := New(context.Background(), cfg, func(_ context.Context, d *Delivery) error {
				got = d
				return nil
			})
			require.NoError(t, err)
			h := cloudTasksHeaders(id)
			tt.edit(h)
			code, body, _ := post(t, serve(t, w), h, "payload")
			require.Equal(t, 200, code)
			require.Equal(t, tt.body, body)
			require.Equal(t, tt.called, got != nil)
			if tt.acceptUnkeyed && got != nil {
				require.True(t, got.ID.IsZero())
				require.Nil(t, got.Tx())
				require.Equal(t, []byte("payload"), got.Body)
			}
		})
	}
}

// A mismatch is logged at error level with both values, so the operator
// sees which dispatcher sent what.
func TestRejectionLogNamesBothValues(t *testing.T) {
	t.Parallel()
	var logs bytes.Buffer
	cfg := insecure(NewMemoryInbox())
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	w, err := New(context.Background(), cfg, func(context.Context, *Delivery) error { return nil })
	require.NoError(t, err)
	id, other := mustID(t, "r", "t", "1"), mustID(t, "r", "t", "2")
	h := cloudTasksHeaders(id)
	h.Set(HeaderIdempotencyKey, other.String())
	code, _, _ := post(t, serve(t, w), h, "")
	require.Equal(t, 200, code)
	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	require.Len(t, lines, 2, logs.String()) // the start warning, then the rejection
	require.Contains(t, lines[0], `level=WARN msg="worker: token verification is off`)
	require.Contains(t, lines[1], "level=ERROR")
	require.Contains(t, lines[1], "outcome=rejected")
	require.Contains(t, lines[1], "task="+id.CloudTaskID())
	require.Contains(t, lines[1], "idempotency_key=dispatch:r:t:2")
	require.Contains(t, lines[1], fmt.Sprintf(`error="header Idempotency-Key \"dispatch:r:t:2\" names task %s but was delivered by task \"%s\" (X-CloudTasks-TaskName)"`, other.CloudTaskID(), id.CloudTaskID()))
}

// A body over the cap is answered 413 (which Cloud Tasks retries) without
// running the handler; a body at the cap goes through.
func TestBodyCap(t *testing.T) {
	t.Parallel()
	cfg := insecure(NewMemoryInbox())
	cfg.MaxBodyBytes = 10
	w, err := New(context.Background(), cfg, func(context.Context, *Delivery) error { return nil })
	require.NoError(t, err)
	url := serve(t, w)
	code, body, _ := post(t, url, cloudTasksHeaders(mustID(t, "r", "big", "1")), "01234567890")
	require.Equal(t, 413, code)
	require.Equal(t, "too_large\n", body)
	code, body, _ = post(t, url, cloudTasksHeaders(mustID(t, "r", "fits", "1")), "0123456789")
	require.Equal(t, 200, code)
	require.Equal(t, "done\n", body)
}

// Concurrent deliveries of one key in one process run the handler one at
// a time: the first holds the key until every other delivery has arrived
// and is waiting, then all but the first find the key done.
func TestConcurrentDeliveriesOfOneKeyRunOnce(t *testing.T) {
	t.Parallel()
	const n = 20
	db, inbox := openDB(t)
	var running, calls atomic.Int32
	var overlapped atomic.Bool
	arrived := make(chan struct{})
	var arrivals atomic.Int32
	w, err := New(context.Background(), insecure(inbox), func(ctx context.Context, d *Delivery) error {
		if running.Add(1) > 1 {
			overlapped.Store(true)
		}
		defer running.Add(-1)
		if calls.Add(1) == 1 {
			<-arrived
		}
		return writeEffect(ctx, d)
	})
	require.NoError(t, err)
	url := serve(t, http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if arrivals.Add(1) == n {
			close(arrived)
		}
		w.ServeHTTP(rw, r)
	}))
	id := mustID(t, "concurrent", "t", "1")
	bodies := make([]string, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			code, body, _ := post(t, url, cloudTasksHeaders(id), "")
			require.Equal(t, 200, code)
			bodies[i] = body
		})
	}
	wg.Wait()
	count := map[string]int{}
	for _, b := range bodies {
		count[b]++
	}
	require.Equal(t, map[string]int{"done\n": 1, "duplicate\n": n - 1}, count)
	require.False(t, overlapped.Load())
	require.Equal(t, int32(1), calls.Load())
	rows, distinct := effects(t, db)
	require.Equal(t, [2]int{1, 1}, [2]int{rows, distinct})
}

// A delivery that waits longer than LockTimeout for another delivery of
// its key is answered 500 (retried later), never 429 or 503, which would
// slow the whole queue down.
func TestBusyKeyIsA500(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	entered := make(chan struct{})
	cfg := insecure(NewMemoryInbox())
	cfg.LockTimeout = 50 * time.Millisecond
	w, err := New(context.Background(), cfg, func(context.Context, *Delivery) error {
		close(entered)
		<-release
		return nil
	})
	require.NoError(t, err)
	url := serve(t, w)
	id := mustID(t, "busy", "t", "1")
	first := make(chan string)
	go func() {
		_, body, _ := post(t, url, cloudTasksHeaders(id), "")
		first <- body
	}()
	<-entered
	code, body, _ := post(t, url, cloudTasksHeaders(id), "")
	require.Equal(t, 500, code)
	require.Equal(t, "busy\n", body)
	close(release)
	require.Equal(t, "done\n", <-first)
}

func TestConfigErrorsNameTheField(t *testing.T) {
	t.Parallel()
	inbox := NewMemoryInbox()
	ok := func(context.Context, *Delivery) error { return nil }
	tests := []struct {
		name string
		cfg  *Config
		h    Handler
		want string
	}{
		{"zero config", nil, ok, `worker: Config.Audiences [] is empty; tokens cannot be verified without it (InsecureSkipVerify turns verification off)`},
		{"no service accounts", &Config{Audiences: []string{"https://w"}, Inbox: inbox}, ok,
			`worker: Config.ServiceAccounts [] is empty; tokens cannot be verified without it (InsecureSkipVerify turns verification off)`},
		{"empty audience", &Config{Audiences: []string{""}, ServiceAccounts: []string{testSA}, Inbox: inbox}, ok, `worker: Config.Audiences[0] "" is empty`},
		{"skip and accounts", &Config{InsecureSkipVerify: true, ServiceAccounts: []string{testSA}, Inbox: inbox}, ok,
			`worker: Config.ServiceAccounts ["tasks@p.iam.gserviceaccount.com"] is set although InsecureSkipVerify turns verification off; drop one of them`},
		{"skip and explain", &Config{InsecureSkipVerify: true, ExplainRefusals: true, Inbox: inbox}, ok,
			`worker: Config.ExplainRefusals true is set although InsecureSkipVerify turns verification off, so no token is refused; drop one of them`},
		{"no inbox", &Config{InsecureSkipVerify: true}, ok,
			"worker: Config.Inbox nil is required: NewSQLInbox for exactly-once effects across processes, NewMemoryInbox for one process"},
		{"negative body cap", &Config{InsecureSkipVerify: true, Inbox: inbox, MaxBodyBytes: -1}, ok,
			"worker: Config.MaxBodyBytes -1 is negative; allowed: 1 or more (0: the default)"},
		{"lock timeout too long", &Config{InsecureSkipVerify: true, Inbox: inbox, LockTimeout: time.Hour}, ok,
			"worker: Config.LockTimeout 1h0m0s is out of range; allowed: 1ns to 30m (0: the default 10s)"},
		{"no handler", &Config{InsecureSkipVerify: true, Inbox: inbox}, nil, "worker: handler nil is required"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := New(context.Background(), tt.cfg, tt.h)
			require.EqualError(t, err, tt.want)
			require.ErrorIs(t, err, ErrInvalidConfig)
		})
	}
}

func TestOutcomeStatuses(t *testing.T) {
	t.Parallel()
	want := map[Outcome]int{
		OutcomeDone: 200, OutcomeDuplicate: 200, OutcomeFailed: 200, OutcomeRejected: 200,
		OutcomeRetry: 500, OutcomePanic: 500, OutcomeBusy: 500, OutcomeKeysUnavailable: 500,
		OutcomeSlowDown: 503, OutcomeUnauthorized: 401, OutcomeForbidden: 403, OutcomeTooLarge: 413,
	}
	got := map[Outcome]int{}
	for _, o := range allOutcomes {
		got[o] = o.Status()
	}
	require.Equal(t, want, got)
}

// waitRecordingInbox is a MemoryInbox that notes the wait each Process
// call was given.
type waitRecordingInbox struct {
	*MemoryInbox
	waits chan time.Duration
}

func (r waitRecordingInbox) Process(ctx context.Context, key string, wait time.Duration, work Work) (Outcome, error) {
	r.waits <- wait
	return r.MemoryInbox.Process(ctx, key, wait, work)
}

// A delivery that waited in this process for another delivery of its key
// gives the inbox only what is left of LockTimeout, so its two waits
// together stay within the one bound.
func TestLockTimeoutBoundsBothWaits(t *testing.T) {
	t.Parallel()
	inbox := waitRecordingInbox{MemoryInbox: NewMemoryInbox(), waits: make(chan time.Duration, 2)}
	cfg := insecure(inbox)
	cfg.LockTimeout = time.Minute
	release := make(chan struct{})
	releaseOnce := sync.OnceFunc(func() { close(release) })
	t.Cleanup(releaseOnce) // a failed assertion must not leave a handler blocked
	entered := make(chan struct{}, 2)
	w, err := New(context.Background(), cfg, func(context.Context, *Delivery) error {
		entered <- struct{}{}
		<-release
		return errors.New("retry me") // so the second delivery runs the handler too
	})
	require.NoError(t, err)
	url := serve(t, w)
	id := mustID(t, "bound", "t", "1")
	answers := make(chan int, 2)
	deliver := func() {
		code, _, _ := post(t, url, cloudTasksHeaders(id), "")
		answers <- code
	}
	go deliver()
	<-entered
	first := <-inbox.waits
	require.LessOrEqual(t, first, cfg.LockTimeout)
	require.Greater(t, first, cfg.LockTimeout-time.Second, "the first delivery waited for nobody")
	go deliver()
	waiting := func() bool { // the second delivery is queued on the key's lock
		w.locks.mu.Lock()
		defer w.locks.mu.Unlock()
		return w.locks.m[id.String()] != nil && w.locks.m[id.String()].refs == 2
	}
	for !waiting() {
		runtime.Gosched()
	}
	seen := time.Now()
	releaseOnce()
	held := time.Since(seen) // the second delivery waited at least this long
	second := <-inbox.waits
	require.LessOrEqual(t, second, cfg.LockTimeout-held)
	require.Equal(t, 500, <-answers)
	require.Equal(t, 500, <-answers)
}
