package demo

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/jonboulle/clockwork"
	"google.golang.org/grpc/codes"

	"github.com/ctdispatch/ctdispatch/cloudtasks"
	"github.com/ctdispatch/ctdispatch/cloudtasks/emulator"
	cloudworker "github.com/ctdispatch/ctdispatch/cloudtasks/worker"
	"github.com/ctdispatch/ctdispatch/naming"
	"github.com/ctdispatch/ctdispatch/outbox/parquetbox"
)

// The demo's project, location and queue.
const (
	Project  = "demo-project"
	Location = "europe-west1"
	Queue    = "work"
)

// taskKeys are the steps of every demo run, in order.
var taskKeys = []string{"extract", "transform", "load", "report"}

// Options shape a demo run. Zero fields take the defaults documented on them.
type Options struct {
	// Runs is how many orchestration runs are dispatched. Defaults to 3.
	Runs int
	// OutboxDir is where the outbox is written. Defaults to a new
	// temporary directory, removed at the end unless Keep is set.
	OutboxDir string
	// Keep leaves the outbox directory in place.
	Keep bool
	// CommitThenFailRate is the share of CreateTask calls the emulator
	// applies and then answers with Unavailable, forcing the dispatcher to
	// retry into AlreadyExists. Defaults to 0.25; negative means none.
	CommitThenFailRate float64
	// Seed makes the injected faults repeatable. Defaults to 1.
	Seed uint64
	// Logger receives the library's logs. Defaults to discarding.
	Logger *slog.Logger
}

