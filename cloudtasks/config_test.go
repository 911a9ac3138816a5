package cloudtasks_test

import (
	"context"
	"log/slog"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/metric/noop"
	"google.golang.org/api/option"
	"google.golang.org/grpc/codes"

	"github.com/ctdispatch/ctdispatch/cloudtasks"
	"github.com/ctdispatch/ctdispatch/cloudtasks/emulator"
	"github.com/ctdispatch/ctdispatch/naming"
	"github.com/ctdispatch/ctdispatch/outbox"
)

// Every Config a user can write either works or is refused by NewDispatcher
// with the field, the value and the rule.
func TestConfigErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		edit func(*cloudtasks.Config)
		want cloudtasks.ConfigError
	}{
		{"zero config", func(c *cloudtasks.Config) { *c = cloudtasks.Config{} },
			cloudtasks.ConfigError{Field: "Project", Value: "", Rule: "is not a project ID; allowed: lowercase letters, digits, '-', '.', ':', starting with a letter"}},
		{"project with upper case", func(c *cloudtasks.Config) { c.Project = "My-Project" },
			cloudtasks.ConfigError{Field: "Project", Value: "My-Project", Rule: "is not a project ID; allowed: lowercase letters, digits, '-', '.', ':', starting with a letter"}},
		{"project too long", func(c *cloudtasks.Config) { c.Project = "p" + strings.Repeat("a", 100) },
			cloudtasks.ConfigError{Field: "Project", Value: "p" + strings.Repeat("a", 100), Rule: "is not a project ID; allowed: lowercase letters, digits, '-', '.', ':', starting with a letter"}},
		{"no location", func(c *cloudtasks.Config) { c.Location = "" },
			cloudtasks.ConfigError{Field: "Location", Value: "", Rule: "is not a location; allowed: lowercase letters, digits and '-', for example europe-west1"}},
		{"location with spaces", func(c *cloudtasks.Config) { c.Location = "Europe West" },
			cloudtasks.ConfigError{Field: "Location", Value: "Europe West", Rule: "is not a location; allowed: lowercase letters, digits and '-', for example europe-west1"}},
		{"queue with underscore", func(c *cloudtasks.Config) { c.Queue = "a_b" },
			cloudtasks.ConfigError{Field: "Queue", Value: "a_b", Rule: "is not a queue ID; allowed: 1 to 100 of [A-Za-z0-9-]"}},
		{"queue too long", func(c *cloudtasks.Config) { c.Queue = strings.Repeat("q", 101) },
			cloudtasks.ConfigError{Field: "Queue", Value: strings.Repeat("q", 101), Rule: "is not a queue ID; allowed: 1 to 100 of [A-Za-z0-9-]"}},
		{"negative StaleAfter", func(c *cloudtasks.Config) { c.StaleAfter = -time.Second },
			cloudtasks.ConfigError{Field: "StaleAfter", Value: "-1s", Rule: "is negative"}},
		{"negative NameHold", func(c *cloudtasks.Config) { c.NameHold = -time.Hour },
			cloudtasks.ConfigError{Field: "NameHold", Value: "-1h0m0s", Rule: "is negative"}},
		{"negative RelayInterval", func(c *cloudtasks.Config) { c.RelayInterval = -time.Second },
			cloudtasks.ConfigError{Field: "RelayInterval", Value: "-1s", Rule: "is negative"}},
		{"negative RelayConcurrency", func(c *cloudtasks.Config) { c.RelayConcurrency = -1 },
			cloudtasks.ConfigError{Field: "RelayConcurrency", Value: "-1", Rule: "is negative; allowed: 1 or more, 0 for the default"}},
		{"RelayClaim below the retries", func(c *cloudtasks.Config) { c.RelayClaim = 30 * time.Second },
			cloudtasks.ConfigError{Field: "RelayClaim", Value: "30s", Rule: "is below Retry.MaxElapsed (1m0s): another relay would repeat creates still being retried"}},
		{"negative RelayClaim", func(c *cloudtasks.Config) { c.RelayClaim, c.Retry.MaxElapsed = -time.Second, time.Second },
			cloudtasks.ConfigError{Field: "RelayClaim", Value: "-1s", Rule: "is below Retry.MaxElapsed (1s): another relay would repeat creates still being retried"}},
		{"negative RelayDrainTimeout", func(c *cloudtasks.Config) { c.RelayDrainTimeout = -time.Second },
			cloudtasks.ConfigError{Field: "RelayDrainTimeout", Value: "-1s", Rule: "is negative"}},
		{"bad relay queue", func(c *cloudtasks.Config) { c.RelayQueues = []string{"q", "no/slash"} },
			cloudtasks.ConfigError{Field: "RelayQueues[1]", Value: "no/slash", Rule: "is not a queue ID; allowed: 1 to 100 of [A-Za-z0-9-]"}},
		{"negative BatchInFlight", func(c *cloudtasks.Config) { c.BatchInFlight = -1 },
			cloudtasks.ConfigError{Field: "BatchInFlight", Value: "-1", Rule: "is negative; allowed: 1 or more, 0 for the default"}},
		{"negative Retry.Initial", func(c *cloudtasks.Config) { c.Retry.Initial = -time.Millisecond },
			cloudtasks.ConfigError{Field: "Retry.Initial", Value: "-1ms", Rule: "is negative"}},
		{"Retry.Max below Retry.Initial", func(c *cloudtasks.Config) { c.Retry.Initial, c.Retry.Max = time.Second, time.Millisecond },
			cloudtasks.ConfigError{Field: "Retry.Max", Value: "1ms", Rule: "is below Retry.Initial (1s)"}},
		{"Retry.Initial above the default Max", func(c *cloudtasks.Config) { c.Retry.Initial = 10 * time.Second },
			cloudtasks.ConfigError{Field: "Retry.Max", Value: "5s", Rule: "is below Retry.Initial (10s)"}},
		{"Retry.Multiplier below 1", func(c *cloudtasks.Config) { c.Retry.Multiplier = 0.5 },
			cloudtasks.ConfigError{Field: "Retry.Multiplier", Value: "0.5", Rule: "is below 1"}},
		{"negative Retry.Multiplier", func(c *cloudtasks.Config) { c.Retry.Multiplier = -2 },
			cloudtasks.ConfigError{Field: "Retry.Multiplier", Value: "-2", Rule: "is below 1"}},
		{"Retry.Multiplier NaN", func(c *cloudtasks.Config) { c.Retry.Multiplier = math.NaN() },
			cloudtasks.ConfigError{Field: "Retry.Multiplier", Value: "NaN", Rule: "is not a finite number; allowed: 1 or more"}},
		{"Retry.Multiplier infinite", func(c *cloudtasks.Config) { c.Retry.Multiplier = math.Inf(1) },
			cloudtasks.ConfigError{Field: "Retry.Multiplier", Value: "+Inf", Rule: "is not a finite number; allowed: 1 or more"}},
		{"Retry.Jitter above 1", func(c *cloudtasks.Config) { c.Retry.Jitter = 2 },
			cloudtasks.ConfigError{Field: "Retry.Jitter", Value: "2", Rule: "is above 1; allowed: [0, 1]"}},
		{"negative Retry.MaxCalls", func(c *cloudtasks.Config) { c.Retry.MaxCalls = -1 },
			cloudtasks.ConfigError{Field: "Retry.MaxCalls", Value: "-1", Rule: "is below 1"}},
		{"negative Retry.MaxElapsed", func(c *cloudtasks.Config) { c.Retry.MaxElapsed = -time.Minute },
			cloudtasks.ConfigError{Field: "Retry.MaxElapsed", Value: "-1m0s", Rule: "is negative"}},
		{"unknown Durability", func(c *cloudtasks.Config) { c.Durability = "memory" },
			cloudtasks.ConfigError{Field: "Durability", Value: "memory", Rule: "is not a durability mode; allowed: overlapped, strict"}},
		{"EmulatorAddr and ClientOptions", func(c *cloudtasks.Config) {
			c.EmulatorAddr, c.ClientOptions = "127.0.0.1:1", []option.ClientOption{option.WithoutAuthentication()}
		}, cloudtasks.ConfigError{Field: "Client", Value: `Client set: false, EmulatorAddr "127.0.0.1:1", 1 ClientOptions`,
			Rule: "names the client more than one way; set at most one of Client, EmulatorAddr and ClientOptions"}},
		{"Client and EmulatorAddr", func(c *cloudtasks.Config) { c.Client, c.EmulatorAddr = fakeClient{}, "127.0.0.1:1" },
			cloudtasks.ConfigError{Field: "Client", Value: `Client set: true, EmulatorAddr "127.0.0.1:1", 0 ClientOptions`,
				Rule: "names the client more than one way; set at most one of Client, EmulatorAddr and ClientOptions"}},
		{"Client and ClientOptions", func(c *cloudtasks.Config) {
			c.EmulatorAddr, c.Client, c.ClientOptions = "", fakeClient{}, []option.ClientOption{option.WithoutAuthentication()}
		}, cloudtasks.ConfigError{Field: "Client", Value: `Client set: true, EmulatorAddr "", 1 ClientOptions`,
			Rule: "names the client more than one way; set at most one of Client, EmulatorAddr and ClientOptions"}},
		{"all three", func(c *cloudtasks.Config) {
			c.Client, c.ClientOptions = fakeClient{}, []option.ClientOption{option.WithoutAuthentication(), option.WithEndpoint("x:1")}
		}, cloudtasks.ConfigError{Field: "Client", Value: `Client set: true, EmulatorAddr "127.0.0.1:1", 2 ClientOptions`,
			Rule: "names the client more than one way; set at most one of Client, EmulatorAddr and ClientOptions"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg := cloudtasks.Config{Project: "p", Location: "l", Queue: "q", EmulatorAddr: "127.0.0.1:1"}
			tt.edit(&cfg)
			d, err := cloudtasks.NewDispatcher(context.Background(), outbox.NewMemory(nil), &cfg)
			require.Nil(t, d)
			require.ErrorIs(t, err, cloudtasks.ErrInvalidConfig)
			var ce *cloudtasks.ConfigError
			require.ErrorAs(t, err, &ce)
			require.Equal(t, tt.want, *ce)
			require.ErrorContains(t, err, "Config."+tt.want.Field)
		})
	}
}

