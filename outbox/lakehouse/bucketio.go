package lakehouse

import (
	"context"
	"net/url"

	iceio "github.com/apache/iceberg-go/io"
	"github.com/apache/iceberg-go/io/gocloud/blobfs"
	"gocloud.dev/blob"
)

// Iceberg reads and writes a bucket root (gs://, s3:// in a binary built with the S3 driver) through the
// gocloud.dev/blob driver the program linked for that scheme, the one
// the outbox itself uses: iceberg-go's own Cloud Storage IO imports
// gocloud's gcsblob, whose init registers "gs" with gocloud's default
// mux a second time beside the program's driver, and a binary linking
// both panics at start. The bucket is opened by its URL, as the outbox
// opens it, so the driver's own settings ($STORAGE_EMULATOR_HOST for
// an emulator, its credentials) apply.
func init() {
	for _, scheme := range []string{"gs", "s3"} {
		iceio.Register(scheme, func(ctx context.Context, u *url.URL, _ map[string]string) (iceio.IO, error) {
			b, err := blob.OpenBucket(ctx, u.Scheme+"://"+u.Host)
			if err != nil {
				return nil, err
			}
			return blobfs.New(ctx, b, blobfs.DefaultObjectLocationExtractor(u.Host, u.Scheme)), nil
		})
	}
}
