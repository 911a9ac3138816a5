package riverbench

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/ctdispatch/ctdispatch/cloudtasks"
	"github.com/ctdispatch/ctdispatch/outbox"
	"github.com/ctdispatch/ctdispatch/outbox/pgbox/pgxtx"
)

// The lines. Each runs ctdispatch's side and river's in one loop,
// alternating, so that both see the same machine, and returns what each
// side measured. Before it measures, each side runs once unmeasured
// (connections, prepared statements, a relay's or producer's first
// wake-up), so a line leaves n+1 transactions of each side.

// bulkSize is how many dispatches or jobs one transaction of the bulk
// line records.
const bulkSize = 100

// startTimeout bounds the wait for a commit's task or job start: past it
// the relay or the producer has lost the commit, which fails the line.
const startTimeout = 30 * time.Second

// side is one side of a line: what it runs in a caller's transaction and
// what it measured.
type side struct {
	name string
	// insert records one transaction's dispatches or jobs in tx and
	// returns the key that says when it started (the commit-to-start
	// line's; the others ignore it).
	insert func(ctx context.Context, tx pgx.Tx) (string, error)
	per    int // dispatches or jobs per transaction

	lat            []time.Duration // one per measured transaction
	client, server time.Duration   // CPU over the side's phases
	jobs           int             // dispatches or jobs measured
}

// txLine is per call in a caller's transaction: begin, one DispatchTx
// (a pgxtx.Tx on the pgx transaction) or river's InsertTx, commit. No
// relay runs and river's client is not started, so nothing else touches
// the database: the CPU in a phase is the calls'. Each side's n calls run
// in blocks of block, alternating, each block its own CPU window.
func txLine(tb testing.TB, w *world, n, block int) (ctd, riv *side) {
	d := w.dispatcher(tb, queueTx, cloudtasks.Config{NoRelay: true}, nil)
	rc := w.riverClient(tb, false, nil)
	ctd = &side{name: "ctdispatch", per: 1, insert: func(ctx context.Context, tx pgx.Tx) (string, error) {
		_, err := d.DispatchTx(ctx, pgxtx.Tx(tx), request(w.nextKey()))
		return "", err
	}}
	riv = &side{name: "river", per: 1, insert: func(ctx context.Context, tx pgx.Tx) (string, error) {
		_, err := rc.InsertTx(ctx, tx, noteArgs{Key: w.nextKey()}, nil)
		return "", err
	}}
	w.alternate(tb, n, block, ctd, riv)
	return ctd, riv
}

// bulkLine is txLine with bulkSize dispatches or jobs per transaction:
// ctdispatch's bulk path (dispatchMany) against river's InsertManyTx.
func bulkLine(tb testing.TB, w *world, n, block int) (ctd, riv *side) {
	d := w.dispatcher(tb, queueTx, cloudtasks.Config{NoRelay: true}, nil)
	rc := w.riverClient(tb, false, nil)
	ctd = &side{name: "ctdispatch", per: bulkSize, insert: func(ctx context.Context, tx pgx.Tx) (string, error) {
		reqs := make([]cloudtasks.DispatchRequest, bulkSize)
		for i := range reqs {
			reqs[i] = request(w.nextKey())
		}
		return "", dispatchMany(ctx, d, pgxtx.Tx(tx), reqs)
	}}
	riv = &side{name: "river", per: bulkSize, insert: func(ctx context.Context, tx pgx.Tx) (string, error) {
		params := make([]river.InsertManyParams, bulkSize)
		for i := range params {
			params[i] = river.InsertManyParams{Args: noteArgs{Key: w.nextKey()}}
		}
		_, err := rc.InsertManyTx(ctx, tx, params)
		return "", err
	}}
	w.alternate(tb, n, block, ctd, riv)
	return ctd, riv
}

// dispatchMany is ctdispatch's bulk path in the caller's transaction:
// one DispatchManyTx call, two statements for the batch.
func dispatchMany(ctx context.Context, d *cloudtasks.Dispatcher, tx outbox.Tx, reqs []cloudtasks.DispatchRequest) error {
	_, err := d.DispatchManyTx(ctx, tx, reqs)
	return err
}

