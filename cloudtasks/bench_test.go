package cloudtasks

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ctdispatch/ctdispatch/outbox"
	"github.com/ctdispatch/ctdispatch/outbox/parquetbox"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"gocloud.dev/blob"
	"gocloud.dev/blob/memblob"

	"github.com/ctdispatch/ctdispatch/naming"
)

// benchConcurrency is the number of concurrent callers in the benchmarks.
const benchConcurrency = 64

// runConcurrent runs fn b.N times from benchConcurrency goroutines.
func runConcurrent(b *testing.B, fn func(i int64) error) {
	b.SetParallelism((benchConcurrency + runtime.GOMAXPROCS(0) - 1) / runtime.GOMAXPROCS(0))
	var next atomic.Int64
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := fn(next.Add(1)); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkDispatch compares, in one run, bare named CreateTask calls with
// Dispatch over the same client and emulator at 64 concurrent callers.
// The ratio of their ns/op is the dispatcher's overhead in each durability
// mode (see BENCHMARKS.md).
func BenchmarkDispatch(b *testing.B) {
	emu := startEmulator(b)
	client := emu.client(b)
	body := []byte(`{"table":"orders","day":"2026-01-01"}`)
	task := Task{URL: "https://worker.example/run", Body: body}

	b.Run("bare-createtask", func(b *testing.B) {
		run := uuid.NewString()
		runConcurrent(b, func(i int64) error {
			id, err := naming.NewDispatch(run, "t", naming.Attempt(uint64(i)))
			if err != nil {
				return err
			}
			_, err = client.CreateTask(context.Background(), task.createRequest(id, testQueue, time.Now()))
			return err
		})
	})
	for _, mode := range []struct {
		name       string
		durability Durability
		memory     bool
	}{{"dispatch-overlapped", DurabilityOverlapped, false}, {"dispatch-strict", DurabilityStrict, false}, {"dispatch-memory-outbox", DurabilityOverlapped, true}} {
		b.Run(mode.name, func(b *testing.B) {
			ctx := context.Background()
			cfg := testConfig()
			var box outbox.Outbox = outbox.NewMemory(nil)
			if !mode.memory {
				pb, err := parquetbox.Open(ctx, parquetbox.Config{Root: b.TempDir(), ProcessorUUID: uuid.Must(uuid.NewV7())})
				require.NoError(b, err)
				defer pb.Close()
				box = pb
			}
			cfg.Client, cfg.Durability = client, mode.durability
			d, err := NewDispatcher(ctx, box, &cfg)
			require.NoError(b, err)
			defer d.Close(context.Background())
			run := uuid.NewString()
			runConcurrent(b, func(i int64) error {
				_, err := d.Dispatch(ctx, DispatchRequest{RunID: run, TaskKey: "t", Identity: naming.Attempt(uint64(i)), Task: task})
				return err
			})
		})
	}
}

// BenchmarkDispatchRatio measures Dispatch (default overlapped outbox) against bare
// CreateTask in alternating rounds of the same size, so that load from
// other processes on the machine hits both alike, and reports the
// throughput ratio dispatch/bare as "ratio" (the aim is ≥ 0.85).
func BenchmarkDispatchRatio(b *testing.B) {
	emu := startEmulator(b)
	client := emu.client(b)
	ctx := context.Background()
	box, err := parquetbox.Open(ctx, parquetbox.Config{Root: b.TempDir(), ProcessorUUID: uuid.Must(uuid.NewV7())})
	require.NoError(b, err)
	defer box.Close()
	cfg := testConfig()
	cfg.Client = client
	d, err := NewDispatcher(ctx, box, &cfg)
	require.NoError(b, err)
	defer d.Close(context.Background())
	task := Task{URL: "https://worker.example/run", Body: []byte(`{"table":"orders","day":"2026-01-01"}`)}

	// round runs n calls of fn from benchConcurrency goroutines and returns
	// the wall time.
	round := func(n int, fn func(i int) error) time.Duration {
		var next atomic.Int64
		var wg sync.WaitGroup
		start := time.Now()
		for range benchConcurrency {
			wg.Go(func() {
				for {
					i := int(next.Add(1))
					if i > n {
						return
					}
					if err := fn(i); err != nil {
						b.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
		return time.Since(start)
	}
	const rounds = 6
	per := max(b.N/rounds, benchConcurrency)
	var bare, disp time.Duration
	b.ResetTimer()
	for range rounds {
		run := uuid.NewString()
		bare += round(per, func(i int) error {
			id, err := naming.NewDispatch(run, "t", naming.Attempt(uint64(i)))
			if err != nil {
				return err
			}
			_, err = client.CreateTask(ctx, task.createRequest(id, testQueue, time.Now()))
			return err
		})
		run = uuid.NewString()
		disp += round(per, func(i int) error {
			_, err := d.Dispatch(ctx, DispatchRequest{RunID: run, TaskKey: "t", Identity: naming.Attempt(uint64(i)), Task: task})
			return err
		})
	}
	b.ReportMetric(float64(bare)/float64(disp), "ratio")
	b.ReportMetric(float64(rounds*per)/bare.Seconds(), "bare-calls/s")
	b.ReportMetric(float64(rounds*per)/disp.Seconds(), "dispatch-calls/s")
}

// BenchmarkRepeatDispatch measures a repeated Dispatch answered from a
// parquetbox outbox without a CreateTask call: 1,000 IDs are dispatched
// once, then each iteration repeats one of them, from one goroutine.
// Another processor's records of other IDs are in the same store, so the
// read looks at others' records as a replica's would. On a directory
// they are in that processor's log: read=fresh is the repeat as the
// dispatcher makes it, read as fresh as the directory allows
// (outbox.FreshReader), and read=trusting the same repeat through a
// store that hides LatestFresh, so the dispatcher trusts a view of the
// others up to RefreshInterval old (what a repeat cost before reads were
// fresh, and the yardstick for the fresh one). On a bucket (in memory)
// the others' records are published, and GetTask confirms each answer.
// ns/op is the wall time of a repeat and cpu-ns/op the CPU time (user
// and system) of the whole process per repeat, the emulator's share of a
// GetTask among it. Compare the directory's two reads with
// benchstat -col /read.
func BenchmarkRepeatDispatch(b *testing.B) {
	for _, v := range []struct {
		store, read string
	}{{"directory", "fresh"}, {"directory", "trusting"}, {"bucket", "gettask"}} {
		b.Run("store="+v.store+"/read="+v.read, func(b *testing.B) {
			benchmarkRepeat(b, v.store == "bucket", v.read == "trusting")
		})
	}
}

// trustingOutbox is an outbox with only the methods of outbox.Outbox, so
// a dispatcher over it does not see that the store is an
// outbox.FreshReader and answers a repeat from Latest alone.
type trustingOutbox struct{ outbox.Outbox }

// benchmarkRepeat is BenchmarkRepeatDispatch on a directory or a bucket,
// through a store that hides its fresh read when trusting.
func benchmarkRepeat(b *testing.B, bucket, trusting bool) {
	emu := startEmulator(b)
	ctx := context.Background()
	root := b.TempDir()
	var shared *blob.Bucket
	opts := func() parquetbox.Config {
		o := parquetbox.Config{Root: root, ProcessorUUID: uuid.Must(uuid.NewV7())}
		if bucket {
			o.Root, o.Bucket, o.LogDir = "", shared, b.TempDir()
		}
		return o
	}
	if bucket {
		shared = memblob.OpenBucket(nil)
		defer shared.Close()
	}
	other, err := parquetbox.Open(ctx, opts())
	require.NoError(b, err)
	defer other.Close()
	box, err := parquetbox.Open(ctx, opts())
	require.NoError(b, err)
	defer box.Close()
	cfg := testConfig()
	cfg.Client = emu.client(b)
	var mine outbox.Outbox = box
	if trusting {
		mine = trustingOutbox{box}
	}
	d, err := NewDispatcher(ctx, mine, &cfg)
	require.NoError(b, err)
	defer d.Close(context.Background())
	od, err := NewDispatcher(ctx, other, &cfg)
	require.NoError(b, err)
	defer od.Close(context.Background())
	task := Task{URL: "https://worker.example/run", Body: []byte(`{"table":"orders","day":"2026-01-01"}`)}
	const ids = 1000
	run := uuid.NewString()
	for i := range ids {
		_, err := d.Dispatch(ctx, DispatchRequest{RunID: run, TaskKey: "t", Identity: naming.Attempt(uint64(i)), Task: task})
		require.NoError(b, err)
		_, err = od.Dispatch(ctx, DispatchRequest{RunID: run, TaskKey: "other", Identity: naming.Attempt(uint64(i)), Task: task})
		require.NoError(b, err)
	}
	if bucket {
		require.NoError(b, od.Close(ctx))
		require.NoError(b, other.Flush(ctx))
	}
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := cpuTime(b)
	for i := range b.N {
		res, err := d.Dispatch(ctx, DispatchRequest{RunID: run, TaskKey: "t", Identity: naming.Attempt(uint64(i % ids)), Task: task})
		if err != nil || !res.Skipped {
			b.Fatalf("repeat %d: %+v, %v", i, res, err)
		}
	}
	b.ReportMetric(float64(cpuTime(b)-cpu0)/float64(b.N), "cpu-ns/op")
}

// BenchmarkCancel measures Cancel on a Parquet directory that another
// process also writes: each op deletes one task and records the cancel.
// Run it with a fixed count (-benchtime 2000x): the setup dispatches b.N
// tasks first.
func BenchmarkCancel(b *testing.B) {
	emu := startEmulator(b)
	ctx := context.Background()
	root := b.TempDir()
	open := func() (*parquetbox.Outbox, *Dispatcher) {
		box, err := parquetbox.Open(ctx, parquetbox.Config{Root: root, ProcessorUUID: uuid.Must(uuid.NewV7())})
		require.NoError(b, err)
		b.Cleanup(func() { box.Close() })
		cfg := testConfig()
		cfg.Client = emu.client(b)
		d, err := NewDispatcher(ctx, box, &cfg)
		require.NoError(b, err)
		b.Cleanup(func() { d.Close(context.Background()) })
		return box, d
	}
	_, d := open()
	_, od := open()
	task := Task{URL: "https://worker.example/run", ScheduleTime: time.Now().Add(time.Hour), Body: []byte(`{"table":"orders"}`)}
	run := uuid.NewString()
	ids := make([]string, b.N)
	for i := range b.N {
		res, err := d.Dispatch(ctx, DispatchRequest{RunID: run, TaskKey: "t", Identity: naming.Attempt(uint64(i)), Task: task})
		require.NoError(b, err)
		ids[i] = res.ID
		_, err = od.Dispatch(ctx, DispatchRequest{RunID: run, TaskKey: "other", Identity: naming.Attempt(uint64(i)), Task: task})
		require.NoError(b, err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := cpuTime(b)
	for i := range b.N {
		res, err := d.Cancel(ctx, ids[i], "")
		if err != nil || res.Outcome != CancelDeleted {
			b.Fatalf("cancel %d: %+v, %v", i, res, err)
		}
	}
	b.ReportMetric(float64(cpuTime(b)-cpu0)/float64(b.N), "cpu-ns/op")
}
