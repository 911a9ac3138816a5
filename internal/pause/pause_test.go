package pause

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestGatePausesItsContextOnce(t *testing.T) {
	t.Parallel()
	g := NewGate(CompactCommit)
	ctx := Arm(context.Background(), g)
	passed := make(chan string, 3)
	go func() {
		Point(ctx, CompactCommit)
		passed <- "armed"
	}()
	<-g.Reached()
	// Another point, another context and a second arrival all pass.
	Point(ctx, "other")
	Point(context.Background(), CompactCommit)
	Point(ctx, CompactCommit)
	select {
	case got := <-passed:
		t.Fatalf("%s passed before Release", got)
	default:
	}
	g.Release()
	require.Equal(t, "armed", <-passed)
	g.Release() // twice is fine
}

func TestGateEndsWithItsContext(t *testing.T) {
	t.Parallel()
	g := NewGate(CompactCommit)
	ctx, cancel := context.WithCancel(Arm(context.Background(), g))
	done := make(chan struct{})
	go func() {
		Point(ctx, CompactCommit)
		close(done)
	}()
	<-g.Reached()
	cancel()
	<-done
}

// The environment arms each listed point once per time it is listed.
func TestParseEnvCountsRepeatedNames(t *testing.T) {
	t.Parallel()
	tests := []struct {
		env  string
		want map[string]int
	}{
		{"", map[string]int{}},
		{CompactCommit, map[string]int{CompactCommit: 1}},
		{" a , b,a,,a ", map[string]int{"a": 3, "b": 1}},
	}
	for _, tt := range tests {
		require.Equal(t, tt.want, parseEnv(tt.env), tt.env)
	}
}