// alternate runs each side once unmeasured, then n measured transactions
// of each side in blocks of block, the sides' order swapped every block.
func (w *world) alternate(tb testing.TB, n, block int, sides ...*side) {
	tb.Helper()
	srv := serverOf(tb, w.callers)
	for _, s := range sides {
		w.inTx(tb, s)
	}
	order := slices.Clone(sides)
	for done := 0; done < n; done += block {
		k := min(block, n-done)
		for _, s := range order {
			srv0, cl0 := srv.cpu(tb), clientCPU(tb)
			for range k {
				took, _ := w.inTx(tb, s)
				s.lat = append(s.lat, took)
			}
			cl1, srv1 := clientCPU(tb), srv.cpu(tb)
			s.client += cl1 - cl0
			s.server += srv1 - srv0
			s.jobs += k * s.per
		}
		slices.Reverse(order)
	}
}

// inTx runs one transaction of s on the callers' pool and returns how
// long begin, insert and commit took, and the insert's key.
func (w *world) inTx(tb testing.TB, s *side) (time.Duration, string) {
	tb.Helper()
	ctx := context.Background()
	start := time.Now()
	tx, err := w.callers.Begin(ctx)
	require.NoError(tb, err)
	key, err := s.insert(ctx, tx)
	if err != nil {
		tx.Rollback(ctx) //nolint:errcheck // the insert's error is the one to report
		require.NoError(tb, err, s.name)
	}
	require.NoError(tb, tx.Commit(ctx))
	return time.Since(start), key
}

// startLine is commit-to-task against commit-to-job-start: ctdispatch's
// commit of a DispatchTx until the relay of another dispatcher (its own
// pool, outbox and pgxlisten listener, woken by the commit's
// notification) has a created task back from CreateTask, against river's
// commit of an InsertTx until a started client's worker begins Work. n
// rounds, each one transaction of each side, the order swapped every
// round; a round starts at least gap after the one before, so that
// neither side's notification limiter (pgbox's NotifyGap, 10ms; river's
// FetchCooldown, 100ms) holds back a commit's notification: this is the
// latency of a lone call, not of a stream.
func startLine(tb testing.TB, w *world, n int, gap time.Duration) (ctd, riv *side) {
	created := make(chan started, 1024)
	w.dispatcher(tb, queueStart, cloudtasks.Config{Listener: w.listener(tb)}, func(c cloudtasks.Client) cloudtasks.Client {
		return createdClient{Client: c, created: created}
	})
	d := w.dispatcher(tb, queueStart, cloudtasks.Config{NoRelay: true}, nil)
	starts := make(chan started, 1024)
	rc := w.riverClient(tb, true, starts)
	ctd = &side{name: "ctdispatch", per: 1, insert: func(ctx context.Context, tx pgx.Tx) (string, error) {
		res, err := d.DispatchTx(ctx, pgxtx.Tx(tx), request(w.nextKey()))
		return res.TaskName, err
	}}
	riv = &side{name: "river", per: 1, insert: func(ctx context.Context, tx pgx.Tx) (string, error) {
		key := w.nextKey()
		_, err := rc.InsertTx(ctx, tx, noteArgs{Key: key}, nil)
		return key, err
	}}
	events := map[*side]<-chan started{ctd: created, riv: starts}
	order := []*side{ctd, riv}
	for round := range n + 1 {
		begun := time.Now()
		for _, s := range order {
			took := w.commitToStart(tb, s, events[s])
			if round > 0 {
				s.lat = append(s.lat, took)
				s.jobs++
			}
		}
		slices.Reverse(order)
		time.Sleep(gap - time.Since(begun)) // pacing, see above; a negative wait returns at once
	}
	return ctd, riv
}

// commitToStart runs one transaction of s and returns the time from its
// commit's return to the event that names its key.
func (w *world) commitToStart(tb testing.TB, s *side, events <-chan started) time.Duration {
	tb.Helper()
	_, key := w.inTx(tb, s)
	committed := time.Now()
	deadline := time.NewTimer(startTimeout)
	defer deadline.Stop()
	for {
		select {
		case e := <-events:
			if e.key == key {
				return e.at.Sub(committed)
			}
		case <-deadline.C:
			tb.Fatalf("%s: %s did not start within %s of its commit", s.name, key, startTimeout)
		}
	}
}
