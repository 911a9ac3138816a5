package console

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"net/url"
	"path"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/ctdispatch/ctdispatch/outbox/parquetbox"

	"cloud.google.com/go/cloudtasks/apiv2/cloudtaskspb"
	"google.golang.org/api/iterator"
	"google.golang.org/grpc/codes"

	"github.com/ctdispatch/ctdispatch/cloudtasks/emulator"
	"github.com/ctdispatch/ctdispatch/cloudtasks/emulator/emuproto"
	"github.com/ctdispatch/ctdispatch/naming"
	"github.com/ctdispatch/ctdispatch/outbox"
)

// layout is the frame every page is rendered into.
type layout struct {
	Title   string
	Nav     string
	Live    bool
	Refresh int
	Sources sources
	Actions bool
	CSRF    string
	Here    string // this page's path and query, where an action returns
	Note    string // the result of an action, shown once
	Err     string // a source that failed; the rest of the page still shows
	Body    any
}

type sources struct {
	Emulator, EmulatorHTTP, Outbox, WorkerOutbox string
}

// pageError is an error with the HTTP status it deserves.
type pageError struct {
	code int
	msg  string
}

func (e *pageError) Error() string { return e.msg }

func badRequest(format string, args ...any) error {
	return &pageError{code: http.StatusBadRequest, msg: fmt.Sprintf(format, args...)}
}

// builder fills a page's body. A *pageError ends the request with its
// status; any other error is shown above whatever body was built.
type builder func(r *http.Request, l *layout) error

func (s *Server) page(name string, build builder) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		l := &layout{
			Nav: name, Refresh: int(s.cfg.Refresh / time.Second), Actions: s.cfg.AllowActions, CSRF: s.csrf,
			Here: r.URL.RequestURI(), Note: r.URL.Query().Get("note"),
			Sources: sources{Emulator: s.cfg.Emulator, EmulatorHTTP: s.cfg.EmulatorHTTP, Outbox: s.cfg.Outbox, WorkerOutbox: s.cfg.WorkerOutbox},
		}
		ctx, cancel := context.WithTimeout(r.Context(), s.cfg.Timeout)
		defer cancel()
		status := http.StatusOK
		if err := build(r.WithContext(ctx), l); err != nil {
			var pe *pageError
			if errors.As(err, &pe) {
				http.Error(w, pe.msg, pe.code)
				return
			}
			var rd *redirect
			if errors.As(err, &rd) {
				http.Redirect(w, r, rd.to, http.StatusSeeOther)
				return
			}
			s.cfg.Logger.Debug("console page", "path", r.URL.Path, "err", err) // shown on the page; live refresh would repeat it
			l.Err, status = err.Error(), http.StatusBadGateway
		}
		var buf bytes.Buffer
		if err := s.pages[name].ExecuteTemplate(&buf, "layout", l); err != nil {
			s.cfg.Logger.Error("console template", "page", name, "err", err)
			http.Error(w, "rendering failed: "+err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.WriteHeader(status)
		_, _ = buf.WriteTo(w)
	}
}

var funcs = template.FuncMap{
	"short": shortName,
	"time":  fmtTime,
	"dur":   fmtDuration,
	"bytes": fmtBytes,
	"query": url.QueryEscape,
	"dict":  dict,
}

// dict builds the argument of a sub-template from key, value pairs.
func dict(kv ...any) (map[string]any, error) {
	if len(kv)%2 != 0 {
		return nil, fmt.Errorf("dict needs key, value pairs; got %d arguments", len(kv))
	}
	m := make(map[string]any, len(kv)/2)
	for i := 0; i < len(kv); i += 2 {
		k, ok := kv[i].(string)
		if !ok {
			return nil, fmt.Errorf("dict key %v is not a string", kv[i])
		}
		m[k] = kv[i+1]
	}
	return m, nil
}

