package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/ctdispatch/ctdispatch/cloudtasks"
	"github.com/ctdispatch/ctdispatch/internal/durability"
	"github.com/ctdispatch/ctdispatch/naming"
	"github.com/ctdispatch/ctdispatch/outbox/parquetbox"
	"github.com/ctdispatch/ctdispatch/outbox/pgbox"
)

// emulatorEnv names the variable that points the CLI at an emulator, as the
// Firebase tools do.
const emulatorEnv = "CLOUD_TASKS_EMULATOR_HOST"

// connFlags are the flags that say where tasks go and where they are
// recorded; dispatch, timer and recover share them.
type connFlags struct {
	emulator, project, location, queue, outbox, logDir string
	jsonOut                                            bool
	// emulatorFromEnv is $CLOUD_TASKS_EMULATOR_HOST, the --emulator
	// default, so an error can say where a bad address came from.
	emulatorFromEnv string
	durability      string
	batch           bool
	batchInFlight   int
	// publishInterval is how often the outbox's log reaches Parquet.
	publishInterval time.Duration
	// exportTo and exportInterval run a PostgreSQL outbox's exporter.
	exportTo       string
	exportInterval time.Duration
	// listen gives a dispatcher on a PostgreSQL outbox a listener of its
	// notifications (the relay command's).
	listen bool
}

// registerModes adds the flags that choose how calls are recorded and
// sent; dispatch and timer take them.
func (c *connFlags) registerModes(cmd *cobra.Command, batch bool) {
	f := cmd.Flags()
	f.StringVar(&c.durability, "durability", "", "with --outbox: overlapped (default: the pending record's fsync runs beside the Cloud Tasks call), strict (the outcome is fsynced before the answer) or interval (synced every 100ms; survives a process crash, not a machine crash)")
	if batch {
		f.BoolVar(&c.batch, "batch", false, "let concurrent requests to one queue share BatchCreateTasks calls (up to 100 tasks each; with --from and --concurrency)")
		f.IntVar(&c.batchInFlight, "batch-in-flight", cloudtasks.DefaultBatchInFlight, "with --batch: most requests in flight per queue")
	}
}

// register adds the flags to cmd.
func (c *connFlags) register(cmd *cobra.Command, env *Env) {
	c.registerFor(cmd, env, false)
}

// registerFor adds the flags to cmd; for recover (recovering), which reads
// queues from the records, the queue flags are accepted but hidden and the
// help marks the outbox as required.
func (c *connFlags) registerFor(cmd *cobra.Command, env *Env, recovering bool) {
	f := cmd.Flags()
	c.emulatorFromEnv = env.Getenv(emulatorEnv)
	f.StringVar(&c.emulator, "emulator", c.emulatorFromEnv, "Cloud Tasks emulator host:port (default $"+emulatorEnv+"; without it, real Cloud Tasks with application default credentials)")
	f.StringVar(&c.project, "project", "", "Google Cloud project ID (required)")
	f.StringVar(&c.location, "location", "", "Cloud Tasks location, for example europe-west1 (required)")
	f.StringVar(&c.queue, "queue", "", "queue ID (required)")
	f.StringVar(&c.outbox, "outbox", "", "outbox that records every request: a directory, a bucket URL (gs://BUCKET?prefix=P/) or a PostgreSQL URL (postgres://…, tables made by \"ctdispatch migrate\") (default: none, records kept in memory)")
	f.StringVar(&c.logDir, "log-dir", "", "local directory of the write-ahead log; required with a bucket --outbox")
	f.DurationVar(&c.publishInterval, "publish-interval", parquetbox.DefaultPublishInterval, "with --outbox: most time a record waits in the log before it is in a Parquet file that DuckDB and BigQuery read (at least "+parquetbox.MinPublishInterval.String()+")")
	f.StringVar(&c.exportTo, "export-to", "", "with a PostgreSQL --outbox: also write its records to Parquet tables in this directory or bucket (gs://BUCKET?prefix=P/), as \"ctdispatch export\" does")
	f.DurationVar(&c.exportInterval, "export-interval", pgbox.DefaultExportInterval, "with --export-to: how often to export (at least "+pgbox.MinExportInterval.String()+")")
	f.BoolVar(&c.jsonOut, "json", false, "print one JSON object per request")
	if recovering {
		for _, name := range []string{"project", "location", "queue"} {
			_ = f.MarkHidden(name) // the flag exists: MarkHidden cannot fail
		}
		f.Lookup("outbox").Usage = "outbox whose pending records are re-driven (required)"
		f.Lookup("json").Usage = "print the counts as one JSON object"
	}
}

