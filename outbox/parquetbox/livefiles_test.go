package parquetbox

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gocloud.dev/blob"
	"gocloud.dev/blob/memblob"

	"github.com/ctdispatch/ctdispatch/outbox"
)

// lakeStorages are the storages the publication's specifications run on,
// with the URL each bucket is named by (LiveFile.Location).
var lakeStorages = []struct {
	name, url string
	bucket    func(*testing.T) *blob.Bucket
}{
	{"directory", "", nil},
	{"memblob", "mem://outbox", func(*testing.T) *blob.Bucket { return memblob.OpenBucket(nil) }},
	{"fake GCS", "gs://ctdispatch-outbox/prod", fakeGCSBucket},
}

// lakeRoot is a root on one of lakeStorages, shared by the outboxes a
// test opens on it.
type lakeRoot struct {
	b   *testBundle
	bkt *blob.Bucket
	url string
}

func newLakeRoot(t *testing.T, storage string) *lakeRoot {
	t.Helper()
	r := &lakeRoot{b: setup(t)}
	for _, s := range lakeStorages {
		if s.name == storage && s.bucket != nil {
			r.bkt, r.url = s.bucket(t), s.url
		}
	}
	return r
}

// open opens the root for proc, read-only when proc is "".
func (r *lakeRoot) open(t *testing.T, proc string) *Outbox {
	t.Helper()
	opts := r.b.options(proc)
	opts.ReadOnly = proc == ""
	if r.bkt != nil {
		opts.Root, opts.Bucket, opts.BucketURL, opts.LogDir = "", r.bkt, r.url, ""
		if proc != "" {
			opts.LogDir = r.b.root + "/log-" + proc
		}
	}
	return openFenced(t, opts)
}

// location is what LiveFile.Location says of a file of the dispatch table.
func (r *lakeRoot) location(name string) string {
	if r.bkt == nil {
		return "file://" + r.b.root + "/dispatch_outbox/" + name
	}
	return r.url + "/dispatch_outbox/" + name
}

// put writes a file of table t as another process or tool would.
func (r *lakeRoot) put(t *testing.T, tbl outbox.Table, name string, data []byte) {
	t.Helper()
	if r.bkt != nil {
		require.NoError(t, r.bkt.WriteAll(context.Background(), string(tbl)+"/"+name, data, nil))
		return
	}
	p := filepath.Join(r.b.root, string(tbl), name)
	require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o700))
	require.NoError(t, os.WriteFile(p, data, 0o600))
}

// read reads a file of table t, or reports it absent.
func (r *lakeRoot) read(t *testing.T, tbl outbox.Table, name string) ([]byte, bool) {
	t.Helper()
	var data []byte
	var err error
	if r.bkt != nil {
		data, err = r.bkt.ReadAll(context.Background(), string(tbl)+"/"+name)
		if err != nil {
			return nil, false
		}
	} else if data, err = os.ReadFile(filepath.Join(r.b.root, string(tbl), name)); err != nil {
		require.ErrorIs(t, err, os.ErrNotExist)
		return nil, false
	}
	return data, true
}

// want is the LiveFile of a file of the dispatch table on t0's day.
func (r *lakeRoot) want(t *testing.T, name string) LiveFile {
	t.Helper()
	data, ok := r.read(t, outbox.TableDispatch, name)
	require.True(t, ok, name)
	return LiveFile{Name: name, Day: time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC), Location: r.location(name), Size: int64(len(data))}
}

func (r *lakeRoot) wants(t *testing.T, names ...string) []LiveFile {
	t.Helper()
	out := []LiveFile{}
	for _, n := range names {
		out = append(out, r.want(t, n))
	}
	return out
}

// stored lists the names of the dispatch table's data files on storage,
// whatever the commits say.
func stored(t *testing.T, o *Outbox) []string {
	t.Helper()
	entries, err := o.store.list(context.Background(), outbox.TableDispatch)
	require.NoError(t, err)
	var out []string
	for _, e := range entries {
		out = append(out, e.name)
	}
	return sortedCopy(out)
}

func sortedCopy(s []string) []string { return slices.Sorted(slices.Values(s)) }

func liveFiles(t *testing.T, o *Outbox, tbl outbox.Table) []LiveFile {
	t.Helper()
	got, err := o.LiveFiles(context.Background(), tbl)
	require.NoError(t, err)
	if got == nil {
		got = []LiveFile{}
	}
	return got
}

