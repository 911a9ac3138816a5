package parquetbox

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/ctdispatch/ctdispatch/outbox"
)

// readersSee checks what every reader of a fresh outbox on r answers for
// run "g": ids IDs, each once, the latest states as Latest, Lookup and
// Stats give them, and rows Parquet rows.
func readersSee(t *testing.T, r *lakeRoot, ids int, latest map[string]outbox.Status, rows int64) {
	t.Helper()
	ctx := context.Background()
	o := r.open(t, "")
	hist, err := o.Lookup(ctx, outbox.Query{Table: outbox.TableDispatch, RunID: "g", History: true})
	require.NoError(t, err)
	seen := map[string]int{}
	for _, rec := range hist {
		seen[rec.ID]++
	}
	require.Len(t, seen, ids)
	for id, n := range seen {
		require.Equal(t, 1, n, "%s read %d times", id, n)
	}
	for id, want := range latest {
		got, ok, err := o.Latest(ctx, outbox.TableDispatch, id)
		require.NoError(t, err)
		require.True(t, ok, id)
		require.Equal(t, want, got.Status, id)
	}
	st, err := o.Stats(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(ids), st[0].IDs)
	require.Equal(t, rows, st[0].Rows)
	require.Empty(t, st[0].Skipped)
}

// While the tables are published, compaction removes no file the readers
// read: over four generations of one unit (each folding the last output
// and a new conversion), every file ever written stays on storage, the
// readers and LiveFiles see only the newest output, ReplacedFiles lists
// the rest, and pruned commits bring no folded input back. RemoveReplaced
// then removes them (refusing a live file); with the switch removed, the
// next compaction removes what it folds, as before.
func TestPublicationKeepsFoldedInputsInvisible(t *testing.T) {
	t.Parallel()
	for _, storage := range []string{"directory", "fake GCS"} {
		t.Run(storage, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			r := newLakeRoot(t, storage)
			w := r.open(t, procA)
			c := r.open(t, "")
			created, err := c.CreateRootObject(ctx, PublicationKey, []byte(`{"catalog":""}`))
			require.NoError(t, err)
			require.True(t, created)

			var everything, outputs []string
			latest := map[string]outbox.Status{}
			published := true
			generation := func(gen int) string {
				t.Helper()
				for i := range 5 {
					rec := dispatchRec("g", fmt.Sprintf("%d-%d", gen, i), "1", outbox.StatusPending)
					require.NoError(t, outbox.AppendAndWait(ctx, w, rec))
					latest[rec.ID] = outbox.StatusPending
					if gen > 1 {
						prev := dispatchRec("g", fmt.Sprintf("%d-%d", gen-1, i), "1", outbox.StatusCreated)
						require.NoError(t, outbox.AppendAndWait(ctx, w, prev))
						latest[prev.ID] = outbox.StatusCreated
					}
				}
				require.NoError(t, w.Flush(ctx))
				everything = append(everything, conv(gen-1))
				var units []UnitCompaction
				err := c.Compact(ctx, CompactConfig{Tables: []outbox.Table{outbox.TableDispatch}, Full: true,
					Trace: &CompactTrace{Unit: func(_ outbox.Table, u UnitCompaction) { units = append(units, u) }}})
				require.NoError(t, err)
				require.Len(t, units, 1)
				require.Equal(t, UnitCompacted, units[0].Action)
				wantKept := units[0].FilesIn
				if !published {
					wantKept = 0
				}
				require.Equal(t, wantKept, units[0].KeptForPublication)
				require.Len(t, units[0].Outputs, 1)
				out := outputName(c, outbox.TableDispatch, units[0].Outputs[0])
				m := outputPattern.FindStringSubmatch(out)
				require.Equal(t, []string{out, fmt.Sprint(gen), fmt.Sprint(gen)}, m, "generation and weight")
				everything = append(everything, out)
				outputs = append(outputs, out)
				return out
			}
			for gen := 1; gen <= 4; gen++ {
				out := generation(gen)
				require.Equal(t, sortedCopy(everything), stored(t, c), "generation %d: every file ever written stays", gen)
				require.Equal(t, r.wants(t, out), liveFiles(t, c, outbox.TableDispatch), "generation %d", gen)
				require.Equal(t, r.wants(t, sortedCopy(everything[:len(everything)-1])...), replacedFiles(t, c), "generation %d", gen)
				readersSee(t, r, 5*gen, latest, int64(5*gen))
				keys, err := c.store.keys(ctx, commitPrefix(outbox.TableDispatch, "created_date=2026-03-01"))
				require.NoError(t, err)
				require.Len(t, keys, min(gen, 2), "generation %d: older commits pruned", gen)
			}

			// A live file among them refuses the whole call.
			replaced := sortedCopy(everything[:len(everything)-1])
			live := outputs[len(outputs)-1]
			err = c.RemoveReplaced(ctx, outbox.TableDispatch, append([]string{replaced[0], live}, replaced[1:]...))
			require.ErrorIs(t, err, ErrLiveFile)
			require.EqualError(t, err, fmt.Sprintf("outbox: will not remove %s: outbox: file is live: the store's readers read it now; only files a compaction folded in or retention dropped, and outputs of compactions that lost, may be removed", c.store.where(outbox.TableDispatch, live)))
			require.Equal(t, sortedCopy(everything), stored(t, c), "nothing removed")

			require.NoError(t, c.RemoveReplaced(ctx, outbox.TableDispatch, replaced))
			require.Equal(t, []string{live}, stored(t, c))
			require.Empty(t, replacedFiles(t, c))
			require.Equal(t, r.wants(t, live), liveFiles(t, c, outbox.TableDispatch))
			readersSee(t, r, 20, latest, 20)
			require.NoError(t, c.RemoveReplaced(ctx, outbox.TableDispatch, replaced), "already gone")

			out := generation(5)
			require.Equal(t, r.wants(t, out), liveFiles(t, c, outbox.TableDispatch))
			require.Equal(t, r.wants(t, conv(4), live), replacedFiles(t, c))

			// Publication off: the next compaction removes its inputs
			// and the inputs earlier ones left.
			require.NoError(t, c.DeleteRootObject(ctx, PublicationKey))
			published = false
			last := generation(6)
			require.Equal(t, []string{last}, stored(t, c))
			require.Empty(t, replacedFiles(t, c))
			readersSee(t, r, 30, latest, 30)
		})
	}
}

