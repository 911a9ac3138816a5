package parquetbox

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ctdispatch/ctdispatch/outbox"

	"github.com/google/uuid"
	"github.com/jonboulle/clockwork"
	"github.com/parquet-go/parquet-go"
	"github.com/stretchr/testify/require"

	"github.com/ctdispatch/ctdispatch/naming"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

const testQueue = "projects/p/locations/l/queues/q"

type testBundle struct {
	root  string
	clock *clockwork.FakeClock
	logs  *syncBuffer
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func setup(t *testing.T) *testBundle {
	t.Helper()
	return &testBundle{root: t.TempDir(), clock: clockwork.NewFakeClockAt(t0), logs: &syncBuffer{}}
}

func (b *testBundle) options(proc string) Config {
	var u uuid.UUID
	if proc != "" {
		u = uuid.MustParse(proc)
	}
	return Config{
		Root:            b.root,
		ProcessorUUID:   u,
		RefreshInterval: -1, // see other processes' writes at once
		// One file per day and log segment, as the specifications of
		// files and compactions here count them; bucket_test.go covers
		// buckets.
		Buckets: 1,
		Clock:   b.clock,
		Logger:  slog.New(slog.NewTextHandler(b.logs, &slog.HandlerOptions{Level: slog.LevelInfo})),
	}
}

func (b *testBundle) open(t *testing.T, proc string) *Outbox {
	t.Helper()
	o, err := Open(context.Background(), b.options(proc))
	require.NoError(t, err)
	t.Cleanup(func() { o.Close() })
	return o
}

// openWith opens procA's outbox with recs appended and in a Parquet file,
// and returns it with the directory of the dispatch table's partition of
// t0's day, where foreign files are planted.
func (b *testBundle) openWith(t *testing.T, recs ...outbox.Record) (*Outbox, string) {
	t.Helper()
	o := b.open(t, procA)
	for _, r := range recs {
		require.NoError(t, outbox.AppendAndWait(context.Background(), o, r))
	}
	require.NoError(t, o.Flush(context.Background()))
	dir := filepath.Join(b.root, string(outbox.TableDispatch), "created_date="+t0.Format(time.DateOnly))
	require.NoError(t, os.MkdirAll(dir, 0o700))
	return o, dir
}

const (
	procA = "00000000-0000-4000-8000-00000000000a"
	procB = "00000000-0000-4000-8000-00000000000b"
)

func dispatchRec(run, task, attempt string, st outbox.Status) outbox.Record {
	id := fmt.Sprintf("dispatch:%s:%s:%s", run, task, attempt)
	return outbox.Record{
		Table: outbox.TableDispatch, ID: id, CloudTaskID: mustHash(id),
		Queue: testQueue, RunID: run, TaskKey: task, Attempt: attempt, Status: st, CreateCalls: 1,
		PayloadSHA256: "ab12",
	}
}

// mustHash is the Cloud Tasks ID of an internal ID.
func mustHash(id string) string {
	h, err := naming.CloudTaskID(id)
	if err != nil {
		panic(err)
	}
	return h
}

func timerRec(run, task string, due time.Time, st outbox.Status) outbox.Record {
	id := fmt.Sprintf("timer:heartbeat:%s:%s:%d", run, task, due.Unix())
	return outbox.Record{
		Table: outbox.TableTimers, ID: id, CloudTaskID: mustHash(id), Queue: testQueue, RunID: run,
		TaskKey: task, Kind: "heartbeat", Status: st, DueAt: due,
	}
}

func TestAppendThenReadFromLogAndParquet(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	o := b.open(t, procA)

	pending := dispatchRec("run1", "extract", "1", outbox.StatusPending)
	require.NoError(t, outbox.AppendAndWait(ctx, o, pending))
	created := pending
	created.Status = outbox.StatusCreated
	created.CreateCalls = 2
	require.NoError(t, outbox.AppendAndWait(ctx, o, created)) // same fake instant: nudged by 1µs
	timer := timerRec("run1", "extract", t0.Add(time.Hour), outbox.StatusCreated)
	require.NoError(t, outbox.AppendAndWait(ctx, o, timer))

	want := outbox.Record{
		Table: outbox.TableDispatch, ID: "dispatch:run1:extract:1", CloudTaskID: mustHash("dispatch:run1:extract:1"),
		TaskName: testQueue + "/tasks/" + mustHash("dispatch:run1:extract:1"), Queue: testQueue, RunID: "run1",
		TaskKey: "extract", Attempt: "1", Kind: "dispatch", Status: outbox.StatusCreated, CreateCalls: 2,
		PayloadSHA256: "ab12", ProcessorUUID: procA, CreatedAt: t0, UpdatedAt: t0.Add(time.Microsecond),
	}
	timerID := fmt.Sprintf("timer:heartbeat:run1:extract:%d", t0.Add(time.Hour).Unix())
	wantTimer := outbox.Record{
		Table: outbox.TableTimers, ID: timerID,
		CloudTaskID: mustHash(timerID), TaskName: testQueue + "/tasks/" + mustHash(timerID), Queue: testQueue,
		RunID: "run1", TaskKey: "extract", Kind: "heartbeat", Status: outbox.StatusCreated, ProcessorUUID: procA,
		CreatedAt: t0, UpdatedAt: t0, DueAt: t0.Add(time.Hour),
	}
	check := func(o *Outbox) {
		got, ok, err := o.Latest(ctx, outbox.TableDispatch, want.ID)
		require.NoError(t, err)
		require.True(t, ok)
		require.Equal(t, want, got)

		hist, err := o.Lookup(ctx, outbox.Query{ID: want.ID, History: true})
		require.NoError(t, err)
		require.Len(t, hist, 2)
		require.Equal(t, outbox.StatusPending, hist[0].Status)
		require.Equal(t, want, hist[1])

		byTask, err := o.Lookup(ctx, outbox.Query{CloudTaskID: mustHash(timerID)})
		require.NoError(t, err)
		require.Equal(t, []outbox.Record{wantTimer}, byTask)

		byRun, err := o.Lookup(ctx, outbox.Query{RunID: "run1"})
		require.NoError(t, err)
		require.Equal(t, []outbox.Record{want, wantTimer}, byRun)

		_, ok, err = o.Latest(ctx, outbox.TableDispatch, "dispatch:run1:extract:2")
		require.NoError(t, err)
		require.False(t, ok)
	}
	check(o) // from memory
	require.NoError(t, o.Flush(ctx))
	matches, _ := filepath.Glob(filepath.Join(b.root, "*", "*", "*.parquet"))
	require.Len(t, matches, 2)
	check(o) // from Parquet
	require.NoError(t, o.Close())
	require.ErrorIs(t, outbox.AppendAndWait(ctx, o, pending), ErrClosed)

	ro, err := Open(ctx, Config{Root: b.root, ReadOnly: true})
	require.NoError(t, err)
	defer ro.Close()
	check(ro)
	require.ErrorIs(t, outbox.AppendAndWait(ctx, ro, pending), ErrReadOnly)
	require.Empty(t, ro.Damaged())
}

func TestFilesAndDirectoriesArePrivate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	o := b.open(t, procA)
	require.NoError(t, outbox.AppendAndWait(ctx, o, dispatchRec("r", "t", "1", outbox.StatusCreated)))
	require.NoError(t, o.Flush(ctx))
	require.NoError(t, outbox.AppendAndWait(ctx, o, dispatchRec("r", "t", "2", outbox.StatusCreated)))
	err := filepath.Walk(b.root, func(path string, info os.FileInfo, err error) error {
		require.NoError(t, err)
		if path == b.root {
			return nil
		}
		want := filePerm
		if info.IsDir() {
			want = dirPerm
		}
		require.Equal(t, want, info.Mode().Perm(), path)
		return nil
	})
	require.NoError(t, err)
}

