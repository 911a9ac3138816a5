package emulator_test

import (
	"io"
	"net"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ctdispatch/ctdispatch/cloudtasks/emulator"
	"github.com/ctdispatch/ctdispatch/cloudtasks/emulator/emuproto"
)

// TestHTTPServerAnswersOnlyItsHosts: the keys, the discovery document and
// the inspection are answered for the server's own address, loopback
// names with its port, the public URL's host and Config.AllowHosts, and
// 421 for any other Host, as a page rebinding its name would send.
func TestHTTPServerAnswersOnlyItsHosts(t *testing.T) {
	t.Parallel()
	srv, err := emulator.New(emulator.Config{
		SigningKey: testKey, DisableDelivery: true,
		PublicURL: "http://emulator.test:8124", AllowHosts: []string{"tasks.internal", "other.internal:9000"},
	})
	require.NoError(t, err)
	t.Cleanup(func() { srv.Close() })
	_, port, err := net.SplitHostPort(srv.HTTPAddr())
	require.NoError(t, err)

	tests := []struct {
		host string
		want int
	}{
		{srv.HTTPAddr(), http.StatusOK},
		{"localhost:" + port, http.StatusOK},
		{"LOCALHOST:" + port, http.StatusOK},
		{"[::1]:" + port, http.StatusOK},
		{"emulator.test:8124", http.StatusOK},
		{"tasks.internal", http.StatusOK},
		{"tasks.internal:1234", http.StatusOK},
		{"other.internal:9000", http.StatusOK},
		{"localhost:1", http.StatusMisdirectedRequest},
		{"emulator.test:8125", http.StatusMisdirectedRequest},
		{"other.internal:9001", http.StatusMisdirectedRequest},
		{"attacker.example:" + port, http.StatusMisdirectedRequest},
	}
	for _, path := range []string{emuproto.InspectPath, emuproto.JWKSPath, emuproto.PEMCertsPath, emuproto.DiscoveryPath} {
		for _, tt := range tests {
			req, err := http.NewRequest(http.MethodGet, "http://"+srv.HTTPAddr()+path, nil)
			require.NoError(t, err)
			req.Host = tt.host
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			body, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			require.NoError(t, err)
			require.Equal(t, tt.want, resp.StatusCode, "GET %s with Host %s: %s", path, tt.host, body)
			if tt.want == http.StatusMisdirectedRequest {
				require.Equal(t, `emulator: Host "`+tt.host+`" is not an address this emulator's HTTP server answers to; reach it at its address or its public URL (http://emulator.test:8124), or allow this name when starting it (--allow-host, Config.AllowHosts).`+"\n", string(body))
			}
		}
	}
}

func TestAllowHostsEntriesAreHostNames(t *testing.T) {
	t.Parallel()
	tests := []struct {
		entry, want string
	}{
		{"http://tasks.internal", `emulator: Config.AllowHosts[0] "http://tasks.internal" is not a host name; allowed: a name such as tasks.internal or an IP, optionally with :PORT, without a scheme or path`},
		{"*.internal", `emulator: Config.AllowHosts[0] "*.internal" is not a host name; allowed: a name such as tasks.internal or an IP, optionally with :PORT, without a scheme or path`},
		{"tasks.internal:0", `emulator: Config.AllowHosts[0] "tasks.internal:0" has port "0"; allowed: a name, or name:PORT with PORT from 1 to 65535`},
	}
	for _, tt := range tests {
		_, err := emulator.New(emulator.Config{AllowHosts: []string{tt.entry}})
		require.ErrorIs(t, err, emulator.ErrInvalidConfig)
		require.EqualError(t, err, tt.want)
	}
}
