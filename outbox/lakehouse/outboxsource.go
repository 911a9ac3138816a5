package lakehouse

import (
	"context"
	"errors"

	"github.com/ctdispatch/ctdispatch/outbox"
	"github.com/ctdispatch/ctdispatch/outbox/parquetbox"
)

// outboxSource is a parquetbox outbox as a source.
type outboxSource struct{ ob *parquetbox.Outbox }

func (s outboxSource) root() string { return s.ob.Root() }

// errLiveFiles: parquetbox's LiveFiles and RemoveReplaced are being added
// on branch lakestore; this adapter calls them once that is merged.
var errLiveFiles = errors.New("lakehouse: parquetbox.(*Outbox).LiveFiles is not merged yet")

func (s outboxSource) liveFiles(context.Context, outbox.Table) ([]liveFile, error) {
	return nil, errLiveFiles
}

func (s outboxSource) removeReplaced(context.Context, outbox.Table, []string) error {
	return errLiveFiles
}
