package parquetbox

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path"
	"slices"
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

// CompactConfig configures Compact.
type CompactConfig struct {
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
	// Full folds every run of each unit written since its last compaction
	// into one, instead of merging runs of similar size (see Compact).
	// Defaults to tiered merges.
	Full bool
	// Trace, if not nil, receives what the compaction does as it goes:
	// its progress through each unit, each unit's outcome, and each
	// table's sums and manifest (see CompactTrace). Defaults to none:
	// Compact then reports only its error.
	Trace *CompactTrace
	// BeforeCommit, if not nil, is called in the compaction of each unit
	// that has outputs to commit, after its lease was last renewed and
	// before the commit record that makes the outputs visible is created,
	// with the context Compact was given. It is there for tests of
	// concurrent compactions: a hook that blocks holds that commit back
	// while another compaction acts (ctdispatch stops the process there
	// when $CTDISPATCH_PAUSE names compact.commit). One that blocks past
	// the lease makes the compaction lose its unit (ErrUnitLost), which
	// changes nothing. Defaults to none.
	BeforeCommit func(ctx context.Context)
}

func (c CompactConfig) withDefaults() CompactConfig {
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

// Compact compacts each table unit by unit: a unit is one bucket of a
// partition (see Config.Buckets), or a partition's files without a
// bucket.
//
// Within a unit, each file a log conversion wrote is a run of weight 1,
// and the files one merge wrote are a run whose weight is the sum of its
// inputs'. Runs are merged size-tiered (see ADR 0011): a run of weight w
// is in tier ⌊log₄ w⌋, and whenever a tier holds 4 runs they are merged
// into one of the next tier (cascading, in one merge), so each row is
// rewritten about log₄(runs) times. A unit of a past day (by the clock)
// holding more than ⌈log₄ W⌉ + 1 runs (W its total weight) is folded
// whole, as is every unit with Full. A merge writes files sorted by ID
// with only the latest state of each ID (as Latest picks it; the other
// records of a blind conflict stay, so it still reads as one), of at most
// about TargetFileBytes each. Terminal records past their queue's retention are dropped only by
// a merge of every run of the unit, so that no older state of a dropped
// ID survives in a run left out: a unit holding such records is folded
// whole, and one whose rows all are is removed whole.
//
// Each unit is done under a lease: a unit another compaction holds is
// reported busy and skipped, so two compactions started together share a
// day's units. A merge's outputs become visible only when the unit's next
// commit record is created (see commitDir), which fails if another
// compaction committed the unit since this one read it: this one then
// discards its outputs, leaves the unit as the other one committed it and
// returns an error matching ErrUnitLost, having changed nothing. Inputs
// are removed after the commit: appends continue meanwhile, and an
// interrupted compaction leaves the outbox as it was or as committed.
//
// Stats shows the tables afterwards; CompactConfig.Trace hears what was
// done to each unit, as ctdispatch compact prints it.
func (o *Outbox) Compact(ctx context.Context, opts CompactConfig) error {
	_, err := o.compact(ctx, opts)
	return err
}

// compact is Compact, returning its report, which it also gives
// opts.Trace as it goes.
func (o *Outbox) compact(ctx context.Context, opts CompactConfig) (compactStats, error) {
	var stats compactStats
	if err := o.checkOpen(); err != nil {
		return stats, err
	}
	opts = opts.withDefaults()
	trace := opts.Trace
	if trace == nil {
		trace = &CompactTrace{}
	}
	for _, t := range opts.Tables {
		if err := t.Validate(); err != nil {
			return stats, err
		}
		st, err := o.compactTable(ctx, t, opts, trace)
		stats.Tables = append(stats.Tables, st)
		if trace.Table != nil {
			trace.Table(st)
		}
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
	opts   CompactConfig
	trace  *CompactTrace
	now    time.Time
	holder string
	st     *TableCompaction
	// runsSeen is how many runs the unit being compacted held at its
	// last step.
	runsSeen int
	// unit is the unit being compacted; base is its newest commit (nil:
	// none yet), read before its files were listed, and hidden the files
	// of the unit that listing hid (see commitDir).
	unit   unitName
	base   *unitCommit
	hidden []string
}

func (o *Outbox) compactTable(ctx context.Context, t outbox.Table, opts CompactConfig, trace *CompactTrace) (TableCompaction, error) {
	st := TableCompaction{Table: t}
	c := &compaction{o: o, t: t, opts: opts, trace: trace, now: o.clock.Now(), holder: o.leaseHolder(), st: &st}
	o.store.cleanTemps(ctx, t, c.now.Add(-time.Hour))
	parts, err := c.listUnits(ctx)
	if err != nil {
		return st, err
	}
	names := make([]string, 0, len(parts))
	for p := range parts {
		names = append(names, p)
	}
	sort.Strings(names)
	for _, p := range names {
		pc, err := c.run(ctx, p, c.compactUnit)
		c.report(pc)
		if err != nil {
			return st, err
		}
	}
	st.Manifest = c.refreshManifest(ctx)
	for _, fe := range o.files[t].damaged() {
		st.Skipped = append(st.Skipped, fe)
	}
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

// listUnits lists the table's files afresh, by unit.
func (c *compaction) listUnits(ctx context.Context) (map[unitName][]storeEntry, error) {
	entries, err := c.o.store.list(ctx, c.t)
	if err != nil {
		return nil, fmt.Errorf("outbox: list %s: %w", c.o.store.where(c.t, ""), err)
	}
	out := map[string][]storeEntry{}
	for _, e := range entries {
		if _, _, ok := splitName(e.name); ok {
			u := unitOf(e.name)
			out[u] = append(out[u], e)
		}
	}
	return out, nil
}

func (c *compaction) report(pc UnitCompaction) {
	st := c.st
	st.FilesIn += pc.FilesIn
	st.RowsIn += pc.RowsIn
	st.Dropped += pc.Dropped
	st.ForeignRows += pc.ForeignRows
	st.BytesIn += pc.BytesIn
	st.FilesOut += pc.FilesOut
	st.RowsOut += pc.RowsOut
	st.BytesOut += pc.BytesOut
	st.KeptForPublication += pc.KeptForPublication
	if st.Output == "" && len(pc.Outputs) > 0 {
		st.Output = pc.Outputs[0]
	}
	st.Partitions = append(st.Partitions, pc)
	if c.trace.Unit != nil {
		c.trace.Unit(c.t, pc)
	}
}

// run does step for one unit under its lease, with the unit's files as
// they are once the lease is held.
func (c *compaction) run(ctx context.Context, unit unitName, step func(context.Context, *lease, []*openFile, *UnitCompaction) error) (UnitCompaction, error) {
	pc := UnitCompaction{Partition: unitPartition(unit), Bucket: strings.TrimSuffix(unitBucket(unit), "-")}
	// A bucket's lease is <partition>~<bucket>, which no other unit's
	// lease prefix (<partition>.) matches.
	name := strings.Replace(unit, "/", "~", 1)
	l, err := acquireLease(ctx, c.o.store, path.Join(leaseDir, string(c.t), name)+".", c.holder, c.o.clock.Now(), c.opts.LeaseTTL)
	var busy *BusyError
	if errors.As(err, &busy) {
		pc.Action, pc.Reason = UnitBusy, busy.Error()
		return pc, nil
	}
	if err != nil {
		return pc, fmt.Errorf("outbox: lease %s/%s: %w", c.t, unit, err)
	}
	defer l.release(context.WithoutCancel(ctx))
	c.runsSeen = -1
	for {
		seen := c.runsSeen
		err := c.step(ctx, l, unit, &pc, step)
		// Runs it cannot remove (files with foreign rows are kept) may
		// leave a step without progress: the rest waits for the next
		// compaction.
		if !errors.Is(err, errMoreRuns) || (seen >= 0 && c.runsSeen >= seen) {
			if errors.Is(err, errMoreRuns) {
				err = nil
			}
			return pc, err
		}
	}
}

// errMoreRuns is a step's answer when it merged some of the runs a merge
// called for (see maxFanIn) and the rest are to merge with its output.
var errMoreRuns = errors.New("more runs to merge")

// step does step once, with the unit's files as they are now.
func (c *compaction) step(ctx context.Context, l *lease, unit unitName, pc *UnitCompaction, step func(context.Context, *lease, []*openFile, *UnitCompaction) error) error {
	// Listed again under the lease: a compaction that held it before may
	// have replaced these files. The commit is read first: this
	// compaction's own commit will be the next one, which fails if any
	// other is made after this read.
	base, err := readCommit(ctx, c.o.store, c.t, unit)
	if err != nil {
		return fmt.Errorf("outbox: read the commit of %s/%s: %w", c.t, unit, err)
	}
	c.unit, c.base = unit, base
	fs := c.o.files[c.t]
	fs.invalidate()
	files, err := fs.acquireWhere(ctx, func(name string) bool { return unitOf(name) == unit })
	if err != nil {
		return err
	}
	defer fs.release(files)
	c.hidden = fs.hiddenIn(unit)
	if len(files) == 0 {
		pc.Action, pc.Reason = UnitUntouched, "no readable files"
		return nil
	}
	return step(ctx, l, files, pc)
}

// droppable reports whether retention removes r in a merge of every run
// of its unit.
func (c *compaction) droppable(r *outbox.Record) bool {
	if !r.Status.Terminal() {
		return false
	}
	keep, ok := c.opts.Retention.For(r.Queue)
	return ok && !r.UpdatedAt.After(c.now.Add(-keep))
}

// maxFanIn bounds the runs one merge reads at once: each holds a page of
// every column and a batch of rows in memory (about 2 MiB; 48 runs peaked
// at 165 MiB), so a merge of more (a day never compacted, folded whole)
// first merges just enough of its smallest runs, without retention, that
// maxFanIn are left, and then goes on with those.
const maxFanIn = 48

// compactUnit merges a unit's runs as the tiers call for (see Compact).
// It answers errMoreRuns when a merge took only maxFanIn of its runs.
func (c *compaction) compactUnit(ctx context.Context, l *lease, files []*openFile, pc *UnitCompaction) error {
	runs := groupRuns(files)
	c.runsSeen = len(runs)
	if pc.Merges == 0 {
		pc.RunsBefore = len(runs)
	}
	pc.RunsAfter = len(runs)
	full := c.opts.Full || (c.dayOver(pc.Partition) && len(runs) > runBound(totalWeight(runs)))
	drops := false
	if len(c.opts.Retention) > 0 {
		dropped := droppedMarks{}
		all, any, err := c.scanRetention(ctx, files, dropped)
		if err != nil {
			return err
		}
		if all && pc.Merges == 0 {
			pc.RunsAfter = 0
			return c.dropWhole(ctx, l, files, pc, dropped)
		}
		full = full || any
		drops = any
	}
	var merges [][]run
	if full {
		if len(runs) > 1 || !runs[0].compacted() || drops {
			merges = [][]run{runs}
		}
	} else {
		merges = planMerges(runs)
	}
	if len(merges) == 0 {
		if pc.Merges == 0 {
			pc.Action, pc.Reason = UnitUntouched, "runs within the tiers' bounds"
		}
		return nil
	}
	pc.Action = UnitCompacted
	more := false
	for i, m := range merges {
		if len(m) > maxFanIn {
			m = slices.Clone(m)
			sort.SliceStable(m, func(a, b int) bool { return m[a].weight < m[b].weight })
			merges[i], more = m[:min(maxFanIn, len(m)-maxFanIn+1)], true
		}
	}
	pc.Full = len(merges) == 1 && len(merges[0]) == len(runs)
	for _, m := range merges {
		var in []*openFile
		w := 0
		for _, r := range m {
			in = append(in, r.files...)
			w += r.weight
		}
		out := newPartWriters(c, pc)
		out.prefix = unitBucket(unitOf(in[0].name)) + "compacted-"
		out.weight = w
		out.gen = 1
		if c.base != nil {
			out.gen = c.base.body.Gen + 1
		}
		if err := c.fold(ctx, l, in, pc, out, pc.Full, pc.Partition); err != nil {
			return err
		}
		pc.Merges++
		pc.RunsAfter -= len(m) - 1
	}
	if more {
		return errMoreRuns
	}
	return nil
}

// dayOver reports whether a partition's day ended before the compaction
// began (by the clock): its last compaction of the day has passed, and
// the run bound applies.
func (c *compaction) dayOver(part string) bool {
	d, ok := strings.CutPrefix(part, partitionKey)
	if !ok {
		return false
	}
	day, err := time.Parse(time.DateOnly, d)
	return err == nil && c.now.UTC().Sub(day) >= 24*time.Hour
}

// scanRetention reads the columns retention needs and reports whether
// every row of the files goes, and whether any does.
func (c *compaction) scanRetention(ctx context.Context, files []*openFile, dropped droppedMarks) (all, any bool, err error) {
	all = true
	for _, f := range files {
		err := f.scanProjected(ctx, []field{fieldID, fieldCloudTaskID, fieldStatus, fieldQueue, fieldUpdatedAt}, func(_ int, _ int64, r *outbox.Record) {
			if c.droppable(r) && r.Trusted() {
				any = true
				dropped.add(r)
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
func (c *compaction) dropWhole(ctx context.Context, l *lease, files []*openFile, pc *UnitCompaction, dropped droppedMarks) error {
	pc.Action = UnitDropped
	for _, f := range files {
		pc.FilesIn++
		pc.BytesIn += f.size
		pc.RowsIn += f.NumRows()
		pc.Dropped += f.NumRows()
	}
	return c.commit(ctx, l, files, nil, pc, dropped)
}

// fold merges files into out, writing each ID's latest state to the
// partition part (to its own partition when part is ""), and then
// removes the inputs. Retention drops records only when drop is set: when
// the files are every run of their unit.
func (c *compaction) fold(ctx context.Context, l *lease, files []*openFile, pc *UnitCompaction, out *partWriters, drop bool, part string) error {
	var total, done int64
	for _, f := range files {
		total += f.NumRows()
		pc.BytesIn += f.size
	}
	rowsIn := pc.RowsIn
	pc.FilesIn += len(files)
	if total >= pqfile.BestCodecMinRows {
		out.layout = pqfile.CompactLayout
	}
	count := func(n int) {
		done += int64(n)
		if c.trace.Progress != nil {
			c.trace.Progress(c.t, done, total)
		}
	}
	var streams []recordStream
	var unsorted []outbox.Record
	keep := map[*openFile]bool{}
	for _, f := range files {
		// What readers do not serve (an old pending state the unit's
		// retention outdated) is not carried into an output, where it
		// would be served.
		hides := c.o.files[c.t].hider(f.name)
		if f.Ours() {
			fst := newFileStream(f.pqFile, count)
			defer fst.close()
			var src recordStream = trustedStream{fst, func(*outbox.Record) { pc.ForeignRows++; keep[f] = true }}
			if hides != nil {
				src = hiddenStream{src, hides}
			}
			streams = append(streams, src)
			continue
		}
		// Another writer's file has no promised order: sort it in memory.
		err := f.scan(func(r outbox.Record) error {
			if !r.Trusted() {
				pc.ForeignRows++
				keep[f] = true
				return nil
			}
			if hides != nil && hides(&r) {
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
	dropped := droppedMarks{}
	err := mergeLatest(ctx, streams, func(latest []outbox.Record) error {
		if r := &latest[0]; drop && c.droppable(r) {
			pc.Dropped++
			dropped.add(r)
			return nil
		}
		if now := c.o.clock.Now(); now.Sub(renewed) > c.opts.LeaseTTL/3 {
			if err := l.renew(ctx, now); err != nil {
				if lostLease(err) {
					return c.stepBack(pc, &UnitLostError{Table: c.t, Unit: c.unit, Lease: err})
				}
				return fmt.Errorf("renew lease: %w", err)
			}
			renewed = now
		}
		for i := range latest {
			pc.RowsOut++
			p := part
			if p == "" {
				p = partitionOf(&latest[i])
			}
			if err := out.write(ctx, p, &latest[i]); err != nil {
				return err
			}
		}
		return nil
	})
	pc.RowsIn = rowsIn + done
	if err != nil {
		out.abort()
		return fmt.Errorf("outbox: compact %s/%s: %w", c.t, pc.Partition, err)
	}
	if err := out.close(); err != nil {
		out.abort()
		return fmt.Errorf("outbox: compact %s/%s: %w", c.t, pc.Partition, err)
	}
	return c.commit(ctx, l, files, keep, pc, dropped, out)
}

// stepBack reports the unit lost (its outputs already discarded by the
// caller), logs it and returns lost.
func (c *compaction) stepBack(pc *UnitCompaction, lost *UnitLostError) error {
	pc.Action, pc.Reason = UnitLost, lost.Error()
	pc.FilesOut, pc.RowsOut, pc.BytesOut, pc.Outputs = 0, 0, 0, nil
	c.o.log.Warn("outbox: compaction "+lost.Error(), "table", c.t, "unit", c.unit, "commit", lost.Gen)
	return lost
}

// commit makes a merge's outputs visible and removes its inputs: once
// the lease is confirmed still held, it places the outputs under their
// names and creates the unit's next commit record, which names them.
// That create fails if another compaction committed the unit since this
// one read its commit (this one was paused past its lease, say): it then
// deletes its outputs, removes nothing and returns a *UnitLostError.
func (c *compaction) commit(ctx context.Context, l *lease, files []*openFile, keep map[*openFile]bool, pc *UnitCompaction, dropped droppedMarks, outs ...*partWriters) error {
	// Renewed, not only checked: writing the outputs may have taken most
	// of the lease, and the commit below must land while it is held.
	if err := l.renew(ctx, c.o.clock.Now()); err != nil {
		for _, out := range outs {
			out.abort()
		}
		if lostLease(err) {
			return c.stepBack(pc, &UnitLostError{Table: c.t, Unit: c.unit, Lease: err})
		}
		return fmt.Errorf("outbox: compact %s/%s: lease unreadable, nothing changed: %w", c.t, pc.Partition, err)
	}
	if c.opts.BeforeCommit != nil {
		c.opts.BeforeCommit(ctx)
	}
	var placed []string
	for _, out := range outs {
		names, err := out.commit()
		placed = append(placed, names...)
		if err != nil {
			c.discard(ctx, placed)
			return fmt.Errorf("outbox: compact %s/%s: %w", c.t, pc.Partition, err)
		}
	}
	next := c.nextCommit(files, keep, placed, dropped)
	data, _ := json.Marshal(next)
	prefix := commitPrefix(c.t, c.unit)
	created, err := c.o.store.putNew(ctx, leaseKey(prefix, next.Gen), data)
	if err != nil || !created {
		c.discard(ctx, placed)
		if err != nil {
			return fmt.Errorf("outbox: compact %s/%s: create commit %d: %w", c.t, pc.Partition, next.Gen, err)
		}
		return c.stepBack(pc, &UnitLostError{Table: c.t, Unit: c.unit, Gen: next.Gen})
	}
	c.base = newUnitCommit(next)
	fs := c.o.files[c.t]
	fs.invalidate()
	// Read after the commit: a publisher that turns publication on and
	// then lists the live files sees this commit, or this compaction sees
	// the switch and keeps what a snapshot may name.
	published := c.o.published(ctx)
	for _, f := range files {
		if keep[f] {
			c.st.Kept = append(c.st.Kept, f.path)
			c.o.log.Warn("outbox: compaction left a file with foreign rows in place", "path", f.path)
			continue
		}
		if published {
			// Hidden from now on; a later merge of this step carries
			// it in its commit's consumed list, as it carries the
			// hidden files the listing showed.
			pc.KeptForPublication++
			c.hidden = append(c.hidden, f.name)
			continue
		}
		if err := c.o.store.remove(ctx, c.t, f.name); err != nil {
			return fmt.Errorf("outbox: remove compacted input %s: %w", f.path, err)
		}
	}
	// What the commit hides is removed too: the outputs of compactions
	// that lost (or crashed before committing) for this generation or an
	// earlier one, which can never be committed now, and, unless the
	// tables are published, inputs an interrupted compaction committed but
	// left.
	for _, name := range c.hidden {
		g, tagged := outputGen(name)
		orphan := tagged && g <= next.Gen && !c.base.outputs[name] && !c.base.consumed[name]
		if orphan || (!published && c.base.consumed[name]) {
			if err := c.o.store.remove(ctx, c.t, name); err != nil {
				c.o.log.Warn("outbox: could not remove a file no commit names", "path", c.o.store.where(c.t, name), "err", err)
			}
		}
	}
	c.pruneCommits(ctx, prefix, next.Gen)
	if err := c.o.store.sync(c.t); err != nil {
		return fmt.Errorf("outbox: sync %s: %w", c.o.store.where(c.t, ""), err)
	}
	if ls, ok := c.o.store.(localStore); ok && pc.Partition != "" && pc.FilesOut == 0 {
		ls.removeEmptyPartition(c.t, pc.Partition)
	}
	return nil
}

// nextCommit is the commit that follows c.base once a merge of files
// (but those in keep) placed the outputs placed.
func (c *compaction) nextCommit(files []*openFile, keep map[*openFile]bool, placed []string, dropped droppedMarks) commitBody {
	next := commitBody{Gen: 1, Holder: c.holder, At: c.o.clock.Now().UTC(), Dropped: map[string]time.Time{}}
	consumed := map[string]bool{}
	for _, f := range files {
		if !keep[f] {
			consumed[f.name] = true
			next.Consumed = append(next.Consumed, f.name)
		}
	}
	if b := c.base; b != nil {
		next.Gen = b.body.Gen + 1
		for _, name := range b.body.Outputs {
			if !consumed[name] {
				next.Outputs = append(next.Outputs, name)
			}
		}
		// Inputs an earlier compaction committed and did not remove
		// stay hidden until they are.
		for _, name := range c.hidden {
			if b.consumed[name] && !consumed[name] {
				next.Consumed = append(next.Consumed, name)
			}
		}
		for q, t := range b.body.Dropped {
			next.Dropped[q] = t
		}
	}
	next.Outputs = append(next.Outputs, placed...)
	for q, t := range dropped {
		if t.After(next.Dropped[q]) {
			next.Dropped[q] = t
		}
	}
	sort.Strings(next.Outputs)
	sort.Strings(next.Consumed)
	return next
}

// discard removes outputs no commit names.
func (c *compaction) discard(ctx context.Context, names []string) {
	for _, name := range names {
		if err := c.o.store.remove(context.WithoutCancel(ctx), c.t, name); err != nil {
			c.o.log.Warn("outbox: could not remove an output no commit names (readers ignore it; the next compaction removes it)", "path", c.o.store.where(c.t, name), "err", err)
		}
	}
}

// pruneCommits removes a unit's commits older than the one before gen:
// the newest is the unit's, and the one before it is kept for a reader
// that listed the commits just before gen was made.
func (c *compaction) pruneCommits(ctx context.Context, prefix string, gen uint64) {
	keys, err := c.o.store.keys(ctx, prefix)
	if err != nil {
		return
	}
	for _, k := range keys {
		if n, err := strconv.ParseUint(strings.TrimPrefix(k, prefix), 10, 64); err == nil && n+1 < gen {
			_ = c.o.store.del(ctx, k)
		}
	}
}

// droppedMarks maps a queue to the latest updated_at of a record
// retention dropped (see commitBody.Dropped).
type droppedMarks map[string]time.Time

func (d droppedMarks) add(r *outbox.Record) {
	if r.UpdatedAt.After(d[r.Queue]) {
		d[r.Queue] = r.UpdatedAt
	}
}

// isCompacted reports whether a file is already the output of a
// compaction.
func isCompacted(f *openFile) bool {
	_, _, rest, _ := splitBucket(path.Base(f.name))
	return f.Ours() && strings.HasPrefix(rest, "compacted-")
}

// partWriters writes a compaction's output: per partition, sorted files
// of about TargetFileBytes each, committed together at the end.
type partWriters struct {
	c      *compaction
	pc     *UnitCompaction
	prefix string
	// weight is the weight of the run written (see parseRun) and gen
	// the generation of the commit meant to name it (see commitDir),
	// which its files' names carry; id names the run.
	weight int
	gen    uint64
	id     string
	seq    int
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

func newPartWriters(c *compaction, pc *UnitCompaction) *partWriters {
	return &partWriters{c: c, pc: pc, prefix: "compacted-", id: fmt.Sprintf("%d-%s", c.now.UnixMicro(), randomHex(4)), layout: pqfile.FlushLayout, open: map[string]*partFile{}}
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
		name := fmt.Sprintf("%s/%s%s-g%d-w%d-%d.parquet", part, w.prefix, w.id, w.gen, max(w.weight, 1), w.seq)
		w.seq++
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

// commit places the finished files under their names, which readers
// ignore until a commit record names them, and returns those names.
func (w *partWriters) commit() ([]string, error) {
	var names []string
	for i, f := range w.done {
		if err := f.cw.commit(); err != nil {
			for _, g := range w.done[i+1:] {
				g.cw.abort()
			}
			return names, err
		}
		names = append(names, f.name)
		w.pc.FilesOut++
		w.pc.BytesOut += f.cw.n
		w.pc.Outputs = append(w.pc.Outputs, w.c.o.store.where(w.c.t, f.name))
	}
	return names, nil
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
