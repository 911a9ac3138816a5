package parquetbox

import (
	"context"
	"errors"
	"slices"
	"sort"
	"time"

	"github.com/ctdispatch/ctdispatch/outbox"
)

// Pending returns the records of table t whose latest state is pending and
// was written more than olderThan ago, by any processor, oldest first. The
// dispatcher's recovery re-drives them.
//
// It reads only the columns that decide (ID, status, updated_at,
// processor_uuid) in two passes (old pending rows, then the latest state of
// just those IDs), so memory follows the candidates, not the table, and
// then reads whole rows only for the records it returns.
func (o *Outbox) Pending(ctx context.Context, t outbox.Table, olderThan time.Duration) ([]outbox.Record, error) {
	if err := t.Validate(); err != nil {
		return nil, err
	}
	if err := o.checkOpen(); err != nil {
		return nil, err
	}
	cutoff := o.clock.Now().Add(-olderThan)
	for attempt := 0; ; attempt++ {
		out, vanished, err := o.pending(ctx, t, cutoff)
		if !vanished || attempt == 2 {
			return out, err
		}
	}
}

// pendingCand holds the states seen of a candidate ID, from memory (whole
// records, ref nil) or from files (the deciding fields, and refs say where
// each row is). Once every state is read, rec is the latest, chosen by
// outbox.NewestOf as Latest chooses it, and ref is where its row is.
type pendingCand struct {
	seen []outbox.Record
	refs []*rowRef
	rec  outbox.Record
	ref  *rowRef
	set  bool
}

// decide picks the candidate's latest state among those seen.
func (c *pendingCand) decide() {
	newest, ok, _ := outbox.NewestOf(c.seen) // a conflict still answers with the newest by Newer
	if !ok {
		return
	}
	for i := range c.seen {
		r := &c.seen[i]
		if r.Version == newest.Version && r.Status == newest.Status && r.ProcessorUUID == newest.ProcessorUUID && r.UpdatedAt.Equal(newest.UpdatedAt) {
			c.rec, c.ref, c.set = *r, c.refs[i], true
			return
		}
	}
}

type rowRef struct {
	f   *openFile
	rg  int
	row int64
}

// decidingFields are the columns Pending reads from every row. version is
// among them because it orders an ID's states before updated_at does.
// cloud_task_id is among them so that a foreign row (see distrust) can
// neither become a candidate nor hide a real pending state.
// queue is among them for the retention a unit's commit keeps (see
// commitDir), under which an old pending row may be hidden.
var decidingFields = []field{fieldID, fieldCloudTaskID, fieldStatus, fieldUpdatedAt, fieldProcessor, fieldQueue, fieldVersion}

func (o *Outbox) pending(ctx context.Context, t outbox.Table, cutoff time.Time) (_ []outbox.Record, vanished bool, _ error) {
	isOld := func(r *outbox.Record) bool {
		return r.Status == outbox.StatusPending && !r.UpdatedAt.After(cutoff) && r.Trusted()
	}
	live, err := o.liveRecords()
	if err != nil {
		return nil, false, err
	}
	fs := o.files[t]
	fs.invalidate()
	files, err := fs.acquire(ctx)
	if err != nil {
		return nil, false, err
	}
	defer fs.release(files)
	mem := slices.DeleteFunc(slices.Concat(live...), func(r outbox.Record) bool { return fs.hidesLive(&r) })
	bad := map[*openFile]bool{}
	scanFiles := func(fn func(f *openFile, rg int, row int64, r *outbox.Record)) error {
		for _, f := range files {
			if bad[f] {
				continue
			}
			hides := fs.hider(f.name)
			err := f.scanProjected(ctx, decidingFields, func(rg int, row int64, r *outbox.Record) {
				if hides == nil || !hides(r) {
					fn(f, rg, row, r)
				}
			})
			if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
				return err
			}
			if err != nil {
				bad[f] = true
				if fs.markBad(f, err) {
					vanished = true
				}
			}
		}
		return nil
	}

	cand := map[string]*pendingCand{}
	for i := range mem {
		if mem[i].Table == t && isOld(&mem[i]) {
			cand[mem[i].ID] = &pendingCand{}
		}
	}
	err = scanFiles(func(_ *openFile, _ int, _ int64, r *outbox.Record) {
		if isOld(r) && cand[r.ID] == nil {
			cand[r.ID] = &pendingCand{}
		}
	})
	if err != nil || vanished || len(cand) == 0 {
		return nil, vanished, err
	}

	consider := func(r *outbox.Record, ref func() *rowRef) {
		c := cand[r.ID]
		if c == nil || !r.Trusted() {
			return
		}
		c.seen = append(c.seen, *r)
		if ref != nil {
			c.refs = append(c.refs, ref())
		} else {
			c.refs = append(c.refs, nil)
		}
	}
	for i := range mem {
		if mem[i].Table == t {
			consider(&mem[i], nil)
		}
	}
	err = scanFiles(func(f *openFile, rg int, row int64, r *outbox.Record) {
		consider(r, func() *rowRef { return &rowRef{f: f, rg: rg, row: row} })
	})
	if err != nil || vanished {
		return nil, vanished, err
	}

	out, vanished := pendingRows(fs, cand, isOld)
	if vanished {
		return nil, true, nil
	}
	outbox.SortPending(out)
	return out, false, nil
}

// pendingRows reads the whole rows of the candidates whose latest state is
// an old pending one (isOld), row group by row group; vanished reports a
// file that went away meanwhile.
func pendingRows(fs *fileSet, cand map[string]*pendingCand, isOld func(*outbox.Record) bool) (_ []outbox.Record, vanished bool) {
	var out []outbox.Record
	byGroup := map[rowRef][]*pendingCand{}
	for _, c := range cand {
		c.decide()
		if !c.set || !isOld(&c.rec) {
			continue
		}
		if c.ref == nil {
			out = append(out, c.rec)
			continue
		}
		k := rowRef{f: c.ref.f, rg: c.ref.rg}
		byGroup[k] = append(byGroup[k], c)
	}
	for k, cs := range byGroup {
		sort.Slice(cs, func(i, j int) bool { return cs[i].ref.row < cs[j].ref.row })
		idx := make([]int64, len(cs))
		for i, c := range cs {
			idx[i] = c.ref.row
		}
		recs, err := k.f.readRows(k.rg, idx)
		if err != nil {
			if fs.markBad(k.f, err) {
				return nil, true
			}
			continue
		}
		out = append(out, recs...)
	}
	return out, false
}
