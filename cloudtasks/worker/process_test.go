package worker

import (
	"bufio"
	"context"
	"database/sql"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"cloud.google.com/go/cloudtasks/apiv2/cloudtaskspb"
	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"

	"github.com/ctdispatch/ctdispatch/cloudtasks/emulator"
	"github.com/ctdispatch/ctdispatch/outbox"
	"github.com/ctdispatch/ctdispatch/outbox/parquetbox"
)

// The tests in this file run workers as child processes (the test binary
// re-executed): one killed inside its handler, and three sharing one
// PostgreSQL database. Time budget: about 10 s together on 2 cores.

// Environment of a child worker; its listener is file descriptor 3.
const (
	childEnv         = "CTDISPATCH_WORKER_CHILD"
	childDSNEnv      = "CTDISPATCH_WORKER_DSN"
	childJWKSEnv     = "CTDISPATCH_WORKER_JWKS"
	childIssuerEnv   = "CTDISPATCH_WORKER_ISSUER"
	childAudienceEnv = "CTDISPATCH_WORKER_AUDIENCE"
	// childBlockEnv makes the handler write its effect, say so on stdout
	// and block, so the parent can kill it with the transaction open.
	childBlockEnv = "CTDISPATCH_WORKER_BLOCK"
	// childOutboxEnv is the root of the outbox the children record their
	// deliveries in, shared by all of them as a worker fleet shares one.
	childOutboxEnv = "CTDISPATCH_WORKER_OUTBOX"
)

// runChild serves a verifying worker with the SQL inbox on the inherited
// listener until it is killed.
func runChild() int {
	fail := func(err error) int { fmt.Fprintln(os.Stderr, "child:", err); return 3 }
	db, err := sql.Open("pgx", os.Getenv(childDSNEnv))
	if err != nil {
		return fail(err)
	}
	inbox, err := NewSQLInbox(db, SQLConfig{})
	if err != nil {
		return fail(err)
	}
	block := os.Getenv(childBlockEnv) != ""
	ob, err := parquetbox.Open(context.Background(), parquetbox.Config{Root: os.Getenv(childOutboxEnv)})
	if err != nil {
		return fail(err)
	}
	w, err := New(context.Background(), &Config{
		Audiences: []string{os.Getenv(childAudienceEnv)}, ServiceAccounts: []string{testSA},
		Issuers: []string{os.Getenv(childIssuerEnv)}, KeysClient: emulator.KeysClient(os.Getenv(childJWKSEnv)), Inbox: inbox,
		Outbox: ob,
	}, func(ctx context.Context, d *Delivery) error {
		if err := writeEffect(ctx, d); err != nil {
			return err
		}
		if block {
			fmt.Printf("in-handler %s\n", d.ID)
			select {}
		}
		return nil
	})
	if err != nil {
		return fail(err)
	}
	lis, err := net.FileListener(os.NewFile(3, "listener"))
	if err != nil {
		return fail(err)
	}
	return fail(http.Serve(lis, w))
}

// startChild starts a worker process on lis, recording its deliveries in
// the outbox at root. Its stdout is returned; the process is killed when
// the test ends.
func startChild(t *testing.T, lis *net.TCPListener, e *emu, dsn, audience, root string, block bool) (*exec.Cmd, io.Reader) {
	t.Helper()
	f, err := lis.File()
	require.NoError(t, err)
	defer f.Close()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"=1", childDSNEnv+"="+dsn, childJWKSEnv+"="+e.srv.HTTPAddr(),
		childIssuerEnv+"="+e.srv.Issuer(), childAudienceEnv+"="+audience, childOutboxEnv+"="+root)
	if block {
		cmd.Env = append(cmd.Env, childBlockEnv+"=1")
	}
	cmd.ExtraFiles = []*os.File{f}
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd, stdout
}

func listen(t *testing.T) *net.TCPListener {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { lis.Close() })
	return lis.(*net.TCPListener)
}