func parsePages() (map[string]*template.Template, error) {
	names, err := fs.Glob(templateFS, "templates/*.html")
	if err != nil {
		return nil, err
	}
	pages := map[string]*template.Template{}
	for _, n := range names {
		base := strings.TrimSuffix(path.Base(n), ".html")
		if base == "layout" {
			continue
		}
		t, err := template.New(base).Funcs(funcs).ParseFS(templateFS, "templates/layout.html", n)
		if err != nil {
			return nil, fmt.Errorf("console: template %s: %w", n, err)
		}
		pages[base] = t
	}
	return pages, nil
}

// shortName is the last element of a resource name.
func shortName(name string) string { return path.Base(name) }

func fmtTime(t time.Time) string {
	if t.IsZero() {
		return "—"
	}
	return t.UTC().Format("2006-01-02 15:04:05.000")
}

func fmtDuration(d time.Duration) string {
	if d > time.Millisecond {
		d = d.Round(time.Millisecond)
	}
	return d.String()
}

func fmtBytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

func (s *Server) needEmulator() error {
	if s.client == nil {
		return &pageError{code: http.StatusNotFound, msg: "no emulator configured: start the console with --emulator ADDR"}
	}
	return nil
}

// emulatorName returns the resource name a page of the emulator is about
// (its ?name=), or why the page cannot be shown.
func (s *Server) emulatorName(r *http.Request, page, form string) (string, error) {
	if err := s.needEmulator(); err != nil {
		return "", err
	}
	name := r.URL.Query().Get("name")
	if name == "" {
		return "", badRequest("%s page needs ?name=%s", page, form)
	}
	return name, nil
}

func (s *Server) needOutbox() error {
	if s.box == nil {
		return &pageError{code: http.StatusNotFound, msg: "no outbox configured: start the console with --outbox DIR"}
	}
	return nil
}

// needRecords is needOutbox for the pages that a worker's outbox alone
// can fill (an ID's and a run's).
func (s *Server) needRecords() error {
	if s.box == nil && s.workerBox == nil {
		return &pageError{code: http.StatusNotFound, msg: "no outbox configured: start the console with --outbox DIR or --worker-outbox DIR"}
	}
	return nil
}

// workerDelivery is one delivery as the ID and run pages show it: its latest
// record (the outcome, or started when its worker never answered).
type workerDelivery struct {
	ID, Internal, Processor    string
	TraceID, TraceURL          string
	Status                     outbox.Status
	HTTPStatus                 int32
	RetryCount, ExecutionCount int32
	Latency                    time.Duration
	Arrived                    time.Time
}

// deliveries looks up in the worker's outbox the deliveries of what q
// selects; nil without a worker's outbox.
func (s *Server) deliveries(ctx context.Context, q outbox.Query) ([]workerDelivery, error) {
	if s.workerBox == nil {
		return nil, nil
	}
	q.History = false
	recs, err := outbox.LookupDeliveries(ctx, s.workerBox, q)
	if err != nil {
		return nil, fmt.Errorf("worker outbox lookup: %w", err)
	}
	rows := make([]workerDelivery, len(recs))
	for i, r := range recs {
		internal, _, _ := outbox.SplitDeliveryID(r.ID)
		d := r.Delivery
		rows[i] = workerDelivery{ID: r.ID, Internal: internal, Processor: r.ProcessorUUID, Status: r.Status, HTTPStatus: d.HTTPStatus,
			TraceID: r.TraceID, TraceURL: s.cfg.traceURL(r.TraceID, r.Queue),
			RetryCount: d.RetryCount, ExecutionCount: d.ExecutionCount, Latency: d.Latency, Arrived: r.CreatedAt}
	}
	return rows, nil
}

// dispatchRecords drops what a worker's outbox given as the dispatchers'
// would add: its deliveries are shown from WorkerOutbox only.
func dispatchRecords(recs []outbox.Record) []outbox.Record {
	return slices.DeleteFunc(recs, func(r outbox.Record) bool { return r.Table == outbox.TableDeliveries })
}

// ---- Queues ----

type queuesBody struct {
	Queues   []queueRow
	Inspects bool
	Now      time.Time
}

type queueRow struct {
	Name, State                      string
	Paused                           bool
	Rate                             float64
	Burst, Concurrent, MaxAttempts   int32
	MinBackoff, MaxBackoff, MaxRetry string
	MaxDoublings                     int32
	Counts                           taskCounts
	PerSecond                        string
	Codes                            []codeCount
}

