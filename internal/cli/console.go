package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/ctdispatch/ctdispatch/cloudtasks"
	"github.com/ctdispatch/ctdispatch/internal/console"
)

func newConsoleCmd(env *Env) *cobra.Command {
	var (
		cfg  console.Config
		addr string
	)
	cmd := &cobra.Command{
		Use:   "console [--emulator ADDR] [--outbox DIR] [--worker-outbox DIR] [--addr 127.0.0.1:8090]",
		Short: "Serve a web console over an emulator and an outbox",
		Long: `Serve a web console that shows a Cloud Tasks emulator and an outbox.

Pages: the queues (state, rate and retry settings, tasks waiting, scheduled
and running, deliveries per second, recent response codes); the tasks of a
queue, 100 at a time, with the internal ID the outbox knows for each; the
recent deliveries with their X-CloudTasks-* and Idempotency-Key headers
(an Authorization value is never shown); the audit trail of an ID (search
by internal ID, Cloud Tasks ID or run); a run's dispatches and timers on a
timeline; and the outbox's files, damaged or foreign files, stale pending
records and outcomes over time.

--outbox may be a PostgreSQL outbox's URL (postgres://…, as migrate
takes it): the pages then read its tables; its outbox page shows the
tables' figures and stale records, and has no files.

--worker-outbox is a worker's outbox (package cloudtasks/worker): the
audit trail of an ID and a run's page then list the deliveries it
recorded, one line per delivery with its outcome, HTTP status, retry and
execution counts and latency.

Any source may be left out. --emulator is the emulator's gRPC address,
and is enough: the console asks the emulator for every location holding a
queue (ListLocations on the emulator-only wildcard project "projects/-")
and for the address of its HTTP server, which adds exact task counts and
the deliveries. --emulator-http overrides that address (for example when
the emulator reports one the console cannot reach), and --location adds
locations for an endpoint that does not take the wildcard.

The console only reads unless --allow-actions is given; then it offers
pause, resume, purge, run now and recover, each a POST carrying a token
and refused (403) when the browser says it comes from another site. It
listens on loopback by default and warns when bound elsewhere: it has no
login. It answers only requests whose Host is its own address, localhost,
127.0.0.1 or [::1] with its port (for a loopback bind), or an --allow-host
name; any other gets 421 Misdirected Request, which keeps a page of
another site that rebinds its name to this machine (DNS rebinding) from
reading the console. An --addr on every interface (0.0.0.0:8090, :8090)
needs at least one --allow-host.

Pages are rendered on the server and work without JavaScript; a small
embedded script refreshes them while "live" is ticked.`,
		Example: `  ctdispatch console --emulator 127.0.0.1:8123 --outbox ./outbox
  ctdispatch console --outbox ./outbox --addr 127.0.0.1:9000
  ctdispatch emulator --console-addr 127.0.0.1:8090
  ctdispatch demo --keep`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cfg.Emulator == "" && cfg.Outbox == "" && cfg.WorkerOutbox == "" {
				return usagef("nothing to show: give --emulator ADDR, --outbox DIR or both (and --worker-outbox DIR for deliveries)")
			}
			if isPostgresURL(cfg.WorkerOutbox) {
				return usagef("--worker-outbox %s is a PostgreSQL database; it takes a worker's file or bucket outbox (a PostgreSQL outbox's own deliveries table shows through --outbox)", redact(cfg.WorkerOutbox))
			}
			if isPostgresURL(cfg.Outbox) {
				box, db, err := openPostgres(cmd.Context(), cfg.Outbox)
				if err != nil {
					return err
				}
				defer db.Close()
				cfg.PostgresOutbox, cfg.Outbox = box, redact(cfg.Outbox)
			}
			cfg.Logger = env.Logger
			c, err := startConsole(cmd.Context(), cfg, consoleFlags{addr: "--addr", allowHost: "--allow-host"}, addr, env)
			if err != nil {
				return err
			}
			printConsole(cmd.OutOrStdout(), c)
			<-cmd.Context().Done()
			return c.Close()
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.Emulator, "emulator", env.Getenv(emulatorEnv), "emulator gRPC address host:port (default $"+emulatorEnv+")")
	f.StringVar(&cfg.EmulatorHTTP, "emulator-http", "", "emulator HTTP address host:port, for task counts and deliveries (default: the one the emulator reports)")
	f.StringArrayVar(&cfg.Locations, "location", nil, "also show the queues of this location, projects/P/locations/L, for an endpoint that does not list its locations (repeatable)")
	f.StringVar(&cfg.Outbox, "outbox", "", "outbox directory, opened read-only, or a PostgreSQL outbox's URL (postgres://…)")
	f.StringVar(&cfg.WorkerOutbox, "worker-outbox", "", "a worker's outbox directory, opened read-only: deliveries on the ID and run pages")
	f.StringVar(&addr, "addr", console.DefaultAddr, "listen address")
	f.StringVar(&cfg.TraceURL, "trace-url", console.DefaultTraceURL, "link shown with a record's trace ID: {trace_id} and {project} are filled in; \"off\" shows IDs without links")
	f.StringVar(&cfg.TraceProject, "trace-project", "", "project {project} names in --trace-url (default: the project of each record's queue)")
	f.StringArrayVar(&cfg.AllowHosts, "allow-host", nil, "a host name (or name:port) the console may be reached by besides its address and localhost; required with an --addr on every interface (repeatable)")
	f.BoolVar(&cfg.AllowActions, "allow-actions", false, "offer pause, resume, purge, run now and recover")
	f.DurationVar(&cfg.StaleAfter, "stale-after", cloudtasks.DefaultStaleAfter, "age past which a pending record is stale")
	f.DurationVar(&cfg.Refresh, "refresh", 5*time.Second, "how often live pages refresh")
	return cmd
}

