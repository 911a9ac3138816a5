// Package bucket names the hash buckets an outbox table's rows are split
// into within a partition.
//
// A writer configured with Options.Buckets > 1 splits its rows into hash
// buckets of the ID's task (the ID without its last component:
// dispatch:<run>:<task>), one file per bucket, named
// b<k>of<n>-<name>.parquet. A bucket of a day is the unit a compaction's
// lease covers (see ADR 0011): two compactions share a day by taking
// different buckets, and a lookup by ID opens only the files of the ID's
// bucket (and any file without a bucket). The task, not the whole ID nor
// its cloud_task_id, so that the attempts of a task, which share most
// columns, stay side by side in one file, where zstd finds them: hashing
// the cloud_task_id made the table 45% larger. The bucket is in the file
// name, not a directory level, so the Hive layout DuckDB and BigQuery read
// is unchanged. Files without the prefix form the unit "" of their day.
package bucket

import (
	"fmt"
	"strings"
)

// Prefix starts the name of every bucketed file.
const Prefix = "b"

// Of returns the bucket, of n, of an ID: FNV-1a of the ID up to its last
// ':' (its task), modulo n. A day holds many tasks, so buckets fill evenly.
func Of(id string, n int) int {
	if i := strings.LastIndexByte(id, ':'); i > 0 {
		id = id[:i]
	}
	h := uint32(2166136261)
	for i := 0; i < len(id); i++ {
		h ^= uint32(id[i])
		h *= 16777619
	}
	return int(h % uint32(n))
}

// Name is the file name prefix of bucket k of n, without its dash.
func Name(k, n int) string { return fmt.Sprintf("%s%dof%d", Prefix, k, n) }

// FilePrefix returns the file name prefix under which a writer with
// Options.Buckets set to buckets stores the rows of the ID id (a dispatch
// or timer ID) in a partition ("b3of8-"), or "" when buckets is 1 or
// less. Tools that write table files themselves use it so that lookups
// and compactions treat their files as the outbox's own.
func FilePrefix(id string, buckets int) string {
	if buckets <= 1 {
		return ""
	}
	return Name(Of(id, buckets), buckets) + "-"
}
