package cloudtasks_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/ctdispatch/ctdispatch/cloudtasks"
	"github.com/ctdispatch/ctdispatch/internal/testtools/pgtest"
	"github.com/ctdispatch/ctdispatch/naming"
	"github.com/ctdispatch/ctdispatch/outbox"
	"github.com/ctdispatch/ctdispatch/outbox/parquetbox"
	"github.com/ctdispatch/ctdispatch/outbox/pgbox"
)

// outcomeGate holds back the created records a process appends while it
// is shut, as a busy group commit does: the calls are answered, their
// records not yet written. open writes them, in order.
type outcomeGate struct {
	mu   sync.Mutex
	shut bool
	held []func()
}

func (g *outcomeGate) append(ctx context.Context, r outbox.Record, done func(error),
	next func(context.Context, outbox.Record, func(error)) error) error {
	g.mu.Lock()
	if !g.shut || r.Status != outbox.StatusCreated {
		g.mu.Unlock()
		return next(ctx, r, done)
	}
	ctx = context.WithoutCancel(ctx)
	g.held = append(g.held, func() {
		if err := next(ctx, r, done); err != nil && done != nil {
			done(err)
		}
	})
	g.mu.Unlock()
	return nil
}

func (g *outcomeGate) close() {
	g.mu.Lock()
	g.shut = true
	g.mu.Unlock()
}

func (g *outcomeGate) open() {
	g.mu.Lock()
	held := g.held
	g.held, g.shut = nil, false
	g.mu.Unlock()
	for _, write := range held {
		write()
	}
}

// gatedParquet and gatedPG are the two stores with their created records
// held at a gate; embedding keeps every optional interface of the store.
type gatedParquet struct {
	*parquetbox.Outbox
	gate *outcomeGate
}

func (b gatedParquet) Append(ctx context.Context, r outbox.Record, done func(error)) error {
	return b.gate.append(ctx, r, done, b.Outbox.Append)
}

type gatedPG struct {
	*pgbox.Outbox
	gate *outcomeGate
}

func (b gatedPG) Append(ctx context.Context, r outbox.Record, done func(error)) error {
	return b.gate.append(ctx, r, done, b.Outbox.Append)
}

// lateJoinStores opens, on one store, the outbox of process A (its created
// records held at gate) and of process B.
type lateJoinStore struct {
	name   string
	strict bool // the store's answers are exact: hold them to strictTimerModel
	open   func(t *testing.T, gate *outcomeGate) (a, b outbox.Outbox)
}

var lateJoinStores = []lateJoinStore{
	{name: "parquet", open: func(t *testing.T, gate *outcomeGate) (outbox.Outbox, outbox.Outbox) {
		root := t.TempDir()
		open := func() *parquetbox.Outbox {
			box, err := parquetbox.Open(t.Context(), parquetbox.Config{Root: root, ProcessorUUID: uuid.Must(uuid.NewV7())})
			require.NoError(t, err)
			t.Cleanup(func() { require.NoError(t, box.Close()) })
			return box
		}
		return gatedParquet{open(), gate}, open()
	}},
	{name: "postgres", strict: true, open: func(t *testing.T, gate *outcomeGate) (outbox.Outbox, outbox.Outbox) {
		db, err := sql.Open("pgx", pgtest.New(t))
		require.NoError(t, err)
		t.Cleanup(func() { db.Close() })
		require.NoError(t, pgbox.Migrate(t.Context(), db, pgbox.Config{}))
		open := func() *pgbox.Outbox {
			box, err := pgbox.New(db, pgbox.Config{})
			require.NoError(t, err)
			return box
		}
		return gatedPG{open(), gate}, open()
	}},
}

