package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Result is what one mode measured over all its rounds.
type Result struct {
	// Mode is the mode measured.
	Mode Mode
	// Ops counts the calls that succeeded (a deduplicated call is a
	// success).
	Ops int64
	// Errors counts the calls that returned an error.
	Errors int64
	// Duplicates counts the calls that repeated an earlier call's ID.
	Duplicates int64
	// Deduplicated counts the calls answered as already existing
	// (AlreadyExists for create-bare, outcome already_existed otherwise).
	Deduplicated int64
	// Elapsed is the wall time of the mode's rounds, summed.
	Elapsed time.Duration
	// Throughput is Ops per second of Elapsed.
	Throughput float64
	// P50 and P99 are the nearest-rank percentiles of every call's
	// latency, failed calls included.
	P50, P99 time.Duration
	// AllocsPerOp is the process's heap allocations during the mode's
	// rounds divided by its calls. With the in-process emulator it includes
	// the server's side of every RPC and the outbox's background work.
	AllocsPerOp float64
	// CPUPer1000 is the process's CPU time (user and system, from its own
	// rusage) per 1,000 calls, in seconds. With the in-process emulator it
	// includes the server's side of every RPC.
	CPUPer1000 float64
	// Ratio is Throughput divided by the create-bare Throughput; nil
	// without a create-bare result.
	Ratio *float64
	// BatchRatio is dispatch-batched's Throughput divided by the
	// batch-bare Throughput; nil for other modes or without batch-bare.
	BatchRatio *float64
	// FirstError is the first error a call returned, if any.
	FirstError string
}

// Report is the outcome of Run.
type Report struct {
	// Date is when the run started.
	Date time.Time
	// Config is the configuration run, with defaults applied.
	Config Config
	// Emulator is "in-process", "child process at ADDR" or the address of
	// the running emulator used.
	Emulator string
	// GOMAXPROCS is the number of CPUs the Go scheduler used.
	GOMAXPROCS int
	// Results holds one entry per mode, in report order.
	Results []Result
}

// roundStats is what one round of one mode measured.
type roundStats struct {
	ops, errs, dups, dedups int64
	elapsed, cpu            time.Duration
	mallocs                 uint64
	samples                 []time.Duration
	firstErr                error
}

// opFunc makes one call with the ID number key and reports whether the
// answer was "already exists".
type opFunc func(ctx context.Context, key uint64) (dedup bool, err error)

