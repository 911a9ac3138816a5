package console

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ctdispatch/ctdispatch/outbox/parquetbox"
	"github.com/ctdispatch/ctdispatch/outbox/pgbox"

	cloudtasks "cloud.google.com/go/cloudtasks/apiv2"
	"github.com/jonboulle/clockwork"

	ctd "github.com/ctdispatch/ctdispatch/cloudtasks"
	"github.com/ctdispatch/ctdispatch/cloudtasks/emulator"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// DefaultAddr is where the console listens unless told otherwise: loopback
// only, because the pages show task payload metadata and headers.
const DefaultAddr = "127.0.0.1:8090"

// idCacheSize bounds the Cloud Tasks ID → internal ID pairs remembered
// from outbox lookups (about 100 bytes each).
const idCacheSize = 100_000

// ErrNoSource is returned by New when neither an emulator nor an outbox is
// configured: the console would have nothing to show.
var ErrNoSource = errors.New("console: no emulator and no outbox to show")

// ErrInvalidConfig matches every error New returns for a Config it
// refuses (ErrNoSource among them); the message names the field, the
// value and what is allowed.
var ErrInvalidConfig = errors.New("console: invalid config")

// configError is a refused Config: it reads as its cause and matches
// both the cause and ErrInvalidConfig.
type configError struct{ error }

func (e configError) Unwrap() error        { return e.error }
func (e configError) Is(target error) bool { return target == ErrInvalidConfig }

// Config says what the console shows and how. Zero fields take the
// defaults documented on them.
type Config struct {
	// Emulator is the gRPC address (host:port) of a Cloud Tasks emulator,
	// reached through the official client. Empty: no queue pages.
	Emulator string
	// EmulatorHTTP is the address (host:port) of the same emulator's HTTP
	// server, where it serves emuproto.InspectPath: task counts by state
	// and the recent deliveries. Empty: the address the emulator advertises
	// in its ListLocations answer (emuproto.HTTPAddrMetadata); with an
	// endpoint that advertises none, the queue pages count tasks from one
	// ListTasks page and the deliveries page is empty.
	EmulatorHTTP string
	// Locations lists locations (projects/P/locations/L) whose queues are
	// shown, besides those the emulator lists for the wildcard project
	// "projects/-" (emuproto.Wildcard). Only needed for an endpoint that
	// does not take the wildcard.
	Locations []string
	// Outbox is the outbox root directory, opened read-only. Empty: no
	// outbox pages. With PostgresOutbox it only names that outbox.
	Outbox string
	// PostgresOutbox, when set, is the outbox shown instead of files: a
	// PostgreSQL outbox (package pgbox), read through its pool, which the
	// caller keeps and closes after the console. Outbox must name it (its
	// URL without the password). Its outbox page has no files and skips
	// none; the recover action dispatches over it.
	PostgresOutbox *pgbox.Outbox
	// WorkerOutbox is the root of a worker's outbox (package
	// cloudtasks/worker's Config.Outbox), opened read-only: its
	// deliveries table fills a Deliveries section on the audit trail of
	// an ID and on a run's page. Empty: no deliveries shown.
	WorkerOutbox string
	// AllowHosts names the hosts, besides the bound address and (for a
	// loopback or all-interfaces bind) localhost, 127.0.0.1 and [::1], by
	// which the console may be addressed: "name" allows that name with any
	// port, "name:port" with that port only. Serve refuses a request with
	// any other Host (StatusWrongHost, see Guard), and Listen refuses an
	// address on every interface while this is empty.
	AllowHosts []string
	// AllowActions shows and accepts the actions that change state: pause,
	// resume and purge a queue, run a task now, recover stale records.
	// Defaults to false: the console only reads.
	AllowActions bool
	// StaleAfter is the age past which a pending record counts as stale on
	// the outbox page (and is re-driven by the recover action). Defaults to
	// cloudtasks.DefaultStaleAfter.
	StaleAfter time.Duration
	// HealthEvery is how often the outbox page's full-table figures
	// (counts by status, stale pending records) are recomputed in the
	// background while the page is viewed; never more often than every ten
	// times the last pass's length. Defaults to 30s.
	HealthEvery time.Duration
	// Refresh is how often pages refresh themselves while "live" is on.
	// Defaults to 5s.
	Refresh time.Duration
	// Timeout bounds the calls one page makes to its sources, so a page
	// over an emulator that went away answers with an error instead of
	// waiting on the client's retries. Defaults to 5s.
	Timeout time.Duration
	// LookupBudget is how long after it started a queue page stops waiting
	// for the outbox lookups of the internal IDs of tasks that do not carry
	// them: IDs not found in time are shown as links to search for, and
	// the page's live refresh fills them in from the lookups that finished
	// (they are remembered). Defaults to 120ms.
	LookupBudget time.Duration
	// PageSize is how many tasks the queue page shows at a time. Defaults
	// to 100.
	PageSize int
	// TraceURL is the template of the link shown with a record's trace ID:
	// {trace_id} is replaced by the ID, {project} by TraceProject or else
	// the project of the record's queue. TraceURLOff shows the IDs without
	// links. Defaults to DefaultTraceURL (Cloud Trace).
	TraceURL string
	// TraceProject is the project {project} names in TraceURL, for traces
	// kept in a project other than the queues' (and for a worker's
	// deliveries, whose queue names no project). Defaults to the project
	// of each record's queue.
	TraceProject string
	// Logger receives errors that a page cannot show. Defaults to
	// discarding.
	Logger *slog.Logger
	// Clock reads the time for stale ages and the health refresh. Defaults
	// to the real clock.
	Clock clockwork.Clock
}

