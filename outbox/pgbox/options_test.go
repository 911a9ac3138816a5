package pgbox_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ctdispatch/ctdispatch/internal/testtools/pgtest"
	"github.com/ctdispatch/ctdispatch/outbox"
	"github.com/ctdispatch/ctdispatch/outbox/pgbox"
)

func TestOptionsRefusedNameTheField(t *testing.T) {
	t.Parallel()
	db := pgtest.Open(t)
	for _, tt := range []struct {
		opts pgbox.Config
		want string
	}{
		{pgbox.Config{Schema: "Jobs"}, `pgbox: Config.Schema "Jobs" is not a plain identifier; allowed: [a-z_][a-z0-9_]*, at most 63 bytes`},
		{pgbox.Config{TablePrefix: "a-b_"}, `pgbox: Config.TablePrefix "a-b_" is not a plain identifier; allowed: [a-z_][a-z0-9_]*, at most 34 bytes`},
		{pgbox.Config{TablePrefix: "a_very_long_prefix_for_the_outbox_t"}, `pgbox: Config.TablePrefix "a_very_long_prefix_for_the_outbox_t" is not a plain identifier; allowed: [a-z_][a-z0-9_]*, at most 34 bytes`},
	} {
		_, err := pgbox.New(nil, tt.opts)
		require.EqualError(t, err, "pgbox: db nil is required")
		err = pgbox.Migrate(t.Context(), db, tt.opts)
		require.EqualError(t, err, tt.want)
	}
	require.Equal(t, [3]string{`"public"."ctdispatch_dispatch_outbox"`, `"public"."ctdispatch_timers"`, `"public"."ctdispatch_deliveries"`},
		pgbox.TableNames(pgbox.Config{}))
	require.Equal(t, `"jobs"."cd_intents"`, pgbox.IntentTableName(pgbox.Config{Schema: "jobs", TablePrefix: "cd_"}))
}

// Migrate twice is a no-op the second time; a store whose tables were not
// created says how to create them.
func TestMigrateIsIdempotentAndNamedWhenMissing(t *testing.T) {
	t.Parallel()
	db := pgtest.Open(t)
	o, err := pgbox.New(db, pgbox.Config{Schema: "jobs", TablePrefix: "cd_"})
	require.NoError(t, err)
	_, _, err = o.Latest(t.Context(), outbox.TableDispatch, "dispatch:r:t:1")
	require.EqualError(t, err, `pgbox: "jobs"."cd_dispatch_outbox": the outbox tables do not exist; create them with "ctdispatch migrate --outbox postgres://…" or pgbox.Migrate`)
	require.NoError(t, o.Migrate(t.Context()))
	require.NoError(t, pgbox.Migrate(t.Context(), db, pgbox.Config{Schema: "jobs", TablePrefix: "cd_"}))
	var names []string
	rows, err := db.QueryContext(t.Context(), `SELECT tablename FROM pg_tables WHERE schemaname = 'jobs' ORDER BY tablename`)
	require.NoError(t, err)
	defer rows.Close()
	for rows.Next() {
		var name string
		require.NoError(t, rows.Scan(&name))
		names = append(names, name)
	}
	require.NoError(t, rows.Err())
	require.Equal(t, []string{"cd_deliveries", "cd_dispatch_outbox", "cd_export", "cd_export_batches", "cd_export_quarantine", "cd_intents", "cd_timers"}, names,
		"the outbox's three, the intents and the exporter's three")
}