// A worker killed inside its handler, after writing its effect: the
// transaction dies with the process, and the redelivery, served by a new
// process on the same port, does the work once.
func TestKilledInsideHandlerRedeliveryDoesTheWorkOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("starts child processes")
	}
	t.Parallel()
	// The real clock: with a fake one the emulator's attempt that loses its
	// connection never returns, because clockwork v0.5.0's fake context
	// blocks in Err until its deadline. The redelivery is a RunTask, so the
	// test waits for no backoff.
	e := startEmulator(t, func(c *emulator.Config) { c.Clock = clockwork.NewRealClock() })
	db, inbox := openDB(t)
	dsn := pgDSN(t, db)
	lis := listen(t)
	url := "http://" + lis.Addr().String() + "/work"
	id := mustID(t, "crash", "t", "1")
	root := t.TempDir()

	first, stdout := startChild(t, lis, e, dsn, url, root, true)
	e.createTask(t, id, url)
	delivered := make(chan error, 1)
	go func() { _, err := e.srv.RunDue(context.Background()); delivered <- err }()
	line, err := bufio.NewReader(stdout).ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "in-handler "+id.String()+"\n", line)
	require.NoError(t, first.Process.Signal(syscall.SIGKILL))
	require.NoError(t, <-delivered)
	_ = first.Wait()

	rows, _ := effects(t, db)
	require.Equal(t, 0, rows, "the effect died with the transaction")
	_, finished, err := inbox.Finished(context.Background(), id.String())
	require.NoError(t, err)
	require.False(t, finished)

	startChild(t, lis, e, dsn, url, root, false)
	_, err = e.client.RunTask(context.Background(), &cloudtaskspb.RunTaskRequest{Name: testQueue + "/tasks/" + id.CloudTaskID()})
	require.NoError(t, err)
	_, err = e.srv.RunDue(context.Background()) // waits for the attempt
	require.NoError(t, err)
	require.Equal(t, []int{0, 200}, e.statuses(), "the killed attempt got no answer; the redelivery succeeded")
	rows, distinct := effects(t, db)
	require.Equal(t, [2]int{1, 1}, [2]int{rows, distinct})
	got, finished, err := inbox.Finished(context.Background(), id.String())
	require.NoError(t, err)
	require.True(t, finished)
	require.Equal(t, OutcomeDone, got)

	// The killed delivery stays started for good; the redelivery, in the
	// other process, has its outcome.
	var states []string
	for _, r := range readDeliveries(t, root, "crash") {
		states = append(states, fmt.Sprintf("r%d %s %d", r.Delivery.RetryCount, r.Status, r.Delivery.HTTPStatus))
	}
	require.Equal(t, []string{"r0 started 0", "r1 started 0", "r1 done 200"}, states)
}

// readDeliveries returns every record of run's deliveries in the outbox at
// root, as a reader that did not write them sees them: sorted by delivery
// ID, which within a task is the order of arrival.
func readDeliveries(t *testing.T, root, run string) []outbox.Record {
	t.Helper()
	ob, err := parquetbox.Open(context.Background(), parquetbox.Config{Root: root, ReadOnly: true})
	require.NoError(t, err)
	defer ob.Close()
	recs, err := ob.Lookup(context.Background(), outbox.Query{Table: outbox.TableDeliveries, RunID: run, History: true})
	require.NoError(t, err)
	return recs
}

// pgDSN returns the DSN of db's database, for a child process.
func pgDSN(t *testing.T, db *sql.DB) string {
	t.Helper()
	var name string
	require.NoError(t, db.QueryRow(`SELECT current_database()`).Scan(&name))
	var dir string
	require.NoError(t, db.QueryRow(`SELECT setting FROM pg_settings WHERE name = 'unix_socket_directories'`).Scan(&dir))
	return fmt.Sprintf("host=%s port=5432 user=postgres dbname=%s sslmode=disable", dir, name)
}

