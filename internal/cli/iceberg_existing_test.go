//go:build iceberg

package cli

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ctdispatch/ctdispatch/outbox"
)

// copyTree copies the directory src to dst.
func copyTree(t *testing.T, src, dst string) {
	t.Helper()
	require.NoError(t, filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(dst, rel), 0o700)
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), data, 0o600)
	}))
}

// tableFiles lists the data files under a root's table directories with
// their size and modification time: what "left as it was" compares.
func tableFiles(t *testing.T, root string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, tb := range []outbox.Table{outbox.TableDispatch, outbox.TableTimers, outbox.TableDeliveries} {
		dir := filepath.Join(root, string(tb))
		require.NoError(t, filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || strings.Contains(path, "/_schema/") {
				return err // the schema file, written when an old root is first opened
			}
			info, err := d.Info()
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(root, path)
			out[rel] = fmt.Sprintf("%d %s", info.Size(), info.ModTime().Format(time.RFC3339Nano))
			return nil
		}))
	}
	return out
}

// lakeOutput makes what stats and compact print of the Iceberg tables
// comparable with a golden file: snapshot IDs, commit times and the root
// vary from run to run, and so the columns' widths, which are collapsed.
func lakeOutput(s, root string) string {
	s = strings.ReplaceAll(s, root, "ROOT")
	s = regexp.MustCompile(`\b\d{15,20}\b`).ReplaceAllString(s, "SNAPSHOT")
	s = regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z`).ReplaceAllStringFunc(s, func(ts string) string {
		if strings.HasPrefix(ts, "2026-03-01") {
			return ts // the records' own times, fixed in the testdata
		}
		return "COMMITTED"
	})
	return regexp.MustCompile(` {2,}`).ReplaceAllString(s, "  ")
}

// An outbox written before publication existed (parquetbox's
// testdata/pretrace: files without version, trace_id and span_id, and
// create_calls as INT32) is published as it is: its files are registered,
// not rewritten; iceberg-go's scan reads the IDs query answers; stats and
// query --as-of print what the golden files hold, --as-of the same
// records as query now. --no-iceberg then leaves the root as it was.
//
// Time budget: about 3 s after the binary is built.
func TestBinaryExistingRootPublished(t *testing.T) {
	t.Parallel()
	root := filepath.Join(t.TempDir(), "outbox")
	copyTree(t, filepath.Join("..", "..", "outbox", "parquetbox", "testdata", "pretrace"), root)
	files := tableFiles(t, root)

	res := runBinary(t, nil, "", "compact", "--outbox", root, "--iceberg")
	require.Equal(t, 0, res.code, res.stderr)
	golden(t, "iceberg_existing_compact.golden", lakeOutput(res.stdout, root))
	require.Equal(t, files, tableFiles(t, root), "registered as they are")

	cat := fileCatalog(t, root)
	for _, c := range []struct {
		table outbox.Table
		ids   map[string]int
	}{
		{outbox.TableDispatch, map[string]int{"dispatch:old:a:1": 2}},
		{outbox.TableTimers, map[string]int{"timer:retry:old:a:1:1772370000": 1}},
	} {
		s, err := scanTable(context.Background(), cat, c.table)
		require.NoError(t, err)
		require.Equal(t, c.ids, s.ids, c.table)
		require.Empty(t, s.twice)
	}

	res = runBinary(t, nil, "", "stats", "--outbox", root)
	require.Equal(t, 0, res.code, res.stderr)
	golden(t, "iceberg_stats.golden", lakeOutput(res.stdout, root))

	now := time.Now().UTC().Format(time.RFC3339Nano)
	for _, format := range []string{"table", "json", "csv"} {
		res = runBinary(t, nil, "", "query", "--outbox", root, "--run", "old", "--as-of", now, "--format", format)
		require.Equal(t, 0, res.code, res.stderr)
		golden(t, "iceberg_query_as_of."+format+".golden", res.stdout)
		store := runBinary(t, nil, "", "query", "--outbox", root, "--run", "old", "--format", format)
		require.Equal(t, store.stdout, res.stdout, "the snapshot holds what the store answers")
	}

	for _, c := range []struct {
		args   []string
		code   int
		stderr string
	}{
		{[]string{"--run", "old", "--as-of", "2020-01-01T00:00:00Z"}, 1,
			"ctdispatch: --as-of 2020-01-01T00:00:00.000000Z: no snapshot of dispatch_outbox that old remains (replaced snapshots are kept for the outbox's grace, 1h0m0s): lakehouse: no snapshot of the table at that time: table dispatch_outbox has none at or before 2020-01-01T00:00:00Z\n"},
		{[]string{"--run", "old", "--as-of", "yesterday"}, 2,
			"ctdispatch: --as-of \"yesterday\" is not an RFC 3339 time (2026-11-29T09:00:00Z)\n"},
		{[]string{"--run", "old", "--as-of", now, "--history"}, 2,
			"ctdispatch: --as-of and --history exclude each other: a snapshot is read as each ID's state at that time\n"},
		{[]string{"--run", "nobody", "--as-of", now}, 1,
			"ctdispatch: no record with run_id \"nobody\" in " + root + " as of " + formatTime(mustTime(t, now)) + "\n"},
	} {
		res = runBinary(t, nil, "", append([]string{"query", "--outbox", root}, c.args...)...)
		require.Equal(t, c.stderr, res.stderr, c.args)
		require.Equal(t, c.code, res.code, c.args)
		require.Empty(t, res.stdout)
	}

	res = runBinary(t, nil, "", "compact", "--outbox", root, "--no-iceberg")
	require.Equal(t, 0, res.code, res.stderr)
	require.NotContains(t, res.stdout, "iceberg")
	require.NoFileExists(t, filepath.Join(root, "_iceberg", "publication.json"))
	require.Equal(t, files, tableFiles(t, root), "left as it was")
	res = runBinary(t, nil, "", "stats", "--outbox", root)
	require.Equal(t, 0, res.code, res.stderr)
	require.NotContains(t, res.stdout, "ICEBERG")
	res = runBinary(t, nil, "", "query", "--outbox", root, "--run", "old", "--as-of", now)
	require.Equal(t, 1, res.code)
	require.Equal(t, "ctdispatch: outbox "+root+" does not publish Iceberg tables; turn publication on with: ctdispatch compact --outbox "+root+" --iceberg\n", res.stderr)
}

func mustTime(t *testing.T, s string) time.Time {
	t.Helper()
	at, err := time.Parse(time.RFC3339Nano, s)
	require.NoError(t, err)
	return at
}
