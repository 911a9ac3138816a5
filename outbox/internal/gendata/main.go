// Command gendata writes a synthetic dispatch_outbox table for measuring
// the outbox at scale: IDs dispatch:run{N}:task{M}:{attempt}, real Cloud
// Tasks IDs, a realistic spread of queues, statuses and processors, and a
// pending state before the outcome for a share of the IDs (so compaction
// has history to fold). IDs are first recorded evenly over -days UTC days
// from -start, and rows are dealt round-robin into several files per daily
// partition (created_date=YYYY-MM-DD/), each sorted by ID, as dispatchers'
// log conversions produce them. With -buckets n, each file set is split
// further into one file per hash bucket of the task (b3of8-gen-….parquet),
// as a dispatcher with Options.Buckets = n writes them.
//
//	go run ./outbox/internal/gendata -rows 5000000 -days 30 -files 10 -out /tmp/outbox5m
//	ctdispatch compact --outbox /tmp/outbox5m
//	go run ./outbox/internal/gendata -rows 166667 -first 5000000 -days 1 -start 2026-01-31 -out /tmp/outbox5m
//
// The output is the same for the same flags.
package main

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/ctdispatch/ctdispatch/naming"
	"github.com/ctdispatch/ctdispatch/outbox"
	"github.com/ctdispatch/ctdispatch/outbox/internal/bucket"
	"github.com/ctdispatch/ctdispatch/outbox/internal/pqtable"
)

func main() {
	rows := flag.Int("rows", 5_000_000, "distinct dispatch IDs to generate")
	files := flag.Int("files", 10, "files to spread them over")
	pendingShare := flag.Float64("pending-history", 0.1, "share of IDs that also get an earlier pending row")
	out := flag.String("out", "", "outbox root to create (required)")
	seed := flag.Uint64("seed", 1, "random seed")
	days := flag.Int("days", 30, "UTC days (daily partitions) the IDs are first recorded over (at least 1)")
	start := flag.String("start", "2026-01-01", "first day")
	first := flag.Int("first", 0, "number of the first ID (to add a day to an existing table)")
	buckets := flag.Int("buckets", 1, "hash buckets of the task per partition, one file each (as Options.Buckets)")
	flag.Parse()
	base, err := time.Parse(time.DateOnly, *start)
	if err != nil || *days < 1 || *first < 0 {
		fmt.Fprintln(os.Stderr, "gendata: -start must be YYYY-MM-DD; -days must be at least 1 and -first not negative")
		os.Exit(2)
	}
	if *out == "" || *rows <= 0 || *files <= 0 || *buckets <= 0 {
		fmt.Fprintln(os.Stderr, "gendata: -out is required; -rows, -files and -buckets must be positive")
		os.Exit(2)
	}
	g := gen{rows: *rows, first: *first, files: *files, days: *days, buckets: *buckets, pendingShare: *pendingShare, seed: *seed, base: base}
	if err := g.write(*out); err != nil {
		fmt.Fprintln(os.Stderr, "gendata:", err)
		os.Exit(1)
	}
}

var (
	queues = []string{
		"projects/acme-prod/locations/us-central1/queues/extract",
		"projects/acme-prod/locations/us-central1/queues/transform",
		"projects/acme-prod/locations/us-central1/queues/load",
		"projects/acme-prod/locations/europe-west1/queues/reports",
	}
	processors = []string{
		"0b6f8e2a-3c1d-4f5e-8a9b-1c2d3e4f5a60", "1c7a9f3b-4d2e-4a6f-9bac-2d3e4f5a6b71",
		"2d8bae4c-5e3f-4b7a-8cbd-3e4f5a6b7c82", "3e9cbf5d-6f4a-4c8b-9dce-4f5a6b7c8d93",
	}
	failCodes = []string{"PermissionDenied", "InvalidArgument", "FailedPrecondition"}
)

const tasksPerRun, attemptsPerTask = 500, 2

// gen says what to generate.
type gen struct {
	rows, first, files, days int
	buckets                  int
	pendingShare             float64
	seed                     uint64
	base                     time.Time
}

