package console

import (
	"context"

	ctd "github.com/ctdispatch/ctdispatch/cloudtasks"
	"github.com/ctdispatch/ctdispatch/internal/durability"
	"github.com/ctdispatch/ctdispatch/outbox"
	"github.com/ctdispatch/ctdispatch/outbox/parquetbox"
	"github.com/ctdispatch/ctdispatch/outbox/pgbox"
)

// store is the outbox the console shows: its records, the figures of a
// pass over all of them, what it skipped, its files, and a dispatcher of
// its own for the recover action. Files (parquetbox) and PostgreSQL
// (pgbox) each have one.
type store interface {
	outbox.Outbox
	// stats summarizes every table, as parquetbox.Outbox.Stats does.
	stats(ctx context.Context) ([]parquetbox.TableStats, error)
	// damaged lists the files left out of reads.
	damaged() []*parquetbox.FileError
	// files counts each table's files per partition directory.
	files() ([]tableFiles, error)
	// dispatcher opens a dispatcher over the outbox with a processor of
	// its own; closing it closes what it opened.
	dispatcher(ctx context.Context, cfg *ctd.Config) (recoverer, error)
	// Close releases what the console opened.
	Close() error
}

// recoverer is the dispatcher the recover action runs.
type recoverer interface {
	Recover(ctx context.Context) (ctd.RecoverStats, error)
	Close(ctx context.Context) error
}

// fileStore is an outbox of Parquet files, opened read-only.
type fileStore struct {
	*parquetbox.Outbox
	cfg Config
}

func (f fileStore) stats(ctx context.Context) ([]parquetbox.TableStats, error) {
	return f.Stats(ctx)
}

func (f fileStore) damaged() []*parquetbox.FileError { return f.Damaged() }

func (f fileStore) files() ([]tableFiles, error) { return listFiles(f.cfg.Outbox) }

// dispatcher opens the files again for writing, with a log of their own.
func (f fileStore) dispatcher(ctx context.Context, cfg *ctd.Config) (recoverer, error) {
	return durability.OpenDispatcher(ctx, durability.Overlapped, parquetbox.Config{Root: f.cfg.Outbox, Logger: f.cfg.Logger}, *cfg)
}

// pgStore is an outbox in PostgreSQL, the caller's (Config.PostgresOutbox):
// it has no files and skips none, and the console does not close it.
type pgStore struct{ *pgbox.Outbox }

// stats carries pgbox's figures over: rows and IDs by status, queue,
// kind and processor; its bytes are the tables' size on the server.
func (p pgStore) stats(ctx context.Context) ([]parquetbox.TableStats, error) {
	stats, err := p.Stats(ctx)
	out := make([]parquetbox.TableStats, len(stats))
	for i, st := range stats {
		out[i] = parquetbox.TableStats{Table: st.Table, Bytes: st.Bytes, Rows: st.Rows, IDs: st.IDs,
			ByStatus: st.ByStatus, ByQueue: st.ByQueue, ByKind: st.ByKind, ByProcessor: st.ByProcessor}
	}
	return out, err
}

func (pgStore) damaged() []*parquetbox.FileError { return nil }

func (pgStore) files() ([]tableFiles, error) { return nil, nil }

// dispatcher shares the outbox: every process writes into the same tables.
func (p pgStore) dispatcher(ctx context.Context, cfg *ctd.Config) (recoverer, error) {
	return ctd.NewDispatcher(ctx, p.Outbox, cfg)
}

func (pgStore) Close() error { return nil }
