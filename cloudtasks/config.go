package cloudtasks

import (
	"fmt"
	"log/slog"
	"math"
	"regexp"
	"time"

	"github.com/jonboulle/clockwork"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/api/option"

	"github.com/ctdispatch/ctdispatch/outbox"
)

// Config configures a Dispatcher. Zero fields take the defaults documented
// on them; NewDispatcher validates the result and names the field at fault.
type Config struct {
	// Project is the Google Cloud project ID. Required.
	Project string
	// Location is the Cloud Tasks location, for example "europe-west1".
	// Required.
	Location string
	// Queue is the queue ID of a request that names none (Task.Queue).
	// Defaults to none: then every Dispatch and ScheduleTimer must name
	// its queue.
	Queue string

	// Client is a ready Cloud Tasks client: the official *ctapi.Client, or
	// anything else that satisfies Client (a wrapper that observes calls).
	// Close leaves it open. At most one of Client, EmulatorAddr and
	// ClientOptions may be set; with none, the dispatcher opens the
	// official client with application default credentials.
	Client Client
	// EmulatorAddr points the dispatcher at a Cloud Tasks emulator
	// (host:port) over plain gRPC without authentication, for example the
	// in-repo emulator's Server.Addr().
	EmulatorAddr string
	// ClientOptions open the official client against the real service
	// with these options (credentials, endpoint).
	ClientOptions []option.ClientOption

	// Durability says what a returned answer promises about its record
	// and what it costs; see Durability and ADR 0006. Defaults to
	// DurabilityOverlapped.
	Durability Durability
	// Batch lets concurrent Dispatch and ScheduleTimer calls to one queue
	// share one BatchCreateTasks request (at most 100 tasks): the first
	// call goes alone at once, the calls that arrive while a request is in
	// flight form the next one, and the callers a shared request answered
	// gather again for their next calls (see the package doc's Batching).
	// Each call still gets its own outcome. If the service refuses the
	// method, calls fall back to CreateTask. Defaults to off.
	Batch bool
	// BatchInFlight bounds the requests one queue has in flight under
	// Batch: a gathered batch goes while others are still answering, up to
	// this many. Defaults to DefaultBatchInFlight (4).
	BatchInFlight int

	// Retry is the policy for transient errors. Zero fields take the
	// defaults documented on RetryPolicy.
	Retry RetryPolicy
	// StaleAfter is how old a pending record must be before Recover re-drives
	// it, and before Dispatch reports finishing it as "recovered". Defaults
	// to 1m.
	StaleAfter time.Duration
	// EnforceOwnership refuses to take over pending records written by
	// another processor (in Dispatch and Recover). Defaults to off, so any
	// instance finishes a crashed instance's work.
	EnforceOwnership bool
	// NameHold is how long Cloud Tasks keeps a deleted task's name from
	// being used again: an ID cancelled by a delete and dispatched again
	// within it gets ErrNameHeld. Defaults to 24h, the longest the service
	// documents for queues it manages; set 216h (9 days) for queues
	// created by queue.yaml.
	NameHold time.Duration

	// RelayQueues are the queue IDs whose transactional dispatches
	// (DispatchTx, ScheduleTimerTx) this dispatcher's relay creates: the
	// queues its client can reach. Defaults to Queue alone, or none when
	// Queue is empty; an empty non-nil list relays none. Intents of other queues are left to the relays of
	// dispatchers that name them (or "ctdispatch relay --queue").
	RelayQueues []string
	// RelayInterval is how long the relay waits, when nothing wakes it,
	// before it looks for intents anyway, and how often WaitOutcome reads
	// again when nothing tells it of an outcome. With a Listener it is the
	// fallback poll: a notification wakes the relay at the commit, and
	// the poll finds what a lost one did not announce (a listening
	// connection that dropped, a restarted server, a pooler in
	// transaction mode that delivers nothing), within about this long.
	// Without one it is how long an intent committed in another process
	// waits for a relay when intents come one at a time (WaitOutcome on
	// this dispatcher wakes its relay at once). Every idle relay runs one
	// claim statement per interval. Defaults to DefaultRelayInterval
	// (200ms) without a Listener and DefaultRelayPollInterval (1s) with
	// one.
	RelayInterval time.Duration
	// Listener wakes this dispatcher when its outbox's database has news,
	// instead of leaving it to RelayInterval: the relay when a transaction
	// that recorded an intent (DispatchTx, ScheduleTimerTx, CancelTx)
	// commits, or another relay releases intents, and WaitOutcome when a
	// relay in any process records an outcome. The program supplies it,
	// since it holds a database connection of its own
	// (outbox/pgbox/pgxlisten.New over pgx), and NewDispatcher starts it
	// on the outbox's channel; the outbox must send notifications
	// (outbox.Notices: pgbox, unless its Config.NoNotify). It also runs
	// under NoRelay, for WaitOutcome. Defaults to none: the relay and
	// WaitOutcome poll every RelayInterval.
	Listener outbox.Listener
	// RelayConcurrency is how many CreateTask (or DeleteTask) calls the
	// relay has in flight at once, each with the read before it; the
	// outcome's record and the intent's drop that follow a call do not
	// count (with pgbox they share one grouped statement), and the next
	// batch (up to 64) is claimed once the last of the one before has
	// started. Defaults to DefaultRelayConcurrency (16).
	RelayConcurrency int
	// RelayClaim is how long the relay's claim on a batch of intents keeps
	// other relays off them: it must outlast the batch's calls and their
	// retries, or another relay repeats a create while it runs (harmless
	// to the task, which Cloud Tasks dedups by name, but a wasted call and
	// a second outcome row). It is also how long intents wait for another
	// relay after their relay died, or stopped past its drain, holding
	// them; a relay that stops in time releases them, and one whose
	// database failed under it takes them back once it answers. Defaults
	// to 2 × Retry.MaxElapsed + StaleAfter (3m with their defaults); at
	// least Retry.MaxElapsed.
	RelayClaim time.Duration
	// RelayDrainTimeout bounds how long Close lets the relay's calls in
	// flight finish once it has stopped claiming and released the intents
	// it claimed and did not start; Close's context bounds it too. What is
	// still in flight then keeps its claim (RelayClaim), and Close's error
	// names it. Defaults to DefaultRelayDrainTimeout (30s), a Kubernetes
	// pod's grace period.
	RelayDrainTimeout time.Duration
	// NoRelay keeps NewDispatcher from starting the relay that it starts
	// when the outbox records intents (outbox.Intents: pgbox, Memory) and
	// RelayQueues names a queue. Relay still runs a pass when called.
	// Defaults to off: every dispatcher on the database relays.
	NoRelay bool
	// SkipOutboxCheck keeps NewDispatcher from checking, once, that the
	// outbox can keep records, when the outbox offers such a check
	// (outbox.Checker: a PostgreSQL outbox checks that the tables Migrate
	// makes exist). Set it for a service that may start before its
	// migration job has run: its calls then fail until the tables exist.
	// Defaults to off: NewDispatcher returns an error naming what is
	// missing and the command that makes it (a database it cannot reach
	// is no such answer: it is logged and the dispatcher starts).
	SkipOutboxCheck bool

	// OnRetry, if set, is called before each retry of a transient failure
	// (CreateTask, GetTask, DeleteTask), for example to tell a waiting user
	// why a command takes long. It must return quickly.
	OnRetry func(RetryEvent)

	// Logger receives one line per dispatch event, each carrying the
	// internal ID; never payloads or credentials. Defaults to discarding.
	Logger *slog.Logger
	// MeterProvider receives the dispatcher's metrics. Defaults to a no-op
	// provider.
	MeterProvider metric.MeterProvider
	// TracerProvider receives the dispatcher's spans (see the package
	// documentation's Tracing). Defaults to the global provider
	// (otel.GetTracerProvider) as it is at each call, so a program that
	// sets one later is traced; until it does, no span is made.
	TracerProvider trace.TracerProvider
	// Propagator writes the trace context into each task's HTTP headers
	// (traceparent and tracestate with the W3C propagator). Defaults to
	// the global propagator (otel.GetTextMapPropagator) as it is at each
	// call, which injects nothing until a program sets one; the first call
	// with a span that leaves without trace context logs a warning, once.
	Propagator propagation.TextMapPropagator
	// Clock drives timestamps, schedule-time checks and backoff waits.
	// Defaults to the real clock. Tests pass a fake one (the emulator's,
	// so both see one time): a clock with an Advance method, such as
	// *clockwork.FakeClock, is advanced by the dispatcher's own backoff
	// waits instead of being waited on, so a retry happens at once and the
	// clock shows the time it would have taken. Give the outbox the same
	// clock.
	Clock clockwork.Clock
}