func TestParquetSchemaTypes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	o := b.open(t, procA)
	require.NoError(t, outbox.AppendAndWait(ctx, o, timerRec("r", "t", t0, outbox.StatusCreated)))
	require.NoError(t, o.Flush(ctx))
	files, _ := filepath.Glob(filepath.Join(b.root, "timers", "*", "*.parquet"))
	require.Len(t, files, 1)
	f, err := os.Open(files[0])
	require.NoError(t, err)
	defer f.Close()
	st, _ := f.Stat()
	pf, err := parquet.OpenFile(f, st.Size())
	require.NoError(t, err)
	got := map[string]string{}
	for _, path := range pf.Schema().Columns() {
		leaf, _ := pf.Schema().Lookup(path...)
		got[path[0]] = leaf.Node.Type().Kind().String() + " " + leaf.Node.Type().String()
	}
	require.Equal(t, map[string]string{
		"timer_id": "BYTE_ARRAY STRING", "cloud_task_id": "BYTE_ARRAY STRING", "queue": "BYTE_ARRAY STRING",
		"run_id": "BYTE_ARRAY STRING", "task_key": "BYTE_ARRAY STRING", "attempt": "BYTE_ARRAY STRING",
		"kind": "BYTE_ARRAY STRING", "status": "BYTE_ARRAY STRING", "error_code": "BYTE_ARRAY STRING",
		"create_calls": "INT32 INT(32,true)", "payload_sha256": "BYTE_ARRAY STRING", "processor_uuid": "BYTE_ARRAY STRING",
		"created_at": "INT64 TIMESTAMP(isAdjustedToUTC=true,unit=MICROS)",
		"updated_at": "INT64 TIMESTAMP(isAdjustedToUTC=true,unit=MICROS)", "version": "INT64 INT(64,true)",
		"trace_id": "BYTE_ARRAY STRING", "span_id": "BYTE_ARRAY STRING",
		"due_at": "INT64 TIMESTAMP(isAdjustedToUTC=true,unit=MICROS)",
	}, got)
	encodings := map[string]string{}
	for i, c := range pf.Metadata().RowGroups[0].Columns {
		var names []string
		for _, e := range c.MetaData.Encoding {
			names = append(names, e.String())
		}
		encodings[pf.Schema().Columns()[i][0]] = strings.Join(names, ",")
		require.Equal(t, "ZSTD", c.MetaData.Codec.String())
	}
	require.Contains(t, encodings["status"], "RLE_DICTIONARY")
	require.Contains(t, encodings["timer_id"], "DELTA_BYTE_ARRAY")
	// Any Parquet reader reads the columns by name.
	type timerRow struct {
		ProcessorUUID string `parquet:"processor_uuid"`
		DueAt         int64  `parquet:"due_at,timestamp(microsecond:utc)"`
	}
	rows := parquet.NewGenericReader[timerRow](f)
	buf := make([]timerRow, 1)
	n, _ := rows.Read(buf)
	require.Equal(t, 1, n)
	require.Equal(t, procA, buf[0].ProcessorUUID)
	require.Equal(t, t0.UnixMicro(), buf[0].DueAt)
}

