package chaos

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/ctdispatch/ctdispatch/outbox/parquetbox"

	"github.com/ctdispatch/ctdispatch/cloudtasks/emulator"
	"github.com/ctdispatch/ctdispatch/naming"
	"github.com/ctdispatch/ctdispatch/outbox"
)

// startEmulator starts an in-process emulator on loopback with the suite's
// queue. It stores tasks and never delivers them, so the number of tasks
// is exactly the number created.
func startEmulator(faults emulator.Faults) (*emulator.Server, error) {
	emu, err := emulator.New(emulator.Config{
		Queues:          []emulator.QueueConfig{{Name: queuePath}},
		DisableDelivery: true,
		Faults:          faults,
	})
	if err != nil {
		return nil, fmt.Errorf("start emulator: %w", err)
	}
	return emu, nil
}

// batch is a set of distinct requests of one run: task keys t00000… with
// attempt 1.
type batch struct {
	run string
	n   int
}

func (b batch) taskKey(i int) string { return fmt.Sprintf("t%05d", i) }

// id returns the internal ID of request i.
func (b batch) id(i int) naming.ID {
	id, err := naming.NewDispatch(b.run, b.taskKey(i), naming.Attempt(1))
	if err != nil {
		panic(fmt.Sprintf("chaos: batch ID: %v", err)) // the keys are built valid
	}
	return id
}

func (b batch) body(i int) string { return fmt.Sprintf(`{"run":%q,"task":%d}`, b.run, i) }

// ids returns the internal IDs of the batch.
func (b batch) ids() map[string]bool {
	out := make(map[string]bool, b.n)
	for i := range b.n {
		out[b.id(i).String()] = true
	}
	return out
}

// writeFile writes the batch as a --from JSONL file, in the order perm
// gives (nil: in order).
func (b batch) writeFile(path string, perm []int) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	for k := range b.n {
		i := k
		if perm != nil {
			i = perm[k]
		}
		line, _ := json.Marshal(map[string]any{"run": b.run, "task": b.taskKey(i), "attempt": 1, "body": b.body(i)})
		w.Write(line)
		w.WriteByte('\n')
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// ack is one line of `ctdispatch dispatch --json` output: a request the
// child acknowledged.
type ack struct {
	DispatchID string `json:"dispatch_id"`
	TaskName   string `json:"task_name"`
	Outcome    string `json:"outcome"`
	Skipped    bool   `json:"skipped"`
}

// readJSONLines reads complete JSON lines from r, decoding each into a T
// and calling fn with it; a last line cut short (the writer was killed) is
// ignored.
func readJSONLines[T any](r io.Reader, fn func(T)) error {
	br := bufio.NewReaderSize(r, 64<<10)
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			if err == io.EOF {
				return nil
			}
			return err
		}
		var v T
		if jerr := json.Unmarshal([]byte(line), &v); jerr != nil {
			return fmt.Errorf("child output %q: %w", strings.TrimSpace(line), jerr)
		}
		fn(v)
	}
}

// readAcks reads a child's answers (see readJSONLines).
func readAcks(r io.Reader, fn func(ack)) error { return readJSONLines(r, fn) }

// tally is what the outbox holds for one run.
type tally struct {
	ids      int            // distinct IDs
	created  map[string]int // "created" records per ID
	latest   map[string]outbox.Record
	byStatus map[outbox.Status]int // latest status counts
	procs    map[string]bool       // processors that wrote records
	damaged  []string              // skipped files, with reasons
}

// readOutbox opens root read-only and collects every record of run.
func readOutbox(ctx context.Context, root, run string) (tally, error) {
	t := tally{created: map[string]int{}, latest: map[string]outbox.Record{}, byStatus: map[outbox.Status]int{}, procs: map[string]bool{}}
	ob, err := parquetbox.Open(ctx, parquetbox.Config{Root: root, ReadOnly: true, RefreshInterval: -1})
	if err != nil {
		return t, err
	}
	defer ob.Close()
	recs, err := ob.Lookup(ctx, outbox.Query{Table: outbox.TableDispatch, RunID: run, History: true})
	if err != nil {
		return t, err
	}
	// Oldest first per ID: the last one seen is the latest.
	for _, r := range recs {
		if r.Status == outbox.StatusCreated {
			t.created[r.ID]++
		}
		t.latest[r.ID] = r
		t.procs[r.ProcessorUUID] = true
	}
	for _, r := range t.latest {
		t.byStatus[r.Status]++
	}
	t.ids = len(t.latest)
	stats, err := ob.Stats(ctx)
	if err != nil {
		return t, err
	}
	seen := map[string]bool{}
	for _, s := range stats {
		for _, fe := range s.Skipped {
			if !seen[fe.Path] {
				seen[fe.Path] = true
				t.damaged = append(t.damaged, fe.Error())
			}
		}
	}
	for _, fe := range ob.Damaged() {
		if !seen[fe.Path] {
			seen[fe.Path] = true
			t.damaged = append(t.damaged, fe.Error())
		}
	}
	sort.Strings(t.damaged)
	return t, nil
}

