package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/ctdispatch/ctdispatch/naming"
)

// idJSON is the --json form of an ID: both IDs and every part, so scripts
// never have to parse the internal ID themselves.
type idJSON struct {
	InternalID  string `json:"internal_id"`
	CloudTaskID string `json:"cloud_task_id"`
	Kind        string `json:"kind"`
	RunID       string `json:"run_id"`
	TaskKey     string `json:"task_key"`
	Attempt     string `json:"attempt,omitempty"`
	DueEpoch    *int64 `json:"due_epoch,omitempty"`
	DueAt       string `json:"due_at,omitempty"`
	CheckEpoch  *int64 `json:"check_epoch,omitempty"`
	CheckAt     string `json:"check_at,omitempty"`
}

func toIDJSON(id naming.ID) idJSON {
	out := idJSON{
		InternalID:  id.String(),
		CloudTaskID: id.CloudTaskID(),
		Kind:        id.Kind().String(),
		RunID:       id.RunID(),
		TaskKey:     id.TaskKey(),
		Attempt:     id.Attempt(),
	}
	epoch := id.Epoch()
	switch id.Kind() {
	case naming.KindRetry:
		out.DueEpoch, out.DueAt = &epoch, id.Time().Format(time.RFC3339)
	case naming.KindHeartbeat:
		out.CheckEpoch, out.CheckAt = &epoch, id.Time().Format(time.RFC3339)
	}
	return out
}

// printID writes id as JSON, or as its Cloud Tasks ID alone (bare), or as
// both IDs separated by a tab.
func printID(w io.Writer, id naming.ID, asJSON, bare bool) error {
	switch {
	case asJSON:
		enc := json.NewEncoder(w)
		return enc.Encode(toIDJSON(id))
	case bare:
		_, err := fmt.Fprintln(w, id.CloudTaskID())
		return err
	default:
		_, err := fmt.Fprintf(w, "%s\t%s\n", id.String(), id.CloudTaskID())
		return err
	}
}

func newIDCmd(_ *Env) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "id [--json] INTERNAL_ID",
		Short: "Derive the Cloud Tasks task ID of an internal ID",
		Long: `Derive the Cloud Tasks task ID of an internal ID.

An internal ID has one of three forms:
  dispatch:{run_id}:{task_key}:{attempt}
  timer:retry:{run_id}:{task_key}:{attempt}:{due_epoch}
  timer:heartbeat:{run_id}:{task_key}:{check_epoch}

run_id and task_key are 1 to 100 characters from [A-Za-z0-9._-]; attempt is
1 to 64 such characters, and a number has no leading zeros; epochs are whole
seconds since 1970 without leading zeros.

The task ID is "d_" (dispatch) or "t_" (timer) followed by the first 26
characters of the lowercase, unpadded base32 encoding of SHA-256 of the
internal ID. With one argument the task ID is printed alone; the
subcommands build the internal ID from flags and print both IDs.`,
		Example: `  ctdispatch id dispatch:run1:extract:1
  ctdispatch id --json timer:retry:run1:extract:1:1705340400
  ctdispatch id dispatch --run run1 --task extract --attempt 1
  ctdispatch id retry --run run1 --task extract --attempt 1 --due 2024-01-15T17:40:00Z
  ctdispatch id heartbeat --run run1 --task extract --check 1705340460`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usagef("id takes one internal ID (or a subcommand: dispatch, retry, heartbeat); got %d arguments", len(args))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := naming.Parse(args[0])
			if err != nil {
				return err
			}
			return printID(cmd.OutOrStdout(), id, asJSON, true)
		},
	}
	cmd.PersistentFlags().BoolVar(&asJSON, "json", false, "print one JSON object with both IDs and every part")
	cmd.AddCommand(
		newIDPartsCmd(&asJSON, naming.KindDispatch),
		newIDPartsCmd(&asJSON, naming.KindRetry),
		newIDPartsCmd(&asJSON, naming.KindHeartbeat),
	)
	return cmd
}

// idFlags are the parts of an internal ID given as flags.
type idFlags struct {
	run, task, attempt, key string
	unique                  bool
	at                      string
}

// newIDPartsCmd builds "id dispatch", "id retry" or "id heartbeat".
func newIDPartsCmd(asJSON *bool, kind naming.Kind) *cobra.Command {
	var f idFlags
	short := map[naming.Kind]string{
		naming.KindDispatch:  "Build a dispatch ID from its parts and print both IDs",
		naming.KindRetry:     "Build a retry-timer ID from its parts and print both IDs",
		naming.KindHeartbeat: "Build a heartbeat-check ID from its parts and print both IDs",
	}[kind]
	cmd := &cobra.Command{
		Use:   kind.String(),
		Short: short,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			id, err := f.build(kind)
			if err != nil {
				return err
			}
			return printID(cmd.OutOrStdout(), id, *asJSON, false)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.run, "run", "", "run ID (required)")
	fl.StringVar(&f.task, "task", "", "task key (required)")
	if kind != naming.KindHeartbeat {
		attemptHelp := "attempt number"
		if kind == naming.KindRetry {
			attemptHelp = "number of the attempt the timer starts (the one after the failed attempt)"
		}
		fl.StringVar(&f.attempt, "attempt", "", attemptHelp)
		fl.StringVar(&f.key, "key", "", "caller idempotency key, hashed into the attempt slot")
		fl.BoolVar(&f.unique, "unique", false, "a fresh UUIDv7 attempt: never deduplicated")
	}
	switch kind {
	case naming.KindRetry:
		fl.StringVar(&f.at, "due", "", "due time: RFC 3339 or seconds since the epoch (required)")
	case naming.KindHeartbeat:
		fl.StringVar(&f.at, "check", "", "check time: RFC 3339 or seconds since the epoch (required)")
	}
	return cmd
}

func (f idFlags) build(kind naming.Kind) (naming.ID, error) {
	if f.run == "" || f.task == "" {
		return naming.ID{}, usagef("--run and --task are required")
	}
	var identity naming.Identity
	if kind != naming.KindHeartbeat {
		var err error
		if identity, err = f.identity(); err != nil {
			return naming.ID{}, err
		}
	}
	switch kind {
	case naming.KindDispatch:
		return naming.NewDispatch(f.run, f.task, identity)
	case naming.KindRetry:
		due, err := parseTimeFlag("--due", f.at)
		if err != nil {
			return naming.ID{}, err
		}
		return naming.NewRetryTimer(f.run, f.task, identity, due)
	default:
		check, err := parseTimeFlag("--check", f.at)
		if err != nil {
			return naming.ID{}, err
		}
		return naming.NewHeartbeat(f.run, f.task, check)
	}
}

// identity is the identity the flags choose: exactly one of --attempt,
// --key and --unique.
func (f idFlags) identity() (naming.Identity, error) {
	set := 0
	for _, on := range []bool{f.attempt != "", f.key != "", f.unique} {
		if on {
			set++
		}
	}
	if set != 1 {
		return naming.Identity{}, usagef("give exactly one of --attempt N, --key KEY or --unique")
	}
	switch {
	case f.key != "":
		return naming.CallerKey(f.key), nil
	case f.unique:
		return naming.Unique(), nil
	}
	n, err := parseAttemptNumber(f.attempt)
	if err != nil {
		return naming.Identity{}, usagef("--attempt %q is not an attempt number; allowed: 0 to 18446744073709551615 without leading zeros (a caller key goes in --key)", f.attempt)
	}
	return naming.Attempt(n), nil
}
