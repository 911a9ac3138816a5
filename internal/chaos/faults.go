package chaos

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/ctdispatch/ctdispatch/cloudtasks"
	"github.com/ctdispatch/ctdispatch/cloudtasks/emulator"
	"github.com/ctdispatch/ctdispatch/internal/durability"
	"github.com/ctdispatch/ctdispatch/naming"
	"github.com/ctdispatch/ctdispatch/outbox/parquetbox"
)

// faultPlan is the emulator's fault plan for the faults scenario: transient
// errors, commit-then-fail and latency on the calls the dispatcher makes,
// all at once.
func faultPlan(seed uint64) emulator.Faults {
	create := []string{"CreateTask", "GetTask"}
	return emulator.Faults{Seed: seed, Rules: []emulator.FaultRule{
		{Methods: create, Rate: 0.10, Code: codes.Unavailable, CommitThenFail: true},
		{Methods: create, Rate: 0.05, Code: codes.DeadlineExceeded, CommitThenFail: true},
		{Methods: create, Rate: 0.10, Code: codes.Unavailable},
		{Methods: create, Rate: 0.05, Code: codes.DeadlineExceeded},
		{Methods: create, Rate: 0.20, Latency: 2 * time.Millisecond},
	}}
}

// faults: the library's Dispatcher against an emulator that fails a third
// of the calls (half of those after creating the task) and slows a fifth;
// every request is made twice, concurrently.
func (r *run) faults(ctx context.Context) Result {
	n := r.opts.size(DefaultFaultRequests)
	b := batch{run: "faults", n: n}
	seed := r.rng(ScenarioFaults).Uint64()
	tried := fmt.Sprintf("dispatched %d requests twice each through the library, and %d more with a single call each left to Recover, while the emulator injected Unavailable and DeadlineExceeded (30%%, half after committing) and 2ms latency (20%%) into CreateTask and GetTask, fault seed %d", n, max(1, n/4), seed)
	fail := func(problems ...string) Result { return failed(tried, problems) }

	emu, err := startEmulator(faultPlan(seed))
	if err != nil {
		return fail(err.Error())
	}
	defer emu.Close()
	root := filepath.Join(r.dir, "faults")
	d, err := durability.OpenDispatcher(ctx, durability.Overlapped, parquetbox.Config{Root: root, Logger: r.log}, cloudtasks.Config{
		Project: project, Location: location, Queue: queueID, EmulatorAddr: emu.Addr(),
		Logger: r.log,
		// Short delays keep the run quick; the calls bound stays at its
		// default.
		Retry: cloudtasks.RetryPolicy{Initial: 2 * time.Millisecond, Max: 20 * time.Millisecond},
	})
	if err != nil {
		return fail(err.Error())
	}
	defer d.Close(context.Background())

	type answer struct {
		outcome cloudtasks.Outcome
		calls   int
	}
	var mu sync.Mutex
	answers := map[string][]answer{}
	var problems []string
	gaveUp, retried := 0, 0
	sem := make(chan struct{}, 32)
	var wg sync.WaitGroup
	for i := range 2 * n {
		k := i % n
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			req := cloudtasks.DispatchRequest{RunID: b.run, TaskKey: b.taskKey(k),
				Identity: naming.Attempt(1),
				Task:     cloudtasks.Task{URL: targetURL, Body: []byte(b.body(k))}}
			// A caller repeats a request whose outcome is unknown: the
			// retry policy ran out while the faults lasted.
			for try := 0; ; try++ {
				res, err := d.Dispatch(ctx, req)
				mu.Lock()
				switch {
				case err == nil:
					answers[res.ID] = append(answers[res.ID], answer{res.Outcome, res.Calls})
					if res.Calls > 1 {
						retried++
					}
				case errors.Is(err, cloudtasks.ErrGaveUp) && try < 5:
					gaveUp++
					mu.Unlock()
					continue
				default:
					problems = append(problems, err.Error())
				}
				mu.Unlock()
				return
			}
		})
	}
	wg.Wait()
	if err := d.Close(context.Background()); err != nil {
		problems = append(problems, "close dispatcher: "+err.Error())
	}
	gb := batch{run: "faults-gave-up", n: max(1, n/4)}
	rs, p := r.gaveUpThenRecover(ctx, emu.Addr(), root, gb)
	problems = append(problems, p...)
	if r.opts.afterRun != nil {
		r.opts.afterRun(ScenarioFaults, emu)
	}
	want := b.ids()
	outcomes := map[cloudtasks.Outcome]int{}
	badAnswers := 0
	for id := range want {
		as := answers[id]
		created := 0
		for _, a := range as {
			outcomes[a.outcome]++
			if a.outcome == cloudtasks.OutcomeCreated {
				created++
			}
		}
		if len(as) != 2 || created > 1 {
			badAnswers++
		}
	}
	if badAnswers > 0 {
		problems = append(problems, fmt.Sprintf("%d IDs without two answers or with more than one \"created\"", badAnswers))
	}
	// Commit-then-fail hides the creation from the caller, so an ID may
	// have no "created" answer: the one task is still the proof.
	problems = append(problems, checkTasks(emu, b, gb)...)
	for _, bb := range []batch{b, gb} {
		t, err := readOutbox(ctx, root, bb.run)
		if err != nil {
			problems = append(problems, "read outbox: "+err.Error())
		} else {
			problems = append(problems, checkOutbox(t, bb.ids(), rules{})...)
		}
	}
	if len(problems) > 0 {
		return fail(problems...)
	}
	return Result{Passed: true, Tried: tried, Held: fmt.Sprintf(
		"exactly %d tasks; every ID answered twice, never \"created\" twice (%d created, %d already_existed); %d calls needed retries, %d gave up and were repeated; of the single calls %d gave up, Recover found %d tasks and %d not created (in %d passes), and the repeats created the missing ones; every latest outbox record terminal",
		n+gb.n, outcomes[cloudtasks.OutcomeCreated], outcomes[cloudtasks.OutcomeAlreadyExisted], retried, gaveUp, rs.gaveUp, rs.found, rs.notFound, rs.passes)}
}

