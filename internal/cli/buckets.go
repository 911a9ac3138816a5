package cli

import (
	"fmt"
	"net/url"
	"strings"

	// gs:// through the Cloud Storage JSON API client, which costs a
	// command that never opens a bucket almost nothing at start-up.
	_ "github.com/ctdispatch/ctdispatch/internal/gcsjson"
)

// isBucketURL reports whether an --outbox value names a bucket rather than
// a directory.
func isBucketURL(root string) bool { return strings.Contains(root, "://") }

// checkBucketURL refuses a bucket scheme this binary cannot open, given
// as --outbox, saying how to get one that can.
func checkBucketURL(root string) error { return checkBucketFlag("--outbox", root) }

// checkBucketFlag is checkBucketURL for a bucket given as flag.
func checkBucketFlag(flag, root string) error {
	u, err := url.Parse(root)
	if err != nil {
		return usagef("%s %q is not a bucket URL: %s", flag, redact(root), urlReason(err))
	}
	switch u.Scheme {
	case "gs", "mem":
		return nil
	case "s3":
		if s3Linked {
			return nil
		}
		return fmt.Errorf("%s %s: this ctdispatch was built without the S3 driver; build one with: go build -tags s3 -o bin/ctdispatch ./cmd/ctdispatch", flag, redact(root))
	}
	return usagef("%s %q: scheme %q unknown; allowed: a directory, gs://BUCKET[?prefix=P/], s3://BUCKET[?region=R&prefix=P/] or mem://", flag, redact(root), u.Scheme)
}

// checkLogDir requires --log-dir with a bucket root for commands that
// write: the write-ahead log lives on local disk.
func checkLogDir(root, logDir string) error {
	if isBucketURL(root) && logDir == "" {
		return usagef("--log-dir DIR is required with a bucket outbox (%s): the write-ahead log stays on local disk", redact(root))
	}
	return nil
}
