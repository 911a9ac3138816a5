package parquetbox

import (
	"errors"
	"fmt"

	"github.com/ctdispatch/ctdispatch/outbox"
)

// Sentinel errors; match them with errors.Is.
var (
	// ErrClosed is returned by every method called after Close.
	ErrClosed = errors.New("outbox: closed")
	// ErrDamaged marks a file that cannot be read as what it claims to be
	// (a truncated Parquet file, a WAL frame with a bad checksum).
	ErrDamaged = errors.New("outbox: damaged file")
	// ErrForeignFile marks a readable Parquet file that is not an outbox
	// table (no ID column, or an ID column that is not a string).
	ErrForeignFile = errors.New("outbox: foreign file")
	// ErrOutsideLayout marks an entry under a table directory that is not
	// read because it is outside the layout
	// <table>/created_date=YYYY-MM-DD/<file>.parquet: a file directly under
	// the table, a directory with another name or an impossible date, a
	// symbolic link, or a partition directory the process cannot read
	// (then the FileError also matches the cause, fs.ErrPermission). It is
	// skipped and reported like a damaged file: an answer may miss what
	// it holds.
	ErrOutsideLayout = errors.New("outbox: outside the table layout")
	// ErrForeignRecord is outbox.ErrForeignRecord, the one error every
	// store refuses a foreign record with, under the name this package
	// gave it first: the two are the same value, so errors.Is matches an
	// Append's refusal with either.
	//
	// Deprecated: use outbox.ErrForeignRecord.
	ErrForeignRecord = outbox.ErrForeignRecord
	// ErrUnavailable is returned at once by Append while
	// the log cannot be written (a full disk, a permission taken away): no
	// record is accepted that cannot be made durable. The error is an
	// *UnavailableError naming the cause and the path. The outbox retries
	// by itself and takes appends again once a write succeeds; records
	// accepted before stay safe.
	ErrUnavailable = errors.New("outbox: unavailable")
	// ErrProcessorInUse is returned by Open when another live process holds
	// the same processor UUID.
	ErrProcessorInUse = errors.New("outbox: processor UUID in use by another process")
	// ErrReadOnly is returned by Append and Flush on an outbox opened with
	// Config.ReadOnly.
	ErrReadOnly = errors.New("outbox: opened read-only")
)

// FileError reports a file (or directory) that was skipped: its path and
// why. It matches ErrForeignFile when the file is valid Parquet but not an
// outbox table, ErrOutsideLayout for an entry outside the table layout,
// and ErrDamaged otherwise.
type FileError struct {
	// Path is the file's path.
	Path string
	// Reason says what is wrong, in words.
	Reason string
	// Dir is true when the entry skipped is a directory (or a link to
	// one), with everything under it.
	Dir bool
	// Err is the underlying cause, if any.
	Err error
}

// Error says which file, what is wrong with it, and the cause.
func (e *FileError) Error() string {
	if e.Err != nil && !errors.Is(e.Err, ErrForeignFile) && !errors.Is(e.Err, ErrOutsideLayout) {
		return fmt.Sprintf("outbox: %s: %s: %v", e.Path, e.Reason, e.Err)
	}
	return fmt.Sprintf("outbox: %s: %s", e.Path, e.Reason)
}

// Unwrap returns the cause.
func (e *FileError) Unwrap() error { return e.Err }

// Is makes a FileError match ErrDamaged unless it is a foreign file or
// outside the layout.
func (e *FileError) Is(target error) bool {
	return target == ErrDamaged && !errors.Is(e.Err, ErrForeignFile) && !errors.Is(e.Err, ErrOutsideLayout)
}
