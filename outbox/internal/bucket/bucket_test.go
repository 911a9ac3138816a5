package bucket

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// The attempts of a task share its bucket, and one bucket (or none) means
// no prefix.
func TestFilePrefix(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		id      string
		buckets int
		want    string
	}{
		{"dispatch:run1:extract:1", 8, "b4of8-"},
		{"dispatch:run1:extract:2", 8, "b4of8-"},
		{"timer:run1:extract:1", 8, "b7of8-"},
		{"dispatch:run1:extract:1", 256, "b140of256-"},
		{"dispatch:run1:extract:1", 1, ""},
		{"dispatch:run1:extract:1", 0, ""},
	} {
		require.Equal(t, tc.want, FilePrefix(tc.id, tc.buckets), "%s in %d", tc.id, tc.buckets)
	}
}
