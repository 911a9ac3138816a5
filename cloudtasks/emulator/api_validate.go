package emulator

import (
	"fmt"
	"net/url"
	"regexp"
	"strings"
	"time"

	"cloud.google.com/go/cloudtasks/apiv2/cloudtaskspb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/ctdispatch/ctdispatch/cloudtasks/emulator/emuproto"
	"github.com/ctdispatch/ctdispatch/cloudtasks/internal/tasksize"
)

// The service's limits, as documented for HTTP targets.
const (
	maxHeadersSize      = 80 << 10
	maxURLLength        = 2083
	maxScheduleAhead    = 30 * 24 * time.Hour
	maxTaskRetention    = 31 * 24 * time.Hour
	minDispatchDeadline = 15 * time.Second
	maxDispatchDeadline = 30 * time.Minute
	defaultDeadline     = 10 * time.Minute
	maxRate             = 500
	maxConcurrent       = 5000
	maxBatchCreate      = 100
	maxBatchDelete      = 1000
	maxTaskPageSize     = 1000
	maxQueuePageSize    = 9800
)

// Anchored patterns: a name must match as a whole, never a prefix of it.
var (
	locationRE = regexp.MustCompile(`^projects/([A-Za-z0-9:.-]+)/locations/([A-Za-z0-9-]+)$`)
	queueRE    = regexp.MustCompile(`^projects/([A-Za-z0-9:.-]+)/locations/([A-Za-z0-9-]+)/queues/([^/]*)$`)
	taskRE     = regexp.MustCompile(`^(projects/[A-Za-z0-9:.-]+/locations/[A-Za-z0-9-]+/queues/[^/]*)/tasks/([^/]*)$`)
	// The ID patterns check the length apart: a counted repetition such as
	// {1,500} compiles into hundreds of states, which cost every process
	// that links this package milliseconds at start-up.
	queueIDRE = regexp.MustCompile(`^[A-Za-z0-9-]+$`)
	taskIDRE  = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)
)

// queueName is a parsed queue resource name.
type queueName struct {
	full, location, id string
}

func parseLocation(s string) error {
	if !locationRE.MatchString(s) {
		return fmt.Errorf("%q is not a location name; want projects/PROJECT_ID/locations/LOCATION_ID", s)
	}
	return nil
}

func parseQueueName(s string) (queueName, error) {
	m := queueRE.FindStringSubmatch(s)
	if m == nil {
		return queueName{}, fmt.Errorf("%q is not a queue name; want projects/PROJECT_ID/locations/LOCATION_ID/queues/QUEUE_ID", s)
	}
	if m[1] == emuproto.Wildcard || m[2] == emuproto.Wildcard {
		return queueName{}, fmt.Errorf("%q names the wildcard %q as a project or location; a queue lives in one project and location", s, emuproto.Wildcard)
	}
	if len(m[3]) > 100 || !queueIDRE.MatchString(m[3]) {
		return queueName{}, fmt.Errorf("queue ID %q must be 1 to 100 characters from [A-Za-z0-9-]", m[3])
	}
	return queueName{full: s, location: s[:len(s)-len("/queues/")-len(m[3])], id: m[3]}, nil
}

// parseTaskName returns the queue part and the task ID of a full task name.
func parseTaskName(s string) (queue, id string, err error) {
	m := taskRE.FindStringSubmatch(s)
	if m == nil {
		return "", "", fmt.Errorf("%q is not a task name; want projects/PROJECT_ID/locations/LOCATION_ID/queues/QUEUE_ID/tasks/TASK_ID", s)
	}
	if _, err := parseQueueName(m[1]); err != nil {
		return "", "", err
	}
	if len(m[2]) > 500 || !taskIDRE.MatchString(m[2]) {
		return "", "", fmt.Errorf("task ID %q must be 1 to 500 characters from [A-Za-z0-9_-]", shorten(m[2]))
	}
	return m[1], m[2], nil
}

func shorten(s string) string {
	if len(s) > 80 {
		return s[:77] + "..."
	}
	return s
}

func invalid(format string, args ...any) error {
	return status.Errorf(codes.InvalidArgument, format, args...)
}

