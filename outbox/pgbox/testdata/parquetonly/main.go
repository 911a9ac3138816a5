// Command parquetonly is a program that dispatches over the Parquet store
// only, for the test that checks it does not link the PostgreSQL driver.
package main

import (
	"context"
	"log"

	"github.com/ctdispatch/ctdispatch/cloudtasks"
	"github.com/ctdispatch/ctdispatch/outbox/parquetbox"
)

func main() {
	ctx := context.Background()
	box, err := parquetbox.Open(ctx, parquetbox.Config{Root: "outbox"})
	if err != nil {
		log.Fatal(err)
	}
	defer box.Close()
	d, err := cloudtasks.NewDispatcher(ctx, box, &cloudtasks.Config{Project: "p", Location: "l", Queue: "q"})
	if err != nil {
		log.Fatal(err)
	}
	defer d.Close(ctx)
}
