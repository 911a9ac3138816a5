package emulator

import (
	"context"
	"hash/fnv"
	"log/slog"
	"math/rand/v2"
	"path"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// knownMethods are the RPC names a FaultRule may name.
var knownMethods = map[string]struct{}{
	"ListQueues": {}, "GetQueue": {}, "CreateQueue": {}, "UpdateQueue": {}, "DeleteQueue": {},
	"PurgeQueue": {}, "PauseQueue": {}, "ResumeQueue": {}, "GetIamPolicy": {}, "SetIamPolicy": {},
	"TestIamPermissions": {}, "ListTasks": {}, "GetTask": {}, "CreateTask": {}, "BatchCreateTasks": {},
	"DeleteTask": {}, "BatchDeleteTasks": {}, "RunTask": {}, "UpdateCmekConfig": {}, "GetCmekConfig": {},
	"GetOperation": {}, "ListOperations": {}, "DeleteOperation": {}, "CancelOperation": {}, "WaitOperation": {},
	"ListLocations": {}, "GetLocation": {},
}

// faultState draws the decisions of a fault plan: one random stream per
// (rule, method), so the n-th call of a method meets the same fate for a
// given seed however calls of other methods interleave with it.
type faultState struct {
	mu      sync.Mutex
	f       Faults
	streams map[streamKey]*rand.Rand
}

type streamKey struct {
	rule   int
	method string
}

func newFaultState(f Faults) *faultState {
	return &faultState{f: f, streams: make(map[streamKey]*rand.Rand)}
}

func (fs *faultState) set(f Faults) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	fs.f = f
	fs.streams = make(map[streamKey]*rand.Rand)
}

// decision is what the fault plan does to one call.
type decision struct {
	latency        time.Duration
	code           codes.Code
	commitThenFail bool
}

// decide draws the fate of one call of method from the rules that apply
// to calls.
func (fs *faultState) decide(method string) decision {
	return fs.draw(method, false)
}

// decideRequest draws the fate of one request inside a batch call of
// method from the PerRequest rules.
func (fs *faultState) decideRequest(method string) decision {
	return fs.draw(method, true)
}

func (fs *faultState) draw(method string, perRequest bool) decision {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	var d decision
	for i, r := range fs.f.Rules {
		if r.PerRequest != perRequest || (len(r.Methods) > 0 && !slices.Contains(r.Methods, method)) {
			continue
		}
		k := streamKey{i, method}
		rng := fs.streams[k]
		if rng == nil {
			h := fnv.New64a()
			h.Write([]byte(method))
			rng = rand.New(rand.NewPCG(fs.f.Seed, h.Sum64()^uint64(i)))
			fs.streams[k] = rng
		}
		if rng.Float64() >= r.Rate {
			continue
		}
		d.latency += r.Latency
		if d.code == codes.OK && r.Code != codes.OK {
			d.code, d.commitThenFail = r.Code, r.CommitThenFail
		}
	}
	return d
}

// intercept applies the fault plan and logs every RPC at debug level.
func (s *Server) intercept(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	method := path.Base(info.FullMethod)
	d := s.faults.decide(method)
	if d.latency > 0 {
		t := time.NewTimer(d.latency)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, status.FromContextError(ctx.Err()).Err()
		}
	}
	var resp any
	var err error
	switch {
	case d.code == codes.OK:
		resp, err = handler(ctx, req)
	case d.commitThenFail:
		_, cerr := handler(ctx, req)
		s.log.Debug("rpc fault: committed, then failed", "method", method, "code", d.code, "commit_error", cerr)
		err = status.Errorf(d.code, "%s: injected fault after the call took effect", method)
	default:
		err = status.Errorf(d.code, "%s: injected fault", method)
	}
	if s.log.Enabled(ctx, slog.LevelDebug) {
		s.log.Debug("rpc", "method", method, "code", status.Code(err), "error", errText(err))
	}
	return resp, err
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return status.Convert(err).Message()
}
