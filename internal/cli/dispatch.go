package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/ctdispatch/ctdispatch/cloudtasks"
	"github.com/ctdispatch/ctdispatch/naming"
)

// emulatorEnv names the variable that points the CLI at an emulator, as the
// Firebase tools do.
const emulatorEnv = "CLOUD_TASKS_EMULATOR_HOST"

// connFlags are the flags that say where tasks go and where they are
// recorded; dispatch, timer and recover share them.
type connFlags struct {
	emulator, project, location, queue, outbox string
	jsonOut                                    bool
	durability                                 string
	batch                                      bool
}

// registerModes adds the flags that choose how calls are recorded and
// sent; dispatch and timer take them.
func (c *connFlags) registerModes(cmd *cobra.Command, batch bool) {
	f := cmd.Flags()
	f.StringVar(&c.durability, "durability", "", "with --outbox: overlapped (default: the pending record's fsync runs beside the Cloud Tasks call), strict (the outcome is fsynced before the answer) or interval (synced every 100ms; survives a process crash, not a machine crash)")
	if batch {
		f.BoolVar(&c.batch, "batch", false, "let concurrent requests to one queue share BatchCreateTasks calls (up to 100 tasks each; with --from and --concurrency)")
	}
}

func (c *connFlags) register(cmd *cobra.Command, env *Env) {
	f := cmd.Flags()
	f.StringVar(&c.emulator, "emulator", env.Getenv(emulatorEnv), "Cloud Tasks emulator host:port (default $"+emulatorEnv+"; without it, real Cloud Tasks with application default credentials)")
	f.StringVar(&c.project, "project", "", "Google Cloud project ID (required)")
	f.StringVar(&c.location, "location", "", "Cloud Tasks location, for example europe-west1 (required)")
	f.StringVar(&c.queue, "queue", "", "queue ID (required)")
	f.StringVar(&c.outbox, "outbox", "", "outbox directory that records every request (default: none, records kept in memory)")
	f.BoolVar(&c.jsonOut, "json", false, "print one JSON object per request")
}

func (c *connFlags) dispatcher(ctx context.Context, env *Env) (*cloudtasks.Dispatcher, error) {
	for _, req := range []struct{ name, v string }{{"--project", c.project}, {"--location", c.location}, {"--queue", c.queue}} {
		if req.v == "" {
			return nil, usagef("%s is required", req.name)
		}
	}
	var durability cloudtasks.Durability
	if c.durability != "" {
		d, err := cloudtasks.ParseDurability(c.durability)
		if err != nil || d == cloudtasks.DurabilityMemory {
			return nil, usagef("--durability %q: allowed: overlapped, strict, interval (without --outbox records stay in memory)", c.durability)
		}
		if c.outbox == "" {
			return nil, usagef("--durability %s needs --outbox DIR", c.durability)
		}
		durability = d
	}
	return cloudtasks.NewDispatcher(ctx, &cloudtasks.Config{
		Project: c.project, Location: c.location, Queue: c.queue,
		EmulatorAddr: c.emulator, OutboxDir: c.outbox, Logger: env.Logger,
		Durability: durability, Batch: c.batch,
	})
}

// requestFlags describe one request: identity, target and timing. A line
// of a --from file has the same fields (see requestLine); the flags give
// the defaults.
type requestFlags struct {
	run, task, key    string
	attempt           uint64
	unique            bool
	url, method, body string
	headers           []string
	oidcSA, oidcAud   string
	scheduleTime      string
	deadline          time.Duration
	from              string
	concurrency       int
}

func (r *requestFlags) register(cmd *cobra.Command, withSchedule bool) {
	f := cmd.Flags()
	f.StringVar(&r.run, "run", "", "orchestration run ID")
	f.StringVar(&r.task, "task", "", "task key within the run")
	f.Uint64Var(&r.attempt, "attempt", 0, "attempt number (the strict identity strategy)")
	f.StringVar(&r.key, "key", "", "caller idempotency key instead of an attempt number (hashed with the task key)")
	f.BoolVar(&r.unique, "unique", false, "a fresh attempt every call (no deduplication)")
	f.StringVar(&r.url, "url", "", "target URL (http or https)")
	f.StringVar(&r.method, "method", "POST", "HTTP method")
	f.StringArrayVar(&r.headers, "header", nil, "HTTP header K=V (repeatable)")
	f.StringVar(&r.body, "body", "", "request body, or @FILE to read it from a file")
	f.StringVar(&r.oidcSA, "oidc-service-account", "", "service account email for an OIDC token")
	f.StringVar(&r.oidcAud, "oidc-audience", "", "OIDC token audience (default: the URL)")
	if withSchedule {
		f.StringVar(&r.scheduleTime, "schedule-time", "", "when the task fires (RFC 3339 or epoch seconds; default now)")
	}
	f.DurationVar(&r.deadline, "deadline", 0, "dispatch deadline of one delivery, 15s to 30m (default: the service's 10m)")
	f.StringVar(&r.from, "from", "", "read many requests from a JSONL file (- for stdin); flags give defaults")
	f.IntVar(&r.concurrency, "concurrency", 16, "requests in flight with --from")
}

