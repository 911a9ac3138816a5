package parquetbox

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/ctdispatch/ctdispatch/outbox"

	"github.com/ctdispatch/ctdispatch/outbox/internal/bucket"
	"github.com/stretchr/testify/require"
)

// Time budget: under 10s on 2 cores for the whole file (the 48-round day
// is the largest, about 5s).

func TestRunBoundAndTiers(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ weight, tier, bound int }{
		{1, 0, 1}, {2, 0, 2}, {3, 0, 2}, {4, 1, 2}, {5, 1, 3}, {15, 1, 3},
		{16, 2, 3}, {17, 2, 4}, {48, 2, 4}, {64, 3, 4}, {65, 3, 5},
	} {
		require.Equal(t, tc.tier, tierOf(tc.weight), "tier of %d", tc.weight)
		require.Equal(t, tc.bound, runBound(tc.weight), "bound of %d", tc.weight)
	}
}

func TestParseRun(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, key string
		weight    int
	}{
		{"created_date=2026-03-01/b3of8-compacted-17-ab12cd34-w16-0.parquet", "created_date=2026-03-01/b3of8-compacted-17-ab12cd34-w16", 16},
		{"created_date=2026-03-01/b3of8-compacted-17-ab12cd34-w16-1.parquet", "created_date=2026-03-01/b3of8-compacted-17-ab12cd34-w16", 16},
		{"created_date=2026-03-01/compacted-17-ab12cd34-w4-0.parquet", "created_date=2026-03-01/compacted-17-ab12cd34-w4", 4},
		{"created_date=2026-03-01/compacted-17-ab12cd34.parquet", "created_date=2026-03-01/compacted-17-ab12cd34.parquet", 1},
		{"created_date=2026-03-01/compacted-17-ab12cd34-w0-0.parquet", "created_date=2026-03-01/compacted-17-ab12cd34-w0-0.parquet", 1},
		{"created_date=2026-03-01/b3of8-" + procA + "-0000000000000001.parquet", "created_date=2026-03-01/b3of8-" + procA + "-0000000000000001.parquet", 1},
		{"created_date=2026-03-01/data_0.parquet", "created_date=2026-03-01/data_0.parquet", 1},
	} {
		key, w := parseRun(tc.name)
		require.Equal(t, tc.key, key, tc.name)
		require.Equal(t, tc.weight, w, tc.name)
	}
}

func TestSplitBucket(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		base    string
		k, n    int
		rest    string
		bounded bool
	}{
		{"b3of8-x.parquet", 3, 8, "x.parquet", true},
		{"b0of2-compacted-1-a-w1-0.parquet", 0, 2, "compacted-1-a-w1-0.parquet", true},
		{"b8of8-x.parquet", 0, 0, "b8of8-x.parquet", false},   // k must be below n
		{"b03of8-x.parquet", 0, 0, "b03of8-x.parquet", false}, // one spelling only
		{"b0of1-x.parquet", 0, 0, "b0of1-x.parquet", false},   // one bucket has no prefix
		{"b1of257-x.parquet", 0, 0, "b1of257-x.parquet", false},
		{"b3a1c2d4-0000-4000-8000-00000000000a-0000000000000001.parquet", 0, 0, "b3a1c2d4-0000-4000-8000-00000000000a-0000000000000001.parquet", false},
	} {
		k, n, rest, ok := splitBucket(tc.base)
		require.Equal(t, []any{tc.k, tc.n, tc.rest, tc.bounded}, []any{k, n, rest, ok}, tc.base)
	}
}

// planWeights plans the merges of runs of the given weights and returns
// the weights each merge takes.
func planWeights(weights ...int) [][]int {
	runs := make([]run, len(weights))
	for i, w := range weights {
		runs[i] = run{key: fmt.Sprint(i), weight: w}
	}
	var out [][]int
	for _, m := range planMerges(runs) {
		var ws []int
		for _, r := range m {
			ws = append(ws, r.weight)
		}
		sort.Ints(ws)
		out = append(out, ws)
	}
	return out
}

