package outbox

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Retention says how long terminal records of each queue are kept after
// their last update. Keys are queue IDs (the last element of the queue
// resource name) or full queue resource names; "*" applies to every other
// queue. Queues without an entry keep their records forever. Non-terminal
// (pending) records are never dropped.
type Retention map[string]time.Duration

// ParseRetention parses "queue=7d,other=30d,*=90d". A duration is a number
// of days ("7d"), a Go duration ("36h") or "0" (drop terminal records at
// the next compaction).
func ParseRetention(s string) (Retention, error) {
	r := Retention{}
	if strings.TrimSpace(s) == "" {
		return r, nil
	}
	for _, part := range strings.Split(s, ",") {
		queue, dur, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok || queue == "" {
			return nil, fmt.Errorf("retention %q: want queue=duration, for example orders=7d", part)
		}
		d, err := parseDays(dur)
		if err != nil {
			return nil, fmt.Errorf("retention %q: %w", part, err)
		}
		if _, dup := r[queue]; dup {
			return nil, fmt.Errorf("retention %q: queue %q given twice", part, queue)
		}
		r[queue] = d
	}
	return r, nil
}

func parseDays(s string) (time.Duration, error) {
	bad := fmt.Errorf("duration %q: want a number of days (7d), a Go duration (36h) or 0", s)
	switch {
	case s == "0":
		return 0, nil
	case strings.HasSuffix(s, "d"):
		n, err := strconv.ParseUint(strings.TrimSuffix(s, "d"), 10, 16)
		if err != nil {
			return 0, bad
		}
		return time.Duration(n) * 24 * time.Hour, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return 0, bad
	}
	return d, nil
}

// For returns the retention of a queue and whether it has one.
func (r Retention) For(queue string) (time.Duration, bool) {
	if d, ok := r[queue]; ok {
		return d, true
	}
	if i := strings.LastIndexByte(queue, '/'); i >= 0 {
		if d, ok := r[queue[i+1:]]; ok {
			return d, true
		}
	}
	d, ok := r["*"]
	return d, ok
}

// String formats the retention as ParseRetention reads it.
func (r Retention) String() string {
	keys := make([]string, 0, len(r))
	for k := range r {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + r[k].String()
	}
	return strings.Join(parts, ",")
}

// CompactOptions configures Compact.
type CompactOptions struct {
	// Tables to compact. Defaults to every table.
	Tables []Table
	// Retention drops terminal records older than their queue's retention.
	// Defaults to keeping everything.
	Retention Retention
	// Progress, if set, is called as rows are read, with the rows read so
	// far and the total of the table being compacted.
	Progress func(t Table, done, total int64)
}

// CompactStats reports what Compact did, per table.
type CompactStats struct {
	// Tables holds one entry per table compacted, in order.
	Tables []TableCompaction
}

// TableCompaction reports the compaction of one table.
type TableCompaction struct {
	// Table is the table.
	Table Table
	// FilesIn and FilesOut count Parquet files before and after.
	FilesIn, FilesOut int
	// RowsIn counts rows read; RowsOut rows written (one per ID kept).
	RowsIn, RowsOut int64
	// Dropped counts IDs removed by retention.
	Dropped int64
	// BytesIn and BytesOut are the sizes of the files read and written.
	BytesIn, BytesOut int64
	// Output is the path of the file written ("" if nothing was left).
	Output string
	// ForeignRows counts rows left out of the output because this system
	// cannot have written them (see ErrForeignRecord).
	ForeignRows int64
	// Kept lists the inputs left in place because they hold foreign rows:
	// compaction never deletes what it did not fold in.
	Kept []string
	// Skipped lists damaged or foreign files left out.
	Skipped []*FileError
}

// Compact merges the Parquet files of each table into one file sorted by
// ID with only the latest state of each ID, dropping terminal records past
// their queue's retention. It takes a snapshot of the files present when
// it starts, writes its output atomically, and only then removes the
// inputs: appends continue meanwhile, and an interrupted compaction leaves
// the inputs (and at worst a duplicate of their data, folded on read and at
// the next compaction).
func (o *Outbox) Compact(ctx context.Context, opts CompactOptions) (CompactStats, error) {
	if err := o.checkOpen(); err != nil {
		return CompactStats{}, err
	}
	tables := opts.Tables
	if len(tables) == 0 {
		tables = Tables
	}
	var stats CompactStats
	for _, t := range tables {
		if err := t.validate(); err != nil {
			return stats, err
		}
		st, err := o.compactTable(ctx, t, opts)
		stats.Tables = append(stats.Tables, st)
		if err != nil {
			return stats, err
		}
	}
	return stats, nil
}

