package parquetbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/ctdispatch/ctdispatch/outbox"

	"github.com/google/uuid"
	gax "github.com/googleapis/gax-go/v2"
	"github.com/jonboulle/clockwork"
	"gocloud.dev/blob"

	"github.com/ctdispatch/ctdispatch/outbox/internal/wal"
)

// Durability says when Append returns.
type Durability int

const (
	// Durable makes Append return only after the record is on stable
	// storage (fsync). Concurrent appends share one fsync (group commit).
	// This is the default.
	Durable Durability = iota
	// Interval makes Append return once the record is written to the
	// operating system; the log is synced every FlushInterval. A machine
	// crash (not a process crash) may lose the appends of the last interval.
	Interval
)

// String returns "durable" or "interval".
func (d Durability) String() string {
	switch d {
	case Durable:
		return "durable"
	case Interval:
		return "interval"
	}
	return fmt.Sprintf("Durability(%d)", int(d))
}

// DefaultPublishInterval is Options.PublishInterval's default: a running
// dispatcher's records are in Parquet within 30 seconds.
const DefaultPublishInterval = 30 * time.Second

// MinPublishInterval is the shortest Options.PublishInterval: each
// publication writes a file per partition, so shorter would only multiply
// small files.
const MinPublishInterval = time.Second

// Options configures Open.
type Options struct {
	// Root is where the tables live: a local directory (created 0700 if
	// missing), or a bucket URL: mem://, and gs://bucket/prefix or
	// s3://bucket?region=eu-west-1 once package outbox/cloudblob is
	// imported (any gocloud.dev/blob URL whose driver is registered;
	// credentials come from the environment as that package describes).
	// Required unless Bucket is set.
	Root string
	// Bucket, if set, holds the tables instead of Root; the caller keeps
	// ownership (Close does not close it). Use blob.PrefixedBucket for a
	// prefix.
	Bucket *blob.Bucket
	// LogDir is the local directory of the write-ahead log (in its wal/
	// subdirectory). Defaults to Root when Root is a directory; required
	// for a bucket unless ReadOnly.
	LogDir string
	// ProcessorUUID names this process in every record it writes and in its
	// file names. Defaults to a new random UUID. Two live processes may not
	// share one.
	ProcessorUUID uuid.UUID
	// Durability chooses when Append returns. Defaults to Durable.
	Durability Durability
	// FlushInterval is how often the log is synced in Interval mode.
	// Defaults to 100ms.
	FlushInterval time.Duration
	// SegmentMaxBytes rolls the write-ahead log into Parquet files once a
	// segment reaches this size. Defaults to 16 MiB.
	SegmentMaxBytes int64
	// PublishInterval is how long a record may wait in the log before it
	// is in a Parquet file that DuckDB, BigQuery and other processes'
	// Parquet readers see: every interval, a log segment holding records
	// is rolled and converted, so a record reaches Parquet within this
	// delay plus one conversion. Each roll writes one small file per
	// bucket of each table partition it touched, so a writer busy all day
	// leaves at most Buckets × (⌈24h / PublishInterval⌉ + 1) files per
	// partition (8 × 2,881 at the defaults; the one more roll, after
	// midnight, carries the day's last records), plus Buckets per
	// SegmentMaxBytes of log, until a compaction folds them.
	// Defaults to 30s; at least 1s.
	PublishInterval time.Duration
	// Buckets splits each day's rows into this many hash buckets of their
	// task (the ID without its attempt) when a log segment is converted, one file per bucket,
	// so that compactions on several machines share a day (a lease covers
	// one bucket of one day) and a lookup by ID opens one bucket per day
	// (see ADR 0011). Defaults to 8; 1 writes one file per day. At most
	// 256. Readers and compaction take the bucket from each file's name,
	// so processes with different settings may share a root.
	Buckets int
	// IndexLimit bounds the in-memory index of this process's own records
	// (latest state per ID). Past it, IDs already in Parquet files are
	// forgotten and found through the files instead. Defaults to 1,000,000.
	IndexLimit int
	// IndexBytes bounds the same index by its estimated size in memory
	// (records and map entries), so a dispatcher's memory does not grow
	// with the outbox: past it, IDs already in Parquet files are forgotten
	// and answered from the files (bloom filters keep that cheap).
	// Defaults to 32 MiB (see BENCHMARKS.md for a dispatcher's memory).
	IndexBytes int64
	// MaxOpenFiles bounds the Parquet files of a table kept open between
	// reads; FileCacheBytes bounds their footers and bloom filters kept in
	// memory. Past either, the least recently used are closed and reopened
	// when next read. Default to 256 and 64 MiB.
	MaxOpenFiles   int
	FileCacheBytes int64
	// RefreshInterval is how long reads reuse their view of other
	// processes' data (the listing of table files and of other processes'
	// logs) before looking again: how stale Latest, Lookup and Pending may
	// be about what other processes wrote. This process's own appends,
	// conversions and compactions are seen at once. Defaults to 1s for a
	// directory and 5s for a bucket, where a listing is a remote call;
	// negative means look on every read.
	RefreshInterval time.Duration
	// ReadOnly opens the outbox for reading (and compaction) only: no log,
	// no lock, no replay of other processors' logs.
	ReadOnly bool
	// Logger receives warnings about skipped files and dropped torn log
	// tails. Defaults to discarding.
	Logger *slog.Logger
	// Clock drives timestamps, log syncs and segment ages. Defaults to the
	// real clock.
	Clock clockwork.Clock

	// fs is the filesystem of the log (tests inject faults through it).
	fs logFS
}

