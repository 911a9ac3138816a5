package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/ctdispatch/ctdispatch/cloudtasks/emulator"
)

// Scenario names, in the order Run runs them.
const (
	ScenarioHerd     = "herd"
	ScenarioCrash    = "crash"
	ScenarioFaults   = "faults"
	ScenarioBadInput = "bad-input"
	// ScenarioRecoverHerd races Recover against a herd of Dispatch calls
	// of the same stale IDs.
	ScenarioRecoverHerd = "recover-herd"
	// ScenarioDiskFull fills the outbox's disk in the middle of a run.
	ScenarioDiskFull = "disk-full"
	// ScenarioBusyDay has writers and two compactors share one root
	// (a directory, and a bucket when Options.GCSEmulator is set) through
	// a day of SIGKILLs.
	ScenarioBusyDay = "busy-day"
	// ScenarioE2E follows logical attempts from the orchestrators through
	// the emulator's deliveries to the workers' effects, with faults at
	// every hop, on a Parquet directory and on PostgreSQL.
	ScenarioE2E = "e2e"
)

// Scenarios lists every scenario in the order Run runs them.
var Scenarios = []string{ScenarioHerd, ScenarioCrash, ScenarioFaults, ScenarioBadInput, ScenarioRecoverHerd, ScenarioDiskFull, ScenarioBusyDay, ScenarioE2E}

// childScenarios start ctdispatch processes, so they need Options.Binary.
var childScenarios = []string{ScenarioHerd, ScenarioCrash, ScenarioBadInput, ScenarioRecoverHerd, ScenarioDiskFull, ScenarioBusyDay, ScenarioE2E}

// Default sizes; Long multiplies them (see Options).
const (
	DefaultHerdRequests  = 10_000
	DefaultHerdProcesses = 3
	DefaultCrashRequests = 3_000
	DefaultCrashKills    = 20
	DefaultFaultRequests = 2_000
	// DefaultBusyDayRequests and DefaultBusyDayLength size the busy day
	// on each root: with the final pass and compaction, about 80 s on 2
	// cores for both roots (under 3 minutes); Long makes the day 5 times
	// longer with 5 times the requests.
	DefaultBusyDayRequests = 3_000
	DefaultBusyDayLength   = 30 * time.Second
	// LongFactor scales the request counts and kills when Options.Long is
	// set.
	LongFactor = 5
)

// Where the suite's tasks go. The names are fixed so outputs compare
// across runs.
const (
	project  = "chaos"
	location = "local"
	queueID  = "work"
	// targetURL is never called: the suite's emulator stores tasks without
	// delivering them, so task counts stay exact.
	targetURL = "http://127.0.0.1:9/chaos"
)

var queuePath = "projects/" + project + "/locations/" + location + "/queues/" + queueID

// ErrInvalidOptions matches every error Run returns for bad Options; the
// *OptionsError names the field.
var ErrInvalidOptions = errors.New("invalid chaos options")

// OptionsError names the Options field that is wrong, its value and the
// rule.
type OptionsError struct {
	// Field is the Options field, for example "Only".
	Field string
	// Value is the offending value as text.
	Value string
	// Rule says what is allowed.
	Rule string
}

func (e *OptionsError) Error() string {
	return fmt.Sprintf("chaos: Options.%s %q %s", e.Field, e.Value, e.Rule)
}

// Is makes an OptionsError match ErrInvalidOptions.
func (e *OptionsError) Is(target error) bool { return target == ErrInvalidOptions }