const day0 = "created_date=2026-03-01/"

// conv names procA's conversion of log segment seq (one bucket per day).
func conv(seq int) string { return fmt.Sprintf("%s%s-%016d.parquet", day0, procA, seq) }

// outputName is the name within its table of a compaction output path.
func outputName(o *Outbox, tbl outbox.Table, where string) string {
	return strings.TrimPrefix(where, o.store.where(tbl, "")+"/")
}

var outputPattern = regexp.MustCompile(`^created_date=2026-03-01/compacted-\d+-[0-9a-f]{8}-g(\d+)-w(\d+)-0\.parquet$`)

// LiveFiles names exactly the files the store's readers read: after
// appends the log conversions; while one compaction is stopped before its
// commit (its outputs temporaries), another commits, and a lost one's
// output lies in the partition, only the committed outputs; never a schema
// file, a temporary, an orphan, a folded input or anything under
// _iceberg/, which no layout check, report or count takes for table data.
func TestLiveFilesAreWhatTheReadersRead(t *testing.T) {
	t.Parallel()
	for _, s := range lakeStorages {
		t.Run(s.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			r := newLakeRoot(t, s.name)
			w := r.open(t, procA)
			for seg := range 3 {
				for i := range 2 {
					require.NoError(t, outbox.AppendAndWait(ctx, w, dispatchRec("r", fmt.Sprintf("%d-%d", seg, i), "1", outbox.StatusPending)))
				}
				require.NoError(t, w.Flush(ctx))
			}
			require.NoError(t, outbox.AppendAndWait(ctx, w, timerRec("r", "x", t0, outbox.StatusCreated)))
			require.NoError(t, w.Flush(ctx))
			ro := r.open(t, "")
			// What a publisher keeps under _iceberg/, Parquet included.
			data, _ := r.read(t, outbox.TableDispatch, conv(0))
			require.NoError(t, ro.PutRootObject(ctx, "_iceberg/ctdispatch/dispatch_outbox/metadata/v1.metadata.json", []byte(`{}`)))
			require.NoError(t, ro.PutRootObject(ctx, "_iceberg/dispatch_outbox/created_date=2026-03-01/x.parquet", data))

			appended := r.wants(t, conv(0), conv(1), conv(2))
			require.Equal(t, appended, liveFiles(t, ro, outbox.TableDispatch))
			timerData, ok := r.read(t, outbox.TableTimers, conv(3))
			require.True(t, ok)
			timerLoc := strings.Replace(r.location(conv(3)), "/dispatch_outbox/", "/timers/", 1)
			require.Equal(t, []LiveFile{{Name: conv(3), Day: time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC), Location: timerLoc, Size: int64(len(timerData))}},
				liveFiles(t, ro, outbox.TableTimers))
			require.Empty(t, liveFiles(t, ro, outbox.TableDeliveries))
			st, err := ro.Stats(ctx)
			require.NoError(t, err)
			require.Equal(t, [3]int{3, 1, 0}, [3]int{st[0].Files, st[1].Files, st[2].Files})
			require.Empty(t, ro.Damaged())

			// Compactor A stops before its commit; B takes the unit over
			// once A's lease ran out and commits it; a lost compaction's
			// output lies in the partition.
			a := r.open(t, "")
			reached, release := make(chan struct{}), make(chan struct{})
			aDone := make(chan error, 1)
			go func() {
				aDone <- a.Compact(ctx, CompactConfig{Tables: []outbox.Table{outbox.TableDispatch}, Full: true,
					BeforeCommit: func(context.Context) { close(reached); <-release }})
			}()
			<-reached
			orphan := day0 + "compacted-1772366400000000-0badc0de-g1-w3-0.parquet"
			r.put(t, outbox.TableDispatch, orphan, data)
			if r.bkt == nil {
				r.put(t, outbox.TableDispatch, day0+"."+procB+"-0000000000000000.parquet.tmp-1", data)
			}
			require.Equal(t, appended, liveFiles(t, ro, outbox.TableDispatch), "A's outputs are not committed")

			r.b.clock.Advance(11 * time.Minute)
			bc := r.open(t, "")
			var outs []string
			err = bc.Compact(ctx, CompactConfig{Tables: []outbox.Table{outbox.TableDispatch}, Full: true,
				Trace: &CompactTrace{Unit: func(_ outbox.Table, u UnitCompaction) { outs = append(outs, u.Outputs...) }}})
			require.NoError(t, err)
			require.Len(t, outs, 1)
			out := outputName(bc, outbox.TableDispatch, outs[0])
			require.Equal(t, []string{out, "1", "3"}, outputPattern.FindStringSubmatch(out))
			compacted := r.wants(t, out)
			require.Equal(t, compacted, liveFiles(t, ro, outbox.TableDispatch))

			require.Equal(t, []string{out}, stored(t, ro), "B removed the inputs and the orphan")

			close(release)
			require.ErrorIs(t, <-aDone, ErrUnitLost)
			require.Equal(t, []string{out}, stored(t, ro), "A discarded its outputs")
			// Outputs of a lost compaction that died before it could
			// discard them, and of one not committed yet.
			lost, pending := day0+"compacted-1772367060000000-0badc0de-g1-w3-0.parquet", day0+"compacted-1772367060000000-0badc0df-g2-w3-0.parquet"
			r.put(t, outbox.TableDispatch, lost, data)
			r.put(t, outbox.TableDispatch, pending, data)
			require.Equal(t, compacted, liveFiles(t, ro, outbox.TableDispatch))
			require.Equal(t, compacted, liveFiles(t, r.open(t, ""), outbox.TableDispatch), "a fresh outbox")
			require.Equal(t, sortedCopy([]string{lost, out, pending}), stored(t, ro))
			require.Empty(t, liveFiles(t, ro, outbox.TableDeliveries))
			got, err := ro.Lookup(ctx, outbox.Query{Table: outbox.TableDispatch, RunID: "r", History: true})
			require.NoError(t, err)
			require.Len(t, got, 6, "each ID once")
			require.Empty(t, ro.Damaged())
		})
	}
}

