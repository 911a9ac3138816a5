package bench

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestConfigDefaults(t *testing.T) {
	t.Parallel()
	c := Config{}.WithDefaults()
	require.Equal(t, AllModes(), c.Modes)
	require.Equal(t, 64, c.Concurrency)
	require.Equal(t, 20000, c.Count)
	require.Equal(t, 4, c.Rounds)
	require.Equal(t, 256, c.PayloadSize)
	require.Equal(t, uint64(1), c.Seed)
	require.NoError(t, c.validate())

	c = Config{Duration: time.Second, PayloadSize: -1}.WithDefaults()
	require.Zero(t, c.Count, "a duration replaces the default count")
	require.Zero(t, c.PayloadSize, "a negative payload size means no body")
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		cfg     Config
		wantErr string
	}{
		{"unknown mode", Config{Modes: []Mode{"bare"}}, `bench: Config.Modes bare is not a mode; allowed: create-bare, batch-bare, dispatch, dispatch-strict, dispatch-batched, interval, memory, timer, naming`},
		{"negative concurrency", Config{Concurrency: -1}, "bench: Config.Concurrency -1 must be at least 1"},
		{"negative count", Config{Count: -5}, "bench: Config.Count -5 must not be negative"},
		{"negative duration", Config{Duration: -time.Second}, "bench: Config.Duration -1s must not be negative"},
		{"count and duration", Config{Count: 100, Duration: time.Second}, "bench: Config.Count 100 and Duration exclude each other; give one"},
		{"negative rounds", Config{Rounds: -1}, "bench: Config.Rounds -1 must be at least 1"},
		{"fewer calls than rounds", Config{Count: 3, Rounds: 4}, "bench: Config.Count 3 is below Rounds (4); every round needs a call"},
		{"payload too large", Config{PayloadSize: 1_000_001}, "bench: Config.PayloadSize 1000001 exceeds 1000000 bytes (Cloud Tasks allows 1 MiB per task)"},
		{"duplicate ratio 1", Config{DuplicateRatio: 1}, "bench: Config.DuplicateRatio 1 must be in [0, 1)"},
		{"negative duplicate ratio", Config{DuplicateRatio: -0.1}, "bench: Config.DuplicateRatio -0.1 must be in [0, 1)"},
		{"fault rate above 1", Config{FaultRate: 1.5}, "bench: Config.FaultRate 1.5 must be in [0, 1]"},
		{"commit-then-fail rate above 1", Config{CommitThenFailRate: 2}, "bench: Config.CommitThenFailRate 2 must be in [0, 1]"},
		{"faults on an external emulator", Config{EmulatorAddr: "127.0.0.1:8123", FaultRate: 0.1}, "bench: Config.FaultRate 0.1 needs the in-process emulator; configure faults on the emulator at 127.0.0.1:8123 instead"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := tt.cfg.WithDefaults().validate()
			require.EqualError(t, err, tt.wantErr)
			require.ErrorIs(t, err, ErrInvalidConfig)
			var ce *ConfigError
			require.True(t, errors.As(err, &ce))
		})
	}
}

func TestParseModes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in      string
		want    []Mode
		wantErr string
	}{
		{in: "", want: AllModes()},
		{in: "all", want: AllModes()},
		{in: "naming", want: []Mode{ModeNaming}},
		{in: "timer, create-bare,timer", want: []Mode{ModeCreateBare, ModeTimer}},
		{in: "create-bare,fast", wantErr: "bench: Config.Modes fast is not a mode; allowed: all, create-bare, batch-bare, dispatch, dispatch-strict, dispatch-batched, interval, memory, timer, naming"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			t.Parallel()
			got, err := ParseModes(tt.in)
			if tt.wantErr != "" {
				require.EqualError(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, got)
		})
	}
}
