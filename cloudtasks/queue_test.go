package cloudtasks_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"

	"github.com/ctdispatch/ctdispatch/cloudtasks"
	"github.com/ctdispatch/ctdispatch/cloudtasks/emulator"
	"github.com/ctdispatch/ctdispatch/naming"
)

// submitFunc makes one Dispatch or ScheduleTimer call of the same ID with
// Task.Queue set to queue, and says what came back and which ID it named.
type submitFunc func(ctx context.Context, b *door, queue string) (id string, outcome cloudtasks.Outcome, taskName string, err error)

var submits = map[string]submitFunc{
	"dispatch": func(ctx context.Context, b *door, queue string) (string, cloudtasks.Outcome, string, error) {
		tk := task()
		tk.Queue = queue
		req := cloudtasks.DispatchRequest{RunID: "r", TaskKey: "t", Identity: naming.Attempt(1), Task: tk}
		id, err := req.ID()
		if err != nil {
			return "", "", "", err
		}
		res, err := b.d.Dispatch(ctx, req)
		return id.String(), res.Outcome, res.TaskName, err
	},
	"timer": func(ctx context.Context, b *door, queue string) (string, cloudtasks.Outcome, string, error) {
		req := heartbeat(b, queue)
		req.At = t0.Add(time.Hour)
		id, err := req.ID()
		if err != nil {
			return "", "", "", err
		}
		res, err := b.d.ScheduleTimer(ctx, req)
		return id.String(), res.Outcome, res.TaskName, err
	},
}

// redeploy replaces the door's dispatcher with one over the same outbox
// whose default queue is queue, as a redeploy with another configuration
// does.
func (b *door) redeploy(t *testing.T, queue string) {
	t.Helper()
	b.cfg.Queue = queue
	b.settle(t)
}

// An ID's task lives in the queue of its first record. A repeat that names
// another queue is refused, naming both; one that names none goes to the
// recorded queue, also after a redeploy changed the default queue and also
// when the record is still pending (the first create succeeded, every
// answer was lost), so the repeat's create meets the task that exists
// instead of making a second one in another queue.
func TestRepeatStaysInTheRecordedQueue(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		firstIn    string // Task.Queue of the first call
		redeployTo string // the default queue after the first call, if it changes
		pending    bool   // the first call's answers are lost: the record stays pending
		recorded   string // the queue the first call recorded
		elsewhere  string // a queue the repeat must not use
		wantAgain  cloudtasks.Outcome
	}{
		{"created, repeat names another queue", "other", "", false, otherQueue, doorQueue, cloudtasks.OutcomeAlreadyExisted},
		{"pending, repeat names another queue", "other", "", true, otherQueue, doorQueue, cloudtasks.OutcomeAlreadyExisted},
		{"created, redeployed with another default queue", "", "other", false, doorQueue, otherQueue, cloudtasks.OutcomeAlreadyExisted},
		{"pending, redeployed with another default queue", "", "other", true, doorQueue, otherQueue, cloudtasks.OutcomeAlreadyExisted},
	}
	for kind, submit := range submits {
		for _, tt := range tests {
			t.Run(kind+"/"+tt.name, func(t *testing.T) {
				t.Parallel()
				ctx := context.Background()
				b := openDoor(t, nil)
				if tt.pending {
					require.NoError(t, b.emu.SetFaults(emulator.Faults{Rules: []emulator.FaultRule{
						{Methods: []string{"CreateTask"}, Rate: 1, Code: codes.Unavailable, CommitThenFail: true}}}))
				}
				id, outcome, taskName, err := submit(ctx, b, tt.firstIn)
				if tt.pending {
					require.ErrorIs(t, err, cloudtasks.ErrGaveUp)
					require.NoError(t, b.emu.SetFaults(emulator.Faults{}))
				} else {
					require.NoError(t, err)
					require.Equal(t, cloudtasks.OutcomeCreated, outcome)
				}
				parsed, err := naming.Parse(id)
				require.NoError(t, err)
				wantName := tt.recorded + "/tasks/" + parsed.CloudTaskID()
				if !tt.pending {
					require.Equal(t, wantName, taskName)
				}
				b.settle(t)
				if tt.redeployTo != "" {
					b.redeploy(t, tt.redeployTo)
				}

				// Named explicitly, the other queue is refused before any call.
				elsewhereID := tt.elsewhere[len("projects/p/locations/l/queues/"):]
				_, _, _, err = submit(ctx, b, elsewhereID)
				require.ErrorIs(t, err, cloudtasks.ErrInvalidRequest)
				var re *cloudtasks.RequestError
				require.ErrorAs(t, err, &re)
				require.Equal(t, cloudtasks.RequestError{Field: "Task.Queue", Value: elsewhereID,
					Rule: fmt.Sprintf("names queue %s, but the outbox recorded %s in queue %s; leave it empty or name that queue (another queue needs another attempt)",
						tt.elsewhere, id, tt.recorded)}, *re)

				// Named by nothing, the recorded queue wins.
				gotID, outcome, taskName, err := submit(ctx, b, "")
				require.NoError(t, err)
				require.Equal(t, id, gotID)
				require.Equal(t, tt.wantAgain, outcome)
				require.Equal(t, wantName, taskName)
				b.settle(t)
				latest, _, err := b.d.Latest(ctx, id)
				require.NoError(t, err)
				require.Equal(t, tt.recorded, latest.Queue)
				require.Len(t, b.emu.Tasks(tt.recorded), 1)
				require.Empty(t, b.emu.Tasks(tt.elsewhere), "never a second task")
			})
		}
	}
}
