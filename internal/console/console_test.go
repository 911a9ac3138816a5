package console

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/cloudtasks/apiv2/cloudtaskspb"
	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"

	"github.com/ctdispatch/ctdispatch/cloudtasks/emulator"
)

func TestQueuesPage(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{})
	code, page := b.get(t, "/")
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, [][]string{
		{"idle", "PAUSED", "500", "100", "1000", "100", "100ms – 1h0m0s", "16", "0", "0", "0", "0", "0.00", "—"},
		{"work", "RUNNING", "5", "5", "10", "3", "1s – 10s", "2", "2", "0", "2", "0", "0.03", "200×1 503×1"},
	}, rows(t, page, "queues"))
}

func TestQueuePageListsTasksWithTheirInternalIDs(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{})
	code, page := b.get(t, "/queue?name="+url.QueryEscape(workQueue))
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, [][]string{
		{b.ids["transform"].CloudTaskID(), "dispatch:run-1:transform:1", "2026-11-23 10:00:01.000", "1", "1", "Unavailable HTTP status 503"},
		{b.ids["load"].CloudTaskID(), "dispatch:run-1:load:1", "2026-11-23 11:00:00.000", "0", "0", "—"},
	}, rows(t, page, "tasks"))
	require.NotContains(t, page, `id="next"`)
}

func TestQueuePagePagesThroughListTasksTokens(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{PageSize: 2})
	ctx := context.Background()
	for i := range 3 {
		// z-1 claims an ID whose hash is not its name: it is not trusted.
		headers := map[string]string{}
		if i == 1 {
			headers["Idempotency-Key"] = b.ids["extract"].String()
		}
		_, err := b.client.CreateTask(ctx, &cloudtaskspb.CreateTaskRequest{Parent: workQueue, Task: &cloudtaskspb.Task{
			Name:        fmt.Sprintf("%s/tasks/z-%d", workQueue, i),
			MessageType: &cloudtaskspb.Task_HttpRequest{HttpRequest: &cloudtaskspb.HttpRequest{Url: "http://127.0.0.1:1/", Headers: headers}},
		}})
		require.NoError(t, err)
	}
	var seen [][]string
	path := "/queue?name=" + url.QueryEscape(workQueue)
	for pages := 0; path != ""; pages++ {
		require.Less(t, pages, 3, "more pages than tasks allow")
		_, page := b.get(t, path)
		for _, r := range rows(t, page, "tasks") {
			seen = append(seen, r[:2])
		}
		path = ""
		if i := strings.Index(page, `id="next" href="`); i >= 0 {
			rest := page[i+len(`id="next" href="`):]
			path = strings.ReplaceAll(rest[:strings.Index(rest, `"`)], "&amp;", "&")
		}
	}
	require.Equal(t, [][]string{
		{b.ids["transform"].CloudTaskID(), "dispatch:run-1:transform:1"},
		{b.ids["load"].CloudTaskID(), "dispatch:run-1:load:1"},
		{"z-0", "not in outbox"}, {"z-1", "not in outbox"}, {"z-2", "not in outbox"},
	}, seen)
}

func TestDeliveriesShowHeadersButNeverTheAuthorizationValue(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{})
	code, page := b.get(t, "/deliveries")
	require.Equal(t, http.StatusOK, code)
	got := rows(t, page, "deliveries")
	require.Len(t, got, 2)
	want := func(key, path string, status, outcome string) []string {
		id := b.ids[key]
		return []string{"2026-11-23 10:00:00.000", "work", id.CloudTaskID(), "1", "POST " + b.workerURL + path,
			"Authorization: [redacted] Idempotency-Key: " + id.String() + " X-Cloudtasks-Queuename: work X-Cloudtasks-Tasketa: 1795428000.000000 " +
				"X-Cloudtasks-Taskexecutioncount: 0 X-Cloudtasks-Taskname: " + id.CloudTaskID() + " X-Cloudtasks-Taskretrycount: 0",
			status, outcome}
	}
	require.Equal(t, [][]string{
		want("transform", "/fail", "503", "retry"),
		want("extract", "/ok", "200", "succeeded"),
	}, got)
	// The emulator did send a token; the console shows that it was there.
	sent := b.emu.Deliveries()[0].Header.Get("Authorization")
	require.True(t, strings.HasPrefix(sent, "Bearer "))
	require.NotContains(t, page, strings.TrimPrefix(sent, "Bearer "))
	require.NotContains(t, page, "Bearer")
}

