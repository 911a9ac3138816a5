package chaos

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"gocloud.dev/blob"
	"google.golang.org/api/option"
	storage "google.golang.org/api/storage/v1"

	"github.com/ctdispatch/ctdispatch/internal/gcsjson"
	"github.com/ctdispatch/ctdispatch/internal/pause"
	"github.com/ctdispatch/ctdispatch/outbox"
	"github.com/ctdispatch/ctdispatch/outbox/parquetbox"
)

// The busy day's cast and pace.
const (
	busyWriters    = 3
	busyCompactors = 2
	// busyPublish is the writers' --publish-interval: short, so the day
	// fills its partition with many small files for the compactors.
	busyPublish = "1s"
	// busyLeaseTTL is the compactors' --lease-ttl: a killed compactor's
	// lease frees its partition within seconds, not 10 minutes.
	busyLeaseTTL = 3 * time.Second
	// busyBucket is the bucket created on Options.GCSEmulator.
	busyBucket = "ctdispatch-chaos"
)

// busyRoot is one outbox root the busy day runs on.
type busyRoot struct {
	name string // "local directory" or "bucket"
	root string // a directory or a gs:// URL
	// logDir is the writers' --log-dir (bucket roots only).
	logDir string
	// env is what every child needs to reach the root.
	env []string
	// open opens the root read-only in this process.
	open func(ctx context.Context) (*parquetbox.Outbox, error)
}

// busyStats is what one root's day did.
type busyStats struct {
	writerRuns, writerKills, killsDuringCompaction int
	compactions, compactorKills, busySkips         int
	steppedBack                                    int
	compactedBytes, tableBytes                     int64
	tableFiles                                     int
	seconds                                        float64
}

// busyDay: several writers and two compactors share one root through a
// day of SIGKILLs, first on a local directory, then on a bucket
// (fake-gcs-server, when Options.GCSEmulator names one). After a final
// compaction every answered ID has exactly one row.
func (r *run) busyDay(ctx context.Context) Result {
	n, day := r.opts.size(DefaultBusyDayRequests), r.opts.dayLength()
	tried := fmt.Sprintf("on each root, %d long-running writer processes were fed %d requests at a steady pace (publishing to Parquet every %s) while 2 processes compacted every 1-3 s, through a day of %s with SIGKILLs of writers and compactors; then recover, a last pass over every request and a final compaction",
		busyWriters, n, busyPublish, day)
	fail := func(problems ...string) Result { return failed(tried, problems) }
	roots := []busyRoot{{name: "local directory", root: filepath.Join(r.dir, "busy-day")}}
	// Made up front: compactors may start before the first writer.
	if err := os.MkdirAll(roots[0].root, 0o700); err != nil {
		return fail(err.Error())
	}
	roots[0].open = func(ctx context.Context) (*parquetbox.Outbox, error) {
		return parquetbox.Open(ctx, parquetbox.Config{Root: roots[0].root, ReadOnly: true, RefreshInterval: -1})
	}
	if host := r.opts.GCSEmulator; host != "" {
		br, err := bucketRoot(ctx, host, filepath.Join(r.dir, "busy-day-logs"))
		if err != nil {
			return fail(err.Error())
		}
		roots = append(roots, br)
	}
	var held []string
	for k, root := range roots {
		b := batch{run: fmt.Sprintf("busy%d", k), n: n}
		st, problems := r.busyDayOn(ctx, root, b, day, r.rng(fmt.Sprintf("%s/%d", ScenarioBusyDay, k)))
		if len(problems) > 0 {
			for i := range problems {
				problems[i] = root.name + ": " + problems[i]
			}
			return fail(problems...)
		}
		held = append(held, fmt.Sprintf("%s: %d writer runs, %d writer kills (%d during a compaction), %d compactor kills at their commit, %d compactions (%d partitions found busy, %d compactors stepped back); compactions wrote %d bytes beside a table of %d bytes in %d files (%.1fx); exactly %d tasks and one terminal row per answered ID (%.0f s)",
			root.name, st.writerRuns, st.writerKills, st.killsDuringCompaction, st.compactorKills, st.compactions, st.busySkips, st.steppedBack,
			st.compactedBytes, st.tableBytes, st.tableFiles, float64(st.compactedBytes)/float64(max(st.tableBytes, 1)), n, st.seconds))
	}
	if r.opts.GCSEmulator == "" {
		held = append(held, "bucket: not run (no Options.GCSEmulator; see docs/chaos.md)")
	}
	return Result{Passed: true, Tried: tried, Held: strings.Join(held, "; ")}
}