// A repeat that starts after another call's answer, with another
// process's cancel in between, decides from the store: it never takes the
// first call's answer while that call's record is still being written
// (the repeat answered already_existed with no task: on a Parquet
// directory 12 to 27 of 96 heartbeats, on PostgreSQL 16 to 28 of 96, with
// eight such sequences at once). Process A answers created with its record
// held back, B cancels (recorded before it answers), A is asked again: the
// repeats that answer while A's records are held must not answer at all
// from the past, and once they are written every repeat says the name is
// held. The operations are checked against the porcupine models of
// linearizable_test.go too. Budget: about 5 s on 2 cores.
func TestRepeatAfterAnotherProcessCancelDecidesFromTheStore(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL")
	}
	t.Parallel()
	for _, store := range lateJoinStores {
		t.Run(store.name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			emu := startEmulator(t, nil)
			gate := &outcomeGate{}
			boxA, boxB := store.open(t, gate)
			open := func(box outbox.Outbox, durability cloudtasks.Durability) *cloudtasks.Dispatcher {
				cfg := cloudtasks.Config{Project: "proj", Location: "europe-west1", Queue: "default",
					EmulatorAddr: emu.Addr(), Durability: durability}
				d, err := cloudtasks.NewDispatcher(ctx, box, &cfg)
				require.NoError(t, err)
				t.Cleanup(func() { require.NoError(t, d.Close(context.Background())) })
				return d
			}
			a, b := open(boxA, cloudtasks.DurabilityOverlapped), open(boxB, cloudtasks.DurabilityStrict)

			const sequences, rounds = 8, 3
			checkAt := time.Now().Add(time.Hour)
			var history []porcupine.Operation
			var mu sync.Mutex
			record := func(client, id int, op string, call time.Time, out string) {
				mu.Lock()
				defer mu.Unlock()
				history = append(history, porcupine.Operation{ClientId: client, Input: histOp{Client: client, Op: op, ID: id},
					Call: call.UnixNano(), Output: out, Return: time.Now().UnixNano()})
			}
			// schedule is A's call for item i of a round: a heartbeat for an
			// even i, a dispatch for an odd one, each its own ID; cancel is
			// B's cancel of it.
			schedule := func(round, i int) (string, cloudtasks.Outcome, error) {
				key := fmt.Sprintf("late-%d-%d", round, i)
				if i%2 == 0 {
					res, err := a.ScheduleTimer(ctx, cloudtasks.TimerRequest{Kind: naming.KindHeartbeat, RunID: "late", TaskKey: key,
						At: checkAt, Task: cloudtasks.Task{URL: "https://worker.example/check"}})
					return res.TimerID, res.Outcome, err
				}
				res, err := a.Dispatch(ctx, request("late", key, 1, key))
				return res.ID, res.Outcome, err
			}
			cancel := func(i int, id string) (cloudtasks.CancelResult, error) {
				if i%2 == 0 {
					return b.CancelTimer(ctx, id, "")
				}
				return b.Cancel(ctx, id, "")
			}
			answer := func(o cloudtasks.Outcome, err error) string {
				switch {
				case err == nil:
					return string(o)
				case errors.Is(err, cloudtasks.ErrNameHeld):
					return "name_held"
				case errors.Is(err, cloudtasks.ErrIndeterminate):
					return "indeterminate"
				}
				return "error: " + err.Error()
			}
			falseWhileHeld, answers := 0, map[string]int{}
			for round := range rounds {
				ids := make([]string, sequences)
				gate.close()
				var wg sync.WaitGroup
				for i := range sequences {
					wg.Go(func() {
						call := time.Now()
						id, o, err := schedule(round, i)
						require.NoError(t, err)
						require.Equal(t, cloudtasks.OutcomeCreated, o)
						ids[i] = id
						record(0, round*sequences+i, "schedule", call, string(o))
					})
				}
				wg.Wait()
				// B cancels each; its record is kept before it answers.
				for i := range sequences {
					wg.Go(func() {
						call := time.Now()
						res, err := cancel(i, ids[i])
						require.NoError(t, err)
						require.Equal(t, cloudtasks.CancelDeleted, res.Outcome)
						record(1, round*sequences+i, "cancel", call, string(res.Outcome))
					})
				}
				wg.Wait()
				// A is asked again, every item at once, while its created
				// records are still held.
				repeats := make(chan string, sequences)
				for i := range sequences {
					wg.Go(func() {
						call := time.Now()
						_, o, err := schedule(round, i)
						out := answer(o, err)
						record(2, round*sequences+i, "schedule", call, out)
						repeats <- []string{"dispatch ", "heartbeat "}[1-i%2] + out
					})
				}
				// The repeats that answer before A's records are written; the
				// wait only bounds how long the gate stays shut.
				early := time.After(200 * time.Millisecond)
			held:
				for range sequences {
					select {
					case out := <-repeats:
						if strings.HasSuffix(out, " "+string(cloudtasks.OutcomeAlreadyExisted)) {
							falseWhileHeld++
						}
						answers[out]++
					case <-early:
						break held
					}
				}
				gate.open()
				wg.Wait()
				close(repeats)
				for out := range repeats {
					answers[out]++
				}
			}
			require.Zero(t, falseWhileHeld, "repeats answered already_existed from a finished flight: %v", answers)
			model := timerModel
			if store.strict {
				model = strictTimerModel
			}
			require.Len(t, history, 3*sequences*rounds)
			require.True(t, porcupine.CheckOperations(model, history), "the history is not linearizable; answers: %v", answers)
			// Every heartbeat's task is gone before its check time, so its
			// name is held; a dispatch's could have run, so on a store of
			// files whose two writers raced the answer is the typed unknown.
			want := map[string]int{"heartbeat name_held": sequences * rounds / 2, "dispatch name_held": sequences * rounds / 2}
			if n := answers["dispatch indeterminate"]; n > 0 && !store.strict {
				want["dispatch name_held"] -= n
				want["dispatch indeterminate"] = n
				if want["dispatch name_held"] == 0 {
					delete(want, "dispatch name_held")
				}
			}
			require.Equal(t, want, answers)
		})
	}
}
