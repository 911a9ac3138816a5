package parquetbox

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/google/uuid"
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

// DefaultPublishInterval is Config.PublishInterval's default: a running
// dispatcher's records are in Parquet within 30 seconds.
const DefaultPublishInterval = 30 * time.Second

// MinPublishInterval is the shortest Config.PublishInterval: each
// publication writes a file per partition, so shorter would only multiply
// small files.
const MinPublishInterval = time.Second

// Config configures Open.
type Config struct {
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
	// BucketURL is the URL engines and catalogs read Bucket by, with its
	// prefix ("gs://bucket/prefix"): LiveFiles needs it for absolute
	// locations, and messages name files by it. Only with Bucket; defaults
	// to none (messages then say "bucket:").
	BucketURL string
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
	// no lock, no replay of other processors' logs, and no schema files
	// until a WriteRun (another store's export) writes to it.
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
func (o Config) WithDefaults() Config {
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

func (o Config) rootName() string {
	if o.Bucket != nil {
		return "Config.Bucket"
	}
	return o.Root
}

func (o Config) validate() error {
	switch {
	case o.Root == "" && o.Bucket == nil:
		return errors.New("outbox: Config.Root is empty")
	case o.BucketURL != "" && o.Bucket == nil:
		return fmt.Errorf("outbox: Config.BucketURL %q without Config.Bucket; it names an opened bucket (Root names its own)", o.BucketURL)
	case o.BucketURL != "" && !isURL(o.BucketURL):
		return fmt.Errorf("outbox: Config.BucketURL %q is not a URL; want scheme://bucket/prefix, for example gs://bucket/prefix", o.BucketURL)
	case (o.Bucket != nil || isURL(o.Root)) && o.LogDir == "" && !o.ReadOnly:
		return fmt.Errorf("outbox: Config.LogDir is empty; a bucket root (%s) needs a local directory for the log", o.rootName())
	case o.Durability != Durable && o.Durability != Interval:
		return fmt.Errorf("outbox: Config.Durability %d unknown; allowed: Durable, Interval", int(o.Durability))
	case o.FlushInterval < 0:
		return fmt.Errorf("outbox: Config.FlushInterval %s is negative", o.FlushInterval)
	case o.SegmentMaxBytes < 0:
		return fmt.Errorf("outbox: Config.SegmentMaxBytes %d is negative", o.SegmentMaxBytes)
	case o.PublishInterval < 0:
		return fmt.Errorf("outbox: Config.PublishInterval %s is negative", o.PublishInterval)
	case o.PublishInterval != 0 && o.PublishInterval < MinPublishInterval:
		return fmt.Errorf("outbox: Config.PublishInterval %s is below the minimum %s", o.PublishInterval, MinPublishInterval)
	case o.Buckets < 0 || o.Buckets > maxBuckets:
		return fmt.Errorf("outbox: Config.Buckets %d out of range; allowed: 1 to %d (0 for the default, 8)", o.Buckets, maxBuckets)
	case o.IndexLimit < 0:
		return fmt.Errorf("outbox: Config.IndexLimit %d is negative", o.IndexLimit)
	case o.IndexBytes < 0:
		return fmt.Errorf("outbox: Config.IndexBytes %d is negative", o.IndexBytes)
	case o.MaxOpenFiles < 0:
		return fmt.Errorf("outbox: Config.MaxOpenFiles %d is negative", o.MaxOpenFiles)
	case o.FileCacheBytes < 0:
		return fmt.Errorf("outbox: Config.FileCacheBytes %d is negative", o.FileCacheBytes)
	}
	return nil
}

// Options is the name Config had before settings were called Config in
// every package.
//
// Deprecated: use Config. Options stays for one minor version.
type Options = Config

// CompactOptions is the name CompactConfig had before settings were
// called Config in every package.
//
// Deprecated: use CompactConfig. CompactOptions stays for one minor
// version.
type CompactOptions = CompactConfig