// Run measures cfg.Modes in alternating rounds against one emulator and
// returns their results with ratios against create-bare. Errors about cfg
// match ErrInvalidConfig. A round in which every call fails stops the run
// with that call's error.
func Run(ctx context.Context, cfg Config, logger *slog.Logger) (*Report, error) {
	c := cfg.WithDefaults()
	if err := c.validate(); err != nil {
		return nil, err
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	rep := &Report{Date: time.Now().UTC(), Config: c, GOMAXPROCS: runtime.GOMAXPROCS(0), Emulator: "in-process"}
	// The measured components log warnings only: a debug line per RPC
	// would measure the logger.
	t, err := newTarget(ctx, c, slog.New(atLeast{logger.Handler(), slog.LevelWarn}))
	if err != nil {
		return nil, err
	}
	switch {
	case len(c.EmulatorCommand) > 0:
		rep.Emulator = "child process at " + t.addr
	case c.EmulatorAddr != "":
		rep.Emulator = c.EmulatorAddr
	}
	defer func() {
		// The figures are already taken; a failing close (an outbox that
		// cannot roll its log into Parquet) is worth a warning, not the run.
		if err := t.close(); err != nil {
			logger.Warn("bench: closing the emulator, client or outboxes failed", "error", err)
		}
	}()

	nonce := make([]byte, 4)
	_, _ = rand.Read(nonce)
	prefix := "bench-" + hex.EncodeToString(nonce)
	body := payload(c.PayloadSize)
	stats := make(map[Mode][]roundStats, len(c.Modes))
	for round := range c.Rounds {
		n := c.Count / c.Rounds
		if round < c.Count%c.Rounds {
			n++
		}
		// Each round starts with a different mode, so no mode always runs
		// first (after start-up) or last.
		order := slices.Concat(c.Modes[round%len(c.Modes):], c.Modes[:round%len(c.Modes)])
		for _, m := range order {
			run := fmt.Sprintf("%s-%s-r%d", prefix, m, round+1)
			op, err := t.op(m, run, body, c.BatchSize)
			if err != nil {
				return nil, err
			}
			t.reset()
			// Every round starts from a collected heap, so garbage left by
			// the previous mode is not charged to this one.
			runtime.GC()
			rc := c
			width := 1
			if m == ModeBatchBare {
				// One request in flight, BatchSize tasks each: the shape
				// of the dispatcher's batches when every caller waits.
				rc.Concurrency, width = 1, c.BatchSize
			}
			st := runRound(ctx, rc, (n+width-1)/width, width, op)
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			logger.Debug("bench round", "round", round+1, "mode", string(m), "ops", st.ops, "errors", st.errs,
				"ops_per_second", int64(throughput(st.ops, st.elapsed)))
			if c.Progress != nil {
				c.Progress(round+1, m, st.ops, st.errs, st.elapsed)
			}
			if st.ops == 0 && st.errs > 0 {
				return nil, fmt.Errorf("bench: %s: every call of round %d failed: %w", m, round+1, st.firstErr)
			}
			stats[m] = append(stats[m], st)
		}
	}
	if err := t.closeDispatchers(); err != nil {
		logger.Warn("bench: closing a dispatcher or its outbox failed", "error", err)
	}
	for _, m := range c.Modes {
		lm := m
		if m == ModeTimer {
			lm = ModeDispatch // the timer mode shares dispatch's dispatcher, charged there
		}
		res := combine(m, stats[m])
		if calls := res.Ops + res.Errors; calls > 0 && m != ModeTimer {
			res.CPUPer1000 += t.lifeCPU[lm].Seconds() * 1000 / float64(calls)
		}
		rep.Results = append(rep.Results, res)
	}
	SetRatios(rep.Results)
	return rep, nil
}

// combine sums a mode's rounds into its Result.
func combine(m Mode, rounds []roundStats) Result {
	r := Result{Mode: m}
	var samples []time.Duration
	var mallocs uint64
	var cpu time.Duration
	for _, st := range rounds {
		r.Ops += st.ops
		r.Errors += st.errs
		r.Duplicates += st.dups
		r.Deduplicated += st.dedups
		r.Elapsed += st.elapsed
		cpu += st.cpu
		mallocs += st.mallocs
		samples = append(samples, st.samples...)
		if r.FirstError == "" && st.firstErr != nil {
			r.FirstError = st.firstErr.Error()
		}
	}
	r.Throughput = throughput(r.Ops, r.Elapsed)
	r.P50, r.P99 = summarize(samples)
	if calls := r.Ops + r.Errors; calls > 0 {
		r.AllocsPerOp = float64(mallocs) / float64(calls)
		r.CPUPer1000 = cpu.Seconds() * 1000 / float64(calls)
	}
	return r
}

// worker is one caller's tally; each caller writes only its own.
type worker struct {
	ops, errs, dups, dedups int64
	samples                 []time.Duration
	firstErr                error
}

// runRound makes n calls of op (or calls for c.Duration/c.Rounds when n is
// zero) from c.Concurrency goroutines. Each call of op stands for width
// calls of the mode (a batch), and is counted so.
func runRound(ctx context.Context, c Config, n, width int, op opFunc) roundStats {
	workers := make([]worker, c.Concurrency)
	perWorker := 1024
	if n > 0 {
		perWorker = n/c.Concurrency + 1
	}
	for i := range workers {
		workers[i].samples = make([]time.Duration, 0, perWorker)
	}
	var next atomic.Uint64
	var wg sync.WaitGroup
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	cpuBefore := cpuTime()
	start := time.Now()
	deadline := start.Add(c.Duration / time.Duration(c.Rounds))
	for w := range workers {
		wg.Go(func() {
			me := &workers[w]
			for ctx.Err() == nil {
				i := next.Add(1)
				t0 := time.Now()
				if (n > 0 && i > uint64(n)) || (n == 0 && !t0.Before(deadline)) {
					return
				}
				key, dup := keyOf(c.Seed, c.DuplicateRatio, i)
				dedup, err := op(ctx, key)
				me.samples = append(me.samples, time.Since(t0))
				if dup {
					me.dups++
				}
				w := int64(width)
				switch {
				case err != nil:
					me.errs += w
					if me.firstErr == nil {
						me.firstErr = err
					}
				case dedup:
					me.ops += w
					me.dedups++
				default:
					me.ops += w
				}
			}
		})
	}
	wg.Wait()
	st := roundStats{elapsed: time.Since(start), cpu: cpuTime() - cpuBefore}
	runtime.ReadMemStats(&after)
	st.mallocs = after.Mallocs - before.Mallocs
	for _, w := range workers {
		st.ops += w.ops
		st.errs += w.errs
		st.dups += w.dups
		st.dedups += w.dedups
		st.samples = append(st.samples, w.samples...)
		if st.firstErr == nil {
			st.firstErr = w.firstErr
		}
	}
	return st
}

// atLeast passes on records at or above a level only.
type atLeast struct {
	slog.Handler
	min slog.Level
}

func (h atLeast) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= h.min && h.Handler.Enabled(ctx, l)
}

func (h atLeast) WithAttrs(attrs []slog.Attr) slog.Handler {
	return atLeast{h.Handler.WithAttrs(attrs), h.min}
}

func (h atLeast) WithGroup(name string) slog.Handler {
	return atLeast{h.Handler.WithGroup(name), h.min}
}
