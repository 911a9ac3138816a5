package emulator

import (
	"context"
	"strings"
	"time"

	"cloud.google.com/go/cloudtasks/apiv2/cloudtaskspb"
	"cloud.google.com/go/longrunning/autogen/longrunningpb"
	"github.com/google/uuid"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

type longrunningOp = longrunningpb.Operation

// finishOpLocked stores a finished operation, named after the queue's
// location, and returns a copy. A repeated request ID returns the first
// operation, as the service does. A non-nil opErr is the operation's error
// in place of resp.
func (s *Server) finishOpLocked(parent, requestID string, meta, resp proto.Message, opErr *rpcstatus.Status) (*longrunningOp, error) {
	loc := parent
	if qn, err := parseQueueName(parent); err == nil {
		loc = qn.location
	}
	m, err := anypb.New(meta)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "operation metadata: %v", err)
	}
	r, err := anypb.New(resp)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "operation response: %v", err)
	}
	op := &longrunningOp{
		Name:     loc + "/operations/" + uuid.NewString(),
		Metadata: m,
		Done:     true,
		Result:   &longrunningpb.Operation_Response{Response: r},
	}
	if opErr != nil {
		op.Result = &longrunningpb.Operation_Error{Error: opErr}
	}
	s.ops[op.Name] = op
	if requestID != "" {
		s.opsByReq[requestID] = op.Name
	}
	s.opsDone = append(s.opsDone, finishedOp{name: op.Name, requestID: requestID, at: s.clock.Now()})
	s.expireOpsLocked()
	return proto.Clone(op).(*longrunningOp), nil
}

// finishedOp is an operation's entry in the order operations finished.
type finishedOp struct {
	name, requestID string
	at              time.Time
}

// expireOpsLocked forgets finished operations, and the request IDs that
// lead to them, once they are older than Config.OperationRetention or
// beyond the newest Config.OperationLimit. Operations finish in clock
// order, so the oldest are at the front.
func (s *Server) expireOpsLocked() {
	now := s.clock.Now()
	n := 0
	for n < len(s.opsDone) && (len(s.opsDone)-n > s.cfg.OperationLimit || now.Sub(s.opsDone[n].at) >= s.cfg.OperationRetention) {
		f := s.opsDone[n]
		delete(s.ops, f.name)
		if f.requestID != "" && s.opsByReq[f.requestID] == f.name {
			delete(s.opsByReq, f.requestID)
		}
		n++
	}
	if n > 0 {
		// Copy rather than reslice, so the array does not grow for ever.
		s.opsDone = append(s.opsDone[:0:0], s.opsDone[n:]...)
	}
}

func (s *Server) opForRequestLocked(requestID string) *longrunningOp {
	if requestID == "" {
		return nil
	}
	s.expireOpsLocked()
	if name, ok := s.opsByReq[requestID]; ok {
		if op := s.ops[name]; op != nil {
			return proto.Clone(op).(*longrunningOp)
		}
	}
	return nil
}

