package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"
	"unicode/utf8"
)

// TableHeader is the first row of WriteTable's table.
var TableHeader = []string{"mode", "ops", "errors", "ops/s", "p50", "p99", "allocs/op", "cpu s/1k", "vs create-bare", "vs batch-bare"}

// Summary describes the run in one line: load, payload, duplicates,
// faults and where the emulator ran.
func (r *Report) Summary() string {
	c := r.Config
	amount := fmt.Sprintf("%d calls per mode", c.Count)
	if c.Duration > 0 {
		amount = fmt.Sprintf("%s per mode", c.Duration)
	}
	return fmt.Sprintf("%s in %d rounds, %d concurrent callers, payload %d B, duplicate ratio %g, fault rate %g, commit-then-fail rate %g, emulator latency %s, batch-bare size %d, batch in flight %d, emulator %s, GOMAXPROCS %d",
		amount, c.Rounds, c.Concurrency, c.PayloadSize, c.DuplicateRatio, c.FaultRate, c.CommitThenFailRate, c.Latency, c.BatchSize, c.BatchInFlight, r.Emulator, r.GOMAXPROCS)
}

// WriteTable writes the summary line, then one aligned row per mode under
// TableHeader.
func (r *Report) WriteTable(w io.Writer) error {
	if _, err := fmt.Fprintln(w, r.Summary()); err != nil {
		return err
	}
	rows := [][]string{TableHeader}
	for _, res := range r.Results {
		rows = append(rows, []string{string(res.Mode), fmt.Sprint(res.Ops), fmt.Sprint(res.Errors), fmt.Sprintf("%.0f", res.Throughput),
			formatLatency(res.P50), formatLatency(res.P99), fmt.Sprintf("%.1f", res.AllocsPerOp), fmt.Sprintf("%.3f", res.CPUPer1000),
			formatRatio(res.Ratio), formatRatio(res.BatchRatio)})
	}
	widths := make([]int, len(TableHeader))
	for _, row := range rows {
		for i, cell := range row {
			widths[i] = max(widths[i], utf8.RuneCountInString(cell))
		}
	}
	var b strings.Builder
	for _, row := range rows {
		// The mode name is aligned left, the figures right (fmt pads by
		// runes, as widths counts them).
		fmt.Fprintf(&b, "%-*s", widths[0], row[0])
		for i := 1; i < len(row); i++ {
			fmt.Fprintf(&b, "  %*s", widths[i], row[i])
		}
		b.WriteByte('\n')
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// formatLatency prints microseconds below a millisecond, milliseconds with
// two decimals below a second, and seconds above.
func formatLatency(d time.Duration) string {
	switch {
	case d < time.Millisecond:
		return fmt.Sprintf("%.1fµs", float64(d)/float64(time.Microsecond))
	case d < time.Second:
		return fmt.Sprintf("%.2fms", float64(d)/float64(time.Millisecond))
	}
	return fmt.Sprintf("%.2fs", d.Seconds())
}

func formatRatio(r *float64) string {
	if r == nil {
		return "-"
	}
	return fmt.Sprintf("%.2fx", *r)
}

// jsonReport is the --json form of a Report.
type jsonReport struct {
	Date       string       `json:"date"`
	Emulator   string       `json:"emulator"`
	GOMAXPROCS int          `json:"gomaxprocs"`
	Config     jsonConfig   `json:"config"`
	Results    []jsonResult `json:"results"`
}

type jsonConfig struct {
	Modes              []Mode  `json:"modes"`
	Concurrency        int     `json:"concurrency"`
	Count              int     `json:"count"`
	DurationSeconds    float64 `json:"duration_seconds"`
	Rounds             int     `json:"rounds"`
	PayloadSize        int     `json:"payload_size"`
	DuplicateRatio     float64 `json:"duplicate_ratio"`
	FaultRate          float64 `json:"fault_rate"`
	CommitThenFailRate float64 `json:"commit_then_fail_rate"`
	Seed               uint64  `json:"seed"`
	LatencyMicros      float64 `json:"latency_us"`
	BatchSize          int     `json:"batch_size"`
	BatchInFlight      int     `json:"batch_in_flight"`
}

type jsonResult struct {
	Mode           Mode     `json:"mode"`
	Ops            int64    `json:"ops"`
	Errors         int64    `json:"errors"`
	Duplicates     int64    `json:"duplicates"`
	Deduplicated   int64    `json:"deduplicated"`
	ElapsedSeconds float64  `json:"elapsed_seconds"`
	OpsPerSecond   float64  `json:"ops_per_second"`
	P50Micros      float64  `json:"p50_us"`
	P99Micros      float64  `json:"p99_us"`
	AllocsPerOp    float64  `json:"allocs_per_op"`
	CPUPer1000     float64  `json:"cpu_seconds_per_1000"`
	RatioVsBare    *float64 `json:"ratio_vs_bare"`
	RatioVsBatch   *float64 `json:"ratio_vs_batch_bare"`
	FirstError     string   `json:"first_error,omitempty"`
}

// WriteJSON writes the report as one indented JSON object: the date, the
// emulator, GOMAXPROCS, the configuration and one result per mode
// (latencies in microseconds, ratio_vs_bare null without a baseline).
func (r *Report) WriteJSON(w io.Writer) error {
	c := r.Config
	micros := func(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
	out := jsonReport{
		Date: r.Date.Format(time.RFC3339), Emulator: r.Emulator, GOMAXPROCS: r.GOMAXPROCS,
		Config: jsonConfig{
			Modes: c.Modes, Concurrency: c.Concurrency, Count: c.Count, DurationSeconds: c.Duration.Seconds(),
			Rounds: c.Rounds, PayloadSize: c.PayloadSize, DuplicateRatio: c.DuplicateRatio,
			FaultRate: c.FaultRate, CommitThenFailRate: c.CommitThenFailRate, Seed: c.Seed,
			LatencyMicros: micros(c.Latency), BatchSize: c.BatchSize, BatchInFlight: c.BatchInFlight,
		},
		Results: make([]jsonResult, 0, len(r.Results)),
	}
	for _, res := range r.Results {
		out.Results = append(out.Results, jsonResult{
			Mode: res.Mode, Ops: res.Ops, Errors: res.Errors, Duplicates: res.Duplicates, Deduplicated: res.Deduplicated,
			ElapsedSeconds: res.Elapsed.Seconds(), OpsPerSecond: res.Throughput,
			P50Micros: micros(res.P50), P99Micros: micros(res.P99), AllocsPerOp: res.AllocsPerOp,
			CPUPer1000: res.CPUPer1000, RatioVsBare: res.Ratio, RatioVsBatch: res.BatchRatio, FirstError: res.FirstError,
		})
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}
