package cloudtasks

import (
	"errors"
	"fmt"
	"net/textproto"
	"net/url"
	"strings"
	"time"

	"cloud.google.com/go/cloudtasks/apiv2/cloudtaskspb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/ctdispatch/ctdispatch/cloudtasks/internal/taskheader"
	"github.com/ctdispatch/ctdispatch/cloudtasks/internal/tasksize"
	"github.com/ctdispatch/ctdispatch/naming"
	"github.com/ctdispatch/ctdispatch/timers"
)

// Service limits checked before any I/O (see the Cloud Tasks quotas and the
// cloudtaskspb field documentation).
const (
	// MaxTaskSize bounds an HTTP task as its protobuf encoding measures it
	// (URL, headers, body and the rest): 1 MB read as 10^6 bytes, the
	// smaller reading of the service's documented limit, so the
	// dispatcher never sends a task the service could refuse for its size.
	MaxTaskSize = tasksize.Max
	// MaxHeaderBytes bounds the headers of an HTTP task (under 80 KB).
	MaxHeaderBytes = 80 * 1000
	// MaxURLLength bounds the target URL.
	MaxURLLength = 2083
	// MaxScheduleAhead is how far in the future a task may be scheduled.
	MaxScheduleAhead = timers.MaxAhead
	// MinDispatchDeadline and MaxDispatchDeadline bound an HTTP task's
	// dispatch deadline.
	MinDispatchDeadline = 15 * time.Second
	// MaxDispatchDeadline is the upper bound of an HTTP task's dispatch
	// deadline.
	MaxDispatchDeadline = 30 * time.Minute
)

// Headers the dispatcher sets on every task; callers may not set them.
const (
	// HeaderIdempotencyKey carries the internal ID, so workers can
	// deduplicate deliveries.
	HeaderIdempotencyKey = taskheader.IdempotencyKey
	// HeaderTaskID carries the Cloud Tasks task ID (d_… or t_…).
	HeaderTaskID = taskheader.TaskID
)

// DispatchRequest asks for one attempt of a task to be handed to Cloud
// Tasks. The run ID, task key and Identity make the internal ID; everything
// else describes the HTTP request the worker receives.
type DispatchRequest struct {
	// RunID is the orchestration run. Required.
	RunID string
	// TaskKey names the task within the run. Required.
	TaskKey string
	// Identity says which attempt of the task this is: naming.Attempt(n),
	// naming.CallerKey(key) or naming.Unique(). Required: the zero Identity
	// is refused.
	Identity naming.Identity
	// Task is the HTTP request and its scheduling.
	Task Task
}

// Task is the HTTP request a task delivers, and when. It is shared by
// dispatches and timers.
type Task struct {
	// Queue is the queue ID; empty means Config.Queue. An ID the outbox
	// has recorded keeps the queue of its record: empty then means that
	// queue (whatever Config.Queue is now), and another queue is a
	// *RequestError naming both, so a repeat never makes a second task.
	Queue string
	// URL is the absolute http or https target. Required.
	URL string
	// Method is the HTTP method. Defaults to POST.
	Method string
	// Headers are sent with the request. Idempotency-Key and
	// X-Ctdispatch-Task-Id are set by the dispatcher and may not be given.
	Headers map[string]string
	// Body is the request body, allowed only with POST, PUT and PATCH.
	Body []byte
	// OIDC, when set, makes Cloud Tasks send a signed OIDC token.
	OIDC *OIDCToken
	// ScheduleTime is when the task fires; zero or past means at once. At
	// most MaxScheduleAhead in the future.
	ScheduleTime time.Time
	// DispatchDeadline bounds one delivery; zero means the service default
	// (10 minutes). Allowed: 15s to 30m.
	DispatchDeadline time.Duration
}

// OIDCToken asks Cloud Tasks to authenticate to the target as a service
// account.
type OIDCToken struct {
	// ServiceAccountEmail is the account whose identity the token carries.
	// Required.
	ServiceAccountEmail string
	// Audience of the token; empty means the target URL.
	Audience string
}

