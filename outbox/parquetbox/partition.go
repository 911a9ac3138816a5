package parquetbox

import (
	"errors"
	"fmt"
	"io/fs"
	"path"
	"strings"
	"time"

	"github.com/ctdispatch/ctdispatch/outbox"
)

// Tables are partitioned the way Hive, DuckDB, BigQuery, Spark and Trino
// read them: <table>/created_date=YYYY-MM-DD/<file>.parquet, by the UTC day
// an ID was first recorded (its created_at, which never changes), so every
// state of an ID lands in one partition and engines prune by date. Any
// other entry directly under <table>/ (a file, a directory with another
// name or an impossible date, a symbolic link, a partition the process
// cannot read) is outside the layout: skipped and reported, never read.
const partitionKey = "created_date="

// partitionOf names the partition of a record.
func partitionOf(r *outbox.Record) string {
	return partitionKey + r.CreatedAt.UTC().Format(time.DateOnly)
}

// isPartitionDir reports whether a directory name is a partition.
func isPartitionDir(name string) bool {
	d, ok := strings.CutPrefix(name, partitionKey)
	if !ok {
		return false
	}
	_, err := time.Parse(time.DateOnly, d)
	return err == nil
}

// splitName splits a file name within a table into its partition and
// base name. ok is false for anything else.
func splitName(name string) (partition, base string, ok bool) {
	dir, base := path.Split(name)
	dir = strings.TrimSuffix(dir, "/")
	if !isPartitionDir(dir) {
		return "", "", false
	}
	return dir, base, isDataFile(base)
}

// Why entries under a table directory are outside the layout.
const (
	reasonNotPartition   = "not a partition directory; want created_date=YYYY-MM-DD with a real date"
	reasonSymlink        = "a symbolic link; partitions are read only as real directories"
	reasonNotInPartition = "not in a partition directory; table files are read only under created_date=YYYY-MM-DD/"
	reasonUnreadable     = "cannot read the partition directory"
)

// outsideLayout reports an entry under a table directory, named where (a
// directory's ending in "/"), that is skipped for reason (and cause, if
// any, which the reason then ends with: "…: permission denied").
func outsideLayout(where, reason string, dir bool, cause error) *FileError {
	err := ErrOutsideLayout
	if cause != nil {
		err = fmt.Errorf("%w: %w", ErrOutsideLayout, cause)
		var pe *fs.PathError
		if errors.As(cause, &pe) {
			cause = pe.Err
		}
		reason += ": " + cause.Error()
	}
	return &FileError{Path: where, Reason: reason, Dir: dir, Err: err}
}
