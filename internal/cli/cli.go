package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/spf13/cobra"
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
	// Logger is the structured logger handed to library code. Defaults to a
	// text logger on Err at warn level (info with --verbose).
	Logger *slog.Logger
	// Getenv reads an environment variable. Defaults to os.Getenv.
	Getenv func(string) string
}

// DefaultEnv returns the environment of a real process.
func DefaultEnv() Env {
	return Env{In: os.Stdin, Out: os.Stdout, Err: os.Stderr, Getenv: os.Getenv}
}

// Run executes the CLI with args (without the program name) and returns the
// process exit code: 0 on success, 1 on a failed operation or no result, 2
// on a usage error.
func Run(ctx context.Context, args []string, env Env) int {
	env = env.withDefaults()
	root := newRootCmd(&env)
	root.SetArgs(args)
	root.SetIn(env.In)
	root.SetOut(env.Out)
	root.SetErr(env.Err)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return 0
	}
	fmt.Fprintf(env.Err, "ctdispatch: %s\n", oneLine(err.Error()))
	var ue *usageError
	if errors.As(err, &ue) {
		return 2
	}
	return 1
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
		e.Logger = slog.New(slog.NewTextHandler(e.Err, &slog.HandlerOptions{Level: slog.LevelWarn}))
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
  ctdispatch id --json dispatch:run1:extract:1`,
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRun: func(cmd *cobra.Command, _ []string) {
			if verbose {
				env.Logger = slog.New(slog.NewTextHandler(env.Err, &slog.HandlerOptions{Level: slog.LevelDebug}))
			}
		},
	}
	root.PersistentFlags().BoolVarP(&verbose, "verbose", "v", false, "log debug detail to stderr")
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
	)
	return root
}
