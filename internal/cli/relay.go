package cli

import (
	"context"
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
	var f relayFlags
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
--location until interrupted. It listens for the notification each
transaction that records an intent sends when it commits (LISTEN, on one
connection of its own, made again when it drops), and so creates the task
at the commit; it also looks every --interval, for what a lost
notification did not announce (a restarted server, a pooler in transaction
mode, which delivers none). --listen=false only looks every --interval.
An idle relay runs one statement per --interval.

SIGINT or SIGTERM drains it: it claims nothing more, releases the intents it
claimed and did not start (another relay takes them at once), lets the
calls in flight finish for up to --drain-timeout and exits 0. Past that
bound it exits 1 naming the intents still in flight: they stay claimed for
--claim, after which another relay takes them (Recover does not).

With --once it runs one pass and prints what it did: "N claimed: N created,
N already existed, N failed, N cancelled, N moved on, N errors", or with
--json one object {"claimed","created","already_existed","failed",
"cancelled","moved","errors"};
the exit status is then 1 when an intent could not be finished (it is left
for a later pass).

` + postgresURLHelp,
		Example: `  ctdispatch relay --outbox "$DATABASE_URL" --project my-proj --location europe-west1 --queue jobs
  ctdispatch relay --outbox "$DATABASE_URL" --project my-proj --location europe-west1 --queues jobs,reports --once --json
  ctdispatch relay --outbox "$DATABASE_URL" --project my-proj --location europe-west1 --queue jobs --concurrency 64 --drain-timeout 20s`,
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
			cfg, err := f.config(cmd)
			if err != nil {
				return err
			}
			cfg.Project, cfg.Location, cfg.Queue = conn.project, conn.location, queues[0]
			cfg.RelayQueues, cfg.NoRelay = queues, once
			conn.listen = f.listen && !once
			ctx := cmd.Context()
			sess, err := conn.connect(ctx, env, cfg, "")
			if err != nil {
				return err
			}
			defer sess.close()
			if !once {
				fmt.Fprintf(env.Err, "relaying the intents of %d %s until interrupted\n", len(queues), plural(len(queues), "queue", "queues"))
				<-ctx.Done()
				fmt.Fprintf(env.Err, "stopping: releasing the intents not started, finishing the calls in flight (at most --drain-timeout %s)\n", f.drain)
				// The drain outlives the signal that asked for it; the
				// dispatcher bounds it by RelayDrainTimeout, and the rest
				// of the close (flush, export) gets a few seconds more.
				sess.ctx, sess.cancel = context.WithTimeout(context.WithoutCancel(ctx), f.drain+closeGrace)
				if err := sess.close(); err != nil {
					return err
				}
				fmt.Fprintln(env.Err, "stopped: nothing left claimed")
				return nil
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
	fl := cmd.Flags()
	fl.StringSliceVar(&queues, "queues", nil, "queue IDs whose intents to relay, comma-separated (default: --queue)")
	fl.BoolVar(&once, "once", false, "run one pass, print what it did and exit")
	f.register(cmd)
	fl.Lookup("outbox").Usage = "PostgreSQL URL of the outbox, postgres://… (required)"
	fl.Lookup("json").Usage = "with --once: print the counts as one JSON object"
	return cmd
}

// closeGrace is what a relay's close gets beyond --drain-timeout: the
// release of what it could not finish, the outbox's flush.
const closeGrace = 5 * time.Second

// relayFlags are the relay's own flags.
type relayFlags struct {
	listen      bool
	interval    time.Duration
	drain       time.Duration
	claim       time.Duration
	concurrency int
}

func (f *relayFlags) register(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.BoolVar(&f.listen, "listen", true, "wake on the notification of each commit that records an intent (LISTEN on a connection of its own); false: only look every --interval")
	fl.DurationVar(&f.interval, "interval", cloudtasks.DefaultRelayPollInterval,
		"how often to look for committed intents when no notification comes (default 1s; "+cloudtasks.DefaultRelayInterval.String()+" with --listen=false)")
	fl.DurationVar(&f.drain, "drain-timeout", cloudtasks.DefaultRelayDrainTimeout, "on SIGINT or SIGTERM: how long the calls in flight may finish before it exits 1 naming those left")
	fl.DurationVar(&f.claim, "claim", 0, "how long a claim on a batch of intents keeps other relays off it, and how long a dead relay's intents wait (default 2 × the retries' 1m + 1m: 3m; at least 1m)")
	fl.IntVar(&f.concurrency, "concurrency", cloudtasks.DefaultRelayConcurrency, "CreateTask or DeleteTask calls in flight at once")
}

// config checks the flags and returns the dispatcher's relay settings.
func (f *relayFlags) config(cmd *cobra.Command) (cloudtasks.Config, error) {
	switch {
	case f.interval <= 0:
		return cloudtasks.Config{}, usagef("--interval %s must be positive", f.interval)
	case f.drain <= 0:
		return cloudtasks.Config{}, usagef("--drain-timeout %s must be positive", f.drain)
	case f.claim < 0:
		return cloudtasks.Config{}, usagef("--claim %s is negative", f.claim)
	case f.claim > 0 && f.claim < cloudtasks.DefaultRetryMaxElapsed:
		return cloudtasks.Config{}, usagef("--claim %s is below the retries' %s: another relay would repeat creates still being retried", f.claim, cloudtasks.DefaultRetryMaxElapsed)
	case f.concurrency < 1:
		return cloudtasks.Config{}, usagef("--concurrency %d must be 1 or more", f.concurrency)
	}
	interval := f.interval
	if !f.listen && !cmd.Flags().Changed("interval") {
		interval = cloudtasks.DefaultRelayInterval
	}
	return cloudtasks.Config{RelayInterval: interval, RelayDrainTimeout: f.drain, RelayClaim: f.claim, RelayConcurrency: f.concurrency}, nil
}
