package emulator

import (
	"crypto/rsa"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"time"

	"github.com/jonboulle/clockwork"
	"google.golang.org/grpc/codes"

	"github.com/ctdispatch/ctdispatch/internal/hostguard"
)

// Defaults applied by New when a Config field is left at its zero value.
const (
	// DefaultAddr is the gRPC listen address: loopback, any free port.
	DefaultAddr = "127.0.0.1:0"
	// DefaultNameReuseWindow is how long a task name stays taken after the
	// task was executed, exhausted, deleted or purged: the upper bound the
	// service documents.
	DefaultNameReuseWindow = 24 * time.Hour
	// DefaultQueueReuseWindow is how long a deleted queue's name stays
	// taken: 7 days, as the Cloud Tasks documentation on deleting queues
	// says (the v2 proto speaks of a tombstone window of up to 3 days; the
	// emulator takes the longer bound, as it does for task names).
	DefaultQueueReuseWindow = 7 * 24 * time.Hour
	// DefaultDeliveryLogLimit is how many delivery attempts Deliveries keeps.
	DefaultDeliveryLogLimit = 10000
	// DefaultOperationRetention is how long a finished batch operation, and
	// the request ID that leads to it, is kept after it finished.
	DefaultOperationRetention = time.Hour
	// DefaultOperationLimit is how many finished batch operations are kept
	// at most; the oldest go first.
	DefaultOperationLimit = 10000
)

// ErrInvalidConfig matches every error New returns for a bad Config; the
// *ConfigError names the field.
var ErrInvalidConfig = errors.New("invalid emulator config")

// ConfigError names the Config field that is wrong, its value and the rule.
type ConfigError struct {
	// Field is the Config field, for example "Queues[0].Name".
	Field string
	// Value is the offending value as text.
	Value string
	// Rule says what is allowed.
	Rule string
}

func (e *ConfigError) Error() string {
	return fmt.Sprintf("emulator: Config.%s %q %s", e.Field, e.Value, e.Rule)
}

// Is makes a ConfigError match ErrInvalidConfig.
func (e *ConfigError) Is(target error) bool { return target == ErrInvalidConfig }

