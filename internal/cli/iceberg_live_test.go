//go:build iceberg

package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/catalog"
	"github.com/apache/iceberg-go/catalog/hadoop"
	sqlcat "github.com/apache/iceberg-go/catalog/sql"
	"github.com/apache/iceberg-go/table"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/stretchr/testify/require"
	"gocloud.dev/blob"

	"github.com/ctdispatch/ctdispatch/internal/gcsjson"
	"github.com/ctdispatch/ctdispatch/outbox"
)

// The tests in this file run writers, compactors and exporters as the
// built binary and read the Iceberg tables they publish with iceberg-go's
// own scan, as an engine reads them: from the catalog, the table's
// current snapshot and the files it names, nothing of the store's.

// lakeScan is what one scan of a table's current snapshot found.
type lakeScan struct {
	snapshot int64
	rows     int
	// ids holds each ID the snapshot names, with its rows; created
	// those with a created row.
	ids, created map[string]int
	// twice is a state (ID, version, status and update time) the
	// snapshot holds in two rows, or "".
	twice string
}

// errNoTable is scanTable's error before the table's first publication.
var errNoTable = errors.New("no Iceberg table yet")

// scanTable scans the current snapshot of table t in the catalog.
func scanTable(ctx context.Context, cat catalog.Catalog, t outbox.Table) (lakeScan, error) {
	tbl, err := cat.LoadTable(ctx, table.Identifier{"ctdispatch", string(t)})
	if errors.Is(err, catalog.ErrNoSuchTable) || errors.Is(err, catalog.ErrNoSuchNamespace) {
		return lakeScan{}, errNoTable
	}
	if err != nil {
		return lakeScan{}, err
	}
	s := lakeScan{ids: map[string]int{}, created: map[string]int{}}
	snap := tbl.CurrentSnapshot()
	if snap == nil {
		return s, nil
	}
	s.snapshot = snap.SnapshotID
	_, batches, err := tbl.Scan(table.WithSnapshotID(snap.SnapshotID)).ToArrowRecords(ctx)
	if err != nil {
		return s, err
	}
	idCol := "dispatch_id"
	if t == outbox.TableTimers {
		idCol = "timer_id"
	}
	states := map[string]bool{}
	for batch, err := range batches {
		if err != nil {
			return s, err
		}
		ids, versions := column(batch, idCol), column(batch, "version")
		statuses, updated := column(batch, "status"), column(batch, "updated_at")
		for i := range int(batch.NumRows()) {
			id := stringAt(ids, i)
			// Files written before version existed have none: their
			// rows differ by status and time.
			state := fmt.Sprintf("%s v%d %s %s", id, int64At(versions, i), stringAt(statuses, i), updated.ValueStr(i))
			if states[state] && s.twice == "" {
				s.twice = state
			}
			states[state] = true
			s.ids[id]++
			if stringAt(statuses, i) == string(outbox.StatusCreated) {
				s.created[id]++
			}
			s.rows++
		}
		batch.Release()
	}
	return s, nil
}

func column(b arrow.RecordBatch, name string) arrow.Array {
	if i := b.Schema().FieldIndices(name); len(i) > 0 {
		return b.Column(i[0])
	}
	return nil
}

func stringAt(a arrow.Array, i int) string {
	switch a := a.(type) {
	case *array.String:
		return a.Value(i)
	case *array.LargeString:
		return a.Value(i)
	case *array.StringView:
		return a.Value(i)
	}
	return ""
}

func int64At(a arrow.Array, i int) int64 {
	switch a := a.(type) {
	case *array.Int64:
		if !a.IsNull(i) {
			return a.Value(i)
		}
	case *array.Int32:
		if !a.IsNull(i) {
			return int64(a.Value(i))
		}
	}
	return 0
}

// fileCatalog opens the file-based catalog a directory root publishes to.
func fileCatalog(t *testing.T, root string) catalog.Catalog {
	t.Helper()
	cat, err := hadoop.NewCatalog("ctdispatch", filepath.Join(root, "_iceberg"), iceberg.Properties{})
	require.NoError(t, err)
	return cat
}

