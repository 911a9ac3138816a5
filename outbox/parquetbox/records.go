package parquetbox

import (
	"context"

	"github.com/ctdispatch/ctdispatch/outbox"
)

// Records calls fn with every record of table t: the whole history of
// every ID, from the write-ahead logs not yet converted and then from the
// Parquet files, in no particular order, leaving out foreign records
// (see outbox.ErrForeignRecord) and damaged files (see Damaged). A log
// converted, or a file compacted away, while Records runs may show its
// records twice (the files are then read again from a new listing); a
// consumer that copies the records elsewhere (pgbox's Import) skips a
// record it holds already. An error from fn stops the walk and is
// returned.
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
	acquire := func(ctx context.Context) ([]*openFile, map[string]*admission, error) {
		o.files[t].invalidate() // every file, as listed now
		files, err := o.files[t].acquire(ctx)
		return files, nil, err
	}
	// An error of fn stops the walk; an error of a file's own marks it
	// damaged (or, when it vanished, reads the new listing) as reads do.
	var stop error
	err = o.eachFileOf(ctx, t, acquire, func(f *openFile, _ *admission) error {
		if stop != nil {
			return nil
		}
		err := f.scan(func(r outbox.Record) error {
			if stop = trusted(r); stop != nil {
				return stop
			}
			return nil
		})
		if stop != nil {
			return nil
		}
		return err
	})
	if stop != nil {
		return stop
	}
	return err
}
