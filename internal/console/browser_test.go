package console

import (
	"context"
	"flag"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/ctdispatch/ctdispatch/cloudtasks"
	"github.com/ctdispatch/ctdispatch/internal/demo"
	"github.com/ctdispatch/ctdispatch/internal/durability"
	"github.com/ctdispatch/ctdispatch/naming"
	"github.com/ctdispatch/ctdispatch/outbox/parquetbox"
)

var screenshots = flag.String("screenshots", "", "directory where the browser test saves its screenshots (README images: ../../docs)")

// chromium finds a Chromium or Chrome binary; CHROMIUM overrides.
func chromium() string {
	if p := os.Getenv("CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "headless-shell"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// browser starts a headless Chromium for one test. The flags keep it off
// the network: on a machine without one, its background connections are
// refused and it would not start cleanly.
func browser(t *testing.T) context.Context {
	t.Helper()
	path := chromium()
	if path == "" {
		t.Skip("needs chromium: no chromium binary on PATH (apt-get install chromium, or set CHROMIUM): browser tests skipped")
	}
	// Chromium's helpers may still write to the profile while the test's
	// own temporary directory is removed, so it gets one of its own.
	profile, err := os.MkdirTemp("", "console-chromium-")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(profile) })
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		// A name that resolves to this machine, as a DNS-rebinding site's does.
		chromedp.Flag("host-resolver-rules", "MAP attacker.example 127.0.0.1"),
		chromedp.UserDataDir(profile),
		chromedp.WindowSize(1360, 720),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelCtx := chromedp.NewContext(actx)
	ctx, cancelTimeout := context.WithTimeout(ctx, 2*time.Minute)
	t.Cleanup(func() {
		cancelTimeout()
		_ = chromedp.Cancel(ctx) // closes the browser and waits for it
		cancelCtx()
		cancelAlloc()
	})
	require.NoError(t, chromedp.Run(ctx), "starting %s", path)
	return ctx
}

// demoConsole runs the demo (emulator, worker, outbox), then dispatches a
// fourth run scheduled an hour out so the queue has tasks to show, and
// serves a console with actions over all of it.
func demoConsole(t *testing.T) (*consoleURL, *demo.Env) {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	_, env, err := demo.Run(ctx, demo.Options{OutboxDir: dir, Keep: true})
	require.NoError(t, err)
	t.Cleanup(func() { env.Close() })
	d, err := durability.OpenDispatcher(ctx, durability.Overlapped, parquetbox.Config{Root: dir}, cloudtasks.Config{
		Project: demo.Project, Location: demo.Location, Queue: demo.Queue, EmulatorAddr: env.Emulator.Addr(),
	})
	require.NoError(t, err)
	for _, key := range []string{"extract", "transform", "load", "report"} {
		_, err := d.Dispatch(ctx, cloudtasks.DispatchRequest{
			RunID: "run-4", TaskKey: key, Identity: naming.Attempt(1),
			Task: cloudtasks.Task{
				URL: env.WorkerURL + "/" + key, Body: []byte(`{"run":4}`), ScheduleTime: time.Now().Add(time.Hour),
				OIDC: &cloudtasks.OIDCToken{ServiceAccountEmail: "worker@demo-project.iam.gserviceaccount.com"},
			},
		})
		require.NoError(t, err)
	}
	require.NoError(t, d.Close(context.Background()))
	// The emulator's gRPC address alone, as `ctdispatch console --emulator`:
	// the console finds the queues and the HTTP server through it. It is
	// served as every console server serves it: Listen, then Serve (behind
	// Guard).
	srv, err := New(ctx, Config{
		Emulator: env.Emulator.Addr(), Outbox: dir,
		AllowActions: true, Refresh: time.Second,
	})
	require.NoError(t, err)
	t.Cleanup(func() { srv.Close() })
	lis, err := Listen("127.0.0.1:0", nil, nil)
	require.NoError(t, err)
	serveCtx, stop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(serveCtx, lis) }()
	t.Cleanup(func() {
		stop()
		require.NoError(t, <-served)
	})
	return &consoleURL{URL: "http://" + lis.Addr().String(), srv: srv}, env
}

// consoleURL is where a browser test's console answers.
type consoleURL struct {
	URL string
	srv *Server
}

