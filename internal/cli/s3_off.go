//go:build !s3

package cli

// s3Linked says whether s3:// outboxes can be opened (build tag s3).
const s3Linked = false