func (o *Outbox) compactTable(ctx context.Context, t Table, opts CompactOptions) (TableCompaction, error) {
	st := TableCompaction{Table: t}
	fs := o.files[t]
	o.store.cleanTemps(ctx, t, o.clock.Now().Add(-time.Hour))
	fs.invalidate() // compact what is there now, not a cached view
	files, err := fs.acquire(ctx)
	if err != nil {
		return st, err
	}
	defer fs.release(files)
	st.Skipped = fs.damaged()
	st.FilesIn = len(files)
	if len(files) == 0 || (len(files) == 1 && len(opts.Retention) == 0 && isCompacted(files[0])) {
		st.FilesOut = st.FilesIn
		return st, nil
	}
	var total, done int64
	for _, f := range files {
		total += f.pf.NumRows()
		st.BytesIn += f.size
	}
	count := func(n int) {
		done += int64(n)
		if opts.Progress != nil {
			opts.Progress(t, done, total)
		}
	}
	var streams []recordStream
	var unsorted []Record
	keep := map[*openFile]bool{}
	for _, f := range files {
		if f.ours {
			fst := newFileStream(f.pqFile, count)
			defer fst.close()
			streams = append(streams, trustedStream{fst, func(*Record) { st.ForeignRows++; keep[f] = true }})
			continue
		}
		// Another writer's file has no promised order: sort it in memory.
		err := f.scan(func(r Record) error {
			if !r.trusted() {
				st.ForeignRows++
				keep[f] = true
				return nil
			}
			unsorted = append(unsorted, r)
			return nil
		})
		if err != nil {
			return st, err
		}
		count(int(f.pf.NumRows()))
	}
	if len(unsorted) > 0 {
		streams = append(streams, newSliceStream(unsorted))
	}

	now := o.clock.Now()
	name := fmt.Sprintf("compacted-%d-%s.parquet", now.UnixMicro(), randomHex(4))
	out := o.store.where(t, name)
	sw, err := o.store.create(ctx, t, name)
	if err != nil {
		return st, fmt.Errorf("outbox: create %s: %w", out, err)
	}
	af := &countingWriter{storeWriter: sw}
	l := flushLayout
	if total >= bestCodecMinRows {
		l = compactLayout
	}
	rw := newRowWriter(af, t, l)
	err = mergeLatest(ctx, streams, func(r Record) error {
		if r.Status.Terminal() {
			if keep, ok := opts.Retention.For(r.Queue); ok && !r.UpdatedAt.After(now.Add(-keep)) {
				st.Dropped++
				return nil
			}
		}
		st.RowsOut++
		return rw.write(&r)
	})
	st.RowsIn = done
	if err == nil {
		err = rw.close()
	}
	if err != nil {
		af.abort()
		return st, fmt.Errorf("outbox: compact %s: %w", t, err)
	}
	if st.RowsOut == 0 {
		af.abort()
	} else {
		if err := af.commit(); err != nil {
			return st, fmt.Errorf("outbox: compact %s: %w", t, err)
		}
		st.Output = out
		st.FilesOut = 1
		st.BytesOut = af.n
	}
	fs.invalidate()
	for _, f := range files {
		if keep[f] {
			st.Kept = append(st.Kept, f.path)
			o.log.Warn("outbox: compaction left a file with foreign rows in place", "path", f.path)
			continue
		}
		if err := o.store.remove(ctx, t, f.name); err != nil {
			return st, fmt.Errorf("outbox: remove compacted input %s: %w", f.path, err)
		}
	}
	if err := o.store.sync(t); err != nil {
		return st, fmt.Errorf("outbox: sync %s: %w", o.store.where(t, ""), err)
	}
	return st, nil
}

// isCompacted reports whether a file is already the output of a compaction.
func isCompacted(f *openFile) bool {
	return f.ours && strings.HasPrefix(f.name, "compacted-")
}

// countingWriter counts the bytes written through it.
type countingWriter struct {
	storeWriter
	n int64
}

func (w *countingWriter) Write(p []byte) (int, error) {
	n, err := w.storeWriter.Write(p)
	w.n += int64(n)
	return n, err
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