// RetryPolicy bounds the retries of transient errors. The delay before call
// n+1 is min(Initial·Multiplier^(n-1), Max), scaled by a random factor in
// [1-Jitter, 1]; retries stop at MaxCalls or once MaxElapsed has passed.
// The caller's context does not stop them: the work is shared by identical
// calls and goes on (see MaxElapsed and WaitError).
type RetryPolicy struct {
	// Initial is the delay before the first retry. Defaults to 50ms.
	Initial time.Duration
	// Max caps a single delay. Defaults to 5s.
	Max time.Duration
	// Multiplier grows the delay after each retry. Defaults to 2.
	Multiplier float64
	// Jitter is the fraction of each delay that is randomised, in [0, 1].
	// Defaults to 0.5; set a negative value for none.
	Jitter float64
	// MaxCalls bounds the calls per Dispatch, the first included. Defaults
	// to 10.
	MaxCalls int
	// MaxElapsed bounds the retries for one ID, whatever the callers'
	// contexts: no call starts once MaxElapsed has passed since the first,
	// and a call in progress is bounded by the client's own timeout (20s
	// for the official client's CreateTask). The work is shared by
	// identical concurrent calls, so one caller's cancellation does not end
	// it; a caller whose context ends sooner gets a *WaitError while the
	// work goes on and records its outcome. Defaults to 1m.
	MaxElapsed time.Duration
}

