package chaos

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/fsouza/fake-gcs-server/fakestorage"
	"github.com/stretchr/testify/require"
)

// startFakeGCS serves fake-gcs-server on loopback in this process and
// returns its host:port.
func startFakeGCS(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := l.Addr().(*net.TCPAddr).Port
	require.NoError(t, l.Close())
	host := fmt.Sprintf("127.0.0.1:%d", port)
	srv, err := fakestorage.NewServerWithOptions(fakestorage.Options{Scheme: "http", Host: "127.0.0.1", Port: uint16(port), PublicHost: host})
	require.NoError(t, err)
	t.Cleanup(srv.Stop)
	return host
}

// TestBusyDayShort runs the busy day small, on a directory and on a
// bucket of fake-gcs-server: writers and two compactors under SIGKILLs,
// then every answered ID has exactly one row. The default and long days
// run through `ctdispatch chaos --only busy-day` (and TestSuite with
// CTDISPATCH_CHAOS_LONG=1).
//
// Time budget: about 40 s on 2 cores (two days of 8 s, each followed by
// recover, a last pass of 600 requests and the final compaction).
func TestBusyDayShort(t *testing.T) {
	if testing.Short() {
		t.Skip("the busy day starts many processes")
	}
	var out bytes.Buffer
	rep, err := Run(context.Background(), Options{
		Seed: 20261125, Binary: binary, Out: &out, Dir: t.TempDir(), Only: []string{ScenarioBusyDay},
		Requests: 600, DayLength: 8 * time.Second, GCSEmulator: startFakeGCS(t),
	})
	t.Log("\n" + out.String())
	require.NoError(t, err)
	require.Len(t, rep.Results, 1)
	res := rep.Results[0]
	require.True(t, res.Passed, res.Line())
	require.Contains(t, res.Held, "local directory: ")
	require.Contains(t, res.Held, "; bucket: ")
	require.Contains(t, res.Held, "one terminal row per answered ID")
	require.NotContains(t, res.Held, " 0 writer kills", "the day must kill writers")
	require.True(t, strings.HasPrefix(res.Line(), "PASS busy-day: "), res.Line())
}
