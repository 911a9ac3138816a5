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