func (c Config) withDefaults() Config {
	if c.StaleAfter == 0 {
		c.StaleAfter = ctd.DefaultStaleAfter
	}
	if c.HealthEvery == 0 {
		c.HealthEvery = 30 * time.Second
	}
	if c.Refresh == 0 {
		c.Refresh = 5 * time.Second
	}
	if c.Timeout == 0 {
		c.Timeout = 5 * time.Second
	}
	if c.PageSize == 0 {
		c.PageSize = 100
	}
	if c.LookupBudget == 0 {
		c.LookupBudget = 120 * time.Millisecond
	}
	if c.TraceURL == "" {
		c.TraceURL = DefaultTraceURL
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Clock == nil {
		c.Clock = clockwork.NewRealClock()
	}
	return c
}

func (c Config) validate() error {
	switch {
	case c.PostgresOutbox != nil && c.Outbox == "":
		return errors.New("console: PostgresOutbox is set but Outbox is empty; allowed: Outbox names it (its URL without the password)")
	case c.Emulator == "" && c.Outbox == "" && c.WorkerOutbox == "":
		return ErrNoSource
	case c.StaleAfter < 0:
		return fmt.Errorf("console: StaleAfter %s is negative; allowed: 0 or more", c.StaleAfter)
	case c.PageSize < 1 || c.PageSize > 1000:
		return fmt.Errorf("console: PageSize %d out of range; allowed: 1 to 1000 (one ListTasks page)", c.PageSize)
	case c.HealthEvery < 0 || c.Refresh < 0 || c.Timeout < 0:
		return fmt.Errorf("console: HealthEvery %s, Refresh %s and Timeout %s must not be negative", c.HealthEvery, c.Refresh, c.Timeout)
	}
	for _, h := range c.AllowHosts {
		if err := validAllowHost(h); err != nil {
			return err
		}
	}
	if c.TraceURL != TraceURLOff {
		return validTraceURL(c.TraceURL)
	}
	return nil
}

// Server is the console: an http.Handler rendering every page on the
// server. Its methods are safe for concurrent use.
type Server struct {
	cfg     Config
	client  *cloudtasks.Client
	box     store
	web     *http.Client
	pages   map[string]*template.Template
	csrf    string
	mux     *http.ServeMux
	health  *healthCache
	ids     idCache
	found   atomic.Pointer[string] // the HTTP address the emulator advertised
	lookups chan struct{}          // a slot per outbox lookup running
	bg      sync.WaitGroup         // lookups that outlive their page
	ctx     context.Context
	cancel  context.CancelFunc
	closing sync.Once

	// workerBox is the worker's outbox, for its deliveries table.
	workerBox *parquetbox.Outbox
}

// New opens the configured sources (a client for the emulator, the outbox
// read-only) and returns a console ready to serve. Close releases them.
func New(ctx context.Context, cfg Config) (*Server, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, configError{err}
	}
	pages, err := parsePages()
	if err != nil {
		return nil, err
	}
	token := make([]byte, 32)
	if _, err := rand.Read(token); err != nil {
		return nil, fmt.Errorf("console: CSRF token: %w", err)
	}
	s := &Server{cfg: cfg, pages: pages, csrf: hex.EncodeToString(token), web: &http.Client{Timeout: 5 * time.Second}, ids: idCache{max: idCacheSize}, lookups: make(chan struct{}, lookupWorkers)}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	if cfg.Emulator != "" {
		s.client, err = cloudtasks.NewClient(ctx, emulator.ClientOptions(cfg.Emulator)...)
		if err != nil {
			return nil, fmt.Errorf("console: client for emulator %s: %w", cfg.Emulator, err)
		}
	}
	if cfg.Outbox != "" {
		if cfg.PostgresOutbox != nil {
			s.box = pgStore{cfg.PostgresOutbox}
		} else {
			files, err := parquetbox.Open(ctx, parquetbox.Config{Root: cfg.Outbox, ReadOnly: true, Logger: cfg.Logger})
			if err != nil {
				s.Close()
				return nil, fmt.Errorf("console: outbox %s: %w", cfg.Outbox, err)
			}
			s.box = fileStore{files, cfg}
		}
		s.health = newHealthCache(s.ctx, s.box, cfg)
	}
	if cfg.WorkerOutbox != "" {
		s.workerBox, err = parquetbox.Open(ctx, parquetbox.Config{Root: cfg.WorkerOutbox, ReadOnly: true, Logger: cfg.Logger})
		if err != nil {
			s.Close()
			return nil, fmt.Errorf("console: worker outbox %s: %w", cfg.WorkerOutbox, err)
		}
	}
	s.mux = s.routes()
	return s, nil
}