// sqlCatalog opens the SQL catalog at a postgres:// URL (its tables in
// the URL's search_path), as package lakehouse opens it.
func sqlCatalog(t *testing.T, dsn string) catalog.Catalog {
	t.Helper()
	cc, err := pgx.ParseConfig(dsn)
	require.NoError(t, err)
	db := stdlib.OpenDB(*cc)
	t.Cleanup(func() { db.Close() })
	cat, err := sqlcat.NewCatalog("ctdispatch", db, sqlcat.Postgres, iceberg.Properties{})
	require.NoError(t, err)
	return cat
}

// lakeReader scans a table's current snapshot again and again, counting
// scans, failures and snapshots holding a state twice.
type lakeReader struct {
	cat   catalog.Catalog
	table outbox.Table

	mu              sync.Mutex
	scans, notYet   int
	failures, twice []string
	snapshots       map[int64]bool
	stop            chan struct{}
	done            chan struct{}
}

func startLakeReader(cat catalog.Catalog, t outbox.Table) *lakeReader {
	r := &lakeReader{cat: cat, table: t, snapshots: map[int64]bool{}, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(r.done)
		for {
			select {
			case <-r.stop:
				return
			default:
			}
			s, err := scanTable(context.Background(), r.cat, r.table)
			r.mu.Lock()
			switch {
			case errors.Is(err, errNoTable):
				r.notYet++
			case err != nil:
				r.scans++
				r.failures = append(r.failures, err.Error())
			default:
				r.scans++
				r.snapshots[s.snapshot] = true
				if s.twice != "" {
					r.twice = append(r.twice, fmt.Sprintf("snapshot %d holds %s twice", s.snapshot, s.twice))
				}
			}
			r.mu.Unlock()
		}
	}()
	return r
}

// finish stops the reader and returns its counts.
func (r *lakeReader) finish() (scans, snapshots int, failures, twice []string) {
	close(r.stop)
	<-r.done
	return r.scans, len(r.snapshots), r.failures, r.twice
}

// watched is a process of the built binary whose stdout lines the test
// waits on.
type watched struct {
	name  string
	cmd   *exec.Cmd
	stdin io.WriteCloser

	mu     sync.Mutex
	cond   *sync.Cond
	lines  []string
	ended  bool
	stderr strings.Builder
}

// startWatched starts the binary with args and env, reading its stdout
// line by line (onLine, when given, answers each line it reads).
func startWatched(t *testing.T, name string, env []string, args ...string) *watched {
	t.Helper()
	w := &watched{name: name, cmd: exec.Command(ctdispatchBinary(t), args...)}
	w.cond = sync.NewCond(&w.mu)
	w.cmd.Env = append(append(os.Environ(), emulatorEnv+"="), env...)
	var err error
	w.stdin, err = w.cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := w.cmd.StdoutPipe()
	require.NoError(t, err)
	w.cmd.Stderr = lockedWriter{w}
	require.NoError(t, w.cmd.Start())
	t.Cleanup(func() {
		if w.cmd.ProcessState == nil {
			w.cmd.Process.Kill()
			w.cmd.Wait()
		}
	})
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			w.mu.Lock()
			w.lines = append(w.lines, sc.Text())
			w.cond.Broadcast()
			w.mu.Unlock()
		}
		w.mu.Lock()
		w.ended = true
		w.cond.Broadcast()
		w.mu.Unlock()
	}()
	return w
}

type lockedWriter struct{ w *watched }

func (l lockedWriter) Write(p []byte) (int, error) {
	l.w.mu.Lock()
	defer l.w.mu.Unlock()
	return l.w.stderr.Write(p)
}

// count returns how many stdout lines so far match re.
func (w *watched) count(re *regexp.Regexp) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, l := range w.lines {
		if re.MatchString(l) {
			n++
		}
	}
	return n
}

// hangGuard bounds a wait on a process's lines, so that a process that
// stopped making progress fails the test with its output rather than
// hanging it; no wait of a passing run comes near it.
const hangGuard = 3 * time.Minute

