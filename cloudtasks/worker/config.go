package worker

import (
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/jonboulle/clockwork"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/ctdispatch/ctdispatch/outbox"
)

// Defaults applied by New when a Config field is left at its zero value.
const (
	// DefaultMaxBodyBytes caps the body a worker reads: Cloud Tasks HTTP
	// tasks are at most 1 MB, plus room for a little slack.
	DefaultMaxBodyBytes = 1<<20 + 64<<10
	// DefaultLockTimeout is how long a delivery waits for another delivery
	// of the same key before it is answered 500 (retry later). It is below
	// the 15 s minimum dispatch deadline, so the answer reaches Cloud Tasks
	// before the service gives up on the attempt.
	DefaultLockTimeout = 10 * time.Second
	// MaxLockTimeout is the longest dispatch deadline Cloud Tasks allows.
	MaxLockTimeout = 30 * time.Minute
	// DefaultKeysTimeout bounds one fetch of the token signing keys when
	// KeysClient is not set.
	DefaultKeysTimeout = 30 * time.Second
)

// Config configures a Worker. Verification must be configured
// (Audiences and ServiceAccounts) or explicitly turned off
// (InsecureSkipVerify), and an Inbox must be given: the zero Config is an
// error that names what is missing, never a worker that silently checks
// nothing or runs a key twice.
type Config struct {
	// Audiences are the accepted "aud" claims of the OIDC token: the
	// audience set on the tasks' OidcToken, which Cloud Tasks defaults to
	// the task's URL. Required unless InsecureSkipVerify.
	Audiences []string
	// ServiceAccounts are the accepted "email" claims: the service
	// accounts the tasks' OidcToken names. Required unless
	// InsecureSkipVerify.
	ServiceAccounts []string
	// Issuers are the accepted "iss" claims. Defaults to DefaultIssuers()
	// (Google's); set the emulator's Issuer() to test against it.
	Issuers []string
	// KeysClient fetches the keys that sign the tokens. The verifier asks
	// Google's fixed key URL; a client whose transport answers that URL
	// with another key set (the emulator's JWKS) points it elsewhere. The
	// keys are cached as long as the answer's Cache-Control max-age says.
	// Defaults to a client with a DefaultKeysTimeout timeout.
	KeysClient *http.Client
	// InsecureSkipVerify turns token verification off: any caller that
	// reaches the handler can run tasks. For local development only; New
	// logs a warning. It may not be combined with Audiences,
	// ServiceAccounts or Issuers.
	InsecureSkipVerify bool
	// ExplainRefusals adds a refused token's full reason to the answer's
	// body, after the outcome's line: the value the token carried and the
	// rule, which names the accepted issuers, audiences or service
	// accounts, the key ID, the algorithm or the worker's clock. For
	// development only, for example behind the emulator, whose delivery
	// log keeps the start of each answer: anyone who can reach the URL
	// learns from it whose token to obtain and for which audience, so New
	// logs a warning when it is set. Defaults to false: the body is the
	// outcome alone ("unauthorized", "forbidden", "keys_unavailable"),
	// HeaderRefusal carries the reason's code, and the full reason is
	// logged. It may not be combined with InsecureSkipVerify, which
	// refuses nothing.
	ExplainRefusals bool
	// Inbox makes each key's work happen once. Required: NewSQLInbox for
	// exactly-once effects across processes (the handler's writes commit
	// with the key's done mark), NewMemoryInbox for one process.
	Inbox Inbox
	// Outbox, when set, records every delivery that passed verification
	// and the key check in its deliveries table (outbox.TableDeliveries): a
	// started record before the inbox and the handler run, and one with
	// the outcome, the HTTP status and the latency before the answer is
	// sent. Give the worker an outbox of its own (parquetbox.Open on a
	// root the dispatchers do not use, or outbox.NewMemory). A record that
	// cannot be written never changes the answer: it is logged at error
	// level and counted (MetricRecordFailures), because the inbox has
	// already decided, and a retry would not bring the effect back to
	// record it. Defaults to nil: nothing is recorded, and a worker that
	// imports only package outbox links no Parquet code.
	Outbox outbox.Outbox
	// Clock gives the arrival time and the latency recorded in the
	// outbox and timed in MetricDuration. Token expiry is still checked
	// against the wall clock. Defaults to the real clock.
	Clock clockwork.Clock
	// AcceptUnkeyed lets a task without an Idempotency-Key (one not
	// dispatched by ctdispatch) reach the handler, with a zero Delivery.ID,
	// no inbox and no transaction: its work may happen more than once.
	// By default such a task is refused: answered 200, so Cloud Tasks
	// drops it, and logged and counted as rejected.
	AcceptUnkeyed bool
	// MaxBodyBytes caps the request body. A longer body is answered 413,
	// which Cloud Tasks retries: only a worker configured below what its
	// queue sends sees one, and raising the cap lets the retries through.
	// Defaults to DefaultMaxBodyBytes.
	MaxBodyBytes int64
	// LockTimeout bounds how long a delivery waits for another delivery of
	// the same key to finish, in this process and in the inbox's database,
	// before it is answered 500. Keep it below the queue's dispatch
	// deadline. Defaults to DefaultLockTimeout; at most MaxLockTimeout.
	LockTimeout time.Duration
	// Logger receives a record per delivery (debug when it went well,
	// warn or error otherwise). Defaults to discarding.
	Logger *slog.Logger
	// MeterProvider receives the metrics listed in the package
	// documentation. Defaults to a no-op provider.
	MeterProvider metric.MeterProvider
	// TracerProvider receives a consumer span per request (see the package
	// documentation's Tracing), in which the inbox transaction and the
	// handler run. Defaults to the global provider
	// (otel.GetTracerProvider) as it is at each request; until a program
	// sets one, no span is made.
	TracerProvider trace.TracerProvider
	// Propagator reads the producer's trace context from the request's
	// headers (traceparent and tracestate with the W3C propagator), which
	// the consumer span links to and, unless TraceLinkOnly, continues.
	// Defaults to the global propagator (otel.GetTextMapPropagator) as it
	// is at each request.
	Propagator propagation.TextMapPropagator
	// TraceLinkOnly makes the consumer span only link to the producer span
	// the request's headers name: it starts a trace of its own unless the
	// request's context already holds a span (a server span), as before
	// the default changed. Defaults to false: when the request carries a
	// producer's context and its context holds no span, the consumer span
	// is the producer span's child, in its trace, and linked to it too, so
	// Dispatch, each delivery and the handler's work are one trace (and,
	// under a parent-based sampler, the producer's sampling decision
	// holds for the delivery). A span already in the request's context is
	// the parent either way.
	TraceLinkOnly bool
}