// dispatcher opens a dispatcher for the flags. needQueue says whether
// --queue is required (a cancel finds the queue in the outbox).
func (c *connFlags) dispatcher(ctx context.Context, env *Env, needQueue bool) (*session, error) {
	for _, req := range []struct{ name, v string }{{"--project", c.project}, {"--location", c.location}, {"--queue", c.queue}} {
		if req.v == "" && (needQueue || req.name != "--queue") {
			return nil, usagef("%s is required", req.name)
		}
	}
	if c.batch && c.batchInFlight < 1 {
		return nil, usagef("--batch-in-flight %d must be at least 1", c.batchInFlight)
	}
	var mode durability.Mode
	if c.durability != "" {
		m, err := durability.Parse(c.durability)
		if err != nil || m == durability.Memory {
			return nil, usagef("--durability %q: allowed: overlapped, strict, interval (without --outbox records stay in memory)", c.durability)
		}
		if c.outbox == "" {
			return nil, usagef("--durability %s needs --outbox DIR", c.durability)
		}
		mode = m
	}
	return c.connect(ctx, env, cloudtasks.Config{
		Project: c.project, Location: c.location, Queue: c.queue,
		Batch: c.batch, BatchInFlight: c.batchInFlight,
	}, mode)
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
	f.StringVar(&r.from, "from", "", "read many requests from a JSON Lines file, - for stdin, or a FIFO; flags give defaults")
	f.IntVar(&r.concurrency, "concurrency", 16, "requests in flight with --from")
}

// requestLine is one line of a --from file. Absent fields take the flag
// values; the identity (attempt, key, unique) is taken from the line as a
// whole when the line gives any of it, else from the flags.
type requestLine struct {
	Run                string            `json:"run"`
	Task               string            `json:"task"`
	Attempt            *attemptNumber    `json:"attempt"`
	Key                *string           `json:"key"`
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

// attemptNumber is the attempt of a --from line: a JSON number (1) or a
// string of digits ("1", as ctdispatch id --json prints it).
type attemptNumber uint64

// UnmarshalJSON accepts a number or a string holding a canonical number.
func (a *attemptNumber) UnmarshalJSON(b []byte) error {
	s := string(b)
	if unq, err := strconv.Unquote(s); err == nil && strings.HasPrefix(s, `"`) {
		s = unq
	}
	n, err := parseAttemptNumber(s)
	if err != nil {
		return fmt.Errorf("attempt %s is not an attempt number; allowed: 0 to 18446744073709551615 without leading zeros, as a number or a string (a caller key goes in \"key\")", b)
	}
	*a = attemptNumber(n)
	return nil
}

// parseAttemptNumber reads an attempt number in its one canonical decimal
// form, so "01" is refused rather than read as attempt 1.
func parseAttemptNumber(s string) (uint64, error) {
	n, err := strconv.ParseUint(s, 10, 64)
	if err == nil && strconv.FormatUint(n, 10) != s {
		err = fmt.Errorf("attempt %q is not in canonical form", s)
	}
	return n, err
}

// base turns the flags into the line every --from line starts from.
func (r *requestFlags) base(cmd *cobra.Command, queue string) (requestLine, error) {
	l := requestLine{
		Run: r.run, Task: r.task, Unique: r.unique, URL: r.url, Method: r.method,
		OIDCServiceAccount: r.oidcSA, OIDCAudience: r.oidcAud, ScheduleTime: r.scheduleTime,
	}
	if queue != "" {
		l.Queue = queue
	}
	flags := cmd.Flags()
	if flags.Changed("attempt") {
		a := attemptNumber(r.attempt)
		l.Attempt = &a
	}
	if flags.Changed("key") {
		k := r.key
		l.Key = &k
	}
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
	// Pointers are decoded into, so the line gets its own; the identity is
	// the line's when it gives one.
	l.Attempt, l.Key, l.Unique, l.Body = nil, nil, false, nil
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&l); err != nil {
		return l, err
	}
	if l.Attempt == nil && l.Key == nil && !l.Unique {
		l.Attempt, l.Key, l.Unique = def.Attempt, def.Key, def.Unique
	}
	if l.Body == nil && l.BodyJSON == nil {
		l.Body = def.Body
	}
	return l, nil
}

