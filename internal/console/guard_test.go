package console

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"
)

// Time budget: milliseconds (no network; the handler is called directly).

func TestGuard(t *testing.T) {
	t.Parallel()
	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusTeapot) })
	loopback := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 8090}
	every := &net.TCPAddr{IP: net.IPv4zero, Port: 8090}
	lan := &net.TCPAddr{IP: net.IPv4(192, 168, 1, 5), Port: 8090}
	port80 := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 80}
	tests := []struct {
		name         string
		bound        net.Addr
		allow        []string
		method, host string
		header       map[string]string
		want         int
	}{
		{"the bound address", loopback, nil, "GET", "127.0.0.1:8090", nil, http.StatusTeapot},
		{"localhost with the port", loopback, nil, "GET", "localhost:8090", nil, http.StatusTeapot},
		{"LOCALHOST in capitals", loopback, nil, "GET", "LocalHost:8090", nil, http.StatusTeapot},
		{"[::1] with the port", loopback, nil, "GET", "[::1]:8090", nil, http.StatusTeapot},
		{"localhost with another port", loopback, nil, "GET", "localhost:8091", nil, StatusWrongHost},
		{"localhost without a port", loopback, nil, "GET", "localhost", nil, StatusWrongHost},
		{"a rebinding name", loopback, nil, "GET", "attacker.example:8090", nil, StatusWrongHost},
		{"a rebinding name posting", loopback, nil, "POST", "attacker.example:8090", nil, StatusWrongHost},
		{"no Host", loopback, nil, "GET", "", nil, StatusWrongHost},
		{"an allowed name with any port", loopback, []string{"console.internal"}, "GET", "console.internal:8090", nil, http.StatusTeapot},
		{"an allowed name behind a proxy on port 80", loopback, []string{"console.internal"}, "GET", "console.internal", nil, http.StatusTeapot},
		{"an allowed name:port", loopback, []string{"console.internal:9000"}, "GET", "console.internal:9000", nil, http.StatusTeapot},
		{"an allowed name:port, another port", loopback, []string{"console.internal:9000"}, "GET", "console.internal:8090", nil, StatusWrongHost},
		{"every interface: loopback names", every, []string{"console.internal"}, "GET", "localhost:8090", nil, http.StatusTeapot},
		{"every interface: an allowed name", every, []string{"console.internal"}, "GET", "console.internal:8090", nil, http.StatusTeapot},
		{"every interface: the unspecified address", every, []string{"console.internal"}, "GET", "0.0.0.0:8090", nil, StatusWrongHost},
		{"every interface: another name", every, []string{"console.internal"}, "GET", "attacker.example:8090", nil, StatusWrongHost},
		{"a LAN address: itself", lan, nil, "GET", "192.168.1.5:8090", nil, http.StatusTeapot},
		{"a LAN address: not localhost", lan, nil, "GET", "localhost:8090", nil, StatusWrongHost},
		{"port 80: Host without the port", port80, nil, "GET", "localhost", nil, http.StatusTeapot},
		{"same-origin action", loopback, nil, "POST", "127.0.0.1:8090", map[string]string{"Sec-Fetch-Site": "same-origin", "Origin": "http://127.0.0.1:8090"}, http.StatusTeapot},
		{"action without browser headers (curl)", loopback, nil, "POST", "127.0.0.1:8090", nil, http.StatusTeapot},
		{"cross-site action", loopback, nil, "POST", "127.0.0.1:8090", map[string]string{"Sec-Fetch-Site": "cross-site", "Origin": "https://attacker.example"}, StatusCrossSite},
		{"same-site action from another port", loopback, nil, "POST", "127.0.0.1:8090", map[string]string{"Sec-Fetch-Site": "same-site", "Origin": "http://127.0.0.1:3000"}, StatusCrossSite},
		{"action with a foreign Origin only", loopback, nil, "POST", "127.0.0.1:8090", map[string]string{"Origin": "https://attacker.example"}, StatusCrossSite},
		{"cross-site GET is a page view", loopback, nil, "GET", "127.0.0.1:8090", map[string]string{"Sec-Fetch-Site": "cross-site"}, http.StatusTeapot},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			req := httptest.NewRequestWithContext(context.Background(), tt.method, "/actions/purge", nil)
			req.Host = tt.host
			for k, v := range tt.header {
				req.Header.Set(k, v)
			}
			rec := httptest.NewRecorder()
			Guard(ok, tt.bound, tt.allow).ServeHTTP(rec, req)
			require.Equal(t, tt.want, rec.Code, rec.Body.String())
			if tt.want != http.StatusTeapot {
				require.Equal(t, "text/plain; charset=utf-8", rec.Header().Get("Content-Type"))
			}
		})
	}
}

func TestGuardMessages(t *testing.T) {
	t.Parallel()
	ok := http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})
	g := Guard(ok, &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 8090}, nil)
	req := httptest.NewRequestWithContext(context.Background(), "GET", "/", nil)
	req.Host = "attacker.example:8090"
	rec := httptest.NewRecorder()
	g.ServeHTTP(rec, req)
	require.Equal(t, "console: Host \"attacker.example:8090\" is not an address this console answers to; a page of another site cannot read it. Reach it at the address it printed, or allow this name when starting it (--allow-host, or --console-allow-host for emulator and demo).\n", rec.Body.String())
	req = httptest.NewRequestWithContext(context.Background(), "POST", "/actions/purge", nil)
	req.Host = "127.0.0.1:8090"
	req.Header.Set("Sec-Fetch-Site", "cross-site")
	rec = httptest.NewRecorder()
	g.ServeHTTP(rec, req)
	require.Equal(t, "console: refused a cross-origin POST request: actions are accepted only from the console's own pages.\n", rec.Body.String())
}

func TestAllowHostsAreValidated(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ entry, want string }{
		{"http://console.internal", `console: AllowHosts entry "http://console.internal" is not a host name; allowed: a name such as console.internal or an IP, optionally with :PORT, without a scheme or path`},
		{"console.internal/x", `console: AllowHosts entry "console.internal/x" is not a host name; allowed: a name such as console.internal or an IP, optionally with :PORT, without a scheme or path`},
		{"", `console: AllowHosts entry "" is not a host name; allowed: a name such as console.internal or an IP, optionally with :PORT, without a scheme or path`},
		{"*.example", `console: AllowHosts entry "*.example" is not a host name; allowed: a name such as console.internal or an IP, optionally with :PORT, without a scheme or path`},
		{"console.internal:0", `console: AllowHosts entry "console.internal:0" has port "0"; allowed: a name, or name:PORT with PORT from 1 to 65535`},
	} {
		_, err := New(context.Background(), Config{Outbox: t.TempDir(), AllowHosts: []string{tc.entry}})
		require.ErrorIs(t, err, ErrInvalidConfig)
		require.EqualError(t, err, tc.want)
	}
	srv, err := New(context.Background(), Config{Outbox: t.TempDir(), AllowHosts: []string{"console.internal", "10.0.0.5:8090", "[fd00::1]:8090", "fd00::2"}})
	require.NoError(t, err)
	require.NoError(t, srv.Close())
}
