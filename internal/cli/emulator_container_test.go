package cli

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/ctdispatch/ctdispatch/cloudtasks/emulator"
	"github.com/ctdispatch/ctdispatch/cloudtasks/emulator/emuproto"
)

// The tests in this file cover what the container image relies on:
// configuration from the environment, a public URL for the token keys,
// and the health check that is the image's HEALTHCHECK.

// envOf is a Getenv over a fixed map.
func envOf(vars map[string]string) func(string) string {
	return func(k string) string { return vars[k] }
}

// oidcLine parses the emulator's "OIDC keys: URL (issuer ISSUER)" line.
var oidcLine = regexp.MustCompile(`^OIDC keys: (\S+) \(issuer (\S+)\)$`)

func TestEmulatorCommandTakesQueuesConfigAndPublicURLFromEnvironment(t *testing.T) {
	t.Parallel()
	cfgPath := filepath.Join(t.TempDir(), "emulator.yaml")
	require.NoError(t, os.WriteFile(cfgPath, []byte("queues:\n  - name: projects/p/locations/l/queues/from-file\n"), 0o600))
	getenv := envOf(map[string]string{
		emulatorQueuesEnv:    "a, projects/o/locations/l/queues/b\tc",
		emulatorConfigEnv:    cfgPath,
		emulatorPublicURLEnv: "http://emulator.example:8124",
	})
	_, lines, stop := startEmulatorCmd(t, getenv, "--addr", "127.0.0.1:0", "--no-delivery")
	require.Equal(t, []string{"http://emulator.example:8124/oauth2/v3/certs", "http://emulator.example:8124"}, oidcLine.FindStringSubmatch(lines[2])[1:])
	code, rest, _ := stop()
	require.Equal(t, 0, code)
	require.Equal(t, []string{
		"queue projects/o/locations/l/queues/b",
		"queue projects/p/locations/europe-west1/queues/a",
		"queue projects/p/locations/europe-west1/queues/c",
		"queue projects/p/locations/l/queues/from-file",
	}, queueLines(rest))
}

func TestEmulatorCommandFlagsWinOverEnvironment(t *testing.T) {
	t.Parallel()
	getenv := envOf(map[string]string{
		emulatorQueuesEnv:    "from-env",
		emulatorConfigEnv:    "/nonexistent/emulator.yaml", // would fail if read
		emulatorPublicURLEnv: "http://env.example:1",
	})
	_, lines, stop := startEmulatorCmd(t, getenv, "--addr", "127.0.0.1:0", "--no-delivery",
		"--queue", "from-flag", "--config", "", "--public-url", "https://flag.example/base/")
	require.Equal(t, []string{"https://flag.example/base/oauth2/v3/certs", "https://flag.example/base"}, oidcLine.FindStringSubmatch(lines[2])[1:])
	code, rest, _ := stop()
	require.Equal(t, 0, code)
	require.Equal(t, []string{"queue projects/p/locations/europe-west1/queues/from-flag"}, queueLines(rest))
}

// queueLines picks the "queue …" lines out of the emulator's output.
func queueLines(out string) []string {
	var qs []string
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "queue ") {
			qs = append(qs, l)
		}
	}
	return qs
}

func TestEmulatorCommandRefusesBadPublicURLNamingItsSource(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		args   []string
		getenv func(string) string
		msg    string
	}{
		{"flag", []string{"--public-url", "localhost:8124"}, nil,
			`ctdispatch: --public-url "localhost:8124" must start with http:// or https://` + "\n"},
		{"environment", nil, envOf(map[string]string{emulatorPublicURLEnv: "http://h:1/?x=1"}),
			`ctdispatch: $CTDISPATCH_EMULATOR_PUBLIC_URL "http://h:1/?x=1" must not have a query, a fragment or user information` + "\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var errBuf bytes.Buffer
			code := Run(context.Background(), append([]string{"emulator", "--addr", "127.0.0.1:0"}, tt.args...), Env{Err: &errBuf, Getenv: tt.getenv})
			require.Equal(t, 2, code)
			require.Equal(t, tt.msg, errBuf.String())
		})
	}
}

// runHealth runs `ctdispatch emulator health args...` in-process.
func runHealth(t *testing.T, getenv func(string) string, args ...string) (code int, out, errOut string) {
	t.Helper()
	var o, e bytes.Buffer
	code = Run(context.Background(), append([]string{"emulator", "health"}, args...), Env{Out: &o, Err: &e, Getenv: getenv})
	return code, o.String(), e.String()
}