// runningConsole is a console serving in the background of a command.
type runningConsole struct {
	// URL is where the console answers.
	URL    string
	srv    *console.Server
	cancel context.CancelFunc
	done   chan error
}

// consoleFlags name the flags that set a console's address and allowed
// hosts in the command that serves it, for its error messages.
type consoleFlags struct{ addr, allowHost string }

// startConsole opens the console's sources, listens on addr and serves
// until Close. A listener reachable from other machines gets one warning
// line on stderr, shown with or without -v.
func startConsole(ctx context.Context, cfg console.Config, flags consoleFlags, addr string, env *Env) (*runningConsole, error) {
	srv, err := console.New(ctx, cfg)
	if errors.Is(err, console.ErrInvalidConfig) {
		return nil, usagef("%v", err)
	}
	if err != nil {
		return nil, err
	}
	lis, err := console.Listen(addr, cfg.AllowHosts, nil)
	if errors.Is(err, console.ErrEveryInterface) {
		srv.Close()
		return nil, usagef("%s %s listens on every network interface, where any name that resolves to this machine reaches the console; name the hosts it is reached by with %s NAME (repeatable), or bind it to 127.0.0.1", flags.addr, addr, flags.allowHost)
	}
	if err != nil {
		srv.Close()
		return nil, err
	}
	if !console.IsLoopback(lis.Addr()) {
		fmt.Fprintf(env.Err, "ctdispatch: warning: the console at %s is reachable beyond this machine and has no login; bind it to 127.0.0.1 unless that is intended\n", lis.Addr())
	}
	serveCtx, cancel := context.WithCancel(context.Background())
	// On every interface, the URL to print is the loopback one: the
	// console refuses the unspecified address as a Host.
	c := &runningConsole{URL: "http://" + dialAddr(lis.Addr().String()) + "/", srv: srv, cancel: cancel, done: make(chan error, 1)}
	go func() { c.done <- srv.Serve(serveCtx, lis) }()
	return c, nil
}

// Close stops serving and releases the console's sources.
func (c *runningConsole) Close() error {
	c.cancel()
	err := <-c.done
	return errors.Join(err, c.srv.Close())
}

// printConsole tells where a console started by another command answers.
func printConsole(w io.Writer, c *runningConsole) {
	fmt.Fprintf(w, "console serving on %s\n", c.URL)
}
