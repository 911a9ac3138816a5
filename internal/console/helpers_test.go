package console

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/ctdispatch/ctdispatch/outbox/parquetbox"

	cloudtasks "cloud.google.com/go/cloudtasks/apiv2"
	"cloud.google.com/go/cloudtasks/apiv2/cloudtaskspb"
	"github.com/google/uuid"
	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"
	"golang.org/x/net/html"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/ctdispatch/ctdispatch/cloudtasks/emulator"
	"github.com/ctdispatch/ctdispatch/naming"
	"github.com/ctdispatch/ctdispatch/outbox"
)

// The fixture's names and times.
const (
	location  = "projects/p/locations/l"
	workQueue = location + "/queues/work"
	idleQueue = location + "/queues/idle"
	hostile   = `<script>alert(1)</script>`
)

var (
	t0    = time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	procA = uuid.MustParse("aaaaaaaa-0000-4000-8000-000000000001")
	procB = uuid.MustParse("bbbbbbbb-0000-4000-8000-000000000002")
)

// bundle is one console over a running emulator and a filled outbox.
type bundle struct {
	emu    *emulator.Server
	client *cloudtasks.Client
	clock  *clockwork.FakeClock
	dir    string
	srv    *Server
	web    *httptest.Server
	ids    map[string]naming.ID // by task key
	// workerURL is the base URL of the worker the tasks target.
	workerURL string
}

// htmlNode is a parsed HTML node.
type htmlNode = html.Node

func mustParse(t testing.TB, page string) *html.Node {
	t.Helper()
	doc, err := html.Parse(strings.NewReader(page))
	require.NoError(t, err)
	return doc
}

func httptestServer(t testing.TB, h http.Handler) *httptest.Server {
	web := httptest.NewServer(h)
	t.Cleanup(web.Close)
	return web
}

// do sends a request without following redirects.
func (b *bundle) do(t testing.TB, method, path string, body io.Reader) *http.Response {
	t.Helper()
	req, err := http.NewRequest(method, b.web.URL+path, body)
	require.NoError(t, err)
	c := *b.web.Client()
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	resp, err := c.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	return resp
}

// setup starts an emulator on a fake clock with two queues, a worker that
// answers 200 (or 503 under /fail), three tasks of run-1 (one delivered,
// one failed once, one scheduled for later) and an outbox that records
// them with a hand-over and a stale pending record; then a console over
// both, configured by cfg.
func setup(t testing.TB, cfg Config) *bundle {
	t.Helper()
	ctx := context.Background()
	b := &bundle{clock: clockwork.NewFakeClockAt(t0), dir: t.TempDir(), ids: map[string]naming.ID{}}
	worker := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/fail") {
			http.Error(w, "try later", http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(worker.Close)
	b.workerURL = worker.URL
	var err error
	b.emu, err = emulator.New(emulator.Config{
		Addr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", Clock: b.clock, ManualDelivery: true,
		Queues: []emulator.QueueConfig{
			{Name: workQueue, MaxDispatchesPerSecond: 5, MaxConcurrentDispatches: 10, MaxAttempts: 3, MinBackoff: time.Second, MaxBackoff: 10 * time.Second, MaxDoublings: 2},
			{Name: idleQueue, Paused: true},
		},
	})
	require.NoError(t, err)
	t.Cleanup(func() { b.emu.Close() })
	b.client, err = b.emu.NewClient(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { b.client.Close() })

	for _, key := range []string{"extract", "transform", "load"} {
		id, err := naming.NewDispatch("run-1", key, naming.Attempt(1))
		require.NoError(t, err)
		b.ids[key] = id
	}
	retry, err := naming.NewRetryTimer("run-1", "transform", naming.Attempt(2), t0.Add(2*time.Minute))
	require.NoError(t, err)
	b.ids["retry"] = retry
	// One delivery at a time, so the delivery log's order is fixed.
	for _, key := range []string{"extract", "transform"} {
		b.createTask(t, key, worker.URL+map[string]string{"extract": "/ok", "transform": "/fail"}[key], t0)
		_, err = b.emu.RunDue(ctx)
		require.NoError(t, err)
	}
	b.createTask(t, "load", worker.URL+"/ok", t0.Add(time.Hour))

	// Processor A records everything and stops with "load" pending and
	// "transform" pending; B later finishes "transform" (a hand-over).
	sec := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Second) }
	b.appendAll(t, procA, []outbox.Record{
		b.record("extract", outbox.StatusPending, sec(0), sec(0), ""),
		b.record("extract", outbox.StatusCreated, sec(0), sec(1), ""),
		b.record("transform", outbox.StatusPending, sec(0), sec(2), ""),
		b.record("load", outbox.StatusPending, sec(0), sec(3), ""),
		b.record("retry", outbox.StatusCreated, sec(0), sec(4), ""),
	})
	b.appendAll(t, procB, []outbox.Record{
		b.record("transform", outbox.StatusAlreadyExisted, sec(0), sec(30), hostile),
	})

	// The emulator's address alone: the console finds its queues and its
	// HTTP server through ListLocations.
	cfg.Emulator, cfg.Outbox = b.emu.Addr(), b.dir
	if cfg.Clock == nil {
		cfg.Clock = clockwork.NewFakeClockAt(t0.Add(time.Hour))
	}
	b.srv, err = New(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { b.srv.Close() })
	b.web = httptest.NewServer(b.srv)
	t.Cleanup(b.web.Close)
	return b
}

