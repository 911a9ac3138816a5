package chaos

import (
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/ctdispatch/ctdispatch/cloudtasks"
	"github.com/ctdispatch/ctdispatch/naming"
)

// The kinds of logical attempt the e2e scenario plans. Each says what the
// orchestrators do with it and what must hold at the end.
const (
	// itemDispatch is an attempt dispatched to run at once: exactly one
	// effect.
	itemDispatch = "dispatch"
	// itemRetry is a retry timer due in the past, so it fires at once:
	// exactly one effect.
	itemRetry = "retry"
	// itemHeld is a heartbeat an hour ahead: its task stays in the queue,
	// no effect.
	itemHeld = "held"
	// itemCancel is an attempt scheduled an hour ahead and cancelled: no
	// task, no effect.
	itemCancel = "cancel"
	// itemCancelTimer is a heartbeat an hour ahead, cancelled: no task, no
	// effect.
	itemCancelTimer = "cancel-timer"
)

// e2eItem is one logical attempt of the e2e plan.
type e2eItem struct {
	K    int
	Kind string
}

// e2ePlan draws n logical attempts from seed: seven in ten dispatched at
// once, the rest split among fired retry timers, held heartbeats and
// cancels. The orchestrators and the checker draw the same plan.
func e2ePlan(seed uint64, n int) []e2eItem {
	rng := rand.New(rand.NewPCG(seed, 0xe2e))
	items := make([]e2eItem, n)
	for k := range items {
		kind := itemDispatch
		switch x := rng.IntN(20); {
		case x < 14:
		case x < 16:
			kind = itemRetry
		case x < 17:
			kind = itemHeld
		case x < 19:
			kind = itemCancel
		default:
			kind = itemCancelTimer
		}
		items[k] = e2eItem{K: k, Kind: kind}
	}
	return items
}

// e2eOrder is the order in which an orchestrator whose e2eChild.Order is
// order runs the plan's n items: a permutation of their indexes.
func e2eOrder(seed, order uint64, n int) []int {
	return rand.New(rand.NewPCG(seed, order)).Perm(n)
}

// wantsEffect says whether the item must end with exactly one effect.
func (it e2eItem) wantsEffect() bool { return it.Kind == itemDispatch || it.Kind == itemRetry }

// isTimer says whether the item's ID is a timer's.
func (it e2eItem) isTimer() bool {
	return it.Kind == itemRetry || it.Kind == itemHeld || it.Kind == itemCancelTimer
}

func (it e2eItem) taskKey() string { return fmt.Sprintf("k%05d", it.K) }

// e2eRequests builds the requests of one item. base is the leg's fixed
// time: timers are named after it, so every process names the same timer.
type e2eRequests struct {
	run, url, account string
	base              time.Time
}

func (q e2eRequests) task(it e2eItem) cloudtasks.Task {
	return cloudtasks.Task{URL: q.url, Body: []byte(fmt.Sprintf(`{"run":%q,"k":%d}`, q.run, it.K)),
		OIDC:             &cloudtasks.OIDCToken{ServiceAccountEmail: q.account},
		DispatchDeadline: 15 * time.Second}
}

// dispatch is the item's dispatch request (itemDispatch, itemCancel).
func (q e2eRequests) dispatch(it e2eItem) cloudtasks.DispatchRequest {
	t := q.task(it)
	if it.Kind == itemCancel {
		t.ScheduleTime = q.base.Add(time.Hour)
	}
	return cloudtasks.DispatchRequest{RunID: q.run, TaskKey: it.taskKey(), Identity: naming.Attempt(1), Task: t}
}

// timer is the item's timer request (itemRetry, itemHeld,
// itemCancelTimer).
func (q e2eRequests) timer(it e2eItem) cloudtasks.TimerRequest {
	req := cloudtasks.TimerRequest{RunID: q.run, TaskKey: it.taskKey(), Task: q.task(it)}
	req.Task.DispatchDeadline = 15 * time.Second
	if it.Kind == itemRetry {
		req.Kind, req.Next, req.At = naming.KindRetry, naming.Attempt(2), q.base.Add(-time.Minute)
	} else {
		req.Kind, req.At = naming.KindHeartbeat, q.base.Add(time.Hour)
	}
	return req
}

// id is the item's internal ID.
func (q e2eRequests) id(it e2eItem) naming.ID {
	var id naming.ID
	var err error
	if it.isTimer() {
		req := q.timer(it)
		id, err = req.ID()
	} else {
		req := q.dispatch(it)
		id, err = req.ID()
	}
	if err != nil {
		panic(fmt.Sprintf("chaos: e2e ID: %v", err)) // the keys are built valid
	}
	return id
}