func TestTaskPageShowsTheRequestAndItsDeliveries(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{})
	name := workQueue + "/tasks/" + b.ids["transform"].CloudTaskID()
	code, page := b.get(t, "/task?name="+url.QueryEscape(name))
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, [][]string{
		{"Idempotency-Key", "dispatch:run-1:transform:1"},
		{"X-Note", hostile},
	}, rows(t, page, "task-headers"))
	// A task without the header is found through the outbox.
	_, loadPage := b.get(t, "/task?name="+url.QueryEscape(workQueue+"/tasks/"+b.ids["load"].CloudTaskID()))
	require.Contains(t, loadPage, `<a id="internal-id" href="/audit?q=dispatch%3arun-1%3aload%3a1"><code>dispatch:run-1:load:1</code></a>`)
	require.Equal(t, [][]string{{"1", "2026-11-23 10:00:00.000", "503", "retry"}}, rows(t, page, "task-deliveries"))
	require.Contains(t, page, `<a id="internal-id" href="/audit?q=dispatch%3arun-1%3atransform%3a1"><code>dispatch:run-1:transform:1</code></a>`)
	require.Contains(t, page, `<code>worker@p.iam.gserviceaccount.com</code>`)
}

func TestAuditTrailShowsStatesHandOversAndFingerprint(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{})
	for _, q := range []string{b.ids["transform"].String(), b.ids["transform"].CloudTaskID(), workQueue + "/tasks/" + b.ids["transform"].CloudTaskID()} {
		code, page := b.get(t, "/audit?q="+url.QueryEscape(q))
		require.Equal(t, http.StatusOK, code, q)
		doc := find(mustParse(t, page), func(n *htmlNode) bool { return n.Data == "table" && attr(n, "class") == "states" })
		require.NotNil(t, doc, q)
		require.Contains(t, page, `<dt>Payload fingerprint</dt><dd><code class="hash">b4e73c40e3e8e640fc266216e38f60c4b6735dd07f73fd6871b8a68764650874</code></dd>`)
		require.Contains(t, page, `<dt>Hand-overs</dt><dd>1</dd>`)
		require.Equal(t, [][]string{
			{"2026-11-23 10:00:02.000", "pending", "aaaaaaaa-0000-4000-8000-000000000001", "", "0", "—"},
			{"2026-11-23 10:00:30.000", "already_existed", "bbbbbbbb-0000-4000-8000-000000000002 hand-over", hostile, "1", "—"},
		}, tableRows(doc), q)
	}
}

func TestAuditSearchForARunGoesToTheRunPage(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{})
	resp := b.do(t, http.MethodGet, "/audit?q=run-1", nil)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	require.Equal(t, "/run?id=run-1", resp.Header.Get("Location"))
	code, page := b.get(t, "/audit?q=nothing-here&by=id")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, page, `Nothing recorded for <code>nothing-here</code>.`)
}

func TestRunPageListsEveryDispatchAndTimerOnATimeline(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{})
	code, page := b.get(t, "/run?id=run-1")
	require.Equal(t, http.StatusOK, code)
	retry := b.ids["retry"]
	require.Equal(t, [][]string{
		{"dispatch:run-1:extract:1", "dispatch", "created", b.ids["extract"].CloudTaskID(), "2026-11-23 10:00:01.000", "—", "1", ""},
		{"dispatch:run-1:load:1", "dispatch", "pending", b.ids["load"].CloudTaskID(), "2026-11-23 10:00:03.000", "—", "0", ""},
		{"dispatch:run-1:transform:1", "dispatch", "already_existed", b.ids["transform"].CloudTaskID(), "2026-11-23 10:00:30.000", "—", "1", hostile},
		{retry.String(), "retry", "created", retry.CloudTaskID(), "2026-11-23 10:00:04.000", "2026-11-23 10:02:00.000", "1", ""},
	}, rows(t, page, "run"))
	// The timeline spans 10:00:00 to the timer's due time at 10:02:00 over
	// x = 100..912: the transform outcome at 10:00:30 sits at 303.
	require.Contains(t, page, `<g class="mark st-already_existed"><title>dispatch:run-1:transform:1: already_existed at 2026-11-23 10:00:30.000</title><line x1="100" x2="303" y1="41" y2="41"/><circle cx="303" cy="41" r="5"/></g>`)
	require.Contains(t, page, `<text class="lane" x="8" y="76" dy="4">retry</text>`)
	require.Equal(t, 4, strings.Count(page, "<circle "))
	require.Contains(t, page, `<text class="tick" x="912" y="98" dy="18">10:02:00</text>`)
}