func TestBrowserClicksFromQueueToTaskToIDToRun(t *testing.T) {
	web, _ := demoConsole(t)
	ctx := browser(t) // closed first, so the console's shutdown waits for no connection
	var queues, tasks, internalID, trail, run string
	var circles int
	require.NoError(t, chromedp.Run(ctx,
		chromedp.Navigate(web.URL+"/"),
		chromedp.WaitVisible(`#queues`, chromedp.ByQuery),
		chromedp.Text(`#queues tbody`, &queues, chromedp.ByQuery),
		shoot(t, "console-queues.png"),
		chromedp.Click(`//table[@id="queues"]//a[text()="work"]`, chromedp.BySearch),
		chromedp.WaitVisible(`#tasks`, chromedp.ByQuery),
		chromedp.Text(`#tasks tbody`, &tasks, chromedp.ByQuery),
		chromedp.Click(`#tasks tbody tr:first-child td:first-child a`, chromedp.ByQuery),
		chromedp.WaitVisible(`#internal-id`, chromedp.ByQuery),
		chromedp.Text(`#internal-id`, &internalID, chromedp.ByQuery),
		chromedp.Click(`#internal-id`, chromedp.ByQuery),
		chromedp.WaitVisible(`table.states`, chromedp.ByQuery),
		chromedp.Text(`table.states tbody`, &trail, chromedp.ByQuery),
		chromedp.Click(`a.run-link`, chromedp.ByQuery),
		chromedp.WaitVisible(`#timeline`, chromedp.ByQuery),
		chromedp.Text(`#run tbody`, &run, chromedp.ByQuery),
		chromedp.Evaluate(`document.querySelectorAll("#timeline circle").length`, &circles),
		// The README shows the first run: dispatches, a retry and a heartbeat.
		chromedp.Navigate(web.URL+"/run?id=run-1"),
		chromedp.WaitVisible(`#timeline`, chromedp.ByQuery),
		shoot(t, "console-run.png"),
	))
	// The demo's queue holds run-4's four tasks; each has its outbox ID.
	require.Contains(t, queues, "work")
	require.Contains(t, queues, "RUNNING")
	require.Contains(t, queues, "200×")
	require.Equal(t, 4, strings.Count(tasks, "dispatch:run-4:"))
	require.True(t, strings.HasPrefix(internalID, "dispatch:run-4:"), internalID)
	// Pending first, then the outcome; the demo's injected faults make
	// some creates answer AlreadyExists on the retry.
	require.Regexp(t, `^\S+ \S+\tpending\t.*\n\S+ \S+\t(created|already_existed)\t`, trail)
	require.Equal(t, 4, strings.Count(run, "dispatch:run-4:"))
	require.Equal(t, 4, circles)
}

func TestBrowserSeesDeliveriesRedactedAndOutboxHealthByLiveRefresh(t *testing.T) {
	web, env := demoConsole(t)
	ctx := browser(t) // closed first, so the console's shutdown waits for no connection
	var deliveries, stats string
	var rowsShown int
	// Run one of run-4's tasks now through its button; it carries an OIDC
	// token, so its delivery has an Authorization header.
	require.NoError(t, chromedp.Run(ctx,
		chromedp.Navigate(web.URL+"/queue?name="+url.QueryEscape(env.Emulator.Queues()[0].Name)),
		chromedp.WaitVisible(`button.act.run`, chromedp.ByQuery),
		chromedp.Click(`button.act.run`, chromedp.ByQuery),
		chromedp.WaitVisible(`p.note`, chromedp.ByQuery),
	))
	_, err := env.Emulator.RunDue(context.Background())
	require.NoError(t, err)
	require.NoError(t, chromedp.Run(ctx,
		chromedp.Navigate(web.URL+"/deliveries"),
		chromedp.WaitVisible(`#deliveries`, chromedp.ByQuery),
		chromedp.Text(`#deliveries tbody`, &deliveries, chromedp.ByQuery),
		chromedp.Evaluate(`document.querySelectorAll("#deliveries tbody tr").length`, &rowsShown),
		// The health figures are counted in the background; the page
		// shows them once its live refresh brings them in.
		chromedp.Navigate(web.URL+"/outbox"),
		chromedp.WaitVisible(`#stats`, chromedp.ByQuery),
		chromedp.Text(`#stats tbody`, &stats, chromedp.ByQuery),
	))
	require.Equal(t, len(env.Emulator.Deliveries()), rowsShown)
	require.Contains(t, deliveries, "Authorization: [redacted]")
	require.Contains(t, deliveries, "Idempotency-Key: dispatch:run-")
	require.Contains(t, deliveries, "X-Cloudtasks-Taskname: d_")
	require.NotContains(t, deliveries, "Bearer")
	require.Contains(t, stats, "dispatch_outbox")
	require.Contains(t, stats, "timers")
}

