package lakehouse

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/catalog"
	"github.com/apache/iceberg-go/table"
	"github.com/google/uuid"

	"github.com/ctdispatch/ctdispatch/outbox"
	"github.com/ctdispatch/ctdispatch/outbox/parquetbox"
)

// tokenProperty is the snapshot summary property a publisher puts its
// commit's token in, to find that snapshot in the table's history after
// the commit and so tell a commit that landed from one that was lost.
const tokenProperty = "ctdispatch.publication"

// committedAtProperty is the snapshot summary property holding the time,
// by Config.Clock, a publisher committed the snapshot. Expiry measures a
// snapshot's age by it: iceberg-go stamps a snapshot with the machine's
// clock, which a test or a replay cannot steer.
const committedAtProperty = "ctdispatch.committed-at"

// maxAttempts bounds the commits Publish tries for one table in one run
// (each after the previous one was lost or met another commit).
const maxAttempts = 8

// Action says what Publish did to a table.
type Action string

// The actions of a TablePublication.
const (
	// Appended: one snapshot registered the new live files (an append).
	Appended Action = "appended"
	// Replaced: one snapshot replaced the files no longer live (folded
	// by compaction, dropped by retention) by the new ones.
	Replaced Action = "replaced"
	// Current: the current snapshot already named exactly the live files.
	Current Action = "current"
	// Absent: the table has no live files and no Iceberg table.
	Absent Action = "absent"
	// Busy: another publisher holds the table's lease; skipped.
	Busy Action = "busy"
)

// Report says what Publish did to each table.
type Report struct {
	Tables []TablePublication
}

// TablePublication reports the publication of one table.
type TablePublication struct {
	// Table is the table; Action what was done.
	Table  outbox.Table
	Action Action
	// SnapshotID is the table's current snapshot afterwards (0: none).
	SnapshotID int64
	// Files counts the data files it names.
	Files int
	// Added and Removed count the files the commit registered and
	// unregistered.
	Added, Removed int
	// Redone counts commits found lost after they returned (the
	// snapshot they made is not in the table's history) or refused for
	// naming a file twice, and made again from the table as it then was.
	Redone int
	// Expired counts snapshots expired (older than Config.Grace).
	Expired int
	// Deleted lists the files removed from storage (names relative to
	// the table's directory): no longer live, and named by no remaining
	// snapshot.
	Deleted []string
	// Busy says who holds the table when Action is Busy.
	Busy *BusyError
}

// Publish makes each table's current Iceberg snapshot name exactly the
// files the store's own readers treat as live (parquetbox's LiveFiles),
// in one commit per table: an append when files were only added, one
// replace of the removed by the added otherwise. Each table is published
// under a lease of its own (_iceberg/leases/), so one publisher at a
// time commits it; a table another holds is reported Busy.
//
// Every commit is verified: the table is loaded again and the snapshot
// the commit made (found by a token in its summary) must be in the
// history and name exactly the files computed. A commit that is not
// (lost: with the file-based catalog, a committer paused past the
// catalog's one-minute claim may publish another's metadata as its own)
// is made again from the table as it now is, while the lease holds. A
// commit whose snapshot would name a file twice is refused before it
// reaches the catalog (ErrDuplicatePath), also when iceberg-go's commit
// retries rebuild it on a newer snapshot, and is then made again the same
// way: no file is ever registered twice.
//
// Then snapshots that stopped being current more than Config.Grace ago
// expire (never the current one), with no file deleted by Iceberg, and
// the files no longer live that no remaining snapshot names are removed
// through the store (parquetbox's RemoveReplaced, which refuses a live
// file). A query that started on a snapshot younger than the grace
// therefore finds every file it names. The grace is cfg.Grace when set,
// else the one Enable recorded in the root.
//
// Publish fails with ErrNotEnabled on a root whose publication is off,
// and with ErrCatalogMismatch when cfg names another catalog or namespace
// than Enable recorded.
func Publish(ctx context.Context, ob *parquetbox.Outbox, cfg Config) (Report, error) {
	if root, err := ob.Location(); err == nil {
		useRootBucket(ob, root)
	} // else publish reports it
	return publish(ctx, outboxSource{ob}, cfg)
}

func publish(ctx context.Context, src source, cfg Config) (Report, error) {
	callersGrace := cfg.Grace
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return Report{}, err
	}
	objs := src.objects()
	root, err := src.location()
	if err != nil {
		return Report{}, err
	}
	sw, err := checkSwitch(ctx, objs, root, cfg)
	if err != nil {
		return Report{}, err
	}
	if cfg.Grace, err = recordedGrace(callersGrace, sw); err != nil {
		return Report{}, err
	}
	if err := cfg.validate(); err != nil {
		return Report{}, err
	}
	lc, err := openCatalog(ctx, root, cfg)
	if err != nil {
		return Report{}, err
	}
	defer lc.close()
	p := &publisher{src: src, objs: objs, lc: lc, cfg: cfg, holder: uuid.NewString()}
	var rep Report
	for _, t := range tables {
		tp, err := p.table(ctx, t)
		if err != nil {
			return rep, fmt.Errorf("lakehouse: publish %s: %w", t, err)
		}
		rep.Tables = append(rep.Tables, tp)
	}
	return rep, nil
}

