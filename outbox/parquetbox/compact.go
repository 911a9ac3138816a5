package parquetbox

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/ctdispatch/ctdispatch/outbox"

	"github.com/ctdispatch/ctdispatch/outbox/internal/pqfile"
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
	Tables []outbox.Table
	// Retention drops terminal records older than their queue's retention.
	// Defaults to keeping everything.
	Retention Retention
	// TargetFileBytes is the size past which a partition's output goes on
	// in another file. Defaults to 256 MiB.
	TargetFileBytes int64
	// LeaseTTL is how long a partition's lease lasts unless renewed: how
	// long a crashed compaction keeps others out of its partitions.
	// Defaults to 10m; a compaction renews its lease as it goes.
	LeaseTTL time.Duration
	// Progress, if set, is called as rows are read, with the rows read so
	// far and the total of the partition being compacted.
	Progress func(t outbox.Table, done, total int64)
	// OnPartition, if set, is called when a partition is done (or skipped),
	// with what happened to it.
	OnPartition func(t outbox.Table, p PartitionCompaction)
}

func (c CompactOptions) withDefaults() CompactOptions {
	if len(c.Tables) == 0 {
		all := outbox.Tables()
		c.Tables = all[:]
	}
	if c.TargetFileBytes <= 0 {
		c.TargetFileBytes = 256 << 20
	}
	if c.LeaseTTL <= 0 {
		c.LeaseTTL = 10 * time.Minute
	}
	return c
}

// CompactStats reports what Compact did, per table.
type CompactStats struct {
	// Tables holds one entry per table compacted, in order.
	Tables []TableCompaction
}

// TableCompaction reports the compaction of one table: the sums over its
// partitions, and each partition.
type TableCompaction struct {
	// Table is the table.
	Table outbox.Table
	// FilesIn and FilesOut count Parquet files before and after.
	FilesIn, FilesOut int
	// RowsIn counts rows read; RowsOut rows written (one per ID kept).
	RowsIn, RowsOut int64
	// Dropped counts IDs removed by retention.
	Dropped int64
	// BytesIn and BytesOut are the sizes of the files read and written.
	BytesIn, BytesOut int64
	// Output is the path of the first file written ("" if none was).
	Output string
	// ForeignRows counts rows left out of the output because this system
	// cannot have written them (see ErrForeignRecord).
	ForeignRows int64
	// Kept lists the inputs left in place because they hold foreign rows:
	// compaction never deletes what it did not fold in.
	Kept []string
	// Skipped lists damaged or foreign files left out.
	Skipped []*FileError
	// Partitions reports each partition, in order.
	Partitions []PartitionCompaction
	// Manifest reports the table's manifest, refreshed after the
	// partitions (also when every partition was untouched).
	Manifest ManifestReport
}

// PartitionAction says what compaction did with a partition.
type PartitionAction string

// The actions of PartitionCompaction.
const (
	// PartitionCompacted: its files were merged into sorted files.
	PartitionCompacted PartitionAction = "compacted"
	// PartitionUntouched: compacted already and not written since (and
	// nothing to drop), so not read.
	PartitionUntouched PartitionAction = "untouched"
	// PartitionDropped: every row was past retention; its files were
	// removed without being rewritten.
	PartitionDropped PartitionAction = "dropped"
	// PartitionBusy: another compaction holds its lease; skipped.
	PartitionBusy PartitionAction = "busy"
)

// PartitionCompaction reports one partition of a compaction.
type PartitionCompaction struct {
	// Partition is the partition directory (created_date=2026-11-23).
	Partition string
	// Action says what was done; Reason says why when it was skipped.
	Action PartitionAction
	Reason string
	// FilesIn and FilesOut count files read and written.
	FilesIn, FilesOut int
	// RowsIn, RowsOut, Dropped, ForeignRows, BytesIn and BytesOut are as
	// in TableCompaction.
	RowsIn, RowsOut, Dropped, ForeignRows int64
	BytesIn, BytesOut                     int64
	// Outputs are the paths of the files written.
	Outputs []string
}

