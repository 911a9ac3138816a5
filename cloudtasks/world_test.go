package cloudtasks_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/google/uuid"
	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"google.golang.org/grpc/codes"

	"github.com/ctdispatch/ctdispatch/cloudtasks"
	"github.com/ctdispatch/ctdispatch/cloudtasks/emulator"
	"github.com/ctdispatch/ctdispatch/naming"
	"github.com/ctdispatch/ctdispatch/outbox"
	"github.com/ctdispatch/ctdispatch/outbox/parquetbox"
)

// worldQueue is the queue of every world's dispatchers.
const worldQueue = "projects/proj/locations/europe-west1/queues/default"

// A world is what several dispatcher processes share: one emulator, one
// fake clock, one parquetbox root. Each proc opened in it is a processor of
// its own, as a separate process would be.
type world struct {
	emu   *emulator.Server
	clock *clockwork.FakeClock
	root  string
}

// newWorld starts an emulator (store-only) on a fake clock, and gives the
// world a temporary outbox root.
func newWorld(t *testing.T) *world {
	t.Helper()
	clock := clockwork.NewFakeClockAt(t0)
	return &world{emu: startEmulator(t, clock), clock: clock, root: t.TempDir()}
}

// startEmulator starts the in-repo emulator, store-only, with the world's
// queue; clock may be nil for the real clock.
func startEmulator(t testing.TB, clock clockwork.Clock) *emulator.Server {
	t.Helper()
	emu, err := emulator.New(emulator.Config{DisableDelivery: true, Clock: clock, Queues: []emulator.QueueConfig{{Name: worldQueue}}})
	require.NoError(t, err)
	t.Cleanup(func() { emu.Close() })
	return emu
}

// client opens the official client on w's emulator, for a test that wraps
// it (Config.Client) to hold or observe calls.
func (w *world) client(t *testing.T) cloudtasks.Client {
	t.Helper()
	c, err := w.emu.NewClient(context.Background())
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return c
}

// proc is one dispatcher process of a world: its own outbox handle (and so
// processor UUID) on the world's root, and its own metrics.
type proc struct {
	cfg    cloudtasks.Config
	box    *parquetbox.Outbox
	d      *cloudtasks.Dispatcher
	reader *sdkmetric.ManualReader
}

// open opens a processor on w; edit may change its config first.
func (w *world) open(t *testing.T, edit func(*cloudtasks.Config)) *proc {
	t.Helper()
	return w.openWith(t, edit, nil)
}

// openWith is open whose editBox may also change the processor's outbox
// options, for example to keep the tables in a bucket.
func (w *world) openWith(t *testing.T, edit func(*cloudtasks.Config), editBox func(*parquetbox.Config)) *proc {
	t.Helper()
	ctx := context.Background()
	reader := sdkmetric.NewManualReader()
	cfg := cloudtasks.Config{Project: "proj", Location: "europe-west1", Queue: "default", EmulatorAddr: w.emu.Addr(),
		Clock: w.clock, MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))}
	if edit != nil {
		edit(&cfg)
	}
	opts := parquetbox.Config{Root: w.root, ProcessorUUID: uuid.Must(uuid.NewV7()), Clock: cfg.Clock}
	if editBox != nil {
		editBox(&opts)
	}
	box, err := parquetbox.Open(ctx, opts)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, box.Close()) })
	p := &proc{cfg: cfg, box: box, reader: reader}
	p.d, err = cloudtasks.NewDispatcher(ctx, box, &p.cfg)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, p.d.Close(context.Background())) })
	return p
}

// settle makes every answered call's records readable: an answer in the
// default (overlapped) mode may come before its outcome is recorded, and
// Close is what waits for them. The processor goes on with a new
// dispatcher on the same outbox, client settings and metrics.
func (p *proc) settle(t *testing.T) {
	t.Helper()
	require.NoError(t, p.d.Close(context.Background()))
	var err error
	p.d, err = cloudtasks.NewDispatcher(context.Background(), p.box, &p.cfg)
	require.NoError(t, err)
}

// history returns every record of an ID, oldest first, once settled.
func (p *proc) history(t *testing.T, id string) []outbox.Record {
	t.Helper()
	p.settle(t)
	recs, err := p.d.History(context.Background(), id)
	require.NoError(t, err)
	return recs
}

func statuses(recs []outbox.Record) []outbox.Status {
	out := make([]outbox.Status, len(recs))
	for i, r := range recs {
		out[i] = r.Status
	}
	return out
}

// request is a dispatch of attempt of task in run with body.
func request(run, task string, attempt uint64, body string) cloudtasks.DispatchRequest {
	return cloudtasks.DispatchRequest{
		RunID: run, TaskKey: task, Identity: naming.Attempt(attempt),
		Task: cloudtasks.Task{URL: "https://worker.example/run", Body: []byte(body)},
	}
}

// herd makes n calls at once and counts their outcomes; every call must
// succeed.
func herd(t testing.TB, n int, call func(i int) (cloudtasks.DispatchResult, error)) map[cloudtasks.Outcome]int {
	t.Helper()
	start := make(chan struct{})
	var mu sync.Mutex
	outcomes := map[cloudtasks.Outcome]int{}
	var errs []error
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			res, err := call(i)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
				return
			}
			outcomes[res.Outcome]++
		})
	}
	close(start)
	wg.Wait()
	require.NoError(t, errors.Join(errs...))
	return outcomes
}

// failAll is a fault plan under which every call of method fails with code;
// commit makes each call take effect first (its answer is lost).
func failAll(method string, code codes.Code, commit bool) emulator.Faults {
	return emulator.Faults{Rules: []emulator.FaultRule{{Methods: []string{method}, Rate: 1, Code: code, CommitThenFail: commit}}}
}

// fast is a retry policy of 1ns waits without jitter.
func fast(maxCalls int) cloudtasks.RetryPolicy {
	return cloudtasks.RetryPolicy{Initial: 1, Max: 1, Jitter: -1, MaxCalls: maxCalls}
}
