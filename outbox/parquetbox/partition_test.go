package parquetbox

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/ctdispatch/ctdispatch/outbox"

	"github.com/stretchr/testify/require"
)

// partitionFiles lists the Parquet files of a local table, relative to it,
// the schema file aside.
func partitionFiles(t *testing.T, root string, table outbox.Table) []string {
	t.Helper()
	var out []string
	dir := filepath.Join(root, string(table))
	require.NoError(t, filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && isDataFile(d.Name()) {
			rel, _ := filepath.Rel(dir, p)
			if filepath.ToSlash(rel) != schemaFileName {
				out = append(out, rel)
			}
		}
		return err
	}))
	sort.Strings(out)
	return out
}

// actions summarizes a table's compaction: one "partition action files-in
// rows-out" per partition.
func actions(tc TableCompaction) []string {
	var out []string
	for _, p := range tc.Partitions {
		out = append(out, fmt.Sprintf("%s %s in=%d out=%d dropped=%d", p.Partition, p.Action, p.FilesIn, p.RowsOut, p.Dropped))
	}
	return out
}

// Rows land in the partition of their ID's first record; compaction
// reads only the partitions written since it last ran, and retention
// removes a partition whole when it can.
func TestPartitionsAndIncrementalCompaction(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	o := b.open(t, procA)
	day1, day2 := "created_date=2026-03-01", "created_date=2026-03-02"

	for _, task := range []string{"a", "b", "c"} {
		require.NoError(t, outbox.AppendAndWait(ctx, o, dispatchRec("r", task, "1", outbox.StatusPending)))
	}
	require.NoError(t, o.Flush(ctx))
	b.clock.Advance(24 * time.Hour)
	// An ID first recorded on day 1 keeps its partition for its later
	// states, even when the caller leaves CreatedAt empty.
	require.NoError(t, outbox.AppendAndWait(ctx, o, dispatchRec("r", "a", "1", outbox.StatusCreated)))
	require.NoError(t, outbox.AppendAndWait(ctx, o, dispatchRec("r", "d", "1", outbox.StatusCreated)))
	require.NoError(t, o.Flush(ctx))
	require.Equal(t, []string{
		day1 + "/" + procA + "-0000000000000000.parquet",
		day1 + "/" + procA + "-0000000000000001.parquet",
		day2 + "/" + procA + "-0000000000000001.parquet",
	}, partitionFiles(t, b.root, outbox.TableDispatch))
	got, ok, err := o.Latest(ctx, outbox.TableDispatch, "dispatch:r:a:1")
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, t0, got.CreatedAt)

	cs, err := o.compact(ctx, CompactConfig{Tables: []outbox.Table{outbox.TableDispatch}, Full: true})
	require.NoError(t, err)
	require.Equal(t, []string{day1 + " compacted in=2 out=3 dropped=0", day2 + " compacted in=1 out=1 dropped=0"}, actions(cs.Tables[0]))
	compacted := partitionFiles(t, b.root, outbox.TableDispatch)
	require.Len(t, compacted, 2)

	// Nothing written since: nothing read, nothing rewritten.
	cs, err = o.compact(ctx, CompactConfig{Tables: []outbox.Table{outbox.TableDispatch}, Full: true})
	require.NoError(t, err)
	require.Equal(t, []string{day1 + " untouched in=0 out=0 dropped=0", day2 + " untouched in=0 out=0 dropped=0"}, actions(cs.Tables[0]))
	require.Equal(t, "runs within the tiers' bounds", cs.Tables[0].Partitions[0].Reason)
	require.Equal(t, compacted, partitionFiles(t, b.root, outbox.TableDispatch))

	// One more record on day 2: only day 2 is compacted.
	require.NoError(t, outbox.AppendAndWait(ctx, o, dispatchRec("r", "e", "1", outbox.StatusCreated)))
	require.NoError(t, o.Flush(ctx))
	cs, err = o.compact(ctx, CompactConfig{Tables: []outbox.Table{outbox.TableDispatch}, Full: true})
	require.NoError(t, err)
	require.Equal(t, []string{day1 + " untouched in=0 out=0 dropped=0", day2 + " compacted in=2 out=2 dropped=0"}, actions(cs.Tables[0]))
	require.Equal(t, compacted[0], partitionFiles(t, b.root, outbox.TableDispatch)[0], "day 1's file is the same file")

	// A week later with 3 days' retention: day 1 still holds pending
	// records (b, c), so only its expired rows go; day 2 goes whole.
	b.clock.Advance(7 * 24 * time.Hour)
	cs, err = o.compact(ctx, CompactConfig{Tables: []outbox.Table{outbox.TableDispatch}, Retention: Retention{"*": 72 * time.Hour}})
	require.NoError(t, err)
	require.Equal(t, []string{day1 + " compacted in=1 out=2 dropped=1", day2 + " dropped in=1 out=0 dropped=2"}, actions(cs.Tables[0]))
	require.NoDirExists(t, filepath.Join(b.root, string(outbox.TableDispatch), day2))
	left, err := o.Lookup(ctx, outbox.Query{RunID: "r"})
	require.NoError(t, err)
	require.Len(t, left, 2)
}