func TestTwoProcessorsSeeEachOther(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	a := b.open(t, procA)
	bb := b.open(t, procB)

	rec := dispatchRec("run1", "load", "1", outbox.StatusPending)
	require.NoError(t, outbox.AppendAndWait(ctx, a, rec))
	got, ok, err := bb.Latest(ctx, outbox.TableDispatch, rec.ID)
	require.NoError(t, err)
	require.True(t, ok, "B sees A's log")
	require.Equal(t, procA, got.ProcessorUUID)

	b.clock.Advance(time.Second)
	rec.Status = outbox.StatusCreated
	require.NoError(t, outbox.AppendAndWait(ctx, bb, rec)) // B recovers A's pending record
	got, _, err = bb.Latest(ctx, outbox.TableDispatch, rec.ID)
	require.NoError(t, err)
	require.Equal(t, outbox.StatusCreated, got.Status)
	// A's Latest of its own ID reads B's log too: B's later state wins.
	got, _, err = a.Latest(ctx, outbox.TableDispatch, rec.ID)
	require.NoError(t, err)
	require.Equal(t, outbox.StatusCreated, got.Status)
	require.Equal(t, procB, got.ProcessorUUID)
	latest, err := a.Lookup(ctx, outbox.Query{ID: rec.ID})
	require.NoError(t, err)
	require.Equal(t, outbox.StatusCreated, latest[0].Status)
	require.Equal(t, procB, latest[0].ProcessorUUID)
	require.NoError(t, a.Flush(ctx))
	require.NoError(t, bb.Flush(ctx))
	hist, err := a.Lookup(ctx, outbox.Query{ID: rec.ID, History: true})
	require.NoError(t, err)
	require.Len(t, hist, 2)
	require.Equal(t, []string{procA, procB}, []string{hist[0].ProcessorUUID, hist[1].ProcessorUUID})

	_, err = Open(ctx, b.options(procA))
	require.ErrorIs(t, err, ErrProcessorInUse)
}