// bucketRoot makes a bucket on the Cloud Storage emulator at host and
// returns it as a root the children reach through STORAGE_EMULATOR_HOST.
func bucketRoot(ctx context.Context, host, logDir string) (busyRoot, error) {
	endpoint := option.WithEndpoint("http://" + host + "/storage/v1/")
	svc, err := storage.NewService(ctx, option.WithoutAuthentication(), endpoint)
	if err != nil {
		return busyRoot{}, fmt.Errorf("cloud storage emulator %s: %w", host, err)
	}
	_, err = svc.Buckets.Insert("chaos", &storage.Bucket{Name: busyBucket}).Context(ctx).Do()
	if err != nil && !strings.Contains(err.Error(), "409") {
		return busyRoot{}, fmt.Errorf("create bucket %s on %s: %w", busyBucket, host, err)
	}
	prefix := fmt.Sprintf("busy-day-%d/", time.Now().UnixNano())
	return busyRoot{
		name:   "bucket",
		root:   "gs://" + busyBucket + "?prefix=" + prefix,
		logDir: logDir,
		env:    []string{gcsjson.EmulatorEnv + "=" + host},
		open: func(ctx context.Context) (*parquetbox.Outbox, error) {
			bkt, err := gcsjson.OpenBucket(ctx, busyBucket, option.WithoutAuthentication(), endpoint)
			if err != nil {
				return nil, err
			}
			return parquetbox.Open(ctx, parquetbox.Config{Bucket: blob.PrefixedBucket(bkt, prefix), ReadOnly: true, RefreshInterval: -1})
		},
	}, nil
}