// Options configure Run. Zero fields take the defaults documented on them.
type Options struct {
	// Seed drives every random choice (kill points, fault plans, batch
	// order). Defaults to a seed taken from the clock; the report carries
	// the seed so a run can be repeated.
	Seed uint64
	// Long scales the request counts and kills by LongFactor.
	Long bool
	// Binary is the ctdispatch executable the multi-process scenarios
	// start as children (the herd, crash and the CLI half of bad input).
	// Required unless Only leaves those scenarios out.
	Binary string
	// Dir is where outboxes and request files are written. Defaults to a
	// new temporary directory, removed at the end unless Keep is set.
	Dir string
	// Keep leaves Dir behind for inspection.
	Keep bool
	// Only runs just the named scenarios (see Scenarios). Defaults to all.
	Only []string
	// Requests overrides each scenario's request count when positive.
	Requests int
	// Kills overrides the crash scenario's number of kills when positive.
	Kills int
	// DayLength overrides the busy day's length on each root when
	// positive (DefaultBusyDayLength, times LongFactor when Long).
	DayLength time.Duration
	// GCSEmulator is the host:port of a Cloud Storage emulator
	// (fake-gcs-server; go run ./internal/testtools/fakegcs starts one)
	// on which the busy day also runs with a bucket root. Empty: the busy
	// day runs on a local directory only, and says so.
	GCSEmulator string
	// Out receives one line per scenario and the closing line, as they
	// finish. Defaults to discarding.
	Out io.Writer
	// JSON prints one JSON object per scenario and a closing summary object
	// instead of text lines.
	JSON bool
	// Logger receives progress detail at debug level. Defaults to
	// discarding.
	Logger *slog.Logger

	// afterRun, when set, runs after a scenario's load and before its
	// checks, with the scenario's emulator: tests plant faults to prove
	// that the checks catch them.
	afterRun func(scenario string, emu *emulator.Server)
	// e2eMutation plants a fault in the e2e scenario's running system.
	e2eMutation e2eMutation
	// e2eStores limits the e2e scenario to these stores (default both).
	e2eStores []string
	// e2eReport, when set, receives each e2e leg's checker report.
	e2eReport func(store string, rep e2eReport)
}