func TestPlanMerges(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		weights []int
		want    [][]int
	}{
		{[]int{1}, nil},
		{[]int{1, 1, 1}, nil},
		{[]int{1, 1, 1, 1}, [][]int{{1, 1, 1, 1}}},
		{[]int{4, 4, 4, 1, 1, 1}, nil},
		// Four runs of tier 0 make a run of tier 1, the fourth there: one merge.
		{[]int{4, 4, 4, 1, 1, 1, 1}, [][]int{{1, 1, 1, 1, 4, 4, 4}}},
		{[]int{16, 4, 4, 1, 1, 1, 1}, [][]int{{1, 1, 1, 1}}},
		{[]int{16, 16, 16, 4, 4, 4, 1, 1, 1, 1}, [][]int{{1, 1, 1, 1, 4, 4, 4, 16, 16, 16}}},
		{[]int{5, 7, 4, 6}, [][]int{{4, 5, 6, 7}}},
	} {
		require.Equal(t, tc.want, planWeights(tc.weights...), "%v", tc.weights)
	}
}

// aDay appends rounds of n dispatches (pending, then created) into one
// day, each round flushed into one file per unit, compacting after each,
// and returns the bytes the compactions wrote, the final table's bytes
// and the runs of each unit at the end.
func aDay(t *testing.T, b *testBundle, o *Outbox, rounds, n int) (written, table int64, runs map[string]int) {
	t.Helper()
	ctx := context.Background()
	for round := range rounds {
		for i := range n {
			r := dispatchRec("day", fmt.Sprintf("t%d-%d", round, i), "1", outbox.StatusPending)
			require.NoError(t, o.Append(ctx, r, nil))
			r.Status = outbox.StatusCreated
			require.NoError(t, o.Append(ctx, r, nil))
		}
		require.NoError(t, o.Flush(ctx))
		b.clock.Advance(time.Minute)
		st, err := o.compact(ctx, CompactConfig{Tables: []outbox.Table{outbox.TableDispatch}})
		require.NoError(t, err)
		written += st.Tables[0].BytesOut
		runs = map[string]int{}
		for _, p := range st.Tables[0].Partitions {
			runs[p.Partition+"/"+p.Bucket] = p.RunsAfter
		}
	}
	files, err := filepath.Glob(filepath.Join(b.root, "dispatch_outbox", "*", "*.parquet"))
	require.NoError(t, err)
	for _, f := range files {
		info, err := os.Stat(f)
		require.NoError(t, err)
		table += info.Size()
	}
	return written, table, runs
}

// A day of 16 and one of 48 compactions: the bytes compactions write stay
// within 3x the final table, each unit ends with at most ⌈log₄ rounds⌉ + 1
// runs, and every ID reads back in its latest state.
func TestTieredCompactionBoundsWriteAmplification(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		rounds, maxRuns int
	}{
		{16, 3},
		{48, 4},
	} {
		t.Run(fmt.Sprint(tc.rounds), func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			opts := b.options(procA)
			opts.Buckets = 2
			o, err := Open(context.Background(), opts)
			require.NoError(t, err)
			t.Cleanup(func() { o.Close() })
			written, table, runs := aDay(t, b, o, tc.rounds, 100)
			require.Len(t, runs, 2, "two buckets of one day")
			for unit, n := range runs {
				require.LessOrEqual(t, n, tc.maxRuns, unit)
			}
			require.LessOrEqual(t, float64(written), 3*float64(table), "written %d, table %d", written, table)
			got, err := o.Lookup(context.Background(), outbox.Query{RunID: "day"})
			require.NoError(t, err)
			require.Len(t, got, tc.rounds*100)
			for _, r := range got {
				require.Equal(t, outbox.StatusCreated, r.Status, r.ID)
			}
		})
	}
}

