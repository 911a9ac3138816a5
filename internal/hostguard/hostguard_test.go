package hostguard

import (
	"net"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestAllowed(t *testing.T) {
	t.Parallel()
	loopback := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 8124}
	every := &net.TCPAddr{IP: net.IPv6unspecified, Port: 8124}
	lan := &net.TCPAddr{IP: net.IPv4(192, 168, 1, 5), Port: 8124}
	tests := []struct {
		name  string
		bound net.Addr
		allow []string
		host  string
		want  bool
	}{
		{"the bound address", loopback, nil, "127.0.0.1:8124", true},
		{"localhost with the bound port", loopback, nil, "localhost:8124", true},
		{"[::1] with the bound port", every, nil, "[::1]:8124", true},
		{"localhost with another port", loopback, nil, "localhost:8125", false},
		{"a LAN bind: not localhost", lan, nil, "localhost:8124", false},
		{"a LAN bind: its address", lan, nil, "192.168.1.5:8124", true},
		{"a name for any port", every, []string{"Tasks.Internal"}, "tasks.internal:9", true},
		{"a name without a port", every, []string{"tasks.internal"}, "tasks.internal", true},
		{"a name:port, that port", every, []string{"emulator:8124"}, "EMULATOR:8124", true},
		{"a name:port, another port", every, []string{"emulator:8124"}, "emulator:8125", false},
		{"an IPv6 entry", every, []string{"[fd00::1]"}, "[fd00::1]:8124", true},
		{"a rebinding name", loopback, nil, "attacker.example:8124", false},
		{"no Host", loopback, nil, "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, New(tt.bound, tt.allow).Allowed(tt.host))
		})
	}
}

func TestEntryRule(t *testing.T) {
	t.Parallel()
	notHost := "is not a host name; allowed: a name such as tasks.internal or an IP, optionally with :PORT, without a scheme or path"
	tests := []struct{ entry, want string }{
		{"tasks.internal", ""},
		{"tasks.internal:8124", ""},
		{"[::1]:8124", ""},
		{"http://tasks.internal", notHost},
		{"tasks.internal/x", notHost},
		{"*.internal", notHost},
		{"", notHost},
		{":8124", notHost},
		{"tasks.internal:0", `has port "0"; allowed: a name, or name:PORT with PORT from 1 to 65535`},
		{"tasks.internal:http", `has port "http"; allowed: a name, or name:PORT with PORT from 1 to 65535`},
	}
	for _, tt := range tests {
		require.Equal(t, tt.want, EntryRule(tt.entry, "tasks.internal"), tt.entry)
	}
}
