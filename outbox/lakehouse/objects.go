package lakehouse

import (
	"context"
	"fmt"
	"io/fs"
	"strings"

	"github.com/ctdispatch/ctdispatch/outbox/parquetbox"
)

// metaDir is the root's directory of Iceberg metadata and of this
// package's own objects: outside every table directory, so a glob of a
// table's Parquet files and the store's layout check never meet it.
const metaDir = parquetbox.IcebergDir

// objects reads and writes small objects under the root's metaDir (the
// publication switch, the publishers' leases), through the outbox, so a
// bucket root given as an opened bucket works as a URL does.
type objects struct{ ob *parquetbox.Outbox }

// get returns an object's bytes, or an error matching fs.ErrNotExist.
func (o objects) get(ctx context.Context, key string) ([]byte, error) {
	return o.ob.GetRootObject(ctx, key)
}

// put writes an object whole, replacing it.
func (o objects) put(ctx context.Context, key string, data []byte) error {
	return o.ob.PutRootObject(ctx, key, data)
}

// create writes an object only if it does not exist (else an error
// matching fs.ErrExist).
func (o objects) create(ctx context.Context, key string, data []byte) error {
	created, err := o.ob.CreateRootObject(ctx, key, data)
	if err == nil && !created {
		return fmt.Errorf("%s: %w", key, fs.ErrExist)
	}
	return err
}

// remove deletes an object; one that is gone already is no error.
func (o objects) remove(ctx context.Context, key string) error {
	return o.ob.DeleteRootObject(ctx, key)
}

// list returns the keys under a prefix, sorted.
func (o objects) list(ctx context.Context, prefix string) ([]string, error) {
	return o.ob.RootObjectKeys(ctx, prefix)
}

// isBucketRoot says whether an outbox root is a bucket URL rather than a
// directory.
func isBucketRoot(root string) bool {
	scheme, _, ok := strings.Cut(root, "://")
	return ok && scheme != "file"
}