func TestOutboxPageShowsFilesDamageAndStaleRecords(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{StaleAfter: time.Minute})
	// A file outside the layout, and a truncated one among the outbox's files.
	require.NoError(t, os.WriteFile(filepath.Join(b.dir, "dispatch_outbox", "notes.txt"), []byte("hello"), 0o600))
	broken := filepath.Join(b.dir, "dispatch_outbox", "created_date=2026-11-23", "broken.parquet")
	require.NoError(t, os.WriteFile(broken, []byte("PAR1 and then nothing"), 0o600))
	_, page := b.get(t, "/outbox")
	require.Contains(t, page, "Counting every record")
	b.srv.health.wait()
	code, page := b.get(t, "/outbox")
	require.Equal(t, http.StatusOK, code)
	files := rows(t, page, "files")
	// The records and the truncated file sit in their day's partition;
	// the notes at the table's top level.
	require.Len(t, files, 3)
	require.Equal(t, []string{"dispatch_outbox", "(top level)", "0"}, files[0][:3])
	require.Equal(t, "1", files[0][4])
	// Two log conversions, each one file per bucket its tasks hash to (3
	// files), and the truncated file.
	require.Equal(t, []string{"dispatch_outbox", "created_date=2026-11-23", "4"}, files[1][:3])
	require.Equal(t, "0", files[1][4])
	require.Equal(t, []string{"timers", "created_date=2026-11-23", "1"}, files[2][:3])
	require.Equal(t, [][]string{
		{broken, "not a readable Parquet file"},
		{filepath.Join(b.dir, "dispatch_outbox", "notes.txt"), "not in a partition directory; table files are read only under created_date=YYYY-MM-DD/"},
	}, rows(t, page, "damaged"))
	require.Contains(t, page, `<p class="error" id="skipped-notice">2 entries of the outbox skipped (damaged, foreign or outside the table layout; listed below): every answer on these pages may miss the records they hold.</p>`)
	require.Equal(t, [][]string{
		{"dispatch_outbox", "3", "5", "0", "3", "already_existed 1 created 1 pending 1"},
		{"timers", "1", "1", "0", "1", "created 1"},
	}, rows(t, page, "stats"))
	require.Equal(t, [][]string{{"dispatch:run-1:load:1", "2026-11-23 10:00:03.000", procA.String()}}, rows(t, page, "stale"))
	require.Contains(t, page, `<svg id="outcomes"`)
}

func TestEveryPageEscapesWhatItShows(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{AllowActions: true})
	name := workQueue + "/tasks/" + b.ids["transform"].CloudTaskID()
	for _, path := range []string{
		"/task?name=" + url.QueryEscape(name),
		"/audit?q=" + url.QueryEscape(b.ids["transform"].String()),
		"/audit?by=id&q=" + url.QueryEscape(hostile),
		"/run?id=run-1",
		"/run?id=" + url.QueryEscape(hostile),
		"/?note=" + url.QueryEscape(hostile),
		"/queue?name=" + url.QueryEscape(workQueue) + "&note=" + url.QueryEscape(hostile),
	} {
		code, page := b.get(t, path)
		require.Contains(t, []int{http.StatusOK, http.StatusBadGateway}, code, path)
		require.NotContains(t, page, hostile, path)
		require.Contains(t, page, "&lt;script&gt;alert(1)&lt;/script&gt;", path)
	}
}

func TestActionsAreAbsentWithoutAllowActions(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{})
	for _, path := range []string{"/", "/queue?name=" + url.QueryEscape(workQueue), "/outbox"} {
		_, page := b.get(t, path)
		require.NotContains(t, page, `method="post"`, path)
		require.NotContains(t, page, `name="csrf"`, path)
	}
	resp := b.post(t, "/actions/pause", url.Values{"csrf": {b.srv.csrf}, "name": {workQueue}})
	require.Equal(t, http.StatusNotFound, resp.StatusCode)
	q, err := b.client.GetQueue(context.Background(), &cloudtaskspb.GetQueueRequest{Name: workQueue})
	require.NoError(t, err)
	require.Equal(t, cloudtaskspb.Queue_RUNNING, q.State)
}

