package cloudtasks_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ctdispatch/ctdispatch/cloudtasks"
	"github.com/ctdispatch/ctdispatch/naming"
	"github.com/ctdispatch/ctdispatch/outbox"
)

// skewBound is the clock skew up to which docs/consistency.md's tables
// hold: less than Config.StaleAfter (1 min by default) minus the longest
// CreateTask call, here none longer than a second.
const skewBound = time.Minute - time.Second

// skewKind is one kind of ID the skew regressions create and cancel: a
// create and a cancel through the exported API, for the ID of number i.
type skewKind struct {
	name   string
	create func(ctx context.Context, d *cloudtasks.Dispatcher, i int) (id, taskName string, err error)
	cancel func(ctx context.Context, d *cloudtasks.Dispatcher, id string) (cloudtasks.CancelResult, error)
}

func skewTimer(kind naming.Kind) func(context.Context, *cloudtasks.Dispatcher, int) (string, string, error) {
	return func(ctx context.Context, d *cloudtasks.Dispatcher, i int) (string, string, error) {
		req := cloudtasks.TimerRequest{Kind: kind, RunID: "r", TaskKey: fmt.Sprint("skew", i),
			At: t0.Add(time.Hour), Task: cloudtasks.Task{URL: "https://worker.example/timer"}}
		if kind == naming.KindRetry {
			req.Next = naming.Attempt(2)
		}
		res, err := d.ScheduleTimer(ctx, req)
		return res.TimerID, res.TaskName, err
	}
}

var skewKinds = []skewKind{{
	name: "dispatch",
	create: func(ctx context.Context, d *cloudtasks.Dispatcher, i int) (string, string, error) {
		res, err := d.Dispatch(ctx, request("r", fmt.Sprint("skew", i), 1, "x"))
		return res.ID, res.TaskName, err
	},
	cancel: func(ctx context.Context, d *cloudtasks.Dispatcher, id string) (cloudtasks.CancelResult, error) {
		return d.Cancel(ctx, id, "")
	},
}, {
	name:   "retry timer",
	create: skewTimer(naming.KindRetry),
	cancel: func(ctx context.Context, d *cloudtasks.Dispatcher, id string) (cloudtasks.CancelResult, error) {
		return d.CancelTimer(ctx, id, "")
	},
}, {
	name:   "heartbeat timer",
	create: skewTimer(naming.KindHeartbeat),
	cancel: func(ctx context.Context, d *cloudtasks.Dispatcher, id string) (cloudtasks.CancelResult, error) {
		return d.CancelTimer(ctx, id, "")
	},
}}

// With B's clock 50 ms, or up to the stated bound, behind or ahead of
// A's, B's cancels of A's dispatches and timers (retry and heartbeat)
// sort after the creates they followed, by version and by updated_at
// alike (what the DuckDB queries order by); a third process C asked for
// the same IDs again answers the held name for each, and never
// already_existed without a task (with updated_at ordering, 50 ms of skew
// made it answer already_existed for 20 of 20 retry timers).
func TestSkewedClocksNeverPutACancelBeforeItsCreate(t *testing.T) {
	t.Parallel()
	const n = 10
	for _, kind := range skewKinds {
		for _, skew := range []time.Duration{50 * time.Millisecond, skewBound, -skewBound} {
			name := fmt.Sprintf("%s, B's clock %s behind", kind.name, skew)
			if skew < 0 {
				name = fmt.Sprintf("%s, B's clock %s ahead", kind.name, -skew)
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				ctx := context.Background()
				w := newWorld(t)
				a := w.open(t, nil)
				b := w.open(t, func(c *cloudtasks.Config) { c.Clock = skewedClock{w.clock, skew} })
				c := w.open(t, nil)
				client := w.client(t)
				ids, names := make([]string, n), make([]string, n)
				for i := range n {
					var err error
					ids[i], names[i], err = kind.create(ctx, a.d, i)
					require.NoError(t, err)
				}
				a.settle(t)
				for i := range n {
					res, err := kind.cancel(ctx, b.d, ids[i])
					require.NoError(t, err)
					require.Equal(t, cloudtasks.CancelDeleted, res.Outcome)
				}
				b.settle(t)

				falseAnswers, held := 0, 0
				for i := range n {
					byTime := slices.Clone(c.history(t, ids[i]))
					slices.SortStableFunc(byTime, func(x, y outbox.Record) int { return x.UpdatedAt.Compare(y.UpdatedAt) })
					require.Equal(t, []outbox.Status{outbox.StatusPending, outbox.StatusCreated, outbox.StatusCancelled}, statuses(byTime),
						"%s ordered by updated_at", ids[i])
					require.Equal(t, []int64{1, 2, 3}, versions(byTime), "%s ordered by updated_at", ids[i])

					_, _, err := kind.create(ctx, c.d, i)
					switch {
					case errors.Is(err, cloudtasks.ErrNameHeld):
						held++
					case err == nil && !w.holds(t, client, names[i]):
						falseAnswers++
					default:
						require.NoError(t, err)
					}
				}
				require.Equal(t, 0, falseAnswers)
				require.Equal(t, n, held)
			})
		}
	}
}

func versions(recs []outbox.Record) []int64 {
	out := make([]int64, len(recs))
	for i, r := range recs {
		out[i] = r.Version
	}
	return out
}
