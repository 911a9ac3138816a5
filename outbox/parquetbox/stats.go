package parquetbox

import (
	"context"
	"slices"

	"github.com/ctdispatch/ctdispatch/outbox"
)

// TableStats describes one table: its files and the current state of its
// IDs.
type TableStats struct {
	// Table is the table.
	Table outbox.Table
	// Files and Bytes count the readable Parquet files and their size.
	Files int
	Bytes int64
	// Rows counts Parquet rows (every recorded state not yet folded).
	Rows int64
	// LogRecords counts records still only in write-ahead logs.
	LogRecords int64
	// IDs counts distinct IDs.
	IDs int64
	// ByStatus, ByQueue, ByKind and ByProcessor count IDs by their latest
	// state's status, queue, kind and writing processor.
	ByStatus, ByQueue, ByKind, ByProcessor map[string]int64
	// ForeignRows counts rows left out because this system cannot have
	// written them (see outbox.ErrForeignRecord); they are in no other
	// count but Rows.
	ForeignRows int64
	// Skipped lists damaged or foreign files left out, each with its path
	// and the reason.
	Skipped []*FileError
}

// Absent reports whether the outbox holds nothing of the table: no files,
// no log records, nothing skipped. A dispatcher's outbox has no
// deliveries (workers record them in outboxes of their own), and
// summaries leave such a table out.
func (s *TableStats) Absent() bool {
	return s.Files == 0 && s.LogRecords == 0 && s.Rows == 0 && len(s.Skipped) == 0
}

// Stats summarizes every table. It reads everything, streaming: memory
// stays proportional to the number of files and unconverted log records.
func (o *Outbox) Stats(ctx context.Context) ([]TableStats, error) {
	if err := o.checkOpen(); err != nil {
		return nil, err
	}
	var out []TableStats
	for _, t := range outbox.Tables() {
		st, err := o.tableStats(ctx, t)
		if err != nil {
			return out, err
		}
		out = append(out, st)
	}
	return out, nil
}

func (o *Outbox) tableStats(ctx context.Context, t outbox.Table) (TableStats, error) {
	st := TableStats{Table: t, ByStatus: map[string]int64{}, ByQueue: map[string]int64{},
		ByKind: map[string]int64{}, ByProcessor: map[string]int64{}}
	live, err := o.liveRecords()
	if err != nil {
		return st, err
	}
	mem := slices.Concat(live...)
	kept := mem[:0]
	for _, r := range mem {
		if r.Table == t {
			kept = append(kept, r)
		}
	}
	mem = kept
	st.LogRecords = int64(len(mem))

	fs := o.files[t]
	fs.invalidate() // a full report lists afresh
	files, err := fs.acquire(ctx)
	if err != nil {
		return st, err
	}
	defer fs.release(files)
	var streams []recordStream
	foreign := func(*outbox.Record) { st.ForeignRows++ }
	for _, f := range files {
		st.Files++
		st.Bytes += f.size
		st.Rows += f.NumRows()
		if f.Ours() {
			fst := newFileStream(f.pqFile, nil)
			defer fst.close()
			streams = append(streams, trustedStream{fst, foreign})
			continue
		}
		if err := f.scan(func(r outbox.Record) error { mem = append(mem, r); return nil }); err != nil {
			return st, err
		}
	}
	streams = append(streams, trustedStream{newSliceStream(mem), foreign})
	err = mergeLatest(ctx, streams, func(latest []outbox.Record) error {
		r := latest[0]
		st.IDs++
		st.ByStatus[string(r.Status)]++
		st.ByQueue[r.Queue]++
		st.ByKind[r.Kind]++
		st.ByProcessor[r.ProcessorUUID]++
		return nil
	})
	st.Skipped = fs.damaged()
	return st, err
}
