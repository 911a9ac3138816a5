//go:build iceberg

package cli

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ctdispatch/ctdispatch/outbox/lakehouse"
)

// binaryTags are the build tags of the binaries the tests build: the
// ones this test binary was built with.
const binaryTags = "iceberg"

// The flags are registered in every build with their own default; it is
// the library's.
func TestIcebergGraceDefaultIsTheLibrarys(t *testing.T) {
	t.Parallel()
	require.Equal(t, lakehouse.DefaultGrace, defaultIcebergGrace)
}
