package worker

import (
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// docs/worker.md and the README show the example program as it is in the
// repository, where it is compiled with everything else.
func TestDocsShowTheExampleProgram(t *testing.T) {
	t.Parallel()
	prog, err := os.ReadFile("internal/example/main.go")
	require.NoError(t, err)
	want := string(prog)[strings.Index(string(prog), "package main"):]
	for _, tc := range []struct{ page, after string }{
		{"../../docs/worker.md", ""},
		{"../../README.md", "<!-- readme-go: worker -->\n"},
	} {
		page, err := os.ReadFile(tc.page)
		require.NoError(t, err)
		_, rest, ok := strings.Cut(string(page), tc.after)
		require.True(t, ok, "%s has no %q", tc.page, tc.after)
		_, block, ok := strings.Cut(rest, "```go\n")
		require.True(t, ok, "%s has no go block", tc.page)
		block, _, ok = strings.Cut(block, "```\n")
		require.True(t, ok)
		require.Equal(t, want, block, tc.page)
	}
}