var methods = map[string]cloudtaskspb.HttpMethod{
	"POST": cloudtaskspb.HttpMethod_POST, "GET": cloudtaskspb.HttpMethod_GET,
	"HEAD": cloudtaskspb.HttpMethod_HEAD, "PUT": cloudtaskspb.HttpMethod_PUT,
	"DELETE": cloudtaskspb.HttpMethod_DELETE, "PATCH": cloudtaskspb.HttpMethod_PATCH,
	"OPTIONS": cloudtaskspb.HttpMethod_OPTIONS,
}

// reservedHeaderPrefixes are headers Cloud Tasks sets or refuses.
var reservedHeaderPrefixes = []string{"X-Google-", "X-Appengine-", "X-Cloudtasks-"}

var reservedHeaders = map[string]bool{
	"Host": true, "Content-Length": true, "Transfer-Encoding": true, "Connection": true,
	"User-Agent": true, "Authorization": true,
	textproto.CanonicalMIMEHeaderKey(HeaderIdempotencyKey): true,
	textproto.CanonicalMIMEHeaderKey(HeaderTaskID):         true,
}

// shorten keeps error messages readable for long values.
func shorten(s string) string {
	if len(s) > 80 {
		return s[:77] + "…"
	}
	return s
}

// validate checks t against the service's limits at now. It never puts a
// body or a header value in an error.
func (t *Task) validate(now time.Time) error {
	bad := func(field, value, rule string) error { return &RequestError{Field: field, Value: value, Rule: rule} }
	if t.Queue != "" && !queuePattern.MatchString(t.Queue) {
		return bad("Queue", shorten(t.Queue), "is not a queue ID; allowed: 1 to 100 of [A-Za-z0-9-]")
	}
	if t.URL == "" {
		return bad("URL", "", "is required")
	}
	if len(t.URL) > MaxURLLength {
		return bad("URL", shorten(t.URL), fmt.Sprintf("is %d characters long; at most %d allowed", len(t.URL), MaxURLLength))
	}
	u, err := url.Parse(t.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return bad("URL", shorten(t.URL), "is not an absolute http or https URL")
	}
	method := t.method()
	if _, ok := methods[method]; !ok {
		return bad("Method", t.Method, "is not allowed; allowed: POST, GET, HEAD, PUT, DELETE, PATCH, OPTIONS")
	}
	if len(t.Body) > 0 && method != "POST" && method != "PUT" && method != "PATCH" {
		return bad("Body", fmt.Sprintf("%d bytes", len(t.Body)), "is only allowed with POST, PUT or PATCH; method is "+method)
	}
	headerBytes := 0
	for k, v := range t.Headers {
		if k == "" || strings.ContainsAny(k, " :\r\n\t") {
			return bad("Headers", shorten(k), "is not a valid header name")
		}
		if strings.ContainsAny(v, "\r\n") {
			return bad("Headers", k, "has a value with a line break")
		}
		ck := textproto.CanonicalMIMEHeaderKey(k)
		if reservedHeaders[ck] {
			return bad("Headers", k, "is set by the dispatcher or the service and may not be given")
		}
		for _, p := range reservedHeaderPrefixes {
			if strings.HasPrefix(ck, p) {
				return bad("Headers", k, "is reserved by Cloud Tasks (prefix "+p+")")
			}
		}
		headerBytes += len(k) + len(v) + 4
	}
	if headerBytes > MaxHeaderBytes {
		return bad("Headers", fmt.Sprintf("%d bytes", headerBytes), fmt.Sprintf("exceed %d bytes", MaxHeaderBytes))
	}
	if t.OIDC != nil && t.OIDC.ServiceAccountEmail == "" {
		return bad("OIDC.ServiceAccountEmail", "", "is required when OIDC is set")
	}
	if !t.ScheduleTime.IsZero() && t.ScheduleTime.After(now.Add(MaxScheduleAhead)) {
		return bad("ScheduleTime", t.ScheduleTime.UTC().Format(time.RFC3339),
			fmt.Sprintf("is %s ahead; Cloud Tasks allows at most 30 days (720h)", t.ScheduleTime.Sub(now).Round(time.Second)))
	}
	if d := t.DispatchDeadline; d != 0 && (d < MinDispatchDeadline || d > MaxDispatchDeadline) {
		return bad("DispatchDeadline", d.String(), "is out of range; allowed: 15s to 30m")
	}
	return nil
}

