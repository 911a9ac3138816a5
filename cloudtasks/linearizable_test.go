package cloudtasks_test

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/ctdispatch/ctdispatch/cloudtasks"
	"github.com/ctdispatch/ctdispatch/naming"
	"github.com/ctdispatch/ctdispatch/outbox"
	"github.com/ctdispatch/ctdispatch/outbox/parquetbox"
	"github.com/ctdispatch/ctdispatch/outbox/pgbox"
)

// The variables a history process reads besides envAddr and envRoot.
const (
	envHistory = "CTDISPATCH_TEST_HISTORY" // the client number
	envSeed    = "CTDISPATCH_TEST_SEED"
	envDue     = "CTDISPATCH_TEST_DUE"   // the timers' due time, Unix seconds
	envStale   = "CTDISPATCH_TEST_STALE" // "1": Latest skips others' records
	envPG      = "CTDISPATCH_TEST_PG"    // a DSN: the outbox is pgbox's, not envRoot's files
)

// historyOps is how many operations each process makes; historyIDs how
// many timer IDs they share.
const historyOps, historyIDs = 40, 3

// histOp is one operation of a history as a process reports it.
type histOp struct {
	Client int    `json:"client"`
	Op     string `json:"op"` // schedule, cancel, latest
	ID     int    `json:"id"`
	Call   int64  `json:"call"`
	Return int64  `json:"return"`
	Out    string `json:"out"`
}

// staleBox is the planted fault: Latest returns this process's newest
// record only, as parquetbox did for IDs it had written. (It hides an
// outbox.Reserver, so a dispatcher reads Latest before every create.)
type staleBox struct{ outbox.Outbox }

func (s staleBox) Latest(ctx context.Context, t outbox.Table, id string) (outbox.Record, bool, error) {
	recs, err := s.Lookup(ctx, outbox.Query{Table: t, ID: id, History: true})
	var own []outbox.Record
	for _, r := range recs {
		if r.ProcessorUUID == s.ProcessorUUID() {
			own = append(own, r)
		}
	}
	if err != nil {
		return outbox.Record{}, false, err
	}
	r, ok, _ := outbox.NewestOf(own)
	return r, ok, nil
}

// LatestFresh keeps the fault: the fresher read a repeat makes is as
// stale as Latest (without it, the embedded outbox's would hide it).
func (s staleBox) LatestFresh(ctx context.Context, t outbox.Table, id string) (outbox.Record, bool, time.Duration, error) {
	r, ok, err := s.Latest(ctx, t, id)
	return r, ok, 0, err
}

// TestHistoryProcess is not a test: it is the body of one process of
// TestHistoriesAreLinearizable, printing its operations as JSON.
func TestHistoryProcess(t *testing.T) {
	client := os.Getenv(envHistory)
	if client == "" {
		t.Skip("runs only as a child process")
	}
	ctx := context.Background()
	n, _ := strconv.Atoi(client)
	seed, _ := strconv.ParseUint(os.Getenv(envSeed), 10, 64)
	due, _ := strconv.ParseInt(os.Getenv(envDue), 10, 64)
	box, closeBox := historyOutbox(t)
	if os.Getenv(envStale) == "1" {
		box = staleBox{box}
	}
	cfg := cloudtasks.Config{Project: "proj", Location: "europe-west1", Queue: "default", EmulatorAddr: os.Getenv(envAddr),
		Durability: cloudtasks.DurabilityStrict}
	d, err := cloudtasks.NewDispatcher(ctx, box, &cfg)
	require.NoError(t, err)
	rng := rand.New(rand.NewPCG(seed, uint64(n)))
	timer := func(i int) cloudtasks.TimerRequest {
		return cloudtasks.TimerRequest{Kind: naming.KindRetry, RunID: "hist", TaskKey: fmt.Sprint("k", i), Next: naming.Attempt(2),
			At: time.Unix(due, 0), Task: cloudtasks.Task{URL: "https://worker.example/retry"}}
	}
	var ops []histOp
	for range historyOps {
		op := histOp{Client: n, ID: rng.IntN(historyIDs)}
		req := timer(op.ID)
		id, err := req.ID()
		require.NoError(t, err)
		op.Call = time.Now().UnixNano()
		switch p := rng.IntN(4); {
		case p < 2:
			op.Op = "schedule"
			res, err := d.ScheduleTimer(ctx, req)
			switch {
			case err == nil:
				op.Out = string(res.Outcome)
			case errors.Is(err, cloudtasks.ErrNameHeld):
				op.Out = "name_held"
			case errors.Is(err, cloudtasks.ErrIndeterminate):
				op.Out = "indeterminate"
			case refusedBeforeCall(err):
				op.Out = "refused"
			default:
				op.Out = "error: " + err.Error()
			}
		case p == 2:
			op.Op = "cancel"
			res, err := d.CancelTimer(ctx, id.String(), "default")
			op.Out = string(res.Outcome)
			if err != nil {
				op.Out = "error: " + err.Error()
			}
		default:
			op.Op = "latest"
			r, ok, err := d.Latest(ctx, id.String())
			switch {
			case errors.Is(err, outbox.ErrConcurrentWrites):
				op.Out = "indeterminate" // a typed unknown: two blind writes
			case err != nil:
				op.Out = "error: " + err.Error()
			case !ok:
				op.Out = "none"
			default:
				op.Out = string(r.Status)
			}
		}
		op.Return = time.Now().UnixNano()
		ops = append(ops, op)
	}
	require.NoError(t, d.Close(ctx))
	require.NoError(t, closeBox())
	require.NoError(t, json.NewEncoder(os.Stdout).Encode(ops))
}