type taskCounts struct {
	Tasks, Waiting, Scheduled, Running int
	// More says the counts cover only the first page of tasks.
	More bool
}

type codeCount struct {
	Code  string
	Class string
	N     int
}

// recentCodes is how many of a queue's latest deliveries the queue page
// sums up by status code.
const recentCodes = 100

func (s *Server) queuesPage(r *http.Request, l *layout) error {
	l.Title, l.Live = "Queues", true
	if err := s.needEmulator(); err != nil {
		if s.box != nil {
			l.Body = queuesBody{}
			l.Err = "no emulator configured: only the outbox pages are available"
			return nil
		}
		return err
	}
	ctx := r.Context()
	found, err := s.discover(ctx)
	if err != nil {
		return err
	}
	ins, insErr := s.inspect(ctx, "", "", emulator.DefaultDeliveryLogLimit)
	queues, err := s.listQueues(ctx, found, ins)
	if err != nil {
		return err
	}
	body := queuesBody{Inspects: ins != nil}
	loads := map[string]emuproto.QueueLoad{}
	var byQueue map[string][]emuproto.DeliveryRecord
	if ins != nil {
		body.Now = ins.Now
		for _, q := range ins.Queues {
			loads[q.Name] = q
		}
		byQueue = map[string][]emuproto.DeliveryRecord{}
		for _, d := range ins.Deliveries {
			byQueue[d.Queue] = append(byQueue[d.Queue], d)
		}
	}
	for _, q := range queues {
		row := queueRow{
			Name: q.Name, State: q.State.String(), Paused: q.State == cloudtaskspb.Queue_PAUSED,
			Rate: q.GetRateLimits().GetMaxDispatchesPerSecond(), Burst: q.GetRateLimits().GetMaxBurstSize(),
			Concurrent: q.GetRateLimits().GetMaxConcurrentDispatches(), MaxAttempts: q.GetRetryConfig().GetMaxAttempts(),
			MinBackoff: fmtDuration(q.GetRetryConfig().GetMinBackoff().AsDuration()), MaxBackoff: fmtDuration(q.GetRetryConfig().GetMaxBackoff().AsDuration()),
			MaxRetry: fmtDuration(q.GetRetryConfig().GetMaxRetryDuration().AsDuration()), MaxDoublings: q.GetRetryConfig().GetMaxDoublings(),
		}
		if load, ok := loads[q.Name]; ok {
			row.Counts = taskCounts{Tasks: load.Tasks, Waiting: load.Waiting, Scheduled: load.Scheduled, Running: load.Running}
			row.PerSecond, row.Codes = deliveryRate(byQueue[q.Name], ins.Now)
		} else if row.Counts, err = s.countFirstPage(ctx, q.Name); err != nil {
			return err
		}
		body.Queues = append(body.Queues, row)
	}
	l.Body = body
	return insErr
}

// deliveryRate sums up a queue's deliveries (newest first): attempts per
// second over the last minute of the emulator's clock, and the status
// codes of the latest recentCodes attempts.
func deliveryRate(ds []emuproto.DeliveryRecord, now time.Time) (string, []codeCount) {
	n := 0
	for _, d := range ds {
		if now.Sub(d.DispatchTime) > time.Minute {
			break
		}
		n++
	}
	counts := map[int]int{}
	for _, d := range ds[:min(len(ds), recentCodes)] {
		counts[d.StatusCode]++
	}
	out := make([]codeCount, 0, len(counts))
	for c, k := range counts {
		out = append(out, codeCount{Code: statusText(c), Class: statusClass(c), N: k})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Code < out[j].Code })
	return fmt.Sprintf("%.2f", float64(n)/60), out
}

func statusText(code int) string {
	if code == 0 {
		return "no answer"
	}
	return fmt.Sprint(code)
}

func statusClass(code int) string {
	switch {
	case code >= 200 && code < 300:
		return "ok"
	case code >= 400 && code < 500:
		return "warn"
	}
	return "bad"
}

