//go:build linux

package parquetbox

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ctdispatch/ctdispatch/outbox"
)

// waitSettled waits until the changes made so far to dir's entries are
// settleTime old by the filesystem's clock, so that stamps taken after it
// are trusted. The filesystem stamps its own times; no clock can be
// injected into it, so this waits for the real one (about 100 ms).
func waitSettled(t *testing.T, dirs ...string) {
	t.Helper()
	var last int64
	for _, dir := range dirs {
		st, ok := stampDir(dir, false)
		require.True(t, ok, dir)
		last = max(last, st.ctime)
	}
	wait := settleTime
	if last%int64(time.Second) == 0 {
		wait = settleCoarse
	}
	time.Sleep(time.Until(time.Unix(0, last).Add(wait + time.Millisecond)))
}

// Stamps taken once a directory's last change has settled stay unchanged
// until its entries change, and see every kind of change to them; a file
// written in place is not one.
func TestDirStampsSeeEveryChangeToEntries(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		change    func(t *testing.T, dir string)
		unchanged bool
	}{
		{"nothing", func(*testing.T, string) {}, true},
		{"a file written in place", func(t *testing.T, dir string) {
			f, err := os.OpenFile(filepath.Join(dir, "a"), os.O_WRONLY|os.O_APPEND, 0)
			require.NoError(t, err)
			_, err = f.Write([]byte("more"))
			require.NoError(t, err)
			require.NoError(t, f.Close())
		}, true},
		{"a file created", func(t *testing.T, dir string) {
			require.NoError(t, os.WriteFile(filepath.Join(dir, "b"), nil, 0o600))
		}, false},
		{"a file removed", func(t *testing.T, dir string) {
			require.NoError(t, os.Remove(filepath.Join(dir, "a")))
		}, false},
		{"a file renamed over another", func(t *testing.T, dir string) {
			require.NoError(t, os.Rename(filepath.Join(dir, ".tmp"), filepath.Join(dir, "a")))
		}, false},
		{"a file moved in", func(t *testing.T, dir string) {
			require.NoError(t, os.Rename(filepath.Join(filepath.Dir(dir), "outside"), filepath.Join(dir, "c")))
		}, false},
		{"a directory made in it", func(t *testing.T, dir string) {
			require.NoError(t, os.Mkdir(filepath.Join(dir, "sub"), 0o700))
		}, false},
		{"its mode changed", func(t *testing.T, dir string) {
			require.NoError(t, os.Chmod(dir, 0o750))
		}, false},
		{"removed", func(t *testing.T, dir string) {
			require.NoError(t, os.RemoveAll(dir))
		}, false},
		{"replaced by another directory", func(t *testing.T, dir string) {
			require.NoError(t, os.Rename(dir, dir+".old"))
			require.NoError(t, os.Mkdir(dir, 0o700))
		}, false},
	} {
		for _, held := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/held=%v", tc.name, held), func(t *testing.T) {
				t.Parallel()
				dir := filepath.Join(t.TempDir(), "d")
				require.NoError(t, os.Mkdir(dir, 0o700))
				for _, name := range []string{"a", ".tmp", "../outside"} {
					require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte("x"), 0o600))
				}
				fresh := newDirStamps()
				fresh.add(dir)
				require.False(t, fresh.unchanged(), "a change of the last moments may share its time with the next")
				fresh.close()

				waitSettled(t, dir)
				s := newDirStamps()
				if !held {
					s.held = maxHeld // the listing holds as many as it may: stamped by path
				}
				s.add(dir)
				t.Cleanup(s.close)
				require.Equal(t, held, s.stamps[0].f != nil)
				require.True(t, s.unchanged())
				tc.change(t, dir)
				require.Equal(t, tc.unchanged, s.unchanged())
			})
		}
	}
}

