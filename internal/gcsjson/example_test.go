package gcsjson_test

import (
	"context"
	"log"

	"gocloud.dev/blob"

	// Registers gs:// with gocloud.dev/blob.
	_ "github.com/ctdispatch/ctdispatch/internal/gcsjson"
)

// A program that imports the package opens gs:// URLs as with any
// gocloud.dev/blob driver; the outbox does exactly this for its Root.
func Example() {
	ctx := context.Background()
	b, err := blob.OpenBucket(ctx, "gs://my-bucket?prefix=outbox/")
	if err != nil {
		log.Fatal(err)
	}
	defer b.Close()
	data, err := b.ReadAll(ctx, "dispatch_outbox/part-1.parquet")
	if err != nil {
		log.Fatal(err)
	}
	log.Printf("%d bytes", len(data))
}
