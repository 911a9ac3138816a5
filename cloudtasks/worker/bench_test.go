package worker

import (
	"context"
	"database/sql"
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/cloudtasks/apiv2/cloudtaskspb"
	"github.com/stretchr/testify/require"

	"github.com/ctdispatch/ctdispatch/outbox"
	"github.com/ctdispatch/ctdispatch/outbox/parquetbox"
)

// passInbox runs every delivery's work, so a benchmark measures the
// worker's own path and not the duplicate shortcut.
type passInbox struct{}

func (passInbox) Process(ctx context.Context, _ string, _ time.Duration, work Work) (Outcome, error) {
	return OutcomeDone, work(ctx, nil)
}

// benchToken returns a token the emulator signed for audience.
func benchToken(b *testing.B, e *emu, audience string) string {
	b.Helper()
	got := make(chan string, 1)
	url := serve(b, http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		got <- strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
	}))
	e.createTask(b, mustID(b, "bench", "token", "1"), url, func(hr *cloudtaskspb.HttpRequest) { hr.GetOidcToken().Audience = audience })
	_, err := e.srv.RunDue(context.Background())
	require.NoError(b, err)
	return <-got
}

// BenchmarkOverhead is the worker's own cost per delivery, in process (no
// network, no database): token verification with the keys cached, header
// parsing and the key check, with a handler that does nothing.
func BenchmarkOverhead(b *testing.B) {
	e := startEmulator(b)
	const audience = "https://worker.example.com/work"
	token := benchToken(b, e, audience)
	for _, verify := range []bool{true, false} {
		name := map[bool]string{true: "verified", false: "unverified"}[verify]
		b.Run(name, func(b *testing.B) {
			cfg := e.verifiedConfig(audience, passInbox{})
			if !verify {
				cfg = insecure(passInbox{})
			}
			w, err := New(context.Background(), cfg, func(context.Context, *Delivery) error { return nil })
			require.NoError(b, err)
			h := cloudTasksHeaders(mustID(b, "bench", "overhead", "1"))
			h.Set("Authorization", "Bearer "+token)
			req := httptest.NewRequest(http.MethodPost, audience, http.NoBody)
			req.Header = h
			b.ReportAllocs()
			for b.Loop() {
				rec := httptest.NewRecorder()
				w.ServeHTTP(rec, req)
				if rec.Code != 200 {
					b.Fatalf("status %d: %s", rec.Code, rec.Body)
				}
			}
		})
	}
}

// BenchmarkInbox compares a handler's write through the SQL inbox (its
// row, the write, one commit) with the same write in a transaction of its
// own; each iteration is a new key. The ratio of the two ns/op is the
// inbox's cost.
func BenchmarkInbox(b *testing.B) {
	db, in := openDB(b)
	ctx := context.Background()
	write := func(ctx context.Context, tx *sql.Tx, id string) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO effects (id, pid) VALUES ($1, 1)`, id)
		return err
	}
	// Keys stay new across -count repetitions, which share the database.
	var seq atomic.Int64
	b.Run("bare", func(b *testing.B) {
		for b.Loop() {
			tx, err := db.BeginTx(ctx, nil)
			require.NoError(b, err)
			require.NoError(b, write(ctx, tx, fmt.Sprint("bare-", seq.Add(1))))
			require.NoError(b, tx.Commit())
		}
	})
	b.Run("inbox", func(b *testing.B) {
		for b.Loop() {
			key := fmt.Sprint("inbox-", seq.Add(1))
			o, err := in.Process(ctx, key, time.Second, func(ctx context.Context, tx *sql.Tx) error { return write(ctx, tx, key) })
			require.NoError(b, err)
			require.Equal(b, OutcomeDone, o)
		}
	})
}

// BenchmarkInboxPaired runs the two transactions of BenchmarkInbox one
// after the other in each iteration and reports their mean times and
// ratio, so a machine whose load drifts during the run (a shared one)
// affects both alike.
func BenchmarkInboxPaired(b *testing.B) {
	db, in := openDB(b)
	ctx := context.Background()
	var seq atomic.Int64
	var bare, inbox time.Duration
	for b.Loop() {
		key := fmt.Sprint("pair-", seq.Add(1))
		start := time.Now()
		tx, err := db.BeginTx(ctx, nil)
		require.NoError(b, err)
		_, err = tx.ExecContext(ctx, `INSERT INTO effects (id, pid) VALUES ($1, 1)`, "bare-"+key)
		require.NoError(b, err)
		require.NoError(b, tx.Commit())
		mid := time.Now()
		_, err = in.Process(ctx, key, time.Second, func(ctx context.Context, tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, `INSERT INTO effects (id, pid) VALUES ($1, 1)`, key)
			return err
		})
		require.NoError(b, err)
		bare, inbox = bare+mid.Sub(start), inbox+time.Since(mid)
	}
	n := float64(b.N)
	b.ReportMetric(float64(bare.Microseconds())/n, "bare-µs")
	b.ReportMetric(float64(inbox.Microseconds())/n, "inbox-µs")
	b.ReportMetric(float64(inbox)/float64(bare), "inbox/bare")
}

// BenchmarkDeliveries is one worker process's throughput over loopback
// HTTP: verified tokens, the SQL inbox, a handler that writes one row,
// eight requests in flight. Every request is a new key.
func BenchmarkDeliveries(b *testing.B) { benchDeliveries(b, nil) }

// BenchmarkDeliveriesRecorded is BenchmarkDeliveries with every delivery
// recorded in a Parquet outbox, the started record before the inbox and
// the outcome before the answer: durable (each record waits for its group
// commit's fsync, the default) and interval (it waits for the write only).
func BenchmarkDeliveriesRecorded(b *testing.B) {
	for _, d := range []struct {
		name string
		mode parquetbox.Durability
	}{{"durable", parquetbox.Durable}, {"interval", parquetbox.Interval}} {
		b.Run(d.name, func(b *testing.B) {
			box, err := parquetbox.Open(context.Background(), parquetbox.Config{Root: b.TempDir(), Durability: d.mode})
			require.NoError(b, err)
			b.Cleanup(func() { box.Close() })
			benchDeliveries(b, box)
		})
	}
}

func benchDeliveries(b *testing.B, box outbox.Outbox) {
	e := startEmulator(b)
	db, in := openDB(b)
	db.SetMaxOpenConns(16)
	db.SetMaxIdleConns(16)
	mux := http.NewServeMux()
	url := serve(b, mux) + "/work"
	token := benchToken(b, e, url)
	cfg := e.verifiedConfig(url, in)
	cfg.Outbox = box
	w, err := New(context.Background(), cfg, writeEffect)
	require.NoError(b, err)
	mux.Handle("/work", w)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}}
	var seq atomic.Int64
	b.SetParallelism(8 / max(1, testingProcs()))
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			id := mustID(b, "tput", fmt.Sprint("k", seq.Add(1)), "1")
			h := cloudTasksHeaders(id)
			h.Set("Authorization", "Bearer "+token)
			req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(`{}`))
			req.Header = h
			resp, err := client.Do(req)
			if err != nil {
				b.Error(err)
				return
			}
			resp.Body.Close()
			if resp.StatusCode != 200 {
				b.Errorf("status %d", resp.StatusCode)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "deliveries/s")
}

// testingProcs is GOMAXPROCS, which RunParallel multiplies the
// parallelism by.
func testingProcs() int { return runtime.GOMAXPROCS(0) }