// A directory absent when stamped, and its parent too, is unchanged
// while it stays absent: its nearest existing ancestor stands for it, so
// an entry made there counts as a change too, and one made above does
// not.
func TestDirStampsOfAnAbsentDirectory(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		change    func(t *testing.T, top string)
		unchanged bool
	}{
		{"nothing", func(*testing.T, string) {}, true},
		{"a file made above the nearest ancestor", func(t *testing.T, top string) {
			require.NoError(t, os.WriteFile(filepath.Join(top, "f"), nil, 0o600))
		}, true},
		{"a file made in the nearest ancestor (seen as a change: listed again)", func(t *testing.T, top string) {
			require.NoError(t, os.WriteFile(filepath.Join(top, "a", "f"), nil, 0o600))
		}, false},
		{"its parent made", func(t *testing.T, top string) {
			require.NoError(t, os.Mkdir(filepath.Join(top, "a", "b"), 0o700))
		}, false},
		{"it and its parent made", func(t *testing.T, top string) {
			require.NoError(t, os.MkdirAll(filepath.Join(top, "a", "b", "c"), 0o700))
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			top := t.TempDir()
			require.NoError(t, os.Mkdir(filepath.Join(top, "a"), 0o700))
			waitSettled(t, top, filepath.Join(top, "a"))
			s := newDirStamps()
			s.add(filepath.Join(top, "a", "b", "c"))
			t.Cleanup(s.close)
			require.True(t, s.unchanged())
			tc.change(t, top)
			require.Equal(t, tc.unchanged, s.unchanged())
		})
	}
}

// Closed stamps, and none at all, never vouch for a listing.
func TestDirStampsClosedOrNil(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	waitSettled(t, dir)
	s := newDirStamps()
	s.add(dir)
	require.True(t, s.unchanged())
	s.close()
	require.False(t, s.unchanged())
	var none *dirStamps
	require.False(t, none.unchanged())
}

// A fresh read looks only at what changed since the last look once the
// directories' stamps have settled: with nothing new it lists nothing;
// a record another process appended to a log segment it follows is read
// from that segment alone; a segment converted into a Parquet file moves
// the stamps, and both the logs and the table are listed again.
func TestLatestFreshReadsWhatChangedSinceTheLastLook(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b, a, bb := staleB(t)
	created := timerRec("r", "t", t0.Add(time.Hour), outbox.StatusCreated)
	created.Follow(nil, b.clock.Now())
	require.NoError(t, outbox.AppendAndWait(ctx, a, created)) // A's segment is made now
	table := filepath.Join(b.root, string(outbox.TableTimers))
	parts, err := filepath.Glob(filepath.Join(table, partitionKey+"*"))
	require.NoError(t, err)
	waitSettled(t, append(parts, a.walDir, table)...)

	fresh := func() outbox.Record {
		t.Helper()
		got, ok, unseen, err := bb.LatestFresh(ctx, outbox.TableTimers, created.ID)
		require.NoError(t, err)
		require.True(t, ok)
		require.Equal(t, time.Duration(0), unseen)
		return got
	}
	require.Equal(t, outbox.StatusCreated, fresh().Status) // lists, and stamps what it read
	files, tails := bb.files[outbox.TableTimers].stamps, bb.tails.listed
	require.True(t, files.unchanged())
	require.True(t, tails.unchanged())

	require.Equal(t, outbox.StatusCreated, fresh().Status)
	require.Same(t, files, bb.files[outbox.TableTimers].stamps, "nothing changed: nothing listed")
	require.Same(t, tails, bb.tails.listed)

	cancel := created
	cancel.Status = outbox.StatusCancelled
	cancel.Follow(&created, b.clock.Now())
	require.NoError(t, outbox.AppendAndWait(ctx, a, cancel))
	got := fresh()
	require.Equal(t, outbox.StatusCancelled, got.Status, "read from the end of A's segment")
	require.Equal(t, int64(2), got.Version)
	require.Same(t, files, bb.files[outbox.TableTimers].stamps)
	require.Same(t, tails, bb.tails.listed)

	again := cancel
	again.Status = outbox.StatusCreated
	again.Follow(&cancel, b.clock.Now())
	require.NoError(t, outbox.AppendAndWait(ctx, a, again))
	require.NoError(t, a.Flush(ctx)) // converted into a Parquet file, the segment removed
	got = fresh()
	require.Equal(t, int64(3), got.Version)
	require.Equal(t, outbox.StatusCreated, got.Status)
	require.NotSame(t, files, bb.files[outbox.TableTimers].stamps, "the table was listed again")
	require.NotSame(t, tails, bb.tails.listed, "the logs were listed again")
	tailRecs, err := bb.tails.of(outbox.TableTimers, created.ID)
	require.NoError(t, err)
	require.Empty(t, tailRecs, "the converted segment is no longer followed")
}