func TestPendingFindsStaleRecordsOfAnyProcessor(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	a := b.open(t, procA)
	bb := b.open(t, procB)

	require.NoError(t, outbox.AppendAndWait(ctx, a, dispatchRec("r", "stale-a", "1", outbox.StatusPending)))
	require.NoError(t, outbox.AppendAndWait(ctx, a, dispatchRec("r", "settled-in-files", "1", outbox.StatusPending)))
	require.NoError(t, a.Flush(ctx))
	require.NoError(t, outbox.AppendAndWait(ctx, a, dispatchRec("r", "settled-in-files", "1", outbox.StatusFailed)))
	require.NoError(t, a.Flush(ctx)) // pending in one file, failed in the next
	require.NoError(t, outbox.AppendAndWait(ctx, bb, dispatchRec("r", "stale-b", "1", outbox.StatusPending)))
	require.NoError(t, outbox.AppendAndWait(ctx, a, dispatchRec("r", "done", "1", outbox.StatusPending)))
	b.clock.Advance(time.Minute)
	require.NoError(t, outbox.AppendAndWait(ctx, bb, dispatchRec("r", "done", "1", outbox.StatusCreated)))
	require.NoError(t, outbox.AppendAndWait(ctx, a, dispatchRec("r", "fresh", "1", outbox.StatusPending)))

	got, err := bb.Pending(ctx, outbox.TableDispatch, 30*time.Second)
	require.NoError(t, err)
	var ids []string
	for _, r := range got {
		ids = append(ids, r.ID)
	}
	sort.Strings(ids)
	require.Equal(t, []string{"dispatch:r:stale-a:1", "dispatch:r:stale-b:1"}, ids)
}

func TestDamagedAndForeignFilesAreSkippedAndReported(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	rec := dispatchRec("r", "t", "1", outbox.StatusCreated)
	o, dir := b.openWith(t, rec)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "garbage.parquet"), []byte("not parquet at all"), 0o600))
	good, _ := filepath.Glob(filepath.Join(dir, procA+"-*.parquet"))
	require.Len(t, good, 1)
	data, err := os.ReadFile(good[0])
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "truncated.parquet"), data[:len(data)/2], 0o600))
	type other struct {
		Name string `parquet:"name"`
	}
	var buf bytes.Buffer
	require.NoError(t, parquet.Write(&buf, []other{{Name: "x"}}))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "other.parquet"), buf.Bytes(), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, ".half-written.parquet.tmp-1"), []byte("x"), 0o600))

	got, err := o.Lookup(ctx, outbox.Query{ID: rec.ID})
	require.NoError(t, err)
	require.Len(t, got, 1)
	var reports []string
	for _, fe := range o.Damaged() {
		reports = append(reports, filepath.Base(fe.Path)+": "+fe.Reason)
	}
	require.Equal(t, []string{
		"garbage.parquet: not a readable Parquet file",
		"other.parquet: no column dispatch_id: not a dispatch_outbox file",
		"truncated.parquet: not a readable Parquet file",
	}, reports)
	require.ErrorIs(t, o.Damaged()[0], ErrDamaged)
	require.ErrorIs(t, o.Damaged()[1], ErrForeignFile)
	require.NotErrorIs(t, o.Damaged()[1], ErrDamaged)
	require.Contains(t, b.logs.String(), "garbage.parquet")
}

func TestTornLogTailIsDroppedOnRecovery(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	walDir := filepath.Join(b.root, walDirName)
	require.NoError(t, os.MkdirAll(walDir, 0o700))
	var seg []byte
	seg = append(seg, walMagic...)
	good := dispatchRec("r", "t", "1", outbox.StatusCreated)
	good.ProcessorUUID, good.UpdatedAt, good.CreatedAt = procB, t0, t0
	seg = appendFrame(seg, &good)
	torn := dispatchRec("r", "t", "2", outbox.StatusCreated)
	torn.UpdatedAt, torn.CreatedAt = t0, t0
	whole := appendFrame(nil, &torn)
	seg = append(seg, whole[:len(whole)-3]...) // the crash cut the last frame short
	require.NoError(t, os.WriteFile(filepath.Join(walDir, segmentName(procB, 0)), seg, 0o600))

	o := b.open(t, procA) // procB is dead: its log is adopted
	got, err := o.Lookup(ctx, outbox.Query{RunID: "r"})
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.Equal(t, good.ID, got[0].ID)
	require.Contains(t, b.logs.String(), "dropped torn log tail")
	require.Contains(t, b.logs.String(), "reason=\"short frame\"")
	left, _ := filepath.Glob(filepath.Join(walDir, procB+"*"))
	require.Empty(t, left)
}

