package riverbench

import (
	"context"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The benchmarks compare ctdispatch with river v0.51.2 at its defaults
// (riverpgxv5 on a pgxpool, so LISTEN/NOTIFY is on) on one database of
// pgtest's throwaway PostgreSQL, each side's transactions taken from the
// same pgx pool. Every figure comes as ctdispatch's and river's and as
// their ratio (…-x: ctdispatch / river, below 1 where ctdispatch is
// faster or cheaper), with the one-minute load average (load1). b.N is
// the measured transactions of each side (rounds, for CommitToStart). The
// PostgreSQL settings that matter are logged. `make bench-river` runs
// them with the counts BENCHMARKS.md quotes; each runs for about a
// minute or less on the 2-core development machine.

// BenchmarkInsertTx is one dispatch or job per caller's transaction
// (txLine): begin→insert→commit latency p50 and p99, and the client's
// and the server's CPU per call, in blocks of 100 calls per side.
//
//	cd bench/river && go test -run '^$' -bench 'InsertTx$' -benchtime 5000x
func BenchmarkInsertTx(b *testing.B) {
	w := newWorld(b)
	logSettings(b, w)
	b.ResetTimer()
	ctd, riv := txLine(b, w, b.N, 100)
	b.StopTimer()
	reportLatency(b, "ms", ctd, riv)
	reportCPU(b, "call", ctd, riv)
	reportLoad(b)
}

// BenchmarkInsertManyTx is bulkSize (100) dispatches or jobs per caller's
// transaction (bulkLine): latency per transaction, and CPU per dispatch
// or job, in blocks of 5 transactions per side. ctdispatch's side is one
// DispatchManyTx call per transaction (dispatchMany).
//
//	cd bench/river && go test -run '^$' -bench 'InsertManyTx' -benchtime 300x
func BenchmarkInsertManyTx(b *testing.B) {
	w := newWorld(b)
	logSettings(b, w)
	b.ResetTimer()
	ctd, riv := bulkLine(b, w, b.N, 5)
	b.StopTimer()
	reportLatency(b, "ms", ctd, riv)
	reportCPU(b, "job", ctd, riv)
	reportLoad(b)
}

// BenchmarkCommitToStart is commit-to-task against commit-to-job-start
// (startLine), one lone call of each side every 150 ms: p50 and p99.
//
//	cd bench/river && go test -run '^$' -bench 'CommitToStart' -benchtime 400x
func BenchmarkCommitToStart(b *testing.B) {
	w := newWorld(b)
	logSettings(b, w)
	b.ResetTimer()
	ctd, riv := startLine(b, w, b.N, 150*time.Millisecond)
	b.StopTimer()
	reportLatency(b, "ms", ctd, riv)
	reportLoad(b)
}

// quantile returns the q quantile of lat (sorted in place), as the
// repository's other latency benchmarks take it.
func quantile(lat []time.Duration, q float64) time.Duration {
	slices.Sort(lat)
	return lat[int(q*float64(len(lat)-1))]
}

// reportLatency reports each side's p50 and p99 in milliseconds and
// their ratios (ctdispatch / river).
func reportLatency(b *testing.B, unit string, ctd, riv *side) {
	for _, q := range []struct {
		name string
		at   float64
	}{{"p50", 0.50}, {"p99", 0.99}} {
		c, r := quantile(ctd.lat, q.at), quantile(riv.lat, q.at)
		b.ReportMetric(c.Seconds()*1000, "ctdispatch-"+q.name+"-"+unit)
		b.ReportMetric(r.Seconds()*1000, "river-"+q.name+"-"+unit)
		b.ReportMetric(float64(c)/float64(r), q.name+"-x")
	}
}

// reportCPU reports each side's client and server CPU per dispatch or job
// (per) in microseconds, and their ratios (ctdispatch / river).
func reportCPU(b *testing.B, per string, ctd, riv *side) {
	for _, m := range []struct {
		name string
		of   func(*side) time.Duration
	}{{"client", func(s *side) time.Duration { return s.client }}, {"server", func(s *side) time.Duration { return s.server }}} {
		c := float64(m.of(ctd).Microseconds()) / float64(ctd.jobs)
		r := float64(m.of(riv).Microseconds()) / float64(riv.jobs)
		b.ReportMetric(c, "ctdispatch-"+m.name+"-us/"+per)
		b.ReportMetric(r, "river-"+m.name+"-us/"+per)
		b.ReportMetric(c/r, m.name+"-x")
	}
}

// reportLoad reports the one-minute load average as load1, where
// /proc/loadavg says it: the machines these run on are shared.
func reportLoad(b *testing.B) {
	raw, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return
	}
	if load, err := strconv.ParseFloat(strings.Fields(string(raw))[0], 64); err == nil {
		b.ReportMetric(load, "load1")
	}
}

// settings are the server's settings that decide what a commit costs.
var settings = []string{"server_version", "fsync", "synchronous_commit", "full_page_writes", "wal_sync_method", "shared_buffers", "max_connections"}

// settingsLogged keeps logSettings to once a process: every benchmark
// runs on the same cluster.
var settingsLogged sync.Once

// logSettings logs settings as SHOW reads them on w's server, once.
func logSettings(b *testing.B, w *world) {
	settingsLogged.Do(func() {
		b.Logf("PostgreSQL: %s; %d CPUs, GOMAXPROCS %d", show(b, w), runtime.NumCPU(), runtime.GOMAXPROCS(0))
	})
}

// show returns settings as SHOW reads them on w's server.
func show(b *testing.B, w *world) string {
	var out []string
	for _, name := range settings {
		var v string
		require.NoError(b, w.callers.QueryRow(context.Background(), "SHOW "+name).Scan(&v))
		out = append(out, name+"="+v)
	}
	return strings.Join(out, " ")
}
