package parquetbox

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"

	"github.com/ctdispatch/ctdispatch/outbox"
	"github.com/ctdispatch/ctdispatch/outbox/internal/bucket"
)

type convJob struct {
	seg  *segment
	done chan error
}

// writeSegmentParquet writes a segment's records as one Parquet file per
// table, partition and bucket,
// <table>/created_date=<day>/b<k>of<n>-<processor>-<seq>.parquet (without
// the bucket prefix when Config.Buckets is 1).
// Writing the same segment twice produces the same files, so a crash
// between this and the segment's removal is harmless. The records are
// sorted through pointers, leaving the segment's own order (which readers
// may be scanning) untouched.
func (o *Outbox) writeSegmentParquet(ctx context.Context, processor string, seq uint64, chunks [][]outbox.Record) error {
	type part struct {
		t    outbox.Table
		name string
	}
	groups := map[part][]*outbox.Record{}
	var order []part
	for _, c := range chunks {
		for i := range c {
			r := &c[i]
			if r.Table.Validate() != nil {
				continue
			}
			p := part{r.Table, partitionOf(r)}
			if n := o.opts.Buckets; n > 1 {
				p.name += "/" + bucket.Name(bucket.Of(r.ID, n), n) + "-"
			} else {
				p.name += "/"
			}
			if _, ok := groups[p]; !ok {
				order = append(order, p)
			}
			groups[p] = append(groups[p], r)
		}
	}
	sort.Slice(order, func(i, j int) bool {
		if order[i].t != order[j].t {
			return order[i].t < order[j].t
		}
		return order[i].name < order[j].name
	})
	published := len(order) > 0 && o.published(ctx)
	commits := map[outbox.Table]*commitView{}
	for _, p := range order {
		rs := groups[p]
		sortRecordPtrs(rs)
		name := fmt.Sprintf("%s%s-%016d.parquet", p.name, processor, seq)
		if published {
			c, ok := commits[p.t]
			if !ok {
				var err error
				if c, err = loadCommits(ctx, o.store, p.t, o.files[p.t].currentCommits()); err != nil {
					return fmt.Errorf("outbox: read commits of %s: %w", o.store.where(p.t, ""), err)
				}
				commits[p.t] = c
			}
			if err := o.writeOnce(ctx, p.t, name, rs, c); err != nil {
				return err
			}
			continue
		}
		w, err := o.store.create(ctx, p.t, name)
		if err != nil {
			return fmt.Errorf("outbox: create %s: %w", o.store.where(p.t, name), err)
		}
		if err := writeRecords(w, p.t, rs); err != nil {
			return fmt.Errorf("outbox: write %s: %w", o.store.where(p.t, name), err)
		}
		o.files[p.t].invalidate()
	}
	return nil
}

// writeOnce writes a run's file of published tables (see PublicationKey),
// where a snapshot may name the file written the first time: a file of
// that name already there (a segment converted again after a crash, an
// exporter's batch written again after it took the batch over) is
// checked to hold the run's rows and kept, never written over; one a
// compaction folded in (by commits, the table's as read before) is not
// written again, as its rows are in the compaction's outputs.
func (o *Outbox) writeOnce(ctx context.Context, t outbox.Table, name string, recs []*outbox.Record, commits *commitView) error {
	if c := commits.unit(unitOf(name)); c != nil && c.consumed[name] {
		o.log.Info("outbox: a run's file a compaction folded in is not written again", "path", o.store.where(t, name))
		return nil
	}
	w, err := o.store.createNew(ctx, t, name)
	if err == nil {
		err = writeRecords(w, t, recs)
	}
	o.files[t].invalidate()
	if errors.Is(err, errExists) {
		return o.checkWritten(ctx, t, name, len(recs))
	}
	if err != nil {
		return fmt.Errorf("outbox: write %s: %w", o.store.where(t, name), err)
	}
	return nil
}

// checkWritten checks that the file a run would have written, found
// already there, holds as many rows as the run: the same source and
// sequence number always name the same records.
func (o *Outbox) checkWritten(ctx context.Context, t outbox.Table, name string, rows int) error {
	where := o.store.where(t, name)
	ra, size, err := o.store.open(ctx, t, name)
	if err != nil {
		return fmt.Errorf("outbox: check %s, written before: %w", where, err)
	}
	p, err := openParquet(where, t, ra, size)
	if err != nil {
		ra.Close()
		return fmt.Errorf("outbox: %s is there but unreadable, and a published file is never written over: %w", where, err)
	}
	defer p.close()
	if n := p.NumRows(); n != int64(rows) {
		return fmt.Errorf("outbox: %s is there with %d rows where its run has %d: a published file is never written over, and a source's sequence number names one set of records", where, n, rows)
	}
	o.log.Info("outbox: a run's file was there already; kept as it is", "path", where)
	return nil
}

// runConverter turns sealed segments into Parquet files, in order. While
// a conversion fails (a full disk), it keeps retrying with backoff until
// Close, and every Flush waiting meanwhile, or arriving, is answered at once
// with the failure: the records are durable in the log and readable from
// memory, and a Flush must not wait for space to return. A segment left
// unconverted at Close is replayed on the next Open.
func (o *Outbox) runConverter() {
	defer close(o.convDone)
	var queue []convJob
	var lastErr error // a failure no Flush has heard of yet
	for {
		if len(queue) == 0 {
			job, ok := <-o.conv
			if !ok {
				return
			}
			queue = append(queue, job)
		}
		job := queue[0]
		queue = queue[1:]
		if job.seg != nil {
			if err := o.convertAnswering(job.seg, &job, &queue); err != nil {
				lastErr = err
			}
		}
		if job.done != nil {
			job.done <- lastErr
			lastErr = nil
		}
	}
}

// convertAnswering converts seg, retrying with backoff while it fails
// until Close. Each failure is told at once to job's Flush and to those
// of the queued jobs (which are then done with), and to the jobs that
// arrive meanwhile, which join the queue. It returns the last error when
// Close ends the retries.
func (o *Outbox) convertAnswering(seg *segment, job *convJob, queue *[]convJob) error {
	err := o.convert(seg)
	if err == nil {
		return nil
	}
	answer := func(j *convJob) {
		if j.done != nil {
			j.done <- fmt.Errorf("outbox: the log is durable but not yet in Parquet (retrying): %w", err)
			j.done = nil
		}
	}
	var b healBackoff
	for err != nil {
		answer(job)
		for i := range *queue {
			answer(&(*queue)[i])
		}
		select {
		case <-o.clock.After(b.pause()):
			err = o.convert(seg)
		case j, ok := <-o.conv:
			if ok {
				*queue = append(*queue, j)
			}
		case <-o.quit:
			return err
		}
	}
	return nil
}

func (o *Outbox) convert(seg *segment) error {
	if err := o.writeSegmentParquet(context.Background(), o.processor, seg.seq, seg.records.snapshot()); err != nil {
		o.log.Error("outbox: convert log segment; it stays and is replayed on the next Open", "path", seg.path, "err", err)
		return err
	}
	if err := os.Remove(seg.path); err != nil {
		o.log.Warn("outbox: remove converted log segment", "path", seg.path, "err", err)
	}
	if err := syncDir(o.walDir); err != nil {
		o.log.Warn("outbox: sync log directory", "path", o.walDir, "err", err)
	}
	o.mu.Lock()
	for i, s := range o.sealed {
		if s == seg {
			o.sealed = append(o.sealed[:i], o.sealed[i+1:]...)
			break
		}
	}
	o.mu.Unlock()
	return nil
}
