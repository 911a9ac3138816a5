package console

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/ctdispatch/ctdispatch/internal/testtools/pgtest"
	"github.com/ctdispatch/ctdispatch/naming"
	"github.com/ctdispatch/ctdispatch/outbox"
	"github.com/ctdispatch/ctdispatch/outbox/pgbox"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// The console over a PostgreSQL outbox: the audit trail, the run page and
// the outbox page read its tables; the outbox page has the tables'
// figures and stale records and no files. About 2 s.
func TestConsoleOverPostgres(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clock := clockwork.NewFakeClockAt(t0)
	box, err := pgbox.New(pgtest.Open(t), pgbox.Config{Clock: clock})
	require.NoError(t, err)
	require.NoError(t, box.Migrate(ctx))
	b := &bundle{ids: map[string]naming.ID{}}
	for _, key := range []string{"extract", "load"} {
		id, err := naming.NewDispatch("run-1", key, naming.Attempt(1))
		require.NoError(t, err)
		b.ids[key] = id
	}
	sec := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Second) }
	for i, r := range []outbox.Record{
		b.record("extract", outbox.StatusPending, sec(0), sec(0), ""),
		b.record("extract", outbox.StatusCreated, sec(0), sec(1), ""),
		b.record("load", outbox.StatusPending, sec(0), sec(3), ""),
	} {
		r.Version = int64(i%2 + 1)
		require.NoError(t, outbox.AppendAndWait(ctx, box, r))
	}

	_, err = New(ctx, Config{PostgresOutbox: box})
	require.ErrorIs(t, err, ErrInvalidConfig)
	require.EqualError(t, err, "console: PostgresOutbox is set but Outbox is empty; allowed: Outbox names it (its URL without the password)")

	b.srv, err = New(ctx, Config{Outbox: "postgres://app@db/app", PostgresOutbox: box, StaleAfter: time.Minute, Clock: clockwork.NewFakeClockAt(t0.Add(time.Hour))})
	require.NoError(t, err)
	t.Cleanup(func() { b.srv.Close() })
	b.web = httptest.NewServer(b.srv)
	t.Cleanup(b.web.Close)

	code, page := b.get(t, "/audit?q="+url.QueryEscape(b.ids["extract"].String()))
	require.Equal(t, http.StatusOK, code, page)
	require.Equal(t, [][]string{
		{"2026-11-23 10:00:00.000", "pending", box.ProcessorUUID(), "", "0", "—"},
		{"2026-11-23 10:00:01.000", "created", box.ProcessorUUID(), "", "1", "—"},
	}, tableRows(find(mustParse(t, page), func(n *htmlNode) bool { return n.Data == "table" && attr(n, "class") == "states" })))

	code, page = b.get(t, "/run?id=run-1")
	require.Equal(t, http.StatusOK, code, page)
	require.Len(t, rows(t, page, "run"), 2)

	clock.Advance(time.Hour) // the store's "now" for its stale records
	b.get(t, "/outbox")
	b.srv.health.wait()
	code, page = b.get(t, "/outbox")
	require.Equal(t, http.StatusOK, code, page)
	require.Contains(t, page, "<code>postgres://app@db/app</code>")
	require.Equal(t, [][]string{
		{"dispatch_outbox", "0", "3", "0", "2", "created 1 pending 1"},
		{"timers", "0", "0", "0", "0", ""},
	}, rows(t, page, "stats"))
	require.Equal(t, [][]string{{"dispatch:run-1:load:1", "2026-11-23 10:00:03.000", box.ProcessorUUID()}}, rows(t, page, "stale"))
	require.NotContains(t, page, `id="skipped-notice"`)
}
