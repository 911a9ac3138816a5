//go:build !iceberg

package cli

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"time"

	"github.com/ctdispatch/ctdispatch/outbox"
	"github.com/ctdispatch/ctdispatch/outbox/parquetbox"
)

// icebergLinked says whether this build publishes Iceberg tables (build
// tag iceberg).
const icebergLinked = false

// lakeConfig stands for a root's Iceberg publication in a build without
// Iceberg: only whether the root publishes is known.
type lakeConfig struct {
	Catalog  string
	Grace    time.Duration
	LeaseTTL time.Duration
}

// lakeTableStatus stands for an Iceberg table's snapshot in a build
// without Iceberg; none is ever read.
type lakeTableStatus struct {
	Table            outbox.Table
	Published        bool
	SnapshotID       int64
	Time             time.Time
	Files, Rows      int64
	Snapshots        int
	MetadataLocation string
}

// errNoLakeSnapshot is never returned by a build without Iceberg.
var errNoLakeSnapshot = errors.New("no Iceberg snapshot")

// resolve refuses compact's Iceberg flags: this build cannot publish.
func (f *icebergFlags) resolve(context.Context, *Env, *parquetbox.Outbox, string) (*lakeConfig, error) {
	for _, name := range []string{"iceberg", "no-iceberg", "iceberg-catalog", "iceberg-grace"} {
		if f.changed(name) {
			return nil, errNoIceberg
		}
	}
	return nil, nil
}

// publishedConfig reports whether the outbox's root publishes Iceberg
// tables (its switch exists), which this build can say but not act on.
func publishedConfig(ctx context.Context, _ *Env, o *parquetbox.Outbox) (lakeConfig, bool, error) {
	_, err := o.GetRootObject(ctx, parquetbox.PublicationKey)
	if errors.Is(err, fs.ErrNotExist) {
		return lakeConfig{}, false, nil
	}
	return lakeConfig{}, err == nil, err
}

// publish cannot publish in this build: a root that publishes is left
// unpublished, and the command says why.
func publish(context.Context, io.Writer, *parquetbox.Outbox, lakeConfig) error {
	return errors.New("iceberg publication: " + errNoIceberg.Error())
}

// lakeStatus cannot read snapshots in this build.
func lakeStatus(context.Context, *parquetbox.Outbox, lakeConfig) ([]lakeTableStatus, error) {
	return nil, errNoIceberg
}

// lakeReadAsOf cannot read snapshots in this build.
func lakeReadAsOf(context.Context, *parquetbox.Outbox, lakeConfig, outbox.Table, time.Time) ([]outbox.Record, error) {
	return nil, errNoIceberg
}
