package parquetbox

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"sort"
	"time"

	"github.com/ctdispatch/ctdispatch/outbox"

	"github.com/ctdispatch/ctdispatch/outbox/internal/pqtable"
	"github.com/ctdispatch/ctdispatch/outbox/internal/tableschema"
)

// summaryFields are the columns a Summary lookup reads: those its records
// keep, and those deciding whether a row is trusted (a trace ID is valid
// only with its span ID) and which state is the latest.
var summaryFields = []field{fieldID, fieldCloudTaskID, fieldStatus, tableschema.FieldErrorCode,
	tableschema.FieldCreateCalls, fieldUpdatedAt, tableschema.FieldDueAt, fieldProcessor, tableschema.FieldVersion,
	tableschema.FieldTraceID, tableschema.FieldSpanID}

func queryField(q outbox.Query) (field, string) {
	switch {
	case q.ID != "":
		return fieldID, q.ID
	case q.CloudTaskID != "":
		return fieldCloudTaskID, q.CloudTaskID
	}
	return fieldRunID, q.RunID
}

func (o *Outbox) checkOpen() error {
	if o.closed.Load() {
		return ErrClosed
	}
	return nil
}

// Latest returns the current state of an ID: the newest (see
// outbox.Newer) of this process's records, other processes' live logs and
// every Parquet file, skipping files by bloom filter held in memory. The
// view of other processes is at most RefreshInterval old (on a bucket,
// also no fresher than their last publication). ok is false when the ID
// was never recorded. When the highest Version was written by two
// processes with different statuses, the newest by Newer is returned with
// a *outbox.ConcurrentWritesError.
func (o *Outbox) Latest(ctx context.Context, t outbox.Table, id string) (outbox.Record, bool, error) {
	if err := t.Validate(); err != nil {
		return outbox.Record{}, false, err
	}
	if err := o.checkOpen(); err != nil {
		return outbox.Record{}, false, err
	}
	var recs []outbox.Record
	o.mu.RLock()
	r, ok := o.own[recKey{t, id}]
	o.mu.RUnlock()
	if ok {
		recs = append(recs, r)
	}
	others, err := o.others(ctx, t, id)
	if err != nil {
		return outbox.Record{}, false, err
	}
	return outbox.NewestOf(append(recs, others...))
}

var _ outbox.FreshReader = (*Outbox)(nil)

// LatestFresh is Latest after looking again at other processes' logs and
// at the table's files, whatever RefreshInterval allows Latest to reuse.
// On a directory the look reads what changed since the last one: each
// followed log segment's new frames (a stat of each tells), and a listing
// of the logs or of the table only when a stat of the directories the
// last listing read shows an entry added, removed or renamed since (a
// segment, a publication, a commit; see stamp.go). unseen is 0 when the root is a directory that also holds this process's
// log (LogDir unset or the Root): processes sharing it read each other's
// logs, so every kept record is read. Otherwise (a bucket, or a log kept
// elsewhere) others' records are read once they are published, and unseen
// is Config.PublishInterval: the longest a record of a process with the
// same options waits in its log.
func (o *Outbox) LatestFresh(ctx context.Context, t outbox.Table, id string) (outbox.Record, bool, time.Duration, error) {
	if err := t.Validate(); err != nil {
		return outbox.Record{}, false, 0, err
	}
	o.files[t].expire()
	o.tails.expire()
	r, ok, err := o.Latest(ctx, t, id)
	return r, ok, o.unseen(), err
}

// unseen is LatestFresh's bound on how long another process's kept
// record may stay unreadable here.
func (o *Outbox) unseen() time.Duration {
	if _, local := o.store.(localStore); local && (o.opts.LogDir == "" || filepath.Clean(o.opts.LogDir) == filepath.Clean(o.opts.Root)) {
		return 0
	}
	return o.opts.PublishInterval
}

// others returns the records of an ID that this process's memory may not
// hold: other processors' live logs and every Parquet file (its own
// converted records among them).
func (o *Outbox) others(ctx context.Context, t outbox.Table, id string) ([]outbox.Record, error) {
	var recs []outbox.Record
	err := o.search(ctx, t, outbox.Query{ID: id}, false, func(rs []outbox.Record, _ bool) {
		for i := range rs {
			if rs[i].Table == t && rs[i].ID == id {
				recs = append(recs, rs[i])
			}
		}
	})
	return recs, err
}

// checkVersion refuses r, before it is queued, when another processor's
// log or a Parquet file holds a record of its ID with a Version at least
// r's. Within this process the writer checks again against what it wrote
// (writeAppends), which no other check can see yet. Two processes that
// write the same version within each other's refresh interval both pass;
// Latest reports that as blind concurrent writes.
func (o *Outbox) checkVersion(ctx context.Context, r *outbox.Record) error {
	if r.Version == 0 {
		return nil
	}
	others, err := o.others(ctx, r.Table, r.ID)
	if err != nil {
		return fmt.Errorf("outbox: check version of %s: %w", r.ID, err)
	}
	cur, found, _ := outbox.NewestOf(others) // blind writes: the newest still refuses a lower version
	if found && r.Conflicts(&cur) {
		return &outbox.VersionConflictError{Table: r.Table, ID: r.ID, Version: r.Version, Current: cur}
	}
	return nil
}

