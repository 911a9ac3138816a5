package pgbox_test

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
)

// An order and the task that ships it commit together: DispatchTx records
// the task in the transaction that inserts the order, and the dispatcher's
// relay creates it once that transaction has committed. Had the
// transaction rolled back, no task would ever be created.
func ExampleSQLTx() {
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
	if _, err := db.ExecContext(ctx, `CREATE TABLE orders (id text PRIMARY KEY)`); err != nil {
		log.Fatal(err)
	}

	box, err := pgbox.New(db, pgbox.Options{})
	if err != nil {
		log.Fatal(err)
	}
	if err := box.Migrate(ctx); err != nil {
		log.Fatal(err)
	}
	// Its relay takes the intents of Config.Queue (see Config.RelayQueues).
	d, err := cloudtasks.NewDispatcher(ctx, box, &cloudtasks.Config{
		Project: "my-project", Location: "europe-west1", Queue: "shipping", EmulatorAddr: emu.Addr()})
	if err != nil {
		log.Fatal(err)
	}
	defer d.Close(ctx)

	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `INSERT INTO orders (id) VALUES ('o-1001')`); err != nil {
		log.Fatal(err)
	}
	res, err := d.DispatchTx(ctx, pgbox.SQLTx(tx), cloudtasks.DispatchRequest{
		RunID: "o-1001", TaskKey: "ship", Identity: naming.Attempt(1),
		Task: cloudtasks.Task{URL: "https://shipping.example/ship", Body: []byte(`{"order":"o-1001"}`)},
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("in the transaction:", res.Outcome, len(emu.Tasks(queue)), "tasks")
	if err := tx.Commit(); err != nil {
		log.Fatal(err)
	}

	rec, err := d.WaitOutcome(ctx, res.ID)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("after commit:", rec.Status, len(emu.Tasks(queue)), "task")
	// Output:
	// in the transaction: queued 0 tasks
	// after commit: created 1 task
}