// historyOutbox opens a history process's outbox: in the PostgreSQL
// database envPG names, or in the directory envRoot names.
func historyOutbox(t *testing.T) (outbox.Outbox, func() error) {
	if dsn := os.Getenv(envPG); dsn != "" {
		db, err := sql.Open("pgx", dsn)
		require.NoError(t, err)
		box, err := pgbox.New(db, pgbox.Config{})
		require.NoError(t, err)
		return box, db.Close
	}
	pb, err := parquetbox.Open(context.Background(), parquetbox.Config{Root: os.Getenv(envRoot), ProcessorUUID: uuid.Must(uuid.NewV7()), RefreshInterval: -1})
	require.NoError(t, err)
	return pb, pb.Close
}

// refusedBeforeCall reports an error of a schedule whose pending record
// other processes' writes kept refusing (each time it read again), so it
// made no call and changed nothing: an answer with no effect.
func refusedBeforeCall(err error) bool {
	var oe *cloudtasks.OutboxError
	return errors.Is(err, outbox.ErrVersionConflict) && errors.As(err, &oe) && oe.BeforeCall
}

// timerState is the model's state of one timer ID: whether the emulator
// holds its task, and whether a cancel deleted it (its name is then held
// for the whole run).
type timerState struct{ exists, held bool }

// timerModel is the sequential specification of ScheduleTimer,
// CancelTimer and Latest on one ID. It allows the typed unknown answers
// (indeterminate, and a Latest of pending, not_found or failed) and no
// false one: already_existed or a Latest of created/already_existed
// without a task, created with one, a held name without a cancel.
var timerModel = porcupine.Model{
	Partition: func(h []porcupine.Operation) [][]porcupine.Operation {
		by := map[int][]porcupine.Operation{}
		for _, op := range h {
			id := op.Input.(histOp).ID
			by[id] = append(by[id], op)
		}
		var out [][]porcupine.Operation
		for _, ops := range by {
			out = append(out, ops)
		}
		return out
	},
	Init: func() any { return timerState{} },
	Step: func(state, input, output any) (bool, any) {
		s, out := state.(timerState), output.(string)
		switch input.(histOp).Op {
		case "schedule":
			switch out {
			case "created", "recovered":
				return !s.exists && !s.held, timerState{exists: true, held: s.held}
			case "already_existed":
				return s.exists, s
			case "name_held":
				return s.held && !s.exists, s
			case "indeterminate", "refused":
				return true, s
			}
		case "cancel":
			switch out {
			case "deleted":
				return s.exists, timerState{held: true}
			case "already_gone", "unknown":
				return !s.exists, s
			}
		case "latest":
			switch out {
			case "created", "already_existed":
				return s.exists, s
			case "none", "pending", "not_found", "failed", "cancelled", "indeterminate":
				return true, s
			}
		}
		return false, s
	},
	DescribeOperation: func(input, output any) string {
		in := input.(histOp)
		return fmt.Sprintf("%s(k%d) -> %s", in.Op, in.ID, output)
	},
}