func (o Options) withDefaults() Options {
	if o.Runs == 0 {
		o.Runs = 3
	}
	if o.CommitThenFailRate == 0 {
		o.CommitThenFailRate = 0.25
	}
	if o.CommitThenFailRate < 0 {
		o.CommitThenFailRate = 0
	}
	if o.Seed == 0 {
		o.Seed = 1
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return o
}

// Validate reports the first option out of range, naming it and the
// allowed range.
func (o Options) Validate() error {
	switch {
	case o.Runs < 0 || o.Runs > 1000:
		return fmt.Errorf("demo: runs %d out of range; allowed: 1 to 1000", o.Runs)
	case o.CommitThenFailRate > 1:
		return fmt.Errorf("demo: commit-then-fail rate %v out of range; allowed: 0 to 1", o.CommitThenFailRate)
	}
	return nil
}

// Summary is what a demo run did and saw.
type Summary struct {
	// Runs and Tasks describe the workload: Runs runs of Tasks tasks each.
	Runs  int `json:"runs"`
	Tasks int `json:"tasks"`
	// DispatchCalls counts Dispatch calls; every attempt is requested twice.
	DispatchCalls int `json:"dispatch_calls"`
	// Dispatch tallies the outcomes of those calls.
	Dispatch Tally `json:"dispatch"`
	// TimerCalls counts ScheduleTimer calls; every timer is requested twice.
	TimerCalls int `json:"timer_calls"`
	// Timers tallies the outcomes of those calls.
	Timers Tally `json:"timers"`
	// TasksInQueueAfterDispatch is what the emulator held before anything
	// was delivered: one task per distinct ID.
	TasksInQueueAfterDispatch int `json:"tasks_in_queue_after_dispatch"`
	// Advanced is how far the emulator's clock was moved to fire the
	// timers; JSON has it in seconds, as advanced_seconds.
	Advanced time.Duration `json:"-"`
	// DeliveryAttempts counts every HTTP attempt the emulator made,
	// including those the worker failed on purpose.
	DeliveryAttempts int `json:"delivery_attempts"`
	// Worker is what the worker saw.
	Worker WorkerStats `json:"worker"`
	// TasksLeft is what the queue holds at the end (0: all delivered).
	TasksLeft int `json:"tasks_left"`
	// OutboxDir is the outbox root; Kept says whether it is still there.
	OutboxDir string `json:"outbox_dir"`
	// Kept reports whether the outbox was left in place.
	Kept bool `json:"kept"`
}

// MarshalJSON writes the summary with snake_case keys and the clock
// advance in seconds, under a key that says so.
func (s Summary) MarshalJSON() ([]byte, error) {
	type plain Summary // without this method
	return json.Marshal(struct {
		plain
		AdvancedSeconds float64 `json:"advanced_seconds"`
	}{plain(s), s.Advanced.Seconds()})
}

// Tally counts the outcomes of a group of calls.
type Tally struct {
	// Created counts calls that created their task.
	Created int `json:"created"`
	// AlreadyExisted counts duplicates: answered from the outbox (Skipped)
	// or by Cloud Tasks' AlreadyExists.
	AlreadyExisted int `json:"already_existed"`
	// Skipped counts the duplicates the outbox answered with no RPC.
	Skipped int `json:"skipped"`
	// Recovered counts calls that finished an interrupted dispatch.
	Recovered int `json:"recovered"`
	// CreateCalls counts CreateTask RPCs, retries included.
	CreateCalls int `json:"create_calls"`
}

func (t *Tally) add(o cloudtasks.Outcome, skipped bool, calls int) {
	switch o {
	case cloudtasks.OutcomeCreated:
		t.Created++
	case cloudtasks.OutcomeAlreadyExisted:
		t.AlreadyExisted++
	case cloudtasks.OutcomeRecovered:
		t.Recovered++
	}
	if skipped {
		t.Skipped++
	}
	t.CreateCalls += calls
}

// Env is a running demo: the emulator, the worker and the dispatcher, for
// callers that keep them up after Run (ctdispatch demo --keep).
type Env struct {
	// Emulator is the in-process Cloud Tasks emulator.
	Emulator *emulator.Server
	// WorkerURL is the worker's base URL.
	WorkerURL string
	closers   []func() error
}

// Close stops everything the demo started.
func (e *Env) Close() error {
	var errs []error
	for i := len(e.closers) - 1; i >= 0; i-- {
		errs = append(errs, e.closers[i]())
	}
	return errors.Join(errs...)
}

// Run starts an emulator, a worker and a dispatcher on loopback, dispatches
// every task of every run twice (an orchestrator repeating itself after a
// crash), schedules a retry timer and a heartbeat check per run (also
// twice), delivers what is due, moves the emulator's clock forward to fire
// the timers, and returns what happened. The caller must Close the Env.
func Run(ctx context.Context, opts Options) (Summary, *Env, error) {
	if err := opts.Validate(); err != nil {
		return Summary{}, nil, err
	}
	opts = opts.withDefaults()
	env := &Env{}
	sum, err := run(ctx, opts, env)
	if err != nil {
		return sum, env, errors.Join(err, env.Close())
	}
	return sum, env, nil
}

func run(ctx context.Context, opts Options, env *Env) (Summary, error) {
	sum := Summary{Runs: opts.Runs, Tasks: len(taskKeys)}

	dir, err := outboxDir(opts, env)
	if err != nil {
		return sum, err
	}
	sum.OutboxDir, sum.Kept = dir, opts.Keep

	worker, err := NewWorker(opts.Logger)
	if err != nil {
		return sum, err
	}
	worker.FailAfterWork = func(d *cloudworker.Delivery) bool { return d.ID.TaskKey() == "report" }
	workerURL, err := serve(worker, env)
	if err != nil {
		return sum, err
	}
	env.WorkerURL = workerURL

	// The emulator runs on a clock of its own, started at the real now, so
	// the demo can jump to the timers' due times instead of waiting for
	// them; the dispatcher keeps the real clock.
	clock := clockwork.NewFakeClockAt(time.Now().Truncate(time.Second))
	queuePath := fmt.Sprintf("projects/%s/locations/%s/queues/%s", Project, Location, Queue)
	emu, err := emulator.New(emulator.Config{
		Clock:          clock,
		ManualDelivery: true,
		Logger:         opts.Logger,
		Queues:         []emulator.QueueConfig{{Name: queuePath, MinBackoff: time.Second, MaxBackoff: 10 * time.Second}},
		Faults: emulator.Faults{Seed: opts.Seed, Rules: []emulator.FaultRule{{
			Methods: []string{"CreateTask"}, Rate: opts.CommitThenFailRate,
			Code: codes.Unavailable, CommitThenFail: true,
		}}},
	})
	if err != nil {
		return sum, err
	}
	env.Emulator = emu
	env.closers = append(env.closers, emu.Close)

	box, err := parquetbox.Open(ctx, parquetbox.Config{Root: dir, Logger: opts.Logger})
	if err != nil {
		return sum, err
	}
	env.closers = append(env.closers, box.Close)
	d, err := cloudtasks.NewDispatcher(ctx, box, &cloudtasks.Config{
		Project: Project, Location: Location, Queue: Queue,
		EmulatorAddr: emu.Addr(), Logger: opts.Logger,
		Retry: cloudtasks.RetryPolicy{Initial: 5 * time.Millisecond, Max: 50 * time.Millisecond},
	})
	if err != nil {
		return sum, err
	}
	closeDispatcher := sync1(func() error { return d.Close(context.Background()) })
	env.closers = append(env.closers, closeDispatcher)

	if err := dispatchRuns(ctx, d, workerURL, opts.Runs, &sum); err != nil {
		return sum, err
	}
	if err := scheduleTimers(ctx, d, workerURL, clock.Now(), opts.Runs, &sum); err != nil {
		return sum, err
	}
	sum.TasksInQueueAfterDispatch = emu.TaskCount()

	// Deliver what is due now, then jump past the last timer and deliver
	// again; RunDue also plays out the retries of failed deliveries.
	if _, err := emu.RunDue(ctx); err != nil {
		return sum, err
	}
	sum.Advanced = lastTimer + time.Minute
	clock.Advance(sum.Advanced)
	if _, err := emu.RunDue(ctx); err != nil {
		return sum, err
	}
	for range 10 { // worker-side failures back off; give them their time
		if emu.TaskCount() == 0 {
			break
		}
		clock.Advance(time.Minute)
		if _, err := emu.RunDue(ctx); err != nil {
			return sum, err
		}
	}
	sum.DeliveryAttempts = len(emu.Deliveries())
	sum.Worker = worker.Stats()
	sum.TasksLeft = emu.TaskCount()
	// Closing the dispatcher rolls the outbox log into Parquet files, so
	// the summary's queries find every record.
	if err := closeDispatcher(); err != nil {
		return sum, err
	}
	return sum, nil
}

// sync1 makes close idempotent, so it can run early and again at Env.Close.
func sync1(close func() error) func() error {
	done := false
	return func() error {
		if done {
			return nil
		}
		done = true
		return close()
	}
}

func outboxDir(opts Options, env *Env) (string, error) {
	if opts.OutboxDir != "" {
		return opts.OutboxDir, os.MkdirAll(opts.OutboxDir, 0o700)
	}
	dir, err := os.MkdirTemp("", "ctdispatch-demo-")
	if err != nil {
		return "", fmt.Errorf("demo: outbox directory: %w", err)
	}
	if !opts.Keep {
		env.closers = append(env.closers, func() error { return os.RemoveAll(dir) })
	}
	return dir, nil
}

// serve runs h on a loopback port and returns its base URL.
func serve(h http.Handler, env *Env) (string, error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("demo: worker listener: %w", err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(lis) //nolint:errcheck // Serve returns ErrServerClosed on Close
	env.closers = append(env.closers, srv.Close)
	return "http://" + lis.Addr().String(), nil
}

// dispatchRuns sends every task of every run twice, the second time as an
// orchestrator would after losing the first answer.
func dispatchRuns(ctx context.Context, d *cloudtasks.Dispatcher, workerURL string, runs int, sum *Summary) error {
	for r := 1; r <= runs; r++ {
		for _, key := range taskKeys {
			req := cloudtasks.DispatchRequest{
				RunID: fmt.Sprintf("run-%d", r), TaskKey: key,
				Identity: naming.Attempt(1),
				Task: cloudtasks.Task{
					URL:     workerURL + "/" + key,
					Headers: map[string]string{"Content-Type": "application/json"},
					Body:    fmt.Appendf(nil, `{"run":%d,"step":%q}`, r, key),
				},
			}
			for range 2 {
				res, err := d.Dispatch(ctx, req)
				if err != nil {
					return fmt.Errorf("demo: dispatch %s/%s: %w", req.RunID, key, err)
				}
				sum.DispatchCalls++
				sum.Dispatch.add(res.Outcome, res.Skipped, res.Calls)
			}
		}
	}
	return nil
}

// lastTimer is how far ahead the latest demo timer fires.
const lastTimer = 5 * time.Minute

// scheduleTimers asks, per run, for a retry of "transform" two minutes out
// and a heartbeat check of "load" lastTimer out, each twice.
func scheduleTimers(ctx context.Context, s *cloudtasks.Dispatcher, workerURL string, now time.Time, runs int, sum *Summary) error {
	for r := 1; r <= runs; r++ {
		reqs := []cloudtasks.TimerRequest{
			{Kind: naming.KindRetry, TaskKey: "transform", Next: naming.Attempt(2), At: now.Add(2 * time.Minute)},
			{Kind: naming.KindHeartbeat, TaskKey: "load", At: now.Add(lastTimer)},
		}
		for _, req := range reqs {
			req.RunID = fmt.Sprintf("run-%d", r)
			req.Task = cloudtasks.Task{URL: workerURL + "/timer/" + req.Kind.String()}
			for range 2 {
				res, err := s.ScheduleTimer(ctx, req)
				if err != nil {
					return fmt.Errorf("demo: schedule %s timer for %s/%s: %w", req.Kind, req.RunID, req.TaskKey, err)
				}
				sum.TimerCalls++
				sum.Timers.add(res.Outcome, res.Skipped, 0)
			}
		}
	}
	return nil
}