func TestActionsNeedTheCSRFToken(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{AllowActions: true})
	_, page := b.get(t, "/")
	require.Contains(t, page, `<input type="hidden" name="csrf" value="`+b.srv.csrf+`">`)
	for _, form := range []url.Values{
		{"name": {workQueue}},
		{"name": {workQueue}, "csrf": {""}},
		{"name": {workQueue}, "csrf": {strings.Repeat("0", len(b.srv.csrf))}},
		{"name": {workQueue}, "csrf": {b.srv.csrf + "0"}},
	} {
		resp := b.post(t, "/actions/pause", form)
		require.Equal(t, http.StatusForbidden, resp.StatusCode, form.Encode())
	}
	state := func() cloudtaskspb.Queue_State {
		q, err := b.client.GetQueue(context.Background(), &cloudtaskspb.GetQueueRequest{Name: workQueue})
		require.NoError(t, err)
		return q.State
	}
	require.Equal(t, cloudtaskspb.Queue_RUNNING, state())
	resp := b.post(t, "/actions/pause", url.Values{"csrf": {b.srv.csrf}, "name": {workQueue}, "back": {"/queue?name=x"}})
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	require.Equal(t, "/queue?name=x&note=pause+work%3A+done", resp.Header.Get("Location"))
	require.Equal(t, cloudtaskspb.Queue_PAUSED, state())
	resp = b.post(t, "/actions/resume", url.Values{"csrf": {b.srv.csrf}, "name": {workQueue}, "back": {"//evil.example/"}})
	require.Equal(t, "/?note=resume+work%3A+done", resp.Header.Get("Location"))
	require.Equal(t, cloudtaskspb.Queue_RUNNING, state())
}

func TestRunNowAndPurgeActions(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{AllowActions: true})
	load := workQueue + "/tasks/" + b.ids["load"].CloudTaskID()
	resp := b.post(t, "/actions/run", url.Values{"csrf": {b.srv.csrf}, "name": {load}})
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	_, err := b.emu.RunDue(context.Background())
	require.NoError(t, err)
	last := b.emu.Deliveries()[len(b.emu.Deliveries())-1]
	require.Equal(t, load, last.Task)
	require.Equal(t, http.StatusOK, last.StatusCode)

	resp = b.post(t, "/actions/purge", url.Values{"csrf": {b.srv.csrf}, "name": {workQueue}})
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	require.Empty(t, b.emu.Tasks(workQueue))

	resp = b.post(t, "/actions/explode", url.Values{"csrf": {b.srv.csrf}, "name": {workQueue}})
	require.Equal(t, http.StatusNotFound, resp.StatusCode)
}

func TestRecoverActionFinishesStaleRecordsAsAHandOver(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{AllowActions: true, StaleAfter: time.Minute})
	resp := b.post(t, "/actions/recover", url.Values{"csrf": {b.srv.csrf}, "back": {"/outbox"}})
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	require.Equal(t, "/outbox?note="+url.QueryEscape("recover: 1 stale, 1 found (already_existed), 0 not found (not_found), 1 taken over, 0 errors"), resp.Header.Get("Location"))
	_, page := b.get(t, "/audit?q="+url.QueryEscape(b.ids["load"].String()))
	doc := find(mustParse(t, page), func(n *htmlNode) bool { return n.Data == "table" && attr(n, "class") == "states" })
	got := tableRows(doc)
	require.Len(t, got, 2)
	require.Equal(t, []string{"pending", procA.String()}, []string{got[0][1], got[0][2]})
	require.Equal(t, "already_existed", got[1][1])
	require.True(t, strings.HasSuffix(got[1][2], " hand-over"), got[1][2])
}

func TestPagesWithoutTheirSourceSayWhatIsMissing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv, err := New(ctx, Config{Outbox: t.TempDir()})
	require.NoError(t, err)
	defer srv.Close()
	b := &bundle{srv: srv}
	b.web = httptestServer(t, srv)
	code, page := b.get(t, "/queue?name=x")
	require.Equal(t, http.StatusNotFound, code)
	require.Equal(t, "no emulator configured: start the console with --emulator ADDR\n", page)
	code, page = b.get(t, "/")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, page, "no emulator configured: only the outbox pages are available")
	code, _ = b.get(t, "/run")
	require.Equal(t, http.StatusBadRequest, code)

	_, err = New(ctx, Config{})
	require.ErrorIs(t, err, ErrNoSource)
	require.ErrorIs(t, err, ErrInvalidConfig)
	_, err = New(ctx, Config{Outbox: t.TempDir(), PageSize: 5000})
	require.EqualError(t, err, "console: PageSize 5000 out of range; allowed: 1 to 1000 (one ListTasks page)")
}

