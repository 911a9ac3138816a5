// Package gcsjson lets gocloud.dev/blob open gs:// buckets through Google's
// Cloud Storage JSON API client (google.golang.org/api/storage/v1), for
// programs that must start fast. Import it for its side effect:
//
//	import _ "github.com/ctdispatch/ctdispatch/internal/gcsjson"
//
// # Why not gcsblob
//
// gocloud.dev/blob/gcsblob is built on cloud.google.com/go/storage, whose
// gRPC, xDS and metrics dependencies are initialized at start-up by every
// process that links them, bucket or not: for the ctdispatch CLI that is
// most of a short command's run time. The JSON API client is a thin layer
// over net/http that the Cloud Tasks client already links, so registering
// gs:// this way costs a program almost nothing until it opens a bucket.
// A program must not link both this package and gcsblob: each registers
// the gs scheme, and the second registration panics.
//
// # Credentials and emulators
//
// Application default credentials, as every Google client finds them. When
// STORAGE_EMULATOR_HOST is set (host:port, or a URL), the client talks to
// that emulator (fake-gcs-server, say) without authentication.
//
// # What is supported
//
// Everything the outbox uses: listing with prefix and delimiter, attributes,
// ranged reads, streamed writes (IfNotExist maps to ifGenerationMatch=0 and
// fails with FailedPrecondition), copy and delete. Signed URLs are not.
package gcsjson
