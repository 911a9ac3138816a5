package pgbox_test

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// A program that uses only the Parquet or in-memory store does not link
// pgx: the dispatcher takes the outbox seam, and this package takes
// database/sql, so only a program that picks the driver links it (the CLI
// does), or pgxtx, the adapter of pgx's own transactions, or pgxlisten,
// the relays' listener. About 2 s.
func TestOnlyTheDriversImporterLinksPgx(t *testing.T) {
	t.Parallel()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command to list the packages' dependencies")
	}
	const mod = "github.com/ctdispatch/ctdispatch/"
	for _, c := range []struct {
		pkg      string
		wantsPgx bool
	}{
		{mod + "cloudtasks", false},
		{mod + "outbox", false},
		{mod + "outbox/pgbox", false},
		{mod + "outbox/pgbox/pgxtx", true},
		{mod + "outbox/pgbox/pgxlisten", true},
		{"./testdata/parquetonly", false},
		{mod + "internal/cli", true},
	} {
		out, err := exec.Command(goBin, "list", "-deps", c.pkg).CombinedOutput()
		require.NoError(t, err, string(out))
		links := false
		for _, d := range strings.Fields(string(out)) {
			links = links || strings.HasPrefix(d, "github.com/jackc/pgx")
		}
		require.Equal(t, c.wantsPgx, links, "%s links github.com/jackc/pgx", c.pkg)
	}
}

// The PostgreSQL store links no other store: its exporter writes through
// outbox.RunWriter, which the program opens (with package
// outbox/parquetbox), so a program using pgbox without an export does not
// link parquet-go or gocloud's blob, and none of their drivers. About 1 s.
func TestThePostgreSQLStoreLinksNoOtherStore(t *testing.T) {
	t.Parallel()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command to list the package's dependencies")
	}
	out, err := exec.Command(goBin, "list", "-deps", "github.com/ctdispatch/ctdispatch/outbox/pgbox").CombinedOutput()
	require.NoError(t, err, string(out))
	var linked []string
	for _, d := range strings.Fields(string(out)) {
		for _, other := range []string{"github.com/parquet-go/", "gocloud.dev/", "github.com/ctdispatch/ctdispatch/outbox/parquetbox", "github.com/ctdispatch/ctdispatch/outbox/cloudblob"} {
			if strings.HasPrefix(d, other) {
				linked = append(linked, d)
			}
		}
	}
	require.Empty(t, linked, "outbox/pgbox links another store's packages")
}