// rules tune checkOutbox.
type rules struct {
	// oneCreated requires exactly one "created" record per ID (otherwise
	// at most one).
	oneCreated bool
	// othersAllowed accepts recorded IDs outside want.
	othersAllowed bool
}

// checkOutbox lists what breaks the rules for want (IDs of the run):
// every ID recorded, every latest state terminal (created or
// already_existed), at most one "created" record per ID, no ID outside
// want, no damaged file.
func checkOutbox(t tally, want map[string]bool, rl rules) []string {
	oneCreated := rl.oneCreated
	var problems []string
	missing, notTerminal, extra, badCreated := 0, 0, 0, 0
	var exMissing, exNotTerminal, exCreated string
	for id := range want {
		r, ok := t.latest[id]
		switch {
		case !ok:
			missing++
			exMissing = id
		case r.Status != outbox.StatusCreated && r.Status != outbox.StatusAlreadyExisted:
			notTerminal++
			exNotTerminal = fmt.Sprintf("%s is %s", id, r.Status)
		}
		if n := t.created[id]; n > 1 || (oneCreated && n != 1) {
			badCreated++
			exCreated = fmt.Sprintf("%s has %d", id, n)
		}
	}
	for id := range t.latest {
		if !want[id] {
			extra++
		}
	}
	if missing > 0 {
		problems = append(problems, fmt.Sprintf("%d IDs have no outbox record (e.g. %s)", missing, exMissing))
	}
	if notTerminal > 0 {
		problems = append(problems, fmt.Sprintf("%d IDs end in a non-terminal state (e.g. %s)", notTerminal, exNotTerminal))
	}
	if badCreated > 0 {
		rule := "more than one"
		if oneCreated {
			rule = "not exactly one"
		}
		problems = append(problems, fmt.Sprintf("%d IDs have %s \"created\" record (e.g. %s)", badCreated, rule, exCreated))
	}
	if extra > 0 && !rl.othersAllowed {
		problems = append(problems, fmt.Sprintf("%d outbox IDs were never requested", extra))
	}
	if len(t.damaged) > 0 {
		problems = append(problems, fmt.Sprintf("%d unreadable outbox files (%s)", len(t.damaged), t.damaged[0]))
	}
	return problems
}

// checkTasks lists what breaks "exactly one task per requested ID and no
// other task" in the emulator's queue.
func checkTasks(emu *emulator.Server, batches ...batch) []string {
	want := map[string]bool{}
	for _, b := range batches {
		for i := range b.n {
			want[b.id(i).TaskName(queuePath)] = true
		}
	}
	tasks := emu.Tasks(queuePath)
	seen := make(map[string]int, len(tasks))
	extra := 0
	for _, t := range tasks {
		seen[t.GetName()]++
		if !want[t.GetName()] {
			extra++
		}
	}
	var problems []string
	if len(tasks) != len(want) {
		problems = append(problems, fmt.Sprintf("%d tasks in the queue, want %d", len(tasks), len(want)))
	}
	missing := 0
	for name := range want {
		if seen[name] == 0 {
			missing++
		}
	}
	if missing > 0 {
		problems = append(problems, fmt.Sprintf("%d requested tasks do not exist", missing))
	}
	if extra > 0 {
		problems = append(problems, fmt.Sprintf("%d tasks that no request names", extra))
	}
	if n := emu.TaskCount(); n != len(tasks) {
		problems = append(problems, fmt.Sprintf("%d tasks outside the queue", n-len(tasks)))
	}
	return problems
}

// outboxFiles lists the Parquet files of the dispatch table, in its
// partitions (created_date=…/).
func outboxFiles(root string) ([]string, error) {
	return filepath.Glob(filepath.Join(root, string(outbox.TableDispatch), "*", "*.parquet"))
}

// settled runs the planted-fault hook, then lists what breaks "one task per
// ID of b" in the emulator and the rules in the outbox at root.
func (r *run) settled(ctx context.Context, scenario string, emu *emulator.Server, root string, b batch, rl rules) []string {
	if r.opts.afterRun != nil {
		r.opts.afterRun(scenario, emu)
	}
	problems := checkTasks(emu, b)
	t, err := readOutbox(ctx, root, b.run)
	if err != nil {
		return append(problems, "read outbox: "+err.Error())
	}
	return append(problems, checkOutbox(t, b.ids(), rl)...)
}