type publisher struct {
	src    source
	objs   objects
	lc     *lakeCatalog
	cfg    Config
	holder string
}

func (p *publisher) table(ctx context.Context, t outbox.Table) (TablePublication, error) {
	tp := TablePublication{Table: t}
	l, err := takeLease(ctx, p.objs, t, p.holder, p.cfg.Clock, p.cfg.LeaseTTL)
	var busy *BusyError
	if errors.As(err, &busy) {
		tp.Action, tp.Busy = Busy, busy
		return tp, nil
	}
	if err != nil {
		return tp, err
	}
	defer func() { _ = l.release(context.WithoutCancel(ctx)) }()

	tbl, err := p.lc.load(ctx, t)
	if errors.Is(err, catalog.ErrNoSuchTable) {
		live, err := p.src.liveFiles(ctx, t)
		if err != nil {
			return tp, err
		}
		if len(live) == 0 {
			tp.Action = Absent
			return tp, nil
		}
		tbl, err = p.lc.ensure(ctx, t)
		if err != nil {
			return tp, err
		}
	} else if err != nil {
		return tp, err
	}

	tbl, err = p.commit(ctx, l, t, tbl, &tp)
	if err != nil {
		return tp, err
	}
	if snap := tbl.CurrentSnapshot(); snap != nil {
		tp.SnapshotID = snap.SnapshotID
	}
	if err := p.expire(ctx, l, t, tbl, &tp); err != nil {
		return tp, err
	}
	return tp, nil
}

// commit makes the table's current snapshot name the live files, in one
// verified commit (more when one is lost), and returns the table after.
func (p *publisher) commit(ctx context.Context, l *lease, t outbox.Table, tbl *table.Table, tp *TablePublication) (*table.Table, error) {
	tp.Action = Current
	for attempt := 1; ; attempt++ {
		fsys, err := tbl.FS(ctx)
		if err != nil {
			return nil, err
		}
		current, err := snapshotFiles(fsys, tbl.CurrentSnapshot())
		if err != nil {
			return nil, err
		}
		if dup := duplicatePath(current); dup != "" {
			return nil, fmt.Errorf("%w: the current snapshot %d already names %s twice", ErrDuplicatePath, tbl.CurrentSnapshot().SnapshotID, dup)
		}
		live, err := p.src.liveFiles(ctx, t)
		if err != nil {
			return nil, err
		}
		have := setOf(current)
		want := make(map[string]struct{}, len(live))
		var add, del []string
		for _, f := range live {
			want[f.location] = struct{}{}
			if _, ok := have[f.location]; !ok {
				add = append(add, f.location)
			}
		}
		for _, path := range current {
			if _, ok := want[path]; !ok {
				del = append(del, path)
			}
		}
		tp.Files = len(current)
		if len(add) == 0 && len(del) == 0 {
			return tbl, nil
		}
		if attempt > maxAttempts {
			return nil, fmt.Errorf("no commit of table %s landed in %d attempts", t, maxAttempts)
		}
		if err := l.check(ctx); err != nil {
			return nil, err
		}
		if p.cfg.BeforeCommit != nil {
			p.cfg.BeforeCommit(string(t))
		}
		token := uuid.NewString()
		props := iceberg.Properties{tokenProperty: token, committedAtProperty: p.cfg.Clock.Now().UTC().Format(time.RFC3339Nano)}
		txn := tbl.NewTransaction()
		if len(del) == 0 {
			err = txn.AddFiles(ctx, add, props, false)
		} else {
			err = txn.ReplaceDataFiles(ctx, del, add, props)
		}
		if err != nil {
			return nil, fmt.Errorf("stage %d added and %d removed files: %w", len(add), len(del), err)
		}
		_, cerr := txn.Commit(ctx)
		if cerr != nil && !errors.Is(cerr, table.ErrCommitFailed) && !errors.Is(cerr, ErrDuplicatePath) {
			// The commit's fate is unknown: look before anything else.
			p.cfg.Logger.Warn("lakehouse: commit failed; verifying", "table", t, "err", cerr)
		}
		fresh, err := p.lc.load(ctx, t)
		if err != nil {
			return nil, errors.Join(cerr, err)
		}
		landed, err := verify(ctx, fresh, token, want)
		if err != nil {
			return nil, err
		}
		if landed {
			tp.Added, tp.Removed = len(add), len(del)
			tp.Files = len(want)
			tp.Action = Appended
			if len(del) > 0 {
				tp.Action = Replaced
			}
			return fresh, nil
		}
		tp.Redone++
		if cerr == nil {
			p.cfg.Logger.Warn("lakehouse: a commit that returned is not in the table's history; making it again", "table", t, "attempt", attempt)
		} else {
			p.cfg.Logger.Info("lakehouse: commit did not land; making it again", "table", t, "attempt", attempt, "err", cerr)
		}
		tbl = fresh
	}
}