func TestCorruptFrameChecksum(t *testing.T) {
	t.Parallel()
	rec := dispatchRec("r", "t", "1", outbox.StatusCreated)
	frames := appendFrame([]byte(walMagic), &rec)
	frames = appendFrame(frames, &rec)
	frames[len(frames)-1] ^= 0xff
	path := filepath.Join(t.TempDir(), "x.wal")
	require.NoError(t, os.WriteFile(path, frames, 0o600))
	recs, end, err := readFrames(path, 0)
	require.Len(t, recs, 1)
	var te *tailError
	require.ErrorAs(t, err, &te)
	require.Equal(t, "checksum mismatch", te.Reason)
	require.Equal(t, te.Offset, end)
}

func TestRecordCodecRoundTrip(t *testing.T) {
	t.Parallel()
	r := timerRec("run-9", "task.x", t0.Add(90*time.Minute), outbox.StatusFailed)
	r.ErrorCode, r.CreateCalls, r.ProcessorUUID = "PermissionDenied", 7, procA
	r.CreatedAt, r.UpdatedAt = t0, t0.Add(time.Second)
	r.Normalize()
	got, err := decodeRecord(appendRecord(nil, &r))
	require.NoError(t, err)
	require.Equal(t, r, got)
	_, err = decodeRecord(appendRecord(nil, &r)[:10])
	require.ErrorIs(t, err, errBadRecord)
}

func TestOptionsValidate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		opts Config
		want string
	}{
		{Config{}, "outbox: Config.Root is empty"},
		{Config{Root: "gs://b/p"}, "outbox: Config.LogDir is empty; a bucket root (gs://b/p) needs a local directory for the log"},
		{Config{Root: "x", Durability: 7}, "outbox: Config.Durability 7 unknown; allowed: Durable, Interval"},
		{Config{Root: "x", FlushInterval: -1}, "outbox: Config.FlushInterval -1ns is negative"},
		{Config{Root: "x", PublishInterval: -time.Second}, "outbox: Config.PublishInterval -1s is negative"},
		{Config{Root: "x", PublishInterval: 500 * time.Millisecond}, "outbox: Config.PublishInterval 500ms is below the minimum 1s"},
	} {
		_, err := Open(context.Background(), tc.opts)
		require.EqualError(t, err, tc.want)
	}
}

func TestSegmentRollsBySizeAndPublishInterval(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	opts := b.options(procA)
	opts.SegmentMaxBytes = 1 // every write rolls
	o, err := Open(ctx, opts)
	require.NoError(t, err)
	defer o.Close()
	for i := range 3 {
		require.NoError(t, outbox.AppendAndWait(ctx, o, dispatchRec("r", "t", fmt.Sprint(i), outbox.StatusCreated)))
	}
	require.NoError(t, o.Flush(ctx))
	files, _ := filepath.Glob(filepath.Join(b.root, string(outbox.TableDispatch), "*", "*.parquet"))
	require.Len(t, files, 3)

	b2 := setup(t)
	o2 := b2.open(t, procA)
	require.NoError(t, outbox.AppendAndWait(ctx, o2, dispatchRec("r", "t", "1", outbox.StatusCreated)))
	require.NoError(t, b2.clock.BlockUntilContext(ctx, 1)) // the publish timer, armed by the append
	b2.clock.Advance(DefaultPublishInterval)
	require.NoError(t, o2.Flush(ctx)) // waits for the roll queued before it
	files, _ = filepath.Glob(filepath.Join(b2.root, string(outbox.TableDispatch), "*", "*.parquet"))
	require.Len(t, files, 1)
}

func TestIntervalDurability(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	opts := b.options(procA)
	opts.Durability = Interval
	o, err := Open(ctx, opts)
	require.NoError(t, err)
	defer o.Close()
	require.NoError(t, outbox.AppendAndWait(ctx, o, dispatchRec("r", "t", "1", outbox.StatusCreated)))
	require.NoError(t, o.Append(ctx, dispatchRec("r", "t", "2", outbox.StatusCreated), nil))
	require.NoError(t, o.Flush(ctx))
	got, err := o.Lookup(ctx, outbox.Query{RunID: "r"})
	require.NoError(t, err)
	require.Len(t, got, 2)
}

