package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	ctapi "cloud.google.com/go/cloudtasks/apiv2"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/ctdispatch/ctdispatch/cloudtasks"
	"github.com/ctdispatch/ctdispatch/internal/durability"
	"github.com/ctdispatch/ctdispatch/outbox"
	"github.com/ctdispatch/ctdispatch/outbox/parquetbox"
	"github.com/ctdispatch/ctdispatch/outbox/pgbox/pgxlisten"
)

// reachTimeout bounds how long a command waits to reach Cloud Tasks (or
// the emulator) before saying it cannot, so a dead address fails in
// seconds with its cause instead of after every retry.
const reachTimeout = 5 * time.Second

// cloudTasksEndpoint is the service's gRPC endpoint, probed before the
// first call.
const cloudTasksEndpoint = "cloudtasks.googleapis.com:443"

// checkHostPort validates an address given as flag: host:port, with a
// port number and no scheme.
func checkHostPort(flag, addr string) error {
	rule := "want HOST:PORT, for example 127.0.0.1:8123, without a scheme"
	if strings.Contains(addr, "://") {
		return usagef("%s %q has a scheme; %s", flag, addr, rule)
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return usagef("%s %q is not HOST:PORT; %s", flag, addr, rule)
	}
	if n, err := strconv.ParseUint(port, 10, 16); err != nil || n == 0 || host == "" {
		return usagef("%s %q is not HOST:PORT with a host and a port from 1 to 65535; %s", flag, addr, rule)
	}
	return nil
}

// unreachableError says Cloud Tasks could not be reached at an address,
// and why.
type unreachableError struct {
	addr  string
	cause error
}

func (e *unreachableError) Error() string {
	return fmt.Sprintf("cannot reach Cloud Tasks at %s: %v", e.addr, e.cause)
}

func (e *unreachableError) Unwrap() error { return e.cause }

// dialEmulator opens a plain gRPC connection to an emulator and waits until
// it is ready, at most reachTimeout. A refused connection or an unknown
// host is reported at once with the dialer's own words.
func dialEmulator(ctx context.Context, addr string) (*grpc.ClientConn, error) {
	var mu sync.Mutex
	var lastErr error
	dial := func(ctx context.Context, a string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, "tcp", a)
		if err != nil {
			mu.Lock()
			lastErr = err
			mu.Unlock()
		}
		return c, err
	}
	// passthrough: the dialer resolves the name, so a DNS failure is a
	// dial error with the name in it.
	conn, err := grpc.NewClient("passthrough:///"+addr,
		grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithContextDialer(dial))
	if err != nil {
		return nil, &unreachableError{addr: addr, cause: err}
	}
	wctx, cancel := context.WithTimeout(ctx, reachTimeout)
	defer cancel()
	conn.Connect()
	for {
		s := conn.GetState()
		switch s {
		case connectivity.Ready:
			return conn, nil
		case connectivity.TransientFailure, connectivity.Shutdown:
			mu.Lock()
			cause := lastErr
			mu.Unlock()
			if cause == nil {
				cause = fmt.Errorf("connection %s", s)
			}
			conn.Close()
			return nil, &unreachableError{addr: addr, cause: cause}
		}
		if !conn.WaitForStateChange(wctx, s) {
			conn.Close()
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, &unreachableError{addr: addr, cause: fmt.Errorf("no connection within %s", reachTimeout)}
		}
	}
}

// probeEndpoint opens and closes a TCP connection to addr, so a machine
// without a route or DNS is told so in seconds. It is skipped when a proxy
// is configured, since gRPC then connects through it.
func probeEndpoint(ctx context.Context, env *Env, addr string) error {
	for _, v := range []string{"HTTPS_PROXY", "https_proxy", "GRPC_PROXY"} {
		if env.Getenv(v) != "" {
			return nil
		}
	}
	c, err := (&net.Dialer{Timeout: reachTimeout}).DialContext(ctx, "tcp", addr)
	if err != nil {
		return &unreachableError{addr: addr, cause: err}
	}
	return c.Close()
}

