package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
)

// crash: a ctdispatch process dispatching a batch is SIGKILLed at random
// points; after each kill a new process (a new processor UUID) runs
// `recover`, then the batch is run again, in a new order. After every kill
// each request the killed process had acknowledged must be recorded
// terminal; at the end every request has exactly one task and every file
// is readable.
func (r *run) crash(ctx context.Context) Result {
	n, kills := r.opts.size(DefaultCrashRequests), r.opts.kills()
	b := batch{run: "crash", n: n}
	tried := fmt.Sprintf("SIGKILLed a process dispatching %d requests %d times at random points, each followed by recover and a re-run in a new order", n, kills)
	fail := func(problems ...string) Result { return failed(tried, problems) }

	emu, err := startEmulator(noFaults)
	if err != nil {
		return fail(err.Error())
	}
	defer emu.Close()
	root := filepath.Join(r.dir, "crash")
	file := filepath.Join(r.dir, "crash.jsonl")
	rng := r.rng(ScenarioCrash)
	want := b.ids()

	acked := map[string]bool{}
	var problems []string
	killed, early, finished := 0, 0, 0
	var rec recoverCounts
	// Each kill is keyed to an answer that is sure to come, never to a
	// delay: after a random number of new answers, at most n/(2·kills) and
	// fewer than the requests still open (so the planned kills take about a
	// quarter of the batch, leaving room for the answers a process gives
	// between the planned one and the signal, and the process always has
	// more to do when it is killed), or, one time in five, after a random number
	// of answers of any kind, which may land among the skips of requests
	// an earlier run finished. A run that still finishes first (the
	// process answered its last requests between our read and the signal)
	// is run again; it does not count as a kill.
	maxNew := max(1, n/(2*kills))
	for cycle := 0; killed < kills && cycle < 3*kills && ctx.Err() == nil; cycle++ {
		if cycle > 0 {
			c, err := r.recoverOnce(ctx, emu.Addr(), root)
			if err != nil {
				return fail(fmt.Sprintf("recover after kill %d: %v", killed, err))
			}
			rec.add(c)
		}
		open, err := openRequests(ctx, root, b.run, n)
		if err != nil {
			return fail(fmt.Sprintf("read outbox before run %d: %v", cycle+1, err))
		}
		if open < 2 {
			return fail(fmt.Sprintf("only %d of %d requests left open after %d kills: too few to plan the next kill (raise Requests or lower Kills)", open, n, killed))
		}
		if err := b.writeFile(file, rng.Perm(n)); err != nil {
			return fail(err.Error())
		}
		plan := killPlan{afterNew: 1 + rng.IntN(min(maxNew, open-1))}
		if rng.IntN(5) == 0 {
			// Among the answers of any kind, but no further than the
			// skips of the finished requests plus maxNew: a later one
			// would let the run use up the batch.
			plan = killPlan{afterAny: 1 + rng.IntN(min(n-1, n-open+maxNew))}
		}
		out, err := r.dispatchUntilKilled(ctx, emu.Addr(), root, file, plan)
		if err != nil {
			return fail(fmt.Sprintf("run %d: %v", cycle+1, err))
		}
		for _, a := range out.acks {
			acked[a.DispatchID] = true
		}
		if !out.killed {
			finished++
			continue
		}
		killed++
		if out.newAcks == 0 {
			early++
		}
		// Nothing the killed process acknowledged may be missing or
		// pending, before any recovery touches the outbox.
		t, err := readOutbox(ctx, root, b.run)
		if err != nil {
			return fail(fmt.Sprintf("read outbox after kill %d: %v", killed, err))
		}
		// IDs recorded but not acknowledged are fine here: only the
		// acknowledged ones are checked.
		for _, p := range checkOutbox(t, acked, rules{othersAllowed: true}) {
			problems = append(problems, fmt.Sprintf("after kill %d: %s", killed, p))
		}
	}
	if killed < kills {
		problems = append(problems, fmt.Sprintf("only %d of %d planned kills landed in %d runs (the others finished first)", killed, kills, killed+finished))
	}
	// The last run: recover, then the batch to the end.
	c, err := r.recoverOnce(ctx, emu.Addr(), root)
	if err != nil {
		return fail(fmt.Sprintf("final recover: %v", err))
	}
	rec.add(c)
	out, err := r.dispatchUntilKilled(ctx, emu.Addr(), root, file, killPlan{})
	if err != nil {
		return fail(fmt.Sprintf("final run: %v", err))
	}
	if len(out.acks) != n {
		problems = append(problems, fmt.Sprintf("final run answered %d of %d requests", len(out.acks), n))
	}
	if r.opts.afterRun != nil {
		r.opts.afterRun(ScenarioCrash, emu)
	}
	problems = append(problems, checkTasks(emu, b)...)
	t, err := readOutbox(ctx, root, b.run)
	if err != nil {
		problems = append(problems, "read outbox: "+err.Error())
	} else {
		problems = append(problems, checkOutbox(t, want, rules{})...)
	}
	if len(problems) > 0 {
		return fail(problems...)
	}
	return Result{Passed: true, Tried: tried, Held: fmt.Sprintf(
		"%d kills, all planned and landed (%d before the first new answer, %d runs finished first and were run again); all %d acknowledged requests recorded terminal after every kill; recover re-drove %d pending records (%d found, %d not found); exactly %d tasks, every ID terminal with at most one \"created\" record, %d processor UUIDs, no damaged file",
		killed, early, finished, len(acked), rec.Stale, rec.Found, rec.NotFound, n, len(t.procs))}
}

