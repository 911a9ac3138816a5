package cloudtasks_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/cloudtasks/apiv2/cloudtaskspb"
	"github.com/googleapis/gax-go/v2"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"gocloud.dev/blob"
	"gocloud.dev/blob/memblob"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ctdispatch/ctdispatch/cloudtasks"
	"github.com/ctdispatch/ctdispatch/outbox"
	"github.com/ctdispatch/ctdispatch/outbox/parquetbox"
)

// getTasks counts p's GetTask calls.
func (p *proc) getTasks(t *testing.T) int64 {
	t.Helper()
	return cloudtasks.Counter(t, p.reader, cloudtasks.MetricCalls, attribute.String("method", "GetTask"))
}

// On a directory, a process kept open whose view of others is reused
// (RefreshInterval's default of 1 s, on a clock that does not move) reads
// another process's cancel afresh before it answers a repeat from the
// outbox: the held name, for a timer and a dispatch, and no GetTask call
// (a directory shows every kept record). Its view was taken after its
// create; it answered already_existed from it.
func TestRepeatReadsAnotherProcessCancelPastAReusedView(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w := newWorld(t)
	a, b := w.open(t, nil), w.open(t, nil)

	res, err := a.d.ScheduleTimer(ctx, retryTimer("view"))
	require.NoError(t, err)
	a.settle(t)
	again, err := a.d.ScheduleTimer(ctx, retryTimer("view")) // A's view is taken now
	require.NoError(t, err)
	require.Equal(t, cloudtasks.OutcomeAlreadyExisted, again.Outcome)
	_, err = b.d.CancelTimer(ctx, res.TimerID, "")
	require.NoError(t, err)
	_, err = a.d.ScheduleTimer(ctx, retryTimer("view"))
	require.ErrorIs(t, err, cloudtasks.ErrNameHeld)

	dres, err := a.d.Dispatch(ctx, request("r", "view", 1, "x"))
	require.NoError(t, err)
	a.settle(t)
	_, err = a.d.Dispatch(ctx, request("r", "view", 1, "x"))
	require.NoError(t, err)
	_, err = b.d.Cancel(ctx, dres.ID, "")
	require.NoError(t, err)
	_, err = a.d.Dispatch(ctx, request("r", "view", 1, "x"))
	require.ErrorIs(t, err, cloudtasks.ErrNameHeld)
	require.Equal(t, int64(0), a.getTasks(t), "a directory needs no GetTask to answer a repeat")
}

// bucketWorld is a world whose processes keep their tables in one bucket
// and their logs each in a directory of its own, as on separate
// machines: a process sees another's records once they are published.
type bucketWorld struct {
	*world
	bucket *blob.Bucket
}

func newBucketWorld(t *testing.T) *bucketWorld {
	t.Helper()
	bkt := memblob.OpenBucket(nil)
	t.Cleanup(func() { bkt.Close() })
	return &bucketWorld{world: newWorld(t), bucket: bkt}
}

// open opens a processor on the bucket that publishes its log only a
// day after its first record: its records stay in its log, unseen by
// the others, while the test moves the clock by hours.
func (w *bucketWorld) open(t *testing.T, edit func(*cloudtasks.Config)) *proc {
	t.Helper()
	return w.openWith(t, edit, func(o *parquetbox.Config) {
		o.Root, o.Bucket, o.LogDir, o.PublishInterval = "", w.bucket, t.TempDir(), 24*time.Hour
	})
}

// unavailableGets fails GetTask with UNAVAILABLE, at once, while fail
// is set.
type unavailableGets struct {
	cloudtasks.Client
	fail *atomic.Bool
}

func (c unavailableGets) GetTask(ctx context.Context, req *cloudtaskspb.GetTaskRequest, opts ...gax.CallOption) (*cloudtaskspb.Task, error) {
	if c.fail.Load() {
		return nil, status.Error(codes.Unavailable, "unavailable")
	}
	return c.Client.GetTask(ctx, req, opts...)
}

