package bench

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	ctapi "cloud.google.com/go/cloudtasks/apiv2"
	"cloud.google.com/go/cloudtasks/apiv2/cloudtaskspb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver, for a PostgreSQL OutboxDir

	"github.com/ctdispatch/ctdispatch/cloudtasks"
	"github.com/ctdispatch/ctdispatch/cloudtasks/emulator"
	"github.com/ctdispatch/ctdispatch/internal/durability"
	"github.com/ctdispatch/ctdispatch/naming"
	"github.com/ctdispatch/ctdispatch/outbox"
	"github.com/ctdispatch/ctdispatch/outbox/parquetbox"
	"github.com/ctdispatch/ctdispatch/outbox/pgbox"
)

// targetURL is where the tasks point. Deliveries are off in the in-process
// emulator; an external one should run with --no-delivery.
const targetURL = "http://127.0.0.1:9/bench"

// target is everything the modes call: one emulator, one client shared by
// every mode, and the dispatchers the chosen modes need.
type target struct {
	srv    *emulator.Server // nil for an external emulator
	addr   string           // the emulator's gRPC address
	client *ctapi.Client
	pg     *sql.DB // the PostgreSQL outboxes' pool, when OutboxDir names one
	disp   map[Mode]*cloudtasks.Dispatcher
	// dispClose closes each mode's dispatcher and its outbox; lifeCPU is
	// the CPU its opening took, and then its closing too, charged to the
	// mode (the final flush to Parquet is part of a dispatch's cost).
	dispClose map[Mode]func() error
	lifeCPU   map[Mode]time.Duration
	tempDir   string
	closeFns  []func() error
}

func newTarget(ctx context.Context, c Config, logger *slog.Logger) (t *target, err error) {
	t = &target{disp: map[Mode]*cloudtasks.Dispatcher{}, dispClose: map[Mode]func() error{}, lifeCPU: map[Mode]time.Duration{}}
	defer func() {
		if err != nil {
			t.close()
		}
	}()
	addr := c.EmulatorAddr
	if len(c.EmulatorCommand) > 0 {
		if addr, err = t.startEmulatorProcess(ctx, c.EmulatorCommand); err != nil {
			return t, err
		}
	}
	if addr == "" {
		var rules []emulator.FaultRule
		if c.FaultRate > 0 {
			rules = append(rules, emulator.FaultRule{Methods: []string{"CreateTask"}, Rate: c.FaultRate, Code: codes.Unavailable})
		}
		if c.CommitThenFailRate > 0 {
			rules = append(rules, emulator.FaultRule{Methods: []string{"CreateTask"}, Rate: c.CommitThenFailRate, Code: codes.Unavailable, CommitThenFail: true})
		}
		if c.Latency > 0 {
			// Code OK: the rule only delays; it comes first so that it
			// applies to every call, failed or not.
			rules = append([]emulator.FaultRule{{Rate: 1, Latency: c.Latency}}, rules...)
		}
		t.srv, err = emulator.New(emulator.Config{
			Queues:          []emulator.QueueConfig{{Name: Queue}},
			DisableDelivery: true,
			Faults:          emulator.Faults{Seed: c.Seed, Rules: rules},
			Logger:          logger,
		})
		if err != nil {
			return t, fmt.Errorf("bench: start emulator: %w", err)
		}
		t.closeFns = append(t.closeFns, t.srv.Close)
		addr = t.srv.Addr()
	}
	t.addr = addr
	t.client, err = ctapi.NewClient(ctx, emulator.ClientOptions(addr)...)
	if err != nil {
		return t, fmt.Errorf("bench: client for %s: %w", addr, err)
	}
	t.closeFns = append(t.closeFns, t.client.Close)
	if t.srv == nil {
		if err := t.ensureQueue(ctx); err != nil {
			return t, err
		}
	}
	return t, t.openDispatchers(ctx, c, logger)
}

// ensureQueue creates the bench queue on an external emulator unless it
// exists.
func (t *target) ensureQueue(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err := t.client.CreateQueue(ctx, &cloudtaskspb.CreateQueueRequest{Parent: path.Dir(path.Dir(Queue)), Queue: &cloudtaskspb.Queue{Name: Queue}})
	if err != nil && status.Code(err) != codes.AlreadyExists {
		return fmt.Errorf("bench: create queue %s: %w", Queue, err)
	}
	return nil
}

