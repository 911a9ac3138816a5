//go:build iceberg

package cli

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/ctdispatch/ctdispatch/outbox"
	"github.com/ctdispatch/ctdispatch/outbox/lakehouse"
	"github.com/ctdispatch/ctdispatch/outbox/parquetbox"
)

// icebergLinked says whether this build publishes Iceberg tables (build
// tag iceberg).
const icebergLinked = true

// lakeConfig is a root's Iceberg publication.
type lakeConfig = lakehouse.Config

// lakeTableStatus is one Iceberg table's current snapshot.
type lakeTableStatus = lakehouse.TableStatus

// errNoLakeSnapshot is lakeReadAsOf's error when no snapshot is that old.
var errNoLakeSnapshot = lakehouse.ErrNoSnapshot

// lakeStatus returns each published table's current snapshot.
func lakeStatus(ctx context.Context, o *parquetbox.Outbox, cfg lakeConfig) ([]lakeTableStatus, error) {
	return lakehouse.Status(ctx, o, cfg)
}

// lakeReadAsOf returns table t's records as the snapshot current at at
// holds them.
func lakeReadAsOf(ctx context.Context, o *parquetbox.Outbox, cfg lakeConfig, t outbox.Table, at time.Time) ([]outbox.Record, error) {
	return lakehouse.ReadAsOf(ctx, o, cfg, t, at)
}

// resolve applies --iceberg or --no-iceberg to the outbox's root and
// returns the publication this run makes (nil when the root does not
// publish). Nothing is changed when the flags are refused.
func (f *icebergFlags) resolve(ctx context.Context, env *Env, o *parquetbox.Outbox, root string) (*lakehouse.Config, error) {
	cfg, on, err := f.apply(ctx, env, o, root)
	if err != nil || !on {
		return nil, err
	}
	return &cfg, nil
}

func (f *icebergFlags) apply(ctx context.Context, env *Env, o *parquetbox.Outbox, root string) (cfg lakehouse.Config, on bool, err error) {
	if f.on && f.off {
		return cfg, false, usagef("--iceberg and --no-iceberg exclude each other")
	}
	if f.off {
		if f.changed("iceberg-catalog") || f.changed("iceberg-grace") {
			return cfg, false, usagef("--iceberg-catalog and --iceberg-grace go with --iceberg, not --no-iceberg")
		}
		return cfg, false, lakehouse.Disable(ctx, o)
	}
	if f.changed("iceberg-grace") && f.grace < time.Second {
		return cfg, false, usagef("--iceberg-grace %s is below the minimum 1s", f.grace)
	}
	recorded, enabled, err := lakehouse.Enabled(ctx, o)
	if err != nil {
		return cfg, false, err
	}
	if !f.on {
		if !enabled {
			if f.changed("iceberg-catalog") || f.changed("iceberg-grace") {
				return cfg, false, usagef("this outbox does not publish Iceberg tables; add --iceberg to turn publication on with --iceberg-catalog and --iceberg-grace")
			}
			return cfg, false, nil
		}
		if f.changed("iceberg-grace") {
			return cfg, false, usagef("--iceberg-grace changes the recorded grace only with --iceberg (this outbox publishes with %s)", recorded.Grace)
		}
		cfg = recorded
		if f.changed("iceberg-catalog") {
			// Given again, as it was recorded, for its password.
			if redactCatalog(f.catalog) != recorded.Catalog {
				return cfg, false, usagef("--iceberg-catalog %s is not the catalog this outbox publishes to (%s); run compact --no-iceberg, then --iceberg with the new catalog", redact(f.catalog), catalogName(recorded.Catalog))
			}
			cfg.Catalog = f.catalog
		}
		cfg.Properties = icebergProperties(env)
		cfg.Logger = env.Logger
		return cfg, true, nil
	}
	cfg = lakehouse.Config{Catalog: f.catalog, Grace: f.grace}
	if enabled {
		if !f.changed("iceberg-catalog") {
			cfg.Catalog = recorded.Catalog
		}
		if !f.changed("iceberg-grace") {
			cfg.Grace = recorded.Grace
		}
		cfg.Namespace = recorded.Namespace
	}
	if cfg.Catalog == "" && isBucketURL(root) {
		return cfg, false, usagef("--iceberg on a bucket outbox (%s) needs --iceberg-catalog: the file-based catalog cannot commit atomically on a bucket; give postgres://… (the SQL catalog) or https://… (a REST catalog)", redact(root))
	}
	if enabled && redactCatalog(cfg.Catalog) != recorded.Catalog {
		return cfg, false, usagef("this outbox publishes to %s; run compact --no-iceberg first to publish to %s instead", catalogName(recorded.Catalog), catalogName(redactCatalog(cfg.Catalog)))
	}
	if err := lakehouse.Enable(ctx, o, cfg); err != nil {
		return cfg, false, err
	}
	cfg.Properties = icebergProperties(env)
	cfg.Logger = env.Logger
	return cfg, true, nil
}

