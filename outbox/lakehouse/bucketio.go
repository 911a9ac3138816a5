package lakehouse

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"sync"

	iceio "github.com/apache/iceberg-go/io"
	"github.com/apache/iceberg-go/io/gocloud/blobfs"
	"gocloud.dev/blob"

	"github.com/ctdispatch/ctdispatch/outbox/parquetbox"
)

// rootBuckets maps a bucket root's location ("gs://bucket/prefix") to the
// bucket its outbox reads and writes through, for the Iceberg IO below.
var rootBuckets sync.Map

// useRootBucket has Iceberg read and write the files under root through
// the outbox's own bucket (nil on a directory root: nothing to do), so
// the metadata goes where the data is, with the same driver, endpoint
// and credentials, whether the program opened the bucket by URL or gave
// it in parquetbox's Config.Bucket.
func useRootBucket(ob *parquetbox.Outbox, root string) {
	if b := ob.Bucket(); b != nil {
		rootBuckets.Store(strings.TrimSuffix(root, "/"), b)
	}
}

// Iceberg reads and writes a bucket root (gs://, s3:// in a binary built
// with the S3 driver) through gocloud.dev/blob: the outbox's own bucket
// when one is registered for the location's root, otherwise the driver
// the program linked for the scheme, opened by URL as the outbox opens
// it. iceberg-go's own Cloud Storage IO is not linked: it imports
// gocloud's gcsblob, whose init registers "gs" with gocloud's default
// mux a second time beside a program's own driver, and a binary linking
// both panics at start.
func init() {
	for _, scheme := range []string{"gs", "s3"} {
		iceio.Register(scheme, openBucketIO)
	}
}

// openBucketIO is the IO for the location u.
func openBucketIO(ctx context.Context, u *url.URL, _ map[string]string) (iceio.IO, error) {
	loc := u.Scheme + "://" + u.Host + u.Path
	var (
		root   string
		bucket *blob.Bucket
	)
	rootBuckets.Range(func(k, v any) bool {
		r := k.(string)
		if (loc == r || strings.HasPrefix(loc, r+"/")) && len(r) > len(root) {
			root, bucket = r, v.(*blob.Bucket)
		}
		return true
	})
	if bucket == nil {
		b, err := blob.OpenBucket(ctx, u.Scheme+"://"+u.Host)
		if err != nil {
			return nil, err
		}
		return blobfs.New(ctx, b, blobfs.DefaultObjectLocationExtractor(u.Host, u.Scheme)), nil
	}
	// The outbox's bucket may carry the root's prefix: a location's key
	// is its path below the root.
	return blobfs.New(ctx, bucket, func(location string) (blobfs.ObjectLocation, error) {
		if !strings.HasPrefix(location, root+"/") {
			return blobfs.ObjectLocation{}, fmt.Errorf("lakehouse: %s is not under the outbox's root %s", location, root)
		}
		return blobfs.NewObjectLocation(u.Scheme, u.Host, strings.TrimPrefix(location, root+"/")), nil
	}), nil
}
