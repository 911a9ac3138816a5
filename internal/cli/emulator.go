package cli

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/spf13/cobra"

	"github.com/ctdispatch/ctdispatch/cloudtasks/emulator"
	"github.com/ctdispatch/ctdispatch/internal/console"
	"github.com/ctdispatch/ctdispatch/internal/emuconfig"
)

// emulatorHostEnv names the emulator's address for every ctdispatch command
// (a convention shared with the Firebase Admin SDK).
const emulatorHostEnv = "CLOUD_TASKS_EMULATOR_HOST"

// defaultEmulatorAddr is used when neither --addr nor the environment says.
const defaultEmulatorAddr = "127.0.0.1:8123"

// Environment variables that stand in for the emulator's flags when the
// flag is not given: a container is configured through its environment
// (docker run -e, a compose file's environment:) more often than through
// its command line.
const (
	// emulatorQueuesEnv lists queues as --queue takes them, separated by
	// commas or white space.
	emulatorQueuesEnv = "CTDISPATCH_EMULATOR_QUEUES"
	// emulatorConfigEnv is the path of a --config file.
	emulatorConfigEnv = "CTDISPATCH_EMULATOR_CONFIG"
	// emulatorPublicURLEnv is the --public-url.
	emulatorPublicURLEnv = "CTDISPATCH_EMULATOR_PUBLIC_URL"
	// emulatorAllowHostsEnv lists hosts as --allow-host takes them,
	// separated by commas or spaces.
	emulatorAllowHostsEnv = "CTDISPATCH_EMULATOR_ALLOW_HOSTS"
)

// The project and location that qualify a bare queue ID given to --queue:
// those of the README's examples.
const (
	defaultEmulatorProject  = "p"
	defaultEmulatorLocation = "europe-west1"
)

