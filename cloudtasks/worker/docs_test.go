package worker

import (
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// docs/worker.md shows the example program as it is in the repository,
// where it is compiled with everything else.
func TestDocsShowTheExampleProgram(t *testing.T) {
	t.Parallel()
	page, err := os.ReadFile("../../docs/worker.md")
	require.NoError(t, err)
	prog, err := os.ReadFile("internal/example/main.go")
	require.NoError(t, err)
	_, block, ok := strings.Cut(string(page), "```go\n")
	require.True(t, ok, "docs/worker.md has no go block")
	block, _, ok = strings.Cut(block, "```\n")
	require.True(t, ok)
	want := string(prog)[strings.Index(string(prog), "package main"):]
	require.Equal(t, want, block)
}