// countFirstPage counts a queue's tasks by state from one ListTasks page,
// for an emulator whose inspection endpoint is not known: the API has no
// count, and reading every page of a large queue would not stay fast.
func (s *Server) countFirstPage(ctx context.Context, queue string) (taskCounts, error) {
	it := s.client.ListTasks(ctx, &cloudtaskspb.ListTasksRequest{Parent: queue})
	var tasks []*cloudtaskspb.Task
	next, err := iterator.NewPager(it, 1000, "").NextPage(&tasks)
	if err != nil {
		return taskCounts{}, fmt.Errorf("ListTasks %s: %w", queue, err)
	}
	now := s.cfg.Clock.Now()
	c := taskCounts{Tasks: len(tasks), More: next != ""}
	for _, t := range tasks {
		switch {
		case t.GetLastAttempt().GetDispatchTime() != nil && t.GetLastAttempt().GetResponseTime() == nil:
			c.Running++
		case t.GetScheduleTime().AsTime().After(now):
			c.Scheduled++
		default:
			c.Waiting++
		}
	}
	return c, nil
}

// ---- Tasks of a queue ----

type queueBody struct {
	Queue     queueRow
	Tasks     []taskRow
	Page      string
	Next      string
	FirstPage bool
	HasOutbox bool
}

type taskRow struct {
	Name, ID, InternalID string
	// Late marks an ID whose outbox lookup did not finish within the
	// page's budget.
	Late                   bool
	Schedule               time.Time
	Dispatches, Responses  int32
	LastCode               string
	LastMessage, LastClass string
}

func (s *Server) queuePage(r *http.Request, l *layout) error {
	name, err := s.emulatorName(r, "queue", "projects/P/locations/L/queues/Q")
	if err != nil {
		return err
	}
	l.Title, l.Live, l.Nav = "Queue "+shortName(name), true, "queues"
	ctx, started := r.Context(), s.cfg.Clock.Now()
	q, err := s.client.GetQueue(ctx, &cloudtaskspb.GetQueueRequest{Name: name})
	if err != nil {
		return fmt.Errorf("GetQueue %s: %w", name, err)
	}
	token := r.URL.Query().Get("page")
	tasks, next, err := s.listTaskPage(ctx, name, token)
	if err != nil {
		return err
	}
	ids, late, idErr := s.internalIDs(ctx, tasks, started)
	body := queueBody{
		Queue: queueRow{Name: q.Name, State: q.State.String(), Paused: q.State == cloudtaskspb.Queue_PAUSED},
		Page:  token, Next: next, FirstPage: token == "", HasOutbox: s.box != nil,
	}
	for _, t := range tasks {
		cid := shortName(t.Name)
		row := taskRow{
			Name: t.Name, ID: cid, InternalID: ids[cid], Late: late[cid], Schedule: t.GetScheduleTime().AsTime(),
			Dispatches: t.DispatchCount, Responses: t.ResponseCount,
		}
		if st := t.GetLastAttempt().GetResponseStatus(); st != nil {
			row.LastCode, row.LastMessage = codes.Code(st.Code).String(), st.Message
			row.LastClass = "bad"
			if st.Code == 0 {
				row.LastClass = "ok"
			}
		}
		body.Tasks = append(body.Tasks, row)
	}
	l.Body = body
	return idErr
}

// ---- One task ----

type taskBody struct {
	Task       *cloudtaskspb.Task
	ID         string
	Queue      string
	Method     string
	URL        string
	Headers    []header
	OIDC       string
	BodyBytes  int
	InternalID string
	Deliveries []emuproto.DeliveryRecord
	Inspects   bool
}

type header struct{ Key, Value string }