// dispatchModes are the modes that call a Dispatcher, each with the
// durability and batching it measures.
var dispatchModes = []struct {
	mode       Mode
	durability durability.Mode
	batch      bool
}{
	{ModeDispatch, durability.Overlapped, false},
	{ModeDispatchStrict, durability.Strict, false},
	{ModeDispatchBatched, durability.Overlapped, true},
	{ModeInterval, durability.Interval, false},
	{ModeMemory, durability.Memory, false},
}

// openDispatchers opens the dispatchers (each with its own outbox) the
// chosen modes use; the timer mode shares the default one.
func (t *target) openDispatchers(ctx context.Context, c Config, logger *slog.Logger) error {
	need := map[Mode]bool{}
	for _, m := range c.Modes {
		if m == ModeTimer {
			m = ModeDispatch
		}
		need[m] = true
	}
	root := c.OutboxDir
	for _, dm := range dispatchModes {
		if !need[dm.mode] {
			continue
		}
		cfg := cloudtasks.Config{Project: "ctdispatch-bench", Location: "local", Queue: path.Base(Queue), Client: t.client,
			Logger: logger, Durability: dm.durability.Dispatcher(), Batch: dm.batch, BatchInFlight: c.BatchInFlight}
		var opts parquetbox.Config
		before := cpuTime()
		if dm.durability != durability.Memory && !isPostgresURL(root) {
			if root == "" {
				dir, err := os.MkdirTemp("", "ctdispatch-bench-*")
				if err != nil {
					return fmt.Errorf("bench: outbox directory: %w", err)
				}
				t.tempDir, root = dir, dir
			}
			opts = parquetbox.Config{Root: filepath.Join(root, string(dm.mode)), Logger: logger}
		}
		box, closeBox, err := t.openOutbox(ctx, c, dm.mode, dm.durability, root, opts)
		if err != nil {
			return fmt.Errorf("bench: %s outbox: %w", dm.mode, err)
		}
		d, err := cloudtasks.NewDispatcher(ctx, box, &cfg)
		if err != nil {
			closeBox()
			return fmt.Errorf("bench: %s dispatcher: %w", dm.mode, err)
		}
		t.dispClose[dm.mode] = func() error {
			return errors.Join(d.Close(context.Background()), closeBox())
		}
		t.disp[dm.mode] = d
		t.lifeCPU[dm.mode] = cpuTime() - before
	}
	return nil
}

// openOutbox opens the outbox of a dispatch mode: in a schema of its own
// of the PostgreSQL database root names, or as durability.Open does.
func (t *target) openOutbox(ctx context.Context, c Config, m Mode, dm durability.Mode, root string, opts parquetbox.Config) (outbox.Outbox, func() error, error) {
	if dm == durability.Memory || !isPostgresURL(root) {
		return durability.Open(ctx, dm, opts)
	}
	if t.pg == nil {
		db, err := sql.Open("pgx", root)
		if err != nil {
			return nil, nil, err
		}
		// Every statement in flight keeps its connection: database/sql
		// keeps two idle by default, and a new PostgreSQL connection is a
		// new server process. An overlapped dispatch's outcome is written
		// after its caller is answered, so up to two statements per caller
		// are in flight.
		db.SetMaxOpenConns(2 * c.Concurrency)
		db.SetMaxIdleConns(2 * c.Concurrency)
		t.pg = db
		t.closeFns = append(t.closeFns, db.Close)
	}
	schema := "ctdispatch_bench_" + strings.ReplaceAll(string(m), "-", "_")
	if _, err := t.pg.ExecContext(ctx, `DROP SCHEMA IF EXISTS "`+schema+`" CASCADE`); err != nil {
		return nil, nil, err
	}
	box, err := pgbox.New(t.pg, pgbox.Config{Schema: schema})
	if err != nil {
		return nil, nil, err
	}
	if err := box.Migrate(ctx); err != nil {
		return nil, nil, err
	}
	return box, func() error { return nil }, nil
}

// reset empties an in-process emulator, so every round of every mode
// starts against the same, empty store.
func (t *target) reset() {
	if t.srv != nil {
		t.srv.Reset()
	}
}

// closeDispatchers closes every mode's dispatcher and outbox, adding the
// CPU each close took to its mode's lifeCPU.
func (t *target) closeDispatchers() error {
	var errs []error
	for m, closeFn := range t.dispClose {
		before := cpuTime()
		errs = append(errs, closeFn())
		t.lifeCPU[m] += cpuTime() - before
		delete(t.dispClose, m)
	}
	return errors.Join(errs...)
}

