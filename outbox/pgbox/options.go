package pgbox

import (
	"fmt"
	"regexp"
	"strconv"

	"github.com/jonboulle/clockwork"
)

// Defaults of Options.
const (
	// DefaultSchema is the schema that holds the tables.
	DefaultSchema = "public"
	// DefaultTablePrefix starts the name of each table:
	// ctdispatch_dispatch_outbox, ctdispatch_timers, ctdispatch_deliveries.
	DefaultTablePrefix = "ctdispatch_"
)

// maxPrefix bounds TablePrefix so that the longest index name
// (prefix, "dispatch_outbox", "_cloud_task_id") fits PostgreSQL's 63 bytes.
const maxPrefix = 34

// Options names the tables of an Outbox and gives it its clock. The zero
// value is ready to use.
type Options struct {
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
	Export ExportOptions
}

var identifier = regexp.MustCompile(`^[a-z_][a-z0-9_]*$`)

func (o Options) withDefaults() Options {
	if o.Schema == "" {
		o.Schema = DefaultSchema
	}
	if o.TablePrefix == "" {
		o.TablePrefix = DefaultTablePrefix
	}
	if o.Clock == nil {
		o.Clock = clockwork.NewRealClock()
	}
	return o
}

func (o Options) validate() error {
	if o.Export.set() {
		if err := o.Export.withDefaults().validate("Options.Export"); err != nil {
			return err
		}
	}
	for _, f := range []struct {
		field, v string
		max      int
	}{{"Schema", o.Schema, 63}, {"TablePrefix", o.TablePrefix, maxPrefix}} {
		if !identifier.MatchString(f.v) || len(f.v) > f.max {
			return &ConfigError{Field: "Options." + f.field, Value: strconv.Quote(f.v),
				Rule: fmt.Sprintf("is not a plain identifier; allowed: [a-z_][a-z0-9_]*, at most %d bytes", f.max)}
		}
	}
	return nil
}

// ConfigError names the option or argument that is wrong, its value and
// the rule.
type ConfigError struct {
	// Field is the option, for example "Options.Schema".
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
