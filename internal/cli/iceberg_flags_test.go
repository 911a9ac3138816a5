//go:build iceberg

package cli

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// compact's Iceberg flags: what each combination does to a directory
// root's switch, and the refusals (exit 2, the switch as it was).
func TestCompactIcebergFlags(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	sw := filepath.Join(root, "_iceberg", "publication.json")
	switchIs := func(want string) {
		t.Helper()
		data, err := os.ReadFile(sw)
		if want == "" {
			require.ErrorIs(t, err, os.ErrNotExist)
			return
		}
		require.NoError(t, err)
		require.JSONEq(t, want, string(data))
	}
	steps := []struct {
		args   []string
		code   int
		stderr string
		after  string // the switch afterwards ("" absent)
	}{
		{[]string{"--iceberg", "--no-iceberg"}, 2, "ctdispatch: --iceberg and --no-iceberg exclude each other\n", ""},
		{[]string{"--iceberg-catalog", "https://catalog.example/"}, 2,
			"ctdispatch: this outbox does not publish Iceberg tables; add --iceberg to turn publication on with --iceberg-catalog and --iceberg-grace\n", ""},
		{[]string{"--iceberg", "--iceberg-catalog", "ftp://x"}, 2,
			"ctdispatch: --iceberg-catalog ftp://x: want postgres://… (the SQL catalog), http(s)://… (a REST catalog), or nothing for the file-based catalog\n", ""},
		{[]string{"--iceberg", "--iceberg-grace", "500ms"}, 2, "ctdispatch: --iceberg-grace 500ms is below the minimum 1s\n", ""},
		{[]string{"--no-iceberg", "--iceberg-grace", "2h"}, 2, "ctdispatch: --iceberg-catalog and --iceberg-grace go with --iceberg, not --no-iceberg\n", ""},
		{[]string{"--every", "500ms"}, 2, "ctdispatch: --every 500ms is below the minimum 1s\n", ""},
		{[]string{"--iceberg"}, 0, "", `{"catalog":"","namespace":"ctdispatch","grace":"1h0m0s"}`},
		{nil, 0, "", `{"catalog":"","namespace":"ctdispatch","grace":"1h0m0s"}`},
		{[]string{"--iceberg-grace", "2h"}, 2,
			"ctdispatch: --iceberg-grace changes the recorded grace only with --iceberg (this outbox publishes with 1h0m0s)\n", `{"catalog":"","namespace":"ctdispatch","grace":"1h0m0s"}`},
		{[]string{"--iceberg", "--iceberg-grace", "2h"}, 0, "", `{"catalog":"","namespace":"ctdispatch","grace":"2h0m0s"}`},
		{[]string{"--iceberg"}, 0, "", `{"catalog":"","namespace":"ctdispatch","grace":"2h0m0s"}`},
		{[]string{"--iceberg", "--iceberg-catalog", "https://catalog.example/"}, 2,
			"ctdispatch: this outbox publishes to the file-based catalog under _iceberg/; run compact --no-iceberg first to publish to catalog https://catalog.example/ instead\n",
			`{"catalog":"","namespace":"ctdispatch","grace":"2h0m0s"}`},
		{[]string{"--iceberg-catalog", "postgres://u:secret@db.example/x"}, 2,
			"ctdispatch: --iceberg-catalog postgres://u:xxxxx@db.example/x is not the catalog this outbox publishes to (the file-based catalog under _iceberg/); run compact --no-iceberg, then --iceberg with the new catalog\n",
			`{"catalog":"","namespace":"ctdispatch","grace":"2h0m0s"}`},
		{[]string{"--no-iceberg"}, 0, "", ""},
		{[]string{"--no-iceberg"}, 0, "", ""},
	}
	for _, s := range steps {
		code, _, stderr := runCLI(t, append([]string{"compact", "--outbox", root}, s.args...)...)
		require.Equal(t, s.stderr, stderr, s.args)
		require.Equal(t, s.code, code, s.args)
		switchIs(s.after)
	}
}

// --every alone takes its default; "--every 5m" means --every=5m; any
// other argument is refused.
func TestEveryArgs(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args []string
		want string
		err  string
	}{
		{[]string{"--every"}, "15s", ""},
		{[]string{"--every", "5m"}, "5m0s", ""},
		{[]string{"--every=2m"}, "2m0s", ""},
		{[]string{"--every", "soon"}, "", `unknown command "soon" for "compact"`},
		{[]string{"--every=1m", "5m"}, "", `unknown command "5m" for "compact"`},
	} {
		env := Env{}.withDefaults()
		cmd := newCompactCmd(&env)
		require.NoError(t, cmd.ParseFlags(c.args), c.args)
		err := everyArgs(cmd, cmd.Flags().Args())
		if c.err != "" {
			require.EqualError(t, err, c.err, c.args)
			continue
		}
		require.NoError(t, err, c.args)
		require.Equal(t, c.want, cmd.Flags().Lookup("every").Value.String(), c.args)
	}
}
