package parquetbox

import (
	"container/heap"
	"context"
	"errors"
	"io"
	"time"

	"github.com/ctdispatch/ctdispatch/outbox"

	"github.com/ctdispatch/ctdispatch/outbox/internal/pqtable"
)

// recordStream yields records in (ID, oldest state first) order.
type recordStream interface {
	// next returns the next record, or io.EOF.
	next() (outbox.Record, error)
}

// sliceStream serves records held in memory (logs, unsorted files) after
// sorting them.
type sliceStream struct {
	recs []outbox.Record
	i    int
}

func newSliceStream(recs []outbox.Record) *sliceStream {
	sortRecords(recs)
	return &sliceStream{recs: recs}
}

func (s *sliceStream) next() (outbox.Record, error) {
	if s.i >= len(s.recs) {
		return outbox.Record{}, io.EOF
	}
	s.i++
	return s.recs[s.i-1], nil
}

// fileStream reads a sorted Parquet file row group by row group, for a
// merge: its records are normalized but for TaskName, which no merge
// writes or counts (a string built per row was a tenth of a fold's
// garbage).
type fileStream struct {
	f  *pqFile
	rr *pqtable.RowReader
}

func newFileStream(f *pqFile, count func(int)) *fileStream {
	return &fileStream{f: f, rr: f.NewRowReader(count)}
}

func (s *fileStream) next() (outbox.Record, error) {
	r, err := s.rr.Next()
	if err != nil {
		if errors.Is(err, io.EOF) {
			return outbox.Record{}, err
		}
		return outbox.Record{}, fileError(s.f.path, "reading rows", err)
	}
	// What Normalize does but TaskName: times from tableschema.FromMicros are whole
	// microseconds in UTC already.
	rec := s.f.record(&r)
	if rec.Table == outbox.TableDispatch {
		rec.Kind, rec.DueAt = "dispatch", time.Time{}
	}
	return rec, nil
}

func (s *fileStream) close() { s.rr.Close() }

// mergeHeap merges streams by ID, then by state age.
type mergeHeap []*mergeItem

type mergeItem struct {
	rec outbox.Record
	src recordStream
}

func (h mergeHeap) Len() int { return len(h) }
func (h mergeHeap) Less(i, j int) bool {
	if h[i].rec.ID != h[j].rec.ID {
		return h[i].rec.ID < h[j].rec.ID
	}
	return outbox.Newer(&h[j].rec, &h[i].rec)
}
func (h mergeHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *mergeHeap) Push(x any)   { *h = append(*h, x.(*mergeItem)) }
func (h *mergeHeap) Pop() any {
	old := *h
	it := old[len(old)-1]
	*h = old[:len(old)-1]
	return it
}

// mergeLatest merges sorted streams and calls fn once per ID, in ID
// order, with what a reader must still find of it: its latest state as
// outbox.NewestOf picks it, followed, when the ID's newest version was
// written blind by processors that disagree, by the other records of that
// version, so the conflict reads the same after compaction. It holds one
// record per stream, and the states of one ID, in memory. fn must not
// keep latest: it is reused for the next ID.
func mergeLatest(ctx context.Context, streams []recordStream, fn func(latest []outbox.Record) error) error {
	h := make(mergeHeap, 0, len(streams))
	for _, s := range streams {
		r, err := s.next()
		if errors.Is(err, io.EOF) {
			continue
		}
		if err != nil {
			return err
		}
		h = append(h, &mergeItem{rec: r, src: s})
	}
	heap.Init(&h)
	var group, keep []outbox.Record // reused from ID to ID
	flush := func() error {
		if len(group) == 0 {
			return nil
		}
		keep = latestOf(group, keep[:0])
		group = group[:0]
		return fn(keep)
	}
	for n := 0; h.Len() > 0; n++ {
		if n%4096 == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		it := h[0]
		r := it.rec
		if len(group) > 0 && r.ID != group[0].ID {
			if err := flush(); err != nil {
				return err
			}
		}
		group = append(group, r)
		nr, err := it.src.next()
		switch {
		case errors.Is(err, io.EOF):
			heap.Pop(&h)
		case err != nil:
			return err
		default:
			it.rec = nr
			heap.Fix(&h, 0)
		}
	}
	return flush()
}

// latestOf appends to keep what compaction keeps of one ID's states: the
// answer of outbox.NewestOf first, then the other records of a conflict it
// reports.
func latestOf(recs, keep []outbox.Record) []outbox.Record {
	newest, _, err := outbox.NewestOf(recs)
	keep = append(keep, newest)
	var cw *outbox.ConcurrentWritesError
	if errors.As(err, &cw) {
		for _, r := range cw.Records {
			if r.ProcessorUUID != newest.ProcessorUUID || r.Status != newest.Status {
				keep = append(keep, r)
			}
		}
	}
	return keep
}