// Three worker processes, one database, 100 keys delivered 1,000 times:
// each task is run 10 times through RunTask, in pairs. A proxy in front of
// the workers holds the first attempt of each pair until the second
// arrives and sends the two to different processes at once, and loses the
// answers to all but each task's last delivery, so the emulator keeps the
// task and repeats are certain. Exactly 100 effects.
func TestThreeProcessesOneThousandDeliveriesOneHundredEffects(t *testing.T) {
	if testing.Short() {
		t.Skip("starts child processes")
	}
	t.Parallel()
	const keys, perKey, procs = 100, 10, 3
	e := startEmulator(t)
	db, _ := openDB(t)
	dsn := pgDSN(t, db)
	root := t.TempDir()

	proxyLis := listen(t)
	target := "http://" + proxyLis.Addr().String() + "/work"
	var backends []*url.URL
	for range procs {
		lis := listen(t)
		startChild(t, lis, e, dsn, target, root, false)
		backends = append(backends, &url.URL{Scheme: "http", Host: lis.Addr().String()})
	}
	var mu sync.Mutex
	arrived := map[string]int{}           // per task
	partner := map[string]chan struct{}{} // an odd arrival waits here for the even one
	seen, answers := map[string]int{}, map[string]int{}
	var proxies []*httputil.ReverseProxy
	for _, b := range backends {
		proxies = append(proxies, &httputil.ReverseProxy{
			Rewrite: func(r *httputil.ProxyRequest) { r.SetURL(b); r.Out.Host = r.In.Host },
			ModifyResponse: func(resp *http.Response) error {
				task := resp.Request.Header.Get(HeaderTaskName)
				mu.Lock()
				defer mu.Unlock()
				answers[strings.TrimSpace(readAll(resp))]++
				seen[task]++
				if seen[task] < perKey {
					resp.StatusCode, resp.Status = 500, "500 reply lost"
				}
				resp.Body = io.NopCloser(strings.NewReader(""))
				resp.ContentLength = 0
				resp.Header.Del("Content-Length")
				return nil
			},
		})
	}
	// The two attempts of each pair go on together, to two different
	// processes, so they meet on the key's row in the database.
	front := http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		task := r.Header.Get(HeaderTaskName)
		mu.Lock()
		n := arrived[task]
		arrived[task]++
		wait := make(chan struct{})
		if n%2 == 0 {
			partner[task] = wait
		} else {
			close(partner[task])
		}
		mu.Unlock()
		if n%2 == 0 {
			select {
			case <-wait:
			case <-time.After(10 * time.Second): // a safety net against a hang, not a synchronisation
				t.Errorf("task %s: the second attempt of pair %d never came", task, n/2)
			}
		}
		proxies[(n+len(task)+int(task[len(task)-1]))%procs].ServeHTTP(rw, r)
	})
	go http.Serve(proxyLis, front) //nolint:errcheck // ends when the listener closes

	var names []string
	for k := range keys {
		names = append(names, e.createTask(t, mustID(t, "herd", fmt.Sprintf("k%03d", k), "1"), target))
	}
	var g errgroup.Group
	g.SetLimit(16)
	for _, name := range names {
		g.Go(func() error {
			for range perKey / 2 {
				for range 2 { // two attempts of the task in flight at once
					if _, err := e.client.RunTask(context.Background(), &cloudtaskspb.RunTaskRequest{Name: name}); err != nil {
						return err
					}
				}
			}
			return nil
		})
	}
	require.NoError(t, g.Wait())
	_, err := e.srv.RunDue(context.Background()) // waits for the attempts in flight
	require.NoError(t, err)

	require.Len(t, e.srv.Deliveries(), keys*perKey)
	require.Equal(t, 0, e.srv.TaskCount(), "every task's last delivery was answered 200")
	rows, distinct := effects(t, db)
	require.Equal(t, [2]int{keys, keys}, [2]int{rows, distinct})
	mu.Lock()
	defer mu.Unlock()
	t.Logf("the workers' answers: %v", answers)
	require.Equal(t, keys, answers["done"], "answers: %v", answers)
	require.Equal(t, keys*perKey, answers["done"]+answers["duplicate"]+answers["busy"], "answers: %v", answers)
	var pids int
	require.NoError(t, db.QueryRow(`SELECT count(DISTINCT pid) FROM effects`).Scan(&pids))
	require.Greater(t, pids, 1, "the work was spread over the processes")

	// A request without a token, straight to each process: refused (401)
	// before any record is written.
	for _, b := range backends {
		code, _, _ := post(t, b.String()+"/work", cloudTasksHeaders(mustID(t, "herd", "k000", "1")), "")
		require.Equal(t, http.StatusUnauthorized, code)
	}
	reconcileDeliveries(t, e.srv.Deliveries(), readDeliveries(t, root, "herd"), answers, procs)
}

// reconcileDeliveries checks the deliveries table against the emulator's
// record of its attempts: one delivery in the table per attempt, matched
// by task and retry count, each with a started record and then the outcome
// the worker answered (before the proxy lost the reply), written by one of
// the worker processes. Requests refused before verification are in the
// emulator's record only when the emulator sent them; none are here.
func reconcileDeliveries(t *testing.T, attempts []emulator.Delivery, recs []outbox.Record, answers map[string]int, procs int) {
	t.Helper()
	type attempt struct {
		task    string
		retries int32
	}
	sent := map[attempt]int{}
	for _, a := range attempts {
		retries, err := strconv.Atoi(a.Header.Get(HeaderRetryCount))
		require.NoError(t, err)
		sent[attempt{path.Base(a.Task), int32(retries)}]++
	}
	recorded := map[attempt]int{}
	outcomes := map[string]int{}
	processors := map[string]bool{}
	for i := 0; i < len(recs); i += 2 {
		started, outcome := recs[i], recs[i+1]
		require.Equal(t, outbox.StatusStarted, started.Status, "%s", started.ID)
		require.Equal(t, started.ID, outcome.ID, "each delivery has two records")
		require.Equal(t, started.ProcessorUUID, outcome.ProcessorUUID)
		require.Equal(t, started.CreatedAt, outcome.CreatedAt)
		require.Equal(t, started.Delivery.RetryCount, outcome.Delivery.RetryCount)
		require.Equal(t, int32(Outcome(outcome.Status).Status()), outcome.Delivery.HTTPStatus, "%s", outcome.ID)
		require.Equal(t, outcome.UpdatedAt.Sub(outcome.CreatedAt), outcome.Delivery.Latency)
		recorded[attempt{outcome.CloudTaskID, outcome.Delivery.RetryCount}]++
		outcomes[string(outcome.Status)]++
		processors[outcome.ProcessorUUID] = true
	}
	require.Len(t, recs, 2*len(attempts))
	require.Equal(t, sent, recorded, "one delivery in the table per attempt the emulator made")
	require.Equal(t, answers, outcomes, "the recorded outcomes are the answers the workers gave")
	require.Len(t, processors, procs, "each process recorded its own deliveries")
}

func readAll(resp *http.Response) string {
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return string(b)
}