// Durability says when an answered call's record is durable, and so what a
// crash can lose. How durable a record is at all is the outbox's business:
// parquetbox syncs its log on every group commit (or every interval, with
// its Interval option), Memory keeps nothing past the process.
type Durability string

// The durability modes. Each says which record of a call that returned an
// answer (an outcome or a permanent failure) is as durable as the outbox
// makes records; see ADR 0006.
const (
	// DurabilityOverlapped appends the pending record and waits for it to
	// be kept while the create call runs; the call returns when both are
	// done. The outcome is appended without waiting. After a machine crash
	// an answered call's record may say pending; Recover resolves it.
	DurabilityOverlapped Durability = "overlapped"
	// DurabilityStrict appends the pending record without waiting, then
	// returns only once the outcome is kept: after a crash the record of
	// every answered call says what the call answered.
	DurabilityStrict Durability = "strict"
)

// parseDurability checks a mode name.
func parseDurability(s string) (Durability, error) {
	switch d := Durability(s); d {
	case DurabilityOverlapped, DurabilityStrict:
		return d, nil
	}
	return "", &ConfigError{Field: "Durability", Value: s, Rule: "is not a durability mode; allowed: overlapped, strict"}
}

// Defaults for Config and RetryPolicy.
const (
	DefaultStaleAfter      = time.Minute
	DefaultNameHold        = 24 * time.Hour
	DefaultRetryInitial    = 50 * time.Millisecond
	DefaultRetryMax        = 5 * time.Second
	DefaultRetryMultiplier = 2.0
	DefaultRetryJitter     = 0.5
	DefaultRetryMaxCalls   = 10
	DefaultRetryMaxElapsed = time.Minute
	// DefaultRelayInterval is Config.RelayInterval's default without a
	// Listener.
	DefaultRelayInterval = 200 * time.Millisecond
	// DefaultRelayPollInterval is Config.RelayInterval's default with a
	// Listener: an idle relay then runs one statement a second.
	DefaultRelayPollInterval = time.Second
	// DefaultRelayConcurrency is Config.RelayConcurrency's default.
	DefaultRelayConcurrency = 16
	// DefaultRelayDrainTimeout is Config.RelayDrainTimeout's default.
	DefaultRelayDrainTimeout = 30 * time.Second
)

