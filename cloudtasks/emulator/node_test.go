package emulator_test

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestOfficialNodeClient runs testdata/node/check.js, which drives a running
// `ctdispatch emulator` with Google's official Node client
// (@google-cloud/tasks) and verifies the delivered OIDC token with
// google-auth-library's verifyIdToken and an audience. It needs node and
// the packages installed by `npm ci` in testdata/node (CI does both).
func TestOfficialNodeClient(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds the binary and runs node; skipped with -short")
	}
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("needs node: node is not on PATH (apt-get install nodejs npm): the check with Google's Node client is skipped")
	}
	dir, err := filepath.Abs(filepath.Join("testdata", "node"))
	require.NoError(t, err)
	for _, pkg := range []string{"@google-cloud/tasks", "google-auth-library", "@grpc/grpc-js"} {
		if _, err := os.Stat(filepath.Join(dir, "node_modules", pkg, "package.json")); err != nil {
			t.Skipf("needs node: %s is not installed: run `npm ci` in %s to check the emulator with Google's Node client", pkg, dir)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	bin := filepath.Join(t.TempDir(), "ctdispatch")
	out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, "github.com/ctdispatch/ctdispatch/cmd/ctdispatch").CombinedOutput()
	require.NoError(t, err, "%s", out)
	emu := exec.CommandContext(ctx, bin, "emulator", "--addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0")
	emu.Env = append(os.Environ(), "CLOUD_TASKS_EMULATOR_HOST=")
	stdout, err := emu.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, emu.Start())
	t.Cleanup(func() { _ = emu.Process.Kill(); _ = emu.Wait() })

	var addr, httpBase, issuer string
	keysLine := regexp.MustCompile(`^OIDC keys: (http://[^ ]+)/oauth2/v3/certs \(issuer ([^)]+)\)$`)
	sc := bufio.NewScanner(stdout)
	for (addr == "" || issuer == "") && sc.Scan() {
		line := sc.Text()
		if a, ok := strings.CutPrefix(line, "Cloud Tasks emulator listening on "); ok {
			addr = a
		}
		if m := keysLine.FindStringSubmatch(line); m != nil {
			httpBase, issuer = m[1], m[2]
		}
	}
	require.NotEmpty(t, addr)
	require.NotEmpty(t, issuer)

	check := exec.CommandContext(ctx, node, "check.js")
	check.Dir = dir
	check.Env = append(os.Environ(), "CTDISPATCH_EMULATOR="+addr, "CTDISPATCH_EMULATOR_HTTP="+httpBase, "CTDISPATCH_EMULATOR_ISSUER="+issuer)
	got, err := check.CombinedOutput()
	require.NoError(t, err, "%s", got)
	var prefixes []string
	for _, line := range strings.Split(strings.TrimSpace(string(got)), "\n") {
		prefixes = append(prefixes, strings.Join(strings.Fields(line)[:2], " "))
	}
	require.Equal(t, []string{
		"ok createQueue", "ok createTask", "ok delivery", "ok verifyIdToken",
		"ok listQueues", "ok listLocations,", "ok getIamPolicy/setIamPolicy/testIamPermissions", "PASS node",
	}, prefixes, "%s", got)

	require.NoError(t, emu.Process.Signal(os.Interrupt))
	for sc.Scan() {
	}
	require.NoError(t, emu.Wait())
}
