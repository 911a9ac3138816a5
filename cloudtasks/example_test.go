package cloudtasks_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"time"

	"github.com/jonboulle/clockwork"
	"google.golang.org/grpc/codes"

	"github.com/ctdispatch/ctdispatch/cloudtasks"
	"github.com/ctdispatch/ctdispatch/cloudtasks/emulator"
	"github.com/ctdispatch/ctdispatch/naming"
	"github.com/ctdispatch/ctdispatch/outbox"
	"github.com/ctdispatch/ctdispatch/outbox/parquetbox"
	"github.com/ctdispatch/ctdispatch/timers"
)

const exampleQueue = "projects/my-project/locations/europe-west1/queues/work"

// startExample starts an in-process emulator holding exampleQueue and a
// dispatcher over it with an in-memory outbox, both on clock.
func startExample(clock clockwork.Clock) (*emulator.Server, *cloudtasks.Dispatcher) {
	emu, err := emulator.New(emulator.Config{DisableDelivery: true, Clock: clock,
		Queues: []emulator.QueueConfig{{Name: exampleQueue}}})
	if err != nil {
		log.Fatal(err)
	}
	d, err := cloudtasks.NewDispatcher(context.Background(), outbox.NewMemory(clock), &cloudtasks.Config{
		Project: "my-project", Location: "europe-west1", Queue: "work", EmulatorAddr: emu.Addr(), Clock: clock,
	})
	if err != nil {
		log.Fatal(err)
	}
	return emu, d
}

// Dispatching the same attempt twice makes one task: the second call is
// answered as a duplicate.
func ExampleDispatcher_Dispatch() {
	ctx := context.Background()
	emu, d := startExample(nil)
	defer emu.Close()
	defer d.Close(ctx)

	req := cloudtasks.DispatchRequest{
		RunID: "run1", TaskKey: "extract", Identity: naming.Attempt(1),
		Task: cloudtasks.Task{URL: "https://worker.example/extract", Body: []byte(`{"table":"orders"}`)},
	}
	for range 2 {
		res, err := d.Dispatch(ctx, req)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(res.ID, res.CloudTaskID, res.Outcome)
	}
	fmt.Println("tasks in the queue:", emu.TaskCount())
	// Output:
	// dispatch:run1:extract:1 d_cxtoltqhbncw6nevn7hy53kqn6 created
	// dispatch:run1:extract:1 d_cxtoltqhbncw6nevn7hy53kqn6 already_existed
	// tasks in the queue: 1
}

// A dispatch recorded in a transaction is created by the relay once the
// transaction commits, and never when it rolls back. With an in-memory
// outbox the transaction is the Memory's own; with PostgreSQL it is the
// caller's database transaction (pgbox.SQLTx), and the calls are the same.
func ExampleDispatcher_DispatchTx() {
	ctx := context.Background()
	emu, err := emulator.New(emulator.Config{DisableDelivery: true, Queues: []emulator.QueueConfig{{Name: exampleQueue}}})
	if err != nil {
		log.Fatal(err)
	}
	defer emu.Close()
	box := outbox.NewMemory(nil)
	d, err := cloudtasks.NewDispatcher(ctx, box, &cloudtasks.Config{
		Project: "my-project", Location: "europe-west1", Queue: "work", EmulatorAddr: emu.Addr()})
	if err != nil {
		log.Fatal(err)
	}
	defer d.Close(ctx)
	request := func(key string) cloudtasks.DispatchRequest {
		return cloudtasks.DispatchRequest{RunID: "order-1001", TaskKey: key, Identity: naming.Attempt(1),
			Task: cloudtasks.Task{URL: "https://worker.example/" + key}}
	}

	rolledBack := box.Begin()
	if _, err := d.DispatchTx(ctx, rolledBack, request("refund")); err != nil {
		log.Fatal(err)
	}
	if err := rolledBack.Rollback(); err != nil {
		log.Fatal(err)
	}
	tx := box.Begin()
	res, err := d.DispatchTx(ctx, tx, request("ship"))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("in the transaction:", res.Outcome, emu.TaskCount(), "tasks")
	if err := tx.Commit(); err != nil {
		log.Fatal(err)
	}
	rec, err := d.WaitOutcome(ctx, res.ID)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("after commit:", rec.Status, emu.TaskCount(), "task")
	// Output:
	// in the transaction: queued 0 tasks
	// after commit: created 1 task
}

