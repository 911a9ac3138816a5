package lakehouse

import (
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"time"

	"github.com/jonboulle/clockwork"
)

// DefaultNamespace is Config.Namespace's default.
const DefaultNamespace = "ctdispatch"

// DefaultGrace is Config.Grace's default: a query that started on a
// snapshot up to an hour old finds every file it names.
const DefaultGrace = time.Hour

// Config says where the Iceberg tables are catalogued and how long old
// snapshots stay readable.
type Config struct {
	// Catalog chooses the Iceberg catalog. "" is the file-based catalog
	// (iceberg-go's hadoop catalog) under <root>/_iceberg/, which needs no
	// server and is allowed only on a directory root, where a rename
	// that does not replace is atomic. "postgres://…" (or "postgresql://…")
	// is iceberg-go's SQL catalog on PostgreSQL: its two tables go to the
	// one schema the URL's search_path parameter names (created if
	// missing; lower-case letters, digits and '_'), else to
	// DefaultCatalogSchema, never where the server's default search_path
	// would put them. "http://…" or "https://…" is an Iceberg
	// REST catalog (BigLake metastore, Polaris, Lakekeeper). Defaults to
	// "", the file-based catalog.
	Catalog string
	// Namespace is the Iceberg namespace of the three tables. Defaults to
	// DefaultNamespace.
	Namespace string
	// Grace is how long a snapshot stays readable after a newer one
	// replaced it: snapshots older than Grace expire (never the current
	// one), and a file a compaction or retention removed from the live set
	// is deleted only once no unexpired snapshot names it. At least a
	// second. Enable records it in the root; Publish, given 0, uses the
	// recorded one, so a later process (ctdispatch compact) keeps the
	// grace the root was enabled with, and a value set here overrides it
	// for that call. Defaults to DefaultGrace (Enable, Status, ReadAsOf,
	// and Publish on a switch that records none).
	Grace time.Duration
	// Properties are passed to the catalog and to the file IO iceberg-go
	// reads and writes the root with (for example "gcs.service.host" and
	// "gcs.no-auth" for a Cloud Storage emulator, or "warehouse" and
	// "credential" for a REST catalog). Defaults to none.
	Properties map[string]string
	// LeaseTTL is how long a publisher's lease on a table lasts unless
	// renewed: how long a publisher that died keeps the others out.
	// Defaults to 5m.
	LeaseTTL time.Duration
	// Clock drives the lease, snapshot expiry and the grace period.
	// Defaults to the real clock.
	Clock clockwork.Clock
	// Logger hears what a publication did that needs a person: a commit
	// found lost and redone, a lease taken over. Defaults to discarding.
	Logger *slog.Logger

	// BeforeCommit, if not nil, is called before each commit of a table's
	// snapshot, after the lease was last checked. It is there for tests of
	// concurrent publishers: a hook that blocks holds the commit back
	// while another publisher acts. Defaults to none.
	BeforeCommit func(t string)
}

// The catalog kinds.
const (
	catalogFile = "file"
	catalogSQL  = "sql"
	catalogREST = "rest"
)

// WithDefaults returns a copy of c with every unset field at its default.
func (c Config) WithDefaults() Config {
	if c.Namespace == "" {
		c.Namespace = DefaultNamespace
	}
	if c.Grace == 0 {
		c.Grace = DefaultGrace
	}
	if c.LeaseTTL == 0 {
		c.LeaseTTL = 5 * time.Minute
	}
	if c.Clock == nil {
		c.Clock = clockwork.NewRealClock()
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// validate checks a Config after WithDefaults, naming the field at fault.
func (c Config) validate() error {
	kind, err := catalogKind(c.Catalog)
	if err != nil {
		return err
	}
	if kind == catalogSQL {
		if _, _, err := catalogSchema(c.Catalog); err != nil {
			return err
		}
	}
	if strings.ContainsAny(c.Namespace, "/\\.") || c.Namespace == ".." {
		return fmt.Errorf("lakehouse: Config.Namespace %q contains '/', '\\' or '.'; allowed: one name", c.Namespace)
	}
	if c.Grace < time.Second {
		return fmt.Errorf("lakehouse: Config.Grace %v is below the minimum of 1s", c.Grace)
	}
	if c.LeaseTTL < time.Second {
		return fmt.Errorf("lakehouse: Config.LeaseTTL %v is below the minimum of 1s", c.LeaseTTL)
	}
	return nil
}

// catalogKind says which catalog a Config.Catalog value chooses.
func catalogKind(s string) (string, error) {
	if s == "" {
		return catalogFile, nil
	}
	u, err := url.Parse(s)
	if err != nil {
		return "", fmt.Errorf("lakehouse: Config.Catalog %q is not a URL: %w", redact(s), err)
	}
	switch u.Scheme {
	case "postgres", "postgresql":
		return catalogSQL, nil
	case "http", "https":
		return catalogREST, nil
	}
	return "", fmt.Errorf("lakehouse: Config.Catalog %q has scheme %q; allowed: \"\" (the file-based catalog), postgres://, postgresql://, http://, https://", redact(s), u.Scheme)
}

// redact returns a catalog URL without its password, as it may be written
// down (in the root's publication switch, in logs and errors).
func redact(s string) string {
	u, err := url.Parse(s)
	if err != nil || u.User == nil {
		return s
	}
	if _, ok := u.User.Password(); ok {
		u.User = url.User(u.User.Username())
	}
	return u.String()
}
