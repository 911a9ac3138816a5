package cli

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/ctdispatch/ctdispatch/cloudtasks"
)

func newRelayCmd(env *Env) *cobra.Command {
	var conn connFlags
	var queues []string
	var once bool
	var interval time.Duration
	cmd := &cobra.Command{
		Use:   "relay --outbox postgres://… --project P --location L --queue Q [flags]",
		Short: "Create the tasks that committed transactions recorded (DispatchTx), until interrupted",
		Long: `Create the tasks that callers' transactions recorded in a PostgreSQL outbox
(DispatchTx and ScheduleTimerTx of package cloudtasks) once they committed,
and record each outcome: created, already_existed or failed; and carry out
the cancels they recorded (CancelTx).

Every dispatcher of a Go program on that database relays the intents of its
own queues already (Config.RelayQueues); this command is a relay alone, for
queues no such program serves or a process of its own. Several relays on
one database share the intents through claims (FOR UPDATE SKIP LOCKED), and
each task is created once: an intent whose ID moved on is dropped without a
call. The one-shot commands (dispatch, timer, recover) do not relay.

It relays the intents of --queues (default: --queue) in --project and
--location, looking every --interval, until interrupted (SIGINT, SIGTERM).
With --once it runs one pass and prints what it did: "N claimed: N created,
N already existed, N failed, N cancelled, N moved on, N errors", or with
--json one object {"claimed","created","already_existed","failed",
"cancelled","moved","errors"};
the exit status is then 1 when an intent could not be finished (it is left
for a later pass).

` + postgresURLHelp,
		Example: `  ctdispatch relay --outbox "$DATABASE_URL" --project my-proj --location europe-west1 --queue jobs
  ctdispatch relay --outbox "$DATABASE_URL" --project my-proj --location europe-west1 --queues jobs,reports --once --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !isPostgresURL(conn.outbox) {
				return usagef("--outbox %q is not a PostgreSQL URL; want postgres://…: only a PostgreSQL outbox records transactional dispatches", redact(conn.outbox))
			}
			if len(queues) == 0 && conn.queue != "" {
				queues = []string{conn.queue}
			}
			for _, req := range []struct{ name, v string }{{"--project", conn.project}, {"--location", conn.location}} {
				if req.v == "" {
					return usagef("%s is required", req.name)
				}
			}
			if len(queues) == 0 {
				return usagef("--queue or --queues is required: the queues whose intents this relay creates")
			}
			if interval <= 0 {
				return usagef("--interval %s must be positive", interval)
			}
			ctx := cmd.Context()
			sess, err := conn.connect(ctx, env, cloudtasks.Config{
				Project: conn.project, Location: conn.location, Queue: queues[0],
				RelayQueues: queues, RelayInterval: interval, NoRelay: once,
			}, "")
			if err != nil {
				return err
			}
			defer sess.close()
			if !once {
				fmt.Fprintf(env.Err, "relaying the intents of %d %s until interrupted\n", len(queues), plural(len(queues), "queue", "queues"))
				<-ctx.Done()
				return sess.close()
			}
			st, err := sess.d.Relay(ctx)
			if err != nil {
				return err
			}
			if err := sess.close(); err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if conn.jsonOut {
				err = json.NewEncoder(out).Encode(map[string]int{"claimed": st.Claimed, "created": st.Created,
					"already_existed": st.AlreadyExisted, "failed": st.Failed, "cancelled": st.Cancelled, "moved": st.Moved, "errors": st.Errors})
				if err != nil {
					return err
				}
			} else {
				fmt.Fprintf(out, "%d claimed: %d created, %d already existed, %d failed, %d cancelled, %d moved on, %d errors\n",
					st.Claimed, st.Created, st.AlreadyExisted, st.Failed, st.Cancelled, st.Moved, st.Errors)
			}
			if st.Errors > 0 {
				return fmt.Errorf("%d %s could not be finished (left for a later pass; -v logs why)", st.Errors, plural(st.Errors, "intent", "intents"))
			}
			return nil
		},
	}
	conn.register(cmd, env)
	f := cmd.Flags()
	f.StringSliceVar(&queues, "queues", nil, "queue IDs whose intents to relay, comma-separated (default: --queue)")
	f.BoolVar(&once, "once", false, "run one pass, print what it did and exit")
	f.DurationVar(&interval, "interval", cloudtasks.DefaultRelayInterval, "how often to look for committed intents")
	f.Lookup("outbox").Usage = "PostgreSQL URL of the outbox, postgres://… (required)"
	f.Lookup("json").Usage = "with --once: print the counts as one JSON object"
	return cmd
}
