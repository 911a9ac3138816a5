package parquetbox

import (
	"errors"
	"fmt"
)

// UnavailableError says that the outbox cannot make appends durable, why
// (the cause, for example "no space left on device"), and where. It
// matches ErrUnavailable. The outbox keeps retrying and heals by itself.
type UnavailableError struct {
	// Path is the log segment or directory that could not be written.
	Path string
	// Err is the cause.
	Err error
}

// Error names the path, the cause and what happens next.
func (e *UnavailableError) Error() string {
	return fmt.Sprintf("outbox: unavailable: cannot write the log at %s: %v (appends are refused until a retry succeeds)", e.Path, e.Err)
}

// Unwrap returns the cause.
func (e *UnavailableError) Unwrap() error { return e.Err }

// Is makes an UnavailableError match ErrUnavailable.
func (e *UnavailableError) Is(target error) bool { return target == ErrUnavailable }

// unavailable marks the log unwritable: appends fail fast with err until
// heal succeeds.
func (o *Outbox) markUnavailable(path string, cause error) *UnavailableError {
	var ue *UnavailableError
	if errors.As(cause, &ue) {
		cause = ue.Err
	}
	ue = &UnavailableError{Path: path, Err: cause}
	if o.unavail.Swap(ue) == nil {
		o.log.Error("outbox: log not writable; refusing appends and retrying", "path", path, "err", cause)
	}
	return ue
}

// The log lines of the retries of an unavailable log.
const (
	msgHealed      = "outbox: log writable again; appends resume"
	msgStillFailed = "outbox: log still not writable; retrying"
)

// heal tries to open a fresh segment. On success appends are taken again;
// a failure is logged at debug level, with its cause.
func (o *Outbox) heal() error {
	err := o.ensureSegment()
	if err != nil {
		o.log.Debug(msgStillFailed, "path", o.walDir, "err", err)
		return err
	}
	o.unavail.Store(nil)
	o.log.Info(msgHealed, "path", o.cur.path)
	return nil
}
