package lakehouse

import (
	"context"

	"github.com/ctdispatch/ctdispatch/outbox"
	"github.com/ctdispatch/ctdispatch/outbox/parquetbox"
)

// outboxSource is a parquetbox outbox as a source.
type outboxSource struct{ ob *parquetbox.Outbox }

func (s outboxSource) location() (string, error) { return s.ob.Location() }

func (s outboxSource) objects() objects { return objects(s) }

func (s outboxSource) liveFiles(ctx context.Context, t outbox.Table) ([]liveFile, error) {
	return convert(s.ob.LiveFiles(ctx, t))
}

func (s outboxSource) replacedFiles(ctx context.Context, t outbox.Table) ([]liveFile, error) {
	return convert(s.ob.ReplacedFiles(ctx, t))
}

func (s outboxSource) removeReplaced(ctx context.Context, t outbox.Table, names []string) error {
	return s.ob.RemoveReplaced(ctx, t, names)
}

func convert(files []parquetbox.LiveFile, err error) ([]liveFile, error) {
	if err != nil {
		return nil, err
	}
	out := make([]liveFile, len(files))
	for i, f := range files {
		out[i] = liveFile{name: f.Name, location: f.Location, day: f.Day, size: f.Size}
	}
	return out, nil
}