// A lease is taken by one holder at a time, can be taken over once it
// expires (its holder crashed), and its old holder then learns it lost it.
func TestLeaseExpiryAndTakeOver(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for name, store := range map[string]tableStore{
		"disk":     localStore{root: t.TempDir()},
		"fake GCS": &blobStore{bucket: fakeGCSBucket(t)},
	} {
		t.Run(name, func(t *testing.T) {
			prefix := "_leases/dispatch_outbox/created_date=2026-03-01."
			a, err := acquireLease(ctx, store, prefix, "A", t0, 10*time.Minute)
			require.NoError(t, err)
			_, err = acquireLease(ctx, store, prefix, "B", t0.Add(time.Minute), 10*time.Minute)
			require.EqualError(t, err, "held by compaction A until 2026-03-01T12:10:00Z")
			require.NoError(t, a.renew(ctx, t0.Add(5*time.Minute)))
			_, err = acquireLease(ctx, store, prefix, "B", t0.Add(11*time.Minute), 10*time.Minute)
			require.EqualError(t, err, "held by compaction A until 2026-03-01T12:15:00Z", "a renewed lease lasts")

			// A crashes; once its lease expires, B takes over.
			b, err := acquireLease(ctx, store, prefix, "B", t0.Add(16*time.Minute), 10*time.Minute)
			require.NoError(t, err)
			require.EqualError(t, a.check(ctx, t0.Add(16*time.Minute)), "held by compaction B until 2026-03-01T12:26:00Z")
			a.release(ctx) // a late release of a lost lease frees nothing
			_, err = acquireLease(ctx, store, prefix, "C", t0.Add(17*time.Minute), 10*time.Minute)
			require.Error(t, err)
			b.release(ctx)
			c, err := acquireLease(ctx, store, prefix, "C", t0.Add(17*time.Minute), 10*time.Minute)
			require.NoError(t, err)
			require.NoError(t, c.check(ctx, t0.Add(17*time.Minute)))
			keys, err := store.keys(ctx, prefix)
			require.NoError(t, err)
			require.Equal(t, []string{prefix + "000000000001", prefix + "000000000002"}, keys, "older leases are removed")
		})
	}
}

// writeManyIDs writes n IDs, each a pending and then a created state in
// different files, spread over three days, as several processes would.
func writeManyIDs(t *testing.T, open func(proc string) *Outbox, n int) {
	ctx := context.Background()
	procs := []string{procA, procB, "00000000-0000-4000-8000-00000000000c"}
	for k, proc := range procs {
		o := open(proc)
		for i := k; i < n; i += len(procs) {
			r := dispatchRec("many", fmt.Sprintf("t%05d", i), "1", outbox.StatusPending)
			r.CreatedAt = t0.Add(time.Duration(i%3) * 24 * time.Hour)
			r.UpdatedAt = r.CreatedAt
			require.NoError(t, outbox.AppendAndWait(ctx, o, r))
			if i%100 == 0 {
				require.NoError(t, o.Flush(ctx))
			}
		}
		require.NoError(t, o.Flush(ctx))
		for i := k; i < n; i += len(procs) {
			r := dispatchRec("many", fmt.Sprintf("t%05d", i), "1", outbox.StatusCreated)
			r.CreatedAt = t0.Add(time.Duration(i%3) * 24 * time.Hour)
			r.UpdatedAt = r.CreatedAt.Add(time.Second)
			require.NoError(t, outbox.AppendAndWait(ctx, o, r))
		}
		require.NoError(t, o.Close())
	}
}

