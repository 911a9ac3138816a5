package cli

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The tests in this file run the built binary, as a user or a script
// meets it: exit codes, pipes and FIFOs, huge lines, dead endpoints.

// builtBinaries holds the binaries this test process built, by package.
var builtBinaries sync.Map // package path -> func() (string, error)

// buildBinary builds the main package pkg once per test process and
// returns the binary's path.
func buildBinary(t *testing.T, pkg string) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds a binary; skipped with -short")
	}
	build, _ := builtBinaries.LoadOrStore(pkg, sync.OnceValues(func() (string, error) {
		dir, err := os.MkdirTemp("", "ctdispatch-bin-")
		if err != nil {
			return "", err
		}
		path := filepath.Join(dir, filepath.Base(pkg))
		// The binary has what this test binary has: Iceberg publication
		// with -tags iceberg (make test), none without.
		if out, err := exec.Command("go", "build", "-tags", binaryTags, "-o", path, pkg).CombinedOutput(); err != nil {
			return "", fmt.Errorf("go build %s: %v: %s", pkg, err, out)
		}
		return path, nil
	}))
	path, err := build.(func() (string, error))()
	require.NoError(t, err)
	return path
}

// ctdispatchBinary builds cmd/ctdispatch once per test process.
func ctdispatchBinary(t *testing.T) string {
	t.Helper()
	return buildBinary(t, "github.com/ctdispatch/ctdispatch/cmd/ctdispatch")
}

// binResult is what one run of the binary produced.
type binResult struct {
	code           int
	stdout, stderr string
	took           time.Duration
}

// runBinary runs the built binary with args, stdin and extra environment
// variables (KEY=VALUE); CLOUD_TASKS_EMULATOR_HOST is cleared unless given.
func runBinary(t *testing.T, env []string, stdin string, args ...string) binResult {
	t.Helper()
	cmd := exec.Command(ctdispatchBinary(t), args...)
	cmd.Env = append(append(os.Environ(), emulatorEnv+"="), env...)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	start := time.Now()
	err := cmd.Run()
	res := binResult{stdout: out.String(), stderr: errb.String(), took: time.Since(start)}
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		res.code = exit.ExitCode()
	} else {
		require.NoError(t, err)
	}
	return res
}

func TestBinaryExitCodes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		args   []string
		code   int
		stderr string
		env    []string
	}{
		{"unknown command", []string{"frobnicate"}, 2, "ctdispatch: unknown command \"frobnicate\" for \"ctdispatch\"\n", nil},
		{"unknown command with a suggestion", []string{"dispach"}, 2, "ctdispatch: unknown command \"dispach\" for \"ctdispatch\"; did you mean dispatch?\n", nil},
		{"extra argument", []string{"stats", "--outbox", "x", "extra"}, 2, "ctdispatch: unknown command \"extra\" for \"ctdispatch stats\"\n", nil},
		{"extra argument to id", []string{"id", "a", "b"}, 2, "ctdispatch: id takes one internal ID (or a subcommand: dispatch, retry, heartbeat); got 2 arguments\n", nil},
		{"bad flag value", []string{"dispatch", "--concurrency", "many"}, 2, "ctdispatch: invalid argument \"many\" for \"--concurrency\" flag: strconv.ParseInt: parsing \"many\": invalid syntax\n", nil},
		{"bad duration", []string{"recover", "--outbox", "x", "--stale-after", "soon"}, 2, "ctdispatch: invalid argument \"soon\" for \"--stale-after\" flag: time: invalid duration \"soon\"\n", nil},
		{"negative stale-after", []string{"recover", "--outbox", "x", "--stale-after", "-1s"}, 2, "ctdispatch: --stale-after -1s is negative; allowed: 0 (every pending record) or more\n", nil},
		{"publish interval below the minimum", []string{"dispatch", "--project", "p", "--location", "l", "--queue", "q",
			"--run", "r", "--task", "t", "--attempt", "1", "--url", "https://w/x", "--outbox", "x", "--publish-interval", "100ms"}, 2, "ctdispatch: --publish-interval 100ms is below the minimum 1s\n", nil},
		{"bad format", []string{"stats", "--outbox", "x", "--format", "xml"}, 2, "ctdispatch: --format \"xml\" unknown; allowed: table, json\n", nil},
		{"emulator with a scheme", []string{"dispatch", "--emulator", "http://127.0.0.1:8123", "--project", "p", "--location", "l", "--queue", "q",
			"--run", "r", "--task", "t", "--attempt", "1", "--url", "https://w/x"}, 2,
			"ctdispatch: --emulator \"http://127.0.0.1:8123\" has a scheme; want HOST:PORT, for example 127.0.0.1:8123, without a scheme\n", nil},
		{"emulator without a port", []string{"recover", "--outbox", ".", "--emulator", "localhost"}, 2,
			"ctdispatch: --emulator \"localhost\" is not HOST:PORT; want HOST:PORT, for example 127.0.0.1:8123, without a scheme\n", nil},
		{"emulator from the environment", []string{"recover", "--outbox", "."}, 2,
			"ctdispatch: --emulator (from $CLOUD_TASKS_EMULATOR_HOST) \"localhost:0\" is not HOST:PORT with a host and a port from 1 to 65535; want HOST:PORT, for example 127.0.0.1:8123, without a scheme\n",
			[]string{emulatorEnv + "=localhost:0"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			res := runBinary(t, tt.env, "", tt.args...)
			require.Equal(t, tt.stderr, res.stderr)
			require.Empty(t, res.stdout)
			require.Equal(t, tt.code, res.code)
		})
	}
}

