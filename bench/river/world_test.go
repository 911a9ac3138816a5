package riverbench

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"os"
	"testing"
	"time"

	ctapi "cloud.google.com/go/cloudtasks/apiv2"
	"cloud.google.com/go/cloudtasks/apiv2/cloudtaskspb"
	"github.com/googleapis/gax-go/v2"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver pgbox's pools use
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
	"github.com/stretchr/testify/require"

	"github.com/ctdispatch/ctdispatch/cloudtasks"
	"github.com/ctdispatch/ctdispatch/cloudtasks/emulator"
	"github.com/ctdispatch/ctdispatch/internal/testtools/pgtest"
	"github.com/ctdispatch/ctdispatch/naming"
	"github.com/ctdispatch/ctdispatch/outbox/pgbox"
	"github.com/ctdispatch/ctdispatch/outbox/pgbox/pgxlisten"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// The dispatchers' Cloud Tasks location; queueTx takes the intents of the
// per-call and bulk lines (no relay ever runs for it), queueStart the
// commit-to-task line's.
const (
	project    = "p"
	location   = "l"
	queueTx    = "q"
	queueStart = "start"
)

// world is one database of the shared throwaway cluster with both
// schemas migrated (pgbox's and river's), the in-repo emulator over gRPC
// on loopback, and the callers' pgx pool, from which both sides take
// their transactions.
type world struct {
	dsn     string
	emu     *emulator.Server
	callers *pgxpool.Pool
	box     pgbox.Config
	seq     int // keys of the dispatches and jobs made so far
}

func newWorld(tb testing.TB) *world {
	tb.Helper()
	ctx := context.Background()
	w := &world{dsn: pgtest.New(tb)}
	emu, err := emulator.New(emulator.Config{DisableDelivery: true, Queues: []emulator.QueueConfig{
		{Name: queuePath(queueTx)}, {Name: queuePath(queueStart)}}})
	require.NoError(tb, err)
	tb.Cleanup(func() { emu.Close() })
	w.emu = emu
	w.callers = w.pool(tb)
	db := w.sqlDB(tb)
	require.NoError(tb, pgbox.Migrate(ctx, db, w.box))
	migrator, err := rivermigrate.New(riverpgxv5.New(w.callers), nil)
	require.NoError(tb, err)
	_, err = migrator.Migrate(ctx, rivermigrate.DirectionUp, nil)
	require.NoError(tb, err)
	return w
}

func queuePath(queue string) string {
	return fmt.Sprintf("projects/%s/locations/%s/queues/%s", project, location, queue)
}

// pool returns a pgx pool of its own on the world's database, closed when
// tb ends.
func (w *world) pool(tb testing.TB) *pgxpool.Pool {
	tb.Helper()
	p, err := pgxpool.New(context.Background(), w.dsn)
	require.NoError(tb, err)
	tb.Cleanup(p.Close)
	return p
}

// sqlDB returns a database/sql pool of its own, as pgbox takes.
func (w *world) sqlDB(tb testing.TB) *sql.DB {
	tb.Helper()
	db, err := sql.Open("pgx", w.dsn)
	require.NoError(tb, err)
	tb.Cleanup(func() { db.Close() })
	return db
}

// dispatcher returns a dispatcher of queue over an outbox and pool of its
// own, configured by cfg's relay fields, whose CreateTask calls go to the
// emulator through wrap when wrap is set.
func (w *world) dispatcher(tb testing.TB, queue string, cfg cloudtasks.Config, wrap func(cloudtasks.Client) cloudtasks.Client) *cloudtasks.Dispatcher {
	tb.Helper()
	ctx := context.Background()
	box, err := pgbox.New(w.sqlDB(tb), w.box)
	require.NoError(tb, err)
	cl, err := w.emu.NewClient(ctx)
	require.NoError(tb, err)
	tb.Cleanup(func() { cl.Close() })
	cfg.Project, cfg.Location, cfg.Queue = project, location, queue
	cfg.Client = cl
	if wrap != nil {
		cfg.Client = wrap(cl)
	}
	d, err := cloudtasks.NewDispatcher(ctx, box, &cfg)
	require.NoError(tb, err)
	tb.Cleanup(func() { require.NoError(tb, d.Close(context.Background())) })
	return d
}

