package cli

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/ctdispatch/ctdispatch/internal/chaos"
)

// chaosLongEnv scales the chaos suite up, like --long.
const chaosLongEnv = "CTDISPATCH_CHAOS_LONG"

func newChaosCmd(env *Env) *cobra.Command {
	var opts chaos.Options
	var binary string
	cmd := &cobra.Command{
		Use:   "chaos [--seed N] [--long] [--json] [--only SCENARIO]...",
		Short: "Run the chaos suite: processes, kills, faults and bad input against an in-process emulator",
		Long: `Run the chaos suite: processes, kills, faults and bad input against an in-process emulator.

Scenarios:
  herd       three ctdispatch processes (own processor UUIDs) dispatch the
             same 10,000 requests on one outbox and one emulator: exactly
             10,000 tasks, one "created" per ID, every record terminal
  crash      a dispatching process is SIGKILLed at 20 random points, each
             followed by recover and a re-run: nothing acknowledged is
             lost, no duplicate task, every file readable
  faults     the library dispatches under transient errors, latency and
             commit-then-fail at once: every dispatch ends exactly once
  bad-input  malformed IDs, payloads over 1 MiB, timers beyond 30 days,
             bad URLs, an unknown queue and damaged outbox files, through
             the library and the CLI: each refused with an error naming
             the value or rule, nothing accepted lost
  busy-day   three long-running writers fed 3,000 requests over a 30 s day
             and two processes compacting every few seconds share one
             root, with SIGKILLs of both; on a directory, and on a bucket
             with --gcs-emulator: after a final compaction every answered
             ID has exactly one row; reports the kills that landed during
             a compaction and the bytes compactions wrote
  e2e        on a Parquet directory and on PostgreSQL (started here from
             /usr/lib/postgresql/*/bin), three orchestrator processes
             dispatch, schedule and cancel 150 logical attempts while the
             emulator delivers them with OIDC tokens to three worker
             processes (SQL inbox, effect row in its transaction); faults at
             every hop (kills, stops with Recover by another process, lost
             replies, doubled, lost, delayed and reset deliveries and a
             2xx withheld past the dispatch deadline, workers killed
             around their commit, dropped database connections,
             clock offsets); a checker reads the JSON-lines history: no lost
             or duplicate effect, every indeterminate call resolved

The child processes are this executable. Each scenario prints one line,
"PASS|FAIL SCENARIO: what was tried; what held", and the run ends with
"N passed, N failed". The exit status is 1 when a scenario failed. --long
(or $` + chaosLongEnv + `=1) multiplies the sizes by 5; --seed repeats a run.`,
		Example: `  ctdispatch chaos
  ctdispatch chaos --seed 42 --only crash --kills 50
  ctdispatch chaos --long --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if env.Getenv(chaosLongEnv) == "1" {
				opts.Long = true
			}
			if binary == "" {
				exe, err := os.Executable()
				if err != nil {
					return fmt.Errorf("find the ctdispatch executable for the child processes: %w", err)
				}
				binary = exe
			}
			opts.Binary = binary
			opts.Out = cmd.OutOrStdout()
			opts.Logger = env.Logger
			rep, err := chaos.Run(cmd.Context(), opts)
			if errors.Is(err, chaos.ErrInvalidOptions) {
				return usagef("%v", err)
			}
			if err != nil {
				return err
			}
			if !rep.OK() {
				return fmt.Errorf("chaos: %s (seed %d)", rep.Summary(), rep.Seed)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.Uint64Var(&opts.Seed, "seed", 0, "seed for kill points, fault plans and batch order (default: from the clock; printed)")
	f.BoolVar(&opts.Long, "long", false, "5 times the requests and kills (also $"+chaosLongEnv+"=1)")
	f.BoolVar(&opts.JSON, "json", false, "one JSON object per scenario and a closing summary object")
	f.StringSliceVar(&opts.Only, "only", nil, "run only these scenarios: "+strings.Join(chaos.Scenarios, ", ")+" (repeatable or comma-separated)")
	f.IntVar(&opts.Requests, "requests", 0, "requests per scenario instead of its default")
	f.IntVar(&opts.Kills, "kills", 0, "SIGKILLs in the crash scenario instead of 20")
	f.StringVar(&opts.GCSEmulator, "gcs-emulator", env.Getenv("STORAGE_EMULATOR_HOST"), "host:port of a Cloud Storage emulator (go run ./internal/testtools/fakegcs) on which busy-day also runs with a bucket root (default $STORAGE_EMULATOR_HOST)")
	f.StringVar(&opts.Dir, "dir", "", "work directory for outboxes and request files (default: a temporary directory)")
	f.BoolVar(&opts.Keep, "keep", false, "leave the work directory behind")
	f.StringVar(&binary, "binary", "", "ctdispatch executable for the child processes (default: this one)")
	cmd.AddCommand(newChaosE2EChildCmd(env))
	return cmd
}

// newChaosE2EChildCmd is the e2e scenario's child process (an
// orchestrator, a Recover pass or a worker), configured through
// $CTDISPATCH_E2E_CHILD by the scenario that starts it; not for users.
func newChaosE2EChildCmd(env *Env) *cobra.Command {
	return &cobra.Command{
		Use:    "e2e-child",
		Short:  "A child process of the e2e chaos scenario (started by it)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg := env.Getenv(chaos.E2EChildEnv)
			if cfg == "" {
				return usagef("$%s is not set: this command is started by `ctdispatch chaos --only e2e`", chaos.E2EChildEnv)
			}
			return chaos.RunE2EChild(cmd.Context(), cfg, cmd.OutOrStdout())
		},
	}
}
