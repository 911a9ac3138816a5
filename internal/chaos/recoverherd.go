package chaos

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ctdispatch/ctdispatch/internal/durability"
	"github.com/ctdispatch/ctdispatch/outbox/parquetbox"

	"cloud.google.com/go/cloudtasks/apiv2/cloudtaskspb"
	"github.com/google/uuid"
	"github.com/jonboulle/clockwork"

	"github.com/ctdispatch/ctdispatch/cloudtasks"
	"github.com/ctdispatch/ctdispatch/cloudtasks/emulator"
	"github.com/ctdispatch/ctdispatch/naming"
	"github.com/ctdispatch/ctdispatch/outbox"
)

// How the recover-herd scenario is shaped.
const (
	// DefaultRecoverHerdRequests is the number of stale IDs.
	DefaultRecoverHerdRequests = 2_000
	// recoverHerdChildren dispatch the batch from processes of their own;
	// the suite's own process is the third.
	recoverHerdChildren = 2
	// recoverHerdCallers is how many goroutines of the suite's process
	// dispatch the batch while Recover loops.
	recoverHerdCallers = 32
	// staleAge is how long ago the dead processor left its records.
	staleAge = time.Hour
)

// recoverHerd: a processor died an hour ago leaving every ID of a batch
// pending, half of them after their task was created. Three processes
// then dispatch the whole batch at once: two ctdispatch children, and the
// suite's own process, whose dispatcher also runs Recover in a loop, so
// Recover and Dispatch meet on the same IDs in one process and across
// processes. Nothing may panic or hang; no ID may get a second task or a
// second "created" answer; after a last plain run every ID is terminal.
func (r *run) recoverHerd(ctx context.Context) Result {
	n := r.opts.size(DefaultRecoverHerdRequests)
	b := batch{run: "recover-herd", n: n}
	tried := fmt.Sprintf("left %d IDs pending from a dead processor (half with their task already created), then 3 processes dispatched them at once while one also ran Recover in a loop", n)
	fail := func(problems ...string) Result { return failed(tried, problems) }

	emu, err := startEmulator(noFaults)
	if err != nil {
		return fail(err.Error())
	}
	defer emu.Close()
	root := filepath.Join(r.dir, "recover-herd")
	file := filepath.Join(r.dir, "recover-herd.jsonl")
	// The callers work from the last ID down while Recover goes from the
	// first up, so Recover finishes a share of the IDs before the callers
	// reach them and both meet, ID by ID, in the middle.
	down := make([]int, n)
	for i := range down {
		down[i] = n - 1 - i
	}
	if err := b.writeFile(file, down); err != nil {
		return fail(err.Error())
	}
	precreated, err := seedStale(ctx, emu, root, b)
	if err != nil {
		return fail("seed stale records: " + err.Error())
	}

	var (
		wg       sync.WaitGroup
		children []childOut
		local    localHerd
	)
	wg.Go(func() { children = r.runDispatchers(ctx, emu.Addr(), root, file, recoverHerdChildren) })
	wg.Go(func() { local = dispatchWhileRecovering(ctx, emu.Addr(), root, b, down) })
	wg.Wait()

	var problems []string
	problems = append(problems, local.problems...)
	created := map[string]int{}
	for id, c := range local.created {
		created[id] += c
	}
	answered := local.answered
	for _, o := range children {
		if o.err != nil {
			problems = append(problems, o.err.Error())
		}
		for id, c := range o.created {
			created[id] += c
		}
		for _, c := range o.outcomes {
			answered += c
		}
	}
	if want := (recoverHerdChildren + 1) * n; answered != want {
		problems = append(problems, fmt.Sprintf("%d requests answered, want %d", answered, want))
	}
	// Only the one call whose create succeeded may answer "created", and
	// none for a task created before the crash.
	wrongCreated := 0
	for i := range n {
		id := b.id(i).String()
		if created[id] > 1 || (precreated[id] && created[id] > 0) {
			wrongCreated++
		}
	}
	if wrongCreated > 0 {
		problems = append(problems, fmt.Sprintf("%d IDs were answered \"created\" more than once, or for a task that existed before", wrongCreated))
	}

	// A last plain run settles what Recover and the callers raced over.
	last := r.runDispatchers(ctx, emu.Addr(), root, file, 1)[0]
	if last.err != nil {
		problems = append(problems, "last run: "+last.err.Error())
	}
	if last.outcomes["created"] > 0 {
		problems = append(problems, fmt.Sprintf("the last run created %d tasks that should have existed", last.outcomes["created"]))
	}
	problems = append(problems, r.settled(ctx, ScenarioRecoverHerd, emu, root, b, rules{})...)
	if len(problems) > 0 {
		return fail(problems...)
	}
	return Result{Passed: true, Tried: tried, Held: fmt.Sprintf(
		"no panic or hang; %d Recover passes in the dispatching process finished %d records; exactly %d tasks, no ID answered \"created\" twice (nor any of the %d created before the crash); every ID terminal after a last run, at most one \"created\" record each, no damaged file",
		local.passes, local.recovered, n, len(precreated))}
}

