package bench

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/ctdispatch/ctdispatch/cloudtasks"
)

// Mode is one kind of call the load generator measures.
type Mode string

// The modes, in the order reports list them.
const (
	// ModeCreateBare is a bare CreateTask through the official client with a
	// deterministic task name: the baseline every ratio is taken against.
	ModeCreateBare Mode = "create-bare"
	// ModeBatchBare is BatchCreateTasks through the official client, one
	// request in flight with BatchSize tasks: the baseline of
	// dispatch-batched.
	ModeBatchBare Mode = "batch-bare"
	// ModeDispatch is Dispatch in the default mode: an outbox whose
	// pending record is made durable beside the create call
	// (cloudtasks.DurabilityOverlapped).
	ModeDispatch Mode = "dispatch"
	// ModeDispatchStrict is Dispatch whose outcome is fsynced before it
	// returns (cloudtasks.DurabilityStrict).
	ModeDispatchStrict Mode = "dispatch-strict"
	// ModeDispatchBatched is ModeDispatch with Config.Batch: concurrent
	// calls share BatchCreateTasks requests.
	ModeDispatchBatched Mode = "dispatch-batched"
	// ModeInterval is Dispatch (overlapped) with a Parquet outbox in
	// parquetbox.Interval mode, synced every FlushInterval.
	ModeInterval Mode = "interval"
	// ModeMemory is Dispatch with the dispatcher's in-memory record (no
	// outbox directory).
	ModeMemory Mode = "memory"
	// ModeTimer is ScheduleTimer (retry timers) in the default mode.
	ModeTimer Mode = "timer"
	// ModeNaming is naming.NewDispatch and CloudTaskID alone: no I/O.
	ModeNaming Mode = "naming"
)

// AllModes returns every mode in report order.
func AllModes() []Mode {
	return []Mode{ModeCreateBare, ModeBatchBare, ModeDispatch, ModeDispatchStrict, ModeDispatchBatched, ModeInterval, ModeMemory, ModeTimer, ModeNaming}
}

// ParseModes reads a comma-separated list of mode names; "all" (or an
// empty string) means every mode. The result keeps report order and has no
// repeats.
func ParseModes(s string) ([]Mode, error) {
	if strings.TrimSpace(s) == "" || strings.TrimSpace(s) == "all" {
		return AllModes(), nil
	}
	want := map[Mode]bool{}
	for _, part := range strings.Split(s, ",") {
		m := Mode(strings.TrimSpace(part))
		if !m.valid() {
			return nil, &ConfigError{Field: "Modes", Value: string(m), Rule: "is not a mode; allowed: all, " + modeList()}
		}
		want[m] = true
	}
	var out []Mode
	for _, m := range AllModes() {
		if want[m] {
			out = append(out, m)
		}
	}
	return out, nil
}

func (m Mode) valid() bool {
	for _, k := range AllModes() {
		if m == k {
			return true
		}
	}
	return false
}

func modeList() string {
	names := make([]string, 0, len(AllModes()))
	for _, m := range AllModes() {
		names = append(names, string(m))
	}
	return strings.Join(names, ", ")
}

// Defaults for Config.
const (
	DefaultConcurrency = 64
	DefaultCount       = 20000
	DefaultRounds      = 4
	DefaultPayloadSize = 256
	DefaultSeed        = 1
	// MaxPayloadSize keeps a task under Cloud Tasks' 1 MiB limit with room
	// for the URL and headers.
	MaxPayloadSize = 1_000_000
	// Queue is the queue every mode writes to; Run creates it when missing.
	Queue = "projects/ctdispatch-bench/locations/local/queues/bench"
)

