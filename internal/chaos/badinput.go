package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/ctdispatch/ctdispatch/internal/durability"
	"github.com/ctdispatch/ctdispatch/outbox/parquetbox"

	"github.com/ctdispatch/ctdispatch/cloudtasks"
	"github.com/ctdispatch/ctdispatch/naming"
	"github.com/ctdispatch/ctdispatch/outbox"
)

// badCase is one bad input given to the library: the error must match is
// and name every string of want.
type badCase struct {
	name string
	call func(context.Context) error
	is   error
	want []string
}

// cliBadLine is one bad line of a --from file: stderr must report it with
// its line number and every string of want.
type cliBadLine struct {
	name string
	line map[string]any
	want []string
}

// badInput: malformed IDs, oversize payloads, timers beyond 30 days, bad
// URLs, unknown queues and damaged outbox files, through the library and
// the CLI, after a batch was accepted; each must be refused with an error
// naming the value or rule, and every accepted record must stay.
func (r *run) badInput(ctx context.Context) Result {
	accepted := batch{run: "accepted", n: r.opts.size(DefaultFaultRequests) / 10}
	cliGood := batch{run: "cli-good", n: 40}
	after := batch{run: "after-damage", n: 1}
	var problems []string
	tried := "after accepting %d requests, gave the library %d bad inputs and the CLI %d bad lines among %d good ones (malformed IDs, payloads over 1 MiB, timers beyond 30 days, non-http URLs, an unknown queue), then damaged the outbox with %d unreadable Parquet files"
	var libCases []badCase
	var cliLines []cliBadLine
	damagedPlanted := 2
	triedText := func() string {
		return fmt.Sprintf(tried, accepted.n, len(libCases), len(cliLines), cliGood.n, damagedPlanted)
	}
	fail := func(p ...string) Result { return failed(triedText(), p) }

	emu, err := startEmulator(noFaults)
	if err != nil {
		return fail(err.Error())
	}
	defer emu.Close()
	root := filepath.Join(r.dir, "bad-input")
	newDispatcher := func() (*durability.Dispatcher, error) {
		return durability.OpenDispatcher(ctx, durability.Overlapped, parquetbox.Config{Root: root, Logger: r.log}, cloudtasks.Config{
			Project: project, Location: location, Queue: queueID, EmulatorAddr: emu.Addr(), Logger: r.log,
		})
	}
	d, err := newDispatcher()
	if err != nil {
		return fail(err.Error())
	}
	defer d.Close(context.Background())
	request := func(b batch, i int) cloudtasks.DispatchRequest {
		return cloudtasks.DispatchRequest{RunID: b.run, TaskKey: b.taskKey(i),
			Identity: naming.Attempt(1),
			Task:     cloudtasks.Task{URL: targetURL, Body: []byte(b.body(i))}}
	}
	for i := range accepted.n {
		if _, err := d.Dispatch(ctx, request(accepted, i)); err != nil {
			return fail("accept: " + err.Error())
		}
	}

	// The library.
	good := request(accepted, 0).Task
	withTask := func(mod func(*cloudtasks.Task)) cloudtasks.DispatchRequest {
		req := request(batch{run: "bad", n: 1}, 0)
		mod(&req.Task)
		return req
	}
	dispatch := func(req cloudtasks.DispatchRequest) func(context.Context) error {
		return func(ctx context.Context) error { _, err := d.Dispatch(ctx, req); return err }
	}
	far := time.Now().Add(31 * 24 * time.Hour).Truncate(time.Second)
	sched := d
	libCases = []badCase{
		{"no identity", dispatch(cloudtasks.DispatchRequest{RunID: "r", TaskKey: "t", Task: good}),
			cloudtasks.ErrInvalidRequest, []string{"Identity", "must say which attempt"}},
		{"run ID with a space", dispatch(cloudtasks.DispatchRequest{RunID: "run one", TaskKey: "t", Identity: naming.Attempt(1), Task: good}),
			cloudtasks.ErrInvalidRequest, []string{"RunID", `"run one"`, "whitespace"}},
		{"empty task key", dispatch(cloudtasks.DispatchRequest{RunID: "r", TaskKey: "", Identity: naming.Attempt(1), Task: good}),
			cloudtasks.ErrInvalidRequest, []string{"TaskKey", "empty"}},
		{"unparsable internal ID", func(context.Context) error { _, err := naming.Parse("dispatch:run1::1"); return err },
			naming.ErrInvalidID, []string{`"dispatch:run1::1"`, "task_key"}},
		{"payload over 1 MiB", dispatch(withTask(func(t *cloudtasks.Task) { t.Body = bytes.Repeat([]byte("x"), cloudtasks.MaxTaskSize+1) })),
			cloudtasks.ErrInvalidRequest, []string{"Body", fmt.Sprint(cloudtasks.MaxTaskSize + 1), "at most 1000000 allowed"}},
		{"dispatch 31 days ahead", dispatch(withTask(func(t *cloudtasks.Task) { t.ScheduleTime = far })),
			cloudtasks.ErrInvalidRequest, []string{"ScheduleTime", far.UTC().Format(time.RFC3339), "30 days"}},
		{"timer 31 days ahead", func(ctx context.Context) error {
			_, err := sched.ScheduleTimer(ctx, cloudtasks.TimerRequest{Kind: naming.KindRetry, RunID: "bad", TaskKey: "t",
				Next: naming.Attempt(1), At: far, Task: cloudtasks.Task{URL: targetURL}})
			return err
		}, cloudtasks.ErrTooFar, []string{"At", far.UTC().Format(time.RFC3339), "30 days"}},
		{"ftp URL", dispatch(withTask(func(t *cloudtasks.Task) { t.URL = "ftp://files.example/x" })),
			cloudtasks.ErrInvalidRequest, []string{"URL", `"ftp://files.example/x"`, "http or https"}},
		{"relative URL", dispatch(withTask(func(t *cloudtasks.Task) { t.URL = "/work" })),
			cloudtasks.ErrInvalidRequest, []string{"URL", `"/work"`, "absolute"}},
		{"unknown queue", dispatch(withTask(func(t *cloudtasks.Task) { t.Queue = "no-such-queue" })),
			cloudtasks.ErrCreateFailed, []string{"NotFound", "queues/no-such-queue", "does not exist"}},
		{"malformed queue ID", dispatch(withTask(func(t *cloudtasks.Task) { t.Queue = "no/such" })),
			cloudtasks.ErrInvalidRequest, []string{"Queue", `"no/such"`}},
	}
	for _, c := range libCases {
		err := c.call(ctx)
		if p := judge(c.name, err, c.is, c.want); p != "" {
			problems = append(problems, "library: "+p)
		}
	}
	if err := d.Close(context.Background()); err != nil {
		return fail("close dispatcher: " + err.Error())
	}

	// The CLI: bad lines among good ones in one --from file.
	big := strings.Repeat("x", cloudtasks.MaxTaskSize+1)
	cliLines = []cliBadLine{
		{"run ID with a colon", map[string]any{"run": "run:1", "task": "t", "attempt": 1}, []string{"RunID", `"run:1"`}},
		{"payload over 1 MiB", map[string]any{"run": "bad", "task": "big", "attempt": 1, "body": big}, []string{"Body", "at most 1000000 allowed"}},
		{"dispatch 31 days ahead", map[string]any{"run": "bad", "task": "far", "attempt": 1, "schedule_time": far.UTC().Format(time.RFC3339)}, []string{"ScheduleTime", "30 days"}},
		{"ftp URL", map[string]any{"run": "bad", "task": "ftp", "attempt": 1, "url": "ftp://files.example/x"}, []string{"URL", "ftp://files.example/x", "http or https"}},
		{"unknown queue", map[string]any{"run": "bad", "task": "q", "attempt": 1, "queue": "no-such-queue"}, []string{"NotFound", "queues/no-such-queue"}},
		{"unknown field", map[string]any{"run": "bad", "task": "f", "attempt": 1, "colour": "red"}, []string{"not a request", "colour"}},
	}
	file := filepath.Join(r.dir, "bad-input.jsonl")
	badAt, err := writeMixed(file, cliGood, cliLines)
	if err != nil {
		return fail(err.Error())
	}
	cmd := r.command(ctx, dispatchArgs(emu.Addr(), root, file)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	if code := cmd.ProcessState.ExitCode(); code != 1 {
		problems = append(problems, fmt.Sprintf("CLI: exit status %d with bad lines, want 1 (%v)", code, err))
	}
	cliAcked := 0
	if err := readAcks(&stdout, func(a ack) { cliAcked++ }); err != nil {
		problems = append(problems, "CLI: "+err.Error())
	}
	if cliAcked != cliGood.n {
		problems = append(problems, fmt.Sprintf("CLI: %d good lines answered, want %d", cliAcked, cliGood.n))
	}
	for i, c := range cliLines {
		prefix := fmt.Sprintf("ctdispatch: line %d: ", badAt[i])
		var got string
		for l := range strings.Lines(stderr.String()) {
			if strings.HasPrefix(l, prefix) {
				got = strings.TrimSpace(l)
			}
		}
		if got == "" {
			problems = append(problems, fmt.Sprintf("CLI %s: no error reported for line %d", c.name, badAt[i]))
			continue
		}
		if p := judge(c.name, errors.New(got), nil, c.want); p != "" {
			problems = append(problems, "CLI: "+p)
		}
	}
	// A malformed ID given to `ctdispatch id`, and a far timer to
	// `ctdispatch timer`.
	for _, c := range []struct {
		name string
		args []string
		want []string
	}{
		{"id with a space", []string{"id", "dispatch:run 1:x:1"}, []string{`"dispatch:run 1:x:1"`, "whitespace"}},
		{"timer 31 days ahead", []string{"timer", "--emulator", emu.Addr(), "--project", project, "--location", location, "--queue", queueID,
			"--outbox", root, "--run", "bad", "--task", "t", "--attempt", "1", "--due", far.UTC().Format(time.RFC3339), "--url", targetURL},
			[]string{"At", "30 days"}},
	} {
		cmd := r.command(ctx, c.args...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		err := cmd.Run()
		if err == nil {
			problems = append(problems, fmt.Sprintf("CLI %s: accepted", c.name))
			continue
		}
		if p := judge(c.name, errors.New(strings.TrimSpace(stderr.String())), nil, c.want); p != "" {
			problems = append(problems, "CLI: "+p)
		}
	}

	// Damaged files: a truncated copy of a real table file and a file of
	// garbage, next to the good ones.
	files, err := outboxFiles(root)
	if err != nil || len(files) == 0 {
		return fail(fmt.Sprintf("no outbox file to damage (%v)", err))
	}
	src, err := os.ReadFile(files[0])
	if err != nil {
		return fail(err.Error())
	}
	dir := filepath.Dir(files[0])
	truncated, garbage := filepath.Join(dir, "damaged-truncated.parquet"), filepath.Join(dir, "damaged-garbage.parquet")
	if err := os.WriteFile(truncated, src[:len(src)/2], 0o600); err != nil {
		return fail(err.Error())
	}
	if err := os.WriteFile(garbage, []byte("PAR1 this is not a parquet file PAR1"), 0o600); err != nil {
		return fail(err.Error())
	}
	// A dispatcher still answers from the good files: a repeat is a skip,
	// a new request is created.
	d2, err := newDispatcher()
	if err != nil {
		problems = append(problems, "open dispatcher over damaged files: "+err.Error())
	} else {
		res, err := d2.Dispatch(ctx, request(accepted, accepted.n-1))
		if err != nil || res.Outcome != cloudtasks.OutcomeAlreadyExisted || !res.Skipped {
			problems = append(problems, fmt.Sprintf("repeat after damage: %+v, %v; want a skip", res, err))
		}
		res, err = d2.Dispatch(ctx, request(after, 0))
		if err != nil || res.Outcome != cloudtasks.OutcomeCreated {
			problems = append(problems, fmt.Sprintf("new request after damage: %+v, %v; want created", res, err))
		}
		if err := d2.Close(context.Background()); err != nil {
			problems = append(problems, "close dispatcher: "+err.Error())
		}
	}

	if r.opts.afterRun != nil {
		r.opts.afterRun(ScenarioBadInput, emu)
	}
	// Nothing accepted is lost; the damaged files are named, with a reason.
	problems = append(problems, checkTasks(emu, accepted, cliGood, after)...)
	damagedSeen := map[string]bool{}
	for _, b := range []batch{accepted, cliGood, after} {
		t, err := readOutbox(ctx, root, b.run)
		if err != nil {
			problems = append(problems, "read outbox: "+err.Error())
			continue
		}
		for _, dmg := range t.damaged {
			for _, p := range []string{truncated, garbage} {
				if strings.Contains(dmg, p) && strings.Contains(dmg, "not a readable Parquet file") {
					damagedSeen[p] = true
				}
			}
		}
		t.damaged = nil
		problems = append(problems, checkOutbox(t, b.ids(), rules{})...)
	}
	for _, p := range []string{truncated, garbage} {
		if !damagedSeen[p] {
			problems = append(problems, fmt.Sprintf("damaged file %s not reported with its path and reason", filepath.Base(p)))
		}
	}
	// Only the two unknown-queue requests reached the service, and they
	// are recorded failed; everything else was refused before any I/O.
	reached := map[string]bool{"dispatch:bad:t00000:1": true, "dispatch:bad:q:1": true}
	ob, err := parquetbox.Open(ctx, parquetbox.Config{Root: root, ReadOnly: true})
	if err != nil {
		problems = append(problems, "open outbox: "+err.Error())
	} else {
		recs, err := ob.Lookup(ctx, outbox.Query{RunID: "bad"})
		if err != nil {
			problems = append(problems, "lookup: "+err.Error())
		}
		for _, rec := range recs {
			if !reached[rec.ID] || rec.Status != outbox.StatusFailed || rec.ErrorCode != "NotFound" {
				problems = append(problems, fmt.Sprintf("refused request recorded: %s %s %s", rec.ID, rec.Status, rec.ErrorCode))
			}
		}
		ob.Close()
	}
	if len(problems) > 0 {
		return fail(problems...)
	}
	total := accepted.n + cliGood.n + after.n
	return Result{Passed: true, Tried: triedText(), Held: fmt.Sprintf(
		"each of the %d refusals named its field, value or rule (library errors match ErrInvalidRequest, ErrCreateFailed, ErrTooFar or ErrInvalidID; CLI lines report their line number, exit status 1); both damaged files skipped and named with path and reason; a repeat after the damage was answered from the outbox; all %d accepted records terminal and exactly %d tasks",
		len(libCases)+len(cliLines)+2, total, total)}
}

// judge checks one refusal: an error, matching is (when set), naming every
// string of want. It returns "" when all hold.
func judge(name string, err, is error, want []string) string {
	if err == nil {
		return name + ": accepted, want an error"
	}
	if is != nil && !errors.Is(err, is) {
		return fmt.Sprintf("%s: %q does not match %v", name, err, is)
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			return fmt.Sprintf("%s: %q does not name %q", name, err, w)
		}
	}
	return ""
}

// writeMixed writes b's requests with the bad lines spread among them,
// returning the line number of each bad line.
func writeMixed(path string, b batch, bad []cliBadLine) ([]int, error) {
	var buf bytes.Buffer
	at := make([]int, len(bad))
	next, line := 0, 0
	every := max(1, b.n/(len(bad)+1))
	for i := range b.n {
		if i > 0 && i%every == 0 && next < len(bad) {
			l := map[string]any{"url": targetURL}
			for k, v := range bad[next].line {
				l[k] = v
			}
			raw, _ := json.Marshal(l)
			buf.Write(raw)
			buf.WriteByte('\n')
			line++
			at[next] = line
			next++
		}
		raw, _ := json.Marshal(map[string]any{"run": b.run, "task": b.taskKey(i), "attempt": 1, "body": b.body(i)})
		buf.Write(raw)
		buf.WriteByte('\n')
		line++
	}
	for ; next < len(bad); next++ {
		raw, _ := json.Marshal(bad[next].line)
		buf.Write(raw)
		buf.WriteByte('\n')
		line++
		at[next] = line
	}
	return at, os.WriteFile(path, buf.Bytes(), 0o600)
}