// A bucket opened by the caller needs its URL for absolute locations.
func TestLiveFilesOfAnUnnamedBucketNameTheOption(t *testing.T) {
	t.Parallel()
	o, err := Open(context.Background(), Config{Bucket: memblob.OpenBucket(nil), ReadOnly: true})
	require.NoError(t, err)
	defer o.Close()
	_, err = o.LiveFiles(context.Background(), outbox.TableDispatch)
	require.EqualError(t, err, "outbox: the location of dispatch_outbox's files: Config.BucketURL is empty; set it to the URL engines read Config.Bucket by (gs://bucket/prefix)")
	_, err = o.LiveFiles(context.Background(), outbox.Table("orders"))
	require.ErrorContains(t, err, "orders")

	for _, tc := range []struct {
		opts Config
		want string
	}{
		{Config{Root: t.TempDir(), BucketURL: "gs://b/p", ReadOnly: true}, `outbox: Config.BucketURL "gs://b/p" without Config.Bucket; it names an opened bucket (Root names its own)`},
		{Config{Bucket: memblob.OpenBucket(nil), BucketURL: "b/p", ReadOnly: true}, `outbox: Config.BucketURL "b/p" is not a URL; want scheme://bucket/prefix, for example gs://bucket/prefix`},
	} {
		_, err := Open(context.Background(), tc.opts)
		require.EqualError(t, err, tc.want)
	}
}

// A file the readers skip (damaged, or another program's Parquet with
// other column types) is not live, and Damaged names it.
func TestLiveFilesLeaveOutWhatReadersSkip(t *testing.T) {
	t.Parallel()
	r := newLakeRoot(t, "directory")
	w := r.open(t, procA)
	require.NoError(t, outbox.AppendAndWait(context.Background(), w, dispatchRec("r", "a", "1", outbox.StatusCreated)))
	require.NoError(t, w.Flush(context.Background()))
	r.put(t, outbox.TableDispatch, day0+"broken.parquet", []byte("PAR1 no footer"))
	ro := r.open(t, "")
	for range 2 { // the second call answers from what the first opened
		require.Equal(t, r.wants(t, conv(0)), liveFiles(t, ro, outbox.TableDispatch))
	}
	damaged := ro.Damaged()
	require.Len(t, damaged, 1)
	require.Equal(t, filepath.Join(r.b.root, "dispatch_outbox", day0+"broken.parquet"), damaged[0].Path)
}