// Compact compacts each table partition by partition: each partition
// written since its last compaction is merged into files sorted by ID
// with only the latest state of each ID, of at most about
// TargetFileBytes each; terminal records past their queue's retention are
// dropped, a partition whose rows all are is removed whole, and a partition
// compacted and not written since is not read at all. Each partition is
// done under a lease, so concurrent compactions of one root (on one disk
// or one bucket) never fold the same files twice; a partition another
// compaction holds is reported busy and skipped. Outputs are written
// atomically before the inputs are removed: appends continue meanwhile,
// and an interrupted compaction leaves at worst a duplicate of some data,
// folded on read and at the next compaction.
func (o *Outbox) Compact(ctx context.Context, opts CompactOptions) (CompactStats, error) {
	if err := o.checkOpen(); err != nil {
		return CompactStats{}, err
	}
	opts = opts.withDefaults()
	var stats CompactStats
	for _, t := range opts.Tables {
		if err := t.Validate(); err != nil {
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

// compaction is one table's compaction in progress.
type compaction struct {
	o      *Outbox
	t      outbox.Table
	opts   CompactOptions
	now    time.Time
	holder string
	st     *TableCompaction
}

func (o *Outbox) compactTable(ctx context.Context, t outbox.Table, opts CompactOptions) (TableCompaction, error) {
	st := TableCompaction{Table: t}
	c := &compaction{o: o, t: t, opts: opts, now: o.clock.Now(), holder: o.leaseHolder(), st: &st}
	o.store.cleanTemps(ctx, t, c.now.Add(-time.Hour))
	parts, err := c.listPartitions(ctx)
	if err != nil {
		return st, err
	}
	names := make([]string, 0, len(parts))
	for p := range parts {
		names = append(names, p)
	}
	sort.Strings(names)
	for _, p := range names {
		pc, err := c.run(ctx, p, c.compactPartition)
		c.report(pc)
		if err != nil {
			return st, err
		}
	}
	st.Manifest = c.refreshManifest(ctx)
	st.Skipped = o.files[t].damaged()
	return st, nil
}

// leaseHolder names this process in leases.
func (o *Outbox) leaseHolder() string {
	host, _ := os.Hostname()
	id := o.processor
	if id == "" {
		id = "read-only"
	}
	return fmt.Sprintf("%s (pid %d on %s, %s)", id, os.Getpid(), host, randomHex(4))
}

// listPartitions lists the table's files afresh, by partition.
func (c *compaction) listPartitions(ctx context.Context) (map[string][]storeEntry, error) {
	entries, err := c.o.store.list(ctx, c.t)
	if err != nil {
		return nil, fmt.Errorf("outbox: list %s: %w", c.o.store.where(c.t, ""), err)
	}
	out := map[string][]storeEntry{}
	for _, e := range entries {
		if p, _, ok := splitName(e.name); ok {
			out[p] = append(out[p], e)
		}
	}
	return out, nil
}

func (c *compaction) report(pc PartitionCompaction) {
	st := c.st
	st.FilesIn += pc.FilesIn
	st.RowsIn += pc.RowsIn
	st.Dropped += pc.Dropped
	st.ForeignRows += pc.ForeignRows
	st.BytesIn += pc.BytesIn
	st.FilesOut += pc.FilesOut
	st.RowsOut += pc.RowsOut
	st.BytesOut += pc.BytesOut
	if st.Output == "" && len(pc.Outputs) > 0 {
		st.Output = pc.Outputs[0]
	}
	st.Partitions = append(st.Partitions, pc)
	if c.opts.OnPartition != nil {
		c.opts.OnPartition(c.t, pc)
	}
}

// run does step for one partition under its lease, with the partition's
// files as they are once the lease is held.
func (c *compaction) run(ctx context.Context, part string, step func(context.Context, *lease, []*openFile, *PartitionCompaction) error) (PartitionCompaction, error) {
	pc := PartitionCompaction{Partition: part}
	l, err := acquireLease(ctx, c.o.store, path.Join(leaseDir, string(c.t), part)+".", c.holder, c.o.clock.Now(), c.opts.LeaseTTL)
	var busy *BusyError
	if errors.As(err, &busy) {
		pc.Action, pc.Reason = PartitionBusy, busy.Error()
		return pc, nil
	}
	if err != nil {
		return pc, fmt.Errorf("outbox: lease %s/%s: %w", c.t, part, err)
	}
	defer l.release(context.WithoutCancel(ctx))
	// Listed again under the lease: a compaction that held it before may
	// have replaced these files.
	fs := c.o.files[c.t]
	fs.invalidate()
	all, err := fs.acquire(ctx)
	if err != nil {
		return pc, err
	}
	defer fs.release(all)
	var files []*openFile
	for _, f := range all {
		if p, _, _ := splitName(f.name); p == part {
			files = append(files, f)
		}
	}
	if len(files) == 0 {
		pc.Action, pc.Reason = PartitionUntouched, "no readable files"
		return pc, nil
	}
	return pc, step(ctx, l, files, &pc)
}

// droppable reports whether retention removes r.
func (c *compaction) droppable(r *outbox.Record) bool {
	if !r.Status.Terminal() {
		return false
	}
	keep, ok := c.opts.Retention.For(r.Queue)
	return ok && !r.UpdatedAt.After(c.now.Add(-keep))
}

// compactPartition merges one partition's files, unless nothing changed.
func (c *compaction) compactPartition(ctx context.Context, l *lease, files []*openFile, pc *PartitionCompaction) error {
	compacted := true
	for _, f := range files {
		compacted = compacted && isCompacted(f)
	}
	if len(c.opts.Retention) > 0 {
		all, any, err := c.scanRetention(ctx, files)
		if err != nil {
			return err
		}
		if all {
			return c.dropWhole(ctx, l, files, pc)
		}
		compacted = compacted && !any
	}
	if compacted {
		pc.Action, pc.Reason = PartitionUntouched, "compacted and not written since"
		return nil
	}
	pc.Action = PartitionCompacted
	out := newPartWriters(c, pc)
	return c.fold(ctx, l, files, pc, out, func(r *outbox.Record) string { return pc.Partition })
}

// scanRetention reads the columns retention needs and reports whether
// every row of the files goes, and whether any does.
func (c *compaction) scanRetention(ctx context.Context, files []*openFile) (all, any bool, err error) {
	all = true
	for _, f := range files {
		err := f.scanProjected(ctx, []field{fieldID, fieldCloudTaskID, fieldStatus, fieldQueue, fieldUpdatedAt}, func(_ int, _ int64, r *outbox.Record) {
			if c.droppable(r) && r.Trusted() {
				any = true
			} else {
				all = false
			}
		})
		if err != nil {
			return false, false, err
		}
	}
	return all, any, nil
}

// dropWhole removes a partition whose every row is past retention.
func (c *compaction) dropWhole(ctx context.Context, l *lease, files []*openFile, pc *PartitionCompaction) error {
	pc.Action = PartitionDropped
	for _, f := range files {
		pc.FilesIn++
		pc.BytesIn += f.size
		pc.RowsIn += f.NumRows()
		pc.Dropped += f.NumRows()
	}
	return c.removeInputs(ctx, l, files, nil, pc)
}

// fold merges files into out, routing each ID's latest state to the
// partition route names, and then removes the inputs.
func (c *compaction) fold(ctx context.Context, l *lease, files []*openFile, pc *PartitionCompaction, out *partWriters, route func(*outbox.Record) string) error {
	var total, done int64
	for _, f := range files {
		total += f.NumRows()
		pc.BytesIn += f.size
	}
	pc.FilesIn = len(files)
	if total >= pqfile.BestCodecMinRows {
		out.layout = pqfile.CompactLayout
	}
	count := func(n int) {
		done += int64(n)
		if c.opts.Progress != nil {
			c.opts.Progress(c.t, done, total)
		}
	}
	var streams []recordStream
	var unsorted []outbox.Record
	keep := map[*openFile]bool{}
	for _, f := range files {
		if f.Ours() {
			fst := newFileStream(f.pqFile, count)
			defer fst.close()
			streams = append(streams, trustedStream{fst, func(*outbox.Record) { pc.ForeignRows++; keep[f] = true }})
			continue
		}
		// Another writer's file has no promised order: sort it in memory.
		err := f.scan(func(r outbox.Record) error {
			if !r.Trusted() {
				pc.ForeignRows++
				keep[f] = true
				return nil
			}
			unsorted = append(unsorted, r)
			return nil
		})
		if err != nil {
			return err
		}
		count(int(f.NumRows()))
	}
	if len(unsorted) > 0 {
		streams = append(streams, newSliceStream(unsorted))
	}
	renewed := c.o.clock.Now()
	err := mergeLatest(ctx, streams, func(r outbox.Record) error {
		if c.droppable(&r) {
			pc.Dropped++
			return nil
		}
		if now := c.o.clock.Now(); now.Sub(renewed) > c.opts.LeaseTTL/3 {
			if err := l.renew(ctx, now); err != nil {
				return fmt.Errorf("renew lease: %w", err)
			}
			renewed = now
		}
		pc.RowsOut++
		return out.write(ctx, route(&r), &r)
	})
	pc.RowsIn = done
	if err != nil {
		out.abort()
		return fmt.Errorf("outbox: compact %s/%s: %w", c.t, pc.Partition, err)
	}
	if err := out.close(); err != nil {
		out.abort()
		return fmt.Errorf("outbox: compact %s/%s: %w", c.t, pc.Partition, err)
	}
	return c.removeInputs(ctx, l, files, keep, pc, out)
}

// removeInputs commits the outputs (if any) and removes the inputs, once
// the lease is confirmed still held.
func (c *compaction) removeInputs(ctx context.Context, l *lease, files []*openFile, keep map[*openFile]bool, pc *PartitionCompaction, outs ...*partWriters) error {
	if err := l.check(ctx, c.o.clock.Now()); err != nil {
		for _, out := range outs {
			out.abort()
		}
		return fmt.Errorf("outbox: compact %s/%s: lease lost, nothing changed: %w", c.t, pc.Partition, err)
	}
	for _, out := range outs {
		if err := out.commit(); err != nil {
			return fmt.Errorf("outbox: compact %s/%s: %w", c.t, pc.Partition, err)
		}
	}
	fs := c.o.files[c.t]
	fs.invalidate()
	for _, f := range files {
		if keep[f] {
			c.st.Kept = append(c.st.Kept, f.path)
			c.o.log.Warn("outbox: compaction left a file with foreign rows in place", "path", f.path)
			continue
		}
		if err := c.o.store.remove(ctx, c.t, f.name); err != nil {
			return fmt.Errorf("outbox: remove compacted input %s: %w", f.path, err)
		}
	}
	if err := c.o.store.sync(c.t); err != nil {
		return fmt.Errorf("outbox: sync %s: %w", c.o.store.where(c.t, ""), err)
	}
	if ls, ok := c.o.store.(localStore); ok && pc.Partition != "" && pc.FilesOut == 0 {
		ls.removeEmptyPartition(c.t, pc.Partition)
	}
	return nil
}

// isCompacted reports whether a file is already the output of a compaction.
func isCompacted(f *openFile) bool {
	return f.Ours() && strings.HasPrefix(path.Base(f.name), "compacted-")
}

// partWriters writes a compaction's output: per partition, sorted files
// of about TargetFileBytes each, committed together at the end.
type partWriters struct {
	c      *compaction
	pc     *PartitionCompaction
	prefix string
	layout pqfile.Layout
	open   map[string]*partFile
	done   []*partFile
}

type partFile struct {
	part string
	name string
	cw   *countingWriter
	rw   *rowWriter
}

func newPartWriters(c *compaction, pc *PartitionCompaction) *partWriters {
	return &partWriters{c: c, pc: pc, prefix: "compacted-", layout: pqfile.FlushLayout, open: map[string]*partFile{}}
}

func (w *partWriters) write(ctx context.Context, part string, r *outbox.Record) error {
	f := w.open[part]
	if f != nil && f.cw.n >= w.c.opts.TargetFileBytes {
		if err := f.rw.close(); err != nil {
			return err
		}
		w.done = append(w.done, f)
		f = nil
	}
	if f == nil {
		name := fmt.Sprintf("%s/%s%d-%s.parquet", part, w.prefix, w.c.now.UnixMicro(), randomHex(4))
		sw, err := w.c.o.store.create(ctx, w.c.t, name)
		if err != nil {
			return fmt.Errorf("create %s: %w", w.c.o.store.where(w.c.t, name), err)
		}
		cw := &countingWriter{storeWriter: sw}
		f = &partFile{part: part, name: name, cw: cw, rw: newRowWriter(cw, w.c.t, w.layout)}
		w.open[part] = f
	}
	return f.rw.write(r)
}

// close finishes every file (without committing).
func (w *partWriters) close() error {
	parts := make([]string, 0, len(w.open))
	for p := range w.open {
		parts = append(parts, p)
	}
	sort.Strings(parts)
	for _, p := range parts {
		f := w.open[p]
		delete(w.open, p)
		w.done = append(w.done, f)
		if err := f.rw.close(); err != nil {
			return err
		}
	}
	return nil
}

func (w *partWriters) commit() error {
	for _, f := range w.done {
		if err := f.cw.commit(); err != nil {
			return err
		}
		w.pc.FilesOut++
		w.pc.BytesOut += f.cw.n
		w.pc.Outputs = append(w.pc.Outputs, w.c.o.store.where(w.c.t, f.name))
	}
	return nil
}

func (w *partWriters) abort() {
	for _, f := range w.open {
		f.cw.abort()
	}
	for _, f := range w.done {
		f.cw.abort()
	}
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
