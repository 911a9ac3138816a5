// Package duckdbtest runs SQL in DuckDB, through its Node.js package, for
// the tests that check what analysts see in the outbox's Parquet tables,
// and extracts the DuckDB statements docs/outbox.md gives them.
//
// DuckDB is reached through @duckdb/node-api: CTDISPATCH_DUCKDB_NODE_MODULES
// names a node_modules directory holding it (.ci/run installs one). Without
// it, or without node, a test that asks for DuckDB is skipped with a reason
// that starts "needs duckdb:" or "needs node:".
package duckdbtest

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// Node returns the node binary and the node_modules holding
// @duckdb/node-api, or skips t.
func Node(t testing.TB) (node, modules string) {
	t.Helper()
	modules = os.Getenv("CTDISPATCH_DUCKDB_NODE_MODULES")
	if modules == "" {
		t.Skip("needs duckdb: set CTDISPATCH_DUCKDB_NODE_MODULES to a node_modules with @duckdb/node-api to run DuckDB")
	}
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("needs node: node is not on PATH (apt-get install nodejs npm): DuckDB runs through its Node.js package")
	}
	return node, modules
}

// here is this package's directory, where its script lives.
func here() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Dir(file)
}

// Query runs the SQL statements in one DuckDB connection and returns each
// one's rows as a JSON array, one line a statement.
func Query(t testing.TB, sql ...string) []string {
	t.Helper()
	node, modules := Node(t)
	cmd := exec.Command(node, append([]string{filepath.Join(here(), "duckdb_query.cjs")}, sql...)...)
	cmd.Env = append(os.Environ(), "NODE_PATH="+modules)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, stderr.String())
	return strings.Split(strings.TrimSpace(string(out)), "\n")
}

// DocsStatements returns the DuckDB statements of docs/outbox.md (its sql
// blocks that read Parquet, one statement each), with the documented
// outbox and worker outbox directories replaced by root and workerRoot. A
// statement that uses the CTEs of the one before it ("with the same two
// CTEs") gets them.
func DocsStatements(t testing.TB, root, workerRoot string) []string {
	t.Helper()
	doc, err := os.ReadFile(filepath.Join(here(), "..", "..", "..", "docs", "outbox.md"))
	require.NoError(t, err)
	roots := strings.NewReplacer("/var/lib/ctdispatch/worker-outbox", workerRoot, "/var/lib/ctdispatch/outbox", root)
	var out []string
	for _, m := range regexp.MustCompile("(?s)```sql\n(.*?)```").FindAllStringSubmatch(string(doc), -1) {
		if !strings.Contains(m[1], "read_parquet(") {
			continue // BigQuery's
		}
		for _, stmt := range strings.Split(roots.Replace(m[1]), ";\n") {
			if stmt = strings.TrimSpace(stmt); stmt == "" {
				continue
			}
			if strings.Contains(stmt, "with the same two CTEs") {
				prev := out[len(out)-1]
				stmt = prev[:strings.LastIndex(prev, "\nSELECT ")] + "\n" + stmt
			}
			out = append(out, stmt)
		}
	}
	return out
}
