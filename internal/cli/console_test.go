package cli

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// background runs the CLI in-process until the returned stop is called. It
// returns once a line of stdout (or of stderr, with fromErr) starts with
// prefix, and hands back that line; stop cancels the command and returns
// its exit code and everything it wrote to the other stream.
func background(t *testing.T, fromErr bool, prefix string, args ...string) (line string, stop func() (int, string)) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	var other strings.Builder // read only once the command has returned
	env := Env{Out: pw, Err: &other, Getenv: func(string) string { return "" }}
	if fromErr {
		env.Out, env.Err = &other, pw
	}
	done := make(chan int, 1)
	go func() {
		code := Run(ctx, args, env)
		pw.Close()
		done <- code
	}()
	sc := bufio.NewScanner(pr)
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), prefix) {
			line = sc.Text()
			break
		}
	}
	go io.Copy(io.Discard, pr) //nolint:errcheck // drain what follows
	if line == "" {
		cancel()
		<-done
		require.FailNow(t, "no line starting with "+prefix, "other stream: %s", other.String())
	}
	t.Cleanup(cancel)
	return line, func() (int, string) {
		cancel()
		code := <-done
		return code, other.String()
	}
}

func fetch(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(body)
}

func TestConsoleNeedsASource(t *testing.T) {
	t.Parallel()
	res := run(t, nil, "console")
	require.Equal(t, 2, res.code)
	require.Equal(t, "ctdispatch: nothing to show: give --emulator ADDR, --outbox DIR or both (and --worker-outbox DIR for deliveries)\n", res.stderr)
}

func TestConsoleServesAnOutboxUntilInterrupted(t *testing.T) {
	t.Parallel()
	line, stop := background(t, false, "console serving on ", "console", "--outbox", t.TempDir(), "--addr", "127.0.0.1:0")
	url := strings.TrimPrefix(line, "console serving on ")
	code, page := fetch(t, url+"outbox")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, page, "<h1>Outbox</h1>")
	code, _ = fetch(t, url+"queue?name=x")
	require.Equal(t, http.StatusNotFound, code)
	exit, stderr := stop()
	require.Equal(t, 0, exit)
	require.Empty(t, stderr)
}

func TestConsoleWarnsOnceWhenBoundBeyondLoopback(t *testing.T) {
	t.Parallel()
	line, stop := background(t, false, "console serving on ", "console", "--outbox", t.TempDir(), "--addr", "0.0.0.0:0", "--allow-host", "console.internal")
	require.Regexp(t, `^console serving on http://127\.0\.0\.1:\d+/$`, line, "the printed URL is one the console answers")
	code, _ := fetch(t, strings.TrimPrefix(line, "console serving on ")+"outbox")
	require.Equal(t, http.StatusOK, code)
	exit, stderr := stop()
	require.Equal(t, 0, exit)
	require.Equal(t, 1, strings.Count(stderr, "\n"), stderr)
	require.Contains(t, stderr, "ctdispatch: warning: the console at [::]:")
	require.Contains(t, stderr, "is reachable beyond this machine and has no login; bind it to 127.0.0.1 unless that is intended")
}

func TestConsoleRefusesAnAllowHostThatIsNotAHost(t *testing.T) {
	t.Parallel()
	res := run(t, nil, "console", "--outbox", t.TempDir(), "--allow-host", "http://console.internal")
	require.Equal(t, 2, res.code)
	require.Equal(t, "ctdispatch: console: AllowHosts entry \"http://console.internal\" is not a host name; allowed: a name such as console.internal or an IP, optionally with :PORT, without a scheme or path\n", res.stderr)
}

func TestConsoleOnEveryInterfaceNeedsAllowHost(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"console", "--outbox", t.TempDir(), "--addr", "0.0.0.0:0"},
		{"console", "--outbox", t.TempDir(), "--addr", ":0"},
	} {
		res := run(t, nil, args...)
		require.Equal(t, 2, res.code)
		require.Equal(t, "ctdispatch: --addr "+args[4]+" listens on every network interface, where any name that resolves to this machine reaches the console; name the hosts it is reached by with --allow-host NAME (repeatable), or bind it to 127.0.0.1\n", res.stderr)
	}
	res := run(t, nil, "emulator", "--addr", "127.0.0.1:0", "--no-delivery", "--console-addr", "0.0.0.0:0")
	require.Equal(t, 2, res.code)
	require.Equal(t, "ctdispatch: --console-addr 0.0.0.0:0 listens on every network interface, where any name that resolves to this machine reaches the console; name the hosts it is reached by with --console-allow-host NAME (repeatable), or bind it to 127.0.0.1\n", res.stderr)
}

func TestEmulatorServesTheConsole(t *testing.T) {
	t.Parallel()
	line, stop := background(t, false, "console serving on ", "emulator", "--addr", "127.0.0.1:0",
		"--queue", "projects/p/locations/l/queues/q", "--console-addr", "127.0.0.1:0")
	url := strings.TrimPrefix(line, "console serving on ")
	code, page := fetch(t, url)
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, page, `<a href="/queue?name=projects%2fp%2flocations%2fl%2fqueues%2fq" title="projects/p/locations/l/queues/q">q</a>`)
	exit, _ := stop()
	require.Equal(t, 0, exit)
}

func TestDemoKeepServesTheConsole(t *testing.T) {
	t.Parallel()
	line, stop := background(t, true, "console serving on ", "demo", "--runs", "1", "--keep", "--outbox", t.TempDir(), "--console-addr", "127.0.0.1:0")
	url := strings.TrimPrefix(line, "console serving on ")
	code, page := fetch(t, url+"run?id=run-1")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, page, "dispatch:run-1:extract:1")
	code, page = fetch(t, url)
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, page, `title="projects/demo-project/locations/europe-west1/queues/work"`)
	exit, stdout := stop()
	require.Equal(t, 0, exit)
	require.Contains(t, stdout, "ctdispatch demo: 1 runs × 4 tasks")
}

// TestConsoleBinaryServesUntilSIGINT runs the built binary as a user does:
// over an outbox holding a foreign file and an emulator address where
// nothing listens, it serves, shows both, and exits 0 on Ctrl-C.
func TestConsoleBinaryServesUntilSIGINT(t *testing.T) {
	t.Parallel()
	binary := ctdispatchBinary(t)

	dir := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "dispatch_outbox"), 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "dispatch_outbox", "x.parquet"), []byte("not parquet"), 0o600))
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	dead := lis.Addr().String()
	lis.Close()

	cmd := exec.Command(binary, "console", "--outbox", dir, "--emulator", dead, "--addr", "127.0.0.1:0")
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	sc := bufio.NewScanner(stdout)
	require.True(t, sc.Scan(), "no output; stderr: %s", stderr.String())
	url := strings.TrimPrefix(sc.Text(), "console serving on ")

	// The first view starts the count that reads every file; the damaged
	// one shows once it is done (the page's live refresh does the same).
	deadline := time.Now().Add(30 * time.Second)
	for {
		code, page := fetch(t, url+"outbox")
		require.Equal(t, http.StatusOK, code)
		if strings.Contains(page, "x.parquet") {
			break
		}
		require.True(t, time.Now().Before(deadline), "damaged file never shown: %s", page)
		time.Sleep(50 * time.Millisecond)
	}
	code, page := fetch(t, url)
	require.Equal(t, http.StatusBadGateway, code)
	require.Contains(t, page, `<p class="error">ListLocations projects/-:`)

	require.NoError(t, cmd.Process.Signal(os.Interrupt))
	require.NoError(t, cmd.Wait(), "stderr: %s", stderr.String())
}
