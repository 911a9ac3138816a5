package outbox

import (
	"errors"
	"sort"
)

// Query selects records for Lookup. Exactly one of ID, CloudTaskID and
// RunID is set.
type Query struct {
	// Table limits the search to one table; empty searches every table.
	Table Table
	// ID selects by internal ID (dispatch_id or timer_id).
	ID string
	// CloudTaskID selects by Cloud Tasks task ID.
	CloudTaskID string
	// RunID selects every record of a run.
	RunID string
	// History returns every recorded state instead of only the latest per
	// ID. History is kept until compaction folds it.
	History bool
	// Summary returns records with only the fields a status view shows:
	// Table, ID, CloudTaskID, Status, ErrorCode, CreateCalls, UpdatedAt,
	// DueAt, ProcessorUUID and TraceID; the others are empty (Delivery
	// and SpanID too). An implementation may then skip reading the others.
	Summary bool
}

// Validate returns an error unless exactly one of ID, CloudTaskID and
// RunID is set and Table is empty or a table.
func (q Query) Validate() error {
	n := 0
	for _, s := range []string{q.ID, q.CloudTaskID, q.RunID} {
		if s != "" {
			n++
		}
	}
	if n != 1 {
		return errors.New("outbox: Query needs exactly one of ID, CloudTaskID, RunID")
	}
	if q.Table != "" {
		return q.Table.Validate()
	}
	return nil
}

// Match reports whether r is selected by q's ID, CloudTaskID or RunID (not
// by its Table).
func (q Query) Match(r *Record) bool {
	switch {
	case q.ID != "":
		return r.ID == q.ID
	case q.CloudTaskID != "":
		return r.CloudTaskID == q.CloudTaskID
	}
	return r.RunID == q.RunID
}

// Summary returns the fields of r a Query with Summary set keeps.
func (r *Record) Summary() Record {
	return Record{Table: r.Table, ID: r.ID, CloudTaskID: r.CloudTaskID, Status: r.Status, ErrorCode: r.ErrorCode,
		CreateCalls: r.CreateCalls, UpdatedAt: r.UpdatedAt, DueAt: r.DueAt, ProcessorUUID: r.ProcessorUUID, TraceID: r.TraceID}
}

// Arrange puts records in the order Lookup returns them (by table, ID,
// then oldest state first), drops exact duplicates (one record seen in two
// places) and, without history, keeps only the latest state of each ID:
// the one NewestOf answers with, so that Lookup, Latest and Pending agree
// on an ID whose newest version two processes wrote blind. It reorders
// recs in place and returns a prefix of it.
func Arrange(recs []Record, history bool) []Record {
	sort.SliceStable(recs, func(i, j int) bool {
		a, b := &recs[i], &recs[j]
		if a.Table != b.Table {
			return a.Table < b.Table
		}
		if a.ID != b.ID {
			return a.ID < b.ID
		}
		return Newer(b, a)
	})
	out := recs[:0]
	for i := range recs {
		r := recs[i]
		if n := len(out); n > 0 {
			last := &out[n-1]
			if last.Table == r.Table && last.ID == r.ID && last.UpdatedAt.Equal(r.UpdatedAt) &&
				last.Status == r.Status && last.ProcessorUUID == r.ProcessorUUID {
				continue
			}
		}
		out = append(out, r)
	}
	if history {
		return out
	}
	latest := out[:0]
	for start := 0; start < len(out); {
		end := start + 1
		for end < len(out) && out[end].Table == out[start].Table && out[end].ID == out[start].ID {
			end++
		}
		newest, _, _ := NewestOf(out[start:end]) // a conflict still answers with the newest by Newer
		latest = append(latest, newest)
		start = end
	}
	return latest
}

// SortPending puts records in the order Pending returns them: oldest
// first, then by ID.
func SortPending(recs []Record) {
	sort.Slice(recs, func(i, j int) bool {
		if !recs[i].UpdatedAt.Equal(recs[j].UpdatedAt) {
			return recs[i].UpdatedAt.Before(recs[j].UpdatedAt)
		}
		return recs[i].ID < recs[j].ID
	})
}