// created is when the i-th of the generated IDs is first recorded: evenly
// over the days.
func (g gen) created(i int) time.Time {
	step := time.Duration(g.days) * 24 * time.Hour / time.Duration(g.rows)
	return g.base.Add(time.Duration(i) * step)
}

// record builds the final state of the i-th ID.
func record(i int, rng *rand.Rand, created time.Time) (outbox.Record, error) {
	run := i / (tasksPerRun * attemptsPerTask)
	task := i / attemptsPerTask % tasksPerRun
	attempt := i%attemptsPerTask + 1
	id, err := naming.NewDispatch(fmt.Sprintf("run%d", run), fmt.Sprintf("task%d", task), naming.Attempt(uint64(attempt)))
	if err != nil {
		return outbox.Record{}, err
	}
	created = created.Add(time.Duration(rng.IntN(1000)) * time.Microsecond)
	r := outbox.Record{
		Table: outbox.TableDispatch, ID: id.String(), CloudTaskID: id.CloudTaskID(),
		Queue: queues[task%len(queues)], RunID: id.RunID(), TaskKey: id.TaskKey(), Attempt: id.Attempt(),
		Status: outbox.StatusCreated, CreateCalls: 1, ProcessorUUID: processors[run%len(processors)],
		CreatedAt: created, UpdatedAt: created.Add(time.Duration(5+rng.IntN(200)) * time.Millisecond),
	}
	sum := sha256.Sum256(fmt.Appendf(nil, `{"run":%d,"task":%d}`, run, task))
	r.PayloadSHA256 = hex.EncodeToString(sum[:])
	switch p := rng.IntN(1000); {
	case p < 30:
		r.Status, r.ErrorCode, r.CreateCalls = outbox.StatusFailed, failCodes[p%len(failCodes)], int32(1+p%3)
	case p < 80:
		r.Status, r.CreateCalls = outbox.StatusAlreadyExisted, 2
	case p < 90:
		r.Status, r.CreateCalls = outbox.StatusPending, 0
	case p < 130:
		r.ErrorCode, r.CreateCalls = "Unavailable", 2 // created after a transient error
	}
	return r, nil
}

func (g gen) write(root string) error {
	table := filepath.Join(root, string(outbox.TableDispatch))
	for f := range g.files {
		rng := rand.New(rand.NewPCG(g.seed, uint64(g.first+f)))
		byPart := map[string][]outbox.Record{}
		for i := f; i < g.rows; i += g.files {
			r, err := record(g.first+i, rng, g.created(i))
			if err != nil {
				return err
			}
			part := "created_date=" + r.CreatedAt.UTC().Format(time.DateOnly) + "/" + bucket.FilePrefix(r.ID, g.buckets)
			if r.Status != outbox.StatusPending && rng.Float64() < g.pendingShare {
				p := r
				p.Status, p.ErrorCode, p.CreateCalls, p.UpdatedAt = outbox.StatusPending, "", 0, r.CreatedAt
				byPart[part] = append(byPart[part], p)
			}
			byPart[part] = append(byPart[part], r)
		}
		n := 0
		for part, recs := range byPart {
			sort.SliceStable(recs, func(a, b int) bool { return recs[a].ID < recs[b].ID })
			// part is <partition>/<bucket prefix>.
			dir, prefix := filepath.Split(part)
			dir = filepath.Join(table, dir)
			if err := os.MkdirAll(dir, 0o700); err != nil {
				return err
			}
			if err := writeFile(filepath.Join(dir, fmt.Sprintf("%sgen-%d-%04d.parquet", prefix, g.first, f)), recs); err != nil {
				return err
			}
			n += len(recs)
		}
		fmt.Fprintf(os.Stderr, "gendata: file set %d/%d: %d rows in %d partitions\n", f+1, g.files, n, len(byPart))
	}
	return nil
}

func writeFile(path string, recs []outbox.Record) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	bw := bufio.NewWriterSize(f, 1<<20)
	fw, err := pqtable.NewRecordWriter(bw, outbox.TableDispatch)
	if err != nil {
		f.Close()
		return err
	}
	for _, r := range recs {
		if err := fw.Write(r); err != nil {
			f.Close()
			return err
		}
	}
	if err := fw.Close(); err != nil {
		f.Close()
		return err
	}
	if err := bw.Flush(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
