package lakehouse

import (
	"context"
	"time"

	"github.com/ctdispatch/ctdispatch/outbox"
)

// liveFile is a data file the store's readers treat as live.
type liveFile struct {
	// name is relative to the table's directory; location is the URL
	// Iceberg names it by.
	name, location string
	day            time.Time
	size           int64
}

// source is what publication needs of an outbox root.
type source interface {
	// location is the URL of the outbox root: "file:///abs/dir" or a
	// bucket's URL with its prefix ("gs://bucket/prefix").
	location() (string, error)
	// objects are the root's objects under _iceberg/.
	objects() objects
	// liveFiles lists exactly the files the store's readers treat as
	// live in table t, sorted by name.
	liveFiles(ctx context.Context, t outbox.Table) ([]liveFile, error)
	// replacedFiles lists the files of table t the store's readers read
	// until a compaction folded them, still on storage.
	replacedFiles(ctx context.Context, t outbox.Table) ([]liveFile, error)
	// removeReplaced removes files of table t that are no longer live,
	// refusing any that is.
	removeReplaced(ctx context.Context, t outbox.Table, names []string) error
}