// Config configures a Server. The zero value is a working emulator on a
// free loopback port with the real clock.
type Config struct {
	// Addr is the gRPC listen address. Defaults to DefaultAddr. Ignored
	// when Listener is set.
	Addr string
	// Listener, if set, is used instead of listening on Addr (for example
	// a bufconn listener). The Server closes it. For a listener that is not
	// TCP, dial it yourself and give the client option.WithGRPCConn instead
	// of using ClientOptions.
	Listener net.Listener
	// HTTPAddr is where the OIDC discovery document and the JWKS are
	// served, so workers can verify the tokens the emulator signs.
	// Defaults to "127.0.0.1:0".
	HTTPAddr string
	// Clock drives schedule times, backoff, rate limits, dispatch deadlines
	// and name reuse windows. Defaults to the real clock; tests pass
	// clockwork.NewFakeClock() and advance it instead of sleeping.
	Clock clockwork.Clock
	// NameReuseWindow is how long a task name stays taken after the task
	// left the queue (executed, exhausted, deleted or purged). Defaults to
	// DefaultNameReuseWindow. A negative value forgets names at once.
	NameReuseWindow time.Duration
	// QueueReuseWindow is how long a deleted queue's name cannot be
	// created again. Defaults to DefaultQueueReuseWindow; negative: none.
	QueueReuseWindow time.Duration
	// Queues are created when the server starts.
	Queues []QueueConfig
	// Logger receives one debug record per RPC and per delivery attempt.
	// Defaults to a logger that discards everything.
	Logger *slog.Logger
	// Faults are injected into RPCs; see Faults. Defaults to none.
	Faults Faults
	// DeliveryFaults are injected into the delivery of tasks: replies
	// lost, deliveries doubled, connections reset, attempts delayed and
	// 2xx answers withheld past the dispatch deadline, per task or at
	// rates; see DeliveryFaults. They act around HTTPClient, whichever
	// client it is, and wait on Clock. Defaults to none.
	DeliveryFaults DeliveryFaults
	// HTTPClient sends deliveries. Defaults to a client with no timeout of
	// its own (each attempt is bounded by the task's dispatch deadline).
	// Whichever client sends them, each attempt is sent once: the emulator
	// builds requests its Transport does not send again on its own.
	HTTPClient *http.Client
	// DisableDelivery stores tasks without ever delivering them, for pure
	// API tests and benchmarks.
	DisableDelivery bool
	// ManualDelivery turns the background delivery loop off: tasks are
	// delivered only by RunDue (and RunTask), so a test decides exactly
	// when attempts happen.
	ManualDelivery bool
	// DeliveryLogLimit is how many attempts Deliveries remembers (the
	// oldest are dropped first). Defaults to DefaultDeliveryLogLimit.
	DeliveryLogLimit int
	// OperationRetention is how long, on Clock, a finished
	// BatchCreateTasks or BatchDeleteTasks operation stays readable with
	// GetOperation and its request_id keeps answering a repeated call with
	// the same operation; after it, GetOperation answers NotFound and a
	// repeated request ID runs the batch again. Defaults to
	// DefaultOperationRetention. The service documents no bound; the
	// emulator keeps memory bounded in a long-lived process.
	OperationRetention time.Duration
	// OperationLimit bounds how many finished operations are kept,
	// whatever their age; the oldest are forgotten first. Defaults to
	// DefaultOperationLimit.
	OperationLimit int
	// SigningKey signs OIDC tokens. Defaults to a 2048-bit RSA key generated
	// on first use and shared by the process's servers.
	SigningKey *rsa.PrivateKey
	// OIDCIssuer is the "iss" claim of the tokens. Defaults to PublicURL,
	// whose /.well-known/openid-configuration points to the JWKS.
	OIDCIssuer string
	// PublicURL is the base URL at which workers reach the HTTP server,
	// for when that is not the address it listens on: an emulator in a
	// container listens on 0.0.0.0:8124 and is published to its workers
	// as, say, http://localhost:8124. JWKSURL, PEMCertsURL and the
	// discovery document are built on it. Defaults to "http://" and the
	// HTTP listener's address. It must be an absolute http or https URL
	// with a host and no query or fragment; a trailing "/" is dropped.
	PublicURL string
	// AllowHosts names the hosts, besides the HTTP server's own address,
	// loopback names with its port (localhost, 127.0.0.1, [::1]) and
	// PublicURL's host, by which clients reach the HTTP server: "name"
	// for any port, "name:port" for that port only. A request with any
	// other Host header is answered 421 Misdirected Request, so that a web
	// page cannot read the inspection through a name it rebinds to the
	// emulator's address. Defaults to none.
	AllowHosts []string
}

