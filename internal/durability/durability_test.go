package durability_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ctdispatch/ctdispatch/cloudtasks"
	"github.com/ctdispatch/ctdispatch/internal/durability"
	"github.com/ctdispatch/ctdispatch/outbox"
	"github.com/ctdispatch/ctdispatch/outbox/parquetbox"
)

func TestModes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		mode  durability.Mode
		disp  cloudtasks.Durability
		inMem bool
	}{
		{"overlapped", durability.Overlapped, cloudtasks.DurabilityOverlapped, false},
		{"strict", durability.Strict, cloudtasks.DurabilityStrict, false},
		{"interval", durability.Interval, cloudtasks.DurabilityOverlapped, false},
		{"memory", durability.Memory, cloudtasks.DurabilityOverlapped, true},
	}
	for _, tt := range tests {
		m, err := durability.Parse(tt.name)
		require.NoError(t, err)
		require.Equal(t, tt.mode, m)
		require.Equal(t, tt.disp, m.Dispatcher(), tt.name)
		box, closeBox, err := durability.Open(context.Background(), m, parquetbox.Config{Root: t.TempDir()})
		require.NoError(t, err, tt.name)
		_, isMem := box.(*outbox.Memory)
		require.Equal(t, tt.inMem, isMem, tt.name)
		require.NoError(t, closeBox())
	}
	_, err := durability.Parse("fast")
	require.EqualError(t, err, `durability "fast" is not a mode; allowed: overlapped, strict, interval, memory`)
}