func TestEmulatorHealthReportsARunningEmulator(t *testing.T) {
	t.Parallel()
	addr, lines, stop := startEmulatorCmd(t, nil, "--addr", "0.0.0.0:0", "--http-addr", "127.0.0.1:0", "--no-delivery")
	_, port, err := net.SplitHostPort(addr)
	require.NoError(t, err)
	keys := oidcLine.FindStringSubmatch(lines[2])
	require.NotNil(t, keys, lines[2])
	httpAddr := strings.TrimSuffix(strings.TrimPrefix(keys[1], "http://"), emuproto.JWKSPath)

	// An address on every interface is checked on loopback, as the
	// image's HEALTHCHECK inside the container does.
	code, out, errOut := runHealth(t, nil, "--addr", "0.0.0.0:"+port, "--http-addr", httpAddr)
	require.Equal(t, 0, code, errOut)
	require.Equal(t, "healthy: gRPC 127.0.0.1:"+port+" SERVING; HTTP http://"+httpAddr+" serves keys for issuer "+keys[2]+"\n", out)

	// Without --http-addr only gRPC is checked; the address may come from
	// the environment.
	code, out, errOut = runHealth(t, envOf(map[string]string{emulatorHostEnv: "127.0.0.1:" + port}))
	require.Equal(t, 0, code, errOut)
	require.Equal(t, "healthy: gRPC 127.0.0.1:"+port+" SERVING\n", out)

	code, _, _ = stop()
	require.Equal(t, 0, code)
	code, _, errOut = runHealth(t, nil, "--addr", "127.0.0.1:"+port)
	require.Equal(t, 1, code, "a stopped emulator is unhealthy")
	require.Contains(t, errOut, "ctdispatch: emulator at 127.0.0.1:"+port+" is not healthy: health check: ")
}

func TestEmulatorHealthFailures(t *testing.T) {
	t.Parallel()
	// A gRPC server that says it is not serving.
	notServing := grpc.NewServer()
	h := health.NewServer()
	h.SetServingStatus(emuproto.HealthService, healthpb.HealthCheckResponse_NOT_SERVING)
	healthpb.RegisterHealthServer(notServing, h)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { _ = notServing.Serve(lis) }()
	t.Cleanup(notServing.Stop)

	// A healthy emulator whose --http-addr points at something else.
	srv, err := emulator.New(emulator.Config{DisableDelivery: true})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, srv.Close()) })
	notKeys := httptest.NewServer(http.NotFoundHandler())
	t.Cleanup(notKeys.Close)
	notKeysAddr := strings.TrimPrefix(notKeys.URL, "http://")

	tests := []struct {
		name string
		args []string
		code int
		msg  string
	}{
		{"not serving", []string{"--addr", lis.Addr().String()}, 1,
			"ctdispatch: emulator at " + lis.Addr().String() + " is not healthy: health check: status NOT_SERVING, want SERVING\n"},
		{"no discovery document", []string{"--addr", srv.Addr(), "--http-addr", notKeysAddr}, 1,
			"ctdispatch: emulator HTTP server at " + notKeys.URL + " is not healthy: GET /.well-known/openid-configuration: status 404 Not Found, want 200 OK\n"},
		{"address with a scheme", []string{"--addr", "http://127.0.0.1:8123"}, 2,
			`ctdispatch: --addr "http://127.0.0.1:8123" has a scheme; want HOST:PORT, for example 127.0.0.1:8123, without a scheme` + "\n"},
		{"http address without a port", []string{"--addr", srv.Addr(), "--http-addr", "localhost"}, 2,
			`ctdispatch: --http-addr "localhost" is not HOST:PORT; want HOST:PORT, for example 127.0.0.1:8123, without a scheme` + "\n"},
		{"zero timeout", []string{"--addr", srv.Addr(), "--timeout", "0s"}, 2,
			"ctdispatch: --timeout 0s: want a positive duration, for example 5s\n"},
		{"stray argument", []string{"now"}, 2,
			`ctdispatch: unknown command "now" for "ctdispatch emulator health"` + "\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			code, out, errOut := runHealth(t, nil, tt.args...)
			require.Equal(t, tt.code, code, errOut)
			require.Empty(t, out)
			require.Equal(t, tt.msg, errOut)
		})
	}
}