func (s *Server) taskPage(r *http.Request, l *layout) error {
	name, err := s.emulatorName(r, "task", "projects/P/locations/L/queues/Q/tasks/T")
	if err != nil {
		return err
	}
	l.Title, l.Nav = "Task "+shortName(name), "queues"
	ctx := r.Context()
	body := taskBody{ID: shortName(name)}
	if i := strings.Index(name, "/tasks/"); i > 0 {
		body.Queue = name[:i]
	}
	ins, insErr := s.inspect(ctx, "", name, 100)
	if ins != nil {
		body.Inspects, body.Deliveries = true, ins.Deliveries
	}
	l.Body = &body
	t, err := s.client.GetTask(ctx, &cloudtaskspb.GetTaskRequest{Name: name, ResponseView: cloudtaskspb.Task_FULL})
	if err != nil {
		// A task that ran is gone from Cloud Tasks; its deliveries and its
		// outbox record still tell its story.
		if ids, _, idErr := s.internalIDs(ctx, []*cloudtaskspb.Task{{Name: name}}, s.cfg.Clock.Now()); idErr == nil {
			body.InternalID = ids[body.ID]
		}
		return fmt.Errorf("GetTask %s: %w", name, err)
	}
	body.Task = t
	ids, _, err := s.internalIDs(ctx, []*cloudtaskspb.Task{t}, s.cfg.Clock.Now())
	if err != nil {
		return err
	}
	body.InternalID = ids[body.ID]
	if h := t.GetHttpRequest(); h != nil {
		body.Method, body.URL, body.BodyBytes = h.HttpMethod.String(), h.Url, len(h.Body)
		body.OIDC = h.GetOidcToken().GetServiceAccountEmail()
		hdr := http.Header{}
		for k, v := range h.Headers {
			hdr.Set(k, v)
		}
		body.Headers = sortedHeaders(redactHeader(hdr), nil)
	}
	return insErr
}