func (t *Task) method() string {
	if t.Method == "" {
		return "POST"
	}
	return strings.ToUpper(t.Method)
}

// checkSize refuses a request whose task is larger than MaxTaskSize, as
// tasksize measures it: the body is what a caller can make smaller.
func (t *Task) checkSize(req *cloudtaskspb.CreateTaskRequest) error {
	if size := tasksize.Of(req.GetTask()); size > MaxTaskSize {
		return &RequestError{Field: "Body", Value: fmt.Sprintf("%d bytes", len(t.Body)),
			Rule: fmt.Sprintf("makes the task %d bytes as encoded; at most %d allowed", size, MaxTaskSize)}
	}
	return nil
}

// createRequest builds the CreateTask request for the task of id in the
// queue at queuePath. A past schedule time is left out, so the task
// fires at once.
func (t *Task) createRequest(id naming.ID, queuePath string, now time.Time) *cloudtaskspb.CreateTaskRequest {
	headers := make(map[string]string, len(t.Headers)+2)
	for k, v := range t.Headers {
		headers[k] = v
	}
	headers[HeaderIdempotencyKey] = id.String()
	headers[HeaderTaskID] = id.CloudTaskID()
	hr := &cloudtaskspb.HttpRequest{
		Url:        t.URL,
		HttpMethod: methods[t.method()],
		Headers:    headers,
		Body:       t.Body,
	}
	if t.OIDC != nil {
		hr.AuthorizationHeader = &cloudtaskspb.HttpRequest_OidcToken{OidcToken: &cloudtaskspb.OidcToken{
			ServiceAccountEmail: t.OIDC.ServiceAccountEmail,
			Audience:            t.OIDC.Audience,
		}}
	}
	task := &cloudtaskspb.Task{
		Name:        id.TaskName(queuePath),
		MessageType: &cloudtaskspb.Task_HttpRequest{HttpRequest: hr},
	}
	if !t.ScheduleTime.IsZero() && t.ScheduleTime.After(now) {
		task.ScheduleTime = timestamppb.New(t.ScheduleTime)
	}
	if t.DispatchDeadline != 0 {
		task.DispatchDeadline = durationpb.New(t.DispatchDeadline)
	}
	return &cloudtaskspb.CreateTaskRequest{Parent: queuePath, Task: task}
}

// ID returns the internal ID the request names, after checking its parts.
func (r *DispatchRequest) ID() (naming.ID, error) {
	id, err := naming.NewDispatch(r.RunID, r.TaskKey, r.Identity)
	if err != nil {
		return naming.ID{}, namingError(err, "Identity")
	}
	return id, nil
}

// requestFields maps naming's component names to request field names; the
// identity's components go to the field identityField names.
var requestFields = map[string]string{
	"run_id": "RunID", "task_key": "TaskKey", "due_epoch": "At", "check_epoch": "At",
}

// namingError turns an error from naming into a *RequestError that names
// the request field and still unwraps to the *naming.Error. identityField
// is the request's field of the naming.Identity.
func namingError(err error, identityField string) error {
	var ne *naming.Error
	if !errors.As(err, &ne) {
		return &RequestError{Field: "ID", Rule: err.Error(), Err: err}
	}
	switch ne.Component {
	case "identity", "attempt", "idempotency key":
		return &RequestError{Field: identityField, Value: shorten(ne.Value), Rule: ne.Rule, Err: err}
	}
	field, ok := requestFields[ne.Component]
	if !ok {
		field = "ID"
	}
	return &RequestError{Field: field, Value: shorten(ne.Value), Rule: ne.Rule, Err: err}
}
