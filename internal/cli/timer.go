package cli

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/ctdispatch/ctdispatch/naming"
	"github.com/ctdispatch/ctdispatch/timers"
)

// timerJSON is the --json form of one timer.
type timerJSON struct {
	TimerID       string `json:"timer_id"`
	CloudTaskID   string `json:"cloud_task_id"`
	TaskName      string `json:"task_name"`
	Outcome       string `json:"outcome"`
	Due           string `json:"due"`
	FirstRecorded string `json:"first_recorded,omitempty"`
	Skipped       bool   `json:"skipped,omitempty"`
}

func newTimerCmd(env *Env) *cobra.Command {
	var conn connFlags
	var rf requestFlags
	var due, check, cancel string
	cmd := &cobra.Command{
		Use:   "timer --project P --location L --queue Q --run RUN --task TASK (--attempt N --due TIME | --check TIME) --url URL [flags]",
		Short: "Schedule a retry timer or a heartbeat check as a named Cloud Task, or cancel one",
		Long: `Schedule a retry timer or a heartbeat check as a named Cloud Task, or cancel one.

A retry timer (--due TIME, with the attempt it retries) is named
timer:retry:RUN:TASK:ATTEMPT:DUE_EPOCH; a heartbeat check (--check TIME) is
named timer:heartbeat:RUN:TASK:CHECK_EPOCH. Their Cloud Tasks IDs start
with t_ and the task fires at the due or check time. Times are RFC 3339 or
epoch seconds, named to the second; a time in the past fires at once, more
than 30 days ahead is refused. Repeating the command never creates a second
task.

--cancel TIMER_ID deletes the timer's task (already gone is a success) and
records it as cancelled.

--from FILE reads one JSON object per line, with the fields of
'ctdispatch dispatch --help' plus kind ("retry" or "heartbeat"), due and
check.

Output: one line per timer, "OUTCOME TIMER_ID TASK_NAME", or with --json
{"timer_id","cloud_task_id","task_name","outcome","due",...}.`,
		Example: `  ctdispatch timer --emulator localhost:8123 --project p --location europe-west1 --queue timers \
      --run run1 --task extract --attempt 2 --due 2026-03-01T12:30:00Z --url https://worker.example/retry --json
  ctdispatch timer --project p --location europe-west1 --queue timers \
      --run run1 --task extract --check 1772368200 --url https://worker.example/heartbeat --method GET
  ctdispatch timer --project p --location europe-west1 --queue timers --cancel timer:retry:run1:extract:2:1772368200`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			if cancel != "" {
				return cancelTimer(ctx, env, cmd, &conn, cancel)
			}
			def, err := rf.base("")
			if err != nil {
				return err
			}
			switch {
			case due != "" && check != "":
				return usagef("--due and --check exclude each other")
			case due != "":
				def.Kind, def.Due = "retry", due
			case check != "":
				def.Kind, def.Check = "heartbeat", check
			}
			if rf.from == "" {
				if def.Run == "" || def.Task == "" {
					return usagef("--run and --task are required (or --from FILE)")
				}
				if def.Kind == "" {
					return usagef("--due TIME (a retry timer) or --check TIME (a heartbeat) is required")
				}
				if def.URL == "" {
					return usagef("--url is required")
				}
			}
			d, err := conn.dispatcher(ctx, env)
			if err != nil {
				return err
			}
			defer d.Close(ctx)
			s := timers.New(d)
			one := func(ctx context.Context, l requestLine) (any, string, error) {
				req, err := l.timer()
				if err != nil {
					return nil, "", err
				}
				res, err := s.ScheduleTimer(ctx, req)
				if err != nil {
					return nil, "", err
				}
				text := fmt.Sprintf("%s %s %s", res.Outcome, res.TimerID, res.TaskName)
				return timerJSON{
					TimerID: res.TimerID, CloudTaskID: res.CloudTaskID, TaskName: res.TaskName, Outcome: string(res.Outcome),
					Due: formatTime(res.Due), FirstRecorded: formatTime(res.FirstRecorded), Skipped: res.Skipped,
				}, text, nil
			}
			err = runRequests(ctx, env, cmd.OutOrStdout(), &conn, &rf, def, one)
			if cerr := d.Close(ctx); err == nil && cerr != nil {
				err = cerr
			}
			return err
		},
	}
	conn.register(cmd, env)
	conn.registerModes(cmd, false)
	rf.register(cmd, false)
	f := cmd.Flags()
	f.StringVar(&due, "due", "", "due time of a retry timer (RFC 3339 or epoch seconds)")
	f.StringVar(&check, "check", "", "check time of a heartbeat (RFC 3339 or epoch seconds)")
	f.StringVar(&cancel, "cancel", "", "cancel the timer with this ID instead of scheduling one")
	return cmd
}

// timer turns a request line into a timer request.
func (l *requestLine) timer() (timers.TimerRequest, error) {
	var req timers.TimerRequest
	if l.ScheduleTime != "" {
		return req, usagef("schedule_time is not used by timers; give due or check")
	}
	task, err := l.task()
	if err != nil {
		return req, err
	}
	req = timers.TimerRequest{RunID: l.Run, TaskKey: l.Task, Task: task}
	var at string
	switch l.Kind {
	case "retry":
		req.Kind, at = naming.KindRetry, l.Due
		if req.Identity, err = l.identity(); err != nil {
			return req, err
		}
	case "heartbeat":
		req.Kind, at = naming.KindHeartbeat, l.Check
	default:
		return req, usagef("kind %q: want retry (with due) or heartbeat (with check)", l.Kind)
	}
	if req.At, err = parseTimeFlag(l.Kind+" time", at); err != nil {
		return req, err
	}
	return req, nil
}

func cancelTimer(ctx context.Context, env *Env, cmd *cobra.Command, conn *connFlags, id string) error {
	d, err := conn.dispatcher(ctx, env)
	if err != nil {
		return err
	}
	defer d.Close(ctx)
	res, err := timers.New(d).CancelTimer(ctx, id, "")
	if err != nil {
		return err
	}
	out := cmd.OutOrStdout()
	if conn.jsonOut {
		return json.NewEncoder(out).Encode(map[string]any{
			"timer_id": res.ID, "cloud_task_id": res.CloudTaskID, "task_name": res.TaskName,
			"outcome": "cancelled", "deleted": res.Deleted,
		})
	}
	state := "deleted"
	if !res.Deleted {
		state = "already gone"
	}
	fmt.Fprintf(out, "cancelled %s %s (%s)\n", res.ID, res.TaskName, state)
	return d.Close(ctx)
}
