package lakehouse_test

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"testing"
	"time"

	"github.com/fsouza/fake-gcs-server/fakestorage"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	_ "github.com/jackc/pgx/v5/stdlib"
	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"
	"gocloud.dev/blob"
	"gocloud.dev/blob/gcsblob"
	"gocloud.dev/gcp"

	"github.com/ctdispatch/ctdispatch/internal/testtools/pgtest"
	"github.com/ctdispatch/ctdispatch/outbox"
	"github.com/ctdispatch/ctdispatch/outbox/lakehouse"
	"github.com/ctdispatch/ctdispatch/outbox/parquetbox"
)

// fakeGCS serves one bucket from fake-gcs-server (the server
// internal/testtools/fakegcs runs as a program), in process, and returns
// it as the outbox opens it: the real GCS client through gcsblob, whose
// every request, uploads included, goes to the server. Iceberg reaches
// the root through the outbox's own bucket (useRootBucket), so it needs
// no properties of its own.
func fakeGCS(t *testing.T, bucket string) (*blob.Bucket, map[string]string) {
	t.Helper()
	srv, err := fakestorage.NewServerWithOptions(fakestorage.Options{NoListener: true})
	require.NoError(t, err)
	t.Cleanup(srv.Stop)
	srv.CreateBucketWithOpts(fakestorage.CreateBucketOpts{Name: bucket})
	b, err := gcsblob.OpenBucket(context.Background(), &gcp.HTTPClient{Client: *srv.HTTPClient()}, bucket, nil)
	require.NoError(t, err)
	t.Cleanup(func() { b.Close() })
	return b, nil
}

// catalogURL turns a throwaway database's DSN into a postgres:// catalog
// URL, with search_path set when schema is not empty.
func catalogURL(t *testing.T, dsn, schema string) string {
	t.Helper()
	cc, err := pgx.ParseConfig(dsn)
	require.NoError(t, err)
	q := url.Values{"host": {cc.Host}, "port": {fmt.Sprint(cc.Port)}, "sslmode": {"disable"}}
	if schema != "" {
		q.Set("search_path", schema)
	}
	return (&url.URL{Scheme: "postgres", User: url.User(cc.User), Path: "/" + cc.Database, RawQuery: q.Encode()}).String()
}

// schemasHolding returns the schemas holding a table of that name.
func schemasHolding(t *testing.T, dsn, tableName string) []string {
	t.Helper()
	db, err := sql.Open("pgx", dsn)
	require.NoError(t, err)
	defer db.Close()
	rows, err := db.Query(`SELECT table_schema FROM information_schema.tables WHERE table_name = $1 ORDER BY 1`, tableName)
	require.NoError(t, err)
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		require.NoError(t, rows.Scan(&s))
		out = append(out, s)
	}
	require.NoError(t, rows.Err())
	return out
}

// Time budget: under a minute (a PostgreSQL cluster's start, a fake GCS
// server, three commits). A bucket root publishes through the SQL catalog
// on PostgreSQL, whose tables land in the schema the URL names: appends
// become appends, a compaction one replace, and iceberg-go's own scan of
// each snapshot holds exactly the rows the store's readers answer.
func TestSQLCatalogOnBucketRoot(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := pgtest.New(t)
	bkt, props := fakeGCS(t, "lake-test")
	clock := clockwork.NewFakeClockAt(t0)
	ob, err := parquetbox.Open(ctx, parquetbox.Config{Bucket: blob.PrefixedBucket(bkt, "prod/"), BucketURL: "gs://lake-test/prod",
		LogDir: t.TempDir(), ProcessorUUID: uuid.New(), Clock: clock})
	require.NoError(t, err)
	defer ob.Close()
	cfg := lakehouse.Config{Catalog: catalogURL(t, dsn, "ctdispatch_lake"), Properties: props, Clock: clock}
	require.NoError(t, lakehouse.Enable(ctx, ob, cfg))

	check := func(stage string, runs ...string) *lakehouseTable {
		tbl := currentTable(t, ob, cfg, outbox.TableDispatch)
		snap := tbl.CurrentSnapshot()
		require.Equal(t, liveLocations(t, ob, outbox.TableDispatch), snapshotPaths(t, tbl, snap), stage)
		rows := scanRows(t, tbl, snap.SnapshotID)
		require.Equal(t, storeRows(t, ob, runs...), rows, stage)
		require.Equal(t, storeLatest(t, ob, runs...), latestIDs(rows), stage)
		return &lakehouseTable{snapshots: len(tbl.Metadata().Snapshots()), operation: string(snap.Summary.Operation)}
	}

	writeDispatches(t, ob, clock, "r1", 12, true)
	rep, err := lakehouse.Publish(ctx, ob, cfg)
	require.NoError(t, err)
	require.Equal(t, lakehouse.Appended, rep.Tables[0].Action)
	require.Equal(t, lakehouse.Absent, rep.Tables[1].Action, "no timers were written")
	st := check("after the first append", "r1")
	require.Equal(t, lakehouseTable{snapshots: 1, operation: "append"}, *st)

	clock.Advance(time.Minute)
	writeDispatches(t, ob, clock, "r2", 5, false)
	rep, err = lakehouse.Publish(ctx, ob, cfg)
	require.NoError(t, err)
	require.Equal(t, lakehouse.Appended, rep.Tables[0].Action)
	require.Zero(t, rep.Tables[0].Removed)
	st = check("after the second append", "r1", "r2")
	require.Equal(t, lakehouseTable{snapshots: 2, operation: "append"}, *st)

	clock.Advance(time.Minute)
	require.NoError(t, ob.Compact(ctx, parquetbox.CompactConfig{Full: true}))
	rep, err = lakehouse.Publish(ctx, ob, cfg)
	require.NoError(t, err)
	require.Equal(t, lakehouse.Replaced, rep.Tables[0].Action)
	require.NotZero(t, rep.Tables[0].Removed)
	st = check("after the compaction", "r1", "r2")
	require.Equal(t, lakehouseTable{snapshots: 3, operation: "overwrite"}, *st, "one replace")

	require.Equal(t, []string{"ctdispatch_lake"}, schemasHolding(t, dsn, "iceberg_tables"))
	require.Equal(t, []string{"ctdispatch_lake"}, schemasHolding(t, dsn, "iceberg_namespace_properties"))
}

