package parquetbox_test

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/ctdispatch/ctdispatch/outbox/parquetbox"

	"github.com/google/uuid"
	"github.com/jonboulle/clockwork"

	"github.com/ctdispatch/ctdispatch/naming"
	"github.com/ctdispatch/ctdispatch/outbox"
)

// A dispatcher records pending before the create call and the outcome
// after; Latest answers from memory, Lookup finds the history by either ID.
func Example() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "outbox-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	clock := clockwork.NewFakeClockAt(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	ob, err := parquetbox.Open(ctx, parquetbox.Config{
		Root:          dir,
		ProcessorUUID: uuid.MustParse("0b6f8e2a-3c1d-4f5e-8a9b-1c2d3e4f5a60"),
		Clock:         clock,
	})
	if err != nil {
		panic(err)
	}
	defer ob.Close()

	id, _ := naming.NewDispatch("run1", "extract", naming.Attempt(1))
	rec := outbox.Record{
		Table: outbox.TableDispatch, ID: id.String(), CloudTaskID: id.CloudTaskID(),
		Queue: "projects/acme/locations/us-central1/queues/extract", RunID: id.RunID(),
		TaskKey: id.TaskKey(), Attempt: id.Attempt(), Status: outbox.StatusPending,
	}
	if err := outbox.AppendAndWait(ctx, ob, rec); err != nil { // durable when it returns
		panic(err)
	}
	clock.Advance(250 * time.Millisecond)
	rec.Status, rec.CreateCalls = outbox.StatusCreated, 1
	if err := outbox.AppendAndWait(ctx, ob, rec); err != nil {
		panic(err)
	}

	latest, found, _ := ob.Latest(ctx, outbox.TableDispatch, id.String())
	fmt.Println(found, latest.Status, latest.TaskName)

	history, _ := ob.Lookup(ctx, outbox.Query{CloudTaskID: id.CloudTaskID(), History: true})
	for _, r := range history {
		fmt.Println(r.UpdatedAt.Format(time.RFC3339Nano), r.Status, r.CreateCalls)
	}
	// Output:
	// true created projects/acme/locations/us-central1/queues/extract/tasks/d_cxtoltqhbncw6nevn7hy53kqn6
	// 2026-03-01T12:00:00Z pending 0
	// 2026-03-01T12:00:00.25Z created 1
}

func ExampleParseRetention() {
	r, err := parquetbox.ParseRetention("orders=7d,audit=36h,*=0")
	if err != nil {
		panic(err)
	}
	for _, q := range []string{"projects/p/locations/l/queues/orders", "audit", "other"} {
		d, ok := r.For(q)
		fmt.Println(q, d, ok)
	}
	_, err = parquetbox.ParseRetention("orders=7days")
	fmt.Println(err)
	// Output:
	// projects/p/locations/l/queues/orders 168h0m0s true
	// audit 36h0m0s true
	// other 0s true
	// retention "orders=7days": duration "7days": want a number of days (7d), a Go duration (36h) or 0
}

// Append with a done callback lets the group commit of a record run while
// the caller does its own work (here, what would be the create call), then
// waits for it.
func ExampleOutbox_Append() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "outbox-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	ob, err := parquetbox.Open(ctx, parquetbox.Config{Root: dir})
	if err != nil {
		panic(err)
	}
	defer ob.Close()

	id, _ := naming.NewDispatch("run1", "extract", naming.Attempt(1))
	rec := outbox.RecordOf(id)
	rec.Queue, rec.Status = "projects/acme/locations/us-central1/queues/extract", outbox.StatusPending
	kept := make(chan error, 1)
	if err := ob.Append(ctx, rec, func(err error) { kept <- err }); err != nil { // refused at once: closed, unavailable, invalid record
		panic(err)
	}
	fmt.Println("creating the task while the record is committed")
	if err := <-kept; err != nil {
		panic(err)
	}
	latest, _, _ := ob.Latest(ctx, outbox.TableDispatch, id.String())
	fmt.Println(latest.Status)
	// Output:
	// creating the task while the record is committed
	// pending
}