func replacedFiles(t *testing.T, o *Outbox) []LiveFile {
	t.Helper()
	got, err := o.ReplacedFiles(context.Background(), outbox.TableDispatch)
	require.NoError(t, err)
	if got == nil {
		got = []LiveFile{}
	}
	return got
}

// A step that merges twice (a tier's four runs, and another writer's file
// that is always rewritten alone) commits twice: the second commit still
// hides the first one's inputs, which stay on storage.
func TestPublicationHidesTheInputsOfEachMergeOfAStep(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r := newLakeRoot(t, "directory")
	// The day of the DuckDB file's rows.
	r.b.clock = clockwork.NewFakeClockAt(time.Date(2026, 2, 1, 12, 0, 0, 0, time.UTC))
	w := r.open(t, procA)
	for seg := range 4 {
		require.NoError(t, outbox.AppendAndWait(ctx, w, dispatchRec("r", fmt.Sprint(seg), "1", outbox.StatusPending)))
		require.NoError(t, w.Flush(ctx))
	}
	// Named as a merge of weight 16, so that it is a run of a tier of
	// its own.
	copyTestdata(t, r.b.root, outbox.TableDispatch, "duckdb_dispatch_outbox.parquet")
	const day = "created_date=2026-02-01/"
	foreign := day + "compacted-1-ffffffff-w16-0.parquet"
	require.NoError(t, os.Rename(filepath.Join(r.b.root, "dispatch_outbox", day+"duckdb_dispatch_outbox.parquet"), filepath.Join(r.b.root, "dispatch_outbox", foreign)))

	c := r.open(t, "")
	_, err := c.CreateRootObject(ctx, PublicationKey, nil)
	require.NoError(t, err)
	var units []UnitCompaction
	require.NoError(t, c.Compact(ctx, CompactConfig{Tables: []outbox.Table{outbox.TableDispatch},
		Trace: &CompactTrace{Unit: func(_ outbox.Table, u UnitCompaction) { units = append(units, u) }}}))
	require.Len(t, units, 1)
	require.Equal(t, 2, units[0].Merges)
	require.Equal(t, 5, units[0].KeptForPublication)
	var outs []string
	for _, o := range units[0].Outputs {
		outs = append(outs, outputName(c, outbox.TableDispatch, o))
	}
	got := liveFiles(t, c, outbox.TableDispatch)
	var names []string
	for _, f := range got {
		names = append(names, f.Name)
	}
	require.Equal(t, sortedCopy(outs), names)
	convs := make([]string, 4)
	for i := range convs {
		convs[i] = fmt.Sprintf("%s%s-%016d.parquet", day, procA, i)
	}
	var replaced []string
	for _, f := range replacedFiles(t, c) {
		replaced = append(replaced, f.Name)
	}
	require.Equal(t, sortedCopy(append(convs, foreign)), replaced)
	st, err := r.open(t, "").Stats(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(4+2000), st[0].IDs)
	require.Equal(t, int64(4+2000), st[0].Rows, "no input read beside its output")
}

// Retention that drops a unit whole keeps its files while the tables are
// published: no reader reads them, and they are replaced files.
func TestPublicationKeepsAUnitRetentionDropped(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r := newLakeRoot(t, "directory")
	w := r.open(t, procA)
	for seg := range 2 {
		require.NoError(t, outbox.AppendAndWait(ctx, w, dispatchRec("r", fmt.Sprint(seg), "1", outbox.StatusCreated)))
		require.NoError(t, w.Flush(ctx))
	}
	c := r.open(t, "")
	_, err := c.CreateRootObject(ctx, PublicationKey, nil)
	require.NoError(t, err)
	r.b.clock.Advance(time.Hour)
	var units []UnitCompaction
	require.NoError(t, c.Compact(ctx, CompactConfig{Tables: []outbox.Table{outbox.TableDispatch}, Retention: Retention{"*": 0},
		Trace: &CompactTrace{Unit: func(_ outbox.Table, u UnitCompaction) { units = append(units, u) }}}))
	require.Len(t, units, 1)
	require.Equal(t, UnitDropped, units[0].Action)
	require.Equal(t, 2, units[0].KeptForPublication)
	require.Equal(t, []string{conv(0), conv(1)}, stored(t, c))
	require.Empty(t, liveFiles(t, c, outbox.TableDispatch))
	require.Equal(t, r.wants(t, conv(0), conv(1)), replacedFiles(t, c))
	got, err := r.open(t, "").Lookup(ctx, outbox.Query{Table: outbox.TableDispatch, RunID: "r"})
	require.NoError(t, err)
	require.Empty(t, got)
	// A compaction finds nothing to read there and changes nothing.
	require.NoError(t, c.Compact(ctx, CompactConfig{Tables: []outbox.Table{outbox.TableDispatch}, Retention: Retention{"*": 0}}))
	require.Equal(t, []string{conv(0), conv(1)}, stored(t, c))
	require.NoError(t, c.RemoveReplaced(ctx, outbox.TableDispatch, []string{conv(0), conv(1)}))
	require.Empty(t, stored(t, c))
}