// The values that are allowed at the edges of each rule, and the
// combinations that name the client one way or not at all, are accepted.
func TestConfigAccepted(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		edit func(*cloudtasks.Config)
	}{
		{"project with ':' and '.'", func(c *cloudtasks.Config) { c.Project = "example.com:my-project" }},
		{"100-character queue", func(c *cloudtasks.Config) { c.Queue = strings.Repeat("Q", 100) }},
		{"Retry.Max equal to Retry.Initial", func(c *cloudtasks.Config) { c.Retry.Initial, c.Retry.Max = time.Second, time.Second }},
		{"Retry.Multiplier of 1", func(c *cloudtasks.Config) { c.Retry.Multiplier = 1 }},
		{"Retry.Jitter of 1", func(c *cloudtasks.Config) { c.Retry.Jitter = 1 }},
		{"negative Retry.Jitter: none", func(c *cloudtasks.Config) { c.Retry.Jitter = -1 }},
		{"Retry.MaxCalls of 1", func(c *cloudtasks.Config) { c.Retry.MaxCalls = 1 }},
		{"strict durability", func(c *cloudtasks.Config) { c.Durability = cloudtasks.DurabilityStrict }},
		{"Client alone", func(c *cloudtasks.Config) { c.EmulatorAddr, c.Client = "", fakeClient{} }},
		{"ClientOptions alone", func(c *cloudtasks.Config) {
			c.EmulatorAddr, c.ClientOptions = "", []option.ClientOption{option.WithEndpoint("127.0.0.1:1"), option.WithoutAuthentication()}
		}},
		{"batching with one request in flight", func(c *cloudtasks.Config) { c.Batch, c.BatchInFlight = true, 1 }},
		{"ownership enforced", func(c *cloudtasks.Config) { c.EnforceOwnership = true }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg := cloudtasks.Config{Project: "p", Location: "l", Queue: "q", EmulatorAddr: "127.0.0.1:1"}
			tt.edit(&cfg)
			d, err := cloudtasks.NewDispatcher(context.Background(), outbox.NewMemory(nil), &cfg)
			require.NoError(t, err)
			require.NoError(t, d.Close(context.Background()))
		})
	}
}

