package chaos

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
)

// dispatchArgs are the arguments of `ctdispatch dispatch` for a batch file.
func dispatchArgs(addr, root, file string) []string {
	return []string{"dispatch", "--emulator", addr, "--project", project, "--location", location, "--queue", queueID,
		"--outbox", root, "--url", targetURL, "--from", file, "--json", "--concurrency", "32"}
}

// command builds a child ctdispatch process. It gets no emulator variable
// of its own: every child is pointed at the suite's emulator by flag.
func (r *run) command(ctx context.Context, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, r.opts.Binary, args...)
	cmd.Env = append(cmd.Environ(), emulatorHostEnv+"=")
	return cmd
}

const emulatorHostEnv = "CLOUD_TASKS_EMULATOR_HOST"

// herd: several ctdispatch processes with their own processor UUIDs
// dispatch the same batch at the same time, on one outbox root and one
// emulator.
func (r *run) herd(ctx context.Context) Result {
	n, procs := r.opts.size(DefaultHerdRequests), DefaultHerdProcesses
	b := batch{run: "herd", n: n}
	tried := fmt.Sprintf("%d processes each dispatched the same %d distinct requests on one outbox and one emulator", procs, n)
	fail := func(problems ...string) Result { return failed(tried, problems) }

	emu, err := startEmulator(noFaults)
	if err != nil {
		return fail(err.Error())
	}
	defer emu.Close()
	root := filepath.Join(r.dir, "herd")
	file := filepath.Join(r.dir, "herd.jsonl")
	if err := b.writeFile(file, nil); err != nil {
		return fail(err.Error())
	}

	outs := r.runDispatchers(ctx, emu.Addr(), root, file, procs)
	if r.opts.afterRun != nil {
		r.opts.afterRun(ScenarioHerd, emu)
	}

	var problems []string
	created := map[string]int{}
	outcomes := map[string]int{}
	answered := 0
	for _, o := range outs {
		if o.err != nil {
			problems = append(problems, o.err.Error())
		}
		for id, c := range o.created {
			created[id] += c
		}
		for k, c := range o.outcomes {
			outcomes[k] += c
			answered += c
		}
	}
	if answered != procs*n {
		problems = append(problems, fmt.Sprintf("%d requests answered, want %d", answered, procs*n))
	}
	want := b.ids()
	notOnce := 0
	for id := range want {
		if created[id] != 1 {
			notOnce++
		}
	}
	if notOnce > 0 {
		problems = append(problems, fmt.Sprintf("%d IDs were not answered \"created\" exactly once across the processes", notOnce))
	}
	problems = append(problems, checkTasks(emu, b)...)
	t, err := readOutbox(ctx, root, b.run)
	if err != nil {
		problems = append(problems, "read outbox: "+err.Error())
	} else {
		problems = append(problems, checkOutbox(t, want, rules{oneCreated: true})...)
		if len(t.procs) != procs {
			problems = append(problems, fmt.Sprintf("records name %d processors, want %d", len(t.procs), procs))
		}
	}
	if len(problems) > 0 {
		return fail(problems...)
	}
	return Result{Passed: true, Tried: tried, Held: fmt.Sprintf(
		"exactly %d tasks; %d IDs each answered \"created\" once (%d created, %d already_existed across processes); every latest outbox record terminal, one \"created\" record per ID, %d processor UUIDs, no damaged file",
		n, n, outcomes["created"], outcomes["already_existed"], len(t.procs))}
}

// childOut is what one dispatching child answered.
type childOut struct {
	created  map[string]int // "created" answers per ID
	outcomes map[string]int // answers per outcome
	stderr   string
	err      error
}

// runDispatchers runs procs `ctdispatch dispatch` children over the same
// file at once and collects their answers.
func (r *run) runDispatchers(ctx context.Context, addr, root, file string, procs int) []childOut {
	outs := make([]childOut, procs)
	var wg sync.WaitGroup
	for p := range procs {
		wg.Go(func() {
			o := childOut{created: map[string]int{}, outcomes: map[string]int{}}
			defer func() { outs[p] = o }()
			cmd := r.command(ctx, dispatchArgs(addr, root, file)...)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			stdout, err := cmd.StdoutPipe()
			if err != nil {
				o.err = err
				return
			}
			if err := cmd.Start(); err != nil {
				o.err = err
				return
			}
			rerr := readAcks(stdout, func(a ack) {
				o.outcomes[a.Outcome]++
				if a.Outcome == "created" {
					o.created[a.DispatchID]++
				}
			})
			err = cmd.Wait()
			o.stderr = stderr.String()
			if err != nil {
				o.err = fmt.Errorf("process %d: %v: %s", p+1, err, firstLine(o.stderr))
			} else if rerr != nil {
				o.err = fmt.Errorf("process %d: %v", p+1, rerr)
			}
		})
	}
	wg.Wait()
	return outs
}

func firstLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}