// Lookup returns the records matching q from every source, sorted by
// table, ID and time. Without q.History only the latest state of each ID is
// returned.
func (o *Outbox) Lookup(ctx context.Context, q outbox.Query) ([]outbox.Record, error) {
	if err := q.Validate(); err != nil {
		return nil, err
	}
	if err := o.checkOpen(); err != nil {
		return nil, err
	}
	every := outbox.Tables()
	tables := every[:]
	if q.Table != "" {
		tables = []outbox.Table{q.Table}
	}
	var all []outbox.Record
	for _, t := range tables {
		err := o.search(ctx, t, q, true, func(recs []outbox.Record, fresh bool) {
			if all == nil && fresh {
				all = recs // a lookup by run returns thousands: spare a copy
				return
			}
			all = append(all, recs...)
		})
		if err != nil {
			return nil, err
		}
	}
	all = outbox.Arrange(all, q.History)
	if q.Summary {
		for i := range all {
			all[i] = all[i].Summary()
		}
	}
	return all, nil
}

// search feeds fn every record of table t matching q: this process's
// unconverted records (when own), other processors' logs, and the Parquet
// files found through their indexes. fn gets the records of a file in one
// call, and fresh reports that the slice is the caller's to keep; other
// slices are shared and must be copied.
func (o *Outbox) search(ctx context.Context, t outbox.Table, q outbox.Query, own bool, fn func(recs []outbox.Record, fresh bool)) error {
	fs := o.files[t]
	// Log records are handed on after the files are read, whose listing
	// loads the commits that may hide some of them (see commitDir).
	var live []*outbox.Record
	if own {
		for _, recs := range o.ownRecords() {
			for i := range recs {
				if recs[i].Table == t && q.Match(&recs[i]) {
					live = append(live, &recs[i])
				}
			}
		}
	}
	// Logs before files: a segment converted in between is then seen in
	// its Parquet file, never missed.
	var tails [][]outbox.Record
	var err error
	if q.ID != "" {
		var recs []outbox.Record
		recs, err = o.tails.of(t, q.ID)
		tails = [][]outbox.Record{recs}
	} else {
		tails, err = o.tails.records()
	}
	if err != nil {
		return fmt.Errorf("outbox: read logs: %w", err)
	}
	for _, recs := range tails {
		for i := range recs {
			if recs[i].Table == t && q.Match(&recs[i]) && recs[i].Trusted() {
				live = append(live, &recs[i])
			}
		}
	}
	defer func() {
		for _, r := range live {
			if !fs.hidesLive(r) {
				fn(slices.Clip([]outbox.Record{*r}), true)
			}
		}
	}()
	fld, val := queryField(q)
	var fields []field
	if q.Summary {
		fields = summaryFields
	}
	acquire := func(ctx context.Context) ([]*openFile, map[string]*admission, error) {
		if fld == fieldID || fld == fieldCloudTaskID {
			return fs.acquireFor(ctx, fld, val)
		}
		files, err := fs.acquire(ctx)
		return files, nil, err
	}
	return o.eachFileOf(ctx, t, acquire, func(f *openFile, a *admission) error {
		recs, err := f.find(fld, val, pqtable.FindOptions{
			CacheBloom: fs.cacheBloom,
			Admit:      a.admit(f.NumRowGroups()),
			// A compacted file holds one state per ID, and a cloud_task_id
			// names one ID: the first match is the only one. Not in the
			// deliveries table, where one task's deliveries are as many
			// IDs with one cloud_task_id.
			Unique: fld == fieldCloudTaskID && t != outbox.TableDeliveries && isCompacted(f),
			Fields: fields,
		})
		hides := fs.hider(f.name)
		recs = slices.DeleteFunc(recs, func(r outbox.Record) bool { return !r.Trusted() || (hides != nil && hides(&r)) })
		if len(recs) > 0 {
			fn(recs, true)
		}
		return err
	})
}

// eachFileOf calls read for every file acquire returns, each with its
// admission (the row groups to read; nil: all). A file that turns out
// damaged is reported and skipped; if one vanished (another process
// compacted it away after a cached listing), the files are acquired again
// and read once more, so its data is found in the file that replaced it.
// Records read twice are harmless to every caller (they fold or
// deduplicate).
func (o *Outbox) eachFileOf(ctx context.Context, t outbox.Table, acquire func(context.Context) ([]*openFile, map[string]*admission, error), read func(*openFile, *admission) error) error {
	fs := o.files[t]
	for attempt := 0; ; attempt++ {
		files, admits, err := acquire(ctx)
		if err != nil {
			return err
		}
		vanished := false
		for _, f := range files {
			if err := ctx.Err(); err != nil {
				fs.release(files)
				return err
			}
			if err := read(f, admits[f.name]); err != nil && fs.markBad(f, err) {
				vanished = true
			}
		}
		fs.release(files)
		if !vanished || attempt == 2 {
			return nil
		}
	}
}

// liveRecords returns the records not yet in Parquet files: this process's
// log segments, as a snapshot that later appends do not change, and the live
// logs of other processors.
func (o *Outbox) liveRecords() ([][]outbox.Record, error) {
	live := o.ownRecords()
	tails, err := o.tails.records()
	if err != nil {
		return nil, fmt.Errorf("outbox: read logs: %w", err)
	}
	return append(live, tails...), nil
}

// ownRecords returns this process's records not yet in Parquet files (its
// sealed and current log segments), as views that later appends leave
// unchanged.
func (o *Outbox) ownRecords() [][]outbox.Record {
	o.mu.RLock()
	defer o.mu.RUnlock()
	var out [][]outbox.Record
	for _, s := range o.sealed {
		out = append(out, s.records.snapshot()...)
	}
	if o.cur != nil {
		out = append(out, o.cur.records.snapshot()...)
	}
	return out
}

// Damaged returns the files currently skipped because they are damaged or
// foreign, each with its path and the reason.
func (o *Outbox) Damaged() []*FileError {
	var out []*FileError
	for _, t := range outbox.Tables() {
		out = append(out, o.files[t].damaged()...)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out
}