// RemoveReplaced refuses what it must not remove, naming the file and
// the rule, and removes nothing then.
func TestRemoveReplacedRefuses(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r := newLakeRoot(t, "directory")
	w := r.open(t, procA)
	require.NoError(t, outbox.AppendAndWait(ctx, w, dispatchRec("r", "a", "1", outbox.StatusCreated)))
	require.NoError(t, w.Flush(ctx))
	pending := day0 + "compacted-1-aaaaaaaa-g1-w1-0.parquet"
	data, _ := r.read(t, outbox.TableDispatch, conv(0))
	r.put(t, outbox.TableDispatch, pending, data)
	c := r.open(t, "")
	where := filepath.Join(r.b.root, "dispatch_outbox") + "/"
	for _, tc := range []struct {
		table outbox.Table
		name  string
		want  string
	}{
		{outbox.TableDispatch, conv(0), "outbox: will not remove " + where + conv(0) + ": outbox: file is live: the store's readers read it now; only files a compaction folded in or retention dropped, and outputs of compactions that lost, may be removed"},
		{outbox.TableDispatch, pending, "outbox: will not remove " + where + pending + ": outbox: file is live: an output of a compaction not committed yet (generation 1; the unit's newest commit is 0), which the readers read once it commits"},
		{outbox.TableDispatch, "x.parquet", `outbox: remove "x.parquet" from dispatch_outbox: not a data file's name; want created_date=YYYY-MM-DD/<file>.parquet, not hidden`},
		{outbox.TableDispatch, "created_date=1970-01-01/_schema/empty.parquet", `outbox: remove "created_date=1970-01-01/_schema/empty.parquet" from dispatch_outbox: not a data file's name; want created_date=YYYY-MM-DD/<file>.parquet, not hidden`},
		{outbox.TableDispatch, day0 + ".x.parquet.tmp-1", `outbox: remove "created_date=2026-03-01/.x.parquet.tmp-1" from dispatch_outbox: not a data file's name; want created_date=YYYY-MM-DD/<file>.parquet, not hidden`},
		{outbox.TableDispatch, "created_date=2026-03-01/../../_commits/x.parquet", `outbox: remove "created_date=2026-03-01/../../_commits/x.parquet" from dispatch_outbox: not a data file's name; want created_date=YYYY-MM-DD/<file>.parquet, not hidden`},
		{outbox.Table("orders"), conv(0), `"orders"`},
	} {
		err := c.RemoveReplaced(ctx, tc.table, []string{tc.name})
		require.Error(t, err, tc.name)
		require.ErrorContains(t, err, tc.want, tc.name)
	}
	require.Equal(t, []string{conv(0), pending}, stored(t, c))
}

// Time budget: under a second. Location is the prefix of every
// LiveFile.Location, whatever the root was given as; Root is the root as
// given, empty for an opened bucket.
func TestLocationOfEachKindOfRoot(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, tc := range []struct {
		name string
		opts Config
		want string
	}{
		{"directory", Config{Root: dir, ReadOnly: true}, "file://" + filepath.ToSlash(dir)},
		{"directory with a trailing slash", Config{Root: dir + "/", ReadOnly: true}, "file://" + filepath.ToSlash(dir)},
		{"bucket URL with a prefix", Config{Root: "mem://?prefix=prod/", ReadOnly: true}, "mem://prod"},
		{"opened bucket", Config{Bucket: memblob.OpenBucket(nil), BucketURL: "gs://lake/prod/", ReadOnly: true}, "gs://lake/prod"},
	} {
		o, err := Open(context.Background(), tc.opts)
		require.NoError(t, err, tc.name)
		got, err := o.Location()
		require.NoError(t, err, tc.name)
		require.Equal(t, tc.want, got, tc.name)
		require.NoError(t, o.Close())
	}
	o, err := Open(context.Background(), Config{Bucket: memblob.OpenBucket(nil), ReadOnly: true})
	require.NoError(t, err)
	defer o.Close()
	require.Empty(t, o.Root())
	_, err = o.Location()
	require.EqualError(t, err, "outbox: the root's location: Config.BucketURL is empty; set it to the URL engines read Config.Bucket by (gs://bucket/prefix)")
}
