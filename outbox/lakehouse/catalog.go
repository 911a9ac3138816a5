package lakehouse

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/catalog"
	"github.com/apache/iceberg-go/catalog/hadoop"
	"github.com/apache/iceberg-go/catalog/rest"
	sqlcat "github.com/apache/iceberg-go/catalog/sql"
	"github.com/apache/iceberg-go/table"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/ctdispatch/ctdispatch/outbox"
)

// commitRetries is the tables' commit.retry.num-retries: a commit that
// meets another commit is rebuilt on the new snapshot and tried again this
// many times (the guard below keeps a retry from naming a file twice).
const commitRetries = 4

// ErrDuplicatePath is the error of a commit refused because the snapshot
// it would make names one file twice (or names again a file the table
// already holds): nothing is committed, and Publish computes its changes
// again from the table as it is.
var ErrDuplicatePath = errors.New("lakehouse: a snapshot would name a file twice")

// lakeCatalog is an opened catalog with the root's table locations.
type lakeCatalog struct {
	cat       catalog.Catalog
	kind      string
	namespace table.Identifier
	// location is the root's metadata directory as a URL: where
	// the tables' metadata goes.
	location string
	props    iceberg.Properties
	db       *sql.DB
}

// rootURL returns an outbox root as the URL Iceberg locations start with.
func rootURL(root string) (string, error) {
	if isBucketRoot(root) {
		// gs://bucket/p (Outbox.Location) and gs://bucket?prefix=p/ keep
		// their tables under gs://bucket/p/, where parquetbox's
		// LiveFile.Location names them.
		u, err := url.Parse(root)
		if err != nil {
			return "", err
		}
		base := u.Scheme + "://" + u.Host
		if p := strings.Trim(u.Path, "/"); p != "" {
			base += "/" + p
		}
		if p := strings.Trim(u.Query().Get("prefix"), "/"); p != "" {
			base += "/" + p
		}
		return base, nil
	}
	abs, err := filepath.Abs(strings.TrimPrefix(root, "file://"))
	if err != nil {
		return "", err
	}
	return "file://" + filepath.ToSlash(abs), nil
}

// openCatalog opens the catalog cfg names for an outbox root.
func openCatalog(ctx context.Context, root string, cfg Config) (*lakeCatalog, error) {
	kind, err := catalogKind(cfg.Catalog)
	if err != nil {
		return nil, err
	}
	if err := checkCatalogForRoot(root, cfg.Catalog); err != nil {
		return nil, err
	}
	base, err := rootURL(root)
	if err != nil {
		return nil, err
	}
	props := iceberg.Properties{}
	for k, v := range cfg.Properties {
		props[k] = v
	}
	lc := &lakeCatalog{kind: kind, namespace: table.Identifier{cfg.Namespace}, location: base + "/" + metaDir, props: props}
	switch kind {
	case catalogFile:
		lc.cat, err = hadoop.NewCatalog("ctdispatch", strings.TrimPrefix(lc.location, "file://"), props)
	case catalogSQL:
		lc.cat, lc.db, err = openSQLCatalog(ctx, cfg.Catalog, props)
	case catalogREST:
		opts := []rest.Option{rest.WithAdditionalProps(props)}
		if w := props["warehouse"]; w != "" {
			opts = append(opts, rest.WithWarehouseLocation(w))
		}
		if c := props["credential"]; c != "" {
			opts = append(opts, rest.WithCredential(c))
		}
		lc.cat, err = rest.NewCatalog(ctx, "ctdispatch", cfg.Catalog, opts...)
	}
	if err != nil {
		return nil, fmt.Errorf("lakehouse: open catalog %q: %w", redact(cfg.Catalog), err)
	}
	return lc, nil
}

// DefaultCatalogSchema is the PostgreSQL schema of the SQL catalog's
// tables when the catalog URL names none in its search_path.
const DefaultCatalogSchema = "public"

// catalogSchemaRule is what a catalog schema name may be: one name that
// PostgreSQL reads in a search_path as written (unquoted, so not folded).
var catalogSchemaRule = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)

// catalogSchema returns the schema a postgres:// catalog URL puts the SQL
// catalog's tables in, and its connection settings.
func catalogSchema(dsn string) (string, *pgx.ConnConfig, error) {
	cc, err := pgx.ParseConfig(dsn)
	if err != nil {
		return "", nil, fmt.Errorf("lakehouse: Config.Catalog %q: %w", redact(dsn), err)
	}
	schema, ok := cc.RuntimeParams["search_path"]
	if !ok {
		return DefaultCatalogSchema, cc, nil
	}
	if !catalogSchemaRule.MatchString(schema) {
		return "", nil, fmt.Errorf("lakehouse: Config.Catalog %q has search_path %q; allowed: one schema name of lower-case letters, digits and '_' (at most 63, not starting with a digit), or none for %q",
			redact(dsn), schema, DefaultCatalogSchema)
	}
	return schema, cc, nil
}

// openSQLCatalog opens iceberg-go's SQL catalog on PostgreSQL through
// pgx's database/sql driver. The catalog names its two tables
// (iceberg_tables, iceberg_namespace_properties) without a schema, so
// PostgreSQL puts them in the first schema of the connection's
// search_path, which by the server's default may be a schema named after
// the user. Every connection's search_path is therefore set to exactly
// one schema, the URL's search_path or DefaultCatalogSchema, created
// first when missing.
func openSQLCatalog(ctx context.Context, dsn string, props iceberg.Properties) (catalog.Catalog, *sql.DB, error) {
	schema, cc, err := catalogSchema(dsn)
	if err != nil {
		return nil, nil, err
	}
	cc.RuntimeParams["search_path"] = schema
	db := stdlib.OpenDB(*cc)
	if _, err := db.ExecContext(ctx, "CREATE SCHEMA IF NOT EXISTS "+pgx.Identifier{schema}.Sanitize()); err != nil {
		db.Close()
		return nil, nil, fmt.Errorf("create schema %q: %w", schema, err)
	}
	cat, err := sqlcat.NewCatalog("ctdispatch", db, sqlcat.Postgres, props)
	if err != nil {
		db.Close()
		return nil, nil, err
	}
	return cat, db, nil
}

