package parquetbox

import (
	"context"
	"time"
	"unsafe"

	"github.com/ctdispatch/ctdispatch/outbox"

	"github.com/googleapis/gax-go/v2"
	"github.com/jonboulle/clockwork"
)

type request struct {
	rec   outbox.Record
	flush bool
	done  chan error
	then  func(error) // instead of done: the caller of Append
}

// answer gives req its result.
func (req *request) answer(err error) {
	if req.then != nil {
		req.then(err)
		return
	}
	req.done <- err
}

// Append checks r, fills it in (see outbox.Record.Prepare) and hands it
// to the writer, whose group commit writes it with the records that wait
// beside it. done, when not nil, is called once r is durable per
// Config.Durability, or with the error that kept it from the log; it runs
// on the writer goroutine after the group commit, so it must return
// quickly and must not call the outbox. The error returned instead is
// immediate: the outbox is closed, read-only or unavailable, r is invalid,
// or ctx ended before r was queued (then r is never written). A
// dispatcher queues its pending record this way, makes its create call,
// and finds the commit done when it looks, without a goroutine of its own.
func (o *Outbox) Append(ctx context.Context, r outbox.Record, done func(error)) error {
	if done == nil {
		done = ignoreResult
	}
	_, err := o.enqueue(ctx, r, done)
	return err
}

// ignoreResult is the done of an Append whose caller does not wait.
func ignoreResult(error) {}

// enqueue checks r and hands it to the writer, which answers through then
// when it is set.
func (o *Outbox) enqueue(ctx context.Context, r outbox.Record, then func(error)) (*request, error) {
	if o.opts.ReadOnly {
		return nil, ErrReadOnly
	}
	if err := r.Prepare(o.processor, o.clock.Now()); err != nil {
		return nil, err
	}
	if err := o.checkVersion(ctx, &r); err != nil {
		return nil, err
	}
	if ue := o.unavail.Load(); ue != nil {
		return nil, ue
	}
	req := &request{rec: r, then: then}
	if then == nil {
		req.done = make(chan error, 1)
	}
	if err := o.send(ctx, req); err != nil {
		return nil, err
	}
	return req, nil
}

// wait returns the answer to req, or ErrClosed if the writer stopped
// without taking it.
func (o *Outbox) wait(ctx context.Context, req *request) error {
	select {
	case err := <-req.done:
		return err
	case <-ctx.Done():
		// The record may still be written; the caller just stops waiting.
		return ctx.Err()
	case <-o.writerDone:
		select {
		case err := <-req.done:
			return err
		default:
			return ErrClosed
		}
	}
}