// seedStale writes a pending record for every ID of b as a processor that
// died staleAge ago, and creates the task of every second ID, as a crash
// between the create call and the outcome record leaves it. It returns the
// IDs whose task exists.
func seedStale(ctx context.Context, emu *emulator.Server, root string, b batch) (map[string]bool, error) {
	past := clockwork.NewFakeClockAt(time.Now().Add(-staleAge))
	dead, err := uuid.NewV7()
	if err != nil {
		return nil, err
	}
	ob, err := parquetbox.Open(ctx, parquetbox.Config{Root: root, ProcessorUUID: dead, Clock: past})
	if err != nil {
		return nil, err
	}
	client, err := emu.NewClient(ctx)
	if err != nil {
		ob.Close()
		return nil, err
	}
	defer client.Close()
	precreated := map[string]bool{}
	for i := range b.n {
		id := b.id(i)
		rec := outbox.Record{
			Table: outbox.TableDispatch, ID: id.String(), CloudTaskID: id.CloudTaskID(), Queue: queuePath,
			RunID: id.RunID(), TaskKey: id.TaskKey(), Attempt: id.Attempt(), Kind: id.Kind().String(),
			Status: outbox.StatusPending, PayloadSHA256: naming.PayloadFingerprint([]byte(b.body(i))),
			CreatedAt: past.Now().UTC().Truncate(time.Microsecond),
		}
		if err := ob.Append(ctx, rec, nil); err != nil {
			ob.Close()
			return nil, err
		}
		if i%2 == 1 {
			continue
		}
		_, err := client.CreateTask(ctx, &cloudtaskspb.CreateTaskRequest{Parent: queuePath, Task: &cloudtaskspb.Task{
			Name: id.TaskName(queuePath),
			MessageType: &cloudtaskspb.Task_HttpRequest{HttpRequest: &cloudtaskspb.HttpRequest{
				Url: targetURL, HttpMethod: cloudtaskspb.HttpMethod_POST, Body: []byte(b.body(i)),
			}},
		}})
		if err != nil {
			ob.Close()
			return nil, fmt.Errorf("create %s: %w", id, err)
		}
		precreated[id.String()] = true
	}
	return precreated, ob.Close()
}

// localHerd is what the suite's own process saw.
type localHerd struct {
	created   map[string]int
	answered  int
	passes    int
	recovered int
	problems  []string
}

// dispatchWhileRecovering dispatches b, in the given order, from
// recoverHerdCallers goroutines of one dispatcher while another goroutine
// of the same dispatcher runs Recover over and over, until every call has
// answered.
func dispatchWhileRecovering(ctx context.Context, addr, root string, b batch, order []int) localHerd {
	out := localHerd{created: map[string]int{}}
	d, err := durability.OpenDispatcher(ctx, durability.Overlapped, parquetbox.Config{Root: root}, cloudtasks.Config{
		Project: project, Location: location, Queue: queueID, EmulatorAddr: addr,
	})
	if err != nil {
		out.problems = append(out.problems, "open dispatcher: "+err.Error())
		return out
	}
	var (
		mu      sync.Mutex
		next    atomic.Int64
		callers sync.WaitGroup
	)
	note := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		if len(out.problems) < 20 {
			out.problems = append(out.problems, fmt.Sprintf(format, args...))
		}
	}
	// A panic anywhere is the defect this scenario exists to catch: report
	// it instead of taking the suite down.
	guard := func(what string) {
		if v := recover(); v != nil {
			note("%s panicked: %v", what, v)
		}
	}
	for range recoverHerdCallers {
		callers.Go(func() {
			defer guard("Dispatch")
			for {
				k := int(next.Add(1)) - 1
				if k >= b.n || ctx.Err() != nil {
					return
				}
				i := order[k]
				callCtx, cancel := context.WithTimeout(ctx, time.Minute)
				res, err := d.Dispatch(callCtx, cloudtasks.DispatchRequest{
					RunID: b.run, TaskKey: b.taskKey(i), Identity: naming.Attempt(1),
					Task: cloudtasks.Task{URL: targetURL, Body: []byte(b.body(i))},
				})
				cancel()
				if err != nil {
					note("Dispatch %s: %v", b.id(i), err)
					continue
				}
				mu.Lock()
				out.answered++
				if res.Outcome == cloudtasks.OutcomeCreated {
					out.created[res.ID]++
				}
				mu.Unlock()
			}
		})
	}
	stop := make(chan struct{})
	recovering := make(chan struct{})
	go func() {
		defer close(recovering)
		defer guard("Recover")
		for {
			select {
			case <-stop:
				return
			default:
			}
			st, err := d.Recover(ctx)
			if err != nil {
				note("Recover: %v", err)
				return
			}
			mu.Lock()
			out.passes++
			out.recovered += st.Found + st.NotFound
			mu.Unlock()
		}
	}()
	callers.Wait()
	close(stop)
	<-recovering
	if err := d.Close(context.Background()); err != nil {
		note("close dispatcher: %v", err)
	}
	return out
}