// Many dispatches recorded in one transaction cost two statements on
// PostgreSQL, however many there are: one reads every ID's record, one
// writes every pending record and intent. Each request gets DispatchTx's
// answer: a repeat of one already created is already_existed.
func ExampleDispatcher_DispatchManyTx() {
	ctx := context.Background()
	emu, err := emulator.New(emulator.Config{DisableDelivery: true, Queues: []emulator.QueueConfig{{Name: exampleQueue}}})
	if err != nil {
		log.Fatal(err)
	}
	defer emu.Close()
	box := outbox.NewMemory(nil)
	d, err := cloudtasks.NewDispatcher(ctx, box, &cloudtasks.Config{
		Project: "my-project", Location: "europe-west1", Queue: "work", EmulatorAddr: emu.Addr()})
	if err != nil {
		log.Fatal(err)
	}
	defer d.Close(ctx)
	request := func(order string) cloudtasks.DispatchRequest {
		return cloudtasks.DispatchRequest{RunID: order, TaskKey: "ship", Identity: naming.Attempt(1),
			Task: cloudtasks.Task{URL: "https://worker.example/ship"}}
	}
	if _, err := d.Dispatch(ctx, request("order-1001")); err != nil {
		log.Fatal(err)
	}

	tx := box.Begin()
	results, err := d.DispatchManyTx(ctx, tx, []cloudtasks.DispatchRequest{request("order-1001"), request("order-1002"), request("order-1003")})
	if err != nil {
		log.Fatal(err) // nothing of the batch is written: roll back
	}
	if err := tx.Commit(); err != nil {
		log.Fatal(err)
	}
	for _, res := range results {
		rec, err := d.WaitOutcome(ctx, res.ID)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(res.ID, res.Outcome, "then", rec.Status)
	}
	fmt.Println("tasks in the queue:", emu.TaskCount())
	// Output:
	// dispatch:order-1001:ship:1 already_existed then created
	// dispatch:order-1002:ship:1 queued then created
	// dispatch:order-1003:ship:1 queued then created
	// tasks in the queue: 3
}

// Attempt 1 of a task failed; the retry timer starts attempt 2 when the
// backoff has passed. Its due time comes from the failure time, which the
// orchestrator keeps with the failed attempt, so scheduling it again names
// the same timer: one task.
func ExampleDispatcher_ScheduleTimer() {
	ctx := context.Background()
	clock := clockwork.NewFakeClockAt(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC))
	emu, d := startExample(clock)
	defer emu.Close()
	defer d.Close(ctx)

	failedAt := clock.Now().Add(-5 * time.Second) // kept with attempt 1's failure
	due, err := timers.Backoff{}.Due(failedAt, 1)
	if err != nil {
		log.Fatal(err)
	}
	req := cloudtasks.TimerRequest{
		Kind: naming.KindRetry, RunID: "run1", TaskKey: "extract", Next: naming.Attempt(2),
		At: due, Task: cloudtasks.Task{URL: "https://worker.example/retry"},
	}
	for range 2 {
		res, err := d.ScheduleTimer(ctx, req)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(res.TimerID, res.Outcome, res.Due.Format(time.RFC3339))
	}
	// Output:
	// timer:retry:run1:extract:2:1767268805 created 2026-01-01T12:00:05Z
	// timer:retry:run1:extract:2:1767268805 already_existed 2026-01-01T12:00:05Z
}

