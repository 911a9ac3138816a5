package cloudtasks_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"

	"github.com/ctdispatch/ctdispatch/cloudtasks"
	"github.com/ctdispatch/ctdispatch/cloudtasks/emulator"
	"github.com/ctdispatch/ctdispatch/naming"
)

// OnRetry hears of every retry of each method the dispatcher calls, with
// the failed call's number and the wait, before the wait; the last failure
// is not retried. Internal is transient for the dispatcher, and the
// official client does not retry it itself, so every call is the
// dispatcher's.
func TestOnRetryReportsEachRetry(t *testing.T) {
	t.Parallel()
	// gaveUp says the dispatcher gave up on id after three calls of method.
	gaveUp := func(t *testing.T, err error, method, id string) {
		var ce *cloudtasks.CallError
		require.ErrorAs(t, err, &ce)
		require.Equal(t, cloudtasks.CallError{ID: id, Method: method, Code: codes.Internal, Calls: 3, Transient: true, Err: ce.Err}, *ce)
	}
	tests := []struct {
		method string
		// before runs without faults and returns the ID call works on;
		// call makes the dispatcher call method under the fault.
		before func(t *testing.T, b *door) string
		call   func(t *testing.T, b *door, id string)
	}{
		{"CreateTask", func(*testing.T, *door) string { return "" }, func(t *testing.T, b *door, _ string) {
			_, err := b.d.Dispatch(context.Background(), cloudtasks.DispatchRequest{RunID: "r", TaskKey: "t", Identity: naming.Attempt(1), Task: task()})
			gaveUp(t, err, "CreateTask", "dispatch:r:t:1")
		}},
		{"GetTask", func(t *testing.T, b *door) string {
			id := leavePending(t, b, "t")
			b.clock.Advance(time.Hour)
			return id
		}, func(t *testing.T, b *door, _ string) {
			st, err := b.d.Recover(context.Background())
			require.NoError(t, err)
			require.Equal(t, cloudtasks.RecoverStats{Stale: 1, Errors: 1}, st, "the record stays pending for the next pass")
		}},
		{"DeleteTask", func(t *testing.T, b *door) string {
			res, err := b.d.ScheduleTimer(context.Background(), heartbeat(b, ""))
			require.NoError(t, err)
			return res.TimerID
		}, func(t *testing.T, b *door, id string) {
			_, err := b.d.CancelTimer(context.Background(), id, "")
			gaveUp(t, err, "DeleteTask", id)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.method, func(t *testing.T) {
			t.Parallel()
			var got []cloudtasks.RetryEvent
			b := openDoor(t, func(c *cloudtasks.Config) {
				c.Retry = cloudtasks.RetryPolicy{Initial: time.Second, Max: time.Second, Multiplier: 1, Jitter: -1, MaxCalls: 3}
				c.OnRetry = func(ev cloudtasks.RetryEvent) {
					if ev.Method == tt.method {
						ev.Err = nil
						got = append(got, ev)
					}
				}
			})
			id := tt.before(t, b)
			start := b.clock.Now()
			require.NoError(t, b.emu.SetFaults(emulator.Faults{Rules: []emulator.FaultRule{{Methods: []string{tt.method}, Rate: 1, Code: codes.Internal}}}))
			tt.call(t, b, id)
			require.Equal(t, []cloudtasks.RetryEvent{
				{Method: tt.method, Call: 1, MaxCalls: 3, Code: codes.Internal, Delay: time.Second},
				{Method: tt.method, Call: 2, MaxCalls: 3, Code: codes.Internal, Delay: time.Second},
			}, got)
			require.Equal(t, 2*time.Second, b.clock.Since(start), "the fake clock moved by the waits")
		})
	}
}