// killPlan says when to SIGKILL the child: on its afterNew-th answer
// that was not a skip, or on its afterAny-th answer of any kind; the zero
// plan never kills.
type killPlan struct {
	afterNew int
	afterAny int
}

type runOut struct {
	acks    []ack
	newAcks int
	killed  bool
}

// dispatchUntilKilled runs `ctdispatch dispatch` over file and kills it as
// plan says. Only a clean exit or our own SIGKILL are accepted.
func (r *run) dispatchUntilKilled(ctx context.Context, addr, root, file string, plan killPlan) (runOut, error) {
	var out runOut
	// Strict: this scenario checks that every answered request's record is
	// terminal after a kill, which only the strict mode promises.
	cmd := r.command(ctx, append(dispatchArgs(addr, root, file), "--durability", "strict")...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return out, err
	}
	shrinkPipe(stdout)
	if err := cmd.Start(); err != nil {
		return out, err
	}
	var once sync.Once
	kill := func() { once.Do(func() { cmd.Process.Signal(syscall.SIGKILL) }) }
	answers := 0
	rerr := readAcks(stdout, func(a ack) {
		out.acks = append(out.acks, a)
		answers++
		if !a.Skipped {
			out.newAcks++
		}
		if (plan.afterNew > 0 && !a.Skipped && out.newAcks == plan.afterNew) || answers == plan.afterAny {
			kill()
		}
	})
	err = cmd.Wait()
	if rerr != nil {
		return out, rerr
	}
	var ee *exec.ExitError
	switch {
	case err == nil:
		return out, nil
	case errors.As(err, &ee):
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL && plan != (killPlan{}) {
			out.killed = true
			return out, nil
		}
	}
	return out, fmt.Errorf("%v: %s", err, firstLine(stderr.String()))
}

// recoverCounts is the --json output of `ctdispatch recover`.
type recoverCounts struct {
	Stale      int `json:"stale"`
	Found      int `json:"found"`
	NotFound   int `json:"not_found"`
	HandedOver int `json:"handed_over"`
	Errors     int `json:"errors"`
}

func (c *recoverCounts) add(o recoverCounts) {
	c.Stale += o.Stale
	c.Found += o.Found
	c.NotFound += o.NotFound
	c.HandedOver += o.HandedOver
	c.Errors += o.Errors
}

// recoverOnce runs `ctdispatch recover` with every pending record counted
// as stale: the process that wrote it is known to be dead.
func (r *run) recoverOnce(ctx context.Context, addr, root string) (recoverCounts, error) {
	var c recoverCounts
	cmd := r.command(ctx, "recover", "--outbox", root, "--emulator", addr, "--stale-after", "1ns", "--json")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	b, err := cmd.Output()
	if err != nil {
		return c, fmt.Errorf("%v: %s", err, firstLine(stderr.String()))
	}
	if err := json.Unmarshal(b, &c); err != nil {
		return c, fmt.Errorf("recover output %q: %w", b, err)
	}
	return c, nil
}

// openRequests counts the requests of run whose latest record is not
// terminal (or that have no record yet): the new answers the next run is
// sure to give.
func openRequests(ctx context.Context, root, run string, n int) (int, error) {
	if _, err := os.Stat(root); errors.Is(err, fs.ErrNotExist) {
		return n, nil // nothing has run yet
	}
	t, err := readOutbox(ctx, root, run)
	if err != nil {
		return 0, err
	}
	done := 0
	for _, r := range t.latest {
		if r.Status.Terminal() {
			done++
		}
	}
	return n - done, nil
}