// Retention never brings an old state back: with the pending record of an
// ID in an older run and its terminal record, past retention, in a newer
// one that the tiers alone would merge without the older, the terminal
// record is dropped only by a merge of every run, and the ID never reads
// as pending.
func TestRetentionDropsOnlyInAMergeOfEveryRun(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, tc := range []struct {
		name      string
		retention Retention
		runsAfter int
		full      bool
		want      []string
	}{
		{"no retention: the newer runs merge alone", nil, 2, false, []string{"created"}},
		{"retention passed: every run merges", Retention{"*": time.Hour}, 1, true, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			o := b.open(t, procA)
			x := dispatchRec("ret", "x", "1", outbox.StatusPending)
			// Run 1: x pending, folded with three other rounds into a run
			// of weight 4.
			for round := range 4 {
				if round == 0 {
					require.NoError(t, outbox.AppendAndWait(ctx, o, x))
				}
				require.NoError(t, outbox.AppendAndWait(ctx, o, dispatchRec("ret", fmt.Sprint("a", round), "1", outbox.StatusPending)))
				require.NoError(t, o.Flush(ctx))
			}
			st, err := o.compact(ctx, CompactConfig{})
			require.NoError(t, err)
			require.Equal(t, 1, st.Tables[0].Partitions[0].RunsAfter)
			// Runs 2–5: x created in the first of four more rounds.
			b.clock.Advance(time.Minute)
			for round := range 4 {
				if round == 0 {
					x.Status = outbox.StatusCreated
					require.NoError(t, outbox.AppendAndWait(ctx, o, x))
				}
				require.NoError(t, outbox.AppendAndWait(ctx, o, dispatchRec("ret", fmt.Sprint("b", round), "1", outbox.StatusPending)))
				require.NoError(t, o.Flush(ctx))
			}
			b.clock.Advance(2 * time.Hour)
			st, err = o.compact(ctx, CompactConfig{Tables: []outbox.Table{outbox.TableDispatch}, Retention: tc.retention})
			require.NoError(t, err)
			p := st.Tables[0].Partitions[0]
			require.Equal(t, []any{UnitCompacted, 5, tc.runsAfter, tc.full}, []any{p.Action, p.RunsBefore, p.RunsAfter, p.Full})

			var states []string
			got, err := o.Lookup(ctx, outbox.Query{ID: x.ID})
			require.NoError(t, err)
			for _, r := range got {
				states = append(states, string(r.Status))
			}
			require.Equal(t, tc.want, states)
			pending, err := o.Pending(ctx, outbox.TableDispatch, 0)
			require.NoError(t, err)
			for _, r := range pending {
				require.NotEqual(t, x.ID, r.ID, "x came back as pending")
			}
		})
	}
}

// openBuckets opens procA's outbox on b with n buckets, closed at the
// test's end.
func openBuckets(t *testing.T, b *testBundle, n int) *Outbox {
	t.Helper()
	opts := b.options(procA)
	opts.Buckets = n
	o, err := Open(context.Background(), opts)
	require.NoError(t, err)
	t.Cleanup(func() { o.Close() })
	return o
}

// A lookup by ID opens only its bucket's files, and two compactions
// started together share a day's buckets: each unit is folded by exactly
// one of them.
func TestBucketsSplitLookupsAndCompactions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	o := openBuckets(t, b, 4)
	for i := range 200 {
		require.NoError(t, o.Append(ctx, dispatchRec("bk", fmt.Sprint(i), "1", outbox.StatusCreated), nil))
	}
	require.NoError(t, o.Flush(ctx))
	files, err := filepath.Glob(filepath.Join(b.root, "dispatch_outbox", "created_date=2026-03-01", "*.parquet"))
	require.NoError(t, err)
	require.Len(t, files, 4)
	for k, f := range files {
		require.Equal(t, fmt.Sprintf("b%dof4-%s-0000000000000000.parquet", k, procA), filepath.Base(f))
	}

	r, err := Open(ctx, Config{Root: b.root, ReadOnly: true, Clock: b.clock, RefreshInterval: -1})
	require.NoError(t, err)
	t.Cleanup(func() { r.Close() })
	for i, id := range []string{dispatchRec("bk", "7", "1", "").ID, dispatchRec("bk", "8", "1", "").ID} {
		got, err := r.Lookup(ctx, outbox.Query{ID: id})
		require.NoError(t, err)
		require.Len(t, got, 1)
		require.LessOrEqual(t, r.files[outbox.TableDispatch].openFiles(), i+1, "one bucket's file opened per lookup")
	}
	// Attempts of one task share a bucket: their rows sit side by side.
	require.Equal(t, bucket.Of("dispatch:bk:7:1", 4), bucket.Of("dispatch:bk:7:2", 4))

	// Four rounds make each bucket's tier 0 full: two compactors at once.
	for range 3 {
		for i := range 200 {
			require.NoError(t, o.Append(ctx, dispatchRec("bk", fmt.Sprint(i), "1", outbox.StatusCreated), nil))
		}
		require.NoError(t, o.Flush(ctx))
	}
	var wg sync.WaitGroup
	done := make([]map[string]UnitAction, 2)
	for i := range done {
		c, err := Open(ctx, Config{Root: b.root, ReadOnly: true, Clock: b.clock, RefreshInterval: -1})
		require.NoError(t, err)
		t.Cleanup(func() { c.Close() })
		wg.Add(1)
		go func() {
			defer wg.Done()
			done[i] = map[string]UnitAction{}
			st, err := c.compact(ctx, CompactConfig{Tables: []outbox.Table{outbox.TableDispatch}})
			if err == nil {
				for _, p := range st.Tables[0].Partitions {
					done[i][p.Bucket] = p.Action
				}
			}
		}()
	}
	wg.Wait()
	compacted := map[string]int{}
	for _, d := range done {
		for bucket, a := range d {
			if a == UnitCompacted {
				compacted[bucket]++
			}
		}
	}
	require.Equal(t, map[string]int{"b0of4": 1, "b1of4": 1, "b2of4": 1, "b3of4": 1}, compacted, "%v", done)
	got, err := r.Lookup(ctx, outbox.Query{RunID: "bk"})
	require.NoError(t, err)
	require.Len(t, got, 200)
}