// lakehouseTable is what a check says of the table's history: how many
// snapshots it keeps and the current one's operation.
type lakehouseTable struct {
	snapshots int
	operation string
}

// Time budget: a few seconds (one PostgreSQL database). Without a
// search_path in the URL the catalog's tables go to "public", even when a
// schema named after the connecting user exists (where PostgreSQL's
// default search_path would put them).
func TestSQLCatalogSchemaWithoutSearchPath(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := pgtest.New(t)
	db, err := sql.Open("pgx", dsn)
	require.NoError(t, err)
	_, err = db.Exec(`CREATE SCHEMA postgres`) // the user's name: first in the default search_path
	require.NoError(t, err)
	require.NoError(t, db.Close())

	dir := t.TempDir()
	ob, clock := openRoot(t, dir)
	cfg := lakehouse.Config{Catalog: catalogURL(t, dsn, ""), Clock: clock}
	require.NoError(t, lakehouse.Enable(ctx, ob, cfg))
	writeDispatches(t, ob, clock, "r1", 2, false)
	_, err = lakehouse.Publish(ctx, ob, cfg)
	require.NoError(t, err)
	require.Equal(t, []string{lakehouse.DefaultCatalogSchema}, schemasHolding(t, dsn, "iceberg_tables"))
}

// Time budget: under a second (no connection is made). A search_path the
// catalog cannot put its tables in as written is refused by Enable,
// naming the value and the rule.
func TestSQLCatalogSearchPathRule(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ob, err := parquetbox.Open(ctx, parquetbox.Config{Root: t.TempDir(), ProcessorUUID: uuid.New()})
	require.NoError(t, err)
	defer ob.Close()
	rule := `; allowed: one schema name of lower-case letters, digits and '_' (at most 63, not starting with a digit), or none for "public"`
	for _, tc := range []struct {
		searchPath string
		err        string
	}{
		{"lake", ""},
		{"ctdispatch_lake2", ""},
		{"a,b", `lakehouse: Config.Catalog "postgres://u@h/db?search_path=a%2Cb" has search_path "a,b"` + rule},
		{"Lake", `lakehouse: Config.Catalog "postgres://u@h/db?search_path=Lake" has search_path "Lake"` + rule},
		{`"x"`, `lakehouse: Config.Catalog "postgres://u@h/db?search_path=%22x%22" has search_path "\"x\""` + rule},
		{"2lake", `lakehouse: Config.Catalog "postgres://u@h/db?search_path=2lake" has search_path "2lake"` + rule},
		{"", `lakehouse: Config.Catalog "postgres://u@h/db?search_path=" has search_path ""` + rule},
	} {
		catalog := "postgres://u@h/db?search_path=" + url.QueryEscape(tc.searchPath)
		err := lakehouse.Enable(ctx, ob, lakehouse.Config{Catalog: catalog})
		if tc.err == "" {
			require.NoError(t, err, tc.searchPath)
			require.NoError(t, lakehouse.Disable(ctx, ob))
			continue
		}
		require.EqualError(t, err, tc.err, tc.searchPath)
	}
}