// listener returns a LISTEN-based listener on the world's database, at
// pgxlisten's defaults.
func (w *world) listener(tb testing.TB) *pgxlisten.Listener {
	tb.Helper()
	l, err := pgxlisten.New(pgxlisten.Config{ConnString: w.dsn})
	require.NoError(tb, err)
	return l
}

// request is the dispatch of key: the same small payload as a river job's
// args.
func request(key string) cloudtasks.DispatchRequest {
	return cloudtasks.DispatchRequest{RunID: "bench", TaskKey: key, Identity: naming.Attempt(1),
		Task: cloudtasks.Task{URL: "https://worker.example/run", Body: []byte(key)}}
}

// nextKey returns a key no dispatch or job of the world had.
func (w *world) nextKey() string {
	w.seq++
	return fmt.Sprintf("k%d", w.seq)
}

// noteArgs is the river job both sides' payload is matched to.
type noteArgs struct {
	Key string `json:"key"`
}

func (noteArgs) Kind() string { return "note" }

// started is when a river job's Work began, or a relay's CreateTask for a
// task returned.
type started struct {
	key string
	at  time.Time
}

// noteWorker does nothing but say when each job started.
type noteWorker struct {
	river.WorkerDefaults[noteArgs]
	started chan<- started
}

func (w *noteWorker) Work(ctx context.Context, job *river.Job[noteArgs]) error {
	at := time.Now()
	select {
	case w.started <- started{job.Args.Key, at}:
	case <-ctx.Done():
	}
	return nil
}

// riverClient returns a river client at its defaults on a pgx pool of its
// own (riverpgxv5, so LISTEN/NOTIFY is on): the default queue at the 100
// workers of river's own examples, noteWorker for the note jobs, which
// report on starts. The client works jobs only when run is true; it is
// stopped when tb ends. Its warnings go to stderr.
func (w *world) riverClient(tb testing.TB, run bool, starts chan<- started) *river.Client[pgx.Tx] {
	tb.Helper()
	workers := river.NewWorkers()
	river.AddWorker(workers, &noteWorker{started: starts})
	rc, err := river.NewClient(riverpgxv5.New(w.pool(tb)), &river.Config{
		Queues:  map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 100}},
		Workers: workers,
		Logger:  slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	require.NoError(tb, err)
	if run {
		require.NoError(tb, rc.Start(context.Background()))
		tb.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			require.NoError(tb, rc.Stop(ctx))
		})
	}
	return rc
}

// createdClient tells when each CreateTask (or BatchCreateTasks) call of a
// relay returned a created task: the moment the task exists in Cloud
// Tasks, which the commit-to-task line measures to.
type createdClient struct {
	cloudtasks.Client
	created chan<- started
}

func (c createdClient) CreateTask(ctx context.Context, req *cloudtaskspb.CreateTaskRequest, opts ...gax.CallOption) (*cloudtaskspb.Task, error) {
	t, err := c.Client.CreateTask(ctx, req, opts...)
	if err == nil {
		c.created <- started{req.GetTask().GetName(), time.Now()}
	}
	return t, err
}

func (c createdClient) BatchCreateTasks(ctx context.Context, req *cloudtaskspb.BatchCreateTasksRequest, opts ...gax.CallOption) (*ctapi.BatchCreateTasksOperation, error) {
	op, err := c.Client.BatchCreateTasks(ctx, req, opts...)
	if err == nil { // no faults are injected here: every task of the batch was created
		at := time.Now()
		for _, r := range req.GetRequests() {
			c.created <- started{r.GetTask().GetName(), at}
		}
	}
	return op, err
}
