package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/ctdispatch/ctdispatch/internal/console"
	"github.com/ctdispatch/ctdispatch/internal/demo"
)

func newDemoCmd(env *Env) *cobra.Command {
	var (
		opts        demo.Options
		keep        bool
		asJSON      bool
		consoleAddr string
		allowHosts  []string
	)
	cmd := &cobra.Command{
		Use: "demo",
		// Its --outbox is filled and emptied here: never $CTDISPATCH_OUTBOX.
		Annotations: map[string]string{scratchOutbox: "yes"},
		Short:       "Run ctdispatch end to end on this machine: emulator, worker, outbox",
		Long: `Run ctdispatch end to end with nothing but this repository.

The demo starts the in-repo Cloud Tasks emulator, a local HTTP worker that
checks the Idempotency-Key header and does each key's work once, and a
dispatcher writing a Parquet outbox to a local directory. It then dispatches
every task of several runs twice (as an orchestrator repeating itself after a
crash would), while the emulator makes a share of CreateTask calls fail after
creating the task; schedules retry and heartbeat timers, also twice; delivers
the tasks, moves the emulator's clock forward to fire the timers, and prints
what happened and how to query the outbox.

It finishes in seconds and removes what it made. With --keep the outbox stays
and the emulator keeps serving (Ctrl-C to stop) so you can explore both, and
the web console serves them on --console-addr (see "ctdispatch console").`,
		Example: `  ctdispatch demo
  ctdispatch demo --runs 10 --json
  ctdispatch demo --keep --outbox ./demo-outbox`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			opts.Keep = keep
			opts.Logger = env.Logger
			if isBucketURL(opts.OutboxDir) {
				return usagef("--outbox %s is a URL; the demo writes its outbox to a local directory", redact(opts.OutboxDir))
			}
			if err := opts.Validate(); err != nil {
				return asUsage(err)
			}
			sum, running, err := demo.Run(cmd.Context(), opts)
			if err != nil {
				return err
			}
			defer running.Close()
			out := cmd.OutOrStdout()
			if asJSON {
				enc := json.NewEncoder(out)
				enc.SetIndent("", "  ")
				if err := enc.Encode(sum); err != nil {
					return err
				}
			} else if err := printDemo(out, sum); err != nil {
				return err
			}
			if err := checkDemo(sum); err != nil {
				return err
			}
			if keep {
				fmt.Fprintf(env.Err, "emulator serving on %s (export %s=%s); Ctrl-C to stop\n",
					running.Emulator.Addr(), emulatorEnv, running.Emulator.Addr())
				if consoleAddr != "" {
					c, err := startConsole(cmd.Context(), console.Config{
						Emulator: running.Emulator.Addr(), EmulatorHTTP: running.Emulator.HTTPAddr(),
						Outbox: sum.OutboxDir, Logger: env.Logger, AllowHosts: allowHosts,
					}, consoleFlags{addr: "--console-addr", allowHost: "--console-allow-host"}, consoleAddr, env)
					if err != nil {
						return err
					}
					defer c.Close()
					printConsole(env.Err, c)
				}
				<-cmd.Context().Done()
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.IntVar(&opts.Runs, "runs", 3, "orchestration runs to dispatch (4 tasks each)")
	f.StringVar(&opts.OutboxDir, "outbox", "", "outbox directory (default: a temporary directory)")
	f.BoolVar(&keep, "keep", false, "keep the outbox and leave the emulator serving until interrupted")
	f.StringVar(&consoleAddr, "console-addr", console.DefaultAddr, "with --keep, serve the web console here (empty: no console)")
	f.StringArrayVar(&allowHosts, "console-allow-host", nil, "a host name (or name:port) the console may be reached by besides its address and localhost; required to bind it to every interface (repeatable)")
	f.Float64Var(&opts.CommitThenFailRate, "commit-then-fail", 0.25, "share of CreateTask calls that create the task but answer Unavailable (negative: none)")
	f.Uint64Var(&opts.Seed, "seed", 1, "seed of the injected faults")
	f.BoolVar(&asJSON, "json", false, "print the summary as one JSON object (snake_case keys; advanced_seconds in seconds)")
	return cmd
}

// checkDemo turns a broken promise into a failed command, so the demo is
// also a smoke test: one task per distinct ID, every task delivered.
func checkDemo(s demo.Summary) error {
	distinct := s.Runs*s.Tasks + 2*s.Runs
	switch {
	case s.TasksInQueueAfterDispatch != distinct:
		return fmt.Errorf("demo: %d tasks in the queue after dispatching, want %d (one per distinct ID)", s.TasksInQueueAfterDispatch, distinct)
	case s.Worker.Unique != distinct:
		return fmt.Errorf("demo: the worker did %d distinct pieces of work, want %d", s.Worker.Unique, distinct)
	case s.TasksLeft != 0 || s.Worker.Rejected != 0:
		return fmt.Errorf("demo: %d tasks left undelivered, %d deliveries rejected", s.TasksLeft, s.Worker.Rejected)
	}
	return nil
}

func printDemo(w io.Writer, s demo.Summary) error {
	p := &errWriter{w: w}
	dup := s.Dispatch.AlreadyExisted
	p.printf("ctdispatch demo: %d runs × %d tasks on the in-repo emulator, every call made twice\n\n", s.Runs, s.Tasks)
	p.printf("dispatches  %d calls → %d created, %d duplicates (%d answered by the outbox, %d by Cloud Tasks' ALREADY_EXISTS)\n",
		s.DispatchCalls, s.Dispatch.Created, dup, s.Dispatch.Skipped, dup-s.Dispatch.Skipped)
	p.printf("            %d CreateTask calls; %d were retries after a create that succeeded but answered Unavailable\n",
		s.Dispatch.CreateCalls, s.Dispatch.CreateCalls-(s.DispatchCalls-s.Dispatch.Skipped))
	p.printf("timers      %d calls → %d created, %d duplicates; fired after moving the clock %s\n",
		s.TimerCalls, s.Timers.Created, s.Timers.AlreadyExisted, s.Advanced)
	p.printf("queue       %d tasks after dispatching (one per distinct ID), %d left at the end\n",
		s.TasksInQueueAfterDispatch, s.TasksLeft)
	p.printf("worker      %d deliveries of %d attempts, %d distinct keys done once each, %d repeats acknowledged without redoing work, %d rejected\n",
		s.Worker.Deliveries, s.DeliveryAttempts, s.Worker.Unique, s.Worker.Repeats, s.Worker.Rejected)
	p.printf("            (cloudtasks/worker with its in-memory inbox, one process only; a service uses worker.NewSQLInbox. Tokens unchecked: the demo's tasks carry none)\n")
	p.printf("\n")
	self := selfCommand()
	if !s.Kept {
		// The directory is gone when the user reads this: name no command
		// that would read it.
		p.printf("outbox      removed at exit; run %s demo --keep to explore it\n", self)
		return p.err
	}
	p.printf("outbox      %s\n", s.OutboxDir)
	p.printf("  %s query --outbox %s --run run-1\n", self, s.OutboxDir)
	p.printf("  %s stats --outbox %s\n", self, s.OutboxDir)
	p.printf("  duckdb -c \"SELECT dispatch_id, cloud_task_id, status, processor_uuid FROM read_parquet('%s', hive_partitioning = true, union_by_name = true) ORDER BY dispatch_id, updated_at\"\n",
		filepath.Join(s.OutboxDir, "dispatch_outbox", "**", "*.parquet"))
	return p.err
}

// selfCommand is how the user can run this binary again: "go run
// ./cmd/ctdispatch" for a binary go run built in its cache (make demo), the
// name it was started by otherwise.
func selfCommand() string {
	exe, err := os.Executable()
	if err == nil && strings.Contains(exe, string(filepath.Separator)+"go-build") {
		return "go run ./cmd/ctdispatch"
	}
	if len(os.Args) > 0 && os.Args[0] != "" {
		return os.Args[0]
	}
	return "ctdispatch"
}

// errWriter keeps the first write error, so a report of many lines checks
// it once.
type errWriter struct {
	w   io.Writer
	err error
}

func (p *errWriter) printf(format string, args ...any) {
	if p.err == nil {
		_, p.err = fmt.Fprintf(p.w, format, args...)
	}
}