// countRows counts the Parquet rows of the dispatch table and its IDs.
func countRows(t *testing.T, opts Config) (rows, ids int64) {
	t.Helper()
	opts.ReadOnly = true
	o, err := Open(context.Background(), opts)
	require.NoError(t, err)
	defer o.Close()
	st, err := o.Stats(context.Background())
	require.NoError(t, err)
	require.Empty(t, st[0].Skipped)
	require.Zero(t, st[0].LogRecords)
	return st[0].Rows, st[0].IDs
}

const compactChildEnv = "CTDISPATCH_OUTBOX_COMPACT_CHILD"

// compactChild compacts the outbox at dir once its standard input ends
// (the parent closes it to start every child at once), and prints its
// report as JSON.
func compactChild(dir string) {
	ctx := context.Background()
	_, _ = io.Copy(io.Discard, os.Stdin)
	o, err := Open(ctx, Config{Root: dir, ReadOnly: true})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(3)
	}
	st, err := o.compact(ctx, CompactConfig{Tables: []outbox.Table{outbox.TableDispatch}, Full: true})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(4)
	}
	_ = json.NewEncoder(os.Stdout).Encode(st)
	_ = o.Close()
}

// Two compactions of one root at once, in two processes, write each ID
// once: 3,000 IDs give 3,000 rows, all terminal. Without leases both
// folded the same files and left 6,000.
// A lease that does not parse (damaged: leases appear whole) holds
// nothing, so a compaction killed at any point never holds a unit for
// ever; a local lease is linked into place only once written.
func TestDamagedLeaseHoldsNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	root := t.TempDir()
	store := localStore{root: root}
	prefix := "_leases/dispatch_outbox/created_date=2026-03-01~b0of8."
	dir := filepath.Join(root, "_leases", "dispatch_outbox")
	require.NoError(t, os.MkdirAll(dir, 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "created_date=2026-03-01~b0of8.000000000003"), nil, 0o600))
	l, err := acquireLease(ctx, store, prefix, "A", t0, time.Minute)
	require.NoError(t, err)
	require.NoError(t, l.check(ctx, t0))
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	require.Equal(t, []string{"created_date=2026-03-01~b0of8.000000000003", "created_date=2026-03-01~b0of8.000000000004"}, names,
		"no temporary left behind; the damaged lease is kept as the one before ours")
}

func TestTwoProcessesCompactingAtOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	writeManyIDs(t, func(proc string) *Outbox { return b.open(t, proc) }, 3000)
	rows, ids := countRows(t, Config{Root: b.root})
	require.Equal(t, int64(6000), rows)
	require.Equal(t, int64(3000), ids)

	var cmds []*exec.Cmd
	var starts []io.Closer
	for range 2 {
		cmd := exec.Command(os.Args[0], "-test.run", "^$")
		cmd.Env = append(os.Environ(), compactChildEnv+"="+b.root)
		cmd.Stderr = os.Stderr
		start, err := cmd.StdinPipe()
		require.NoError(t, err)
		cmds = append(cmds, cmd)
		starts = append(starts, start)
	}
	outs := make([][]byte, 2)
	var wg sync.WaitGroup
	for i, cmd := range cmds {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out, err := cmd.Output()
			require.NoError(t, err)
			outs[i] = out
		}()
	}
	for _, start := range starts {
		require.NoError(t, start.Close())
	}
	wg.Wait()
	rows, ids = countRows(t, Config{Root: b.root})
	require.Equal(t, int64(3000), rows, "each ID once")
	require.Equal(t, int64(3000), ids)
	var outputs int64
	for _, out := range outs {
		var st compactStats
		require.NoError(t, json.Unmarshal(out, &st))
		outputs += st.Tables[0].RowsOut
	}
	require.GreaterOrEqual(t, outputs, int64(3000))
	o := b.open(t, procA)
	st, err := o.Stats(context.Background())
	require.NoError(t, err)
	require.Equal(t, map[string]int64{"created": 3000}, st[0].ByStatus)
}

