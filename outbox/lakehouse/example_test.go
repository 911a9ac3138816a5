package lakehouse_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/google/uuid"
	"github.com/jonboulle/clockwork"

	"github.com/ctdispatch/ctdispatch/naming"
	"github.com/ctdispatch/ctdispatch/outbox"
	"github.com/ctdispatch/ctdispatch/outbox/lakehouse"
	"github.com/ctdispatch/ctdispatch/outbox/parquetbox"
)

// Publishing a directory root's outbox as Iceberg tables with the
// file-based catalog (no server): the first publication appends the
// files, a compaction becomes one replace, and the grace later frees the
// files the compaction folded.
func ExamplePublish() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "lakehouse-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	clock := clockwork.NewFakeClockAt(time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC))
	ob, err := parquetbox.Open(ctx, parquetbox.Config{Root: dir, ProcessorUUID: uuid.MustParse("019ad000-0000-7000-8000-000000000001"), Clock: clock})
	if err != nil {
		log.Fatal(err)
	}
	defer ob.Close()
	for _, run := range []string{"r1", "r2"} { // two flushes: two files
		for i := range 3 {
			id, _ := naming.NewDispatch(run, "extract", naming.Attempt(uint64(i+1)))
			rec := outbox.Record{Table: outbox.TableDispatch, ID: id.String(), CloudTaskID: id.CloudTaskID(),
				Queue: "projects/p/locations/l/queues/q", RunID: run, TaskKey: id.TaskKey(), Attempt: id.Attempt(),
				Status: outbox.StatusCreated, CreateCalls: 1}
			rec.Follow(nil, clock.Now())
			if err := outbox.AppendAndWait(ctx, ob, rec); err != nil {
				log.Fatal(err)
			}
		}
		if err := ob.Flush(ctx); err != nil {
			log.Fatal(err)
		}
	}

	cfg := lakehouse.Config{Clock: clock} // the file-based catalog, under <root>/_iceberg/
	if err := lakehouse.Enable(ctx, ob, cfg); err != nil {
		log.Fatal(err)
	}
	show := func(stage string) {
		rep, err := lakehouse.Publish(ctx, ob, cfg)
		if err != nil {
			log.Fatal(err)
		}
		tp := rep.Tables[0]
		fmt.Printf("%s: %s %s: %d files (+%d -%d), %d snapshots expired, %d files removed\n",
			stage, tp.Table, tp.Action, tp.Files, tp.Added, tp.Removed, tp.Expired, len(tp.Deleted))
	}
	show("first")
	show("again")
	if err := ob.Compact(ctx, parquetbox.CompactConfig{Full: true}); err != nil {
		log.Fatal(err)
	}
	show("compacted")
	clock.Advance(lakehouse.DefaultGrace + time.Minute)
	show("an hour later")

	recs, err := lakehouse.ReadAsOf(ctx, ob, cfg, outbox.TableDispatch, time.Now())
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("read through Iceberg:", len(recs), "dispatches")
	// Output:
	// first: dispatch_outbox appended: 2 files (+2 -0), 0 snapshots expired, 0 files removed
	// again: dispatch_outbox current: 2 files (+0 -0), 0 snapshots expired, 0 files removed
	// compacted: dispatch_outbox replaced: 2 files (+2 -2), 0 snapshots expired, 0 files removed
	// an hour later: dispatch_outbox current: 2 files (+0 -0), 1 snapshots expired, 2 files removed
	// read through Iceberg: 6 dispatches
}