// busyDayOn runs the day on one root and checks the result.
func (r *run) busyDayOn(ctx context.Context, root busyRoot, b batch, day time.Duration, rng *rand.Rand) (busyStats, []string) {
	var st busyStats
	start := time.Now()
	emu, err := startEmulator(noFaults)
	if err != nil {
		return st, []string{err.Error()}
	}
	defer emu.Close()
	addr := emu.Addr()
	child := func(ctx context.Context, args ...string) *exec.Cmd {
		cmd := r.command(ctx, args...)
		cmd.Env = append(cmd.Env, root.env...)
		return cmd
	}
	writerArgs := func(file string) []string {
		args := append(dispatchArgs(addr, root.root, file), "--durability", "strict", "--publish-interval", busyPublish)
		if root.logDir != "" {
			args = append(args, "--log-dir", root.logDir)
		}
		return args
	}
	compactArgs := []string{"compact", "--outbox", root.root, "--lease-ttl", busyLeaseTTL.String()}

	// Seeds for each process slot, drawn up front so the plan does not
	// depend on how the goroutines interleave.
	seeds := make([]uint64, busyWriters+busyCompactors)
	for i := range seeds {
		seeds[i] = rng.Uint64()
	}
	dayCtx, endDay := context.WithTimeout(ctx, day)
	defer endDay()
	var compacting atomic.Int32
	var mu sync.Mutex
	var problems []string
	problem := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		problems = append(problems, fmt.Sprintf(format, args...))
	}
	var wg sync.WaitGroup
	// Each writer is a long-running `dispatch --from -` fed its share of
	// the batch at a steady pace through the day, as a busy service would
	// be; a killed writer is restarted and fed again from its first
	// request it had not answered.
	pace := day / time.Duration(max(1, b.n/busyWriters))
	for w := range busyWriters {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(seeds[w], 1))
			var share []int
			for i := w; i < b.n; i += busyWriters {
				share = append(share, i)
			}
			for pos := 0; pos < len(share) && dayCtx.Err() == nil; {
				// Three runs in four are killed on an answer still to
				// come: after 1 to ~4 s worth of answers at the day's
				// pace, and always before the run's last request, so the
				// kill lands on a process with work in hand however fast
				// the machine is.
				killAt := 0
				if left := len(share) - pos; rng.IntN(4) > 0 && left > 1 {
					perSecond := max(1, int(time.Second/pace))
					killAt = 1 + rng.IntN(min(left-1, 4*perSecond))
				}
				answered, killed, err := r.feedWriter(ctx, dayCtx, child(ctx, writerArgs("-")...), b, share[pos:], pace, killAt, func() {
					mu.Lock()
					defer mu.Unlock()
					st.writerKills++
					if compacting.Load() > 0 {
						st.killsDuringCompaction++
					}
				})
				pos += answered
				mu.Lock()
				st.writerRuns++
				mu.Unlock()
				if err != nil && !killed {
					problem("writer %d: %v", w, err)
					return
				}
			}
		})
	}
	var compactOut []string
	for c := range busyCompactors {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(seeds[busyWriters+c], 2))
			for dayCtx.Err() == nil {
				// One run in two is armed to stop itself at its commit
				// (after its last look at its lease, before anything it
				// wrote is visible) and is SIGKILLed there: the kill is
				// keyed to that point, not to a delay, so it lands
				// wherever the machine's speed puts it. A run with
				// nothing to fold never reaches the point and is not
				// counted as killed. A compactor that finds its unit
				// taken, or its lease run out (starved of CPU past its
				// TTL), steps back with exit status 4: counted, not a
				// failure.
				cmd := child(ctx, compactArgs...)
				if rng.IntN(2) == 0 {
					cmd.Env = append(cmd.Env, pause.EnvVar+"="+pause.CompactCommit)
				}
				var out bytes.Buffer
				cmd.Stdout = &out
				compacting.Add(1)
				killed, steppedBack, err := runKilledAtPause(ctx, cmd, func() {
					mu.Lock()
					defer mu.Unlock()
					st.compactorKills++
					st.killsDuringCompaction++
				})
				compacting.Add(-1)
				mu.Lock()
				if !killed {
					st.compactions++
					compactOut = append(compactOut, out.String())
				}
				if steppedBack {
					st.steppedBack++
				}
				mu.Unlock()
				if err != nil && !killed {
					problem("compactor %d: %v", c, err)
					return
				}
				select {
				case <-dayCtx.Done():
				case <-time.After(time.Second + time.Duration(rng.Int64N(int64(2*time.Second)))):
				}
			}
		})
	}
	wg.Wait()
	if len(problems) > 0 {
		return st, problems
	}

	// The end of the day: pending records of killed writers resolved, a
	// last pass answers every request, and a final compaction (retried
	// while a killed compactor's lease lasts) folds the day.
	recoverArgs := []string{"recover", "--outbox", root.root, "--emulator", addr, "--stale-after", "1ns", "--json"}
	if root.logDir != "" {
		recoverArgs = append(recoverArgs, "--log-dir", root.logDir)
	}
	if out, err := child(ctx, recoverArgs...).CombinedOutput(); err != nil {
		return st, []string{fmt.Sprintf("recover: %v: %s", err, firstLine(string(out)))}
	}
	file := filepath.Join(r.dir, b.run+"-last.jsonl")
	if err := b.writeFile(file, nil); err != nil {
		return st, []string{err.Error()}
	}
	cmd := child(ctx, writerArgs(file)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err == nil {
		err = cmd.Start()
	}
	if err != nil {
		return st, []string{"last pass: " + err.Error()}
	}
	answered := map[string]bool{}
	rerr := readAcks(stdout, func(a ack) { answered[a.DispatchID] = true })
	if err := errors.Join(cmd.Wait(), rerr); err != nil {
		return st, []string{fmt.Sprintf("last pass: %v: %s", err, firstLine(stderr.String()))}
	}
	if len(answered) != b.n {
		problems = append(problems, fmt.Sprintf("the last pass answered %d of %d requests", len(answered), b.n))
	}
	// The final compaction folds every unit whole (--full), so each
	// answered ID has exactly one row; the day's compactions merged runs
	// of similar size.
	// No other compactor runs now: a long lease keeps a slow machine's
	// final fold from running out of it.
	finalArgs := []string{"compact", "--outbox", root.root, "--lease-ttl", "2m", "--full"}
	for try := 0; ; try++ {
		out, err := child(ctx, finalArgs...).Output()
		var ee *exec.ExitError
		lost := errors.As(err, &ee) && ee.ExitCode() == exitSteppedBack
		if err != nil && !lost {
			return st, append(problems, fmt.Sprintf("final compaction: %v: %s", err, firstLine(string(out))))
		}
		compactOut = append(compactOut, string(out))
		st.compactions++
		if lost {
			st.steppedBack++
		} else if !strings.Contains(string(out), "busy, skipped") {
			break
		}
		if try == 10 {
			return st, append(problems, "final compaction: a partition stayed busy: "+firstLine(string(out)))
		}
		select {
		case <-ctx.Done():
			return st, append(problems, ctx.Err().Error())
		case <-time.After(busyLeaseTTL):
		}
	}
	for _, out := range compactOut {
		st.busySkips += strings.Count(out, "busy, skipped")
		st.compactedBytes += compactedBytes(out)
	}

	if r.opts.afterRun != nil {
		r.opts.afterRun(ScenarioBusyDay, emu)
	}
	problems = append(problems, checkTasks(emu, b)...)
	ob, err := root.open(ctx)
	if err != nil {
		return st, append(problems, "open outbox: "+err.Error())
	}
	defer ob.Close()
	rows, err := ob.Lookup(ctx, outbox.Query{Table: outbox.TableDispatch, RunID: b.run, History: true})
	if err != nil {
		return st, append(problems, "read outbox: "+err.Error())
	}
	perID := map[string]int{}
	notTerminal := 0
	for _, rec := range rows {
		perID[rec.ID]++
		if rec.Status != outbox.StatusCreated && rec.Status != outbox.StatusAlreadyExisted {
			notTerminal++
		}
	}
	notOne, example := 0, ""
	for id := range answered {
		if perID[id] != 1 {
			notOne++
			example = fmt.Sprintf("%s has %d", id, perID[id])
		}
	}
	if notOne > 0 {
		problems = append(problems, fmt.Sprintf("%d answered IDs do not have exactly one row after the final compaction (e.g. %s)", notOne, example))
	}
	if len(perID) != b.n {
		problems = append(problems, fmt.Sprintf("%d IDs in the outbox, want %d", len(perID), b.n))
	}
	if notTerminal > 0 {
		problems = append(problems, fmt.Sprintf("%d rows are not terminal", notTerminal))
	}
	stats, err := ob.Stats(ctx)
	if err != nil {
		return st, append(problems, "stats: "+err.Error())
	}
	for _, ts := range stats {
		st.tableBytes += ts.Bytes
		st.tableFiles += ts.Files
		for _, fe := range ts.Skipped {
			problems = append(problems, "skipped: "+fe.Error())
		}
	}
	st.seconds = time.Since(start).Seconds()
	return st, problems
}

