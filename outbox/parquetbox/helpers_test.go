package parquetbox

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"

	"github.com/ctdispatch/ctdispatch/outbox"
)

// Helpers only the tests use, kept out of the production files.

// openLocalParquet opens a file on disk.
func openLocalParquet(path string, t outbox.Table) (*pqFile, error) {
	f, st, err := openRegular(path)
	if err != nil {
		var fe *FileError
		if errors.As(err, &fe) {
			return nil, fe
		}
		return nil, &FileError{Path: path, Reason: "cannot open", Err: err}
	}
	p, err := openParquet(path, t, f, st.Size())
	if err != nil {
		f.Close()
		return nil, err
	}
	p.name = filepath.Base(path)
	return p, nil
}

// writeParquet writes recs (sorted by sortRecords) as one Parquet file at
// a local path, atomically.
func writeParquet(path string, t outbox.Table, recs []outbox.Record) error {
	af, err := createAtomic(path)
	if err != nil {
		return fmt.Errorf("outbox: create %s: %w", path, err)
	}
	ptrs := make([]*outbox.Record, len(recs))
	for i := range recs {
		ptrs[i] = &recs[i]
	}
	if err := writeRecords(af, t, ptrs); err != nil {
		return fmt.Errorf("outbox: write %s: %w", path, err)
	}
	return nil
}

// eachFile calls read for every table file. A file that turns out damaged
// is reported and skipped; if one vanished (another process compacted it
// away after a cached listing), the files are listed again and read once
// more, so its data is found in the file that replaced it. Records read
// twice are harmless to every caller (they fold or deduplicate).
func (o *Outbox) eachFile(ctx context.Context, t outbox.Table, read func(*openFile) error) error {
	acquire := func(ctx context.Context) ([]*openFile, map[string]*admission, error) {
		files, err := o.files[t].acquire(ctx)
		return files, nil, err
	}
	return o.eachFileOf(ctx, t, acquire, func(f *openFile, _ *admission) error { return read(f) })
}

// scanAll feeds fn every record of table t from every source, file by
// file, listing the files afresh. Used by Pending and tools; it reads
// everything.
func (o *Outbox) scanAll(ctx context.Context, t outbox.Table, fn func(*outbox.Record)) error {
	o.files[t].invalidate()
	live, err := o.liveRecords()
	if err != nil {
		return err
	}
	for _, recs := range live {
		for i := range recs {
			if recs[i].Table == t {
				fn(&recs[i])
			}
		}
	}
	return o.eachFile(ctx, t, func(f *openFile) error {
		return f.scan(func(r outbox.Record) error { fn(&r); return nil })
	})
}

// openFiles counts the files open now.
func (fs *fileSet) openFiles() int {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return len(fs.files)
}

// fileErrors returns the files a compaction skipped, as the
// *FileErrors they are.
func fileErrors(errs []error) []*FileError {
	out := make([]*FileError, 0, len(errs))
	for _, err := range errs {
		out = append(out, err.(*FileError))
	}
	return out
}