// The same with two compactions in one process over one bucket
// (fake-gcs-server): the leases are objects created with IfNotExist.
func TestTwoCompactionsOnABucketAtOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	bkt := fakeGCSBucket(t)
	logDir := t.TempDir()
	opts := func(proc string) Config {
		o := b.options(proc)
		o.Root, o.Bucket, o.LogDir = "", bkt, logDir
		return o
	}
	writeManyIDs(t, func(proc string) *Outbox {
		o, err := Open(ctx, opts(proc))
		require.NoError(t, err)
		return o
	}, 3000)
	rows, _ := countRows(t, opts(""))
	require.Equal(t, int64(6000), rows)

	var wg sync.WaitGroup
	results := make([]compactStats, 2)
	for i := range 2 {
		o := opts("")
		o.ReadOnly = true
		c, err := Open(ctx, o)
		require.NoError(t, err)
		defer c.Close()
		wg.Add(1)
		go func() {
			defer wg.Done()
			st, err := c.compact(ctx, CompactConfig{Tables: []outbox.Table{outbox.TableDispatch}, Full: true})
			require.NoError(t, err)
			results[i] = st
		}()
	}
	wg.Wait()
	rows, ids := countRows(t, opts(""))
	require.Equal(t, int64(3000), rows, "each ID once")
	require.Equal(t, int64(3000), ids)
	var busy int
	for _, r := range results {
		for _, p := range r.Tables[0].Partitions {
			if p.Action == UnitBusy {
				busy++
			}
		}
	}
	t.Logf("partitions found busy by the other compaction: %d", busy)
	// The manifest left by the two names only files that exist, as they
	// are.
	store := &blobStore{bucket: bkt}
	m, err := readManifest(ctx, store, outbox.TableDispatch)
	require.NoError(t, err)
	listed, err := store.list(ctx, outbox.TableDispatch)
	require.NoError(t, err)
	require.Len(t, m, len(listed))
	for _, e := range listed {
		require.NotNil(t, m.entry(e), e.name)
	}
}

// The index of this process's own IDs stays within its byte budget: IDs
// already in Parquet files are forgotten and answered from the files.
func TestOwnIndexStaysWithinItsByteBudget(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	opts := b.options(procA)
	opts.IndexBytes = 16 << 10
	o, err := Open(ctx, opts)
	require.NoError(t, err)
	defer o.Close()
	for i := range 1000 {
		require.NoError(t, outbox.AppendAndWait(ctx, o, dispatchRec("budget", fmt.Sprintf("t%04d", i), "1", outbox.StatusCreated)))
		if i%100 == 99 {
			require.NoError(t, o.Flush(ctx))
		}
	}
	o.mu.RLock()
	n, size := len(o.own), o.ownBytes
	o.mu.RUnlock()
	require.LessOrEqual(t, n, 100, "only IDs not yet in Parquet (one segment's worth) are kept")
	require.Less(t, size, int64(100*1024), "not the 1000 IDs written")
	r, ok, err := o.Latest(ctx, outbox.TableDispatch, "dispatch:budget:t0007:1")
	require.NoError(t, err)
	require.True(t, ok, "a forgotten ID is answered from the files")
	require.Equal(t, outbox.StatusCreated, r.Status)
}

// Between reads a table keeps at most MaxOpenFiles files open, and their
// footers and filters within FileCacheBytes; a read reopens what it needs.
func TestOpenFilesStayWithinTheirBudget(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, tc := range []struct {
		name     string
		maxOpen  int
		cache    int64
		wantOpen int
	}{
		{"three files", 3, 64 << 20, 3},
		{"one byte of cache", 256, 1, 0},
		{"defaults", 0, 0, 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			opts := b.options(procA)
			opts.MaxOpenFiles, opts.FileCacheBytes = tc.maxOpen, tc.cache
			o, err := Open(ctx, opts)
			require.NoError(t, err)
			defer o.Close()
			for i := range 10 {
				require.NoError(t, outbox.AppendAndWait(ctx, o, dispatchRec("lru", fmt.Sprintf("t%d", i), "1", outbox.StatusCreated)))
				require.NoError(t, o.Flush(ctx))
			}
			for range 2 {
				for i := range 10 {
					got, err := o.Lookup(ctx, outbox.Query{ID: fmt.Sprintf("dispatch:lru:t%d:1", i)})
					require.NoError(t, err)
					require.Len(t, got, 1)
				}
				require.Equal(t, tc.wantOpen, o.files[outbox.TableDispatch].openFiles())
			}
			require.Empty(t, o.Damaged())
		})
	}
}