// validateTask checks a task against the service's rules for CreateTask.
// queue is the request's parent; now is the clock's current time.
func validateTask(t *cloudtaskspb.Task, queue string, now time.Time) error {
	if t == nil {
		return invalid("task is required")
	}
	if t.GetName() != "" {
		q, _, err := parseTaskName(t.GetName())
		if err != nil {
			return invalid("task.name: %v", err)
		}
		if q != queue {
			return invalid("task.name %q is not in the queue %q named by parent", t.GetName(), queue)
		}
	}
	if t.GetAppEngineHttpRequest() != nil {
		return status.Error(codes.Unimplemented, "App Engine tasks are not emulated; use http_request")
	}
	hr := t.GetHttpRequest()
	if hr == nil {
		return invalid("task.http_request is required")
	}
	if err := validateHTTPRequest(hr); err != nil {
		return err
	}
	if t.ScheduleTime != nil {
		if err := t.ScheduleTime.CheckValid(); err != nil {
			return invalid("task.schedule_time: %v", err)
		}
		if st := t.ScheduleTime.AsTime(); st.Sub(now) > maxScheduleAhead {
			return invalid("task.schedule_time %s is more than 30 days after now (%s)", st.UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339))
		}
	}
	if t.DispatchDeadline != nil {
		if err := t.DispatchDeadline.CheckValid(); err != nil {
			return invalid("task.dispatch_deadline: %v", err)
		}
		if d := t.DispatchDeadline.AsDuration(); d < minDispatchDeadline || d > maxDispatchDeadline {
			return invalid("task.dispatch_deadline %s must be between 15s and 30m for HTTP tasks", d)
		}
	}
	if t.RetryConfig != nil {
		if err := validateRetryConfig(t.RetryConfig); err != nil {
			return invalid("task.retry_config: %v", err)
		}
	}
	if t.DispatchCount != 0 || t.ResponseCount != 0 || t.FirstAttempt != nil || t.LastAttempt != nil || t.CreateTime != nil {
		return invalid("task: create_time, dispatch_count, response_count, first_attempt and last_attempt are output only")
	}
	if n := tasksize.Of(t); n > tasksize.Max {
		return invalid("task is %d bytes (its wire size); the limit for HTTP tasks is %d bytes (1 MB)", n, tasksize.Max)
	}
	return nil
}

func validateHTTPRequest(hr *cloudtaskspb.HttpRequest) error {
	if hr.Url == "" {
		return invalid("task.http_request.url is required")
	}
	if len(hr.Url) > maxURLLength {
		return invalid("task.http_request.url is %d characters; at most %d are allowed", len(hr.Url), maxURLLength)
	}
	u, err := url.Parse(hr.Url)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return invalid("task.http_request.url %q must be an absolute http:// or https:// URL", shorten(hr.Url))
	}
	switch hr.HttpMethod {
	case cloudtaskspb.HttpMethod_HTTP_METHOD_UNSPECIFIED, cloudtaskspb.HttpMethod_POST, cloudtaskspb.HttpMethod_PUT, cloudtaskspb.HttpMethod_PATCH:
	default:
		if len(hr.Body) > 0 {
			return invalid("task.http_request.body is allowed only with POST, PUT or PATCH, not %s", hr.HttpMethod)
		}
	}
	size := 0
	for k, v := range hr.Headers {
		size += len(k) + len(v)
		if k == "" || strings.ContainsAny(k, " :\r\n") || strings.ContainsAny(v, "\r\n") {
			return invalid("task.http_request.headers: %q is not a valid header", shorten(k))
		}
	}
	if size >= maxHeadersSize {
		return invalid("task.http_request.headers are %d bytes; they must be under 80 KB", size)
	}
	if tok := hr.GetOidcToken(); tok != nil && tok.ServiceAccountEmail == "" {
		return invalid("task.http_request.oidc_token.service_account_email is required")
	}
	if tok := hr.GetOauthToken(); tok != nil && tok.ServiceAccountEmail == "" {
		return invalid("task.http_request.oauth_token.service_account_email is required")
	}
	return nil
}

func validateRateLimits(r *cloudtaskspb.RateLimits) error {
	if r == nil {
		return nil
	}
	if r.MaxDispatchesPerSecond < 0 || r.MaxDispatchesPerSecond > maxRate {
		return fmt.Errorf("max_dispatches_per_second %g must be between 0 and %d", r.MaxDispatchesPerSecond, maxRate)
	}
	if r.MaxConcurrentDispatches < 0 || r.MaxConcurrentDispatches > maxConcurrent {
		return fmt.Errorf("max_concurrent_dispatches %d must be between 0 and %d", r.MaxConcurrentDispatches, maxConcurrent)
	}
	return nil
}

func validateRetryConfig(r *cloudtaskspb.RetryConfig) error {
	if r == nil {
		return nil
	}
	if r.MaxAttempts < -1 {
		return fmt.Errorf("max_attempts %d must be -1 (unlimited) or more", r.MaxAttempts)
	}
	if r.MaxDoublings < 0 {
		return fmt.Errorf("max_doublings %d must not be negative", r.MaxDoublings)
	}
	for _, d := range []struct {
		name string
		v    *durationpb.Duration
	}{{"max_retry_duration", r.MaxRetryDuration}, {"min_backoff", r.MinBackoff}, {"max_backoff", r.MaxBackoff}} {
		if d.v == nil {
			continue
		}
		if err := d.v.CheckValid(); err != nil || d.v.AsDuration() < 0 {
			return fmt.Errorf("%s %s must be a non-negative duration", d.name, d.v.AsDuration())
		}
	}
	if r.MinBackoff != nil && r.MaxBackoff != nil && r.MaxBackoff.AsDuration() > 0 && r.MinBackoff.AsDuration() > r.MaxBackoff.AsDuration() {
		return fmt.Errorf("min_backoff %s must not exceed max_backoff %s", r.MinBackoff.AsDuration(), r.MaxBackoff.AsDuration())
	}
	return nil
}