func TestOtherProcessesAreSeenWithinRefreshInterval(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	a := b.open(t, procA)
	opts := b.options(procB)
	opts.RefreshInterval = 0 // the default for a directory: 1s
	bb, err := Open(ctx, opts)
	require.NoError(t, err)
	defer bb.Close()

	rec := dispatchRec("r", "t", "1", outbox.StatusCreated)
	_, found, err := bb.Latest(ctx, outbox.TableDispatch, rec.ID) // B looks: nothing yet
	require.NoError(t, err)
	require.False(t, found)
	require.NoError(t, outbox.AppendAndWait(ctx, a, rec))
	_, found, err = bb.Latest(ctx, outbox.TableDispatch, rec.ID)
	require.NoError(t, err)
	require.False(t, found, "B's view is less than a second old")
	b.clock.Advance(time.Second)
	got, found, err := bb.Latest(ctx, outbox.TableDispatch, rec.ID)
	require.NoError(t, err)
	require.True(t, found)
	require.Equal(t, procA, got.ProcessorUUID)
}

// requireOnlyInLog asserts that o's current log segment holds rec alone.
func requireOnlyInLog(t *testing.T, o *Outbox, rec outbox.Record) {
	t.Helper()
	frames, _, err := readFrames(o.cur.path, 0)
	require.NoError(t, err)
	require.Len(t, frames, 1)
	require.Equal(t, rec.ID, frames[0].ID)
	require.Equal(t, rec.Status, frames[0].Status)
}

// Append with a done callback queues a record without waiting; done
// reports what waiting would have, and the record is in the log (so it
// survives the process) once done ran. A record refused at once never
// calls back.
func TestAppendDoneReportsTheCommit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	o := b.open(t, procA)
	rec := dispatchRec("r", "t", "1", outbox.StatusPending)
	got := make(chan error, 8)
	done := func(err error) { got <- err }
	require.NoError(t, o.Append(ctx, rec, done))
	require.NoError(t, <-got)
	requireOnlyInLog(t, o, rec)

	bad := rec
	bad.ID = ""
	require.ErrorIs(t, o.Append(ctx, bad, done), outbox.ErrInvalidRecord)
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	require.ErrorIs(t, o.Append(cancelled, dispatchRec("r", "t", "2", outbox.StatusPending), done), context.Canceled)
	require.NoError(t, o.Close())
	require.ErrorIs(t, o.Append(ctx, rec, done), ErrClosed)
	require.Empty(t, got)
}

// AppendThen calls back once the record is in the log, on the writer, and
// not at all when the record is refused at once.
func TestAppendThenCallsBackOnceDurable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	o := b.open(t, procA)
	rec := dispatchRec("r", "t", "1", outbox.StatusCreated)
	got := make(chan error, 2)
	require.NoError(t, o.Append(ctx, rec, func(err error) { got <- err }))
	require.NoError(t, <-got)
	requireOnlyInLog(t, o, rec)

	require.NoError(t, o.Close())
	require.ErrorIs(t, o.Append(ctx, rec, func(err error) { got <- err }), ErrClosed)
	require.Empty(t, got)
}

// Every AppendThen that Close races with is answered: accepted ones get
// their callback (written, or ErrClosed), refused ones return an error and
// never call back. A callback left uncalled would leave a dispatcher's
// flight in its table for good.
func TestAppendThenRacingCloseAlwaysCallsBack(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for round := range 40 {
		b := setup(t)
		o := b.open(t, procA)
		var accepted, called atomic.Int64
		var wg sync.WaitGroup
		for g := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; ; i++ {
					rec := dispatchRec(fmt.Sprintf("r%d", round), fmt.Sprintf("g%d-%d", g, i), "1", outbox.StatusCreated)
					if err := o.Append(ctx, rec, func(error) { called.Add(1) }); err != nil {
						require.ErrorIs(t, err, ErrClosed)
						return
					}
					accepted.Add(1)
				}
			}()
		}
		for accepted.Load() < int64(round*25) {
			runtime.Gosched() // close at a different point of the stream each round
		}
		require.NoError(t, o.Close())
		wg.Wait()
		require.Equal(t, accepted.Load(), called.Load(), "round %d: accepted appends whose callback never ran", round)
	}
}
