package bench

import (
	"math"
	"slices"
	"strings"
	"time"
)

// Latencies are kept as raw samples and sorted once per mode: exact
// percentiles, no dependency, and at the call counts a CLI run reaches
// (millions at most, 8 bytes each) the memory is small next to the
// emulator's tasks. A bucketed histogram would only pay off for
// long-running collection.

// percentile returns the nearest-rank p-th percentile (0 < p ≤ 100) of
// sorted samples: the smallest sample with at least p% of samples at or
// below it. It returns 0 for no samples.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(math.Ceil(p / 100 * float64(len(sorted))))
	rank = min(max(rank, 1), len(sorted))
	return sorted[rank-1]
}

// summarize sorts samples in place and returns p50 and p99.
func summarize(samples []time.Duration) (p50, p99 time.Duration) {
	slices.Sort(samples)
	return percentile(samples, 50), percentile(samples, 99)
}

// SetRatios sets Ratio on every result to its throughput divided by the
// create-bare throughput, and BatchRatio on dispatch-batched to its
// throughput divided by the batch-bare one. A ratio without its baseline
// (or a baseline without calls) is left nil.
func SetRatios(results []Result) {
	var base, batchBase float64
	for _, r := range results {
		switch r.Mode {
		case ModeCreateBare:
			base = r.Throughput
		case ModeBatchBare:
			batchBase = r.Throughput
		}
	}
	for i := range results {
		results[i].Ratio, results[i].BatchRatio = nil, nil
		if base > 0 {
			v := results[i].Throughput / base
			results[i].Ratio = &v
		}
		if batchBase > 0 && results[i].Mode == ModeDispatchBatched {
			v := results[i].Throughput / batchBase
			results[i].BatchRatio = &v
		}
	}
}

// throughput is calls per second of wall time; zero for no time.
func throughput(ops int64, elapsed time.Duration) float64 {
	if elapsed <= 0 {
		return 0
	}
	return float64(ops) / elapsed.Seconds()
}

// splitmix64 is a fast, well-mixed hash of one word (Steele et al.), so a
// call's fate depends only on the seed and its index, not on scheduling.
func splitmix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// keyOf returns the ID number call i (1-based) of a round uses: i itself,
// or, for a fraction ratio of calls, the number of an earlier call (which
// itself may repeat an even earlier one). dup says whether i repeats.
func keyOf(seed uint64, ratio float64, i uint64) (key uint64, dup bool) {
	key = i
	for key > 1 {
		h := splitmix64(seed ^ splitmix64(key))
		if float64(h>>11)/(1<<53) >= ratio {
			break
		}
		dup = true
		key = 1 + splitmix64(h)%(key-1)
	}
	return key, dup
}

// payload returns a body of exactly size bytes: a JSON object (so the
// dispatcher's fingerprint canonicalises it, as it does real payloads)
// from 8 bytes on, raw bytes below that, nil for 0.
func payload(size int) []byte {
	const head, tail = `{"p":"`, `"}`
	switch {
	case size <= 0:
		return nil
	case size < len(head)+len(tail):
		return []byte(strings.Repeat("x", size))
	}
	return []byte(head + strings.Repeat("x", size-len(head)-len(tail)) + tail)
}