func (c Config) withDefaults() Config {
	if c.Addr == "" {
		c.Addr = DefaultAddr
	}
	if c.HTTPAddr == "" {
		c.HTTPAddr = "127.0.0.1:0"
	}
	if c.Clock == nil {
		c.Clock = clockwork.NewRealClock()
	}
	if c.NameReuseWindow == 0 {
		c.NameReuseWindow = DefaultNameReuseWindow
	}
	if c.QueueReuseWindow == 0 {
		c.QueueReuseWindow = DefaultQueueReuseWindow
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if c.HTTPClient == nil {
		c.HTTPClient = &http.Client{}
	}
	if c.DeliveryLogLimit == 0 {
		c.DeliveryLogLimit = DefaultDeliveryLogLimit
	}
	if c.OperationRetention == 0 {
		c.OperationRetention = DefaultOperationRetention
	}
	if c.OperationLimit == 0 {
		c.OperationLimit = DefaultOperationLimit
	}
	return c
}

func (c Config) validate() error {
	if c.PublicURL != "" {
		if err := validatePublicURL(c.PublicURL); err != nil {
			return err
		}
	}
	if c.DeliveryLogLimit < 0 {
		return &ConfigError{Field: "DeliveryLogLimit", Value: fmt.Sprint(c.DeliveryLogLimit), Rule: "must not be negative"}
	}
	if c.OperationRetention < 0 {
		return &ConfigError{Field: "OperationRetention", Value: c.OperationRetention.String(), Rule: "must not be negative"}
	}
	if c.OperationLimit < 0 {
		return &ConfigError{Field: "OperationLimit", Value: fmt.Sprint(c.OperationLimit), Rule: "must not be negative"}
	}
	for i, h := range c.AllowHosts {
		if rule := hostguard.EntryRule(h, "tasks.internal"); rule != "" {
			return &ConfigError{Field: fmt.Sprintf("AllowHosts[%d]", i), Value: h, Rule: rule}
		}
	}
	for i, q := range c.Queues {
		if err := q.validate(); err != nil {
			var ce *ConfigError
			if errors.As(err, &ce) {
				ce.Field = fmt.Sprintf("Queues[%d].%s", i, ce.Field)
			}
			return err
		}
	}
	if err := c.DeliveryFaults.validate(); err != nil {
		return err
	}
	return c.Faults.validate()
}

// validatePublicURL accepts what a worker can fetch keys from: an absolute
// http or https URL with a host and a path at most, since the key paths
// are appended to it.
func validatePublicURL(v string) error {
	u, err := url.Parse(v)
	switch {
	case err != nil:
		return &ConfigError{Field: "PublicURL", Value: v, Rule: "is not a URL: " + err.Error()}
	case u.Scheme != "http" && u.Scheme != "https":
		return &ConfigError{Field: "PublicURL", Value: v, Rule: "must start with http:// or https://"}
	case u.Host == "":
		return &ConfigError{Field: "PublicURL", Value: v, Rule: "must name a host, for example http://localhost:8124"}
	case u.RawQuery != "" || u.Fragment != "" || u.User != nil:
		return &ConfigError{Field: "PublicURL", Value: v, Rule: "must not have a query, a fragment or user information"}
	}
	return nil
}

// QueueConfig describes a queue to create. Zero values take the service's
// defaults (see the Default… constants in api_queue.go).
type QueueConfig struct {
	// Name is the full queue name,
	// projects/PROJECT/locations/LOCATION/queues/QUEUE.
	Name string `json:"name" yaml:"name"`
	// MaxDispatchesPerSecond is the token bucket's refill rate (at most 500).
	MaxDispatchesPerSecond float64 `json:"max_dispatches_per_second" yaml:"max_dispatches_per_second"`
	// MaxConcurrentDispatches bounds attempts in flight (at most 5000).
	MaxConcurrentDispatches int32 `json:"max_concurrent_dispatches" yaml:"max_concurrent_dispatches"`
	// MaxAttempts counts the first attempt; -1 means unlimited.
	MaxAttempts int32 `json:"max_attempts" yaml:"max_attempts"`
	// MaxRetryDuration limits retrying, measured from the first attempt;
	// 0 means unlimited.
	MaxRetryDuration time.Duration `json:"max_retry_duration" yaml:"max_retry_duration"`
	// MinBackoff is the first retry delay.
	MinBackoff time.Duration `json:"min_backoff" yaml:"min_backoff"`
	// MaxBackoff caps the retry delay.
	MaxBackoff time.Duration `json:"max_backoff" yaml:"max_backoff"`
	// MaxDoublings is how many times the delay doubles before it grows
	// linearly.
	MaxDoublings int32 `json:"max_doublings" yaml:"max_doublings"`
	// Paused creates the queue in the PAUSED state.
	Paused bool `json:"paused" yaml:"paused"`
}

func (q QueueConfig) validate() error {
	if _, err := parseQueueName(q.Name); err != nil {
		return &ConfigError{Field: "Name", Value: q.Name, Rule: err.Error()}
	}
	if err := validateRateLimits(q.rateLimits()); err != nil {
		return &ConfigError{Field: "rate limits", Value: q.Name, Rule: err.Error()}
	}
	if err := validateRetryConfig(q.retryConfig()); err != nil {
		return &ConfigError{Field: "retry config", Value: q.Name, Rule: err.Error()}
	}
	return nil
}

// FaultRule injects one kind of failure into matching RPCs.
type FaultRule struct {
	// Methods are RPC names such as "CreateTask" or "GetTask"; empty
	// matches every RPC.
	Methods []string `json:"methods" yaml:"methods"`
	// Rate is the chance, from 0 to 1, that a matching call is hit.
	Rate float64 `json:"rate" yaml:"rate"`
	// Code is the status returned by a hit call. codes.OK means the rule
	// only adds Latency.
	Code codes.Code `json:"code" yaml:"-"` // a configuration file names it
	// CommitThenFail applies the call before failing it: the task is
	// created (or deleted) but the caller sees Code, exactly the case in
	// which a retry meets AlreadyExists.
	CommitThenFail bool `json:"commit_then_fail" yaml:"commit_then_fail"`
	// Latency is added to a hit call before it is handled. It is real
	// time, not the Config's clock, because it stands for the network.
	Latency time.Duration `json:"latency" yaml:"latency"`
	// PerRequest applies the rule to each request of a BatchCreateTasks
	// call (each name of a BatchDeleteTasks call) instead of to the call:
	// a hit request fails alone, with Code under its index in the
	// operation's failed_requests, while the others succeed. With
	// CommitThenFail the hit request's task is created (or deleted) all the
	// same. Methods must name only batch RPCs, and Latency must be zero.
	PerRequest bool `json:"per_request" yaml:"per_request"`
}

// batchMethods are the RPCs a PerRequest rule may name.
var batchMethods = map[string]bool{"BatchCreateTasks": true, "BatchDeleteTasks": true}

// Faults is a deterministic fault plan: for a given Seed the n-th call of
// each RPC method always gets the same decision from each rule, whatever
// other methods do in between.
type Faults struct {
	// Seed makes the decisions repeatable.
	Seed uint64 `json:"seed" yaml:"seed"`
	// Rules are tried in order; latencies add up, and the first hit rule
	// with a non-OK Code decides the outcome.
	Rules []FaultRule `json:"rules" yaml:"rules"`
}

func (f Faults) validate() error {
	for i, r := range f.Rules {
		if r.Rate < 0 || r.Rate > 1 {
			return &ConfigError{Field: fmt.Sprintf("Faults.Rules[%d].Rate", i), Value: fmt.Sprint(r.Rate), Rule: "must be between 0 and 1"}
		}
		if r.Latency < 0 {
			return &ConfigError{Field: fmt.Sprintf("Faults.Rules[%d].Latency", i), Value: r.Latency.String(), Rule: "must not be negative"}
		}
		if r.CommitThenFail && r.Code == codes.OK {
			return &ConfigError{Field: fmt.Sprintf("Faults.Rules[%d].Code", i), Value: r.Code.String(), Rule: "must be an error code when CommitThenFail is set"}
		}
		for j, m := range r.Methods {
			if _, ok := knownMethods[m]; !ok {
				return &ConfigError{Field: fmt.Sprintf("Faults.Rules[%d].Methods[%d]", i, j), Value: m, Rule: "is not a Cloud Tasks RPC name (for example CreateTask)"}
			}
			if r.PerRequest && !batchMethods[m] {
				return &ConfigError{Field: fmt.Sprintf("Faults.Rules[%d].Methods[%d]", i, j), Value: m, Rule: "is not a batch RPC; a PerRequest rule names only BatchCreateTasks or BatchDeleteTasks"}
			}
		}
		if r.PerRequest {
			switch {
			case len(r.Methods) == 0:
				return &ConfigError{Field: fmt.Sprintf("Faults.Rules[%d].Methods", i), Value: "", Rule: "must name BatchCreateTasks or BatchDeleteTasks when PerRequest is set"}
			case r.Code == codes.OK:
				return &ConfigError{Field: fmt.Sprintf("Faults.Rules[%d].Code", i), Value: r.Code.String(), Rule: "must be an error code when PerRequest is set"}
			case r.Latency != 0:
				return &ConfigError{Field: fmt.Sprintf("Faults.Rules[%d].Latency", i), Value: r.Latency.String(), Rule: "must be zero when PerRequest is set (latency belongs to the call)"}
			}
		}
	}
	return nil
}