// Close stops the background work and releases the client and the outbox.
func (s *Server) Close() error {
	var errs []error
	s.closing.Do(func() {
		s.cancel()
		s.bg.Wait()
		if s.health != nil {
			s.health.wait()
		}
		if s.client != nil {
			errs = append(errs, s.client.Close())
		}
		if s.box != nil {
			errs = append(errs, s.box.Close())
		}
		if s.workerBox != nil {
			errs = append(errs, s.workerBox.Close())
		}
	})
	return errors.Join(errs...)
}

// ServeHTTP serves the console's pages, static files and actions.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	// Everything the pages load comes from the console itself; no page may
	// be framed, so an action button cannot be clicked through a frame.
	h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; form-action 'self'; base-uri 'none'")
	h.Set("X-Frame-Options", "DENY")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	s.mux.ServeHTTP(w, r)
}

// Listen opens a TCP listener on addr (DefaultAddr when empty) and logs one
// warning when the address is not a loopback one: the console has no
// login, so whoever reaches the port sees what it shows. An address on
// every interface (0.0.0.0, [::], ":PORT") is refused with
// ErrEveryInterface unless allowHosts names the hosts the console is
// reached by (Config.AllowHosts), because Serve answers only requests
// addressed to a name it knows.
func Listen(addr string, allowHosts []string, log *slog.Logger) (net.Listener, error) {
	if addr == "" {
		addr = DefaultAddr
	}
	if host, _, err := net.SplitHostPort(addr); err == nil && len(allowHosts) == 0 {
		if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
			return nil, fmt.Errorf("%w: %s listens on every interface; name the hosts the console is reached by (Config.AllowHosts), or bind to 127.0.0.1", ErrEveryInterface, addr)
		}
	}
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("console: listen on %s: %w", addr, err)
	}
	if !IsLoopback(lis.Addr()) && log != nil {
		log.Warn("console reachable beyond this machine and without login; bind to 127.0.0.1 unless that is intended", "addr", lis.Addr().String())
	}
	return lis, nil
}

// IsLoopback reports whether a listener's address is reachable only from
// this machine.
func IsLoopback(a net.Addr) bool {
	tcp, ok := a.(*net.TCPAddr)
	return ok && tcp.IP.IsLoopback()
}

// Serve serves the console on lis, behind Guard (only requests addressed
// to lis's address or to Config.AllowHosts, only same-origin actions),
// until ctx ends, then shuts the HTTP server down (the caller closes the
// Server).
func (s *Server) Serve(ctx context.Context, lis net.Listener) error {
	srv := &http.Server{Handler: Guard(s, lis.Addr(), s.cfg.AllowHosts), ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(lis) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	shut, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := srv.Shutdown(shut)
	if errors.Is(err, context.DeadlineExceeded) {
		// A browser's idle or speculative connection must not hold the
		// console open: drop what is left.
		err = srv.Close()
	}
	<-errc
	return err
}

func (s *Server) routes() *http.ServeMux {
	mux := http.NewServeMux()
	static, _ := fs.Sub(staticFS, "static")
	mux.Handle("GET /static/", http.StripPrefix("/static/", http.FileServerFS(static)))
	mux.HandleFunc("GET /{$}", s.page("queues", s.queuesPage))
	mux.HandleFunc("GET /queue", s.page("queue", s.queuePage))
	mux.HandleFunc("GET /task", s.page("task", s.taskPage))
	mux.HandleFunc("GET /deliveries", s.page("deliveries", s.deliveriesPage))
	mux.HandleFunc("GET /audit", s.page("audit", s.auditPage))
	mux.HandleFunc("GET /run", s.page("run", s.runPage))
	mux.HandleFunc("GET /outbox", s.page("outbox", s.outboxPage))
	if s.cfg.AllowActions {
		mux.HandleFunc("POST /actions/{action}", s.action)
	}
	return mux
}

// validToken compares a submitted CSRF token with the server's in constant
// time.
func (s *Server) validToken(got string) bool {
	return subtle.ConstantTimeCompare([]byte(got), []byte(s.csrf)) == 1
}