// A process schedules the retry timer of a failed attempt and stops; the
// process that takes over, on the same outbox, schedules it again from the
// same kept failure time and gets the same timer back, already_existed.
// Had it used the time of the call, the due time, and so the timer's name,
// would have moved: a second timer and a second attempt 2.
func ExampleDispatcher_ScheduleTimer_restart() {
	ctx := context.Background()
	root, err := os.MkdirTemp("", "ctdispatch-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(root)
	clock := clockwork.NewFakeClockAt(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC))
	emu, err := emulator.New(emulator.Config{DisableDelivery: true, Clock: clock,
		Queues: []emulator.QueueConfig{{Name: exampleQueue}}})
	if err != nil {
		log.Fatal(err)
	}
	defer emu.Close()

	// What the orchestrator keeps of the failed attempt: its failure time.
	failedAt := time.Date(2026, 1, 1, 11, 59, 58, 0, time.UTC)
	schedule := func() {
		box, err := parquetbox.Open(ctx, parquetbox.Config{Root: root})
		if err != nil {
			log.Fatal(err)
		}
		d, err := cloudtasks.NewDispatcher(ctx, box, &cloudtasks.Config{
			Project: "my-project", Location: "europe-west1", Queue: "work", EmulatorAddr: emu.Addr(), Clock: clock,
		})
		if err != nil {
			log.Fatal(err)
		}
		due, err := timers.Backoff{}.Due(failedAt, 1)
		if err != nil {
			log.Fatal(err)
		}
		res, err := d.ScheduleTimer(ctx, cloudtasks.TimerRequest{
			Kind: naming.KindRetry, RunID: "run1", TaskKey: "extract", Next: naming.Attempt(2),
			At: due, Task: cloudtasks.Task{URL: "https://worker.example/retry"},
		})
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(res.TimerID, res.Outcome)
		if err := d.Close(ctx); err != nil {
			log.Fatal(err)
		}
		if err := box.Close(); err != nil {
			log.Fatal(err)
		}
	}
	schedule()
	clock.Advance(3 * time.Second) // the restart takes a while
	schedule()
	fmt.Println("tasks in the queue:", emu.TaskCount())
	// Output:
	// timer:retry:run1:extract:2:1767268808 created
	// timer:retry:run1:extract:2:1767268808 already_existed
	// tasks in the queue: 1
}

// Cancelling a heartbeat check deletes its task from the queue the outbox
// recorded; scheduling the same check again is refused while Cloud Tasks
// holds the deleted name.
func ExampleDispatcher_CancelTimer() {
	ctx := context.Background()
	clock := clockwork.NewFakeClockAt(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC))
	emu, d := startExample(clock)
	defer emu.Close()
	defer d.Close(ctx)

	req := cloudtasks.TimerRequest{
		Kind: naming.KindHeartbeat, RunID: "run1", TaskKey: "load",
		At: clock.Now().Add(5 * time.Minute), Task: cloudtasks.Task{URL: "https://worker.example/heartbeat"},
	}
	res, err := d.ScheduleTimer(ctx, req)
	if err != nil {
		log.Fatal(err)
	}
	cancelled, err := d.CancelTimer(ctx, res.TimerID, "")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(cancelled.Outcome, emu.TaskCount())
	again, err := d.CancelTimer(ctx, res.TimerID, "")
	fmt.Println(again.Outcome, err)
	_, err = d.ScheduleTimer(ctx, req)
	var held *cloudtasks.NameHeldError
	fmt.Println(errors.As(err, &held), held.HeldUntil.Format(time.RFC3339))
	// Output:
	// deleted 0
	// already_gone <nil>
	// true 2026-01-02T12:00:00Z
}

// Recover finishes the records a stopped process left pending: here a
// pending record whose task exists, which Recover marks already_existed.
func ExampleDispatcher_Recover() {
	ctx := context.Background()
	clock := clockwork.NewFakeClockAt(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC))
	emu, d := startExample(clock)
	defer emu.Close()
	defer d.Close(ctx)

	// The server creates the task but the answer is lost, on every try:
	// the dispatcher gives up and the record stays pending.
	if err := emu.SetFaults(emulator.Faults{Rules: []emulator.FaultRule{
		{Methods: []string{"CreateTask"}, Rate: 1, Code: codes.Unavailable, CommitThenFail: true},
	}}); err != nil {
		log.Fatal(err)
	}
	_, err := d.Dispatch(ctx, cloudtasks.DispatchRequest{RunID: "run1", TaskKey: "extract", Identity: naming.Attempt(1),
		Task: cloudtasks.Task{URL: "https://worker.example/extract"}})
	fmt.Println(errors.Is(err, cloudtasks.ErrGaveUp))
	if err := emu.SetFaults(emulator.Faults{}); err != nil {
		log.Fatal(err)
	}

	// The record of the give-up is written as the answer goes out; Latest
	// waits for it, so the clock moves past a record already kept.
	if _, _, err := d.Latest(ctx, "dispatch:run1:extract:1"); err != nil {
		log.Fatal(err)
	}
	clock.Advance(cloudtasks.DefaultStaleAfter)
	st, err := d.Recover(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("stale %d, found %d, not found %d\n", st.Stale, st.Found, st.NotFound)
	// Output:
	// true
	// stale 1, found 1, not found 0
}