func TestBinaryVersion(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"--version"}, {"version"}} {
		res := runBinary(t, nil, "", args...)
		require.Equal(t, 0, res.code, res.stderr)
		require.Regexp(t, `^ctdispatch ((\(devel\)|v\S+), revision [0-9a-f]{40}( \(modified\))?, committed \S+|\(devel\), revision unknown|v\S+), go1\.\S+\n$`, res.stdout)
	}
}

func TestBinaryFromPipeAndFIFO(t *testing.T) {
	t.Parallel()
	emu := startCLIEmulator(t)
	env := []string{emulatorEnv + "=" + emu.Addr()}
	args := append(append([]string(nil), dispatchArgs...), "--url", "https://w/x")
	lines := "{\"run\":\"pipe\",\"task\":\"a\",\"attempt\":1}\n{\"run\":\"pipe\",\"task\":\"b\",\"attempt\":\"1\"}\n"

	// A pipe on stdin, named /dev/stdin.
	res := runBinary(t, env, lines, append(args, "--from", "/dev/stdin")...)
	require.Equal(t, 0, res.code, res.stderr)
	require.Empty(t, res.stderr)
	require.Regexp(t, `^created dispatch:pipe:a:1 \S+\ncreated dispatch:pipe:b:1 \S+\n$`, res.stdout)

	// A FIFO, as <(…) gives.
	fifo := filepath.Join(t.TempDir(), "requests")
	require.NoError(t, syscall.Mkfifo(fifo, 0o600))
	go func() {
		f, err := os.OpenFile(fifo, os.O_WRONLY, 0)
		if err != nil {
			return
		}
		defer f.Close()
		f.WriteString(strings.ReplaceAll(lines, "pipe", "fifo"))
	}()
	res = runBinary(t, env, "", append(args, "--from", fifo)...)
	require.Equal(t, 0, res.code, res.stderr)
	require.Regexp(t, `^created dispatch:fifo:a:1 \S+\ncreated dispatch:fifo:b:1 \S+\n$`, res.stdout)
	require.Len(t, emu.Tasks(dqQueue), 4)
}

func TestBinaryHugeLineIsOneError(t *testing.T) {
	t.Parallel()
	emu := startCLIEmulator(t)
	file := filepath.Join(t.TempDir(), "requests.jsonl")
	huge := `{"run":"big","task":"b","attempt":1,"body":"` + strings.Repeat("x", 10<<20) + `"}`
	require.NoError(t, os.WriteFile(file, []byte(`{"run":"big","task":"a","attempt":1}`+"\n"+huge+"\n"+`{"run":"big","task":"c","attempt":1}`+"\n"), 0o600))
	res := runBinary(t, []string{emulatorEnv + "=" + emu.Addr()}, "",
		append(append([]string(nil), dispatchArgs...), "--url", "https://w/x", "--from", file)...)
	require.Equal(t, 1, res.code)
	require.Equal(t, fmt.Sprintf("ctdispatch: line 2: line of %d bytes is over the limit of 4194304 bytes (a task body is at most 1 MiB); skipped\n", len(huge)+1)+
		"ctdispatch: 1 of the requests failed (reported above)\n", res.stderr)
	require.Regexp(t, `^created dispatch:big:a:1 \S+\ncreated dispatch:big:c:1 \S+\n$`, res.stdout)
}

// A closed loopback port: every command that talks to Cloud Tasks fails in
// seconds, naming the address and the cause.
func TestBinaryDeadEndpoint(t *testing.T) {
	t.Parallel()
	addr := deadAddr(t)
	box := seedOutbox(t)
	base := []string{"--emulator", addr, "--project", "p", "--location", "europe-west1", "--queue", "work"}
	for name, args := range map[string][]string{
		"dispatch":     append([]string{"dispatch", "--run", "r", "--task", "t", "--attempt", "1", "--url", "https://w/x"}, base...),
		"timer":        append([]string{"timer", "--run", "r", "--task", "t", "--attempt", "1", "--due", "1", "--url", "https://w/x"}, base...),
		"timer cancel": append([]string{"timer", "--cancel", "timer:retry:r:t:1:1"}, base...),
		"recover":      {"recover", "--outbox", box, "--emulator", addr, "--stale-after", "0"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			res := runBinary(t, nil, "", args...)
			require.Equal(t, 1, res.code)
			require.Empty(t, res.stdout)
			require.Equal(t, "ctdispatch: cannot reach Cloud Tasks at "+addr+": dial tcp "+addr+": connect: connection refused\n", res.stderr)
			require.Less(t, res.took, 10*time.Second)
		})
	}
}

// deadAddr returns a loopback address nothing listens on.
func deadAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	return addr
}