// A lookup by ID does not know the ID's day, so it reads every partition,
// but in each it opens the files of one unit: its bucket's, when every
// writer uses the same bucket count. Writers with other counts add, in the
// days they wrote, one unit per count (the ID's bucket of that count) and
// the files without a bucket prefix (Buckets = 1).
func TestLookupByIDOpensOneUnitPerDay(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	write := func(proc string, buckets int, task func(i int) string) {
		opts := b.options(proc)
		opts.Buckets = buckets
		o, err := Open(ctx, opts)
		require.NoError(t, err)
		defer o.Close()
		for range 2 { // two runs per unit
			for i := range 100 {
				require.NoError(t, o.Append(ctx, dispatchRec("days", task(i), "1", outbox.StatusCreated), nil))
			}
			require.NoError(t, o.Flush(ctx))
			b.clock.Advance(time.Minute)
		}
		require.NoError(t, o.Close())
	}
	// opened looks id up in a fresh reader and returns the units whose
	// files it opened.
	opened := func(id string) map[unitName]int {
		r, err := Open(ctx, Config{Root: b.root, ReadOnly: true, Clock: b.clock, RefreshInterval: -1})
		require.NoError(t, err)
		defer r.Close()
		got, err := r.Lookup(ctx, outbox.Query{ID: id})
		require.NoError(t, err)
		require.Len(t, got, 1, id)
		fs := r.files[outbox.TableDispatch]
		fs.mu.Lock()
		defer fs.mu.Unlock()
		units := map[unitName]int{}
		for name := range fs.files {
			units[unitOf(name)]++
		}
		return units
	}
	const day1, day2 = "created_date=2026-03-01", "created_date=2026-03-02"
	first := func(i int) string { return fmt.Sprint("a", i) }
	second := func(i int) string { return fmt.Sprint("b", i) }
	write(procA, 4, first)
	b.clock.Advance(24 * time.Hour)
	write(procA, 4, second)
	for _, dir := range []string{day1, day2} {
		files, err := filepath.Glob(filepath.Join(b.root, "dispatch_outbox", dir, "*.parquet"))
		require.NoError(t, err)
		require.Len(t, files, 8, "two runs in each of four buckets")
	}

	// Every writer with 4 buckets: the ID's bucket in each day, two
	// files each, of the 16.
	for _, id := range []string{dispatchRec("days", first(7), "1", "").ID, dispatchRec("days", second(8), "1", "").ID} {
		k := bucket.Name(bucket.Of(id, 4), 4)
		require.Equal(t, map[unitName]int{day1 + "/" + k: 2, day2 + "/" + k: 2}, opened(id), id)
	}

	// A writer with 2 buckets and one with 1 on the second day: there, a
	// lookup opens the ID's bucket of 4, its bucket of 2 and the files
	// without a prefix.
	const procC = "00000000-0000-4000-8000-00000000000c"
	third := func(i int) string { return fmt.Sprint("c", i) }
	write(procB, 2, third)
	write(procC, 1, third)
	id := dispatchRec("days", second(8), "1", "").ID
	require.Equal(t, map[unitName]int{
		day1 + "/" + bucket.Name(bucket.Of(id, 4), 4): 2,
		day2 + "/" + bucket.Name(bucket.Of(id, 4), 4): 2,
		day2 + "/" + bucket.Name(bucket.Of(id, 2), 2): 2,
		day2: 2,
	}, opened(id))
}