// waitLines waits until n stdout lines match re; the process ending
// first, or hangGuard passing, fails the test.
func (w *watched) waitLines(t *testing.T, re *regexp.Regexp, n int) {
	t.Helper()
	expired := false
	guard := time.AfterFunc(hangGuard, func() {
		w.mu.Lock()
		expired = true
		w.cond.Broadcast()
		w.mu.Unlock()
	})
	defer guard.Stop()
	w.mu.Lock()
	defer w.mu.Unlock()
	for {
		c := 0
		for _, l := range w.lines {
			if re.MatchString(l) {
				c++
			}
		}
		if c >= n {
			return
		}
		if w.ended || expired {
			tail := w.lines[max(0, len(w.lines)-20):]
			t.Fatalf("%s: %d of %d lines matching %s (ended %v); last lines:\n%s\nstderr: %s", w.name, c, n, re, w.ended,
				strings.Join(tail, "\n"), w.stderr.String())
		}
		w.cond.Wait()
	}
}

// kill SIGKILLs the process and waits for it.
func (w *watched) kill() {
	w.cmd.Process.Kill()
	w.cmd.Wait()
}

// term sends SIGTERM and returns the exit status.
func (w *watched) term(t *testing.T) int {
	t.Helper()
	require.NoError(t, w.cmd.Process.Signal(syscall.SIGTERM))
	err := w.cmd.Wait()
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return exit.ExitCode()
	}
	require.NoError(t, err)
	return 0
}

// stderrText is what the process wrote on stderr so far.
func (w *watched) stderrText() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.stderr.String()
}

// liveWriter is a dispatcher kept running (dispatch --from -), fed one
// request at a time, each the next task of its own.
type liveWriter struct {
	*watched
	stopped chan struct{}
	fed     chan struct{}
}

// answered matches a dispatcher's answer line.
var answered = regexp.MustCompile(`"dispatch_id"`)

func startLiveWriter(t *testing.T, name string, env []string, args ...string) *liveWriter {
	t.Helper()
	w := &liveWriter{watched: startWatched(t, name, env, args...), stopped: make(chan struct{}), fed: make(chan struct{})}
	go func() {
		defer close(w.fed)
		for i := 0; ; i++ {
			select {
			case <-w.stopped:
				return
			default:
			}
			line := fmt.Sprintf(`{"run":"live","task":"%s-%d","attempt":1}`+"\n", name, i)
			if _, err := io.WriteString(w.stdin, line); err != nil {
				return // killed
			}
			w.mu.Lock()
			for len(w.lines) <= i && !w.ended {
				w.cond.Wait()
			}
			ended := len(w.lines) <= i
			w.mu.Unlock()
			if ended {
				return
			}
		}
	}()
	return w
}

// end stops feeding the writer, closes its input and waits for it to
// publish and exit.
func (w *liveWriter) end(t *testing.T) {
	t.Helper()
	close(w.stopped)
	<-w.fed
	require.NoError(t, w.stdin.Close())
	require.NoError(t, w.cmd.Wait(), "%s: %s", w.name, w.stderrText())
}

// published matches a compaction's line for a commit it made, and
// publishRound any publication line of a round.
var (
	published    = regexp.MustCompile(`^dispatch_outbox: iceberg: (appended|replaced): `)
	publishRound = regexp.MustCompile(`^dispatch_outbox: iceberg: `)
)

// liveRoot is the shape of a live-root run: where the outbox is and how
// its processes and the reader reach it.
type liveRoot struct {
	root string
	// env is the environment every process gets; writerArgs are the
	// flags each writer adds (a bucket root's --log-dir).
	env        []string
	writerArgs func(name string) []string
	// catalog opens the catalog the reader scans through, once
	// publication is on.
	catalog func() catalog.Catalog
	// compactArgs are added to every compact (the catalog); leaseTTL is
	// the compactors' --lease-ttl: how long a killed one keeps its units
	// and tables, and long enough for a round on the root's storage.
	compactArgs []string
	leaseTTL    string
	// kills is how many SIGKILLs of a writer and of a compactor the run
	// makes; perRound how many answers, and commits how many commits of
	// each compactor, each phase waits for.
	kills, perRound, commits int
}

