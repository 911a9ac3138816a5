package bench

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestPercentile(t *testing.T) {
	t.Parallel()
	ms := func(ns ...int) []time.Duration {
		out := make([]time.Duration, len(ns))
		for i, n := range ns {
			out[i] = time.Duration(n) * time.Millisecond
		}
		return out
	}
	hundred := make([]int, 100)
	for i := range hundred {
		hundred[i] = i + 1
	}
	tests := []struct {
		name     string
		samples  []time.Duration
		p50, p99 time.Duration
	}{
		{"no samples", nil, 0, 0},
		{"one sample", ms(7), 7 * time.Millisecond, 7 * time.Millisecond},
		{"ten samples, unsorted", ms(10, 1, 9, 2, 8, 3, 7, 4, 6, 5), 5 * time.Millisecond, 10 * time.Millisecond},
		{"1..100", ms(hundred...), 50 * time.Millisecond, 99 * time.Millisecond},
		{"one slow call in 200", append(ms(make([]int, 199)...), time.Second), 0, 0},
		{"three slow calls in 200", append(ms(make([]int, 197)...), time.Second, time.Second, time.Second), 0, time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p50, p99 := summarize(tt.samples)
			require.Equal(t, tt.p50, p50)
			require.Equal(t, tt.p99, p99)
		})
	}
}

func TestSetRatios(t *testing.T) {
	t.Parallel()
	ratio := func(v float64) *float64 { return &v }
	tests := []struct {
		name    string
		results []Result
		want    []*float64
	}{
		{
			name: "every mode against create-bare",
			results: []Result{
				{Mode: ModeCreateBare, Throughput: 2000},
				{Mode: ModeDispatchStrict, Throughput: 1600},
				{Mode: ModeInterval, Throughput: 1900},
				{Mode: ModeMemory, Throughput: 2100},
				{Mode: ModeTimer, Throughput: 1000},
				{Mode: ModeNaming, Throughput: 5_000_000},
			},
			want: []*float64{ratio(1), ratio(0.8), ratio(0.95), ratio(1.05), ratio(0.5), ratio(2500)},
		},
		{
			name:    "baseline listed last",
			results: []Result{{Mode: ModeTimer, Throughput: 300}, {Mode: ModeCreateBare, Throughput: 1200}},
			want:    []*float64{ratio(0.25), ratio(1)},
		},
		{
			name:    "no baseline",
			results: []Result{{Mode: ModeDispatchStrict, Throughput: 1600}, {Mode: ModeNaming, Throughput: 1e6}},
			want:    []*float64{nil, nil},
		},
		{
			name:    "baseline without throughput",
			results: []Result{{Mode: ModeCreateBare}, {Mode: ModeNaming, Throughput: 1e6}},
			want:    []*float64{nil, nil},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			SetRatios(tt.results)
			for i, r := range tt.results {
				if tt.want[i] == nil {
					require.Nil(t, r.Ratio, r.Mode)
					continue
				}
				require.NotNil(t, r.Ratio, r.Mode)
				require.InDelta(t, *tt.want[i], *r.Ratio, 1e-12, r.Mode)
			}
		})
	}
}

func TestThroughput(t *testing.T) {
	t.Parallel()
	require.Equal(t, 2000.0, throughput(1000, 500*time.Millisecond))
	require.Equal(t, 0.0, throughput(1000, 0))
}

func TestKeyOf(t *testing.T) {
	t.Parallel()
	t.Run("no duplicates at ratio 0", func(t *testing.T) {
		t.Parallel()
		for i := uint64(1); i <= 1000; i++ {
			key, dup := keyOf(1, 0, i)
			require.Equal(t, i, key)
			require.False(t, dup)
		}
	})
	t.Run("fixed seed gives fixed keys", func(t *testing.T) {
		t.Parallel()
		var keys []uint64
		for i := uint64(1); i <= 10; i++ {
			key, _ := keyOf(1, 0.25, i)
			keys = append(keys, key)
		}
		require.Equal(t, []uint64{1, 2, 3, 4, 5, 3, 3, 3, 9, 10}, keys)
	})
	t.Run("a duplicate repeats an earlier first call", func(t *testing.T) {
		t.Parallel()
		dups := 0
		for i := uint64(1); i <= 10000; i++ {
			key, dup := keyOf(1, 0.25, i)
			if !dup {
				require.Equal(t, i, key)
				continue
			}
			dups++
			require.Less(t, key, i)
			_, keyDup := keyOf(1, 0.25, key)
			require.False(t, keyDup, "call %d repeats %d, which is itself a repeat", i, key)
		}
		require.Equal(t, 2469, dups)
	})
}

func TestPayload(t *testing.T) {
	t.Parallel()
	for _, size := range []int{0, 1, 7, 8, 9, 256, 4096} {
		body := payload(size)
		require.Len(t, body, size)
		if size >= 8 {
			require.True(t, json.Valid(body), "%d bytes: %q", size, body)
		}
	}
	require.Equal(t, `{"p":"xx"}`, string(payload(10)))
}
