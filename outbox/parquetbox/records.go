package parquetbox

import (
	"context"

	"github.com/ctdispatch/ctdispatch/outbox"
)

// Records calls fn with every record of table t: the whole history of
// every ID, from the write-ahead logs not yet converted and then from the
// Parquet files, in no particular order, leaving out foreign records (see
// ErrForeignRecord) and damaged files (see Damaged). A log converted while
// Records runs may show its records twice, once from each; a consumer that
// copies the records elsewhere (pgbox's Import) skips a record it holds
// already. An error from fn stops the walk and is returned.
func (o *Outbox) Records(ctx context.Context, t outbox.Table, fn func(outbox.Record) error) error {
	if err := t.Validate(); err != nil {
		return err
	}
	if err := o.checkOpen(); err != nil {
		return err
	}
	live, err := o.liveRecords()
	if err != nil {
		return err
	}
	trusted := func(r outbox.Record) error {
		if r.Table != t || !r.Trusted() {
			return nil
		}
		return fn(r)
	}
	for _, recs := range live {
		for _, r := range recs {
			if err := trusted(r); err != nil {
				return err
			}
		}
	}
	fs := o.files[t]
	fs.invalidate() // every file, as listed now
	files, err := fs.acquire(ctx)
	if err != nil {
		return err
	}
	defer fs.release(files)
	for _, f := range files {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := f.scan(trusted); err != nil {
			return err
		}
	}
	return nil
}
