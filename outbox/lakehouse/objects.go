package lakehouse

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	"gocloud.dev/blob"
	"gocloud.dev/gcerrors"
)

// metaDir is the root's directory of Iceberg metadata and of this
// package's own objects: outside every table directory, so a glob of a
// table's Parquet files and the store's layout check never meet it.
const metaDir = "_iceberg"

// objects reads and writes small objects under a root: the publication
// switch and the publishers' leases.
type objects interface {
	// get returns an object's bytes, or an error matching fs.ErrNotExist.
	get(ctx context.Context, key string) ([]byte, error)
	// put writes an object whole, replacing it.
	put(ctx context.Context, key string, data []byte) error
	// create writes an object only if it does not exist (else an error
	// matching fs.ErrExist).
	create(ctx context.Context, key string, data []byte) error
	// remove deletes an object; one that is gone already is no error.
	remove(ctx context.Context, key string) error
	// list returns the keys under a prefix, sorted.
	list(ctx context.Context, prefix string) ([]string, error)
	close() error
}

// isBucketRoot says whether an outbox root is a bucket URL rather than a
// directory.
func isBucketRoot(root string) bool {
	scheme, _, ok := strings.Cut(root, "://")
	return ok && scheme != "file"
}

// openObjects opens the objects of an outbox root: a directory's files, or
// the bucket a root URL names (its driver registered, as by
// outbox/cloudblob).
func openObjects(ctx context.Context, root string) (objects, error) {
	if !isBucketRoot(root) {
		return dirObjects{root: strings.TrimPrefix(root, "file://")}, nil
	}
	if strings.HasPrefix(root, "mem://") {
		return nil, fmt.Errorf("lakehouse: root %q is a mem:// bucket, which lives in one process's memory where no catalog can read it; publish a directory root or a gs:// or s3:// bucket", root)
	}
	b, err := blob.OpenBucket(ctx, root)
	if err != nil {
		return nil, fmt.Errorf("lakehouse: open root %q: %w", root, err)
	}
	return bucketObjects{b: b}, nil
}

type dirObjects struct{ root string }

func (d dirObjects) path(key string) string { return filepath.Join(d.root, filepath.FromSlash(key)) }

func (d dirObjects) get(_ context.Context, key string) ([]byte, error) {
	return os.ReadFile(d.path(key))
}

func (d dirObjects) put(_ context.Context, key string, data []byte) error {
	p := d.path(key)
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(p), "."+filepath.Base(p)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), p)
}

func (d dirObjects) create(_ context.Context, key string, data []byte) error {
	p := d.path(key)
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return err
	}
	// Written under a temporary name and linked into place, so that the
	// object appears whole or not at all, and only if absent.
	tmp, err := os.CreateTemp(filepath.Dir(p), "."+filepath.Base(p)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	_, werr := tmp.Write(data)
	if err := errors.Join(werr, tmp.Sync(), tmp.Close()); err != nil {
		return err
	}
	return os.Link(tmp.Name(), p)
}

func (d dirObjects) remove(_ context.Context, key string) error {
	if err := os.Remove(d.path(key)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

func (d dirObjects) list(_ context.Context, prefix string) ([]string, error) {
	dir, base := path.Split(prefix)
	entries, err := os.ReadDir(d.path(dir))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var keys []string
	for _, e := range entries {
		if e.Type().IsRegular() && strings.HasPrefix(e.Name(), base) && !strings.HasPrefix(e.Name(), ".") {
			keys = append(keys, dir+e.Name())
		}
	}
	return keys, nil
}

func (dirObjects) close() error { return nil }

type bucketObjects struct{ b *blob.Bucket }

func (o bucketObjects) get(ctx context.Context, key string) ([]byte, error) {
	data, err := o.b.ReadAll(ctx, key)
	if gcerrors.Code(err) == gcerrors.NotFound {
		return nil, fmt.Errorf("%s: %w", key, fs.ErrNotExist)
	}
	return data, err
}

func (o bucketObjects) put(ctx context.Context, key string, data []byte) error {
	return o.b.WriteAll(ctx, key, data, nil)
}

func (o bucketObjects) create(ctx context.Context, key string, data []byte) error {
	err := o.b.WriteAll(ctx, key, data, &blob.WriterOptions{IfNotExist: true})
	switch gcerrors.Code(err) {
	case gcerrors.FailedPrecondition, gcerrors.AlreadyExists:
		return fmt.Errorf("%s: %w", key, fs.ErrExist)
	}
	return err
}

func (o bucketObjects) remove(ctx context.Context, key string) error {
	if err := o.b.Delete(ctx, key); err != nil && gcerrors.Code(err) != gcerrors.NotFound {
		return err
	}
	return nil
}

func (o bucketObjects) list(ctx context.Context, prefix string) ([]string, error) {
	var keys []string
	it := o.b.List(&blob.ListOptions{Prefix: prefix, Delimiter: "/"})
	for {
		obj, err := it.Next(ctx)
		if errors.Is(err, io.EOF) {
			return keys, nil
		}
		if err != nil {
			return nil, err
		}
		if !obj.IsDir {
			keys = append(keys, obj.Key)
		}
	}
}

func (o bucketObjects) close() error { return o.b.Close() }