// WithDefaults fills every zero field with its documented default and
// leaves set fields alone; NewDispatcher does not change the caller's Config.
func TestConfigWithDefaults(t *testing.T) {
	t.Parallel()
	got := cloudtasks.Config{Project: "p", Location: "l", Queue: "q"}.WithDefaults()
	require.Equal(t, cloudtasks.DurabilityOverlapped, got.Durability)
	require.Equal(t, cloudtasks.DefaultBatchInFlight, got.BatchInFlight)
	require.Equal(t, 4, cloudtasks.DefaultBatchInFlight)
	require.Equal(t, time.Minute, got.StaleAfter)
	require.Equal(t, 24*time.Hour, got.NameHold)
	require.Equal(t, []string{"q"}, got.RelayQueues, "the relay takes the default queue")
	require.Equal(t, 200*time.Millisecond, got.RelayInterval)
	require.Equal(t, 16, got.RelayConcurrency)
	require.Equal(t, 3*time.Minute, got.RelayClaim, "2 × Retry.MaxElapsed + StaleAfter")
	require.Equal(t, 30*time.Second, got.RelayDrainTimeout)
	require.False(t, got.NoRelay)
	listening := cloudtasks.Config{Listener: deafListener{}, StaleAfter: time.Second, Retry: cloudtasks.RetryPolicy{MaxElapsed: 10 * time.Second}}.WithDefaults()
	require.Equal(t, time.Second, listening.RelayInterval, "with a listener the interval is the fallback poll")
	require.Equal(t, 21*time.Second, listening.RelayClaim)
	require.Nil(t, cloudtasks.Config{Project: "p", Location: "l"}.WithDefaults().RelayQueues, "no default queue, no relay queue")
	require.Equal(t, []string{}, cloudtasks.Config{Queue: "q", RelayQueues: []string{}}.WithDefaults().RelayQueues, "an empty list relays nothing")
	require.Equal(t, cloudtasks.RetryPolicy{Initial: 50 * time.Millisecond, Max: 5 * time.Second, Multiplier: 2, Jitter: 0.5, MaxCalls: 10, MaxElapsed: time.Minute}, got.Retry)
	require.False(t, got.Batch)
	require.False(t, got.EnforceOwnership)
	require.Nil(t, got.Client)
	require.Nil(t, got.OnRetry)
	require.Equal(t, slog.DiscardHandler, got.Logger.Handler())
	require.IsType(t, noop.MeterProvider{}, got.MeterProvider)
	require.IsType(t, clockwork.NewRealClock(), got.Clock)

	set := cloudtasks.RetryPolicy{Initial: time.Second, Max: time.Minute, Multiplier: 3, Jitter: 0.25, MaxCalls: 2, MaxElapsed: time.Hour}
	require.Equal(t, set, set.WithDefaults())
	require.Equal(t, 0.0, cloudtasks.RetryPolicy{Jitter: -1}.WithDefaults().Jitter, "a negative jitter means none")

	cfg := &cloudtasks.Config{Project: "p", Location: "l", Queue: "q", EmulatorAddr: "127.0.0.1:1"}
	d, err := cloudtasks.NewDispatcher(context.Background(), outbox.NewMemory(nil), cfg)
	require.NoError(t, err)
	require.NoError(t, d.Close(context.Background()))
	require.Equal(t, &cloudtasks.Config{Project: "p", Location: "l", Queue: "q", EmulatorAddr: "127.0.0.1:1"}, cfg)
}