// WithDefaults returns a copy of o with every unset field at its default.
func (o Options) WithDefaults() Options {
	if o.ProcessorUUID == uuid.Nil {
		o.ProcessorUUID = uuid.New()
	}
	if o.FlushInterval == 0 {
		o.FlushInterval = 100 * time.Millisecond
	}
	if o.SegmentMaxBytes == 0 {
		o.SegmentMaxBytes = 16 << 20
	}
	if o.PublishInterval == 0 {
		o.PublishInterval = DefaultPublishInterval
	}
	if o.Buckets == 0 {
		o.Buckets = 8
	}
	if o.IndexLimit == 0 {
		o.IndexLimit = 1_000_000
	}
	if o.IndexBytes == 0 {
		o.IndexBytes = 32 << 20
	}
	if o.MaxOpenFiles == 0 {
		o.MaxOpenFiles = 256
	}
	if o.FileCacheBytes == 0 {
		o.FileCacheBytes = 64 << 20
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Clock == nil {
		o.Clock = clockwork.NewRealClock()
	}
	if o.fs == nil {
		o.fs = wal.OSFS{}
	}
	return o
}

func isURL(s string) bool { return strings.Contains(s, "://") }

func (o Options) rootName() string {
	if o.Bucket != nil {
		return "Options.Bucket"
	}
	return o.Root
}

func (o Options) validate() error {
	switch {
	case o.Root == "" && o.Bucket == nil:
		return errors.New("outbox: Options.Root is empty")
	case (o.Bucket != nil || isURL(o.Root)) && o.LogDir == "" && !o.ReadOnly:
		return fmt.Errorf("outbox: Options.LogDir is empty; a bucket root (%s) needs a local directory for the log", o.rootName())
	case o.Durability != Durable && o.Durability != Interval:
		return fmt.Errorf("outbox: Options.Durability %d unknown; allowed: Durable, Interval", int(o.Durability))
	case o.FlushInterval < 0:
		return fmt.Errorf("outbox: Options.FlushInterval %s is negative", o.FlushInterval)
	case o.SegmentMaxBytes < 0:
		return fmt.Errorf("outbox: Options.SegmentMaxBytes %d is negative", o.SegmentMaxBytes)
	case o.PublishInterval < 0:
		return fmt.Errorf("outbox: Options.PublishInterval %s is negative", o.PublishInterval)
	case o.PublishInterval != 0 && o.PublishInterval < MinPublishInterval:
		return fmt.Errorf("outbox: Options.PublishInterval %s is below the minimum %s", o.PublishInterval, MinPublishInterval)
	case o.Buckets < 0 || o.Buckets > maxBuckets:
		return fmt.Errorf("outbox: Options.Buckets %d out of range; allowed: 1 to %d (0 for the default, 8)", o.Buckets, maxBuckets)
	case o.IndexLimit < 0:
		return fmt.Errorf("outbox: Options.IndexLimit %d is negative", o.IndexLimit)
	case o.IndexBytes < 0:
		return fmt.Errorf("outbox: Options.IndexBytes %d is negative", o.IndexBytes)
	case o.MaxOpenFiles < 0:
		return fmt.Errorf("outbox: Options.MaxOpenFiles %d is negative", o.MaxOpenFiles)
	case o.FileCacheBytes < 0:
		return fmt.Errorf("outbox: Options.FileCacheBytes %d is negative", o.FileCacheBytes)
	}
	return nil
}

type recKey struct {
	table outbox.Table
	id    string
}

// segment is this process's open or sealed log segment, with the records it
// holds (they stay in memory until the segment is converted to Parquet).
type segment struct {
	path    string
	seq     uint64
	f       logFile
	size    int64
	dirty   bool // written since the last sync (Interval mode)
	records recordLog
}

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

type convJob struct {
	seg  *segment
	done chan error
}

// Outbox is an open outbox root. Its methods are safe for concurrent use.
type Outbox struct {
	opts      Options
	root      string
	walDir    string
	processor string
	log       *slog.Logger
	clock     clockwork.Clock
	lock      *os.File

	reqs chan *request
	// sending is held shared by every send into reqs and taken by Close
	// once quit is closed, so that after it no request can enter reqs
	// unseen: whatever the writer left there is then answered ErrClosed.
	sending    sync.RWMutex
	quit       chan struct{}
	writerDone chan struct{}
	conv       chan convJob
	convDone   chan struct{}
	closeOnce  sync.Once
	closeErr   error

	// writer-goroutine state
	cur *segment
	// publish is armed when cur takes its first record and fires
	// PublishInterval later, rolling cur into Parquet: a record waits at
	// most one interval, and an idle writer has no timer.
	publish clockwork.Timer
	nextSeq uint64
	buf     []byte

	// mu guards own, sealed and cur.records against readers. Only the
	// writer goroutine changes own and the records, so it reads them
	// without the lock; readers take it shared, so they do not queue
	// behind one another.
	mu  sync.RWMutex
	own map[recKey]outbox.Record
	// ownBytes estimates own's size; trimAt is the size that triggers the
	// next trim (at least IndexBytes, more when the records not yet in
	// Parquet alone exceed it, so trimming cannot run on every write).
	ownBytes, trimAt int64
	sealed           []*segment
	closed           atomic.Bool
	// unavail is set while the log cannot be written: appends fail fast
	// with it, and the writer retries until a fresh segment can be made.
	unavail atomic.Pointer[UnavailableError]

	store tableStore
	files map[outbox.Table]*fileSet
	tails *walTails
}

// Open opens (creating if needed) the outbox at opts.Root. Unless
// ReadOnly, it takes this processor's lock and converts every log segment of
// this processor and of dead processors into Parquet files, dropping torn
// tails (logged with path and offset).
func Open(ctx context.Context, opts Options) (*Outbox, error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	opts = opts.WithDefaults()
	logDir := opts.LogDir
	if logDir == "" {
		logDir = opts.Root
	}
	o := &Outbox{
		opts:      opts,
		root:      opts.Root,
		walDir:    filepath.Join(logDir, walDirName),
		processor: opts.ProcessorUUID.String(),
		log:       opts.Logger,
		clock:     opts.Clock,
		own:       map[recKey]outbox.Record{},
		files:     map[outbox.Table]*fileSet{},
	}
	switch {
	case opts.Bucket != nil:
		o.store = &blobStore{bucket: opts.Bucket, url: "bucket:"}
	case isURL(opts.Root):
		bs, err := openBlobStore(ctx, opts.Root)
		if err != nil {
			return nil, err
		}
		o.store = bs
	default:
		o.store = localStore{root: opts.Root}
	}
	if opts.ReadOnly {
		o.processor = ""
	}
	refresh := opts.RefreshInterval
	if refresh == 0 {
		refresh = time.Second
		if _, isLocal := o.store.(localStore); !isLocal {
			refresh = 5 * time.Second
		}
	}
	refresh = max(refresh, 0)
	for _, t := range outbox.Tables() {
		o.files[t] = newFileSet(o.store, t, o.log, !opts.ReadOnly, refresh, o.clock, opts.MaxOpenFiles, opts.FileCacheBytes)
	}
	o.tails = newWALTails(o.walDir, o.processor, refresh, o.clock)
	if opts.ReadOnly {
		if _, isLocal := o.store.(localStore); isLocal {
			if _, err := os.Stat(o.root); err != nil {
				return nil, fmt.Errorf("outbox: open %s: %w", o.root, err)
			}
		}
		return o, nil
	}
	dirs := []string{logDir, o.walDir}
	if _, isLocal := o.store.(localStore); isLocal {
		dirs = append(dirs, filepath.Join(o.root, string(outbox.TableDispatch)), filepath.Join(o.root, string(outbox.TableTimers)))
	}
	for _, d := range dirs {
		if err := os.MkdirAll(d, dirPerm); err != nil {
			o.store.close()
			return nil, fmt.Errorf("outbox: open %s: %w", d, err)
		}
	}
	lock, held, err := tryLock(filepath.Join(o.walDir, o.processor+lockExt), true)
	if err != nil {
		o.store.close()
		return nil, fmt.Errorf("outbox: lock processor %s: %w", o.processor, err)
	}
	if held {
		o.store.close()
		return nil, fmt.Errorf("%w: %s", ErrProcessorInUse, o.processor)
	}
	o.lock = lock
	if err := o.recover(ctx); err != nil {
		o.releaseLock()
		o.store.close()
		return nil, err
	}
	o.reqs = make(chan *request, 1024)
	o.quit = make(chan struct{})
	o.writerDone = make(chan struct{})
	o.conv = make(chan convJob, 16)
	o.convDone = make(chan struct{})
	go o.runWriter()
	go o.runConverter()
	return o, nil
}

// ProcessorUUID returns the UUID this outbox writes under ("" when
// read-only).
func (o *Outbox) ProcessorUUID() string { return o.processor }

// Root returns the outbox directory.
func (o *Outbox) Root() string { return o.root }

// recover converts the segments of this processor and of dead processors
// into Parquet files, and picks the next free segment number.
func (o *Outbox) recover(ctx context.Context) error {
	segs, err := listSegments(o.walDir)
	if err != nil {
		return fmt.Errorf("outbox: list %s: %w", o.walDir, err)
	}
	byProc := map[string][]walSegment{}
	var procs []string
	for _, s := range segs {
		if _, ok := byProc[s.Processor]; !ok {
			procs = append(procs, s.Processor)
		}
		byProc[s.Processor] = append(byProc[s.Processor], s)
		if s.Processor == o.processor && s.Seq >= o.nextSeq {
			o.nextSeq = s.Seq + 1
		}
	}
	for _, t := range outbox.Tables() {
		entries, err := o.store.list(ctx, t)
		if err != nil {
			return fmt.Errorf("outbox: list %s: %w", o.store.where(t, ""), err)
		}
		for _, e := range entries {
			name, ok := strings.CutSuffix(path.Base(e.name), ".parquet")
			if !ok {
				continue
			}
			if p, seq, ok := parseSegmentName(name + walExt); ok && p == o.processor && seq >= o.nextSeq {
				o.nextSeq = seq + 1
			}
		}
	}
	for _, p := range procs {
		if err := ctx.Err(); err != nil {
			return err
		}
		if p == o.processor {
			if err := o.adopt(ctx, byProc[p]); err != nil {
				return err
			}
			continue
		}
		lock, held, err := tryLock(filepath.Join(o.walDir, p+lockExt), false)
		if err != nil {
			o.log.Warn("outbox: cannot check processor liveness", "processor", p, "err", err)
			continue
		}
		if held {
			continue // alive: its segments are read live, never adopted
		}
		err = o.adopt(ctx, byProc[p])
		if lock != nil {
			if err == nil {
				os.Remove(lock.Name())
			}
			lock.Close()
		}
		if err != nil {
			return err
		}
		o.log.Info("outbox: replayed log of a stopped processor", "processor", p, "segments", len(byProc[p]))
	}
	return nil
}

// adopt turns segments into Parquet files named after them and removes
// them. A torn tail is dropped and logged; an unreadable segment is logged
// and left in place.
func (o *Outbox) adopt(ctx context.Context, segs []walSegment) error {
	for _, s := range segs {
		recs, end, err := readFrames(s.Path, 0)
		var te *tailError
		switch {
		case errors.As(err, &te):
			o.log.Warn("outbox: dropped torn log tail", "path", s.Path, "offset", te.Offset, "bytes", te.Bytes, "reason", te.Reason)
		case errors.Is(err, os.ErrNotExist):
			continue
		case err != nil:
			o.log.Warn("outbox: skipped log segment", "path", s.Path, "err", err)
			continue
		}
		_ = end
		if err := o.writeSegmentParquet(ctx, s.Processor, s.Seq, [][]outbox.Record{recs}); err != nil {
			return err
		}
		if err := os.Remove(s.Path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("outbox: remove %s: %w", s.Path, err)
		}
	}
	return syncDir(o.walDir)
}

// writeSegmentParquet writes a segment's records as one Parquet file per
// table, partition and bucket,
// <table>/created_date=<day>/b<k>of<n>-<processor>-<seq>.parquet (without
// the bucket prefix when Options.Buckets is 1).
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
				p.name += "/" + bucketName(bucketOf(r.ID, n), n) + "-"
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
	for _, p := range order {
		rs := groups[p]
		sortRecordPtrs(rs)
		name := fmt.Sprintf("%s%s-%016d.parquet", p.name, processor, seq)
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

// Append checks r, fills it in (see outbox.Record.Prepare) and hands it
// to the writer, whose group commit writes it with the records that wait
// beside it. done, when not nil, is called once r is durable per
// Options.Durability, or with the error that kept it from the log; it runs
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

// Close rolls what remains of the log into Parquet, stops the background
// goroutines, releases the processor lock and closes every file.
func (o *Outbox) Close() error {
	o.closeOnce.Do(func() {
		o.closed.Store(true)
		if !o.opts.ReadOnly {
			close(o.quit)
			// Sends under way end now (quit is closed) and later ones see
			// closed, so what is left in reqs after the writer is all there
			// will be: a request queued while the writer was finishing is
			// answered, never dropped (an Append's done always runs).
			o.sending.Lock()
			<-o.writerDone
			for len(o.reqs) > 0 {
				(<-o.reqs).answer(ErrClosed)
			}
			o.sending.Unlock()
			close(o.conv)
			<-o.convDone
			if o.cur != nil {
				o.closeErr = errors.Join(o.closeErr, o.cur.f.Close())
			}
			o.mu.RLock()
			left := len(o.sealed)
			o.mu.RUnlock()
			if left == 0 {
				os.Remove(o.lock.Name())
			}
			o.releaseLock()
		}
		for _, fs := range o.files {
			fs.closeAll()
		}
		o.closeErr = errors.Join(o.closeErr, o.store.close())
	})
	return o.closeErr
}

func (o *Outbox) releaseLock() {
	if o.lock != nil {
		o.lock.Close()
		o.lock = nil
	}
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
	backoff := newHealBackoff()
	var retry clockwork.Timer
	var retryC <-chan time.Time
	defer o.stopPublishTimer()
	for {
		if o.unavail.Load() != nil && retry == nil {
			retry = o.clock.NewTimer(backoff.Pause())
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
				backoff = newHealBackoff()
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

func (o *Outbox) ensureSegment() error {
	if o.cur != nil {
		return nil
	}
	seq := o.nextSeq
	path := filepath.Join(o.walDir, segmentName(o.processor, seq))
	f, err := o.opts.fs.Create(path)
	if err != nil {
		if errors.Is(err, os.ErrExist) {
			o.nextSeq++ // left by an earlier failed attempt: take the next name
		}
		return fmt.Errorf("create log segment %s: %w", path, err)
	}
	// From here the name is used, whatever happens: a failed attempt
	// removes what it can and the next one takes a new name, so a full
	// disk never jams the writer on a leftover file.
	o.nextSeq++
	fail := func(err error) error {
		f.Close()
		o.opts.fs.Remove(path)
		return fmt.Errorf("create log segment %s: %w", path, err)
	}
	if _, err := f.Write([]byte(walMagic)); err != nil {
		return fail(err)
	}
	if err := f.Sync(); err != nil {
		return fail(err)
	}
	if err := o.opts.fs.SyncDir(o.walDir); err != nil {
		return fail(err)
	}
	o.mu.Lock() // readers look at cur
	o.cur = &segment{path: path, seq: seq, f: f, size: int64(len(walMagic))}
	o.mu.Unlock()
	return nil
}

// newHealBackoff spaces the writer's retries of an unwritable log: soon
// at first (a disk freed by an operator), doubling up to every 10s. gax
// draws each pause at random up to the current bound, which does no harm
// here and spreads processes that share a disk.
func newHealBackoff() *gax.Backoff {
	return &gax.Backoff{Initial: 100 * time.Millisecond, Max: 10 * time.Second, Multiplier: 2}
}

// syncDirty syncs the log in Interval mode.
func (o *Outbox) syncDirty() {
	seg := o.cur
	if seg == nil || !seg.dirty {
		return
	}
	if err := seg.f.Sync(); err != nil {
		o.markUnavailable(seg.path, err)
		o.seal(nil)
		return
	}
	seg.dirty = false
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

// seal closes the current segment and queues it for conversion to
// Parquet; done (if any) is answered once it and every earlier segment are
// converted.
func (o *Outbox) seal(done chan error) error {
	o.stopPublishTimer()
	seg := o.cur
	if seg != nil {
		var err error
		if seg.dirty {
			err = seg.f.Sync()
		}
		err = errors.Join(err, seg.f.Close())
		if err != nil {
			o.log.Error("outbox: close log segment", "path", seg.path, "err", err)
		}
		if seg.records.len() == 0 && err == nil {
			o.opts.fs.Remove(seg.path)
			seg = nil
		}
	}
	// Readers see a segment's records through cur or sealed; moving it
	// from one to the other under the lock leaves no moment where they
	// are in neither.
	o.mu.Lock()
	o.cur = nil
	if seg != nil {
		o.sealed = append(o.sealed, seg)
	}
	o.mu.Unlock()
	o.conv <- convJob{seg: seg, done: done}
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
	b := newHealBackoff()
	for err != nil {
		answer(job)
		for i := range *queue {
			answer(&(*queue)[i])
		}
		select {
		case <-o.clock.After(b.Pause()):
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