func (o Options) withDefaults() Options {
	if o.Seed == 0 {
		o.Seed = uint64(time.Now().UnixNano())
	}
	if o.Out == nil {
		o.Out = io.Discard
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if len(o.Only) == 0 {
		o.Only = Scenarios
	}
	return o
}

func (o Options) validate() error {
	for _, s := range o.Only {
		if !slices.Contains(Scenarios, s) {
			return &OptionsError{Field: "Only", Value: s, Rule: "is not a scenario; allowed: " + strings.Join(Scenarios, ", ")}
		}
	}
	if o.Binary == "" && slices.ContainsFunc(o.Only, func(s string) bool { return slices.Contains(childScenarios, s) }) {
		return &OptionsError{Field: "Binary", Rule: "is required: the " + strings.Join(childScenarios, ", ") + " scenarios start ctdispatch processes"}
	}
	if o.Requests < 0 {
		return &OptionsError{Field: "Requests", Value: fmt.Sprint(o.Requests), Rule: "is negative"}
	}
	if o.Kills < 0 {
		return &OptionsError{Field: "Kills", Value: fmt.Sprint(o.Kills), Rule: "is negative"}
	}
	if o.DayLength < 0 {
		return &OptionsError{Field: "DayLength", Value: o.DayLength.String(), Rule: "is negative"}
	}
	return nil
}

// size returns n scaled for Long, or the Requests override.
func (o Options) size(n int) int {
	if o.Requests > 0 {
		return o.Requests
	}
	if o.Long {
		return n * LongFactor
	}
	return n
}

// dayLength is the busy day's length on each root.
func (o Options) dayLength() time.Duration {
	if o.DayLength > 0 {
		return o.DayLength
	}
	if o.Long {
		return DefaultBusyDayLength * LongFactor
	}
	return DefaultBusyDayLength
}

func (o Options) kills() int {
	if o.Kills > 0 {
		return o.Kills
	}
	if o.Long {
		return DefaultCrashKills * LongFactor
	}
	return DefaultCrashKills
}

// Result is what one scenario tried and what held.
type Result struct {
	// Scenario is the scenario's name.
	Scenario string `json:"scenario"`
	// Passed is true when every check held.
	Passed bool `json:"passed"`
	// Skipped is true when the machine could not run the scenario (for
	// example, no privilege to mount a small filesystem); Held says why.
	Skipped bool `json:"skipped,omitempty"`
	// Tried says what the scenario did, with its sizes.
	Tried string `json:"tried"`
	// Held says what was checked and found true (when Passed) or what
	// broke (when not).
	Held string `json:"held"`
	// Seconds is the scenario's wall time.
	Seconds float64 `json:"seconds"`
}

// Line is the result as one line: "PASS|FAIL <scenario>: tried; held".
func (r Result) Line() string {
	verdict := "PASS"
	switch {
	case r.Skipped:
		verdict = "SKIP"
	case !r.Passed:
		verdict = "FAIL"
	}
	return fmt.Sprintf("%s %s: %s; %s", verdict, r.Scenario, r.Tried, r.Held)
}

// Report is the outcome of a whole run.
type Report struct {
	// Seed is the seed the run used.
	Seed uint64 `json:"seed"`
	// Long tells whether the long sizes were used.
	Long bool `json:"long"`
	// Results has one entry per scenario run, in order.
	Results []Result `json:"results"`
	// Passed, Failed and Skipped count the results.
	Passed  int `json:"passed"`
	Failed  int `json:"failed"`
	Skipped int `json:"skipped"`
	// Seconds is the run's wall time.
	Seconds float64 `json:"seconds"`
}

// Summary is the closing line: "N passed, N failed", with ", N skipped"
// when the machine could not run a scenario.
func (r Report) Summary() string {
	s := fmt.Sprintf("%d passed, %d failed", r.Passed, r.Failed)
	if r.Skipped > 0 {
		s += fmt.Sprintf(", %d skipped", r.Skipped)
	}
	return s
}

// OK is true when every scenario passed.
func (r Report) OK() bool { return r.Failed == 0 && r.Passed > 0 }

// run is the state shared by the scenarios of one Run.
type run struct {
	opts Options
	dir  string
	log  *slog.Logger
}

// rng returns a random stream for one scenario, derived from the seed.
func (r *run) rng(scenario string) *rand.Rand {
	var h uint64 = 14695981039346656037
	for i := 0; i < len(scenario); i++ {
		h ^= uint64(scenario[i])
		h *= 1099511628211
	}
	return rand.New(rand.NewPCG(r.opts.Seed, h))
}

// Run runs the selected scenarios one after another, printing each result
// line to Options.Out as it finishes and the closing line at the end. A
// scenario that breaks an invariant is a failed Result, not an error; the
// error is for bad Options and for a suite that could not run at all (no
// temporary directory).
func Run(ctx context.Context, opts Options) (Report, error) {
	opts = opts.withDefaults()
	if err := opts.validate(); err != nil {
		return Report{}, err
	}
	rep := Report{Seed: opts.Seed, Long: opts.Long}
	start := time.Now()
	dir := opts.Dir
	if dir == "" {
		d, err := os.MkdirTemp("", "ctdispatch-chaos-")
		if err != nil {
			return rep, fmt.Errorf("chaos: %w", err)
		}
		dir = d
		if !opts.Keep {
			defer os.RemoveAll(dir)
		}
	}
	r := &run{opts: opts, dir: dir, log: opts.Logger}
	if !opts.JSON {
		fmt.Fprintf(opts.Out, "chaos: seed %d, %s sizes, work in %s\n", opts.Seed, map[bool]string{true: "long", false: "default"}[opts.Long], dir)
	}
	scenarios := map[string]func(context.Context) Result{
		ScenarioHerd: r.herd, ScenarioCrash: r.crash, ScenarioFaults: r.faults, ScenarioBadInput: r.badInput,
		ScenarioRecoverHerd: r.recoverHerd, ScenarioDiskFull: r.diskFull, ScenarioBusyDay: r.busyDay, ScenarioE2E: r.e2e,
	}
	for _, name := range Scenarios {
		if !slices.Contains(opts.Only, name) {
			continue
		}
		t0 := time.Now()
		res := scenarios[name](ctx)
		res.Scenario = name
		res.Seconds = roundSeconds(time.Since(t0))
		rep.Results = append(rep.Results, res)
		switch {
		case res.Skipped:
			rep.Skipped++
		case res.Passed:
			rep.Passed++
		default:
			rep.Failed++
		}
		if opts.JSON {
			b, _ := json.Marshal(res)
			fmt.Fprintf(opts.Out, "%s\n", b)
		} else {
			fmt.Fprintln(opts.Out, res.Line())
		}
	}
	rep.Seconds = roundSeconds(time.Since(start))
	if opts.JSON {
		b, _ := json.Marshal(struct {
			Seed    uint64  `json:"seed"`
			Long    bool    `json:"long"`
			Passed  int     `json:"passed"`
			Failed  int     `json:"failed"`
			Skipped int     `json:"skipped"`
			Seconds float64 `json:"seconds"`
			Summary string  `json:"summary"`
		}{rep.Seed, rep.Long, rep.Passed, rep.Failed, rep.Skipped, rep.Seconds, rep.Summary()})
		fmt.Fprintf(opts.Out, "%s\n", b)
	} else {
		fmt.Fprintln(opts.Out, rep.Summary())
	}
	return rep, nil
}

func roundSeconds(d time.Duration) float64 {
	return float64(d.Round(10*time.Millisecond)) / float64(time.Second)
}

// failed builds a failed Result from what was tried and what broke.
func failed(tried string, problems []string) Result {
	const show = 3
	msg := strings.Join(problems[:min(show, len(problems))], "; ")
	if len(problems) > show {
		msg += fmt.Sprintf("; and %d more", len(problems)-show)
	}
	return Result{Tried: tried, Held: "broke: " + msg}
}

var noFaults emulator.Faults
