package lakehouse

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"time"

	"github.com/ctdispatch/ctdispatch/outbox/parquetbox"
)

// switchKey is the root object whose presence turns publication on: while
// it exists, compaction and retention leave every file that was ever live
// on storage, for Publish to remove once no snapshot names it.
const switchKey = metaDir + "/publication.json"

// ErrNotEnabled is returned by Publish, Status and ReadAsOf on a root
// whose publication is off (see Enable).
var ErrNotEnabled = errors.New("lakehouse: Iceberg publication is not enabled on this root")

// ErrCatalogMismatch is returned when a Config names another catalog or
// namespace than the one the root's publication was enabled with.
var ErrCatalogMismatch = errors.New("lakehouse: catalog differs from the one the root publishes to")

// publication is what the switch records: the catalog choice, without a
// password, so a later process (ctdispatch compact) publishes where the
// first one did.
type publication struct {
	Catalog   string `json:"catalog"`
	Namespace string `json:"namespace"`
	Grace     string `json:"grace"`
}

// Enable turns Iceberg publication on for the outbox's root, recording
// cfg's catalog (without its password), namespace and grace in
// <root>/_iceberg/publication.json. From then on compaction and retention
// leave the files they fold or drop for Publish to remove, once no
// snapshot younger than the grace names them. Enabling again with the
// same catalog changes nothing; with another one it fails with
// ErrCatalogMismatch (Disable first). The file-based catalog is refused on
// a bucket root, whose writes cannot make its commits atomic: the error
// names Config.Catalog, to be set to a postgres:// or https:// catalog.
func Enable(ctx context.Context, ob *parquetbox.Outbox, cfg Config) error {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return err
	}
	root, err := ob.Location()
	if err != nil {
		return err
	}
	if err := checkCatalogForRoot(root, cfg.Catalog); err != nil {
		return err
	}
	objs := objects{ob}
	want := publication{Catalog: redact(cfg.Catalog), Namespace: cfg.Namespace, Grace: cfg.Grace.String()}
	have, ok, err := readSwitch(ctx, objs)
	if err != nil {
		return err
	}
	if ok {
		if have.Catalog != want.Catalog || have.Namespace != want.Namespace {
			return fmt.Errorf("%w: root %s publishes to catalog %q namespace %q, not %q namespace %q; Disable it first",
				ErrCatalogMismatch, root, have.Catalog, have.Namespace, want.Catalog, want.Namespace)
		}
		if have.Grace == want.Grace {
			return nil
		}
	}
	data, err := json.MarshalIndent(want, "", "  ")
	if err != nil {
		return err
	}
	return objs.put(ctx, switchKey, append(data, '\n'))
}

// Disable turns Iceberg publication off for the outbox's root: the switch
// is removed, so compaction and retention remove what they fold or drop
// again, as before Enable. The Iceberg tables and their metadata stay
// where they are (no longer kept current); files that were kept only for
// old snapshots stay until Enable and Publish run again.
func Disable(ctx context.Context, ob *parquetbox.Outbox) error {
	objs := objects{ob}
	return objs.remove(ctx, switchKey)
}

// Enabled says whether the outbox's root publishes Iceberg tables, and if
// so with which Config (Catalog without a password: set it again, with
// the password, before Publish).
func Enabled(ctx context.Context, ob *parquetbox.Outbox) (Config, bool, error) {
	objs := objects{ob}
	p, ok, err := readSwitch(ctx, objs)
	if err != nil || !ok {
		return Config{}, false, err
	}
	grace, err := time.ParseDuration(p.Grace)
	if err != nil {
		return Config{}, false, fmt.Errorf("lakehouse: %s: grace %q: %w", switchKey, p.Grace, err)
	}
	return Config{Catalog: p.Catalog, Namespace: p.Namespace, Grace: grace}, true, nil
}

// readSwitch reads the publication switch, if present.
func readSwitch(ctx context.Context, objs objects) (publication, bool, error) {
	data, err := objs.get(ctx, switchKey)
	if errors.Is(err, fs.ErrNotExist) {
		return publication{}, false, nil
	}
	if err != nil {
		return publication{}, false, fmt.Errorf("lakehouse: read %s: %w", switchKey, err)
	}
	var p publication
	if err := json.Unmarshal(data, &p); err != nil {
		return publication{}, false, fmt.Errorf("lakehouse: %s is not a publication switch: %w", switchKey, err)
	}
	return p, true, nil
}

// checkSwitch returns the switch's publication after checking that cfg
// names the catalog and namespace it records.
func checkSwitch(ctx context.Context, objs objects, root string, cfg Config) (publication, error) {
	p, ok, err := readSwitch(ctx, objs)
	if err != nil {
		return publication{}, err
	}
	if !ok {
		return publication{}, fmt.Errorf("%w: root %s has no %s", ErrNotEnabled, root, switchKey)
	}
	if p.Catalog != redact(cfg.Catalog) || p.Namespace != cfg.Namespace {
		return publication{}, fmt.Errorf("%w: root %s publishes to catalog %q namespace %q; Config names %q namespace %q",
			ErrCatalogMismatch, root, p.Catalog, p.Namespace, redact(cfg.Catalog), cfg.Namespace)
	}
	return p, nil
}

// recordedGrace returns the grace a publication uses: the caller's
// Config.Grace when set, else the one Enable recorded in the switch, else
// DefaultGrace (a switch that records none).
func recordedGrace(callers time.Duration, p publication) (time.Duration, error) {
	if callers != 0 {
		return callers, nil
	}
	if p.Grace == "" {
		return DefaultGrace, nil
	}
	g, err := time.ParseDuration(p.Grace)
	if err != nil {
		return 0, fmt.Errorf("lakehouse: %s: grace %q: %w", switchKey, p.Grace, err)
	}
	return g, nil
}

// checkCatalogForRoot refuses the file-based catalog on a bucket root.
func checkCatalogForRoot(root, catalog string) error {
	if catalog == "" && isBucketRoot(root) {
		return fmt.Errorf("lakehouse: the file-based catalog (Config.Catalog \"\") cannot commit atomically on bucket root %s; set Config.Catalog to a postgres:// (SQL catalog) or https:// (REST catalog) URL", root)
	}
	return nil
}
