package parquetbox

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

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