// requestLine is one line of a --from file. Absent fields take the flag
// values.
type requestLine struct {
	Run                string            `json:"run"`
	Task               string            `json:"task"`
	Attempt            *uint64           `json:"attempt"`
	Key                string            `json:"key"`
	Unique             bool              `json:"unique"`
	Queue              string            `json:"queue"`
	URL                string            `json:"url"`
	Method             string            `json:"method"`
	Headers            map[string]string `json:"headers"`
	Body               *string           `json:"body"`
	BodyJSON           json.RawMessage   `json:"body_json"`
	OIDCServiceAccount string            `json:"oidc_service_account"`
	OIDCAudience       string            `json:"oidc_audience"`
	ScheduleTime       string            `json:"schedule_time"`
	Deadline           string            `json:"deadline"`
	// Timers only.
	Kind  string `json:"kind"`
	Due   string `json:"due"`
	Check string `json:"check"`
}

// base turns the flags into the line every --from line starts from.
func (r *requestFlags) base(queue string) (requestLine, error) {
	l := requestLine{
		Run: r.run, Task: r.task, Key: r.key, Unique: r.unique, URL: r.url, Method: r.method,
		OIDCServiceAccount: r.oidcSA, OIDCAudience: r.oidcAud, ScheduleTime: r.scheduleTime,
	}
	if queue != "" {
		l.Queue = queue
	}
	a := r.attempt
	l.Attempt = &a
	if r.deadline != 0 {
		l.Deadline = r.deadline.String()
	}
	if len(r.headers) > 0 {
		l.Headers = map[string]string{}
		for _, h := range r.headers {
			k, v, ok := strings.Cut(h, "=")
			if !ok || k == "" {
				return l, usagef("--header %q: want K=V", h)
			}
			l.Headers[k] = v
		}
	}
	if r.body != "" {
		body := r.body
		if name, ok := strings.CutPrefix(body, "@"); ok {
			b, err := os.ReadFile(name)
			if err != nil {
				return l, fmt.Errorf("--body: %w", err)
			}
			body = string(b)
		}
		l.Body = &body
	}
	return l, nil
}

// merge overlays the fields a line sets on the defaults.
func merge(def requestLine, raw []byte) (requestLine, error) {
	l := def
	if def.Headers != nil {
		l.Headers = make(map[string]string, len(def.Headers))
		for k, v := range def.Headers {
			l.Headers[k] = v
		}
	}
	// Pointers are decoded into, so the line gets its own.
	l.Attempt, l.Body = nil, nil
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&l); err != nil {
		return l, err
	}
	if l.Attempt == nil {
		l.Attempt = def.Attempt
	}
	if l.Body == nil && l.BodyJSON == nil {
		l.Body = def.Body
	}
	return l, nil
}

func (l *requestLine) identity() (naming.Identity, error) {
	switch {
	case l.Unique && l.Key != "":
		return naming.Identity{}, usagef("--unique and --key exclude each other")
	case l.Unique:
		return naming.Identity{Strategy: naming.StrategyUnique}, nil
	case l.Key != "":
		return naming.Identity{Strategy: naming.StrategyCallerKey, Key: l.Key}, nil
	}
	var n uint64
	if l.Attempt != nil {
		n = *l.Attempt
	}
	return naming.Identity{Strategy: naming.StrategyStrict, Number: n}, nil
}