// Config says what to measure and how hard. Zero fields take the defaults
// documented on them.
type Config struct {
	// Modes to measure, each in every round. Defaults to AllModes.
	Modes []Mode
	// Concurrency is the number of callers per mode. Defaults to 64.
	Concurrency int
	// Count is the number of calls per mode over all rounds. Defaults to
	// 20,000 when Duration is zero; the two exclude each other.
	Count int
	// Duration is the wall time per mode over all rounds, instead of Count.
	Duration time.Duration
	// Rounds is how many alternating rounds each mode gets, so that noise
	// from other processes hits every mode alike. Defaults to 4.
	Rounds int
	// PayloadSize is the task body in bytes (a JSON object from 8 bytes
	// on). Defaults to 256; negative means no body.
	PayloadSize int
	// DuplicateRatio is the fraction of calls, in [0, 1), that repeat the
	// ID of an earlier call of the same round.
	DuplicateRatio float64
	// FaultRate is the fraction of CreateTask calls the in-process emulator
	// fails with UNAVAILABLE.
	FaultRate float64
	// CommitThenFailRate is the fraction of CreateTask calls the in-process
	// emulator carries out and then fails with UNAVAILABLE.
	CommitThenFailRate float64
	// Seed makes duplicate choices and fault decisions repeatable. Defaults
	// to 1.
	Seed uint64
	// Latency is added by the in-process emulator to every call, standing
	// for the network and the service (a few milliseconds in a region).
	// Defaults to none.
	Latency time.Duration
	// BatchSize is how many tasks each batch-bare request carries.
	// Defaults to Concurrency, at most 100 (the service's limit): the size
	// the dispatcher's batches reach when every caller waits.
	BatchSize int
	// BatchInFlight is dispatch-batched's cloudtasks.Config.BatchInFlight:
	// the most requests one queue has in flight. Defaults to
	// cloudtasks.DefaultBatchInFlight.
	BatchInFlight int
	// EmulatorAddr is the host:port of a running emulator (for example
	// `ctdispatch emulator --no-delivery`). Defaults to an in-process
	// emulator with delivery disabled.
	EmulatorAddr string
	// EmulatorCommand, when set, starts the emulator in a process of its
	// own with this command (for the CLI: the ctdispatch binary and
	// "emulator"; the listen flags and the bench queue are added), so
	// that the process's CPU figures are the client side's alone. It
	// is stopped after the run. Excludes EmulatorAddr.
	EmulatorCommand []string
	// OutboxDir holds the outboxes of the dispatch modes (a subdirectory
	// per mode). Defaults to a temporary directory removed
	// after the run. A PostgreSQL URL (postgres://…) puts them in that
	// database instead (package outbox/pgbox), each mode in a schema of its
	// own, ctdispatch_bench_ and the mode's name, which every run drops and
	// creates again; the interval mode, a Parquet log's, then does not
	// apply.
	OutboxDir string
	// Progress, if set, is called after each round of each mode with the
	// round (from 1), the mode, its successful and failed calls and the
	// round's wall time.
	Progress func(round int, m Mode, ops, errors int64, elapsed time.Duration)
}

// WithDefaults returns a copy of c with every unset field at its default.
func (c Config) WithDefaults() Config {
	if len(c.Modes) == 0 {
		c.Modes = AllModes()
	}
	if c.Concurrency == 0 {
		c.Concurrency = DefaultConcurrency
	}
	if c.Count == 0 && c.Duration == 0 {
		c.Count = DefaultCount
	}
	if c.Rounds == 0 {
		c.Rounds = DefaultRounds
	}
	if c.PayloadSize == 0 {
		c.PayloadSize = DefaultPayloadSize
	}
	if c.PayloadSize < 0 {
		c.PayloadSize = 0
	}
	if c.Seed == 0 {
		c.Seed = DefaultSeed
	}
	if c.BatchInFlight == 0 {
		c.BatchInFlight = cloudtasks.DefaultBatchInFlight
	}
	if c.BatchSize == 0 {
		c.BatchSize = min(c.Concurrency, 100)
	}
	return c
}

// ErrInvalidConfig matches every error about a Config.
var ErrInvalidConfig = errors.New("invalid bench config")

// ConfigError names the Config field at fault, its value and the rule.
type ConfigError struct {
	// Field is the Config field, for example "Concurrency".
	Field string
	// Value is the offending value as text.
	Value string
	// Rule says what is allowed.
	Rule string
}