// verify says whether the snapshot holding token is in the table's history
// and names exactly the files of want.
func verify(ctx context.Context, tbl *table.Table, token string, want map[string]struct{}) (bool, error) {
	fsys, err := tbl.FS(ctx)
	if err != nil {
		return false, err
	}
	for entry := range tbl.Metadata().SnapshotLogs() {
		snap := tbl.SnapshotByID(entry.SnapshotID)
		if snap == nil || snap.Summary == nil || snap.Summary.Properties[tokenProperty] != token {
			continue
		}
		files, err := snapshotFiles(fsys, snap)
		if err != nil {
			return false, err
		}
		if !sameSet(files, want) {
			return false, fmt.Errorf("snapshot %d (token %s) names %d files, not the %d computed", snap.SnapshotID, token, len(files), len(want))
		}
		return true, nil
	}
	return false, nil
}

// expire expires the snapshots superseded more than Grace ago and removes
// the files no longer live that no remaining snapshot names.
func (p *publisher) expire(ctx context.Context, l *lease, t outbox.Table, tbl *table.Table, tp *TablePublication) error {
	cutoff := p.cfg.Clock.Now().Add(-p.cfg.Grace)
	logs := slices.Collect(tbl.Metadata().SnapshotLogs())
	cur := tbl.CurrentSnapshot()
	var expired []int64
	for i, entry := range logs {
		if cur != nil && entry.SnapshotID == cur.SnapshotID {
			continue
		}
		// A snapshot stopped being current when the next one was made.
		if i+1 < len(logs) && committedAt(tbl, logs[i+1]).Before(cutoff) && tbl.SnapshotByID(entry.SnapshotID) != nil {
			expired = append(expired, entry.SnapshotID)
		}
	}
	if len(expired) > 0 {
		if err := l.check(ctx); err != nil {
			return err
		}
		// Committed straight to the catalog: iceberg-go's
		// ExpireSnapshots measures age by the machine's clock, and
		// deletes files unless told not to; this removes the snapshots
		// only (postCommit false: no file deleted).
		reqs := []table.Requirement{table.AssertTableUUID(tbl.Metadata().TableUUID()), table.AssertRefSnapshotID(table.MainBranch, &cur.SnapshotID)}
		upd := []table.Update{table.NewRemoveSnapshotsUpdate(expired, false)}
		if _, _, err := p.lc.cat.CommitTable(ctx, tbl.Identifier(), reqs, upd); err != nil {
			if errors.Is(err, table.ErrCommitFailed) {
				return nil // another commit came first; the next run expires
			}
			return fmt.Errorf("expire %d snapshots: %w", len(expired), err)
		}
		tp.Expired = len(expired)
		var err error
		if tbl, err = p.lc.load(ctx, t); err != nil {
			return err
		}
	}
	replaced, err := p.src.replacedFiles(ctx, t)
	if err != nil || len(replaced) == 0 {
		return err
	}
	fsys, err := tbl.FS(ctx)
	if err != nil {
		return err
	}
	named := map[string]struct{}{}
	for _, snap := range tbl.Metadata().Snapshots() {
		files, err := snapshotFiles(fsys, &snap)
		if err != nil {
			return err
		}
		for _, f := range files {
			named[f] = struct{}{}
		}
	}
	var names []string
	for _, f := range replaced {
		if _, ok := named[f.location]; !ok {
			names = append(names, f.name)
		}
	}
	if len(names) == 0 {
		return nil
	}
	if err := l.check(ctx); err != nil {
		return err
	}
	if err := p.src.removeReplaced(ctx, t, names); err != nil {
		return fmt.Errorf("remove %d replaced files: %w", len(names), err)
	}
	tp.Deleted = names
	return nil
}

// committedAt is when a snapshot of the log was committed: by the
// publisher's clock when a publisher made it, else by the committer's
// stamp.
func committedAt(tbl *table.Table, entry table.SnapshotLogEntry) time.Time {
	if snap := tbl.SnapshotByID(entry.SnapshotID); snap != nil && snap.Summary != nil {
		if at, err := time.Parse(time.RFC3339Nano, snap.Summary.Properties[committedAtProperty]); err == nil {
			return at
		}
	}
	return time.UnixMilli(entry.TimestampMs)
}
