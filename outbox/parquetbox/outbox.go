package parquetbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ctdispatch/ctdispatch/outbox"

	"github.com/jonboulle/clockwork"
)

type recKey struct {
	table outbox.Table
	id    string
}

// Outbox is an open outbox root. Its methods are safe for concurrent use.
type Outbox struct {
	opts      Config
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
	// schemaFiles is set once every table's schema file is in place: by
	// Open for a writer, by the first WriteRun on a read-only outbox.
	schemaFiles atomic.Bool
}

// Open opens (creating if needed) the outbox at opts.Root. Unless
// ReadOnly, it takes this processor's lock and converts every log segment of
// this processor and of dead processors into Parquet files, dropping torn
// tails (logged with path and offset), and puts each table's schema file
// in place: a Parquet file with the table's columns and no rows, so that
// DuckDB's queries of a table nothing was published to yet return no rows
// instead of failing.
func Open(ctx context.Context, opts Config) (*Outbox, error) {
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
		url := anonymousBucket
		if opts.BucketURL != "" {
			url = displayURL(opts.BucketURL)
		}
		o.store = &blobStore{bucket: opts.Bucket, url: url}
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
	if err := o.writeSchemaFiles(ctx); err != nil {
		o.releaseLock()
		o.store.close()
		return nil, err
	}
	o.schemaFiles.Store(true)
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
			// Withdrawn while the lock is held: an announcement beside a
			// free lock is a dead processor's.
			os.Remove(o.announcePath(o.processor))
			if left == 0 {
				os.Remove(o.lock.Name())
			}
			o.releaseLock()
		}
		for _, fs := range o.files {
			fs.closeAll()
		}
		o.tails.close()
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