// feedWriter runs one writer process, writing the requests of todo to
// its standard input one per pace until they run out or the day ends
// (then its input closes and it finishes what it took), and SIGKILLs it
// on its killAt-th answer (never when 0). It returns how many requests the
// process answered (it answers in input order), and whether the kill
// landed.
func (r *run) feedWriter(ctx, dayCtx context.Context, cmd *exec.Cmd, b batch, todo []int, pace time.Duration, killAt int, onKill func()) (answered int, killed bool, err error) {
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return 0, false, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return 0, false, err
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		return 0, false, err
	}
	fed := make(chan struct{})
	go func() {
		defer close(fed)
		defer stdin.Close()
		tick := time.NewTicker(pace)
		defer tick.Stop()
		for _, i := range todo {
			line, _ := json.Marshal(map[string]any{"run": b.run, "task": b.taskKey(i), "attempt": 1, "body": b.body(i)})
			if _, err := stdin.Write(append(line, '\n')); err != nil {
				return // the process died
			}
			select {
			case <-tick.C:
			case <-dayCtx.Done():
				return
			}
		}
	}()
	rerr := readAcks(stdout, func(ack) {
		answered++
		if answered == killAt {
			_ = cmd.Process.Signal(syscall.SIGKILL)
		}
	})
	err = cmd.Wait()
	<-fed
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL && ctx.Err() == nil {
			onKill()
			return answered, true, nil
		}
	}
	if err = errors.Join(err, rerr); err != nil {
		return answered, false, fmt.Errorf("%v: %s", err, firstLine(stderr.String()))
	}
	return answered, false, nil
}

// tableTotal matches compact's total line of a table: "<table>: N files,
// N rows, N bytes -> N files, N rows, N bytes; …".
var tableTotal = regexp.MustCompile(`(?m)^(?:dispatch_outbox|timers): \d+ files, \d+ rows, \d+ bytes -> \d+ files, \d+ rows, (\d+) bytes;`)

// compactedBytes sums the bytes one compact run's output says it wrote.
func compactedBytes(out string) int64 {
	var n int64
	for _, m := range tableTotal.FindAllStringSubmatch(out, -1) {
		b, _ := strconv.ParseInt(m[1], 10, 64)
		n += b
	}
	return n
}

// exitSteppedBack is the exit status of a compact that stepped back from
// a unit it lost (see ctdispatch compact --help).
const exitSteppedBack = 4

// runKilledAtPause runs cmd to its end; if it stops itself at a pause
// point (it says so on stderr), it is SIGKILLed there and onKill is
// called. killed reports that the kill landed; steppedBack that the
// process exited with exitSteppedBack.
func runKilledAtPause(ctx context.Context, cmd *exec.Cmd, onKill func()) (killed, steppedBack bool, err error) {
	if cmd.Stdout == nil {
		cmd.Stdout = io.Discard
	}
	stderrPipe, err := cmd.StderrPipe()
	if err != nil {
		return false, false, err
	}
	if err := cmd.Start(); err != nil {
		return false, false, err
	}
	var stderr bytes.Buffer
	sc := bufio.NewScanner(stderrPipe)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "pause: stopped at ") {
			_ = cmd.Process.Signal(syscall.SIGKILL)
			continue
		}
		stderr.WriteString(line + "\n")
	}
	err = cmd.Wait()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL && ctx.Err() == nil {
			onKill()
			return true, false, nil
		}
		if ee.ExitCode() == exitSteppedBack {
			return false, true, nil
		}
	}
	if err != nil {
		return false, false, fmt.Errorf("%v: %s", err, firstLine(stderr.String()))
	}
	return false, false, nil
}
