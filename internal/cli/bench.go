package cli

import (
	"errors"
	"fmt"
	"os"
	"runtime/pprof"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/ctdispatch/ctdispatch/cloudtasks"
	"github.com/ctdispatch/ctdispatch/internal/bench"
)

// benchFlags maps bench.Config fields to the flags that set them, so a
// configuration error names what the user typed.
var benchFlags = map[string]string{
	"Modes": "--mode", "Concurrency": "--concurrency", "Count": "--count", "Duration": "--duration",
	"Rounds": "--rounds", "PayloadSize": "--payload-size", "DuplicateRatio": "--duplicate-ratio",
	"FaultRate": "--fault-rate", "CommitThenFailRate": "--commit-then-fail-rate", "EmulatorAddr": "--emulator", "EmulatorCommand": "--emulator-process",
	"Latency": "--latency", "BatchSize": "--batch-size", "BatchInFlight": "--batch-in-flight",
}

// benchRuleWords rewrites the field names a rule mentions as flags.
var benchRuleWords = strings.NewReplacer("Duration", "--duration", "Rounds", "--rounds")

func newBenchCmd(env *Env) *cobra.Command {
	var (
		cfg             bench.Config
		modes           string
		payloadSize     int
		jsonOut         bool
		cpuProfile      string
		emulatorProcess bool
	)
	cmd := &cobra.Command{
		Use: "bench [--mode all] [--count N | --duration D] [--concurrency 64]",
		// Its --outbox is filled and emptied here: never $CTDISPATCH_OUTBOX.
		Annotations: map[string]string{scratchOutbox: "yes"},
		Short:       "Measure Dispatch, ScheduleTimer and naming against bare CreateTask",
		Long: `Measure, in one process and one run, the calls of each mode against the
same emulator at the same concurrency, in alternating rounds so that other
load on the machine hits every mode alike:

  create-bare        CreateTask through the official client with a
                     deterministic name: the baseline
  batch-bare         BatchCreateTasks through the official client, one
                     request of --batch-size tasks in flight: the baseline
                     of dispatch-batched
  dispatch           Dispatch in the default (overlapped) mode: the pending
                     record's fsync runs beside CreateTask
  dispatch-strict    Dispatch whose outcome is fsynced before it returns
  dispatch-batched   dispatch with --batch: concurrent calls share
                     BatchCreateTasks requests, up to --batch-in-flight
                     per queue at once
  interval           Dispatch, outbox synced every 100ms
  memory             Dispatch without an outbox directory
  timer              ScheduleTimer in the default mode
  naming             naming.NewDispatch and CloudTaskID alone

It prints one row per mode: successful calls, errors, calls per second,
p50 and p99 latency, heap allocations and CPU seconds (user and system,
from the process's rusage) per call or per 1,000 calls (of the whole
process, so with the in-process emulator they include its side of each
RPC), the throughput ratio against create-bare and, for
dispatch-batched, against batch-bare. --json prints the same as JSON.
--latency adds a delay to every emulator call, closer to the real service.
See BENCHMARKS.md for measured figures.

By default the emulator runs in-process with delivery disabled and the
outboxes live in a temporary directory removed afterwards. --emulator
points at a running one instead (start it with --no-delivery), and
--emulator-process starts one as a child process of this binary: then the
CPU figures are the client side's alone. Fault rates and latency need the
in-process emulator. A dispatch mode's CPU includes opening its
dispatcher and closing it (the final flush to Parquet).`,
		Example: `  ctdispatch bench
  ctdispatch bench --mode create-bare,dispatch,dispatch-strict --duration 20s --json
  ctdispatch bench --mode create-bare,batch-bare,dispatch-batched --latency 10ms --concurrency 64
  ctdispatch bench --duplicate-ratio 0.1 --fault-rate 0.05 --commit-then-fail-rate 0.01`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var err error
			if cfg.Modes, err = bench.ParseModes(modes); err != nil {
				return benchUsage(err)
			}
			switch {
			case payloadSize < 0:
				return usagef("--payload-size %d must not be negative", payloadSize)
			case payloadSize == 0:
				cfg.PayloadSize = -1 // no body
			default:
				cfg.PayloadSize = payloadSize
			}
			// Zero means "default" in bench.Config; on the command line the
			// defaults are spelled out, so a zero is a mistake.
			switch {
			case cfg.Concurrency == 0:
				return usagef("--concurrency 0 must be at least 1")
			case cfg.Rounds == 0:
				return usagef("--rounds 0 must be at least 1")
			case cfg.BatchInFlight == 0:
				return usagef("--batch-in-flight 0 must be at least 1")
			case cmd.Flags().Changed("count") && cfg.Count == 0:
				return usagef("--count 0 must be at least 1")
			}
			if cmd.Flags().Changed("duration") && cfg.Duration == 0 {
				return usagef("--duration 0s must be positive")
			}
			// One line per round on stderr, so a long run shows it is alive;
			// stdout keeps only the report.
			cfg.Progress = func(round int, m bench.Mode, ops, errs int64, elapsed time.Duration) {
				fmt.Fprintf(env.Err, "round %d/%d  %-16s %7d ops  %5d errors  %9.0f ops/s\n", round, cfg.Rounds, m, ops, errs, float64(ops)/elapsed.Seconds())
			}
			if emulatorProcess {
				self, err := os.Executable()
				if err != nil {
					return fmt.Errorf("bench: --emulator-process: find this binary: %w", err)
				}
				cfg.EmulatorCommand = []string{self, "emulator"}
			}
			if cpuProfile != "" {
				stop, err := startCPUProfile(cpuProfile)
				if err != nil {
					return err
				}
				defer stop()
			}
			rep, err := bench.Run(cmd.Context(), cfg, env.Logger)
			if err != nil {
				return benchUsage(err)
			}
			if jsonOut {
				return rep.WriteJSON(cmd.OutOrStdout())
			}
			return rep.WriteTable(cmd.OutOrStdout())
		},
	}
	f := cmd.Flags()
	f.StringVar(&modes, "mode", "all", "modes to measure, comma-separated: all, create-bare, batch-bare, dispatch, dispatch-strict, dispatch-batched, interval, memory, timer, naming")
	f.IntVar(&cfg.Concurrency, "concurrency", bench.DefaultConcurrency, "concurrent callers per mode")
	f.IntVar(&cfg.Count, "count", 0, "calls per mode over all rounds (default 20000 unless --duration)")
	f.DurationVar(&cfg.Duration, "duration", 0, "wall time per mode over all rounds, instead of --count")
	f.IntVar(&cfg.Rounds, "rounds", bench.DefaultRounds, "alternating rounds per mode")
	f.IntVar(&payloadSize, "payload-size", bench.DefaultPayloadSize, "task body in bytes (a JSON object; 0: no body)")
	f.Float64Var(&cfg.DuplicateRatio, "duplicate-ratio", 0, "fraction of calls, in [0, 1), that repeat an earlier call's ID")
	f.Float64Var(&cfg.FaultRate, "fault-rate", 0, "fraction of CreateTask calls the in-process emulator fails with UNAVAILABLE")
	f.Float64Var(&cfg.CommitThenFailRate, "commit-then-fail-rate", 0, "fraction of CreateTask calls the in-process emulator carries out, then fails with UNAVAILABLE")
	f.Uint64Var(&cfg.Seed, "seed", bench.DefaultSeed, "seed of duplicate choices and fault decisions")
	f.StringVar(&cfg.EmulatorAddr, "emulator", "", "host:port of a running emulator (default: one in-process, delivery disabled)")
	f.BoolVar(&emulatorProcess, "emulator-process", false, "start the emulator as a child process of this binary, so the CPU figures are the client side's alone")
	f.StringVar(&cfg.OutboxDir, "outbox", "", "directory for the dispatch modes' outboxes, kept afterwards (default: a temporary directory, removed), or a PostgreSQL URL (postgres://…; a schema per mode, dropped and re-created)")
	f.DurationVar(&cfg.Latency, "latency", 0, "delay the in-process emulator adds to every call, e.g. 10ms")
	f.IntVar(&cfg.BatchInFlight, "batch-in-flight", cloudtasks.DefaultBatchInFlight, "dispatch-batched: most requests in flight per queue")
	f.IntVar(&cfg.BatchSize, "batch-size", 0, "tasks per batch-bare request, 1 to 100 (default: --concurrency, at most 100)")
	f.BoolVar(&jsonOut, "json", false, "print the results as JSON")
	f.StringVar(&cpuProfile, "cpuprofile", "", "write a CPU profile of the run to this file (read it with go tool pprof)")
	return cmd
}

// benchUsage turns a configuration error into a usage error (exit 2) that
// names the flag; other errors pass through.
func benchUsage(err error) error {
	var ce *bench.ConfigError
	if !errors.As(err, &ce) {
		return err
	}
	flag, ok := benchFlags[ce.Field]
	if !ok {
		flag = ce.Field
	}
	return usagef("%s %s %s", flag, ce.Value, benchRuleWords.Replace(ce.Rule))
}

// startCPUProfile profiles the process into path until stop is called.
func startCPUProfile(path string) (stop func(), err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("--cpuprofile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("--cpuprofile: %w", err)
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}, nil
}