func (s *Server) batchCreate(req *cloudtaskspb.BatchCreateTasksRequest) (*longrunningOp, error) {
	if _, err := parseQueueName(req.GetParent()); err != nil {
		return nil, invalid("parent: %v", err)
	}
	if n := len(req.Requests); n == 0 || n > maxBatchCreate {
		return nil, invalid("requests holds %d requests; a batch holds 1 to %d", n, maxBatchCreate)
	}
	for i, r := range req.Requests {
		if r.GetParent() != req.Parent {
			return nil, invalid("requests[%d].parent %q differs from parent %q; a batch targets one queue", i, r.GetParent(), req.Parent)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if op := s.opForRequestLocked(req.RequestId); op != nil {
		return op, nil
	}
	if _, err := s.queueLocked(req.Parent); err != nil {
		return nil, err
	}
	now := timestamppb.New(s.clock.Now())
	meta := &cloudtaskspb.BatchCreateTasksMetadata{StartTime: now, EndTime: now}
	resp := &cloudtaskspb.BatchCreateTasksResponse{}
	for i, r := range req.Requests {
		var t *task
		err := s.batchRequestLocked("BatchCreateTasks", i, func() (err error) {
			t, err = s.createTaskLocked(r, false)
			return err
		})
		if err != nil {
			if meta.FailedRequests == nil {
				meta.FailedRequests = make(map[int32]*rpcstatus.Status)
			}
			meta.FailedRequests[int32(i)] = status.Convert(err).Proto()
			continue
		}
		resp.Tasks = append(resp.Tasks, t.snapshot(r.ResponseView))
	}
	// FAILED is documented as the whole operation failing to complete (an
	// internal error); requests that fail one by one make a finished batch
	// PARTIALLY_SUCCEEDED, even when none succeeded.
	meta.State = cloudtaskspb.BatchCreateTasksMetadata_SUCCEEDED
	if len(meta.FailedRequests) > 0 {
		meta.State = cloudtaskspb.BatchCreateTasksMetadata_PARTIALLY_SUCCEEDED
	}
	return s.finishOpLocked(req.Parent, req.RequestId, meta, resp, nil)
}

// batchRequestLocked applies request i of a batch call of method with do,
// under the fault plan's PerRequest rules: a hit request fails with the
// rule's code, before do runs or, with CommitThenFail, after it succeeded.
func (s *Server) batchRequestLocked(method string, i int, do func() error) error {
	d := s.faults.decideRequest(method)
	if d.code != codes.OK && !d.commitThenFail {
		return status.Errorf(d.code, "%s request %d: injected fault", method, i)
	}
	if err := do(); err != nil {
		return err
	}
	if d.code != codes.OK {
		return status.Errorf(d.code, "%s request %d: injected fault after the request took effect", method, i)
	}
	return nil
}

func (s *Server) batchDelete(req *cloudtaskspb.BatchDeleteTasksRequest) (*longrunningOp, error) {
	if _, err := parseQueueName(req.GetParent()); err != nil {
		return nil, invalid("parent: %v", err)
	}
	if n := len(req.Names); n == 0 || n > maxBatchDelete {
		return nil, invalid("names holds %d names; a batch holds 1 to %d", n, maxBatchDelete)
	}
	for i, n := range req.Names {
		if !strings.HasPrefix(n, req.Parent+"/tasks/") {
			return nil, invalid("names[%d] %q is not a task of parent %q", i, n, req.Parent)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if op := s.opForRequestLocked(req.RequestId); op != nil {
		return op, nil
	}
	if _, err := s.queueLocked(req.Parent); err != nil {
		return nil, err
	}
	now := timestamppb.New(s.clock.Now())
	meta := &cloudtaskspb.BatchDeleteTasksMetadata{StartTime: now, EndTime: now}
	for i, n := range req.Names {
		if err := s.batchRequestLocked("BatchDeleteTasks", i, func() error { return s.deleteTaskLocked(n) }); err != nil {
			if meta.FailedRequests == nil {
				meta.FailedRequests = make(map[int32]*rpcstatus.Status)
			}
			meta.FailedRequests[int32(i)] = status.Convert(err).Proto()
		}
	}
	// As documented for BatchDeleteTasksMetadata: failures make the batch
	// PARTIALLY_SUCCEEDED, and when every request failed the operation's
	// error is ABORTED with this message.
	meta.State = cloudtaskspb.BatchDeleteTasksMetadata_SUCCEEDED
	var opErr *rpcstatus.Status
	if n := len(meta.FailedRequests); n > 0 {
		meta.State = cloudtaskspb.BatchDeleteTasksMetadata_PARTIALLY_SUCCEEDED
		if n == len(req.Names) {
			opErr = status.New(codes.Aborted, "None of the requests succeeded, refer to BatchDeleteTasksMetadata.failed_requests for individual error details").Proto()
		}
	}
	return s.finishOpLocked(req.Parent, req.RequestId, meta, &emptypb.Empty{}, opErr)
}

// operations implements google.longrunning.Operations for the batch RPCs.
// Batches finish before their RPC returns, so every operation is done.
type operations struct {
	longrunningpb.UnimplementedOperationsServer
	s *Server
}

func (o *operations) GetOperation(_ context.Context, req *longrunningpb.GetOperationRequest) (*longrunningOp, error) {
	o.s.mu.Lock()
	defer o.s.mu.Unlock()
	o.s.expireOpsLocked()
	op := o.s.ops[req.GetName()]
	if op == nil {
		return nil, notFound("operation %s does not exist", req.GetName())
	}
	return proto.Clone(op).(*longrunningOp), nil
}

func (o *operations) WaitOperation(ctx context.Context, req *longrunningpb.WaitOperationRequest) (*longrunningOp, error) {
	return o.GetOperation(ctx, &longrunningpb.GetOperationRequest{Name: req.GetName()})
}

func (o *operations) ListOperations(_ context.Context, req *longrunningpb.ListOperationsRequest) (*longrunningpb.ListOperationsResponse, error) {
	pr, err := o.s.startPage(pageScope("ListOperations", req.GetName(), req.GetFilter()), req.PageToken, req.PageSize, 1000)
	if err != nil {
		return nil, err
	}
	o.s.mu.Lock()
	defer o.s.mu.Unlock()
	o.s.expireOpsLocked()
	var names []string
	for n := range o.s.ops {
		if strings.HasPrefix(n, req.GetName()) && n > pr.after {
			names = append(names, n)
		}
	}
	resp := &longrunningpb.ListOperationsResponse{}
	resp.Operations, resp.NextPageToken = page(o.s, pr, names, func(n string) *longrunningOp {
		return proto.Clone(o.s.ops[n]).(*longrunningOp)
	})
	return resp, nil
}

func (o *operations) DeleteOperation(_ context.Context, req *longrunningpb.DeleteOperationRequest) (*emptypb.Empty, error) {
	o.s.mu.Lock()
	defer o.s.mu.Unlock()
	if o.s.ops[req.GetName()] == nil {
		return nil, notFound("operation %s does not exist", req.GetName())
	}
	delete(o.s.ops, req.GetName())
	return &emptypb.Empty{}, nil
}

func (o *operations) CancelOperation(_ context.Context, req *longrunningpb.CancelOperationRequest) (*emptypb.Empty, error) {
	o.s.mu.Lock()
	defer o.s.mu.Unlock()
	if o.s.ops[req.GetName()] == nil {
		return nil, notFound("operation %s does not exist", req.GetName())
	}
	// Already done: cancelling a finished operation has no effect.
	return &emptypb.Empty{}, nil
}