// leavePending makes b's dispatcher give up on a dispatch with Unavailable
// in one call, so its record stays pending, and returns the ID.
func leavePending(t *testing.T, b *door, key string) string {
	t.Helper()
	require.NoError(t, b.emu.SetFaults(emulator.Faults{Rules: []emulator.FaultRule{{Methods: []string{"CreateTask"}, Rate: 1, Code: codes.Unavailable}}}))
	_, err := b.d.Dispatch(context.Background(), cloudtasks.DispatchRequest{RunID: "r", TaskKey: key, Identity: naming.Attempt(1), Task: task()})
	require.ErrorIs(t, err, cloudtasks.ErrGaveUp)
	require.NoError(t, b.emu.SetFaults(emulator.Faults{}))
	b.settle(t) // the record is written before the test moves the clock
	return "dispatch:r:" + key + ":1"
}

// StaleAfter, set or by default, is the age at which Recover takes a
// pending record: a nanosecond younger is left alone.
func TestStaleAfterDecidesWhatRecoverTakes(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name       string
		staleAfter time.Duration
		want       time.Duration
	}{
		{"default", 0, time.Minute},
		{"set", 10 * time.Minute, 10 * time.Minute},
		{"a nanosecond", time.Nanosecond, time.Nanosecond},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := openDoor(t, func(c *cloudtasks.Config) {
				c.StaleAfter, c.Retry.MaxCalls = tt.staleAfter, 1
			})
			id := leavePending(t, b, "a")
			pending, ok, err := b.d.Latest(context.Background(), id)
			require.NoError(t, err)
			require.True(t, ok)
			require.Equal(t, outbox.StatusPending, pending.Status)
			b.clock.Advance(pending.UpdatedAt.Add(tt.want - time.Nanosecond).Sub(b.clock.Now()))
			st, err := b.d.Recover(context.Background())
			require.NoError(t, err)
			require.Equal(t, cloudtasks.RecoverStats{}, st)

			b.clock.Advance(time.Nanosecond)
			st, err = b.d.Recover(context.Background())
			require.NoError(t, err)
			require.Equal(t, cloudtasks.RecoverStats{Stale: 1, NotFound: 1}, st)
			latest, ok, err := b.d.Latest(context.Background(), id)
			require.NoError(t, err)
			require.True(t, ok)
			require.Equal(t, outbox.StatusNotFound, latest.Status)
		})
	}
}

