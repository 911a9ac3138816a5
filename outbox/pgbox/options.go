package pgbox

import (
	"fmt"
	"regexp"
	"strconv"
	"time"

	"github.com/jonboulle/clockwork"
)

// Defaults of Config.
const (
	// DefaultSchema is the schema that holds the tables.
	DefaultSchema = "public"
	// DefaultTablePrefix starts the name of each table:
	// ctdispatch_dispatch_outbox, ctdispatch_timers, ctdispatch_deliveries.
	DefaultTablePrefix = "ctdispatch_"
	// DefaultNotifyGap is Config.NotifyGap's default.
	DefaultNotifyGap = 10 * time.Millisecond
)

// maxPrefix bounds TablePrefix so that the longest index name
// (prefix, "dispatch_outbox", "_cloud_task_id") fits PostgreSQL's 63 bytes.
const maxPrefix = 34

// Config names the tables of an Outbox and gives it its clock. The zero
// value is ready to use.
type Config struct {
	// Schema holds the tables. Defaults to DefaultSchema; Migrate creates
	// it if needed. A plain lower-case identifier ([a-z_][a-z0-9_]*, at
	// most 63 bytes).
	Schema string
	// TablePrefix starts each table's name, which ends in the outbox
	// table's own (dispatch_outbox, timers, deliveries). Defaults to
	// DefaultTablePrefix. A plain lower-case identifier, at most 34 bytes,
	// so every index name fits PostgreSQL's 63.
	TablePrefix string
	// Clock gives the times of records appended without one, the "now" of
	// Pending, ClaimPending and Retain, and claims' expiry. Defaults to the
	// real clock. Give it the clock the dispatcher uses.
	Clock clockwork.Clock
	// Export, when set (Root and Open are then required), runs an
	// Exporter inside the outbox from New until Close: every
	// Export.Interval it writes the changes not yet exported to the
	// Parquet tables Export.Open opens at Export.Root, and Flush (which a
	// dispatcher's Close calls) writes those left. Run it in every
	// dispatcher on the database, or in one "ctdispatch export" process:
	// exporters share the work. Unset, nothing is exported.
	Export ExportConfig
	// NoNotify keeps the statements that record intents from sending the
	// notification (PostgreSQL's NOTIFY, see NoticeChannel) that wakes
	// listening relays. Where no relay listens (none has a
	// cloudtasks.Config.Listener) it is wasted. Relays then find intents
	// by polling. Defaults to off: notifications are sent.
	NoNotify bool
	// NotifyGap spaces this outbox's notifications of intents: a
	// transaction that records an intent notifies unless one of this
	// outbox's did less than NotifyGap before, so that its relays are
	// woken at most once per gap by this process. PostgreSQL commits the
	// transactions that notified one at a time, each waiting for its own
	// WAL flush under a lock of the whole cluster: notifying in every
	// transaction cut the commits per second of 64 concurrent callers
	// by 30 to 60% on a server that syncs its WAL (BENCHMARKS.md). A
	// transaction that did not notify is found by the relay woken by the
	// one before it, which looks again NotifyGap later; one that commits
	// later than that (a long transaction), or whose notifier rolled
	// back, waits for the relay's poll (cloudtasks.Config.RelayInterval).
	// Give every process on a database the same gap. Defaults to
	// DefaultNotifyGap (10ms); a negative value notifies in every
	// transaction.
	NotifyGap time.Duration
}

var identifier = regexp.MustCompile(`^[a-z_][a-z0-9_]*$`)

func (o Config) withDefaults() Config {
	if o.Schema == "" {
		o.Schema = DefaultSchema
	}
	if o.TablePrefix == "" {
		o.TablePrefix = DefaultTablePrefix
	}
	if o.Clock == nil {
		o.Clock = clockwork.NewRealClock()
	}
	switch {
	case o.NotifyGap == 0:
		o.NotifyGap = DefaultNotifyGap
	case o.NotifyGap < 0:
		o.NotifyGap = 0
	}
	return o
}

func (o Config) validate() error {
	if o.Export.set() {
		if err := o.Export.withDefaults().validate("Config.Export"); err != nil {
			return err
		}
	}
	for _, f := range []struct {
		field, v string
		max      int
	}{{"Schema", o.Schema, 63}, {"TablePrefix", o.TablePrefix, maxPrefix}} {
		if !identifier.MatchString(f.v) || len(f.v) > f.max {
			return &ConfigError{Field: "Config." + f.field, Value: strconv.Quote(f.v),
				Rule: fmt.Sprintf("is not a plain identifier; allowed: [a-z_][a-z0-9_]*, at most %d bytes", f.max)}
		}
	}
	return nil
}

// ConfigError names the option or argument that is wrong, its value and
// the rule.
type ConfigError struct {
	// Field is the option, for example "Config.Schema".
	Field string
	// Value is the offending value as text.
	Value string
	// Rule says what is allowed.
	Rule string
}

// Error names the field, the value and the rule.
func (e *ConfigError) Error() string {
	return fmt.Sprintf("pgbox: %s %s %s", e.Field, e.Value, e.Rule)
}

// Options is the name Config had before settings were called Config in
// every package.
//
// Deprecated: use Config. Options stays for one minor version.
type Options = Config

// ExportOptions is the name ExportConfig had before settings were called
// Config in every package.
//
// Deprecated: use ExportConfig. ExportOptions stays for one minor
// version.
type ExportOptions = ExportConfig
