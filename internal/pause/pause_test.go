package pause

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// The environment arms each listed point once per time it is listed.
func TestParseEnvCountsRepeatedNames(t *testing.T) {
	t.Parallel()
	tests := []struct {
		env  string
		want map[string]int
	}{
		{"", map[string]int{}},
		{CompactCommit, map[string]int{CompactCommit: 1}},
		{" a , b,a,,a ", map[string]int{"a": 3, "b": 1}},
	}
	for _, tt := range tests {
		require.Equal(t, tt.want, parseEnv(tt.env), tt.env)
	}
}