func (o *Outbox) send(ctx context.Context, req *request) error {
	o.sending.RLock()
	defer o.sending.RUnlock()
	if o.closed.Load() {
		return ErrClosed
	}
	// A select between a free slot and a done context picks at random when
	// both are ready: check the context first, so a cancelled call never
	// enqueues.
	if err := ctx.Err(); err != nil {
		return err
	}
	select {
	case o.reqs <- req:
		return nil
	case <-o.quit:
		return ErrClosed
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Flush rolls the current log segment into Parquet files and waits until
// every segment written so far is in Parquet. A conversion that fails (a
// full disk) is reported at once rather than waited out: the records are
// durable in the log, readable meanwhile, and the conversion goes on
// retrying in the background.
func (o *Outbox) Flush(ctx context.Context) error {
	if o.opts.ReadOnly {
		return ErrReadOnly
	}
	req := &request{flush: true, done: make(chan error, 1)}
	if err := o.send(ctx, req); err != nil {
		return err
	}
	return o.wait(ctx, req)
}

// runWriter is the single goroutine that writes the log: it takes every
// request waiting, writes them with one write and one sync, then answers
// them all.
func (o *Outbox) runWriter() {
	defer close(o.writerDone)
	var syncC <-chan time.Time
	if o.opts.Durability == Interval {
		syncTicker := o.clock.NewTicker(o.opts.FlushInterval)
		defer syncTicker.Stop()
		syncC = syncTicker.Chan()
	}
	batch := make([]*request, 0, 256)
	var heal healBackoff
	var retry clockwork.Timer
	var retryC <-chan time.Time
	defer o.stopPublishTimer()
	for {
		if o.unavail.Load() != nil && retry == nil {
			retry = o.clock.NewTimer(heal.pause())
			retryC = retry.Chan()
		}
		var publishC <-chan time.Time
		if o.publish != nil {
			publishC = o.publish.Chan()
		}
		select {
		case <-retryC:
			retry, retryC = nil, nil
			if o.heal() == nil {
				heal = healBackoff{}
			}
		case req := <-o.reqs:
			batch = append(batch[:0], req)
		drain:
			for len(batch) < cap(batch) {
				select {
				case r := <-o.reqs:
					batch = append(batch, r)
				default:
					break drain
				}
			}
			o.commit(batch)
		case <-syncC:
			o.syncDirty()
		case <-publishC:
			o.publish = nil
			o.publishNow()
		case <-o.quit:
			if retry != nil {
				retry.Stop()
			}
			for {
				select {
				case r := <-o.reqs:
					o.commit([]*request{r})
					continue
				default:
				}
				break
			}
			if err := o.seal(nil); err != nil {
				o.closeErr = err
			}
			return
		}
	}
}

// commit writes a batch of requests in order; a flush request seals the
// segment after the appends before it.
func (o *Outbox) commit(batch []*request) {
	start := 0
	for i, req := range batch {
		if !req.flush {
			continue
		}
		o.writeAppends(batch[start:i])
		start = i + 1
		if err := o.seal(req.done); err != nil {
			req.answer(err)
		}
	}
	o.writeAppends(batch[start:])
}

func (o *Outbox) writeAppends(reqs []*request) {
	if len(reqs) == 0 {
		return
	}
	if ue := o.unavail.Load(); ue != nil {
		for _, r := range reqs { // queued before the log failed
			r.answer(ue)
		}
		return
	}
	if err := o.ensureSegment(); err != nil {
		ue := o.markUnavailable(o.walDir, err)
		for _, r := range reqs {
			r.answer(ue)
		}
		return
	}
	o.buf = o.buf[:0]
	local := map[recKey]outbox.Record{}
	kept := reqs[:0:0]
	// Only this goroutine writes own, so reading it needs no lock.
	for _, req := range reqs {
		k := recKey{req.rec.Table, req.rec.ID}
		prev, ok := local[k]
		if !ok {
			if p, found := o.own[k]; found {
				prev, ok = p, true
			}
		}
		if ok && req.rec.Conflicts(&prev) {
			// This process wrote the version first (another goroutine's
			// call on the same ID): the record is refused, not written.
			req.answer(&outbox.VersionConflictError{Table: req.rec.Table, ID: req.rec.ID, Version: req.rec.Version, Current: prev})
			continue
		}
		kept = append(kept, req)
		if ok {
			if !req.rec.UpdatedAt.After(prev.UpdatedAt) {
				req.rec.UpdatedAt = prev.UpdatedAt.Add(time.Microsecond)
			}
			// An ID keeps the created_at of its first state, and with it
			// its partition.
			req.rec.CreatedAt = prev.CreatedAt
		}
		local[k] = req.rec
		o.buf = appendFrame(o.buf, &req.rec)
	}
	reqs = kept
	if len(reqs) == 0 {
		return
	}
	seg := o.cur
	_, err := seg.f.Write(o.buf)
	if err == nil && o.opts.Durability == Durable {
		err = seg.f.Sync()
	}
	if err != nil {
		// The segment's tail is now unknown: stop writing to it (readers
		// and recovery stop at the first bad frame; its records so far are
		// in memory and go to Parquet), and refuse appends until a fresh
		// segment can be written.
		err = o.markUnavailable(seg.path, err)
		o.seal(nil)
	} else {
		seg.size += int64(len(o.buf))
		seg.dirty = o.opts.Durability == Interval
		o.mu.Lock()
		for _, req := range reqs {
			k := recKey{req.rec.Table, req.rec.ID}
			if old, ok := o.own[k]; ok {
				o.ownBytes -= indexEntryBytes(&old)
			}
			o.own[k] = req.rec
			o.ownBytes += indexEntryBytes(&req.rec)
			seg.records.add(req.rec)
		}
		o.trimIndexLocked()
		o.mu.Unlock()
		if o.publish == nil {
			o.publish = o.clock.NewTimer(o.opts.PublishInterval)
		}
	}
	for _, req := range reqs {
		req.answer(err)
	}
	if err == nil && seg.size >= o.opts.SegmentMaxBytes {
		o.seal(nil)
	}
}

// indexEntryBytes estimates what one entry of the own index costs: the
// record and key, their strings, and the map's share per entry.
func indexEntryBytes(r *outbox.Record) int64 {
	const fixed = int64(unsafe.Sizeof(outbox.Record{}) + unsafe.Sizeof(recKey{}) + 32)
	return fixed + int64(2*len(r.ID)+len(r.CloudTaskID)+len(r.TaskName)+len(r.RunID)+len(r.TaskKey)+len(r.Attempt)+len(r.ErrorCode)+len(r.PayloadSHA256))
}

// trimIndexLocked keeps the own index within IndexLimit and IndexBytes by
// dropping IDs whose records are already in Parquet files.
func (o *Outbox) trimIndexLocked() {
	if len(o.own) <= o.opts.IndexLimit && o.ownBytes <= max(o.opts.IndexBytes, o.trimAt) {
		return
	}
	keep := map[recKey]outbox.Record{}
	add := func(l *recordLog) {
		for _, c := range l.chunks {
			for i := range c {
				k := recKey{c[i].Table, c[i].ID}
				keep[k] = o.own[k]
			}
		}
	}
	for _, s := range o.sealed {
		add(&s.records)
	}
	if o.cur != nil {
		add(&o.cur.records)
	}
	o.own = keep
	o.ownBytes = 0
	for _, r := range keep {
		o.ownBytes += indexEntryBytes(&r)
	}
	o.trimAt = 2 * o.ownBytes
}

// healBackoff spaces the retries of an unwritable log or a failed
// conversion: soon at first (a disk freed by an operator), the bound
// doubling up to 10s. Each pause is drawn at random up to the bound, as
// gax.Backoff draws it, which does no harm here and spreads processes that
// share a disk. The zero value starts afresh.
type healBackoff struct{ bo gax.Backoff }

// pause returns the wait before the next try.
func (b *healBackoff) pause() time.Duration {
	if b.bo.Initial == 0 {
		b.bo = gax.Backoff{Initial: 100 * time.Millisecond, Max: 10 * time.Second, Multiplier: 2}
	}
	return b.bo.Pause()
}

// stopPublishTimer disarms the publish timer (the segment it was armed
// for is being sealed).
func (o *Outbox) stopPublishTimer() {
	if o.publish != nil {
		o.publish.Stop()
		o.publish = nil
	}
}

// publishNow rolls the current segment into Parquet if it holds records
// (seal syncs it first in Interval mode).
func (o *Outbox) publishNow() {
	if seg := o.cur; seg != nil && seg.records.len() > 0 {
		o.seal(nil)
	}
}
