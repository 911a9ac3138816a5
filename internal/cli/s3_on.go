//go:build s3

package cli

// The S3 driver brings the AWS SDK, whose initialization would slow every
// command; it is linked only into binaries built with -tags s3.
import _ "gocloud.dev/blob/s3blob"

const s3Linked = true
