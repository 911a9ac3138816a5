package parquetbox

import (
	"path"
	"strings"
	"time"

	"github.com/ctdispatch/ctdispatch/outbox"
)

// Tables are partitioned the way Hive, DuckDB, BigQuery, Spark and Trino
// read them: <table>/created_date=YYYY-MM-DD/<file>.parquet, by the UTC day
// an ID was first recorded (its created_at, which never changes), so every
// state of an ID lands in one partition and engines prune by date. Files
// directly under <table>/ are the flat layout of earlier versions: read
// like any other, and moved into partitions by the next compaction.
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

// splitName splits a file name within a table into its partition ("" for
// the flat layout) and base name. ok is false for anything else.
func splitName(name string) (partition, base string, ok bool) {
	dir, base := path.Split(name)
	dir = strings.TrimSuffix(dir, "/")
	if dir != "" && !isPartitionDir(dir) {
		return "", "", false
	}
	return dir, base, isDataFile(base)
}