func (t *target) close() error {
	errs := []error{t.closeDispatchers()}
	for i := len(t.closeFns) - 1; i >= 0; i-- {
		errs = append(errs, t.closeFns[i]())
	}
	if t.tempDir != "" {
		errs = append(errs, os.RemoveAll(t.tempDir))
	}
	return errors.Join(errs...)
}

// errEmptyID should never happen; it keeps the naming mode's result used.
var errEmptyID = errors.New("bench: empty Cloud Tasks ID")

// op returns the call mode m makes for the IDs of run; batch is the
// batch-bare request size.
func (t *target) op(m Mode, run string, body []byte, batch int) (opFunc, error) {
	task := cloudtasks.Task{URL: targetURL, Body: body}
	switch m {
	case ModeBatchBare:
		// Key k stands for the tasks k·batch … k·batch+batch-1.
		return func(ctx context.Context, key uint64) (bool, error) {
			req := &cloudtaskspb.BatchCreateTasksRequest{Parent: Queue, Requests: make([]*cloudtaskspb.CreateTaskRequest, batch)}
			for i := range batch {
				id, err := naming.NewDispatch(run, "t", naming.Attempt(key*uint64(batch)+uint64(i)))
				if err != nil {
					return false, err
				}
				req.Requests[i] = bareRequest(id, body)
			}
			op, err := t.client.BatchCreateTasks(ctx, req)
			if err != nil {
				return false, err
			}
			meta, err := op.Metadata()
			if err != nil {
				return false, err
			}
			for _, st := range meta.GetFailedRequests() {
				if codes.Code(st.GetCode()) != codes.AlreadyExists {
					return false, status.ErrorProto(st)
				}
			}
			return len(meta.GetFailedRequests()) > 0, nil
		}, nil
	case ModeCreateBare:
		return func(ctx context.Context, key uint64) (bool, error) {
			id, err := naming.NewDispatch(run, "t", naming.Attempt(key))
			if err != nil {
				return false, err
			}
			_, err = t.client.CreateTask(ctx, bareRequest(id, body))
			if status.Code(err) == codes.AlreadyExists {
				return true, nil
			}
			return false, err
		}, nil
	case ModeDispatch, ModeDispatchStrict, ModeDispatchBatched, ModeInterval, ModeMemory:
		d := t.disp[m]
		return func(ctx context.Context, key uint64) (bool, error) {
			res, err := d.Dispatch(ctx, cloudtasks.DispatchRequest{RunID: run, TaskKey: "t", Identity: naming.Attempt(key), Task: task})
			return res.Outcome == cloudtasks.OutcomeAlreadyExisted, err
		}, nil
	case ModeTimer:
		due := time.Now().Add(time.Hour).Truncate(time.Second)
		return func(ctx context.Context, key uint64) (bool, error) {
			res, err := t.disp[ModeDispatch].ScheduleTimer(ctx, cloudtasks.TimerRequest{Kind: naming.KindRetry, RunID: run, TaskKey: "t",
				Next: naming.Attempt(key), At: due, Task: task})
			return res.Outcome == cloudtasks.OutcomeAlreadyExisted, err
		}, nil
	case ModeNaming:
		return func(_ context.Context, key uint64) (bool, error) {
			id, err := naming.NewDispatch(run, "t", naming.Attempt(key))
			if err != nil {
				return false, err
			}
			if id.CloudTaskID() == "" {
				return false, errEmptyID
			}
			return false, nil
		}, nil
	}
	return nil, &ConfigError{Field: "Modes", Value: string(m), Rule: "is not a mode; allowed: " + modeList()}
}

// bareRequest is the CreateTask request a careful caller writes by hand:
// the deterministic name and the same two headers the dispatcher sets.
func bareRequest(id naming.ID, body []byte) *cloudtaskspb.CreateTaskRequest {
	cloudID := id.CloudTaskID()
	return &cloudtaskspb.CreateTaskRequest{
		Parent: Queue,
		Task: &cloudtaskspb.Task{
			Name: naming.TaskName(Queue, cloudID),
			MessageType: &cloudtaskspb.Task_HttpRequest{HttpRequest: &cloudtaskspb.HttpRequest{
				Url:        targetURL,
				HttpMethod: cloudtaskspb.HttpMethod_POST,
				Headers:    map[string]string{cloudtasks.HeaderIdempotencyKey: id.String(), cloudtasks.HeaderTaskID: cloudID},
				Body:       body,
			}},
		},
	}
}