// session is a dispatcher and what the command opened for it, closed in
// order by close.
type session struct {
	ctx     context.Context // bounds the wait for calls in flight at close
	cancel  context.CancelFunc
	d       *cloudtasks.Dispatcher
	closers []func() error
	once    sync.Once
	err     error
}

// close closes the dispatcher (flushing its outbox), then the client and
// connection; it returns the first error and may be called again.
func (s *session) close() error {
	s.once.Do(func() {
		errs := []error{s.d.Close(s.ctx)}
		for _, c := range s.closers {
			errs = append(errs, c())
		}
		s.err = errors.Join(errs...)
		if s.cancel != nil {
			s.cancel()
		}
	})
	return s.err
}

// connect opens a dispatcher for cfg, recording in --outbox (with its log
// in --log-dir), over a client to the emulator (when
// --emulator or $CLOUD_TASKS_EMULATOR_HOST names one) or to Cloud Tasks,
// after making sure the endpoint answers. On a terminal, retries of
// transient failures are shown on stderr.
func (c *connFlags) connect(ctx context.Context, env *Env, cfg cloudtasks.Config, mode durability.Mode) (*session, error) {
	if mode == "" {
		mode = durability.Overlapped
	}
	pg := isPostgresURL(c.outbox)
	if err := c.checkExport(pg); err != nil {
		return nil, err
	}
	switch {
	case c.outbox == "":
		mode = durability.Memory
	case pg:
		if mode != durability.Overlapped && mode != durability.Strict {
			return nil, usagef("--durability %s does not apply to a PostgreSQL outbox, whose every record commits before the dispatcher goes on; allowed: overlapped, strict", mode)
		}
		if c.logDir != "" {
			return nil, usagef("--log-dir is the write-ahead log of a file or bucket outbox; a PostgreSQL outbox has none")
		}
	default:
		if isBucketURL(c.outbox) {
			if err := checkBucketURL(c.outbox); err != nil {
				return nil, err
			}
		}
		if err := checkLogDir(c.outbox, c.logDir); err != nil {
			return nil, err
		}
		if c.publishInterval < parquetbox.MinPublishInterval {
			return nil, usagef("--publish-interval %s is below the minimum %s", c.publishInterval, parquetbox.MinPublishInterval)
		}
		limitOutboxMemory(env)
	}
	cfg.Durability = mode.Dispatcher()
	// Only the relay command relays: a one-shot command would claim other
	// processes' intents and hold them while it exits.
	cfg.NoRelay = cfg.NoRelay || cfg.RelayQueues == nil
	s := &session{ctx: ctx}
	fail := func(err error) (*session, error) {
		for _, c := range s.closers {
			c()
		}
		return nil, err
	}
	if c.emulator != "" {
		flag := "--emulator"
		if c.emulator == c.emulatorFromEnv {
			flag += " (from $" + emulatorEnv + ")"
		}
		if err := checkHostPort(flag, c.emulator); err != nil {
			return nil, err
		}
		conn, err := dialEmulator(ctx, c.emulator)
		if err != nil {
			return nil, err
		}
		s.closers = append(s.closers, func() error { conn.Close(); return nil })
		client, err := ctapi.NewClient(ctx, option.WithGRPCConn(conn))
		if err != nil {
			return fail(fmt.Errorf("cloud tasks client: %w", err))
		}
		s.closers = append([]func() error{client.Close}, s.closers...)
		cfg.Client = client
	} else if err := probeEndpoint(ctx, env, cloudTasksEndpoint); err != nil {
		return nil, err
	}
	if isTerminal(env.Err) {
		cfg.OnRetry = retryPrinter(env.Err)
	}
	cfg.Logger = env.Logger
	if pg && c.listen {
		l, err := c.listener(env)
		if err != nil {
			return fail(err)
		}
		cfg.Listener = l
	}
	box, closeBox, err := c.openOutbox(ctx, env, mode, pg)
	if err != nil && !pg { // a PostgreSQL outbox's error names it already
		err = fmt.Errorf("open outbox: %w", err)
	}
	if err != nil {
		return fail(err)
	}
	// The outbox closes after the dispatcher has flushed it.
	s.closers = append([]func() error{closeBox}, s.closers...)
	cfg.SkipOutboxCheck = true // openOutbox checked it, and said which --outbox
	d, err := cloudtasks.NewDispatcher(ctx, box, &cfg)
	if err != nil {
		return fail(err)
	}
	s.d = d
	return s, nil
}

