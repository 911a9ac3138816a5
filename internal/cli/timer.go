package cli

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/ctdispatch/ctdispatch/cloudtasks"
	"github.com/ctdispatch/ctdispatch/naming"
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
		Use:   "timer --project P --location L --queue Q --run RUN --task TASK (--attempt N|--key K|--unique) --due TIME --url URL [flags]\n  ctdispatch timer ... --check TIME --url URL [flags]\n  ctdispatch timer ... --cancel TIMER_ID",
		Short: "Schedule a retry timer or a heartbeat check as a named Cloud Task, or cancel one",
		Long: `Schedule a retry timer or a heartbeat check as a named Cloud Task, or cancel one.

A retry timer (--due TIME, with exactly one of --attempt N, --key K or
--unique for the attempt the timer starts: the one after the failed
attempt, so --attempt 2 once attempt 1 failed) is named
timer:retry:RUN:TASK:ATTEMPT:DUE_EPOCH; a heartbeat check (--check TIME),
which has no attempt slot, is named timer:heartbeat:RUN:TASK:CHECK_EPOCH.
Their Cloud Tasks IDs start with t_ and the task fires at the due or check
time. Times are RFC 3339 or epoch seconds, named to the second; a time in
the past fires at once, more than 30 days ahead is refused. Repeating the
command with the same due or check time never creates a second task: keep
the failure time a due time is computed from, rather than computing it
from the time of the call.

--cancel TIMER_ID deletes the timer's task (already gone is a success) and
records it as cancelled. An ID that neither Cloud Tasks nor the outbox knows
prints not_found, records nothing and exits 1.

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
			def, err := rf.base(cmd, "")
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
				if _, err := def.timer(); err != nil {
					return err
				}
			}
			sess, err := conn.dispatcher(ctx, env, true)
			if err != nil {
				return err
			}
			defer sess.close()
			s := sess.d
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
			if cerr := sess.close(); err == nil && cerr != nil {
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
func (l *requestLine) timer() (cloudtasks.TimerRequest, error) {
	var req cloudtasks.TimerRequest
	if l.ScheduleTime != "" {
		return req, usagef("schedule_time is not used by timers; give due or check")
	}
	task, err := l.task()
	if err != nil {
		return req, err
	}
	req = cloudtasks.TimerRequest{RunID: l.Run, TaskKey: l.Task, Task: task}
	var at string
	switch l.Kind {
	case "retry":
		req.Kind, at = naming.KindRetry, l.Due
		if req.Next, err = l.identity(); err != nil {
			return req, err
		}
	case "heartbeat":
		req.Kind, at = naming.KindHeartbeat, l.Check
		if err := l.noIdentity("a heartbeat check"); err != nil {
			return req, err
		}
	default:
		return req, usagef("kind %q: want retry (with due) or heartbeat (with check)", l.Kind)
	}
	if req.At, err = parseTimeFlag(l.Kind+" time", at); err != nil {
		return req, err
	}
	return req, nil
}

func cancelTimer(ctx context.Context, env *Env, cmd *cobra.Command, conn *connFlags, id string) error {
	sess, err := conn.dispatcher(ctx, env, false)
	if err != nil {
		return err
	}
	defer sess.close()
	// The queue is passed only when named: the library takes the queue
	// the outbox recorded, and refuses a named one that differs from it.
	queue := ""
	if cmd.Flags().Changed("queue") {
		queue = conn.queue
	}
	res, err := sess.d.CancelTimer(ctx, id, queue)
	if err != nil {
		return err
	}
	out := cmd.OutOrStdout()
	outcome, state := "cancelled", "deleted"
	notFound := res.Outcome == cloudtasks.CancelUnknown
	switch {
	case notFound:
		outcome = "not_found"
	case res.Outcome == cloudtasks.CancelAlreadyGone:
		state = "already gone"
	}
	if conn.jsonOut {
		err = json.NewEncoder(out).Encode(map[string]any{
			"timer_id": res.ID, "cloud_task_id": res.CloudTaskID, "task_name": res.TaskName,
			"outcome": outcome, "deleted": res.Outcome == cloudtasks.CancelDeleted,
		})
	} else if notFound {
		_, err = fmt.Fprintf(out, "not_found %s %s\n", res.ID, res.TaskName)
	} else {
		_, err = fmt.Fprintf(out, "cancelled %s %s (%s)\n", res.ID, res.TaskName, state)
	}
	if err != nil {
		return err
	}
	if notFound {
		where := "the outbox " + redact(conn.outbox)
		if conn.outbox == "" {
			where = "an outbox (none given: --outbox)"
		}
		return fmt.Errorf("timer %s not found: no task %s in Cloud Tasks and no record in %s; nothing recorded", res.ID, res.TaskName, where)
	}
	return sess.close()
}