// On a bucket, a repeat that the outbox would answer already_existed is
// confirmed by GetTask, since another process's cancel may be in its
// unpublished log; each case is a world where A scheduled a timer due in
// an hour, published it, and then something happened elsewhere.
func TestRepeatOnABucketIsConfirmedByGetTask(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		// elsewhere is what happens after A published its created record;
		// getsFail makes A's GetTask calls fail.
		elsewhere func(t *testing.T, w *bucketWorld, b *proc, timerID, taskName string, getsFail *atomic.Bool)
		outcome   cloudtasks.Outcome
		err       error
		unknown   cloudtasks.Unknown
	}{{
		name:      "nothing: the task exists",
		elsewhere: func(*testing.T, *bucketWorld, *proc, string, string, *atomic.Bool) {},
		outcome:   cloudtasks.OutcomeAlreadyExisted,
	}, {
		name: "B cancelled, unpublished, before the due time: held name",
		elsewhere: func(t *testing.T, _ *bucketWorld, b *proc, timerID, _ string, _ *atomic.Bool) {
			_, err := b.d.CancelTimer(context.Background(), timerID, "")
			require.NoError(t, err)
		},
		err: cloudtasks.ErrNameHeld,
	}, {
		name: "B cancelled, unpublished, after the due time: ran or deleted is unknown",
		elsewhere: func(t *testing.T, w *bucketWorld, b *proc, timerID, _ string, _ *atomic.Bool) {
			_, err := b.d.CancelTimer(context.Background(), timerID, "")
			require.NoError(t, err)
			w.clock.Advance(2 * time.Hour)
		},
		err:     cloudtasks.ErrIndeterminate,
		unknown: cloudtasks.UnknownDeletion,
	}, {
		name: "the task ran and its completed delivery is recorded",
		elsewhere: func(t *testing.T, w *bucketWorld, b *proc, _, taskName string, _ *atomic.Bool) {
			ctx := context.Background()
			w.clock.Advance(2 * time.Hour)
			// Cloud Tasks deletes a task that completed.
			require.NoError(t, w.client(t).DeleteTask(ctx, &cloudtaskspb.DeleteTaskRequest{Name: taskName}))
			req := retryTimer("bucket")
			id, err := req.ID()
			require.NoError(t, err)
			done := outbox.DeliveryRecordOf(id, "0190f2a0-0000-7000-8000-000000000001")
			done.Status, done.Delivery.HTTPStatus = outbox.StatusDone, 200
			require.NoError(t, outbox.AppendAndWait(ctx, b.box, done))
			require.NoError(t, b.box.Flush(ctx))
		},
		outcome: cloudtasks.OutcomeAlreadyExisted,
	}, {
		name:      "GetTask fails: whether the task exists is unknown",
		elsewhere: func(_ *testing.T, _ *bucketWorld, _ *proc, _, _ string, getsFail *atomic.Bool) { getsFail.Store(true) },
		err:       cloudtasks.ErrIndeterminate,
		unknown:   cloudtasks.UnknownTaskExists,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			w := newBucketWorld(t)
			getsFail := &atomic.Bool{}
			fewCalls := func(c *cloudtasks.Config) { c.Retry = fast(2) }
			a := w.open(t, func(c *cloudtasks.Config) {
				fewCalls(c)
				c.Client, c.EmulatorAddr = unavailableGets{w.client(t), getsFail}, ""
			})
			b := w.open(t, fewCalls)
			res, err := a.d.ScheduleTimer(ctx, retryTimer("bucket"))
			require.NoError(t, err)
			a.settle(t)
			require.NoError(t, a.box.Flush(ctx))
			tc.elsewhere(t, w, b, res.TimerID, res.TaskName, getsFail)

			got, err := a.d.ScheduleTimer(ctx, retryTimer("bucket"))
			if tc.err != nil {
				require.ErrorIs(t, err, tc.err)
				var ie *cloudtasks.IndeterminateError
				if tc.unknown != "" {
					require.ErrorAs(t, err, &ie)
					require.Equal(t, tc.unknown, ie.Unknown)
				}
			} else {
				require.NoError(t, err)
				require.Equal(t, tc.outcome, got.Outcome)
				require.True(t, got.Skipped)
			}
			require.Equal(t, int64(1), cloudtasks.Counter(t, a.reader, cloudtasks.MetricCalls, attribute.String("method", "CreateTask")),
				"the repeat made no CreateTask call")
			require.Positive(t, a.getTasks(t))
		})
	}
}
