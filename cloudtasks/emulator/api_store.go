package emulator

import (
	"math/rand/v2"
	"strconv"
	"time"

	"cloud.google.com/go/cloudtasks/apiv2/cloudtaskspb"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
)

func notFound(format string, args ...any) error {
	return grpcstatus.Errorf(codes.NotFound, format, args...)
}

func (s *Server) createQueue(pb *cloudtaskspb.Queue) (*cloudtaskspb.Queue, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.createQueueLocked(pb)
}

func (s *Server) createQueueLocked(pb *cloudtaskspb.Queue) (*cloudtaskspb.Queue, error) {
	qn, err := parseQueueName(pb.GetName())
	if err != nil {
		return nil, invalid("queue.name: %v", err)
	}
	if err := validateRateLimits(pb.RateLimits); err != nil {
		return nil, invalid("queue.rate_limits: %v", err)
	}
	if err := validateRetryConfig(pb.RetryConfig); err != nil {
		return nil, invalid("queue.retry_config: %v", err)
	}
	if _, ok := s.queues[qn.full]; ok {
		return nil, grpcstatus.Errorf(codes.AlreadyExists, "queue %s already exists", qn.full)
	}
	now := s.clock.Now()
	if until, ok := s.queueNames[qn.full]; ok {
		if now.Before(until) {
			return nil, grpcstatus.Errorf(codes.FailedPrecondition, "queue %s was deleted recently; its name can be used again at %s", qn.full, until.UTC().Format(time.RFC3339))
		}
		delete(s.queueNames, qn.full)
	}
	pb = proto.Clone(pb).(*cloudtaskspb.Queue)
	state := pb.State
	pb.PurgeTime = nil
	pb.State = cloudtaskspb.Queue_RUNNING
	if state == cloudtaskspb.Queue_PAUSED {
		pb.State = state
	}
	fillQueueDefaults(pb)
	s.queues[qn.full] = newQueue(pb, qn.id, now)
	return proto.Clone(pb).(*cloudtaskspb.Queue), nil
}

func (s *Server) queueLocked(name string) (*queue, error) {
	if _, err := parseQueueName(name); err != nil {
		return nil, invalid("%v", err)
	}
	q := s.queues[name]
	if q == nil {
		return nil, notFound("queue %s does not exist", name)
	}
	return q, nil
}

// nameTaken reports whether a task name is in use or still remembered,
// forgetting it once its window has passed.
func (s *Server) nameTakenLocked(q *queue, name string, now time.Time) bool {
	if _, ok := q.tasks[name]; ok {
		return true
	}
	until, ok := s.names[name]
	if !ok {
		return false
	}
	if now.Before(until) {
		return true
	}
	delete(s.names, name)
	return false
}

// rememberLocked keeps a departed task's name taken for the reuse window.
func (s *Server) rememberLocked(name string, now time.Time) {
	if s.cfg.NameReuseWindow < 0 {
		return
	}
	s.names[name] = now.Add(s.cfg.NameReuseWindow)
	if len(s.names) >= 2*s.sweepAt+1024 {
		for n, until := range s.names {
			if !now.Before(until) {
				delete(s.names, n)
			}
		}
		s.sweepAt = len(s.names)
	}
}

// removeTaskLocked deletes a task from the store and remembers its name.
func (s *Server) removeTaskLocked(t *task, now time.Time) {
	if t.removed {
		return
	}
	t.removed = true
	t.q.unschedule(t)
	t.q.remove(t)
	s.rememberLocked(t.pb.Name, now)
}

// createTaskLocked validates and stores req's task. It takes ownership of
// the request's task message.
// The caller has either validated the task (validated) or not.
func (s *Server) createTaskLocked(req *cloudtaskspb.CreateTaskRequest, validated bool) (*task, error) {
	q, err := s.queueLocked(req.GetParent())
	if err != nil {
		return nil, err
	}
	now := s.clock.Now()
	pb := req.Task
	if !validated {
		if err := validateTask(pb, q.pb.Name, now); err != nil {
			return nil, err
		}
	}
	if pb.Name == "" {
		for {
			pb.Name = q.pb.Name + "/tasks/" + strconv.FormatUint(rand.Uint64()>>1, 10)
			if !s.nameTakenLocked(q, pb.Name, now) {
				break
			}
		}
	} else if s.nameTakenLocked(q, pb.Name, now) {
		return nil, grpcstatus.Errorf(codes.AlreadyExists, "task %s already exists or was executed, deleted or purged within the name reuse window (%s)", pb.Name, s.cfg.NameReuseWindow)
	}
	sched := now
	if pb.ScheduleTime != nil && pb.ScheduleTime.AsTime().After(now) {
		sched = pb.ScheduleTime.AsTime().Truncate(time.Microsecond)
	}
	hr := pb.GetHttpRequest()
	hr.Url = q.intern(hr.Url)
	headers := q.compactHeaders(hr.Headers)
	hr.Headers = nil
	if a, ok := hr.AuthorizationHeader.(*cloudtaskspb.HttpRequest_OidcToken); ok {
		hr.AuthorizationHeader = q.internOIDC(a)
	}
	pb.ScheduleTime, pb.CreateTime, pb.View = nil, nil, cloudtaskspb.Task_VIEW_UNSPECIFIED
	s.seq++
	t := &task{pb: pb, q: q, schedule: sched.UnixNano(), created: now.Truncate(time.Second).UnixNano(), seq: s.seq, index: -1, headers: headers}
	q.add(t)
	q.push(t)
	if q.pending[0] == t {
		s.poke()
	}
	return t, nil
}