func TestBrowserPausesAQueueThroughItsForm(t *testing.T) {
	web, _ := demoConsole(t)
	ctx := browser(t) // closed first, so the console's shutdown waits for no connection
	var state, note string
	require.NoError(t, chromedp.Run(ctx,
		chromedp.Navigate(web.URL+"/"),
		chromedp.WaitVisible(`button.act.pause`, chromedp.ByQuery),
		chromedp.Click(`button.act.pause`, chromedp.ByQuery),
		chromedp.WaitVisible(`button.act.resume`, chromedp.ByQuery),
		chromedp.Text(`#queues tbody tr td:nth-child(2)`, &state, chromedp.ByQuery),
		chromedp.Text(`p.note`, &note, chromedp.ByQuery),
	))
	require.Equal(t, "PAUSED", state)
	require.Equal(t, "pause work: done", note)
}

// shoot saves a screenshot of the page's content (not the empty viewport
// below it) when -screenshots is given.
func shoot(t *testing.T, name string) chromedp.Action {
	return chromedp.ActionFunc(func(ctx context.Context) error {
		if *screenshots == "" {
			return nil
		}
		var png []byte
		if err := chromedp.Screenshot("body", &png, chromedp.ByQuery).Do(ctx); err != nil {
			return fmt.Errorf("screenshot %s: %w", name, err)
		}
		path := filepath.Join(*screenshots, name)
		t.Logf("screenshot %s (%d bytes)", path, len(png))
		return os.WriteFile(path, png, 0o644)
	})
}

// TestBrowserRefusesARebindingSite: a page of another site whose name
// resolves to this machine (DNS rebinding) gets 421 and nothing of the
// console; an action form on another site, even one carrying the right
// token, is refused (Chromium says Sec-Fetch-Site: cross-site) and
// purges nothing. Time budget: about a second after the demo's setup.
func TestBrowserRefusesARebindingSite(t *testing.T) {
	web, env := demoConsole(t)
	ctx := browser(t) // closed first, so the console's shutdown waits for no connection
	u, err := url.Parse(web.URL)
	require.NoError(t, err)
	queue := env.Emulator.Queues()[0].Name
	before := len(env.Emulator.Tasks(queue))
	require.Positive(t, before)

	attacker := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintf(w, `<!doctype html><form id="f" method="post" action="%s/actions/purge">
<input type="hidden" name="csrf" value="%s"><input type="hidden" name="name" value="%s"><input type="hidden" name="back" value="/">
</form><script>document.getElementById("f").submit()</script>`, web.URL, web.srv.csrf, queue)
	}))
	t.Cleanup(attacker.Close)
	_, attackerPort, err := net.SplitHostPort(strings.TrimPrefix(attacker.URL, "http://"))
	require.NoError(t, err)

	var rebound, forged string
	var tables int
	require.NoError(t, chromedp.Run(ctx,
		chromedp.Navigate("http://attacker.example:"+u.Port()+"/"),
		chromedp.Text(`body`, &rebound, chromedp.ByQuery),
		chromedp.Evaluate(`document.querySelectorAll("table").length`, &tables),
		chromedp.Navigate("http://attacker.example:"+attackerPort+"/"),
		chromedp.WaitVisible(`//body[contains(., "cross-origin")]`, chromedp.BySearch),
		chromedp.Text(`body`, &forged, chromedp.ByQuery),
	))
	require.Equal(t, "console: Host \"attacker.example:"+u.Port()+"\" is not an address this console answers to; a page of another site cannot read it. Reach it at the address it printed, or allow this name when starting it (--allow-host, or --console-allow-host for emulator and demo).", strings.TrimSpace(rebound))
	require.Zero(t, tables)
	require.Equal(t, "console: refused a cross-origin POST request: actions are accepted only from the console's own pages.", strings.TrimSpace(forged))
	require.Len(t, env.Emulator.Tasks(queue), before, "nothing purged")
}