// createTask creates the task of an ID, with the dispatcher's
// Idempotency-Key header except for "load", which the console must find
// through the outbox.
func (b *bundle) createTask(t testing.TB, key, target string, at time.Time) {
	t.Helper()
	headers := map[string]string{"Idempotency-Key": b.ids[key].String(), "X-Note": hostile}
	if key == "load" {
		delete(headers, "Idempotency-Key")
	}
	_, err := b.client.CreateTask(context.Background(), &cloudtaskspb.CreateTaskRequest{
		Parent: workQueue,
		Task: &cloudtaskspb.Task{
			Name:         workQueue + "/tasks/" + b.ids[key].CloudTaskID(),
			ScheduleTime: timestamppb.New(at),
			MessageType: &cloudtaskspb.Task_HttpRequest{HttpRequest: &cloudtaskspb.HttpRequest{
				Url: target, HttpMethod: cloudtaskspb.HttpMethod_POST, Body: []byte(`{"step":"` + key + `"}`),
				Headers: headers,
				AuthorizationHeader: &cloudtaskspb.HttpRequest_OidcToken{OidcToken: &cloudtaskspb.OidcToken{
					ServiceAccountEmail: "worker@p.iam.gserviceaccount.com",
				}},
			}},
		},
	})
	require.NoError(t, err)
}

func (b *bundle) record(key string, st outbox.Status, created, updated time.Time, errorCode string) outbox.Record {
	id := b.ids[key]
	r := outbox.Record{
		Table: outbox.TableDispatch, ID: id.String(), CloudTaskID: id.CloudTaskID(), Queue: workQueue,
		RunID: id.RunID(), TaskKey: id.TaskKey(), Attempt: id.Attempt(), Status: st, ErrorCode: errorCode,
		PayloadSHA256: naming.PayloadFingerprint([]byte(`{"step":"` + key + `"}`)),
		CreatedAt:     created, UpdatedAt: updated,
	}
	if st != outbox.StatusPending {
		r.CreateCalls = 1
	}
	if key == "retry" {
		r.Table, r.Kind, r.DueAt = outbox.TableTimers, "retry", id.Time()
	}
	return r
}

func (b *bundle) appendAll(t testing.TB, proc uuid.UUID, recs []outbox.Record) {
	t.Helper()
	ctx := context.Background()
	box, err := parquetbox.Open(ctx, parquetbox.Config{Root: b.dir, ProcessorUUID: proc, Clock: clockwork.NewFakeClockAt(t0)})
	require.NoError(t, err)
	for _, r := range recs {
		require.NoError(t, outbox.AppendAndWait(ctx, box, r))
	}
	require.NoError(t, box.Close())
}

// get fetches a console path and returns the status and body.
func (b *bundle) get(t testing.TB, path string) (int, string) {
	t.Helper()
	resp, err := b.web.Client().Get(b.web.URL + path)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(body)
}

// post submits a form to a console path without following redirects.
func (b *bundle) post(t testing.TB, path string, form url.Values) *http.Response {
	t.Helper()
	c := *b.web.Client()
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	resp, err := c.PostForm(b.web.URL+path, form)
	require.NoError(t, err)
	resp.Body.Close()
	return resp
}

// rows returns the text of every body row of the table with id, one
// string per cell with runs of white space folded.
func rows(t testing.TB, page, id string) [][]string {
	t.Helper()
	table := find(mustParse(t, page), func(n *html.Node) bool { return n.Data == "table" && attr(n, "id") == id })
	require.NotNil(t, table, "no table #%s in the page", id)
	return tableRows(table)
}

// tableRows returns the text of a table's body rows, cell by cell.
func tableRows(table *html.Node) [][]string {
	var out [][]string
	walk(table, func(n *html.Node) {
		if n.Type != html.ElementNode || n.Data != "tr" || n.Parent.Data != "tbody" {
			return
		}
		var row []string
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			if c.Type == html.ElementNode && (c.Data == "td" || c.Data == "th") {
				row = append(row, strings.Join(strings.Fields(text(c)), " "))
			}
		}
		out = append(out, row)
	})
	return out
}

func find(n *html.Node, match func(*html.Node) bool) *html.Node {
	var found *html.Node
	walk(n, func(c *html.Node) {
		if found == nil && c.Type == html.ElementNode && match(c) {
			found = c
		}
	})
	return found
}

func walk(n *html.Node, visit func(*html.Node)) {
	visit(n)
	for c := n.FirstChild; c != nil; c = c.NextSibling {
		walk(c, visit)
	}
}

func attr(n *html.Node, key string) string {
	for _, a := range n.Attr {
		if a.Key == key {
			return a.Val
		}
	}
	return ""
}

func text(n *html.Node) string {
	var sb strings.Builder
	walk(n, func(c *html.Node) {
		if c.Type == html.TextNode {
			sb.WriteString(c.Data)
		}
	})
	return sb.String()
}
