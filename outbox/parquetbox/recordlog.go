package parquetbox

import "github.com/ctdispatch/ctdispatch/outbox"

// recordChunk is how many records a segment keeps in one allocation.
const recordChunk = 1024

// recordLog holds the records of one log segment in memory, in the order
// they were written, until the segment is converted to Parquet. Records
// go into fixed-size chunks that are filled in place and never moved: a
// single slice grown by doubling copied every record again at each step
// and touched twice the memory, and the writer goroutine paid for it while
// every Append waited on it.
type recordLog struct {
	chunks [][]outbox.Record
	n      int
}

// add appends r.
func (l *recordLog) add(r outbox.Record) {
	last := len(l.chunks) - 1
	if last < 0 || len(l.chunks[last]) == cap(l.chunks[last]) {
		l.chunks = append(l.chunks, make([]outbox.Record, 0, recordChunk))
		last++
	}
	l.chunks[last] = append(l.chunks[last], r)
	l.n++
}

// len returns the number of records.
func (l *recordLog) len() int { return l.n }

// snapshot returns the records so far as views that later adds leave
// unchanged: an add writes past the end of every view.
func (l *recordLog) snapshot() [][]outbox.Record {
	out := make([][]outbox.Record, len(l.chunks))
	for i, c := range l.chunks {
		out[i] = c[:len(c):len(c)]
	}
	return out
}
