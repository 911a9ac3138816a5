package console

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// Time budget: microseconds.

func TestReachable(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ advertised, grpcAddr, want string }{
		{"127.0.0.1:8124", "127.0.0.1:8123", "127.0.0.1:8124"},
		{"0.0.0.0:8124", "emulator:8123", "emulator:8124"},
		{"[::]:8124", "10.0.0.5:8123", "10.0.0.5:8124"},
		{":8124", "[::1]:8123", "[::1]:8124"},
		{"192.168.1.2:8124", "emulator:8123", "192.168.1.2:8124"},
		{"not an address", "emulator:8123", "not an address"},
	} {
		require.Equal(t, tc.want, reachable(tc.advertised, tc.grpcAddr), "%s via %s", tc.advertised, tc.grpcAddr)
	}
}