func (l *requestLine) task() (cloudtasks.Task, error) {
	t := cloudtasks.Task{Queue: l.Queue, URL: l.URL, Method: l.Method, Headers: l.Headers}
	switch {
	case l.Body != nil && l.BodyJSON != nil:
		return t, usagef("body and body_json exclude each other")
	case l.Body != nil:
		t.Body = []byte(*l.Body)
	case l.BodyJSON != nil:
		t.Body = []byte(l.BodyJSON)
	}
	if l.OIDCServiceAccount != "" || l.OIDCAudience != "" {
		t.OIDC = &cloudtasks.OIDCToken{ServiceAccountEmail: l.OIDCServiceAccount, Audience: l.OIDCAudience}
	}
	if l.ScheduleTime != "" {
		st, err := parseTimeFlag("--schedule-time", l.ScheduleTime)
		if err != nil {
			return t, err
		}
		t.ScheduleTime = st
	}
	if l.Deadline != "" {
		d, err := time.ParseDuration(l.Deadline)
		if err != nil {
			return t, usagef("--deadline %q: %v", l.Deadline, err)
		}
		t.DispatchDeadline = d
	}
	return t, nil
}

// dispatchJSON is the --json form of one dispatch.
type dispatchJSON struct {
	DispatchID    string `json:"dispatch_id"`
	CloudTaskID   string `json:"cloud_task_id"`
	TaskName      string `json:"task_name"`
	Outcome       string `json:"outcome"`
	FirstRecorded string `json:"first_recorded"`
	Skipped       bool   `json:"skipped"`
}

func newDispatchCmd(env *Env) *cobra.Command {
	var conn connFlags
	var rf requestFlags
	cmd := &cobra.Command{
		Use:   "dispatch --project P --location L --queue Q --run RUN --task TASK --attempt N --url URL [flags]",
		Short: "Hand one attempt of a task to Cloud Tasks, exactly once",
		Long: `Hand one attempt of a task to Cloud Tasks, exactly once.

The task is named after its internal ID dispatch:RUN:TASK:ATTEMPT, so
repeating the command never creates a second task: the repeat reports
already_existed. The attempt slot is --attempt N (default 0), or --key K (a
caller idempotency key, hashed with the task key), or --unique (a fresh
attempt every call).

The target receives Idempotency-Key: <internal ID> and X-Ctdispatch-Task-Id:
<Cloud Tasks ID>. With --outbox DIR every request is recorded there
(pending, then the outcome) and a repeat is answered from the record
without calling Cloud Tasks. --durability says what an answer promises:
overlapped (the default) makes the pending record durable while Cloud
Tasks is called, so after a crash an answered request is recorded at least
as pending (recover finishes it); strict also makes the outcome durable
before answering; interval syncs every 100ms and survives a process crash
only. --batch lets concurrent requests (--from with --concurrency) share
BatchCreateTasks calls; each request still gets its own outcome.

--from FILE reads one JSON object per line with the fields run, task,
attempt, key, unique, queue, url, method, headers (object), body (string)
or body_json (any JSON), oidc_service_account, oidc_audience,
schedule_time, deadline; flags give the defaults. A progress line is drawn
on stderr when it is a terminal. A failed request is reported on stderr
with its line number and the exit status is 1.

Output: one line per request, "OUTCOME DISPATCH_ID TASK_NAME", or with
--json {"dispatch_id","cloud_task_id","task_name","outcome",...}.`,
		Example: `  ctdispatch dispatch --emulator localhost:8123 --project p --location europe-west1 --queue work \
      --run run1 --task extract --attempt 1 --url https://worker.example/extract \
      --header Content-Type=application/json --body '{"table":"orders"}' --json
  ctdispatch dispatch --project p --location europe-west1 --queue work --outbox ./outbox --from requests.jsonl`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			def, err := rf.base("")
			if err != nil {
				return err
			}
			if rf.from == "" {
				if def.Run == "" || def.Task == "" {
					return usagef("--run and --task are required (or --from FILE)")
				}
				if def.URL == "" {
					return usagef("--url is required")
				}
			}
			ctx := cmd.Context()
			d, err := conn.dispatcher(ctx, env)
			if err != nil {
				return err
			}
			defer d.Close(ctx)
			one := func(ctx context.Context, l requestLine) (any, string, error) {
				id, err := l.identity()
				if err != nil {
					return nil, "", err
				}
				task, err := l.task()
				if err != nil {
					return nil, "", err
				}
				res, err := d.Dispatch(ctx, cloudtasks.DispatchRequest{RunID: l.Run, TaskKey: l.Task, Identity: id, Task: task})
				if err != nil {
					return nil, "", err
				}
				text := fmt.Sprintf("%s %s %s", res.Outcome, res.ID, res.TaskName)
				return dispatchJSON{
					DispatchID: res.ID, CloudTaskID: res.CloudTaskID, TaskName: res.TaskName, Outcome: string(res.Outcome),
					FirstRecorded: formatTime(res.FirstRecorded), Skipped: res.Skipped,
				}, text, nil
			}
			err = runRequests(ctx, env, cmd.OutOrStdout(), &conn, &rf, def, one)
			if cerr := d.Close(ctx); err == nil && cerr != nil {
				err = cerr
			}
			return err
		},
	}
	conn.register(cmd, env)
	conn.registerModes(cmd, true)
	rf.register(cmd, true)
	return cmd
}

