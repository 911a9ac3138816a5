package cloudtasks_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"

	"github.com/ctdispatch/ctdispatch/cloudtasks"
	"github.com/ctdispatch/ctdispatch/cloudtasks/emulator"
	"github.com/ctdispatch/ctdispatch/outbox"
)

// Each verdict of Recover against the emulator, which deletes executed
// tasks and keeps their names taken for its reuse window, and what the
// caller's repeat then gets.
func TestRecoverVerdicts(t *testing.T) {
	t.Parallel()
	const window = time.Hour
	for _, tt := range []struct {
		name string
		// committed: the lost create call did create the task.
		committed bool
		// ran: the task was executed (and so deleted) before Recover.
		ran bool
		// later is how long after Recover the caller repeats.
		later       time.Duration
		wantStats   cloudtasks.RecoverStats
		wantStatus  outbox.Status
		wantRepeat  cloudtasks.Outcome
		wantHistory []outbox.Status
		wantTasks   int // tasks created over the test
	}{
		{
			name: "never created", wantStats: cloudtasks.RecoverStats{Stale: 1, NotFound: 1},
			wantStatus: outbox.StatusNotFound, wantRepeat: cloudtasks.OutcomeCreated, wantTasks: 1,
			wantHistory: []outbox.Status{outbox.StatusPending, outbox.StatusPending, outbox.StatusNotFound, outbox.StatusPending, outbox.StatusCreated},
		},
		{
			name: "exists", committed: true, wantStats: cloudtasks.RecoverStats{Stale: 1, Found: 1},
			wantStatus: outbox.StatusAlreadyExisted, wantRepeat: cloudtasks.OutcomeAlreadyExisted, wantTasks: 1,
			wantHistory: []outbox.Status{outbox.StatusPending, outbox.StatusPending, outbox.StatusAlreadyExisted},
		},
		{
			name: "ran and was deleted, repeat within the reuse window", committed: true, ran: true,
			wantStats: cloudtasks.RecoverStats{Stale: 1, NotFound: 1}, wantStatus: outbox.StatusNotFound,
			wantRepeat: cloudtasks.OutcomeAlreadyExisted, wantTasks: 1,
			wantHistory: []outbox.Status{outbox.StatusPending, outbox.StatusPending, outbox.StatusNotFound, outbox.StatusPending, outbox.StatusAlreadyExisted},
		},
		{
			name: "ran and was deleted, repeat after the reuse window", committed: true, ran: true, later: 2 * window,
			wantStats: cloudtasks.RecoverStats{Stale: 1, NotFound: 1}, wantStatus: outbox.StatusNotFound,
			wantRepeat: cloudtasks.OutcomeCreated, wantTasks: 2,
			wantHistory: []outbox.Status{outbox.StatusPending, outbox.StatusPending, outbox.StatusNotFound, outbox.StatusPending, outbox.StatusCreated},
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			worker := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}))
			t.Cleanup(worker.Close)
			clock := clockwork.NewFakeClockAt(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
			emu, err := emulator.New(emulator.Config{ManualDelivery: true, Clock: clock, NameReuseWindow: window,
				Queues: []emulator.QueueConfig{{Name: worldQueue}}})
			require.NoError(t, err)
			t.Cleanup(func() { emu.Close() })
			w := &world{emu: emu, clock: clock, root: t.TempDir()}
			p := w.open(t, func(c *cloudtasks.Config) { c.Retry = fast(1) })
			ctx := context.Background()
			req := request("run1", "a", 1, "x")
			req.Task.URL = worker.URL

			// The create call's answer is lost: the record stays pending.
			require.NoError(t, emu.SetFaults(emulator.Faults{Rules: []emulator.FaultRule{
				{Methods: []string{"CreateTask"}, Rate: 1, Code: codes.Unavailable, CommitThenFail: tt.committed},
			}}))
			_, err = p.d.Dispatch(ctx, req)
			require.ErrorIs(t, err, cloudtasks.ErrGaveUp)
			p.settle(t)
			require.NoError(t, emu.SetFaults(emulator.Faults{}))
			if tt.ran {
				n, err := emu.RunDue(ctx)
				require.NoError(t, err)
				require.Equal(t, 1, n)
			}

			clock.Advance(2 * cloudtasks.DefaultStaleAfter)
			st, err := p.d.Recover(ctx)
			require.NoError(t, err)
			require.Equal(t, tt.wantStats, st)
			latest, found, err := p.d.Latest(ctx, "dispatch:run1:a:1")
			require.NoError(t, err)
			require.True(t, found)
			require.Equal(t, tt.wantStatus, latest.Status)

			clock.Advance(tt.later)
			res, err := p.d.Dispatch(ctx, req)
			require.NoError(t, err)
			require.Equal(t, tt.wantRepeat, res.Outcome)
			require.Equal(t, tt.wantHistory, statuses(p.history(t, res.ID)))
			created := emu.TaskCount()
			if tt.ran {
				created++ // the executed one is gone from the store
			}
			require.Equal(t, tt.wantTasks, created)
		})
	}
}