// Once its day is over, a unit holding more runs than ⌈log₄ rounds⌉ + 1
// is folded whole at its next compaction; during the day the tiers alone
// decide.
func TestPastDayIsFoldedToTheRunBound(t *testing.T) {
	t.Parallel()
	b := setup(t)
	o := b.open(t, procA)
	_, _, runs := aDay(t, b, o, 7, 10)
	require.Equal(t, map[string]int{"created_date=2026-03-01/": 4}, runs, "weights 4, 1, 1, 1 within the day")

	b.clock.Advance(24 * time.Hour)
	st, err := o.compact(context.Background(), CompactConfig{Tables: []outbox.Table{outbox.TableDispatch}})
	require.NoError(t, err)
	p := st.Tables[0].Partitions[0]
	require.Equal(t, []any{UnitCompacted, 4, 1, true}, []any{p.Action, p.RunsBefore, p.RunsAfter, p.Full}, "bound for 7 rounds: 3")
	st, err = o.compact(context.Background(), CompactConfig{Tables: []outbox.Table{outbox.TableDispatch}})
	require.NoError(t, err)
	require.Equal(t, UnitUntouched, st.Tables[0].Partitions[0].Action)
}

// A merge never reads more than maxFanIn runs at once: a day of
// maxFanIn + 8 log conversions never compacted, folded whole, first
// merges its 10 smallest runs (leaving maxFanIn), then the rest with that
// output, and retention applies only in the last merge, which takes every
// run.
func TestFoldOfManyRunsReadsAtMostMaxFanIn(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	o := b.open(t, procA)
	const rounds = maxFanIn + 8
	for round := range rounds {
		r := dispatchRec("many", fmt.Sprint(round), "1", outbox.StatusPending)
		require.NoError(t, outbox.AppendAndWait(ctx, o, r))
		if round == 0 {
			r.Status = outbox.StatusCreated // x: pending in run 0, created in run 1
			require.NoError(t, o.Flush(ctx))
			b.clock.Advance(time.Minute)
			require.NoError(t, outbox.AppendAndWait(ctx, o, r))
		}
		require.NoError(t, o.Flush(ctx))
	}
	b.clock.Advance(2 * time.Hour)
	st, err := o.compact(ctx, CompactConfig{Tables: []outbox.Table{outbox.TableDispatch}, Full: true, Retention: Retention{"*": time.Hour}})
	require.NoError(t, err)
	p := st.Tables[0].Partitions[0]
	require.Equal(t, []any{UnitCompacted, rounds + 1, 1, 2, true, int64(1), rounds + 1 + 1},
		[]any{p.Action, p.RunsBefore, p.RunsAfter, p.Merges, p.Full, p.Dropped, p.FilesIn})
	got, err := o.Lookup(ctx, outbox.Query{RunID: "many"})
	require.NoError(t, err)
	require.Len(t, got, rounds-1, "every pending ID but the dropped one")
	for _, r := range got {
		require.Equal(t, outbox.StatusPending, r.Status)
		require.NotEqual(t, "dispatch:many:0:1", r.ID)
	}
}

// A compaction step holds open only its unit's files, never the whole
// table's: a day of thousands of published files (Buckets times the
// publications) must compact within a process's descriptor limit.
func TestCompactionStepOpensOnlyItsUnit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	o := openBuckets(t, b, 4)
	for range 3 { // three runs per unit
		for i := range 100 {
			require.NoError(t, o.Append(ctx, dispatchRec("units", fmt.Sprint("t", i), "1", outbox.StatusCreated), nil))
		}
		require.NoError(t, o.Flush(ctx))
		b.clock.Advance(time.Minute)
	}
	fs := o.files[outbox.TableDispatch]
	listed, err := o.store.list(ctx, outbox.TableDispatch)
	require.NoError(t, err)
	units := map[unitName]int{}
	for _, e := range listed {
		units[unitOf(e.name)]++
	}
	require.Len(t, units, 4)
	c := &compaction{o: o, t: outbox.TableDispatch, now: b.clock.Now()}
	for unit, n := range units {
		pc := &UnitCompaction{}
		err := c.step(ctx, nil, unit, pc, func(_ context.Context, _ *lease, files []*openFile, _ *UnitCompaction) error {
			require.Len(t, files, n)
			fs.mu.Lock()
			defer fs.mu.Unlock()
			for name, f := range fs.files {
				if f.refs > 0 {
					require.Equal(t, unit, unitOf(name), "a file of another unit is held during %s's step", unit)
				}
			}
			return nil
		})
		require.NoError(t, err)
	}
}