func newEmulatorCmd(env *Env) *cobra.Command {
	var publicURL string
	var (
		addr, httpAddr, configPath string
		project, location          string
		queues, faults             []string
		deliveryFaults, taskFaults []string
		deliveryDelay              time.Duration
		seed                       uint64
		reuse                      time.Duration
		latency                    time.Duration
		noDelivery                 bool
		consoleAddr, consoleOutbox string
		consoleAllowHosts          []string
		allowHosts                 []string
	)
	cmd := &cobra.Command{
		Use:   "emulator [--addr HOST:PORT] [--queue QUEUE]... [--config FILE] [--delivery-fault KIND:RATE]... [--task-fault KIND:TASK]...",
		Short: "Run the Cloud Tasks emulator until interrupted",
		Long: `Run the in-repo Cloud Tasks emulator: a gRPC server that the official
client talks to unmodified, which stores tasks with the service's rules and
delivers HTTP tasks to their URLs (with the X-CloudTasks-* headers, OIDC
tokens, rate limits and retries).

It listens on --addr, by default $` + emulatorHostEnv + ` or ` + defaultEmulatorAddr + `,
and serves until SIGINT or SIGTERM. It has no authentication: an address
on every interface (":8123", "0.0.0.0:8123") gets a warning on stderr.
Point a client at it with
  option.WithEndpoint(addr), option.WithoutAuthentication() and an insecure
  gRPC transport (emulator.ClientOptions(addr) does all three).

Queues come from --queue and from --config (or, when those flags are not
given, from $` + emulatorQueuesEnv + `, a list separated by commas or spaces, and
from the file named by $` + emulatorConfigEnv + `). --queue takes a full name,
projects/PROJECT/locations/LOCATION/queues/QUEUE, or a bare queue ID, which
is created in --project and --location (by default
projects/` + defaultEmulatorProject + `/locations/` + defaultEmulatorLocation + `/queues/QUEUE); either way
the queue has the service's defaults. --config is a JSON or YAML file:
  name_reuse_window: 1h
  queues:
    - name: projects/p/locations/l/queues/q
      max_dispatches_per_second: 10
      max_concurrent_dispatches: 5
      max_attempts: 5
      min_backoff: 1s
      max_backoff: 1m
      max_doublings: 3
  faults:
    seed: 1
    rules:
      - {methods: [CreateTask], rate: 0.1, code: UNAVAILABLE, commit_then_fail: true}
      - {methods: [BatchCreateTasks], rate: 0.05, code: UNAVAILABLE, per_request: true}

--delivery-fault ` + deliveryFaultSyntax + ` and --task-fault ` + taskFaultSyntax + `
do to deliveries what the network and Cloud Tasks' at-least-once delivery
do to a worker, so that its tests can show that its work happens once
anyway. KIND is one of
  deliver_twice  deliver the attempt again after the worker's 2xx
  lose_reply     lose the worker's 2xx: the task is delivered again
  reset          drop the connection halfway through the request's body
  delay          hold the attempt back for --delivery-delay (default 100ms)
  withhold       keep the worker's 2xx until the task's dispatch deadline
                 ends the attempt (10 minutes unless the task sets one)
  drop           answer 200 without delivering (for checks of lost work)
--delivery-fault draws KIND for every attempt at RATE (0 to 1), keyed to
the task and the attempt so that --fault-seed gives each attempt the same
fault at every run; --task-fault plants KIND on one task, named by its ID,
its full name or its Idempotency-Key, until it has happened once. For
example
  --delivery-fault lose_reply:0.05 --delivery-fault deliver_twice:0.05
  --task-fault lose_reply:dispatch:run1:extract:1
The config file's delivery_faults (seed, rates, tasks, delay) says the same.

--fault ` + faultSyntax + ` adds a fault rule from the
command line ("*" for every RPC). commit makes the call take effect before
it fails; each applies the rule to every request inside a BatchCreateTasks
or BatchDeleteTasks call instead of to the call, so single requests fail
under their index in the operation's metadata. For example
  --fault CreateTask:UNAVAILABLE:0.05:commit
  --fault BatchCreateTasks:UNAVAILABLE:0.1:each

Workers verify the OIDC tokens the emulator signs with the keys its HTTP
server (--http-addr) serves. When workers reach that server at another
address than it listens on, as they do when the emulator runs in a
container, --public-url (or $` + emulatorPublicURLEnv + `) gives the base URL they use,
for example http://localhost:8124: it becomes the tokens' issuer and the
key URL of the discovery document. The HTTP server answers only requests
addressed to its own address, localhost with its port, the --public-url
host, or an --allow-host name (or $` + emulatorAllowHostsEnv + `); any other Host
gets 421, so a web page cannot read it through a rebound name.

"ctdispatch emulator health" checks a running emulator, for a container's
HEALTHCHECK.

--console-addr also serves the web console (see "ctdispatch console") over
this emulator, and over the outbox in --console-outbox if given; it
answers only requests addressed to its own address, localhost, or a
--console-allow-host name.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg := emulator.Config{
				Addr:            addr,
				HTTPAddr:        httpAddr,
				Logger:          env.Logger,
				NameReuseWindow: reuse,
				DisableDelivery: noDelivery,
				PublicURL:       flagOrEnv(cmd, "public-url", publicURL, env, emulatorPublicURLEnv),
			}
			if cfg.Addr == "" {
				cfg.Addr = env.Getenv(emulatorHostEnv)
			}
			if cfg.Addr == "" {
				cfg.Addr = defaultEmulatorAddr
			}
			for _, a := range []struct{ flag, value string }{{"--addr", cfg.Addr}, {"--http-addr", cfg.HTTPAddr}} {
				if _, _, err := net.SplitHostPort(a.value); err != nil {
					return usagef("%s %q: want HOST:PORT, for example 127.0.0.1:8123", a.flag, a.value)
				}
			}
			if !cmd.Flags().Changed("allow-host") {
				allowHosts = strings.FieldsFunc(env.Getenv(emulatorAllowHostsEnv), func(r rune) bool { return r == ',' || unicode.IsSpace(r) })
			}
			cfg.AllowHosts = allowHosts
			configPath = flagOrEnv(cmd, "config", configPath, env, emulatorConfigEnv)
			if !cmd.Flags().Changed("queue") {
				queues = strings.FieldsFunc(env.Getenv(emulatorQueuesEnv), func(r rune) bool { return r == ',' || unicode.IsSpace(r) })
			}
			if configPath != "" {
				data, err := os.ReadFile(configPath)
				if err != nil {
					return fmt.Errorf("--config: %w", err)
				}
				if err := emuconfig.Read(data, &cfg); err != nil {
					return usagef("--config %s: %v", configPath, err)
				}
			}
			for _, q := range queues {
				if !strings.Contains(q, "/") {
					q = "projects/" + project + "/locations/" + location + "/queues/" + q
				}
				cfg.Queues = append(cfg.Queues, emulator.QueueConfig{Name: q})
			}
			if err := addDeliveryFaults(&cfg.DeliveryFaults, deliveryFaults, taskFaults); err != nil {
				return err
			}
			if deliveryDelay != 0 {
				cfg.DeliveryFaults.Delay = deliveryDelay
			}
			if seed != 0 {
				cfg.Faults.Seed = seed
				cfg.DeliveryFaults.Seed = seed
			}
			for _, f := range faults {
				rule, err := parseFaultFlag(f)
				if err != nil {
					return err
				}
				cfg.Faults.Rules = append(cfg.Faults.Rules, rule)
			}
			if latency > 0 {
				cfg.Faults.Rules = append(cfg.Faults.Rules, emulator.FaultRule{Rate: 1, Latency: latency})
			}
			srv, err := emulator.New(cfg)
			var ce *emulator.ConfigError
			if errors.As(err, &ce) && ce.Field == "PublicURL" {
				source := "--public-url"
				if !cmd.Flags().Changed("public-url") {
					source = "$" + emulatorPublicURLEnv
				}
				return usagef("%s %q %s", source, ce.Value, ce.Rule)
			}
			if errors.As(err, &ce) && strings.HasPrefix(ce.Field, "AllowHosts[") {
				source := "--allow-host"
				if !cmd.Flags().Changed("allow-host") {
					source = "$" + emulatorAllowHostsEnv + " entry"
				}
				return usagef("%s %q %s", source, ce.Value, ce.Rule)
			}
			if errors.Is(err, emulator.ErrInvalidConfig) {
				return usagef("%v", err)
			}
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			out := cmd.OutOrStdout()
			warnAllInterfaces(env, "--addr", cfg.Addr, srv.Addr())
			warnAllInterfaces(env, "--http-addr", cfg.HTTPAddr, srv.HTTPAddr())
			fmt.Fprintf(out, "Cloud Tasks emulator listening on %s\n", srv.Addr())
			fmt.Fprintf(out, "export %s=%s\n", emulatorHostEnv, dialAddr(srv.Addr()))
			fmt.Fprintf(out, "OIDC keys: %s (issuer %s)\n", srv.JWKSURL(), srv.Issuer())
			for _, q := range srv.Queues() {
				fmt.Fprintf(out, "queue %s\n", q.Name)
			}
			printDeliveryFaults(out, cfg.DeliveryFaults)
			if consoleAddr != "" {
				c, err := startConsole(ctx, console.Config{
					Emulator: srv.Addr(), EmulatorHTTP: srv.HTTPAddr(), Outbox: consoleOutbox, Logger: env.Logger,
					AllowHosts: consoleAllowHosts,
				}, consoleFlags{addr: "--console-addr", allowHost: "--console-allow-host"}, consoleAddr, env)
				if err != nil {
					return errors.Join(err, srv.Close())
				}
				defer c.Close()
				printConsole(out, c)
			}
			env.Logger.Info("emulator started", "addr", srv.Addr(), "queues", len(cfg.Queues))
			<-ctx.Done()
			env.Logger.Info("emulator stopping", "tasks", srv.TaskCount())
			if err := srv.Close(); err != nil {
				return fmt.Errorf("emulator: shutting down: %w", err)
			}
			fmt.Fprintln(out, "emulator stopped")
			return nil
		},
	}
	cmd.AddCommand(newEmulatorHealthCmd(env))
	f := cmd.Flags()
	f.StringVar(&addr, "addr", "", "gRPC listen address (default $"+emulatorHostEnv+" or "+defaultEmulatorAddr+")")
	f.StringVar(&httpAddr, "http-addr", "127.0.0.1:0", "listen address of the HTTP server for the OIDC discovery document and keys (JWKS and PEM)")
	f.StringVar(&publicURL, "public-url", "", "base URL at which workers reach --http-addr, for the tokens' issuer and key URL (default $"+emulatorPublicURLEnv+" or http:// and --http-addr)")
	f.StringArrayVar(&allowHosts, "allow-host", nil, "a host name (or name:port) by which clients reach --http-addr besides its address, localhost and the --public-url host; other Host headers are answered 421 (repeatable; default $"+emulatorAllowHostsEnv+")")
	f.StringArrayVar(&queues, "queue", nil, "create this queue at start: a full name or a bare ID in --project and --location (repeatable)")
	f.StringVar(&project, "project", defaultEmulatorProject, "project of the queues given to --queue as bare IDs")
	f.StringVar(&location, "location", defaultEmulatorLocation, "location of the queues given to --queue as bare IDs")
	f.StringVar(&configPath, "config", "", "JSON or YAML file with queues, faults and reuse windows")
	f.DurationVar(&reuse, "name-reuse-window", 0, "how long a task name stays taken after the task is gone (default 24h)")
	f.StringArrayVar(&faults, "fault", nil, "inject faults: "+faultSyntax+" (repeatable)")
	f.Uint64Var(&seed, "fault-seed", 0, "seed that makes fault decisions repeatable, of --fault and of --delivery-fault")
	f.StringArrayVar(&deliveryFaults, "delivery-fault", nil, "draw a delivery fault for every attempt at a rate: "+deliveryFaultSyntax+", KIND one of deliver_twice, lose_reply, reset, delay, withhold, drop (repeatable)")
	f.StringArrayVar(&taskFaults, "task-fault", nil, "plant a delivery fault on one task until it happens: "+taskFaultSyntax+", TASK its ID, full name or Idempotency-Key (repeatable)")
	f.DurationVar(&deliveryDelay, "delivery-delay", 0, "how long the delay fault holds an attempt back (default 100ms; drawn delays last up to it)")
	f.DurationVar(&latency, "latency", 0, "add this latency to every RPC")
	f.BoolVar(&noDelivery, "no-delivery", false, "store tasks but never deliver them")
	f.StringVar(&consoleAddr, "console-addr", "", "also serve the web console on this address, for example "+console.DefaultAddr)
	f.StringVar(&consoleOutbox, "console-outbox", "", "outbox directory the console shows (with --console-addr)")
	f.StringArrayVar(&consoleAllowHosts, "console-allow-host", nil, "a host name (or name:port) the console may be reached by besides its address and localhost; required to bind it to every interface (repeatable)")
	return cmd
}

// flagOrEnv returns the flag's value if it was given on the command line,
// and the environment variable's otherwise.
func flagOrEnv(cmd *cobra.Command, flag, value string, env *Env, name string) string {
	if cmd.Flags().Changed(flag) {
		return value
	}
	return env.Getenv(name)
}

// faultSyntax is the form of a --fault value.
const faultSyntax = "METHOD[,METHOD]:CODE:RATE[:commit][,each]"

// parseFaultFlag reads METHOD[,METHOD]:CODE:RATE[:OPTION[,OPTION]], where
// the options are commit (CommitThenFail) and each (PerRequest).
func parseFaultFlag(v string) (emulator.FaultRule, error) {
	parts := strings.Split(v, ":")
	if len(parts) < 3 || len(parts) > 4 {
		return emulator.FaultRule{}, usagef("--fault %q: want %s, for example CreateTask:UNAVAILABLE:0.05:commit", v, faultSyntax)
	}
	var rule emulator.FaultRule
	if len(parts) == 4 {
		for _, opt := range strings.Split(parts[3], ",") {
			switch opt {
			case "commit":
				rule.CommitThenFail = true
			case "each":
				rule.PerRequest = true
			default:
				return rule, usagef("--fault %q: option %q is not commit or each; want %s", v, opt, faultSyntax)
			}
		}
	}
	if parts[0] != "*" {
		rule.Methods = strings.Split(parts[0], ",")
	}
	code, err := emuconfig.ParseCode(parts[1])
	if err != nil {
		return rule, usagef("--fault %q: %v", v, err)
	}
	rate, err := strconv.ParseFloat(parts[2], 64)
	if err != nil {
		return rule, usagef("--fault %q: rate %q is not a number from 0 to 1", v, parts[2])
	}
	rule.Code, rule.Rate = code, rate
	return rule, nil
}

// The forms of the delivery fault flags.
const (
	deliveryFaultSyntax = "KIND:RATE"
	taskFaultSyntax     = "KIND:TASK"
)

// addDeliveryFaults adds the --delivery-fault rates and the --task-fault
// tasks to plan, refusing a kind or a task given twice and rates that add
// up to more than 1.
func addDeliveryFaults(plan *emulator.DeliveryFaults, rates, tasks []string) error {
	for _, v := range rates {
		kind, rate, err := parseDeliveryFaultFlag(v)
		if err != nil {
			return err
		}
		if _, ok := plan.Rates[kind]; ok {
			return usagef("--delivery-fault %q: %s has a rate already; give each kind once", v, kind)
		}
		if plan.Rates == nil {
			plan.Rates = map[emulator.DeliveryFault]float64{}
		}
		plan.Rates[kind] = rate
	}
	var sum float64
	for _, r := range plan.Rates {
		sum += r
	}
	if sum > 1+1e-9 {
		return usagef("--delivery-fault: the rates add up to %g, more than 1; an attempt meets one fault at most", sum)
	}
	for _, v := range tasks {
		kind, task, err := parseTaskFaultFlag(v)
		if err != nil {
			return err
		}
		if prev, ok := plan.Tasks[task]; ok {
			return usagef("--task-fault %q: task %q has the fault %s already; a task meets one planted fault", v, task, prev)
		}
		if plan.Tasks == nil {
			plan.Tasks = map[string]emulator.DeliveryFault{}
		}
		plan.Tasks[task] = kind
	}
	return nil
}

// parseDeliveryFaultFlag reads KIND:RATE.
func parseDeliveryFaultFlag(v string) (emulator.DeliveryFault, float64, error) {
	name, rateText, ok := strings.Cut(v, ":")
	if !ok {
		return "", 0, usagef("--delivery-fault %q: want %s, for example lose_reply:0.05", v, deliveryFaultSyntax)
	}
	kind, err := emulator.ParseDeliveryFault(name)
	if err != nil {
		return "", 0, usagef("--delivery-fault %q: %v", v, err)
	}
	rate, err := strconv.ParseFloat(rateText, 64)
	if err != nil || !(rate >= 0 && rate <= 1) {
		return "", 0, usagef("--delivery-fault %q: rate %q is not a number from 0 to 1", v, rateText)
	}
	return kind, rate, nil
}

// parseTaskFaultFlag reads KIND:TASK; TASK may hold colons itself, as an
// Idempotency-Key (an internal ID) does.
func parseTaskFaultFlag(v string) (emulator.DeliveryFault, string, error) {
	name, task, ok := strings.Cut(v, ":")
	if !ok || task == "" {
		return "", "", usagef("--task-fault %q: want %s, for example lose_reply:dispatch:run1:extract:1", v, taskFaultSyntax)
	}
	kind, err := emulator.ParseDeliveryFault(name)
	if err != nil {
		return "", "", usagef("--task-fault %q: %v", v, err)
	}
	return kind, task, nil
}

// printDeliveryFaults says, a line each, which delivery faults the
// emulator injects.
func printDeliveryFaults(out io.Writer, f emulator.DeliveryFaults) {
	for _, kind := range emulator.DeliveryFaultKinds() {
		if r := f.Rates[kind]; r > 0 {
			fmt.Fprintf(out, "delivery fault %s at rate %g (seed %d)\n", kind, r, f.Seed)
		}
	}
	for _, task := range slices.Sorted(maps.Keys(f.Tasks)) {
		fmt.Fprintf(out, "delivery fault %s on task %s\n", f.Tasks[task], task)
	}
}

// warnAllInterfaces prints one line on stderr when a listener was asked for
// every network interface: the emulator has no authentication, so anyone
// who can reach the port can create, read and delete tasks.
func warnAllInterfaces(env *Env, flag, requested, actual string) {
	host, _, err := net.SplitHostPort(requested)
	if err != nil || !unspecifiedHost(host) {
		return
	}
	fmt.Fprintf(env.Err, "ctdispatch: warning: %s %s listens on every network interface (%s) without authentication; use 127.0.0.1:PORT to keep the emulator on this machine (in a container, publish the port on 127.0.0.1)\n", flag, requested, actual)
}

func unspecifiedHost(host string) bool {
	ip := net.ParseIP(host)
	return host == "" || (ip != nil && ip.IsUnspecified())
}

// dialAddr is the address a local client dials to reach a listener: the
// loopback address in place of an unspecified one.
func dialAddr(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil || !unspecifiedHost(host) {
		return addr
	}
	return net.JoinHostPort("127.0.0.1", port)
}
