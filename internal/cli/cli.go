package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime/debug"
	"strings"

	"github.com/spf13/cobra"

	"github.com/ctdispatch/ctdispatch/outbox/parquetbox"
)

// Env is everything a command may touch outside its arguments. Tests build
// one with buffers; main uses DefaultEnv.
type Env struct {
	// In is the standard input.
	In io.Reader
	// Out receives the command's result and nothing else, so it can be piped.
	Out io.Writer
	// Err receives errors, progress and logs.
	Err io.Writer
	// Logger is the structured logger handed to library code. Defaults to
	// discarding; --verbose replaces it with a debug-level text logger on
	// Err.
	Logger *slog.Logger
	// Getenv reads an environment variable. Defaults to os.Getenv.
	Getenv func(string) string
	// SetMemoryLimit sets the process's soft memory limit, as
	// runtime/debug.SetMemoryLimit does. A command that runs a dispatcher
	// over a file outbox, and compact, call it when GOMEMLIMIT is not set (see
	// outboxMemoryLimit). Nil, the default outside DefaultEnv, leaves
	// the limit alone, so in-process callers keep their own.
	SetMemoryLimit func(int64) int64
}

// DefaultEnv returns the environment of a real process.
func DefaultEnv() Env {
	return Env{In: os.Stdin, Out: os.Stdout, Err: os.Stderr, Getenv: os.Getenv, SetMemoryLimit: debug.SetMemoryLimit}
}

// Exit codes of Run, documented in the root help.
const (
	exitOK         = 0
	exitFailed     = 1
	exitUsage      = 2
	exitIncomplete = 3
	exitLost       = 4
)

// Run executes the CLI with args (without the program name) and returns the
// process exit code: 0 on success, 1 on a failed operation or no result, 2
// on a usage error, 3 when an answer was printed but may be incomplete
// because files were skipped or rows refused by export, 4 when compact
// stepped back from a unit another compaction committed first.
func Run(ctx context.Context, args []string, env Env) int {
	env = env.withDefaults()
	root := newRootCmd(&env)
	root.SetArgs(args)
	root.SetIn(env.In)
	root.SetOut(env.Out)
	root.SetErr(env.Err)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return exitOK
	}
	fmt.Fprintf(env.Err, "ctdispatch: %s\n", oneLine(err.Error()))
	var ue *usageError
	var ie *incompleteError
	var re *refusedError
	switch {
	case errors.As(err, &ue):
		return exitUsage
	case errors.As(err, &ie), errors.As(err, &re):
		return exitIncomplete
	case errors.Is(err, parquetbox.ErrUnitLost):
		return exitLost
	}
	return exitFailed
}

func (e Env) withDefaults() Env {
	if e.In == nil {
		e.In = strings.NewReader("")
	}
	if e.Out == nil {
		e.Out = io.Discard
	}
	if e.Err == nil {
		e.Err = io.Discard
	}
	if e.Getenv == nil {
		e.Getenv = func(string) string { return "" }
	}
	if e.Logger == nil {
		// Without -v the error line is the whole story: library warnings
		// (a failed call, a skipped file) are either the error itself or
		// summed up by the command.
		e.Logger = slog.New(slog.DiscardHandler)
	}
	return e
}

// usageError marks a mistake in how the command was called (exit 2).
type usageError struct{ err error }

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

func usagef(format string, args ...any) error {
	return &usageError{err: fmt.Errorf(format, args...)}
}

// asUsage marks err as a usage error unless it is nil or already one.
func asUsage(err error) error {
	var ue *usageError
	if err == nil || errors.As(err, &ue) {
		return err
	}
	return &usageError{err: err}
}

// usageArgs makes every positional-argument check of the command tree
// report a usage error (exit 2), and gives the commands that declare no
// check cobra.NoArgs, so a stray argument is never silently ignored.
func usageArgs(cmd *cobra.Command) {
	check := cmd.Args
	if check == nil {
		check = cobra.NoArgs
	}
	cmd.Args = func(c *cobra.Command, args []string) error { return asUsage(check(c, args)) }
	for _, sub := range cmd.Commands() {
		usageArgs(sub)
	}
}

// oneLine keeps error output to a single line, as scripts expect.
func oneLine(s string) string {
	return strings.Join(strings.Fields(strings.ReplaceAll(s, "\n", " ")), " ")
}

func newRootCmd(env *Env) *cobra.Command {
	var verbose bool
	root := &cobra.Command{
		Use:   "ctdispatch",
		Short: "Exactly-once dispatch to Google Cloud Tasks, with a Parquet record of every attempt",
		Long: `ctdispatch hands work to Google Cloud Tasks exactly once per logical attempt.

Every dispatch and timer has two IDs: a readable internal ID such as
dispatch:run1:extract:1, and the Cloud Tasks task ID derived from it by
hashing (d_… for dispatches, t_… for timers). The same internal ID always
names the same task, so repeating a call never creates a second task.

Start with:
  ctdispatch id dispatch:run1:extract:1      derive a Cloud Tasks ID
  ctdispatch id --json dispatch:run1:extract:1

Results go to stdout, errors to stderr as one line. Exit status: 0 success;
1 the operation failed or found nothing; 2 the command was called wrongly
(unknown command or flag, extra argument, bad flag value); 3 an answer was
printed but may be incomplete (query and stats skipped damaged or foreign
files, listed on stderr; export --once refused rows no dispatcher wrote,
reported on stderr); 4 compact lost a unit to another compaction and
stepped back (nothing of that unit changed).`,
		Version:                    versionString(),
		Args:                       rootArgs,
		SuggestionsMinimumDistance: 2,
		RunE:                       func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
		SilenceUsage:               true,
		SilenceErrors:              true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			if verbose {
				env.Logger = slog.New(slog.NewTextHandler(env.Err, &slog.HandlerOptions{Level: slog.LevelDebug}))
			}
			return checkStoreFlags(cmd, env)
		},
	}
	root.PersistentFlags().BoolVarP(&verbose, "verbose", "v", false, "log debug detail to stderr")
	root.SetVersionTemplate("ctdispatch {{.Version}}\n")
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &usageError{err: err} })
	// Each command lives in a file of its own; register it here.
	root.AddCommand(
		newDemoCmd(env),
		newIDCmd(env),
		newQueryCmd(env),
		newStatsCmd(env),
		newCompactCmd(env),
		newEmulatorCmd(env),
		newConsoleCmd(env),
		newDispatchCmd(env), newTimerCmd(env), newRecoverCmd(env),
		newChaosCmd(env),
		newBenchCmd(env),
		newWorkerCmd(env),
		newMigrateCmd(env), newRetainCmd(env), newImportCmd(env), newRelayCmd(env), newExportCmd(env),
		newVersionCmd(),
	)
	documentOutboxEnv(root)
	// The root's own check (unknown command) is set above; the
	// subcommands' checks are wrapped to exit 2.
	for _, sub := range root.Commands() {
		usageArgs(sub)
	}
	return root
}

// rootArgs refuses an unknown command as a usage error, with cobra's
// suggestion when there is one.
func rootArgs(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		return nil
	}
	msg := fmt.Sprintf("unknown command %q for %q", args[0], cmd.Name())
	if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
		msg += "; did you mean " + strings.Join(s, ", ") + "?"
	}
	return usagef("%s", msg)
}