// NameHold, set or by default, is how long after a cancel the answer to a
// repeat is ErrNameHeld, and the time the error gives.
func TestNameHoldSetsTheHeldUntil(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name     string
		nameHold time.Duration
		want     time.Duration
	}{
		{"default", 0, 24 * time.Hour},
		{"queue.yaml queues", 216 * time.Hour, 216 * time.Hour},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			b := openDoor(t, func(c *cloudtasks.Config) { c.NameHold = tt.nameHold })
			req := heartbeat(b, "")
			res, err := b.d.ScheduleTimer(ctx, req)
			require.NoError(t, err)
			_, err = b.d.CancelTimer(ctx, res.TimerID, "")
			require.NoError(t, err)
			cancelled, ok, err := b.d.Latest(ctx, res.TimerID)
			require.NoError(t, err)
			require.True(t, ok)

			_, err = b.d.ScheduleTimer(ctx, req)
			var held *cloudtasks.NameHeldError
			require.ErrorAs(t, err, &held)
			require.Equal(t, cloudtasks.NameHeldError{ID: res.TimerID, CancelledAt: cancelled.UpdatedAt, HeldUntil: cancelled.UpdatedAt.Add(tt.want)}, *held)
		})
	}
}

// The retry policy's defaults, seen through OnRetry on a fake clock that
// the waits advance: the delays double from 50ms up to 5s; ten calls at
// most; no call starts a minute or more after the first.
func TestRetryDefaultsSeenThroughOnRetry(t *testing.T) {
	t.Parallel()
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	for _, tt := range []struct {
		name       string
		retry      cloudtasks.RetryPolicy
		wantDelays []time.Duration
	}{
		{"MaxCalls 10 and Max 5s, no jitter", cloudtasks.RetryPolicy{Jitter: -1},
			[]time.Duration{ms(50), ms(100), ms(200), ms(400), ms(800), ms(1600), ms(3200), ms(5000), ms(5000)}},
		// The 18th call would start 61.35s after the first.
		{"MaxElapsed 1m, no jitter", cloudtasks.RetryPolicy{Jitter: -1, MaxCalls: 100},
			[]time.Duration{ms(50), ms(100), ms(200), ms(400), ms(800), ms(1600), ms(3200),
				ms(5000), ms(5000), ms(5000), ms(5000), ms(5000), ms(5000), ms(5000), ms(5000), ms(5000), ms(5000)}},
		{"Initial and Multiplier set", cloudtasks.RetryPolicy{Jitter: -1, Initial: time.Second, Multiplier: 3, MaxCalls: 4},
			[]time.Duration{ms(1000), ms(3000), ms(5000)}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var events []cloudtasks.RetryEvent
			b := openDoor(t, func(c *cloudtasks.Config) {
				c.Retry = tt.retry
				c.OnRetry = func(ev cloudtasks.RetryEvent) { ev.Err = nil; events = append(events, ev) }
			})
			require.NoError(t, b.emu.SetFaults(emulator.Faults{Rules: []emulator.FaultRule{{Methods: []string{"CreateTask"}, Rate: 1, Code: codes.Unavailable}}}))
			_, err := b.d.Dispatch(context.Background(), cloudtasks.DispatchRequest{RunID: "r", TaskKey: "t", Identity: naming.Attempt(1), Task: task()})
			var ce *cloudtasks.CallError
			require.ErrorAs(t, err, &ce)
			require.Equal(t, len(tt.wantDelays)+1, ce.Calls)

			maxCalls := tt.retry.WithDefaults().MaxCalls
			var want []cloudtasks.RetryEvent
			var waited time.Duration
			for i, d := range tt.wantDelays {
				want = append(want, cloudtasks.RetryEvent{Method: "CreateTask", Call: i + 1, MaxCalls: maxCalls, Code: codes.Unavailable, Delay: d})
				waited += d
			}
			require.Equal(t, want, events)
			require.Equal(t, t0.Add(waited), b.clock.Now())
		})
	}
}

// deafListener hears nothing, as a listener behind a pooler in
// transaction mode.
type deafListener struct{}

func (deafListener) Listen(ctx context.Context, _ string, _ func(string)) error {
	<-ctx.Done()
	return ctx.Err()
}
