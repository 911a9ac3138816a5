// Command example is the worker of docs/worker.md and the README, kept
// here so it compiles with the repository (a test checks the page shows
// this file as it is).
package main

import (
	"context"
	"database/sql"
	"log"
	"net/http"
	"os"

	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/ctdispatch/ctdispatch/cloudtasks/worker"
)

func main() {
	db, err := sql.Open("pgx", os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	inbox, err := worker.NewSQLInbox(db, worker.SQLConfig{}) // table: ctdispatch worker migrate
	if err != nil {
		log.Fatal(err)
	}
	w, err := worker.New(context.Background(), &worker.Config{
		Audiences:       []string{"https://worker.example.com/tasks"},         // the tasks' OIDC audience
		ServiceAccounts: []string{"tasks@my-project.iam.gserviceaccount.com"}, // the tasks' OIDC service account
		Inbox:           inbox,
	}, func(ctx context.Context, d *worker.Delivery) error {
		// Writes through d.Tx() commit with the key's done mark, or not at all.
		_, err := d.Tx().ExecContext(ctx, `INSERT INTO exports (run_id, step, body) VALUES ($1, $2, $3)`,
			d.ID.RunID(), d.ID.TaskKey(), d.Body)
		return err
	})
	if err != nil {
		log.Fatal(err)
	}
	http.Handle("/tasks", w)
	log.Fatal(http.ListenAndServe(":8080", nil))
}