func TestAnUnreachableEmulatorIsShownAsAnError(t *testing.T) {
	t.Parallel()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	dead := lis.Addr().String()
	lis.Close()
	srv, err := New(context.Background(), Config{Emulator: dead, EmulatorHTTP: dead, Locations: []string{location}, Timeout: 100 * time.Millisecond})
	require.NoError(t, err)
	defer srv.Close()
	b := &bundle{srv: srv, web: httptestServer(t, srv)}
	code, page := b.get(t, "/")
	require.Equal(t, http.StatusBadGateway, code)
	require.Contains(t, page, `<p class="error">ListLocations projects/-:`)
}

func TestListenWarnsOnlyBeyondLoopback(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		addr  string
		allow []string
		warn  bool
	}{{"127.0.0.1:0", nil, false}, {"[::1]:0", nil, false}, {"0.0.0.0:0", []string{"console.internal"}, true}} {
		var logs bytes.Buffer
		lis, err := Listen(tc.addr, tc.allow, slog.New(slog.NewTextHandler(&logs, nil)))
		if err != nil && tc.addr == "[::1]:0" {
			continue // no IPv6 loopback on this machine
		}
		require.NoError(t, err)
		lis.Close()
		if tc.warn {
			require.Equal(t, 1, strings.Count(logs.String(), "\n"), logs.String())
			require.Contains(t, logs.String(), "level=WARN msg=\"console reachable beyond this machine and without login")
		} else {
			require.Empty(t, logs.String(), tc.addr)
		}
	}
}

func TestListenRefusesEveryInterfaceWithoutAllowedHosts(t *testing.T) {
	t.Parallel()
	for _, addr := range []string{"0.0.0.0:0", "[::]:0", ":0"} {
		_, err := Listen(addr, nil, nil)
		require.ErrorIs(t, err, ErrEveryInterface)
		require.EqualError(t, err, "console: an address on every network interface needs the host names the console is reached by: "+addr+
			" listens on every interface; name the hosts the console is reached by (Config.AllowHosts), or bind to 127.0.0.1")
	}
}

func TestSecurityHeaders(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{})
	resp := b.do(t, http.MethodGet, "/", nil)
	require.Equal(t, "DENY", resp.Header.Get("X-Frame-Options"))
	require.Equal(t, "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; form-action 'self'; base-uri 'none'", resp.Header.Get("Content-Security-Policy"))
	resp = b.do(t, http.MethodGet, "/static/live.js", nil)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "text/javascript; charset=utf-8", resp.Header.Get("Content-Type"))
}

func TestSearchKind(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ q, by, value string }{
		{"dispatch:run-1:extract:1", "id", "dispatch:run-1:extract:1"},
		{"timer:retry:run-1:transform:2:1795428120", "id", "timer:retry:run-1:transform:2:1795428120"},
		{"d_mrtn75753c2pmy3uwphdmcephq", "task", "d_mrtn75753c2pmy3uwphdmcephq"},
		{"projects/p/locations/l/queues/q/tasks/t_5uqp6srhb4gkx4gw2hefdq7ypg", "task", "t_5uqp6srhb4gkx4gw2hefdq7ypg"},
		{"run-1", "run", "run-1"},
	} {
		by, value := searchKind(tc.q)
		require.Equal(t, []string{tc.by, tc.value}, []string{by, value}, tc.q)
	}
}

func TestSlowLookupsAreShownLateAndFilledInByTheNextRefresh(t *testing.T) {
	t.Parallel()
	clock := clockwork.NewFakeClockAt(t0.Add(time.Hour))
	b := setup(t, Config{Clock: clock, LookupBudget: 100 * time.Millisecond})
	// Every lookup slot is taken, so the page's lookup of "load" (which
	// has no Idempotency-Key header) cannot start before its budget ends.
	for range lookupWorkers {
		b.srv.lookups <- struct{}{}
	}
	path := "/queue?name=" + url.QueryEscape(workQueue)
	type answer struct {
		code int
		page string
	}
	got := make(chan answer)
	go func() {
		code, page := b.get(t, path)
		got <- answer{code, page}
	}()
	require.NoError(t, clock.BlockUntilContext(context.Background(), 1))
	clock.Advance(100 * time.Millisecond) // the budget, as the page started at the clock's time
	first := <-got
	require.Equal(t, http.StatusOK, first.code)
	load := b.ids["load"].CloudTaskID()
	require.Equal(t, []string{load, "looking up…"}, rows(t, first.page, "tasks")[1][:2])
	for range lookupWorkers {
		<-b.srv.lookups
	}
	b.srv.bg.Wait()
	_, page := b.get(t, path)
	require.Equal(t, []string{load, "dispatch:run-1:load:1"}, rows(t, page, "tasks")[1][:2])
}

