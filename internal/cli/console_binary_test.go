package cli

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	cloudtasks "cloud.google.com/go/cloudtasks/apiv2"
	"cloud.google.com/go/cloudtasks/apiv2/cloudtaskspb"
	"github.com/stretchr/testify/require"

	"github.com/ctdispatch/ctdispatch/cloudtasks/emulator"
)

// The tests in this file run the built binary's console servers and send
// them requests a page of another site could make: a Host naming another
// site (DNS rebinding) and cross-site actions. Time budget: a few seconds
// each (the binary is built once per test process; demo --keep runs one
// short demo).

// startBinary runs the built binary with args and returns the first line,
// on stdout or stderr, that starts with prefix; the test's cleanup
// interrupts the process and waits for it.
func startBinary(t *testing.T, prefix string, args ...string) string {
	t.Helper()
	cmd := exec.Command(ctdispatchBinary(t), args...)
	cmd.Env = append(os.Environ(), emulatorEnv+"=")
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	require.NoError(t, cmd.Start())
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		pw.Close() // ends the scan below if the process exits early
		close(exited)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		<-exited
	})
	sc := bufio.NewScanner(pr)
	for sc.Scan() {
		if line, ok := strings.CutPrefix(sc.Text(), prefix); ok {
			go io.Copy(io.Discard, pr) //nolint:errcheck // drain what follows
			return line
		}
	}
	require.FailNow(t, "no line starting with "+prefix)
	return ""
}

// send makes one request to base+path with Host set to host (the URL's
// own when empty) and extra headers, without following redirects.
func send(t *testing.T, method, base, path, host string, form url.Values, header map[string]string) (int, string) {
	t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequestWithContext(context.Background(), method, base+path, body)
	require.NoError(t, err)
	if host != "" {
		req.Host = host
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	c := http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(b)
}

var csrfRE = regexp.MustCompile(`name="csrf" value="([0-9a-f]+)"`)

// TestConsoleBinaryRefusesOtherSites: `ctdispatch console --emulator ADDR`
// (no --location, no --emulator-http) shows the emulator's queue; a
// request naming another host is refused before anything is rendered,
// and a purge with the right token but a forged Host or from another
// site does not happen, while the same purge from the console's own page
// does.
func TestConsoleBinaryRefusesOtherSites(t *testing.T) {
	t.Parallel()
	const queue = "projects/p/locations/l/queues/q"
	emuAddr := startBinary(t, "Cloud Tasks emulator listening on ", "emulator", "--addr", "127.0.0.1:0", "--queue", queue, "--no-delivery")
	ctx := context.Background()
	client, err := cloudtasks.NewClient(ctx, emulator.ClientOptions(emuAddr)...)
	require.NoError(t, err)
	defer client.Close()
	for _, id := range []string{"a", "b"} {
		_, err := client.CreateTask(ctx, &cloudtaskspb.CreateTaskRequest{Parent: queue, Task: &cloudtaskspb.Task{
			Name:        queue + "/tasks/" + id,
			MessageType: &cloudtaskspb.Task_HttpRequest{HttpRequest: &cloudtaskspb.HttpRequest{Url: "http://127.0.0.1:1/w"}},
		}})
		require.NoError(t, err)
	}
	tasks := func() int {
		n := 0
		it := client.ListTasks(ctx, &cloudtaskspb.ListTasksRequest{Parent: queue})
		for _, err := it.Next(); err == nil; _, err = it.Next() {
			n++
		}
		return n
	}

	base := startBinary(t, "console serving on ", "console", "--emulator", emuAddr, "--outbox", t.TempDir(), "--allow-actions", "--addr", "127.0.0.1:0")
	base = strings.TrimSuffix(base, "/")
	u, err := url.Parse(base)
	require.NoError(t, err)
	port := u.Port()

	code, page := send(t, "GET", base, "/", "", nil, nil)
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, page, `title="`+queue+`">q</a>`, "found from --emulator alone")
	m := csrfRE.FindStringSubmatch(page)
	require.NotNil(t, m, "the page carries the action forms")
	purge := url.Values{"csrf": {m[1]}, "name": {queue}, "back": {"/"}}

	for _, host := range []string{"attacker.example:" + port, "attacker.example", "127.0.0.1.nip.io:" + port} {
		code, page = send(t, "GET", base, "/", host, nil, nil)
		require.Equal(t, http.StatusMisdirectedRequest, code, host)
		require.Equal(t, "console: Host \""+host+"\" is not an address this console answers to; a page of another site cannot read it. Reach it at the address it printed, or allow this name when starting it (--allow-host, or --console-allow-host for emulator and demo).\n", page)
		code, _ = send(t, "POST", base, "/actions/purge", host, purge, map[string]string{"Origin": "http://" + host, "Sec-Fetch-Site": "same-origin"})
		require.Equal(t, http.StatusMisdirectedRequest, code, host)
	}
	require.Equal(t, 2, tasks(), "no purge through a forged Host")

	for _, h := range []map[string]string{
		{"Origin": "https://attacker.example", "Sec-Fetch-Site": "cross-site"},
		{"Origin": "http://localhost:3000", "Sec-Fetch-Site": "same-site"},
		{"Origin": "https://attacker.example"},
	} {
		code, page = send(t, "POST", base, "/actions/purge", "", purge, h)
		require.Equal(t, http.StatusForbidden, code, h)
		require.Equal(t, "console: refused a cross-origin POST request: actions are accepted only from the console's own pages.\n", page)
	}
	require.Equal(t, 2, tasks(), "no purge from another site")

	code, _ = send(t, "POST", base, "/actions/purge", "localhost:"+port, purge, map[string]string{"Origin": "http://localhost:" + port, "Sec-Fetch-Site": "same-origin"})
	require.Equal(t, http.StatusSeeOther, code)
	require.Equal(t, 0, tasks(), "the console's own page purges")
}

// TestEveryConsoleServerRefusesOtherHosts: the console that `emulator
// --console-addr` and `demo --keep` serve is guarded the same way.
func TestEveryConsoleServerRefusesOtherHosts(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"emulator --console-addr", []string{"emulator", "--addr", "127.0.0.1:0", "--no-delivery", "--console-addr", "127.0.0.1:0"}},
		{"demo --keep", []string{"demo", "--runs", "1", "--keep", "--outbox", t.TempDir(), "--console-addr", "127.0.0.1:0"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			base := strings.TrimSuffix(startBinary(t, "console serving on ", tc.args...), "/")
			u, err := url.Parse(base)
			require.NoError(t, err)
			code, _ := send(t, "GET", base, "/", "", nil, nil)
			require.Equal(t, http.StatusOK, code)
			code, _ = send(t, "GET", base, "/", "localhost:"+u.Port(), nil, nil)
			require.Equal(t, http.StatusOK, code)
			code, page := send(t, "GET", base, "/", "attacker.example:"+u.Port(), nil, nil)
			require.Equal(t, http.StatusMisdirectedRequest, code)
			require.NotContains(t, page, "<html")
		})
	}
}