func (e *ConfigError) Error() string {
	return fmt.Sprintf("bench: Config.%s %s %s", e.Field, e.Value, e.Rule)
}

// Is makes a ConfigError match ErrInvalidConfig.
func (e *ConfigError) Is(target error) bool { return target == ErrInvalidConfig }

// validate checks a Config that has its defaults.
func (c Config) validate() error {
	bad := func(field string, v any, rule string) error {
		return &ConfigError{Field: field, Value: fmt.Sprint(v), Rule: rule}
	}
	for _, m := range c.Modes {
		if !m.valid() {
			return bad("Modes", m, "is not a mode; allowed: "+modeList())
		}
	}
	switch {
	case c.Concurrency < 1:
		return bad("Concurrency", c.Concurrency, "must be at least 1")
	case c.Count < 0:
		return bad("Count", c.Count, "must not be negative")
	case c.Duration < 0:
		return bad("Duration", c.Duration, "must not be negative")
	case c.Count > 0 && c.Duration > 0:
		return bad("Count", c.Count, "and Duration exclude each other; give one")
	case c.Rounds < 1:
		return bad("Rounds", c.Rounds, "must be at least 1")
	case c.Count > 0 && c.Count < c.Rounds:
		return bad("Count", c.Count, fmt.Sprintf("is below Rounds (%d); every round needs a call", c.Rounds))
	case c.PayloadSize > MaxPayloadSize:
		return bad("PayloadSize", c.PayloadSize, fmt.Sprintf("exceeds %d bytes (Cloud Tasks allows 1 MiB per task)", MaxPayloadSize))
	case !(c.DuplicateRatio >= 0 && c.DuplicateRatio < 1):
		return bad("DuplicateRatio", c.DuplicateRatio, "must be in [0, 1)")
	case !(c.FaultRate >= 0 && c.FaultRate <= 1):
		return bad("FaultRate", c.FaultRate, "must be in [0, 1]")
	case !(c.CommitThenFailRate >= 0 && c.CommitThenFailRate <= 1):
		return bad("CommitThenFailRate", c.CommitThenFailRate, "must be in [0, 1]")
	case c.Latency < 0:
		return bad("Latency", c.Latency, "must not be negative")
	case c.BatchInFlight < 1:
		return bad("BatchInFlight", c.BatchInFlight, "must be at least 1")
	case c.BatchSize < 1 || c.BatchSize > 100:
		return bad("BatchSize", c.BatchSize, "must be in [1, 100] (BatchCreateTasks takes at most 100 tasks)")
	case isPostgresURL(c.OutboxDir) && slices.Contains(c.Modes, ModeInterval):
		return bad("Modes", ModeInterval, "is a Parquet log's mode; it does not apply to a PostgreSQL OutboxDir")
	case c.EmulatorAddr != "" && len(c.EmulatorCommand) > 0:
		return bad("EmulatorCommand", strings.Join(c.EmulatorCommand, " "), "starts an emulator; EmulatorAddr names a running one: set one of them")
	case len(c.EmulatorCommand) > 0 && c.Latency > 0:
		return bad("Latency", c.Latency, "needs the in-process emulator")
	case len(c.EmulatorCommand) > 0 && (c.FaultRate > 0 || c.CommitThenFailRate > 0):
		return bad("FaultRate", c.FaultRate+c.CommitThenFailRate, "needs the in-process emulator")
	case c.EmulatorAddr != "" && c.Latency > 0:
		return bad("Latency", c.Latency, "needs the in-process emulator; configure latency on the emulator at "+c.EmulatorAddr+" instead")
	case c.EmulatorAddr != "" && (c.FaultRate > 0 || c.CommitThenFailRate > 0):
		return bad("FaultRate", c.FaultRate+c.CommitThenFailRate, "needs the in-process emulator; configure faults on the emulator at "+c.EmulatorAddr+" instead")
	}
	return nil
}

// isPostgresURL reports whether an OutboxDir names a PostgreSQL database.
func isPostgresURL(s string) bool {
	return strings.HasPrefix(s, "postgres://") || strings.HasPrefix(s, "postgresql://")
}
