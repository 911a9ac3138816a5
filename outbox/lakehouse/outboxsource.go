package lakehouse

import (
	"context"

	"github.com/ctdispatch/ctdispatch/outbox"
	"github.com/ctdispatch/ctdispatch/outbox/parquetbox"
)

// outboxSource is a parquetbox outbox as a source.
type outboxSource struct{ ob *parquetbox.Outbox }

func (s outboxSource) root() string { return s.ob.Root() }

func (s outboxSource) liveFiles(ctx context.Context, t outbox.Table) ([]liveFile, error) {
	files, err := s.ob.LiveFiles(ctx, t)
	if err != nil {
		return nil, err
	}
	out := make([]liveFile, len(files))
	for i, f := range files {
		out[i] = liveFile{name: f.Name, location: f.Location, day: f.Day, size: f.Size}
	}
	return out, nil
}

func (s outboxSource) removeReplaced(ctx context.Context, t outbox.Table, names []string) error {
	return s.ob.RemoveReplaced(ctx, t, names)
}
