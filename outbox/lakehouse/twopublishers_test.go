package lakehouse_test

import (
	"context"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ctdispatch/ctdispatch/outbox"
	"github.com/ctdispatch/ctdispatch/outbox/lakehouse"
)

// Time budget: a few seconds; every wait is on an event (the hook's
// channels), time moves only by the injected clock. Publisher A checks
// its lease and is paused before its commit (Config.BeforeCommit) past
// the lease's TTL; publisher B takes the lease and publishes the same new
// files and more; A resumes and commits what it computed before. No path
// is registered twice (by the manifests of every snapshot, and by
// iceberg-go's scan), and the final snapshot names exactly LiveFiles.
func TestPausedPublisherRegistersNothingTwice(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	ob, clock := openRoot(t, dir)
	cfgB := lakehouse.Config{Clock: clock, LeaseTTL: time.Minute}
	require.NoError(t, lakehouse.Enable(ctx, ob, cfgB))
	writeDispatches(t, ob, clock, "r1", 4, true)
	_, err := lakehouse.Publish(ctx, ob, cfgB)
	require.NoError(t, err)
	writeDispatches(t, ob, clock, "r2", 3, true)

	paused, resume := make(chan struct{}), make(chan struct{})
	cfgA := cfgB
	var first sync.Once // only the first commit pauses
	cfgA.BeforeCommit = func(table string) {
		if table == string(outbox.TableDispatch) {
			first.Do(func() {
				close(paused)
				<-resume
			})
		}
	}
	type result struct {
		rep lakehouse.Report
		err error
	}
	aDone := make(chan result, 1)
	go func() {
		rep, err := lakehouse.Publish(ctx, ob, cfgA)
		aDone <- result{rep, err}
	}()
	<-paused // A checked its lease and computed its append of r2's files

	clock.Advance(2 * time.Minute) // A's lease has expired
	writeDispatches(t, ob, clock, "r3", 2, true)
	rep, err := lakehouse.Publish(ctx, ob, cfgB)
	require.NoError(t, err)
	require.Equal(t, lakehouse.Appended, rep.Tables[0].Action, "B took the lease over")
	afterB := currentTable(t, ob, cfgB, outbox.TableDispatch).CurrentSnapshot().SnapshotID

	close(resume)
	a := <-aDone
	require.NoError(t, a.err)
	require.Equal(t, lakehouse.Current, a.rep.Tables[0].Action, "A found B's snapshot holding its files")
	require.Equal(t, 1, a.rep.Tables[0].Redone, "A's commit, rebuilt on B's, was refused for naming files twice")

	tbl := currentTable(t, ob, cfgB, outbox.TableDispatch)
	require.Equal(t, afterB, tbl.CurrentSnapshot().SnapshotID, "A committed nothing")
	live := liveLocations(t, ob, outbox.TableDispatch)
	require.Equal(t, live, snapshotPaths(t, tbl, tbl.CurrentSnapshot()))
	regs := registrations(t, tbl)
	var registered []string
	for path, snaps := range regs {
		require.Len(t, snaps, 1, "%s registered by snapshots %v", path, snaps)
		registered = append(registered, path)
	}
	sort.Strings(registered)
	require.Equal(t, live, registered, "only appends so far: every live file registered once")
	rows := scanRows(t, tbl, tbl.CurrentSnapshot().SnapshotID)
	require.Equal(t, storeRows(t, ob, "r1", "r2", "r3"), rows, "the scan reads each file once")
}