// runRequests runs one request from the flags, or every line of --from
// with rf.concurrency in flight, printing results in input order.
func runRequests(ctx context.Context, env *Env, out io.Writer, conn *connFlags, rf *requestFlags,
	def requestLine, one func(context.Context, requestLine) (any, string, error)) error {
	emit := func(obj any, text string) {
		if conn.jsonOut {
			b, _ := json.Marshal(obj)
			fmt.Fprintf(out, "%s\n", b)
		} else {
			fmt.Fprintln(out, text)
		}
	}
	if rf.from == "" {
		obj, text, err := one(ctx, def)
		if err != nil {
			return err
		}
		emit(obj, text)
		return nil
	}
	in := env.In
	total := int64(-1)
	if rf.from != "-" {
		f, err := os.Open(rf.from)
		if err != nil {
			return fmt.Errorf("--from: %w", err)
		}
		defer f.Close()
		in = f
		if n, err := countLines(rf.from); err == nil {
			total = n
		}
	}
	if rf.concurrency < 1 {
		return usagef("--concurrency %d: want at least 1", rf.concurrency)
	}
	var bar *lineProgress
	if isTerminal(env.Err) {
		bar = &lineProgress{w: env.Err, total: total, now: time.Now}
		defer bar.finish()
	}

	type result struct {
		n         int
		obj       any
		text      string
		err       error
		completed chan struct{}
	}
	queue := make(chan *result, rf.concurrency)
	sem := make(chan struct{}, rf.concurrency)
	failed := 0
	var wg sync.WaitGroup
	printer := make(chan struct{})
	go func() {
		defer close(printer)
		done := int64(0)
		for r := range queue {
			<-r.completed
			done++
			if r.err != nil {
				failed++
				fmt.Fprintf(env.Err, "ctdispatch: line %d: %s\n", r.n, oneLine(r.err.Error()))
			} else {
				emit(r.obj, r.text)
			}
			if bar != nil {
				bar.update(done)
			}
		}
	}()
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	n := 0
	var scanErr error
	for sc.Scan() {
		n++
		raw := strings.TrimSpace(sc.Text())
		if raw == "" {
			continue
		}
		if ctx.Err() != nil {
			break
		}
		r := &result{n: n, completed: make(chan struct{})}
		queue <- r
		l, err := merge(def, []byte(raw))
		if err != nil {
			r.err = fmt.Errorf("not a request: %w", err)
			close(r.completed)
			continue
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem; close(r.completed) }()
			r.obj, r.text, r.err = one(ctx, l)
		})
	}
	scanErr = sc.Err()
	wg.Wait()
	close(queue)
	<-printer
	switch {
	case scanErr != nil:
		return fmt.Errorf("--from: %w", scanErr)
	case ctx.Err() != nil:
		return ctx.Err()
	case failed > 0:
		return fmt.Errorf("%d of the requests failed (reported above)", failed)
	}
	return nil
}

func countLines(name string) (int64, error) {
	f, err := os.Open(name)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	var n int64
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		if strings.TrimSpace(sc.Text()) != "" {
			n++
		}
	}
	return n, sc.Err()
}

// lineProgress draws "N/TOTAL requests" on one self-overwriting terminal
// line, at most ten times a second.
type lineProgress struct {
	w     io.Writer
	total int64
	last  time.Time
	now   func() time.Time
	drawn bool
}

func (p *lineProgress) update(done int64) {
	now := p.now()
	if (p.total < 0 || done < p.total) && now.Sub(p.last) < 100*time.Millisecond {
		return
	}
	p.last, p.drawn = now, true
	if p.total < 0 {
		fmt.Fprintf(p.w, "\r%d requests", done)
		return
	}
	const width = 30
	frac := 1.0
	if p.total > 0 {
		frac = float64(done) / float64(p.total)
	}
	k := int(frac * width)
	fmt.Fprintf(p.w, "\r[%s%s] %3.0f%% %d/%d requests", strings.Repeat("#", k), strings.Repeat(" ", width-k), 100*frac, done, p.total)
}

func (p *lineProgress) finish() {
	if p.drawn {
		fmt.Fprintln(p.w)
	}
}
