package worker

import (
	"context"
	"database/sql"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	cloudtasksapi "cloud.google.com/go/cloudtasks/apiv2"
	"cloud.google.com/go/cloudtasks/apiv2/cloudtaskspb"
	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/ctdispatch/ctdispatch/cloudtasks/emulator"
	"github.com/ctdispatch/ctdispatch/internal/testtools/pgtest"
	"github.com/ctdispatch/ctdispatch/naming"
)

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		os.Exit(runChild())
	}
	os.Exit(pgtest.Main(m))
}

const (
	testQueueID = "work"
	testQueue   = "projects/p/locations/l/queues/" + testQueueID
	testSA      = "tasks@p.iam.gserviceaccount.com"
)

// emu is an in-process emulator that delivers over HTTP with OIDC tokens.
// Its clock is fake but starts at the real now, because idtoken checks
// expiry against the wall clock; tests move it to let retries fall due.
type emu struct {
	srv    *emulator.Server
	client *cloudtasksapi.Client
	clock  *clockwork.FakeClock
}

func startEmulator(t testing.TB, mutate ...func(*emulator.Config)) *emu {
	t.Helper()
	clock := clockwork.NewFakeClockAt(time.Now())
	cfg := emulator.Config{
		Clock: clock, ManualDelivery: true,
		Queues: []emulator.QueueConfig{{Name: testQueue, MinBackoff: time.Second, MaxBackoff: time.Second, MaxAttempts: -1}},
	}
	for _, m := range mutate {
		m(&cfg)
	}
	srv, err := emulator.New(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { srv.Close() })
	client, err := srv.NewClient(context.Background())
	require.NoError(t, err)
	t.Cleanup(func() { client.Close() })
	return &emu{srv: srv, client: client, clock: clock}
}

// verifiedConfig accepts the emulator's tokens for audience.
func (e *emu) verifiedConfig(audience string, inbox Inbox) *Config {
	return &Config{
		Audiences: []string{audience}, ServiceAccounts: []string{testSA}, Issuers: []string{e.srv.Issuer()},
		KeysClient: e.srv.KeysClient(), Inbox: inbox,
	}
}

// createTask creates the task of id, targeting url with the headers the
// dispatcher sets and an OIDC token for testSA (audience: the URL).
func (e *emu) createTask(t testing.TB, id naming.ID, url string, mutate ...func(*cloudtaskspb.HttpRequest)) string {
	t.Helper()
	hr := &cloudtaskspb.HttpRequest{
		Url: url, Body: []byte(`{"n":1}`),
		Headers: map[string]string{
			HeaderIdempotencyKey: id.String(), HeaderCtdispatchTaskID: id.CloudTaskID(), "Content-Type": "application/json",
		},
		AuthorizationHeader: &cloudtaskspb.HttpRequest_OidcToken{OidcToken: &cloudtaskspb.OidcToken{ServiceAccountEmail: testSA}},
	}
	for _, m := range mutate {
		m(hr)
	}
	name := testQueue + "/tasks/" + id.CloudTaskID()
	_, err := e.client.CreateTask(context.Background(), &cloudtaskspb.CreateTaskRequest{Parent: testQueue, Task: &cloudtaskspb.Task{
		Name: name, MessageType: &cloudtaskspb.Task_HttpRequest{HttpRequest: hr},
	}})
	require.NoError(t, err)
	return name
}

// deliverAll delivers until the queue is empty, moving the clock past
// each retry's backoff, and fails the test after rounds rounds.
func (e *emu) deliverAll(t testing.TB, rounds int) {
	t.Helper()
	for range rounds {
		_, err := e.srv.RunDue(context.Background())
		require.NoError(t, err)
		if e.srv.TaskCount() == 0 {
			return
		}
		e.clock.Advance(time.Second)
	}
	t.Fatalf("%d tasks still queued after %d rounds", e.srv.TaskCount(), rounds)
}

// statuses lists the status of every recorded attempt, oldest first.
func (e *emu) statuses() []int {
	var got []int
	for _, d := range e.srv.Deliveries() {
		got = append(got, d.StatusCode)
	}
	return got
}

func mustID(t testing.TB, run, task, attempt string) naming.ID {
	t.Helper()
	id, err := naming.Parse("dispatch:" + run + ":" + task + ":" + attempt)
	require.NoError(t, err)
	return id
}

// serve runs h on a loopback port for the test and returns its URL.
func serve(t testing.TB, h http.Handler) string {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.URL
}

// cloudTasksHeaders are the headers Cloud Tasks and the dispatcher send
// on a first attempt of id's task.
func cloudTasksHeaders(id naming.ID) http.Header {
	h := http.Header{}
	h.Set(HeaderQueueName, testQueueID)
	h.Set(HeaderTaskName, id.CloudTaskID())
	h.Set(HeaderRetryCount, "0")
	h.Set(HeaderExecutionCount, "0")
	h.Set(HeaderETA, "1764061200.250000")
	h.Set(HeaderIdempotencyKey, id.String())
	h.Set(HeaderCtdispatchTaskID, id.CloudTaskID())
	return h
}

// post sends body to url with h and returns the status, the body and the
// Retry-After header of the answer.
func post(t testing.TB, url string, h http.Header, body string) (int, string, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	require.NoError(t, err)
	req.Header = h
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(b), resp.Header.Get("Retry-After")
}

// The effects table holds one row per time a handler's work committed.
// It has no unique key, so a second effect would show as a second row.
const effectsDDL = `CREATE TABLE effects (id text NOT NULL, pid int NOT NULL)`

func openDB(t testing.TB) (*sql.DB, *SQLInbox) {
	t.Helper()
	db := pgtest.Open(t)
	_, err := db.Exec(effectsDDL)
	require.NoError(t, err)
	in, err := NewSQLInbox(db, SQLConfig{})
	require.NoError(t, err)
	require.NoError(t, in.Migrate(context.Background()))
	return db, in
}

// writeEffect is the work of every SQL test handler.
func writeEffect(ctx context.Context, d *Delivery) error {
	_, err := d.Tx().ExecContext(ctx, `INSERT INTO effects (id, pid) VALUES ($1, $2)`, d.ID.String(), os.Getpid())
	return err
}

// effects counts the rows of the effects table and the distinct IDs.
func effects(t testing.TB, db *sql.DB) (rows, distinct int) {
	t.Helper()
	require.NoError(t, db.QueryRow(`SELECT count(*), count(DISTINCT id) FROM effects`).Scan(&rows, &distinct))
	return rows, distinct
}
