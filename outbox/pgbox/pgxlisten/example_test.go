package pgxlisten_test

import (
	"context"
	"database/sql"
	"fmt"
	"log"

	"github.com/ctdispatch/ctdispatch/cloudtasks"
	"github.com/ctdispatch/ctdispatch/cloudtasks/emulator"
	"github.com/ctdispatch/ctdispatch/internal/testtools/pgtest"
	"github.com/ctdispatch/ctdispatch/naming"
	"github.com/ctdispatch/ctdispatch/outbox/pgbox"
	"github.com/ctdispatch/ctdispatch/outbox/pgbox/pgxlisten"
)

// A relay in one dispatcher (a process of its own in production) creates
// the task of a transaction another dispatcher recorded as soon as that
// transaction commits: the commit's notification wakes it, and another
// notification wakes the WaitOutcome that waits for the outcome. Each
// dispatcher has its own listener; RelayInterval (1s with one) is the
// poll that finds what a lost notification did not announce.
func ExampleNew() {
	ctx := context.Background()
	const queue = "projects/my-project/locations/europe-west1/queues/shipping"
	emu, err := emulator.New(emulator.Config{DisableDelivery: true, Queues: []emulator.QueueConfig{{Name: queue}}})
	if err != nil {
		log.Fatal(err)
	}
	defer emu.Close()
	dsn, drop, err := pgtest.Database() // in production: os.Getenv("DATABASE_URL")
	if err != nil {
		log.Fatal(err)
	}
	defer drop()
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	if err := pgbox.Migrate(ctx, db, pgbox.Config{}); err != nil {
		log.Fatal(err)
	}

	open := func(noRelay bool) *cloudtasks.Dispatcher {
		box, err := pgbox.New(db, pgbox.Config{})
		if err != nil {
			log.Fatal(err)
		}
		l, err := pgxlisten.New(pgxlisten.Config{ConnString: dsn})
		if err != nil {
			log.Fatal(err)
		}
		d, err := cloudtasks.NewDispatcher(ctx, box, &cloudtasks.Config{Project: "my-project", Location: "europe-west1",
			Queue: "shipping", EmulatorAddr: emu.Addr(), Listener: l, NoRelay: noRelay})
		if err != nil {
			log.Fatal(err)
		}
		return d
	}
	relay := open(false)
	defer relay.Close(ctx)
	app := open(true)
	defer app.Close(ctx)

	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer tx.Rollback()
	res, err := app.DispatchTx(ctx, pgbox.SQLTx(tx), cloudtasks.DispatchRequest{
		RunID: "o-1001", TaskKey: "ship", Identity: naming.Attempt(1),
		Task: cloudtasks.Task{URL: "https://shipping.example/ship"},
	})
	if err != nil {
		log.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		log.Fatal(err)
	}
	rec, err := app.WaitOutcome(ctx, res.ID)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("after commit:", rec.Status, len(emu.Tasks(queue)), "task")
	// Output:
	// after commit: created 1 task
}