// icebergProperties are the catalog and file IO properties the program
// reads from its environment: none today, as gs:// roots go through the
// program's own bucket driver, which reads $STORAGE_EMULATOR_HOST.
func icebergProperties(*Env) map[string]string { return nil }

// publishedConfig returns the publication of the outbox's root when it is
// on (on false otherwise), for commands that read it or publish without
// compact's flags (stats, query --as-of, export). A PostgreSQL catalog is
// recorded without its password: the driver finds it in $PGPASSWORD or
// ~/.pgpass.
func publishedConfig(ctx context.Context, env *Env, o *parquetbox.Outbox) (lakehouse.Config, bool, error) {
	cfg, on, err := lakehouse.Enabled(ctx, o)
	if err != nil || !on {
		return cfg, on, err
	}
	cfg.Properties = icebergProperties(env)
	cfg.Logger = env.Logger
	return cfg, true, nil
}

// printPublication writes one line per table saying what a publication
// did.
func printPublication(w io.Writer, rep lakehouse.Report) {
	for _, tp := range rep.Tables {
		if line := publicationLine(tp); line != "" {
			fmt.Fprintln(w, line)
		}
	}
}

// publicationLine says what a publication did to one table ("" for a
// table with nothing to publish).
func publicationLine(tp lakehouse.TablePublication) string {
	where := string(tp.Table) + ": iceberg"
	var line string
	switch tp.Action {
	case lakehouse.Absent:
		return ""
	case lakehouse.Busy:
		return fmt.Sprintf("%s: busy, skipped: %v", where, tp.Busy)
	case lakehouse.Current:
		line = fmt.Sprintf("%s: current: snapshot %d, %d files", where, tp.SnapshotID, tp.Files)
	default:
		line = fmt.Sprintf("%s: %s: +%d -%d files -> snapshot %d, %d files", where, tp.Action, tp.Added, tp.Removed, tp.SnapshotID, tp.Files)
	}
	if tp.Redone > 0 {
		line += fmt.Sprintf("; %d lost %s redone", tp.Redone, plural(tp.Redone, "commit", "commits"))
	}
	if tp.Expired > 0 || len(tp.Deleted) > 0 {
		line += fmt.Sprintf("; %d %s expired, %d replaced files removed", tp.Expired, plural(tp.Expired, "snapshot", "snapshots"), len(tp.Deleted))
	}
	return line
}

// publish publishes the outbox's tables as cfg says and prints what it
// did.
func publish(ctx context.Context, w io.Writer, o *parquetbox.Outbox, cfg lakehouse.Config) error {
	rep, err := lakehouse.Publish(ctx, o, cfg)
	printPublication(w, rep)
	if err != nil {
		return fmt.Errorf("iceberg publication: %w", err)
	}
	return nil
}

// catalogName names a recorded catalog in a message.
func catalogName(v string) string {
	if v == "" {
		return "the file-based catalog under _iceberg/"
	}
	return "catalog " + v
}