// WithDefaults returns a copy of c with every unset field at its default.
// It does not open anything.
func (c Config) WithDefaults() Config {
	c.Retry = c.Retry.WithDefaults()
	if c.Durability == "" {
		c.Durability = DurabilityOverlapped
	}
	if c.NameHold == 0 {
		c.NameHold = DefaultNameHold
	}
	if c.StaleAfter == 0 {
		c.StaleAfter = DefaultStaleAfter
	}
	if c.RelayQueues == nil && c.Queue != "" {
		c.RelayQueues = []string{c.Queue}
	}
	switch {
	case c.RelayInterval != 0:
	case c.Listener != nil:
		c.RelayInterval = DefaultRelayPollInterval
	default:
		c.RelayInterval = DefaultRelayInterval
	}
	if c.RelayConcurrency == 0 {
		c.RelayConcurrency = DefaultRelayConcurrency
	}
	if c.RelayClaim == 0 {
		c.RelayClaim = 2*c.Retry.MaxElapsed + c.StaleAfter
	}
	if c.RelayDrainTimeout == 0 {
		c.RelayDrainTimeout = DefaultRelayDrainTimeout
	}
	if c.BatchInFlight == 0 {
		c.BatchInFlight = DefaultBatchInFlight
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.MeterProvider == nil {
		c.MeterProvider = noop.NewMeterProvider()
	}
	if c.Clock == nil {
		c.Clock = clockwork.NewRealClock()
	}
	return c
}

// WithDefaults returns a copy of p with every unset field at its default.
func (p RetryPolicy) WithDefaults() RetryPolicy {
	if p.Initial == 0 {
		p.Initial = DefaultRetryInitial
	}
	if p.Max == 0 {
		p.Max = DefaultRetryMax
	}
	if p.Multiplier == 0 {
		p.Multiplier = DefaultRetryMultiplier
	}
	if p.Jitter == 0 {
		p.Jitter = DefaultRetryJitter
	}
	if p.Jitter < 0 {
		p.Jitter = 0
	}
	if p.MaxCalls == 0 {
		p.MaxCalls = DefaultRetryMaxCalls
	}
	if p.MaxElapsed == 0 {
		p.MaxElapsed = DefaultRetryMaxElapsed
	}
	return p
}

// The name patterns check lengths apart (boundedPattern): counted repetitions
// such as {1,100} compile into many regexp states at package init, a cost
// every process linking this package would pay at start-up.
var (
	projectPattern  = boundedPattern{regexp.MustCompile(`^[a-z][a-z0-9:.-]*$`), 100}
	locationPattern = boundedPattern{regexp.MustCompile(`^[a-z][a-z0-9-]*$`), 63}
	queuePattern    = boundedPattern{regexp.MustCompile(`^[A-Za-z0-9-]+$`), 100}
)

// boundedPattern is a pattern with a maximum length in bytes.
type boundedPattern struct {
	re  *regexp.Regexp
	max int
}

// MatchString reports whether s is at most max bytes long and matches.
func (p boundedPattern) MatchString(s string) bool { return len(s) <= p.max && p.re.MatchString(s) }

// validate checks a Config that already has its defaults.
func (c Config) validate() error {
	bad := func(field, value, rule string) error { return &ConfigError{Field: field, Value: value, Rule: rule} }
	switch {
	case !projectPattern.MatchString(c.Project):
		return bad("Project", c.Project, "is not a project ID; allowed: lowercase letters, digits, '-', '.', ':', starting with a letter")
	case !locationPattern.MatchString(c.Location):
		return bad("Location", c.Location, "is not a location; allowed: lowercase letters, digits and '-', for example europe-west1")
	case c.Queue != "" && !queuePattern.MatchString(c.Queue):
		return bad("Queue", c.Queue, "is not a queue ID; allowed: 1 to 100 of [A-Za-z0-9-]")
	case c.StaleAfter < 0:
		return bad("StaleAfter", c.StaleAfter.String(), "is negative")
	case c.NameHold < 0:
		return bad("NameHold", c.NameHold.String(), "is negative")
	case c.RelayInterval < 0:
		return bad("RelayInterval", c.RelayInterval.String(), "is negative")
	case c.RelayConcurrency < 0:
		return bad("RelayConcurrency", fmt.Sprint(c.RelayConcurrency), "is negative; allowed: 1 or more, 0 for the default")
	case c.RelayClaim < c.Retry.MaxElapsed:
		return bad("RelayClaim", c.RelayClaim.String(), fmt.Sprintf("is below Retry.MaxElapsed (%s): another relay would repeat creates still being retried", c.Retry.MaxElapsed))
	case c.RelayDrainTimeout < 0:
		return bad("RelayDrainTimeout", c.RelayDrainTimeout.String(), "is negative")
	case c.BatchInFlight < 0:
		return bad("BatchInFlight", fmt.Sprint(c.BatchInFlight), "is negative; allowed: 1 or more, 0 for the default")
	case c.Retry.Initial < 0:
		return bad("Retry.Initial", c.Retry.Initial.String(), "is negative")
	case c.Retry.Max < c.Retry.Initial:
		return bad("Retry.Max", c.Retry.Max.String(), fmt.Sprintf("is below Retry.Initial (%s)", c.Retry.Initial))
	case c.Retry.Multiplier < 1:
		return bad("Retry.Multiplier", fmt.Sprint(c.Retry.Multiplier), "is below 1")
	case math.IsNaN(c.Retry.Multiplier) || math.IsInf(c.Retry.Multiplier, 1):
		return bad("Retry.Multiplier", fmt.Sprint(c.Retry.Multiplier), "is not a finite number; allowed: 1 or more")
	case c.Retry.Jitter > 1:
		return bad("Retry.Jitter", fmt.Sprint(c.Retry.Jitter), "is above 1; allowed: [0, 1]")
	case c.Retry.MaxCalls < 1:
		return bad("Retry.MaxCalls", fmt.Sprint(c.Retry.MaxCalls), "is below 1")
	case c.Retry.MaxElapsed < 0:
		return bad("Retry.MaxElapsed", c.Retry.MaxElapsed.String(), "is negative")
	}
	for i, q := range c.RelayQueues {
		if !queuePattern.MatchString(q) {
			return bad(fmt.Sprintf("RelayQueues[%d]", i), q, "is not a queue ID; allowed: 1 to 100 of [A-Za-z0-9-]")
		}
	}
	if _, err := parseDurability(string(c.Durability)); err != nil {
		return err
	}
	clients := 0
	for _, set := range []bool{c.Client != nil, c.EmulatorAddr != "", len(c.ClientOptions) > 0} {
		if set {
			clients++
		}
	}
	if clients > 1 {
		return bad("Client", fmt.Sprintf("Client set: %t, EmulatorAddr %q, %d ClientOptions", c.Client != nil, c.EmulatorAddr, len(c.ClientOptions)),
			"names the client more than one way; set at most one of Client, EmulatorAddr and ClientOptions")
	}
	return nil
}

// queuePath returns the full resource name of a queue ID.
func (c *Config) queuePath(queue string) string {
	return "projects/" + c.Project + "/locations/" + c.Location + "/queues/" + queue
}
