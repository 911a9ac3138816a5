package chaos

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// How the disk-full scenario is shaped.
const (
	// DefaultDiskFullRequests is the batch dispatched onto the full disk.
	DefaultDiskFullRequests = 2_000
	// diskSize is the small filesystem the outbox lives on, and diskRoom
	// what is left free on it when the batch starts: room for a few
	// hundred records, so the disk fills in the middle of the run.
	diskSize = 2 << 20
	diskRoom = 160 << 10
	// diskGrown is the size the filesystem is given back, so the records
	// and their Parquet files fit.
	diskGrown = 32 << 20
	// diskFullConcurrency matches dispatchArgs: at most this many calls
	// are in flight when the disk fills.
	diskFullConcurrency = 32
)

// errNoSmallDisk says the machine lets the suite make no small filesystem.
var errNoSmallDisk = errors.New("no small filesystem can be mounted here")

// diskFull: the outbox lives on a 2 MiB tmpfs that fills while a process
// dispatches a batch. The process must stop with a clear error instead of
// creating tasks it cannot record: tasks without any record may only be
// the calls in flight when the disk filled. Once space returns, a new run
// of the same batch finishes every request, one task each, nothing lost.
func (r *run) diskFull(ctx context.Context) Result {
	n := r.opts.size(DefaultDiskFullRequests)
	b := batch{run: "disk-full", n: n}
	tried := fmt.Sprintf("dispatched %d requests onto an outbox on a %d KiB tmpfs with %d KiB free, then again once space returned", n, diskSize>>10, diskRoom>>10)
	fail := func(problems ...string) Result { return failed(tried, problems) }

	mnt := filepath.Join(r.dir, "disk-full")
	if err := os.MkdirAll(mnt, 0o755); err != nil {
		return fail(err.Error())
	}
	disk, err := mountSmallDisk(mnt, diskSize)
	if errors.Is(err, errNoSmallDisk) {
		return Result{Skipped: true, Tried: tried, Held: "skipped: " + err.Error()}
	}
	if err != nil {
		return fail(err.Error())
	}
	defer disk.unmount()
	root := filepath.Join(mnt, "outbox")
	filler := filepath.Join(mnt, "filler")
	if err := fillDisk(mnt, filler, diskRoom); err != nil {
		return fail("fill the disk: " + err.Error())
	}
	file := filepath.Join(r.dir, "disk-full.jsonl")
	if err := b.writeFile(file, nil); err != nil {
		return fail(err.Error())
	}
	emu, err := startEmulator(noFaults)
	if err != nil {
		return fail(err.Error())
	}
	defer emu.Close()

	var problems []string
	runCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	full := r.runDispatchers(runCtx, emu.Addr(), root, file, 1)[0]
	timedOut := errors.Is(runCtx.Err(), context.DeadlineExceeded)
	cancel()
	if timedOut {
		problems = append(problems, "the run on the full disk did not end within 2 minutes")
	}
	if full.err == nil {
		problems = append(problems, "the run on the full disk exited 0")
	} else if !strings.Contains(full.stderr, "no space left on device") {
		problems = append(problems, "the run on the full disk did not say the disk is full: "+firstLine(full.stderr))
	}
	if strings.Contains(full.stderr, "panic:") {
		problems = append(problems, "the run on the full disk panicked: "+firstLine(full.stderr[strings.Index(full.stderr, "panic:"):]))
	}
	answeredFull := 0
	for _, c := range full.outcomes {
		answeredFull += c
	}
	tasksFull := len(emu.Tasks(queuePath))

	// What the full disk kept: every answered request recorded, and no
	// more unrecorded tasks than calls that were in flight.
	t, err := readOutbox(ctx, root, b.run)
	if err != nil {
		problems = append(problems, "read the outbox on the full disk: "+err.Error())
	} else {
		exists := map[string]bool{}
		for _, task := range emu.Tasks(queuePath) {
			exists[task.GetName()] = true
		}
		unrecorded := 0
		for i := range n {
			id := b.id(i)
			if _, ok := t.latest[id.String()]; !ok && exists[id.TaskName(queuePath)] {
				unrecorded++
			}
		}
		if unrecorded > diskFullConcurrency {
			problems = append(problems, fmt.Sprintf("%d tasks were created with no record at all, more than the %d calls in flight", unrecorded, diskFullConcurrency))
		}
		if len(t.latest) < answeredFull {
			problems = append(problems, fmt.Sprintf("%d requests were answered but only %d IDs are recorded", answeredFull, len(t.latest)))
		}
	}

	// Space returns: the same batch again, to the end.
	if err := os.Remove(filler); err != nil {
		return fail(append(problems, "free the disk: "+err.Error())...)
	}
	if err := disk.grow(diskGrown); err != nil {
		return fail(append(problems, "grow the disk: "+err.Error())...)
	}
	again := r.runDispatchers(ctx, emu.Addr(), root, file, 1)[0]
	if again.err != nil {
		problems = append(problems, "the run after space returned: "+again.err.Error())
	}
	answered := 0
	for _, c := range again.outcomes {
		answered += c
	}
	if answered != n {
		problems = append(problems, fmt.Sprintf("the run after space returned answered %d of %d requests", answered, n))
	}
	problems = append(problems, r.settled(ctx, ScenarioDiskFull, emu, root, b, rules{})...)
	if len(problems) > 0 {
		return fail(problems...)
	}
	return Result{Passed: true, Tried: tried, Held: fmt.Sprintf(
		"the full-disk run stopped with a no-space error after %d answers and %d tasks, every answer recorded and no task beyond the calls in flight unrecorded; after space returned, exactly %d tasks and every ID terminal with at most one \"created\" record, no damaged file",
		answeredFull, tasksFull, n)}
}

// fillDisk writes path until the filesystem holding dir has about room
// bytes free.
func fillDisk(dir, path string, room int64) error {
	free, err := freeBytes(dir)
	if err != nil {
		return err
	}
	if free <= room {
		return nil
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	chunk := make([]byte, 64<<10)
	for left := free - room; left > 0; left -= int64(len(chunk)) {
		if _, err := f.Write(chunk[:min(int64(len(chunk)), left)]); err != nil {
			f.Close()
			return err
		}
	}
	return f.Close()
}