// sortedHeaders lists h by name; with keep, only the names keep accepts.
func sortedHeaders(h http.Header, keep func(string) bool) []header {
	var out []header
	for k, vs := range h {
		if keep != nil && !keep(k) {
			continue
		}
		for _, v := range vs {
			out = append(out, header{Key: k, Value: v})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out
}

// ---- Deliveries ----

type deliveriesBody struct {
	Queue    string
	Rows     []deliveryRow
	Inspects bool
}

type deliveryRow struct {
	emuproto.DeliveryRecord
	Shown []header
	Class string
}

// deliveriesShown is how many deliveries the deliveries page lists.
const deliveriesShown = 200

// shownHeader keeps the headers that say which task and attempt a request
// was; the Authorization header is listed, its value is not.
func shownHeader(k string) bool {
	k = http.CanonicalHeaderKey(k)
	return strings.HasPrefix(k, "X-Cloudtasks-") || k == "Idempotency-Key" || k == "Authorization"
}

func (s *Server) deliveriesPage(r *http.Request, l *layout) error {
	if err := s.needEmulator(); err != nil {
		return err
	}
	l.Title, l.Live = "Deliveries", true
	queue := r.URL.Query().Get("queue")
	body := deliveriesBody{Queue: queue}
	l.Body = &body
	ins, err := s.inspect(r.Context(), queue, "", deliveriesShown)
	if ins == nil {
		return err
	}
	body.Inspects = true
	for _, d := range ins.Deliveries {
		body.Rows = append(body.Rows, deliveryRow{DeliveryRecord: d, Shown: sortedHeaders(d.Header, shownHeader), Class: statusClass(d.StatusCode)})
	}
	return err
}

// ---- Audit trail of an ID ----

type auditBody struct {
	Q, By      string
	Trails     []trail
	Tried      bool
	HasWorker  bool
	Deliveries []workerDelivery
}

type trail struct {
	ID, CloudTaskID, TaskName, Queue, RunID, TaskKey, Attempt, Kind, Payload string
	Table                                                                    outbox.Table
	Status                                                                   outbox.Status
	Calls                                                                    int32
	DueAt                                                                    time.Time
	States                                                                   []state
	HandOvers                                                                int
}

type state struct {
	At                   time.Time
	Status               outbox.Status
	Processor, ErrorCode string
	TraceID, TraceURL    string
	Calls                int32
	HandOver             bool
}

// searchKind guesses what a search string is: an internal ID (it has the
// kind prefix), a Cloud Tasks ID or task name, or else a run ID.
func searchKind(q string) (by, value string) {
	switch {
	case strings.HasPrefix(q, "dispatch:") || strings.HasPrefix(q, "timer:"):
		return "id", q
	case strings.Contains(q, "/tasks/"):
		return "task", shortName(q)
	case naming.IsCloudTaskID(q):
		return "task", q
	}
	return "run", q
}

func (s *Server) auditPage(r *http.Request, l *layout) error {
	if err := s.needRecords(); err != nil {
		return err
	}
	l.Title = "Audit trail"
	q := strings.TrimSpace(r.URL.Query().Get("q"))
	by, value := searchKind(q)
	if v := r.URL.Query().Get("by"); v == "id" || v == "task" || v == "run" {
		by, value = v, q
	}
	body := auditBody{Q: q, By: by, HasWorker: s.workerBox != nil}
	l.Body = &body
	if q == "" {
		return nil
	}
	if by == "run" {
		return &redirect{to: "/run?id=" + url.QueryEscape(value)}
	}
	body.Tried = true
	query := outbox.Query{ID: value, History: true}
	if by == "task" {
		query = outbox.Query{CloudTaskID: value, History: true}
	}
	if s.box != nil {
		recs, err := s.box.Lookup(r.Context(), query)
		if err != nil {
			return fmt.Errorf("outbox lookup: %w", err)
		}
		body.Trails = trails(dispatchRecords(recs), &s.cfg)
	}
	var err error
	body.Deliveries, err = s.deliveries(r.Context(), query)
	return err
}

// trails groups records (sorted by table, ID and time) into one trail per
// ID, marking each state written by another processor than the one before.
func trails(recs []outbox.Record, cfg *Config) []trail {
	var out []trail
	for _, r := range recs {
		if len(out) == 0 || out[len(out)-1].ID != r.ID || out[len(out)-1].Table != r.Table {
			out = append(out, trail{ID: r.ID, CloudTaskID: r.CloudTaskID, Table: r.Table, Queue: r.Queue, RunID: r.RunID,
				TaskKey: r.TaskKey, Attempt: r.Attempt, Kind: r.Kind})
		}
		t := &out[len(out)-1]
		st := state{At: r.UpdatedAt, Status: r.Status, Processor: r.ProcessorUUID, ErrorCode: r.ErrorCode, Calls: r.CreateCalls,
			TraceID: r.TraceID, TraceURL: cfg.traceURL(r.TraceID, r.Queue)}
		if n := len(t.States); n > 0 && t.States[n-1].Processor != r.ProcessorUUID {
			st.HandOver = true
			t.HandOvers++
		}
		t.States = append(t.States, st)
		t.TaskName, t.Status, t.Calls, t.Payload, t.DueAt = r.TaskName, r.Status, r.CreateCalls, r.PayloadSHA256, r.DueAt
	}
	return out
}

// redirect is a builder's way to send the browser elsewhere.
type redirect struct{ to string }

func (r *redirect) Error() string { return "redirect to " + r.to }

// ---- A run ----

type runBody struct {
	RunID      string
	Records    []outbox.Record
	Counts     []statusCount
	Timeline   *timeline
	HasWorker  bool
	Deliveries []workerDelivery
}

type statusCount struct {
	Status outbox.Status
	N      int
}

func (s *Server) runPage(r *http.Request, l *layout) error {
	if err := s.needRecords(); err != nil {
		return err
	}
	id := r.URL.Query().Get("id")
	if id == "" {
		return badRequest("run page needs ?id=RUN")
	}
	l.Title, l.Nav = "Run "+id, "audit"
	body := runBody{RunID: id, HasWorker: s.workerBox != nil}
	l.Body = &body
	var err error
	if body.Deliveries, err = s.deliveries(r.Context(), outbox.Query{RunID: id}); err != nil {
		return err
	}
	var recs []outbox.Record
	if s.box != nil {
		if recs, err = s.box.Lookup(r.Context(), outbox.Query{RunID: id}); err != nil {
			return fmt.Errorf("outbox lookup of run %s: %w", id, err)
		}
	}
	recs = dispatchRecords(recs)
	body.Records = recs
	counts := map[outbox.Status]int{}
	for _, rec := range recs {
		counts[rec.Status]++
	}
	for st, n := range counts {
		body.Counts = append(body.Counts, statusCount{Status: st, N: n})
	}
	sort.Slice(body.Counts, func(i, j int) bool { return body.Counts[i].Status < body.Counts[j].Status })
	if len(recs) > 0 {
		body.Timeline = newTimeline(recs)
	}
	return nil
}

// ---- Outbox health ----

type outboxBody struct {
	Root     string
	Tables   []tableFiles
	Damaged  []*parquetbox.FileError
	Health   healthSnapshot
	Stale    time.Duration
	Outcomes *outcomeChart
}

func (s *Server) outboxPage(r *http.Request, l *layout) error {
	if err := s.needOutbox(); err != nil {
		return err
	}
	l.Title, l.Live = "Outbox", true
	tables, err := s.box.files()
	h := s.health.get()
	l.Body = &outboxBody{
		Root: s.cfg.Outbox, Tables: tables, Damaged: skippedFiles(s.box.damaged(), h.Stats), Health: h, Stale: s.cfg.StaleAfter,
		Outcomes: newOutcomeChart(h.Samples),
	}
	return err
}

// skippedFiles merges the files the outbox skipped while serving reads with
// those the last health pass skipped (a file is found damaged only when
// something reads it), once each, by path.
func skippedFiles(damaged []*parquetbox.FileError, stats []parquetbox.TableStats) []*parquetbox.FileError {
	seen := map[string]bool{}
	var out []*parquetbox.FileError
	add := func(fes []*parquetbox.FileError) {
		for _, fe := range fes {
			if !seen[fe.Path] {
				seen[fe.Path] = true
				out = append(out, fe)
			}
		}
	}
	add(damaged)
	for _, t := range stats {
		add(t.Skipped)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out
}

// ---- Actions ----

func (s *Server) action(w http.ResponseWriter, r *http.Request) {
	if !s.validToken(r.PostFormValue("csrf")) {
		http.Error(w, "missing or wrong CSRF token: reload the page and try again", http.StatusForbidden)
		return
	}
	back := r.PostFormValue("back")
	if !strings.HasPrefix(back, "/") || strings.HasPrefix(back, "//") || strings.HasPrefix(back, "/\\") {
		back = "/"
	}
	note, err := s.do(r.Context(), r.PathValue("action"), r.PostFormValue("name"))
	if err != nil {
		var pe *pageError
		if errors.As(err, &pe) {
			http.Error(w, pe.msg, pe.code)
			return
		}
		note = "failed: " + err.Error()
	}
	http.Redirect(w, r, withNote(back, note), http.StatusSeeOther)
}

func withNote(back, note string) string {
	u, err := url.Parse(back)
	if err != nil {
		return "/"
	}
	q := u.Query()
	q.Set("note", note)
	u.RawQuery = q.Encode()
	return u.String()
}

func (s *Server) do(ctx context.Context, action, name string) (string, error) {
	if action == "recover" {
		return s.recoverStale(ctx)
	}
	if err := s.needEmulator(); err != nil {
		return "", err
	}
	if name == "" {
		return "", badRequest("action %s needs a name", action)
	}
	var err error
	switch action {
	case "pause":
		_, err = s.client.PauseQueue(ctx, &cloudtaskspb.PauseQueueRequest{Name: name})
	case "resume":
		_, err = s.client.ResumeQueue(ctx, &cloudtaskspb.ResumeQueueRequest{Name: name})
	case "purge":
		_, err = s.client.PurgeQueue(ctx, &cloudtaskspb.PurgeQueueRequest{Name: name})
	case "run":
		_, err = s.client.RunTask(ctx, &cloudtaskspb.RunTaskRequest{Name: name})
	default:
		return "", &pageError{code: http.StatusNotFound, msg: fmt.Sprintf("action %q unknown; allowed: pause, resume, purge, run, recover", action)}
	}
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("%s %s: done", action, shortName(name)), nil
}
