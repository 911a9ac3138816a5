package lakehouse

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/apache/iceberg-go/catalog"

	"github.com/ctdispatch/ctdispatch/outbox"
	"github.com/ctdispatch/ctdispatch/outbox/parquetbox"
)

// TableStatus describes one table's current Iceberg snapshot.
type TableStatus struct {
	// Table is the table.
	Table outbox.Table
	// Published is false when the catalog has no such table yet (the
	// other fields are then zero).
	Published bool
	// SnapshotID and Time are the current snapshot's ID and commit time
	// (0 and the zero time before the first commit).
	SnapshotID int64
	Time       time.Time
	// Files and Rows count the data files the snapshot names and the rows
	// they hold (every recorded state not yet folded, as the files hold
	// them; Iceberg's own count).
	Files int64
	Rows  int64
	// Snapshots counts the snapshots kept (the current one and those not
	// yet expired).
	Snapshots int
	// MetadataLocation is the table's current metadata file: the one to
	// point an engine that reads a metadata file (BigQuery, DuckDB's
	// iceberg_scan) at.
	MetadataLocation string
}

// Status returns each table's current snapshot as the catalog cfg names
// has it.
func Status(ctx context.Context, ob *parquetbox.Outbox, cfg Config) ([]TableStatus, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	root, err := ob.Location()
	if err != nil {
		return nil, err
	}
	useRootBucket(ob, root)
	lc, err := openCatalog(ctx, root, cfg)
	if err != nil {
		return nil, err
	}
	defer lc.close()
	var out []TableStatus
	for _, t := range tables {
		st := TableStatus{Table: t}
		tbl, err := lc.load(ctx, t)
		if errors.Is(err, catalog.ErrNoSuchTable) {
			out = append(out, st)
			continue
		}
		if err != nil {
			return out, err
		}
		st.Published = true
		st.MetadataLocation = tbl.MetadataLocation()
		st.Snapshots = len(tbl.Metadata().Snapshots())
		if snap := tbl.CurrentSnapshot(); snap != nil {
			st.SnapshotID = snap.SnapshotID
			st.Time = time.UnixMilli(snap.TimestampMs).UTC()
			if snap.Summary != nil {
				st.Files, _ = strconv.ParseInt(snap.Summary.Properties["total-data-files"], 10, 64)
				st.Rows, _ = strconv.ParseInt(snap.Summary.Properties["total-records"], 10, 64)
			}
		}
		out = append(out, st)
	}
	return out, nil
}
