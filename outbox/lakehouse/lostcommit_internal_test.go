package lakehouse

import (
	"context"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/iceberg-go"
	iceio "github.com/apache/iceberg-go/io"
	"github.com/google/uuid"
	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/ctdispatch/ctdispatch/outbox"
	"github.com/ctdispatch/ctdispatch/outbox/parquetbox"
)

// publishHook, when set, is called as the file catalog publishes a claimed
// metadata version (renames vN.metadata.json.claim to vN.metadata.json):
// the moment a committer paused there is stuck in.
var (
	hookMu      sync.Mutex
	publishHook func(claim string)
)

// hookedFS is the local file IO with publishHook in its no-replace rename.
type hookedFS struct{ iceio.LocalFS }

func (h hookedFS) RenameNoReplace(src, dst string) error {
	if strings.HasSuffix(src, ".claim") {
		hookMu.Lock()
		hook := publishHook
		hookMu.Unlock()
		if hook != nil {
			hook(src)
		}
	}
	return h.LocalFS.RenameNoReplace(src, dst)
}

func init() {
	factory := func(context.Context, *url.URL, map[string]string) (iceio.IO, error) { return hookedFS{}, nil }
	for _, scheme := range []string{"", "file"} {
		iceio.Unregister(scheme)
		iceio.Register(scheme, factory)
	}
}

// Time budget: a few seconds; every wait is on an event. A publisher
// paused between its claim of a metadata version and its publication,
// past the file catalog's one-minute claim age, publishes the metadata of
// the committer that took its claim over as its own success: Publish
// finds its snapshot missing from the history, makes the commit again,
// and the table ends naming each live file once.
func TestLostCommitIsDetectedAndRedone(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	clock := clockwork.NewFakeClockAt(time.Now())
	ob, err := parquetbox.Open(ctx, parquetbox.Config{Root: dir, ProcessorUUID: uuid.New(), Clock: clock})
	require.NoError(t, err)
	defer ob.Close()
	require.NoError(t, Enable(ctx, ob, Config{}))
	src := outboxSource{ob}
	cfg := Config{Clock: clock}
	appendDispatches(t, ob, "r1", 5, outbox.StatusPending)
	_, err = publish(ctx, src, cfg)
	require.NoError(t, err)
	appendDispatches(t, ob, "r2", 5, outbox.StatusPending)

	xPaused, releaseX := make(chan string), make(chan struct{})
	otherPaused, releaseOther := make(chan struct{}), make(chan struct{})
	calls := 0
	hookMu.Lock()
	publishHook = func(claim string) {
		hookMu.Lock()
		calls++
		n := calls
		hookMu.Unlock()
		switch n {
		case 1: // the publisher, claim made
			xPaused <- claim
			<-releaseX
		case 2: // the committer that took the stale claim over
			close(otherPaused)
			<-releaseOther
		}
	}
	hookMu.Unlock()
	defer func() { hookMu.Lock(); publishHook = nil; hookMu.Unlock() }()

	type result struct {
		rep Report
		err error
	}
	xDone := make(chan result, 1)
	go func() {
		rep, err := publish(ctx, src, cfg)
		xDone <- result{rep, err}
	}()
	claim := <-xPaused
	old := time.Now().Add(-2 * time.Minute)
	require.NoError(t, os.Chtimes(claim, old, old), "the publisher's claim is now older than the catalog's claim age")

	lc, err := openCatalog(ctx, dir, cfg.WithDefaults())
	require.NoError(t, err)
	defer lc.close()
	otherDone := make(chan error, 1)
	go func() {
		tbl, err := lc.cat.LoadTable(ctx, lc.ident(outbox.TableDispatch))
		if err != nil {
			otherDone <- err
			return
		}
		txn := tbl.NewTransaction()
		if err := txn.SetProperties(iceberg.Properties{"owner": "analytics"}); err != nil {
			otherDone <- err
			return
		}
		_, err = txn.Commit(ctx)
		otherDone <- err
	}()
	<-otherPaused // the other committer claimed the version over the stale claim
	close(releaseX)
	x := <-xDone
	require.NoError(t, x.err)
	require.Equal(t, Appended, x.rep.Tables[0].Action)
	require.Equal(t, 1, x.rep.Tables[0].Redone, "its first commit published the other's metadata")
	close(releaseOther)
	require.NoError(t, <-otherDone, "the other committer retries on the new version")

	require.Equal(t, livePaths(t, src, outbox.TableDispatch), currentFiles(t, dir, outbox.TableDispatch))
	tbl, err := lc.load(ctx, outbox.TableDispatch)
	require.NoError(t, err)
	require.Equal(t, "analytics", tbl.Properties()["owner"])
	requireScanMatchesStore(t, ob, dir, outbox.TableDispatch)
}