func (lc *lakeCatalog) close() error {
	var errs []error
	if c, ok := lc.cat.(catalog.Closer); ok {
		errs = append(errs, c.Close())
	}
	if lc.db != nil {
		errs = append(errs, lc.db.Close())
	}
	return errors.Join(errs...)
}

func (lc *lakeCatalog) ident(t outbox.Table) table.Identifier {
	return append(table.Identifier{}, append(lc.namespace, string(t))...)
}

// load loads table t through the guard, or returns catalog.ErrNoSuchTable.
func (lc *lakeCatalog) load(ctx context.Context, t outbox.Table) (*table.Table, error) {
	tbl, err := lc.cat.LoadTable(ctx, lc.ident(t))
	if err != nil {
		return nil, err
	}
	return guarded(tbl, lc.cat), nil
}

// ensure loads table t, creating the namespace and the table first when
// missing.
func (lc *lakeCatalog) ensure(ctx context.Context, t outbox.Table) (*table.Table, error) {
	tbl, err := lc.load(ctx, t)
	if !errors.Is(err, catalog.ErrNoSuchTable) {
		return tbl, err
	}
	if err := lc.cat.CreateNamespace(ctx, lc.namespace, nil); err != nil && !errors.Is(err, catalog.ErrNamespaceAlreadyExists) {
		return nil, fmt.Errorf("lakehouse: create namespace %s: %w", lc.namespace, err)
	}
	sc, err := icebergSchema(t)
	if err != nil {
		return nil, err
	}
	spec, err := partitionSpec(sc)
	if err != nil {
		return nil, err
	}
	opts := []catalog.CreateTableOpt{
		catalog.WithPartitionSpec(spec),
		catalog.WithProperties(iceberg.Properties{
			"format-version":            "2",
			table.CommitNumRetriesKey:   fmt.Sprint(commitRetries),
			table.DefaultNameMappingKey: nameMapping(sc),
		}),
	}
	if lc.kind != catalogFile {
		opts = append(opts, catalog.WithLocation(lc.location+"/"+lc.namespace[0]+"/"+string(t)))
	}
	if _, err := lc.cat.CreateTable(ctx, lc.ident(t), sc, opts...); err != nil && !errors.Is(err, catalog.ErrTableAlreadyExists) {
		return nil, fmt.Errorf("lakehouse: create table %s: %w", t, err)
	}
	return lc.load(ctx, t)
}

// nameMapping maps each column of the files, which carry no field IDs,
// to its field by name.
func nameMapping(sc *iceberg.Schema) string {
	data, err := json.Marshal(sc.NameMapping())
	if err != nil {
		panic(err) // a mapping of names and numbers always marshals
	}
	return string(data)
}

// guard is the catalog a published table commits through: it refuses a
// commit whose new snapshot names a file twice. iceberg-go rebuilds a
// commit that met another on the new snapshot and tries again; if the
// other commit was this publisher's own (one the file catalog reported
// lost but published, see Publish), the rebuilt snapshot would name the
// added files a second time. The guard makes that a refusal
// (ErrDuplicatePath), after which Publish computes its changes again.
type guard struct {
	cat catalog.Catalog
}

func guarded(tbl *table.Table, cat catalog.Catalog) *table.Table {
	g := guard{cat: cat}
	return table.New(tbl.Identifier(), tbl.Metadata(), tbl.MetadataLocation(), tbl.FS, g)
}

// LoadTable loads a table that commits through the guard.
func (g guard) LoadTable(ctx context.Context, ident table.Identifier) (*table.Table, error) {
	tbl, err := g.cat.LoadTable(ctx, ident)
	if err != nil {
		return nil, err
	}
	return guarded(tbl, g.cat), nil
}

// CommitTable refuses updates that add a snapshot naming a path twice and
// passes the others to the catalog.
func (g guard) CommitTable(ctx context.Context, ident table.Identifier, reqs []table.Requirement, updates []table.Update) (table.Metadata, string, error) {
	for _, u := range updates {
		if u.Action() != table.UpdateAddSnapshot {
			continue
		}
		snap, err := snapshotOf(u)
		if err != nil {
			return nil, "", err
		}
		cur, err := g.cat.LoadTable(ctx, ident)
		if err != nil {
			return nil, "", err
		}
		fs, err := cur.FS(ctx)
		if err != nil {
			return nil, "", err
		}
		files, err := snapshotFiles(fs, snap)
		if err != nil {
			return nil, "", err
		}
		if dup := duplicatePath(files); dup != "" {
			return nil, "", fmt.Errorf("%w: %s in table %s", ErrDuplicatePath, dup, strings.Join(ident, "."))
		}
	}
	return g.cat.CommitTable(ctx, ident, reqs, updates)
}

// snapshotOf returns the snapshot an add-snapshot update adds.
func snapshotOf(u table.Update) (*table.Snapshot, error) {
	data, err := json.Marshal(u)
	if err != nil {
		return nil, err
	}
	var v struct {
		Snapshot *table.Snapshot `json:"snapshot"`
	}
	if err := json.Unmarshal(data, &v); err != nil {
		return nil, err
	}
	if v.Snapshot == nil {
		return nil, fmt.Errorf("lakehouse: add-snapshot update without a snapshot")
	}
	return v.Snapshot, nil
}