// History reads back every state the outbox recorded for an ID.
func ExampleDispatcher_History() {
	ctx := context.Background()
	emu, d := startExample(nil)
	defer emu.Close()
	defer d.Close(ctx)

	res, err := d.Dispatch(ctx, cloudtasks.DispatchRequest{RunID: "run1", TaskKey: "extract", Identity: naming.Attempt(1),
		Task: cloudtasks.Task{URL: "https://worker.example/extract"}})
	if err != nil {
		log.Fatal(err)
	}
	hist, err := d.History(ctx, res.ID)
	if err != nil {
		log.Fatal(err)
	}
	for _, rec := range hist {
		fmt.Println(rec.ID, rec.Status, rec.CreateCalls)
	}
	// Output:
	// dispatch:run1:extract:1 pending 0
	// dispatch:run1:extract:1 created 1
}

// A test of code that dispatches, written against the emulator with a fake
// clock shared by both: an injected transient failure is retried after a
// backoff that moves the fake clock, so the test needs no Advance and
// never sleeps.
func Example_testWithFakeClock() {
	ctx := context.Background()
	start := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	clock := clockwork.NewFakeClockAt(start)
	emu, err := emulator.New(emulator.Config{DisableDelivery: true, Clock: clock,
		Queues: []emulator.QueueConfig{{Name: exampleQueue}},
		Faults: emulator.Faults{Rules: []emulator.FaultRule{{Methods: []string{"CreateTask"}, Rate: 1, Code: codes.Unavailable}}}})
	if err != nil {
		log.Fatal(err)
	}
	defer emu.Close()
	d, err := cloudtasks.NewDispatcher(ctx, outbox.NewMemory(clock), &cloudtasks.Config{
		Project: "my-project", Location: "europe-west1", Queue: "work", EmulatorAddr: emu.Addr(), Clock: clock,
		OnRetry: func(ev cloudtasks.RetryEvent) {
			fmt.Println("retry", ev.Method, ev.Code, "after call", ev.Call)
			if ev.Call == 2 {
				if err := emu.SetFaults(emulator.Faults{}); err != nil { // the service recovers
					log.Fatal(err)
				}
			}
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	res, err := d.Dispatch(ctx, cloudtasks.DispatchRequest{RunID: "run1", TaskKey: "extract", Identity: naming.Attempt(1),
		Task: cloudtasks.Task{URL: "https://worker.example/extract"}})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(res.Outcome, res.Calls, clock.Since(start) > 0)
	if err := d.Close(ctx); err != nil {
		log.Fatal(err)
	}
	// Output:
	// retry CreateTask Unavailable after call 1
	// retry CreateTask Unavailable after call 2
	// created 3 true
}

// A dispatcher that keeps its records in Parquet files, which DuckDB and
// BigQuery read: open the parquetbox outbox, hand it to the dispatcher,
// close the dispatcher (which rolls the log into Parquet), then the outbox.
func Example_parquetOutbox() {
	ctx := context.Background()
	root, err := os.MkdirTemp("", "ctdispatch-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(root)
	emu, err := emulator.New(emulator.Config{DisableDelivery: true, Queues: []emulator.QueueConfig{{Name: exampleQueue}}})
	if err != nil {
		log.Fatal(err)
	}
	defer emu.Close()

	box, err := parquetbox.Open(ctx, parquetbox.Config{Root: root})
	if err != nil {
		log.Fatal(err)
	}
	d, err := cloudtasks.NewDispatcher(ctx, box, &cloudtasks.Config{
		Project: "my-project", Location: "europe-west1", Queue: "work", EmulatorAddr: emu.Addr(),
	})
	if err != nil {
		log.Fatal(err)
	}
	res, err := d.Dispatch(ctx, cloudtasks.DispatchRequest{RunID: "run1", TaskKey: "extract", Identity: naming.Attempt(1),
		Task: cloudtasks.Task{URL: "https://worker.example/extract"}})
	if err != nil {
		log.Fatal(err)
	}
	if err := d.Close(ctx); err != nil {
		log.Fatal(err)
	}
	if err := box.Close(); err != nil {
		log.Fatal(err)
	}
	files, _ := filepath.Glob(filepath.Join(root, "dispatch_outbox", "created_date=*", "*.parquet"))
	fmt.Println(res.Outcome, len(files) > 0)
	// Output:
	// created true
}
