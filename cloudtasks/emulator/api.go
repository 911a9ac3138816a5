package emulator

import (
	"context"
	"strings"

	"cloud.google.com/go/cloudtasks/apiv2/cloudtaskspb"
	"cloud.google.com/go/iam/apiv1/iampb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// service implements the CloudTasks gRPC service over a Server.
type service struct {
	cloudtaskspb.UnimplementedCloudTasksServer
	s *Server
}

func (v *service) CreateQueue(_ context.Context, req *cloudtaskspb.CreateQueueRequest) (*cloudtaskspb.Queue, error) {
	if err := parseLocation(req.GetParent()); err != nil {
		return nil, invalid("parent: %v", err)
	}
	if req.GetQueue() == nil {
		return nil, invalid("queue is required")
	}
	if qn, err := parseQueueName(req.Queue.GetName()); err == nil && qn.location != req.Parent {
		return nil, invalid("queue.name %q is not in the location %q named by parent", req.Queue.Name, req.Parent)
	}
	if req.Queue.State != cloudtaskspb.Queue_STATE_UNSPECIFIED || req.Queue.PurgeTime != nil {
		return nil, invalid("queue.state and queue.purge_time are output only")
	}
	return v.s.createQueue(req.Queue)
}

// withQueue runs fn on the named queue under the server's lock, or
// returns the queue lookup's error (InvalidArgument, NotFound).
func withQueue[T any](s *Server, name string, fn func(*queue) (T, error)) (T, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	q, err := s.queueLocked(name)
	if err != nil {
		var zero T
		return zero, err
	}
	return fn(q)
}

func (v *service) GetQueue(_ context.Context, req *cloudtaskspb.GetQueueRequest) (*cloudtaskspb.Queue, error) {
	return withQueue(v.s, req.GetName(), func(q *queue) (*cloudtaskspb.Queue, error) {
		return proto.Clone(q.pb).(*cloudtaskspb.Queue), nil
	})
}

func (v *service) ListQueues(_ context.Context, req *cloudtaskspb.ListQueuesRequest) (*cloudtaskspb.ListQueuesResponse, error) {
	if err := parseLocation(req.GetParent()); err != nil {
		return nil, invalid("parent: %v", err)
	}
	want, err := parseQueueFilter(req.Filter)
	if err != nil {
		return nil, err
	}
	s := v.s
	pr, err := s.startPage(pageScope("ListQueues", req.Parent, req.Filter), req.PageToken, req.PageSize, maxQueuePageSize)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var names []string
	for n := range s.queues {
		if inLocation(n, req.Parent) && n > pr.after && want.matches(s.queues[n].pb) {
			names = append(names, n)
		}
	}
	resp := &cloudtaskspb.ListQueuesResponse{}
	resp.Queues, resp.NextPageToken = page(s, pr, names, func(n string) *cloudtaskspb.Queue {
		return proto.Clone(s.queues[n].pb).(*cloudtaskspb.Queue)
	})
	return resp, nil
}

// updatable are the Queue fields UpdateQueue may change.
var updatable = map[string]bool{
	"rate_limits": true, "retry_config": true, "stackdriver_logging_config": true,
	"http_target": true, "app_engine_routing_override": true,
}

func (v *service) UpdateQueue(_ context.Context, req *cloudtaskspb.UpdateQueueRequest) (*cloudtaskspb.Queue, error) {
	in := req.GetQueue()
	if in == nil {
		return nil, invalid("queue is required")
	}
	if _, err := parseQueueName(in.Name); err != nil {
		return nil, invalid("queue.name: %v", err)
	}
	paths := req.GetUpdateMask().GetPaths()
	for _, p := range paths {
		if !updatable[strings.SplitN(p, ".", 2)[0]] {
			return nil, invalid("update_mask path %q cannot be updated; allowed: rate_limits, retry_config, stackdriver_logging_config, http_target, app_engine_routing_override and their fields", p)
		}
	}
	s := v.s
	s.mu.Lock()
	defer s.mu.Unlock()
	q := s.queues[in.Name]
	if q == nil {
		// The service creates a queue that UpdateQueue names but that does not exist.
		c := proto.Clone(in).(*cloudtaskspb.Queue)
		c.State, c.PurgeTime = cloudtaskspb.Queue_STATE_UNSPECIFIED, nil
		return s.createQueueLocked(c)
	}
	next := proto.Clone(q.pb).(*cloudtaskspb.Queue)
	if len(paths) == 0 {
		for p := range updatable {
			paths = append(paths, p)
		}
	}
	for _, p := range paths {
		if err := copyPath(next, in, p); err != nil {
			return nil, invalid("update_mask path %q: %v", p, err)
		}
	}
	if err := validateRateLimits(next.RateLimits); err != nil {
		return nil, invalid("queue.rate_limits: %v", err)
	}
	if err := validateRetryConfig(next.RetryConfig); err != nil {
		return nil, invalid("queue.retry_config: %v", err)
	}
	fillQueueDefaults(next)
	q.pb = next
	q.tokens = min(q.tokens, float64(next.RateLimits.MaxBurstSize))
	s.poke()
	return proto.Clone(next).(*cloudtaskspb.Queue), nil
}

// copyPath copies the field at a dotted path from src to dst.
func copyPath(dst, src proto.Message, path string) error {
	d, sr := dst.ProtoReflect(), src.ProtoReflect()
	parts := strings.Split(path, ".")
	for i, name := range parts {
		fd := d.Descriptor().Fields().ByName(protoreflect.Name(name))
		if fd == nil {
			return status.Errorf(codes.InvalidArgument, "no field %q", name)
		}
		if i == len(parts)-1 {
			if sr.Has(fd) {
				d.Set(fd, sr.Get(fd))
			} else {
				d.Clear(fd)
			}
			return nil
		}
		if fd.Message() == nil {
			return status.Errorf(codes.InvalidArgument, "field %q has no subfields", name)
		}
		d = d.Mutable(fd).Message()
		sr = sr.Get(fd).Message()
	}
	return nil
}

func (v *service) DeleteQueue(_ context.Context, req *cloudtaskspb.DeleteQueueRequest) (*emptypb.Empty, error) {
	s := v.s
	return withQueue(s, req.GetName(), func(q *queue) (*emptypb.Empty, error) {
		now := s.clock.Now()
		for _, t := range q.tasks {
			s.removeTaskLocked(t, now)
		}
		delete(s.queues, q.pb.Name)
		if s.cfg.QueueReuseWindow > 0 {
			s.queueNames[q.pb.Name] = now.Add(s.cfg.QueueReuseWindow)
		}
		return &emptypb.Empty{}, nil
	})
}

func (v *service) PurgeQueue(_ context.Context, req *cloudtaskspb.PurgeQueueRequest) (*cloudtaskspb.Queue, error) {
	s := v.s
	return withQueue(s, req.GetName(), func(q *queue) (*cloudtaskspb.Queue, error) {
		now := s.clock.Now()
		// Purged names follow the same reuse window as deleted ones.
		for _, t := range q.tasks {
			s.removeTaskLocked(t, now)
		}
		q.pb.PurgeTime = timestamppb.New(now)
		return proto.Clone(q.pb).(*cloudtaskspb.Queue), nil
	})
}

func (v *service) setState(name string, state cloudtaskspb.Queue_State) (*cloudtaskspb.Queue, error) {
	s := v.s
	return withQueue(s, name, func(q *queue) (*cloudtaskspb.Queue, error) {
		if q.pb.State != state {
			q.pb = proto.Clone(q.pb).(*cloudtaskspb.Queue)
			q.pb.State = state
			q.refill(s.clock.Now())
		}
		s.poke()
		return proto.Clone(q.pb).(*cloudtaskspb.Queue), nil
	})
}

func (v *service) PauseQueue(_ context.Context, req *cloudtaskspb.PauseQueueRequest) (*cloudtaskspb.Queue, error) {
	return v.setState(req.GetName(), cloudtaskspb.Queue_PAUSED)
}

func (v *service) ResumeQueue(_ context.Context, req *cloudtaskspb.ResumeQueueRequest) (*cloudtaskspb.Queue, error) {
	return v.setState(req.GetName(), cloudtaskspb.Queue_RUNNING)
}

func (v *service) CreateTask(_ context.Context, req *cloudtaskspb.CreateTaskRequest) (*cloudtaskspb.Task, error) {
	s := v.s
	// Validate outside the lock: it is the costly part and needs no state.
	// A task scheduled near the 30-day limit is checked against the time
	// before the lock, which differs from the time inside by microseconds.
	validated := false
	if _, err := parseQueueName(req.GetParent()); err == nil {
		if err := validateTask(req.Task, req.Parent, s.clock.Now()); err != nil {
			return nil, err
		}
		validated = true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	t, err := s.createTaskLocked(req, validated)
	if err != nil {
		return nil, err
	}
	return t.snapshot(req.ResponseView), nil
}

func (v *service) GetTask(_ context.Context, req *cloudtaskspb.GetTaskRequest) (*cloudtaskspb.Task, error) {
	s := v.s
	s.mu.Lock()
	defer s.mu.Unlock()
	t, err := s.taskLocked(req.GetName())
	if err != nil {
		return nil, err
	}
	return t.snapshot(req.ResponseView), nil
}

func (v *service) ListTasks(_ context.Context, req *cloudtaskspb.ListTasksRequest) (*cloudtaskspb.ListTasksResponse, error) {
	s := v.s
	pr, err := s.startPage(pageScope("ListTasks", req.GetParent()), req.PageToken, req.PageSize, maxTaskPageSize)
	if err != nil {
		return nil, err
	}
	return withQueue(s, req.GetParent(), func(q *queue) (*cloudtaskspb.ListTasksResponse, error) {
		resp := &cloudtaskspb.ListTasksResponse{}
		q.ascendAfter(pr.after, func(t *task) bool {
			if len(resp.Tasks) == pr.size {
				resp.NextPageToken = s.next(pr, resp.Tasks[pr.size-1].Name)
				return false
			}
			resp.Tasks = append(resp.Tasks, t.snapshot(req.ResponseView))
			return true
		})
		return resp, nil
	})
}

func (v *service) DeleteTask(_ context.Context, req *cloudtaskspb.DeleteTaskRequest) (*emptypb.Empty, error) {
	s := v.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.deleteTaskLocked(req.GetName()); err != nil {
		return nil, err
	}
	return &emptypb.Empty{}, nil
}

func (v *service) RunTask(_ context.Context, req *cloudtaskspb.RunTaskRequest) (*cloudtaskspb.Task, error) {
	s := v.s
	if s.cfg.DisableDelivery {
		return nil, status.Error(codes.FailedPrecondition, "RunTask: delivery is disabled in this emulator (Config.DisableDelivery)")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	t, err := s.taskLocked(req.GetName())
	if err != nil {
		return nil, err
	}
	// RunTask ignores the queue's state and rate limits, and dispatches a
	// task that is already running once more, as the service does.
	t.q.unschedule(t)
	s.startAttemptLocked(t, s.clock.Now())
	return t.snapshot(req.ResponseView), nil
}

func (v *service) BatchCreateTasks(_ context.Context, req *cloudtaskspb.BatchCreateTasksRequest) (*longrunningOp, error) {
	return v.s.batchCreate(req)
}

func (v *service) BatchDeleteTasks(_ context.Context, req *cloudtaskspb.BatchDeleteTasksRequest) (*longrunningOp, error) {
	return v.s.batchDelete(req)
}

func (v *service) GetIamPolicy(_ context.Context, req *iampb.GetIamPolicyRequest) (*iampb.Policy, error) {
	return withQueue(v.s, req.GetResource(), func(q *queue) (*iampb.Policy, error) {
		return q.iamPolicy(), nil
	})
}

func (v *service) SetIamPolicy(_ context.Context, req *iampb.SetIamPolicyRequest) (*iampb.Policy, error) {
	if req.GetPolicy() == nil {
		return nil, invalid("policy is required")
	}
	s := v.s
	return withQueue(s, req.GetResource(), func(q *queue) (*iampb.Policy, error) {
		s.seq++
		return q.setIAMPolicy(req.Policy, req.GetUpdateMask().GetPaths(), s.seq)
	})
}

func (v *service) TestIamPermissions(_ context.Context, req *iampb.TestIamPermissionsRequest) (*iampb.TestIamPermissionsResponse, error) {
	for i, p := range req.GetPermissions() {
		if p == "" || strings.Contains(p, "*") {
			return nil, invalid("permissions[%d] %q: permissions with wildcards (*) are not allowed", i, p)
		}
	}
	// Policies are stored, not enforced: every caller holds every permission.
	return withQueue(v.s, req.GetResource(), func(*queue) (*iampb.TestIamPermissionsResponse, error) {
		return &iampb.TestIamPermissionsResponse{Permissions: append([]string(nil), req.GetPermissions()...)}, nil
	})
}

func (v *service) GetCmekConfig(context.Context, *cloudtaskspb.GetCmekConfigRequest) (*cloudtaskspb.CmekConfig, error) {
	return nil, status.Error(codes.Unimplemented, "GetCmekConfig: customer-managed encryption keys are not emulated")
}

func (v *service) UpdateCmekConfig(context.Context, *cloudtaskspb.UpdateCmekConfigRequest) (*cloudtaskspb.CmekConfig, error) {
	return nil, status.Error(codes.Unimplemented, "UpdateCmekConfig: customer-managed encryption keys are not emulated")
}