func (s *Server) taskLocked(name string) (*task, error) {
	qname, _, err := parseTaskName(name)
	if err != nil {
		return nil, invalid("%v", err)
	}
	var t *task
	if q := s.queues[qname]; q != nil {
		t = q.tasks[name]
	}
	if t == nil || s.expiredLocked(t, s.clock.Now()) {
		return nil, notFound("task %s does not exist (it may have been executed, deleted or purged)", name)
	}
	return t, nil
}

// expiredLocked deletes t if it has outlived the service's 31-day task
// retention without an attempt in flight (a task that waited in a paused
// queue, say) and reports whether it did. Attempts check the retention
// when they finish.
func (s *Server) expiredLocked(t *task, now time.Time) bool {
	if t.running > 0 || now.Sub(time.Unix(0, t.created)) < maxTaskRetention {
		return false
	}
	s.removeTaskLocked(t, now)
	return true
}

func (s *Server) deleteTaskLocked(name string) error {
	t, err := s.taskLocked(name)
	if err != nil {
		return err
	}
	s.removeTaskLocked(t, s.clock.Now())
	return nil
}

// snapshot returns a copy of the task for a response. Nested messages of
// the stored proto are never mutated in place, so sharing them is safe.
func (t *task) snapshot(view cloudtaskspb.Task_View) *cloudtaskspb.Task {
	if view == cloudtaskspb.Task_VIEW_UNSPECIFIED {
		view = cloudtaskspb.Task_BASIC
	}
	p := t.pb
	out := &cloudtaskspb.Task{
		Name:             p.Name,
		ScheduleTime:     timestamppb.New(time.Unix(0, t.schedule)),
		CreateTime:       timestamppb.New(time.Unix(0, t.created)),
		DispatchDeadline: p.DispatchDeadline,
		DispatchCount:    p.DispatchCount,
		ResponseCount:    p.ResponseCount,
		FirstAttempt:     p.FirstAttempt,
		LastAttempt:      p.LastAttempt,
		View:             view,
		RetryConfig:      p.RetryConfig,
	}
	if out.DispatchDeadline == nil {
		out.DispatchDeadline = durationOf(defaultDeadline)
	}
	if hr := p.GetHttpRequest(); hr != nil {
		c := &cloudtaskspb.HttpRequest{
			Url:        hr.Url,
			HttpMethod: hr.HttpMethod,
			Headers:    t.headerMap(),
		}
		if c.HttpMethod == cloudtaskspb.HttpMethod_HTTP_METHOD_UNSPECIFIED {
			c.HttpMethod = cloudtaskspb.HttpMethod_POST
		}
		switch a := hr.AuthorizationHeader.(type) {
		case *cloudtaskspb.HttpRequest_OidcToken:
			c.AuthorizationHeader = &cloudtaskspb.HttpRequest_OidcToken{OidcToken: a.OidcToken}
		case *cloudtaskspb.HttpRequest_OauthToken:
			c.AuthorizationHeader = &cloudtaskspb.HttpRequest_OauthToken{OauthToken: a.OauthToken}
		}
		if view == cloudtaskspb.Task_FULL {
			c.Body = hr.Body
		}
		out.MessageType = &cloudtaskspb.Task_HttpRequest{HttpRequest: c}
	}
	return out
}

// httpStatusCode maps a worker's HTTP status to the rpc code recorded in
// the task's last attempt.
func httpStatusCode(code int) *status.Status {
	c := codes.Unknown
	switch {
	case code >= 200 && code < 300:
		c = codes.OK
	case code == 400:
		c = codes.InvalidArgument
	case code == 401:
		c = codes.Unauthenticated
	case code == 403:
		c = codes.PermissionDenied
	case code == 404:
		c = codes.NotFound
	case code == 409:
		c = codes.Aborted
	case code == 429:
		c = codes.ResourceExhausted
	case code == 499:
		c = codes.Canceled
	case code == 501:
		c = codes.Unimplemented
	case code == 503:
		c = codes.Unavailable
	case code == 504:
		c = codes.DeadlineExceeded
	case code >= 500:
		c = codes.Internal
	case code >= 400:
		c = codes.FailedPrecondition
	}
	return &status.Status{Code: int32(c), Message: "HTTP status " + strconv.Itoa(code)}
}