// runHistory runs three processes against one emulator and one outbox
// directory (or the database extra's envPG names) and returns their
// operations.
func runHistory(t *testing.T, stale bool, seed uint64, extra ...string) []porcupine.Operation {
	emu := startEmulator(t, nil)
	root := t.TempDir()
	due := time.Now().Add(time.Hour).Unix()
	var mu sync.Mutex
	var history []porcupine.Operation
	var wg sync.WaitGroup
	for c := range 3 {
		wg.Go(func() {
			env := []string{envHistory + "=" + strconv.Itoa(c), envSeed + "=" + strconv.FormatUint(seed, 10),
				envDue + "=" + strconv.FormatInt(due, 10)}
			if stale {
				env = append(env, envStale+"=1")
			}
			env = append(env, extra...)
			cmd := child(t, "", emu.Addr(), root, env...)
			cmd.Args[1] = "-test.run=^TestHistoryProcess$"
			out, err := cmd.Output()
			if !assertNoError(t, err, out) {
				return
			}
			var ops []histOp
			if err := json.NewDecoder(bytes.NewReader(out)).Decode(&ops); err != nil {
				t.Errorf("child output %q: %v", out, err)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			for _, op := range ops {
				if strings.HasPrefix(op.Out, "error") {
					if !stale {
						t.Errorf("an operation failed: %+v", op)
					}
					// A stale process's pending record is refused (the
					// version is taken) before any call: no effect.
					continue
				}
				history = append(history, porcupine.Operation{ClientId: op.Client, Input: op, Call: op.Call, Output: op.Out, Return: op.Return})
			}
		})
	}
	wg.Wait()
	return history
}

// TestHistoriesAreLinearizable records histories of 3 real processes
// (this test binary re-executed) scheduling, cancelling and reading 3
// retry timers (120 operations) on one Parquet directory against one
// emulator in this process, reached over loopback gRPC, and checks them
// with porcupine against timerModel. The same run with a planted stale
// read (each process's Latest sees only its own records) must fail the
// check (within 12 seeded runs; it usually fails in the first). Budget:
// about 10 s on 2 cores, 30 s under the race detector.
func TestHistoriesAreLinearizable(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	t.Parallel()
	for seed := range uint64(3) {
		h := runHistory(t, false, seed+1)
		require.Len(t, h, 3*historyOps)
		res, info := porcupine.CheckOperationsVerbose(timerModel, h, 30*time.Second)
		t.Logf("seed %d: %d operations of 3 processes checked: %s", seed+1, len(h), res)
		if res != porcupine.Ok {
			dir, _ := os.MkdirTemp("", "ctdispatch-history-") // kept for a look after the test
			path := dir + "/history.html"
			_ = porcupine.VisualizePath(timerModel, info, path)
			// Log the ID whose history no order explains, in call order.
			sort.Slice(h, func(i, j int) bool { return h[i].Call < h[j].Call })
			for _, part := range timerModel.Partition(h) {
				if porcupine.CheckOperations(timerModel, part) {
					continue
				}
				for _, op := range part {
					in := op.Input.(histOp)
					t.Logf("k%d c%d %s -> %s [%d, %d]", in.ID, in.Client, in.Op, op.Output, (op.Call-h[0].Call)/1e6, (op.Return-h[0].Call)/1e6)
				}
			}
			t.Fatalf("seed %d: history of %d operations is %s (visualization: %s)", seed+1, len(h), res, path)
		}
	}
	stale := false
	for seed := range uint64(12) {
		h := runHistory(t, true, seed+1)
		if !porcupine.CheckOperations(timerModel, h) {
			stale = true
			break
		}
	}
	require.True(t, stale, "a Latest that skips others' records must give a history the model rejects")
}
