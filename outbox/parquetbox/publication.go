package parquetbox

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path"
	"sort"
	"strings"
)

// IcebergDir is the directory under the root, beside the tables and never
// inside one, that belongs to the tables' Iceberg publication (package
// outbox/lakehouse): its switch, and the metadata of a file-based catalog.
// Layout checks, reports of entries outside the layout and Stats look
// only inside the tables, so nothing under it is taken for table data.
const IcebergDir = "_iceberg"

// PublicationKey is the root object whose presence says that the tables
// are published (as Iceberg tables, by package outbox/lakehouse): while it
// exists, Compact removes no file that the store's readers have read
// (the inputs it folds, the files of a unit retention drops whole). They
// stay on storage, invisible to this package's readers, so that a
// snapshot naming them stays readable, until the publisher removes them
// with RemoveReplaced. Outputs of compactions that lost, and temporaries,
// are removed as before. A run's file (a log segment's, or one WriteRun
// writes) is then never written over: a file already there under its name
// is checked and kept. Its content is the publisher's; this package only
// looks for it, before it removes anything and before it writes a run.
const PublicationKey = IcebergDir + "/publication.json"

// maxRootObjectBytes bounds what GetRootObject reads.
const maxRootObjectBytes = 16 << 20

// checkRootKey refuses a key outside IcebergDir or not in its plain
// form, so that the root objects a publisher writes can never be a table's
// file, a lease, a commit or a manifest.
func checkRootKey(key string) error {
	rest, ok := strings.CutPrefix(key, IcebergDir+"/")
	bad := !ok || rest == "" || path.Clean(key) != key
	for _, elem := range strings.Split(rest, "/") {
		bad = bad || elem == "" || strings.HasPrefix(elem, ".")
	}
	if bad {
		return fmt.Errorf("outbox: root object key %q: want %s/<name>, in clean form, no element empty or starting with \".\"", key, IcebergDir)
	}
	return nil
}

// PutRootObject writes data under key, a path under IcebergDir relative to
// the root ("_iceberg/publication.json"), replacing what was there. The
// object appears whole or not at all. It works on an outbox opened
// ReadOnly too.
func (o *Outbox) PutRootObject(ctx context.Context, key string, data []byte) error {
	if err := o.checkRootObject(ctx, key); err != nil {
		return err
	}
	return o.store.put(ctx, key, data)
}

// CreateRootObject writes data under key (as PutRootObject) only if
// nothing is there, atomically: of two calls for one key, one creates it
// (a hard link that fails if the name exists on a disk, a conditional
// create on a bucket). created is false, and nothing is written, when the
// key existed.
func (o *Outbox) CreateRootObject(ctx context.Context, key string, data []byte) (created bool, err error) {
	if err := o.checkRootObject(ctx, key); err != nil {
		return false, err
	}
	return o.store.putNew(ctx, key, data)
}

// GetRootObject reads the object under key (see PutRootObject), of at
// most 16 MiB. A missing one is an error matching fs.ErrNotExist.
func (o *Outbox) GetRootObject(ctx context.Context, key string) ([]byte, error) {
	if err := o.checkRootObject(ctx, key); err != nil {
		return nil, err
	}
	return o.store.get(ctx, key, maxRootObjectBytes)
}

// DeleteRootObject removes the object under key (see PutRootObject); a
// missing one is not an error.
func (o *Outbox) DeleteRootObject(ctx context.Context, key string) error {
	if err := o.checkRootObject(ctx, key); err != nil {
		return err
	}
	return o.store.del(ctx, key)
}

// RootObjectKeys returns, sorted, the keys of the root objects in the
// directory of prefix whose names start with the rest of it:
// "_iceberg/leases/t." lists "_iceberg/leases/t.000001" but not
// "_iceberg/leases/t.x/y". prefix lies under IcebergDir, as keys do.
func (o *Outbox) RootObjectKeys(ctx context.Context, prefix string) ([]string, error) {
	if err := o.checkOpen(); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if checkRootKey(prefix+"x") != nil {
		return nil, fmt.Errorf("outbox: root object prefix %q: want %s/ or a prefix of a key under it", prefix, IcebergDir)
	}
	keys, err := o.store.keys(ctx, prefix)
	if err != nil {
		return nil, err
	}
	dir, _ := path.Split(prefix)
	out := keys[:0]
	for _, k := range keys {
		// A bucket lists what lies deeper too; a directory does not.
		if !strings.Contains(k[len(dir):], "/") {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out, nil
}

func (o *Outbox) checkRootObject(ctx context.Context, key string) error {
	if err := o.checkOpen(); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return checkRootKey(key)
}

// published reports whether the publication switch (PublicationKey) is
// there. A switch that cannot be read counts as there, logged: keeping a
// file a snapshot may name is safe, removing it is not.
func (o *Outbox) published(ctx context.Context) bool {
	_, err := o.store.get(ctx, PublicationKey, maxRootObjectBytes)
	switch {
	case err == nil:
		return true
	case errors.Is(err, os.ErrNotExist):
		return false
	}
	o.log.Warn("outbox: could not read the publication switch; files are kept and runs are not written over, as when it is there", "key", PublicationKey, "err", err)
	return true
}