// gaveUpStats counts the give-up-then-recover half of the faults scenario.
type gaveUpStats struct{ gaveUp, found, notFound, passes int }

// gaveUpThenRecover dispatches b with one CreateTask call per request, so
// faults leave records pending with an unknown outcome (after
// commit-then-fail the task exists); Recover, itself under GetTask faults,
// resolves them in as many passes as it needs, and every request is then
// repeated, as a caller would after an error.
func (r *run) gaveUpThenRecover(ctx context.Context, addr, root string, b batch) (gaveUpStats, []string) {
	var st gaveUpStats
	open := func(c cloudtasks.Config) (*durability.Dispatcher, error) {
		c.Project, c.Location, c.Queue, c.EmulatorAddr, c.Logger = project, location, queueID, addr, r.log
		return durability.OpenDispatcher(ctx, durability.Overlapped, parquetbox.Config{Root: root, Logger: r.log}, c)
	}
	request := func(i int) cloudtasks.DispatchRequest {
		return cloudtasks.DispatchRequest{RunID: b.run, TaskKey: b.taskKey(i),
			Identity: naming.Attempt(1),
			Task:     cloudtasks.Task{URL: targetURL, Body: []byte(b.body(i))}}
	}
	var problems []string
	one, err := open(cloudtasks.Config{Retry: cloudtasks.RetryPolicy{MaxCalls: 1}})
	if err != nil {
		return st, []string{err.Error()}
	}
	for i := range b.n {
		_, err := one.Dispatch(ctx, request(i))
		switch {
		case errors.Is(err, cloudtasks.ErrGaveUp):
			st.gaveUp++
		case err != nil:
			problems = append(problems, "single call: "+err.Error())
		}
	}
	if err := one.Close(context.Background()); err != nil {
		problems = append(problems, "close dispatcher: "+err.Error())
	}
	// With 30% of calls failing, fifty single calls all succeed with a
	// chance below 1e-7; smaller runs may legitimately see no give-up.
	if st.gaveUp == 0 && b.n >= 50 {
		problems = append(problems, "no single call gave up: the fault plan did not bite")
	}
	// Every pending record counts as stale: its writer is closed.
	rec, err := open(cloudtasks.Config{StaleAfter: time.Nanosecond,
		Retry: cloudtasks.RetryPolicy{Initial: 2 * time.Millisecond, Max: 20 * time.Millisecond}})
	if err != nil {
		return st, append(problems, err.Error())
	}
	defer rec.Close(context.Background())
	for st.passes < 10 {
		st.passes++
		rs, err := rec.Recover(ctx)
		if err != nil {
			return st, append(problems, "recover: "+err.Error())
		}
		st.found += rs.Found
		st.notFound += rs.NotFound
		if rs.Errors == 0 {
			break
		}
	}
	if st.found+st.notFound != st.gaveUp {
		problems = append(problems, fmt.Sprintf("Recover resolved %d records, want the %d that gave up", st.found+st.notFound, st.gaveUp))
	}
	for i := range b.n {
		res, err := rec.Dispatch(ctx, request(i))
		for try := 0; errors.Is(err, cloudtasks.ErrGaveUp) && try < 5; try++ {
			res, err = rec.Dispatch(ctx, request(i))
		}
		if err != nil {
			problems = append(problems, "repeat: "+err.Error())
		} else if res.Outcome == cloudtasks.OutcomeRecovered {
			problems = append(problems, res.ID+": still pending after Recover")
		}
	}
	return st, problems
}