// openOutbox opens the outbox --outbox names for a dispatcher: a
// PostgreSQL database, or the outbox of mode.
func (c *connFlags) openOutbox(ctx context.Context, env *Env, mode durability.Mode, pg bool) (outbox.Outbox, func() error, error) {
	if pg {
		box, db, err := openPostgresExporting(ctx, c.outbox, c.exportOptions(env))
		if err != nil {
			return nil, nil, err
		}
		return box, closeExporting(box, db.Close), nil
	}
	return durability.Open(ctx, mode, parquetbox.Config{Root: c.outbox, LogDir: c.logDir, Logger: env.Logger, PublishInterval: c.publishInterval})
}

// listener returns the listener of a postgres:// --outbox's
// notifications, on a connection of its own to the same database.
func (c *connFlags) listener(env *Env) (*pgxlisten.Listener, error) {
	dsn, _, err := postgresOptions(c.outbox)
	if err != nil {
		return nil, err
	}
	l, err := pgxlisten.New(pgxlisten.Config{ConnString: dsn, Logger: env.Logger})
	if err != nil {
		return nil, asUsage(fmt.Errorf("--outbox: %w", err))
	}
	return l, nil
}

// retryPrinter tells the user, one line per retry, why a command waits:
// "retrying CreateTask (3/10) in 200ms: Unavailable: …", where 3 is the
// call about to be made.
func retryPrinter(w io.Writer) func(cloudtasks.RetryEvent) {
	return func(ev cloudtasks.RetryEvent) {
		fmt.Fprintf(w, "retrying %s (%d/%d) in %s: %s\n", ev.Method, ev.Call+1, ev.MaxCalls,
			ev.Delay.Round(time.Millisecond), oneLine(ev.Code.String()+": "+errorDesc(ev.Err)))
	}
}

// errorDesc is the message of a gRPC error without its "rpc error: code
// = … desc =" wrapping.
func errorDesc(err error) string {
	msg := err.Error()
	if _, desc, ok := strings.Cut(msg, "desc = "); ok {
		return desc
	}
	return msg
}

// outboxMemoryLimit is the soft memory limit of a process that runs a
// dispatcher over a file outbox, or compacts one, unless GOMEMLIMIT says
// otherwise. The
// outbox holds its memory to budgets (the own-ID index, the cache of
// footers and bloom filters, the log segment not yet in Parquet: together
// about 130 MiB at their defaults), but Go's collector lets the heap grow
// to twice what is live before it collects, which took a dispatcher past
// 200 MB of RSS over a 50M-row outbox. Under this limit the collector runs
// earlier instead; it never refuses memory, so a larger live heap (much
// larger budgets, huge payloads) costs collector CPU, not a crash. A
// compaction of a unit with thousands of runs (a busy day before its
// first compaction) holds their footers while its merges read 48 at a
// time: 206 MiB of RSS without the limit, 164 MiB with it, for the same
// CPU (BENCHMARKS.md).
const outboxMemoryLimit = 160 << 20

// limitOutboxMemory applies outboxMemoryLimit unless the user set
// GOMEMLIMIT (any value, including "off").
func limitOutboxMemory(env *Env) {
	if env.SetMemoryLimit == nil || env.Getenv("GOMEMLIMIT") != "" {
		return
	}
	env.SetMemoryLimit(outboxMemoryLimit)
	env.Logger.Debug("soft memory limit set; GOMEMLIMIT overrides it", "bytes", outboxMemoryLimit)
}
