// Package cloudblob lets parquetbox.Config.Root name a Google Cloud Storage
// bucket (gs://bucket/prefix) or an S3 bucket (s3://bucket?region=…).
// Import it for its side effect:
//
//	import _ "github.com/ctdispatch/ctdispatch/outbox/cloudblob"
//
// The outbox package itself registers only mem://: the cloud drivers bring
// the GCS and AWS client libraries, whose initialization would slow every
// short-lived program that links the outbox (such as the CLI) by tens of
// milliseconds even when it never touches a bucket.
package cloudblob

import (

	// The drivers, registered with gocloud.dev/blob's URL opener.
	_ "gocloud.dev/blob/gcsblob"
	_ "gocloud.dev/blob/s3blob"
)