func TestOutboxFiguresAreRecountedOnlyWhenStale(t *testing.T) {
	t.Parallel()
	clock := clockwork.NewFakeClockAt(t0.Add(time.Hour))
	b := setup(t, Config{Clock: clock, HealthEvery: time.Minute})
	b.get(t, "/outbox")
	b.srv.health.wait()
	first := b.srv.health.get()
	require.False(t, first.Computing)
	clock.Advance(59 * time.Second)
	require.False(t, b.srv.health.get().Computing, "recounted before HealthEvery")
	clock.Advance(time.Second)
	require.True(t, b.srv.health.get().Computing)
	b.srv.health.wait()
	again := b.srv.health.get()
	require.Equal(t, first.At.Add(time.Minute), again.At)
	require.Len(t, again.Samples, 2)
}

func TestHostileParametersGiveErrorsNotPages(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{})
	for _, tc := range []struct {
		path, want string
		code       int
	}{
		{"/queue?name=" + url.QueryEscape(workQueue) + "&page=" + url.QueryEscape("not a token"), `<p class="error">ListTasks projects/p/locations/l/queues/work:`, http.StatusBadGateway},
		{"/queue?name=" + url.QueryEscape(location+"/queues/missing"), `<p class="error">GetQueue projects/p/locations/l/queues/missing:`, http.StatusBadGateway},
		{"/queue", "queue page needs ?name=projects/P/locations/L/queues/Q\n", http.StatusBadRequest},
		{"/task?name=" + url.QueryEscape(workQueue+"/tasks/gone"), `<p class="error">GetTask projects/p/locations/l/queues/work/tasks/gone:`, http.StatusBadGateway},
		{"/audit?q=" + url.QueryEscape(strings.Repeat("x", 100_000)), "", http.StatusSeeOther},
	} {
		resp := b.do(t, http.MethodGet, tc.path, nil)
		require.Equal(t, tc.code, resp.StatusCode, tc.path[:min(len(tc.path), 80)])
		if tc.want != "" {
			_, page := b.get(t, tc.path)
			require.Contains(t, page, tc.want)
		}
	}
}

// TestWithoutTheInspectionEndpointQueuesAreCountedFromOnePage: against an
// endpoint that does not take the wildcard project (here the emulator
// told to refuse ListLocations as an older one, or another service, would),
// the console lists the locations it is given and counts tasks from one
// page.
func TestWithoutTheInspectionEndpointQueuesAreCountedFromOnePage(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{})
	for _, refusal := range []codes.Code{codes.Unimplemented, codes.InvalidArgument, codes.NotFound, codes.PermissionDenied} {
		require.NoError(t, b.emu.SetFaults(emulator.Faults{Rules: []emulator.FaultRule{{Methods: []string{"ListLocations"}, Rate: 1, Code: refusal}}}))
		srv, err := New(context.Background(), Config{Emulator: b.emu.Addr(), Locations: []string{location}, Clock: clockwork.NewFakeClockAt(t0.Add(time.Hour))})
		require.NoError(t, err)
		b.web = httptestServer(t, srv)
		code, page := b.get(t, "/")
		require.Equal(t, http.StatusOK, code, refusal)
		require.Contains(t, page, "Task counts come from the first ListTasks page")
		require.Equal(t, [][]string{
			{"idle", "PAUSED", "500", "100", "1000", "100", "100ms – 1h0m0s", "16", "0", "0", "0", "0", "—", "—"},
			{"work", "RUNNING", "5", "5", "10", "3", "1s – 10s", "2", "2", "2", "0", "0", "—", "—"}, // both due by the console's clock
		}, rows(t, page, "queues"), refusal)
		_, page = b.get(t, "/deliveries")
		require.Contains(t, page, "The deliveries come from the emulator's HTTP server: start the console with <code>--emulator-http</code>.")
		require.NoError(t, srv.Close())
	}
}
