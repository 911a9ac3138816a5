//go:build !iceberg

package cli

// binaryTags are the build tags of the binaries the tests build: the
// ones this test binary was built with.
const binaryTags = ""
