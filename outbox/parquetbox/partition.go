package parquetbox

import (
	"errors"
	"fmt"
	"io/fs"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/ctdispatch/ctdispatch/outbox"
	"github.com/ctdispatch/ctdispatch/outbox/internal/bucket"
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

// maxBuckets bounds Config.Buckets: each bucket is a file per converted
// log segment and day.
const maxBuckets = 256

// unitName is a lease unit within a table: the partition and, for a
// bucketed file, "/b<k>of<n>".
type unitName = string

// splitBucket parses the bucket prefix of a file's base name: k of n and
// the rest of the name. ok is false for a name without one.
func splitBucket(base string) (k, n int, rest string, ok bool) {
	s, ok := strings.CutPrefix(base, bucket.Prefix)
	if !ok {
		return 0, 0, base, false
	}
	ks, s, ok1 := strings.Cut(s, "of")
	ns, rest, ok2 := strings.Cut(s, "-")
	if !ok1 || !ok2 {
		return 0, 0, base, false
	}
	k, err1 := strconv.Atoi(ks)
	n, err2 := strconv.Atoi(ns)
	if err1 != nil || err2 != nil || n < 2 || n > maxBuckets || k < 0 || k >= n || ks != strconv.Itoa(k) || ns != strconv.Itoa(n) {
		return 0, 0, base, false
	}
	return k, n, rest, true
}

// unitOf names the lease unit of a file within a table (see splitName):
// its partition, followed by "/b<k>of<n>" when the file is bucketed.
func unitOf(name string) unitName {
	part, base, _ := splitName(name)
	if k, n, _, ok := splitBucket(base); ok {
		return part + "/" + bucket.Name(k, n)
	}
	return part
}

// unitPartition returns the partition of a unit.
func unitPartition(u unitName) string {
	p, _, _ := strings.Cut(u, "/")
	return p
}

// unitBucket returns the file name prefix of a unit's outputs ("" for an
// unbucketed unit).
func unitBucket(u unitName) string {
	_, b, ok := strings.Cut(u, "/")
	if !ok {
		return ""
	}
	return b + "-"
}

// mayHold reports whether a file may hold rows of the ID id: a file
// without a bucket may hold any.
func mayHold(name, id string) bool {
	_, base, _ := splitName(name)
	k, n, _, ok := splitBucket(base)
	return !ok || bucket.Of(id, n) == k
}