// errIdentity explains the attempt-slot rule.
const errIdentity = `give exactly one of --attempt N, --key K or --unique ("attempt", "key" or "unique" in a --from line)`

// identity fills the attempt slot: exactly one of attempt, key and unique.
func (l *requestLine) identity() (naming.Identity, error) {
	var given []string
	if l.Attempt != nil {
		given = append(given, "attempt")
	}
	if l.Key != nil {
		given = append(given, "key")
	}
	if l.Unique {
		given = append(given, "unique")
	}
	switch {
	case len(given) == 0:
		return naming.Identity{}, usagef("the attempt slot is not set; %s", errIdentity)
	case len(given) > 1:
		return naming.Identity{}, usagef("%s exclude each other; %s", strings.Join(given, " and "), errIdentity)
	case l.Unique:
		return naming.Unique(), nil
	case l.Key != nil:
		if *l.Key == "" {
			return naming.Identity{}, usagef("the key is empty; a caller idempotency key needs at least one character")
		}
		return naming.CallerKey(*l.Key), nil
	}
	return naming.Attempt(uint64(*l.Attempt)), nil
}

// noIdentity refuses an attempt slot where there is none (heartbeats).
func (l *requestLine) noIdentity(what string) error {
	if l.Attempt != nil || l.Key != nil || l.Unique {
		return usagef("%s has no attempt slot; drop --attempt, --key and --unique", what)
	}
	return nil
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
already_existed. The attempt slot is required, exactly one of: --attempt N,
--key K (a caller idempotency key, hashed with the task key; not empty), or
--unique (a fresh attempt every call).

The target receives Idempotency-Key: <internal ID> and X-Ctdispatch-Task-Id:
<Cloud Tasks ID>. With --outbox every request is recorded there (pending,
then the outcome) and a repeat is answered from the record without calling
Cloud Tasks. --outbox is a directory or a bucket URL (gs://BUCKET?prefix=P/;
s3:// in a binary built with -tags s3), which needs --log-dir DIR for the
write-ahead log. --durability says what an answer
promises: overlapped (the default) makes the pending record durable while
Cloud Tasks is called, so after a crash an answered request is recorded at
least as pending (recover finishes it); strict also makes the outcome
durable before answering; interval syncs every 100ms and survives a
process crash only. --batch lets concurrent requests (--from with
--concurrency) share BatchCreateTasks calls; each request still gets its
own outcome. --batch-in-flight N bounds the requests one queue has in
flight meanwhile (default 4).

--from FILE reads one JSON object per line with the fields run, task,
attempt (a number or a string of digits), key, unique, queue, url, method,
headers (object), body (string) or body_json (any JSON),
oidc_service_account, oidc_audience, schedule_time, deadline; flags give
the defaults, and a line giving attempt, key or unique replaces the flags'
choice. FILE may be - (stdin), /dev/stdin or a FIFO; it is read once, as a
stream. A progress line is drawn on stderr when it is a terminal. A failed
request, or a line over 4 MiB, is reported on stderr with its line number,
the rest goes on, and the exit status is 1.

Cloud Tasks (or the emulator) must answer within 5s, else the command stops
naming the address and the cause. Transient failures are retried, each
retry shown on stderr when it is a terminal.

Output: one line per request, "OUTCOME DISPATCH_ID TASK_NAME", or with
--json {"dispatch_id","cloud_task_id","task_name","outcome",...}.`,
		Example: `  ctdispatch dispatch --emulator localhost:8123 --project p --location europe-west1 --queue work \
      --run run1 --task extract --attempt 1 --url https://worker.example/extract \
      --header Content-Type=application/json --body '{"table":"orders"}' --json
  ctdispatch dispatch --project p --location europe-west1 --queue work --outbox ./outbox --from requests.jsonl`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			def, err := rf.base(cmd, "")
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
				if _, err := def.identity(); err != nil {
					return err
				}
			}
			ctx := cmd.Context()
			sess, err := conn.dispatcher(ctx, env, true)
			if err != nil {
				return err
			}
			defer sess.close()
			d := sess.d
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
			if cerr := sess.close(); err == nil && cerr != nil {
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
	in, total, closeIn, err := openFrom(rf.from, env.In, isTerminal(env.Err))
	if err != nil {
		return err
	}
	defer closeIn()
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
	lines := newLineReader(in, maxLineBytes)
	var readErr error
	for n := 1; ctx.Err() == nil; n++ {
		raw, err := lines.next()
		if err == io.EOF {
			break
		}
		var tooLong *lineTooLongError
		if err != nil && !errors.As(err, &tooLong) {
			readErr = err
			break
		}
		if err == nil && len(bytes.TrimSpace(raw)) == 0 {
			continue
		}
		r := &result{n: n, completed: make(chan struct{})}
		queue <- r
		if err != nil {
			r.err = err
			close(r.completed)
			continue
		}
		l, err := merge(def, raw)
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
	wg.Wait()
	close(queue)
	<-printer
	switch {
	case readErr != nil:
		return fmt.Errorf("--from %s: %w", rf.from, readErr)
	case ctx.Err() != nil:
		return ctx.Err()
	case failed > 0:
		return fmt.Errorf("%d of the requests failed (reported above)", failed)
	}
	return nil
}

// maxLineBytes bounds one --from line: a task body is at most 1 MiB, and
// JSON escaping can quadruple it.
const maxLineBytes = 4 << 20

// openFrom opens the --from input: "-" is in, anything else a path, which
// may be a pipe or a FIFO (/dev/stdin, <(…)): it is read once, as a
// stream. When count is set and the path is a regular file, its lines are
// counted first for the progress bar; otherwise total is -1.
func openFrom(name string, in io.Reader, count bool) (r io.Reader, total int64, closeFn func(), err error) {
	if name == "-" {
		return in, -1, func() {}, nil
	}
	f, err := os.Open(name)
	if err != nil {
		return nil, 0, nil, fmt.Errorf("--from: %w", err)
	}
	total = -1
	if info, err := f.Stat(); err == nil && info.Mode().IsRegular() && count {
		if n, err := countLines(f); err == nil {
			total = n
		}
		if _, err := f.Seek(0, io.SeekStart); err != nil {
			f.Close()
			return nil, 0, nil, fmt.Errorf("--from: %w", err)
		}
	}
	return f, total, func() { f.Close() }, nil
}

// countLines counts the non-blank lines of r, as the dispatch loop numbers
// requests.
func countLines(r io.Reader) (int64, error) {
	lines := newLineReader(r, maxLineBytes)
	var n int64
	for {
		raw, err := lines.next()
		var tooLong *lineTooLongError
		switch {
		case err == io.EOF:
			return n, nil
		case errors.As(err, &tooLong):
			n++
		case err != nil:
			return n, err
		case len(bytes.TrimSpace(raw)) > 0:
			n++
		}
	}
}

// lineTooLongError reports a line over the limit; the reader has skipped
// the rest of it and goes on with the next line.
type lineTooLongError struct{ size, limit int }

func (e *lineTooLongError) Error() string {
	return fmt.Sprintf("line of %d bytes is over the limit of %d bytes (a task body is at most 1 MiB); skipped", e.size, e.limit)
}

// lineReader reads lines of at most limit bytes, in memory bounded by the
// limit whatever the input holds.
type lineReader struct {
	r     *bufio.Reader
	limit int
	buf   []byte
}

func newLineReader(r io.Reader, limit int) *lineReader {
	return &lineReader{r: bufio.NewReaderSize(r, 64<<10), limit: limit}
}

// next returns the next line without its newline, a *lineTooLongError for
// a line over the limit (whose bytes are discarded), or io.EOF at the end.
// The slice is valid until the next call.
func (lr *lineReader) next() ([]byte, error) {
	lr.buf = lr.buf[:0]
	size := 0
	for {
		chunk, err := lr.r.ReadSlice('\n')
		size += len(chunk)
		if size <= lr.limit+1 { // +1: the newline
			lr.buf = append(lr.buf, chunk...)
		}
		switch {
		case err == bufio.ErrBufferFull:
			continue
		case err == io.EOF && size == 0:
			return nil, io.EOF
		case err != nil && err != io.EOF:
			return nil, err
		}
		line := bytes.TrimSuffix(lr.buf, []byte("\n"))
		if size > lr.limit+1 || (err == io.EOF && size > lr.limit) {
			lr.buf = lr.buf[:0]
			return nil, &lineTooLongError{size: size, limit: lr.limit}
		}
		return line, nil
	}
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