func (c Config) withDefaults() Config {
	if len(c.Issuers) == 0 && !c.InsecureSkipVerify {
		c.Issuers = DefaultIssuers()
	}
	if c.KeysClient == nil {
		c.KeysClient = &http.Client{Timeout: DefaultKeysTimeout}
	}
	if c.MaxBodyBytes == 0 {
		c.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if c.LockTimeout == 0 {
		c.LockTimeout = DefaultLockTimeout
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

func (c Config) validate() error {
	bad := func(field, value, rule string) error {
		return &ConfigError{Field: "Config." + field, Value: value, Rule: rule}
	}
	lists := []struct {
		field string
		v     []string
	}{{"Audiences", c.Audiences}, {"ServiceAccounts", c.ServiceAccounts}, {"Issuers", c.Issuers}}
	for _, l := range lists {
		switch {
		case c.InsecureSkipVerify && len(l.v) > 0:
			return bad(l.field, fmt.Sprintf("%q", l.v), "is set although InsecureSkipVerify turns verification off; drop one of them")
		case !c.InsecureSkipVerify && len(l.v) == 0:
			return bad(l.field, "[]", "is empty; tokens cannot be verified without it (InsecureSkipVerify turns verification off)")
		}
		for i, s := range l.v {
			if s == "" {
				return bad(fmt.Sprintf("%s[%d]", l.field, i), `""`, "is empty")
			}
		}
	}
	switch {
	case c.InsecureSkipVerify && c.ExplainRefusals:
		return bad("ExplainRefusals", "true", "is set although InsecureSkipVerify turns verification off, so no token is refused; drop one of them")
	case c.Inbox == nil:
		return bad("Inbox", "nil", "is required: NewSQLInbox for exactly-once effects across processes, NewMemoryInbox for one process")
	case c.MaxBodyBytes < 0:
		return bad("MaxBodyBytes", fmt.Sprint(c.MaxBodyBytes), "is negative; allowed: 1 or more (0: the default)")
	case c.LockTimeout < 0 || c.LockTimeout > MaxLockTimeout:
		return bad("LockTimeout", c.LockTimeout.String(), "is out of range; allowed: 1ns to 30m (0: the default 10s)")
	}
	return nil
}