// runLiveRoot runs two writers and two compact --every processes on a
// root, SIGKILLs (and restarts) a writer and a compactor, keyed to their
// answers and commits, while a reader scans the Iceberg table the whole
// time; then ends them (SIGTERM for the compactors: status 0), runs a
// last compact and checks that every scan succeeded, that no snapshot
// held a state twice, and that the table holds exactly the IDs query and
// stats answer.
func runLiveRoot(t *testing.T, lr liveRoot) {
	emu := startCLIEmulator(t)
	env := append([]string{emulatorEnv + "=" + emu.Addr()}, lr.env...)
	base := append(append([]string(nil), dispatchArgs...), "--url", "https://w/x", "--outbox", lr.root, "--from", "-", "--json", "--publish-interval", "1s")
	writer := func(name string) *liveWriter {
		return startLiveWriter(t, name, env, append(append([]string(nil), base...), lr.writerArgs(name)...)...)
	}
	compactor := func(name string) *watched {
		return startWatched(t, name, env, append([]string{"compact", "--outbox", lr.root, "--every", "1s", "--lease-ttl", lr.leaseTTL}, lr.compactArgs...)...)
	}

	res := runBinary(t, env, "", append([]string{"compact", "-v", "--outbox", lr.root, "--iceberg"}, lr.compactArgs...)...)
	require.Equal(t, 0, res.code, res.stderr)
	cat := lr.catalog()
	reader := startLakeReader(cat, outbox.TableDispatch)
	writers := []*liveWriter{writer("w0"), writer("w1")}
	compactors := []*watched{compactor("c0"), compactor("c1")}
	var killed []*watched
	for k := range lr.kills {
		// Mid-run: the writer has answered, the compactor has committed.
		writers[0].waitLines(t, answered, lr.perRound)
		compactors[0].waitLines(t, published, lr.commits)
		writers[0].kill()
		compactors[0].kill()
		killed = append(killed, writers[0].watched, compactors[0])
		writers[0] = writer(fmt.Sprintf("w0r%d", k))
		compactors[0] = compactor(fmt.Sprintf("c0r%d", k))
	}
	writers[0].waitLines(t, answered, lr.perRound)
	writers[1].waitLines(t, answered, lr.perRound*(lr.kills+1))
	// Each compactor, the restarted one too, has run rounds that
	// published, or found the table current or another one publishing.
	for _, c := range compactors {
		c.waitLines(t, publishRound, lr.commits)
	}
	for _, w := range writers {
		w.end(t)
	}
	for _, c := range compactors {
		require.Equal(t, 0, c.term(t), "%s ends after its round: %s", c.name, c.stderrText())
	}
	res = runBinary(t, env, "", append([]string{"compact", "--outbox", lr.root}, lr.compactArgs...)...)
	require.Equal(t, 0, res.code, res.stderr)
	require.Regexp(t, `(?m)^dispatch_outbox: iceberg: (appended|replaced|current): `, res.stdout)
	scans, snapshots, failures, twice := reader.finish()

	final, err := scanTable(context.Background(), cat, outbox.TableDispatch)
	require.NoError(t, err)
	require.Empty(t, final.twice)
	res = runBinary(t, env, "", "query", "--outbox", lr.root, "--run", "live", "--format", "json")
	require.Equal(t, 0, res.code, res.stderr)
	want := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(res.stdout), "\n") {
		var r struct{ ID string }
		require.NoError(t, json.Unmarshal([]byte(line), &r), line)
		want[r.ID] = true
	}
	got := map[string]bool{}
	for id := range final.ids {
		got[id] = true
	}
	require.Equal(t, want, got, "the table holds exactly the IDs query answers")
	res = runBinary(t, env, "", "stats", "--outbox", lr.root, "--format", "json")
	require.Equal(t, 0, res.code, res.stderr)
	var st statsJSON
	require.NoError(t, json.Unmarshal([]byte(strings.SplitN(res.stdout, "\n", 2)[0]), &st))
	require.Equal(t, int64(len(got)), st.IDs)
	require.NotNil(t, st.Iceberg)
	require.Equal(t, final.snapshot, st.Iceberg.SnapshotID)
	require.Equal(t, int64(final.rows), st.Iceberg.Rows)

	rounds := 0
	for _, c := range append(compactors, killed...) {
		rounds += c.count(publishRound)
		if e := c.stderrText(); e != "" {
			t.Logf("%s stderr: %s", c.name, e)
		}
	}
	t.Logf("%d scans of %d snapshots, %d failed, %d held a state twice; %d IDs, %d rows at the end; %d publication lines",
		scans, snapshots, len(failures), len(twice), len(got), final.rows, rounds)
	require.Empty(t, failures, "every scan succeeds")
	require.Empty(t, twice, "no snapshot holds a state twice")
	require.Positive(t, scans)
	require.Greater(t, snapshots, 2, "the reader saw the table move")
}

