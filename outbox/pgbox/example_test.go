package pgbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"log"
	"os"

	"github.com/ctdispatch/ctdispatch/cloudtasks"
	"github.com/ctdispatch/ctdispatch/cloudtasks/emulator"
	"github.com/ctdispatch/ctdispatch/internal/testtools/pgtest"
	"github.com/ctdispatch/ctdispatch/naming"
	"github.com/ctdispatch/ctdispatch/outbox"
	"github.com/ctdispatch/ctdispatch/outbox/parquetbox"
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

	box, err := pgbox.New(db, pgbox.Config{})
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

// The program links the two stores: the exporter writes the database's
// records to the Parquet tables that Open opens with package
// outbox/parquetbox, so pgbox itself links no Parquet code.
func ExampleExporter() {
	ctx := context.Background()
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
	box, err := pgbox.New(db, pgbox.Config{})
	if err != nil {
		log.Fatal(err)
	}
	if err := box.Migrate(ctx); err != nil {
		log.Fatal(err)
	}
	id, err := naming.NewDispatch("o-1001", "ship", naming.Attempt(1))
	if err != nil {
		log.Fatal(err)
	}
	rec := outbox.RecordOf(id)
	rec.Queue, rec.Status, rec.Version = "projects/p/locations/l/queues/shipping", outbox.StatusCreated, 1
	if err := outbox.AppendAndWait(ctx, box, rec); err != nil {
		log.Fatal(err)
	}

	root, err := os.MkdirTemp("", "export") // or a bucket URL, gs://… with outbox/cloudblob
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(root)
	e, err := pgbox.NewExporter(box, pgbox.ExportConfig{Root: root,
		Open: func(ctx context.Context, root string) (outbox.RunWriter, error) {
			files, err := parquetbox.Open(ctx, parquetbox.Config{Root: root, ReadOnly: true})
			if err != nil {
				return nil, err
			}
			return files, nil
		}})
	if err != nil {
		log.Fatal(err)
	}
	defer e.Close()
	st, err := e.ExportOnce(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("batches", st.Batches, "rows", st.Rows)

	files, err := parquetbox.Open(ctx, parquetbox.Config{Root: root, ReadOnly: true})
	if err != nil {
		log.Fatal(err)
	}
	defer files.Close()
	got, ok, err := files.Latest(ctx, outbox.TableDispatch, id.String())
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("in Parquet:", ok, got.Status)
	// Output:
	// batches [1] rows [1 0 0]
	// in Parquet: true created
}