// A live directory root: two dispatchers writing (publishing their logs
// every second), two compact --every 1s processes publishing the Iceberg
// table, a writer and a compactor SIGKILLed mid-run and restarted, while
// the test scans the table with iceberg-go the whole time.
//
// Time budget: about 30 s (each phase waits for 150 answers per writer
// and two commits per compactor; a compactor's round is a second apart).
func TestBinaryLiveRootPublishesIceberg(t *testing.T) {
	t.Parallel()
	root := filepath.Join(t.TempDir(), "outbox")
	require.NoError(t, os.Mkdir(root, 0o700))
	runLiveRoot(t, liveRoot{root: root, writerArgs: func(string) []string { return nil },
		catalog: func() catalog.Catalog { return fileCatalog(t, root) }, leaseTTL: "2s", kills: 1, perRound: 150, commits: 2})
}

// bucketObjects lists every object of a bucket with its size and MD5.
func bucketObjects(t *testing.T, bucket string) map[string]string {
	t.Helper()
	ctx := context.Background()
	b, err := blob.OpenBucket(ctx, bucket)
	require.NoError(t, err)
	defer b.Close()
	out := map[string]string{}
	it := b.List(nil)
	for {
		o, err := it.Next(ctx)
		if err == io.EOF {
			return out
		}
		require.NoError(t, err)
		out[o.Key] = fmt.Sprintf("%d %x", o.Size, o.MD5)
	}
}

// The same on a bucket root (fake-gcs-server) with the SQL catalog on a
// throwaway PostgreSQL, after --iceberg without a catalog was refused
// there, naming --iceberg-catalog, with nothing changed. Writers keep
// their logs on local disk (--log-dir), the restarted one in the killed
// one's.
//
// Time budget: about 90 s (each phase waits for 50 answers per writer and
// a commit per compactor; a round on the bucket takes seconds).
func TestBinaryLiveBucketRootPublishesIcebergToPostgres(t *testing.T) {
	gcs := startFakeGCS(t, "outbox-lake")
	t.Setenv(gcsjson.EmulatorEnv, gcs) // the reader reads the files from the bucket
	root := "gs://outbox-lake?prefix=live/"
	env := []string{gcsjson.EmulatorEnv + "=" + gcs}
	logs := t.TempDir()
	emu := startCLIEmulator(t)
	res := runBinary(t, append(env, emulatorEnv+"="+emu.Addr()), "", append(append([]string(nil), dispatchArgs...), "--url", "https://w/x",
		"--outbox", root, "--log-dir", filepath.Join(logs, "first"), "--run", "live", "--task", "before", "--attempt", "1")...)
	require.Equal(t, 0, res.code, res.stderr)

	before := bucketObjects(t, "gs://outbox-lake")
	require.NotEmpty(t, before)
	res = runBinary(t, env, "", "compact", "--outbox", root, "--iceberg")
	require.Equal(t, 2, res.code)
	require.Equal(t, "ctdispatch: --iceberg on a bucket outbox (gs://outbox-lake?prefix=live/) needs --iceberg-catalog: the file-based catalog cannot commit atomically on a bucket; give postgres://… (the SQL catalog) or https://… (a REST catalog)\n", res.stderr)
	require.Empty(t, res.stdout)
	require.Equal(t, before, bucketObjects(t, "gs://outbox-lake"), "nothing changed")

	dsn := postgresURL(t, "&search_path=lake")
	runLiveRoot(t, liveRoot{root: root, env: env,
		writerArgs:  func(name string) []string { return []string{"--log-dir", filepath.Join(logs, name[:2])} },
		catalog:     func() catalog.Catalog { return sqlCatalog(t, dsn) },
		compactArgs: []string{"--iceberg-catalog", dsn},
		leaseTTL:    "30s",
		kills:       1, perRound: 50, commits: 1})
}
