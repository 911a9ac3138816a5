package emulator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	cloudtasks "cloud.google.com/go/cloudtasks/apiv2"
	"cloud.google.com/go/cloudtasks/apiv2/cloudtaskspb"
	"cloud.google.com/go/longrunning/autogen/longrunningpb"
	"github.com/jonboulle/clockwork"
	"google.golang.org/api/option"
	"google.golang.org/genproto/googleapis/cloud/location"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"

	"github.com/ctdispatch/ctdispatch/cloudtasks/emulator/internal/oidc"
)

// Server is a running emulator: a gRPC server speaking the Cloud Tasks v2
// API (plus the long-running operations service), a delivery loop that
// sends due tasks to their HTTP targets, and an HTTP server for the OIDC
// keys. All its methods are safe for concurrent use.
type Server struct {
	cfg    Config
	clock  clockwork.Clock
	log    *slog.Logger
	grpc   *grpc.Server
	lis    net.Listener
	http   *http.Server
	hlis   net.Listener
	oidc   *oidc.Issuer
	public string // base URL of the HTTP server as workers see it
	faults *faultState
	// deliveryFaults injects Config.DeliveryFaults around HTTPClient.
	deliveryFaults *deliveryFaultState
	pages          *pageTokens

	mu         sync.Mutex
	queues     map[string]*queue
	names      map[string]time.Time // task name -> when it may be reused
	queueNames map[string]time.Time // deleted queue name -> when it may be reused
	ops        map[string]*longrunningpb.Operation
	opsByReq   map[string]string
	opsDone    []finishedOp // ops in the order they finished, for expiry
	deliveries []Delivery
	seq        uint64
	inflight   int
	idle       chan struct{} // closed when inflight drops to zero
	sweepAt    int

	wake   chan struct{}
	ctx    context.Context // cancelled by Close; parent of every delivery
	cancel context.CancelFunc
	done   sync.WaitGroup
	closed bool
}

// New starts an emulator: it listens, creates cfg.Queues, and (unless
// DisableDelivery is set) starts delivering tasks. Close stops it.
func New(cfg Config) (*Server, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	s := &Server{
		cfg:            cfg,
		clock:          cfg.Clock,
		log:            cfg.Logger,
		faults:         newFaultState(cfg.Faults),
		deliveryFaults: newDeliveryFaultState(cfg.DeliveryFaults),
		pages:          newPageTokens(),
		queues:         make(map[string]*queue),
		names:          make(map[string]time.Time),
		queueNames:     make(map[string]time.Time),
		ops:            make(map[string]*longrunningpb.Operation),
		opsByReq:       make(map[string]string),
		wake:           make(chan struct{}, 1),
	}
	for _, q := range cfg.Queues {
		if _, err := s.createQueue(q.proto()); err != nil {
			return nil, fmt.Errorf("emulator: queue %s: %w", q.Name, err)
		}
	}
	var err error
	s.lis = cfg.Listener
	if s.lis == nil {
		if s.lis, err = net.Listen("tcp", cfg.Addr); err != nil {
			return nil, fmt.Errorf("emulator: listen on %s: %w", cfg.Addr, err)
		}
	}
	if s.hlis, err = net.Listen("tcp", cfg.HTTPAddr); err != nil {
		s.lis.Close()
		return nil, fmt.Errorf("emulator: listen on %s: %w", cfg.HTTPAddr, err)
	}
	s.public = strings.TrimSuffix(cfg.PublicURL, "/")
	if s.public == "" {
		s.public = "http://" + s.hlis.Addr().String()
	}
	issuer := cfg.OIDCIssuer
	if issuer == "" {
		issuer = s.public
	}
	s.oidc = oidc.New(issuer, s.JWKSURL(), cfg.SigningKey)
	s.grpc = grpc.NewServer(
		grpc.UnaryInterceptor(s.intercept),
		grpc.MaxRecvMsgSize(128<<20),
	)
	registerHealth(s.grpc)
	cloudtaskspb.RegisterCloudTasksServer(s.grpc, &service{s: s})
	longrunningpb.RegisterOperationsServer(s.grpc, &operations{s: s})
	location.RegisterLocationsServer(s.grpc, locations{s: s})
	s.http = &http.Server{Handler: s.httpHandler(), ReadHeaderTimeout: 10 * time.Second}

	ctx, cancel := context.WithCancel(context.Background())
	s.ctx, s.cancel = ctx, cancel
	s.done.Add(2)
	go func() { defer s.done.Done(); _ = s.grpc.Serve(s.lis) }()
	go func() { defer s.done.Done(); _ = s.http.Serve(s.hlis) }()
	if !cfg.DisableDelivery && !cfg.ManualDelivery {
		s.done.Add(1)
		go func() { defer s.done.Done(); s.loop(ctx) }()
	}
	s.log.Debug("emulator started", "addr", s.Addr(), "jwks", s.JWKSURL())
	return s, nil
}

// Addr is the gRPC address the server listens on (host:port).
func (s *Server) Addr() string { return s.lis.Addr().String() }

// HTTPAddr is the address of the HTTP server for the OIDC keys.
func (s *Server) HTTPAddr() string { return s.hlis.Addr().String() }

// ClientOptions are the options that point the official client at this
// server: its endpoint, plain-text gRPC and no credentials.
func (s *Server) ClientOptions() []option.ClientOption {
	return ClientOptions(s.Addr())
}

// ClientOptions points the official client at an emulator listening on
// addr (for example one started by `ctdispatch emulator`).
func ClientOptions(addr string) []option.ClientOption {
	return []option.ClientOption{
		option.WithEndpoint(addr),
		option.WithoutAuthentication(),
		option.WithGRPCDialOption(grpc.WithTransportCredentials(insecure.NewCredentials())),
		option.WithGRPCConnectionPool(1),
	}
}

// NewClient returns the official Cloud Tasks client connected to this
// server. The caller closes it.
func (s *Server) NewClient(ctx context.Context, opts ...option.ClientOption) (*cloudtasks.Client, error) {
	return cloudtasks.NewClient(ctx, append(s.ClientOptions(), opts...)...)
}

// Close stops serving, waits for the delivery loop and attempts in flight
// (their requests are cancelled), and releases the listeners.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	s.cancel()
	// Let RPCs in progress finish, but do not wait for ever on a caller.
	stopped := make(chan struct{})
	go func() { s.grpc.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(5 * time.Second):
		s.grpc.Stop()
		<-stopped
	}
	err := s.http.Close()
	s.done.Wait()
	s.waitIdle(context.Background())
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}

// CreateQueue creates a queue, as the CreateQueue RPC does.
func (s *Server) CreateQueue(_ context.Context, q QueueConfig) error {
	if err := q.validate(); err != nil {
		return err
	}
	_, err := s.createQueue(q.proto())
	return err
}

// Queues returns a copy of every queue, sorted by name.
func (s *Server) Queues() []*cloudtaskspb.Queue {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*cloudtaskspb.Queue, 0, len(s.queues))
	for _, q := range s.queues {
		out = append(out, proto.Clone(q.pb).(*cloudtaskspb.Queue))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Tasks returns a FULL view of every task stored in queue (full name),
// sorted by name; nil for an unknown queue.
func (s *Server) Tasks(queue string) []*cloudtaskspb.Task {
	s.mu.Lock()
	defer s.mu.Unlock()
	q := s.queues[queue]
	if q == nil {
		return nil
	}
	out := make([]*cloudtaskspb.Task, 0, len(q.tasks))
	q.ascendAfter("", func(t *task) bool {
		out = append(out, t.snapshot(cloudtaskspb.Task_FULL))
		return true
	})
	return out
}

// TaskCount returns how many tasks are stored across all queues.
func (s *Server) TaskCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, q := range s.queues {
		n += len(q.tasks)
	}
	return n
}

// RememberedNames returns the task names that are taken although their
// task is gone, with the time each becomes free again.
func (s *Server) RememberedNames() map[string]time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock.Now()
	out := make(map[string]time.Time, len(s.names))
	for n, until := range s.names {
		if now.Before(until) {
			out[n] = until
		}
	}
	return out
}

// SetFaults replaces the fault plan; decisions restart from the new seed.
func (s *Server) SetFaults(f Faults) error {
	if err := f.validate(); err != nil {
		return err
	}
	s.faults.set(f)
	return nil
}

// SetDeliveryFaults replaces the plan of delivery faults: the faults
// planted on tasks start again from f.Tasks, and draws from the new seed.
// Attempts in flight keep the fault they met.
func (s *Server) SetDeliveryFaults(f DeliveryFaults) error {
	if err := f.validate(); err != nil {
		return err
	}
	s.deliveryFaults.set(f)
	return nil
}

// Reset forgets every task, remembered name, operation and delivery, and
// restores the queues of Config.Queues (other queues are deleted). Attempts
// in flight finish but their results are dropped. The fault plans stay as
// they are (SetFaults and SetDeliveryFaults replace them).
func (s *Server) Reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, q := range s.queues {
		for _, t := range q.tasks {
			t.removed = true
		}
	}
	s.queues = make(map[string]*queue)
	s.names = make(map[string]time.Time)
	s.queueNames = make(map[string]time.Time)
	s.ops = make(map[string]*longrunningpb.Operation)
	s.opsByReq = make(map[string]string)
	s.opsDone = nil
	s.deliveries = nil
	for _, q := range s.cfg.Queues {
		_, _ = s.createQueueLocked(q.proto())
	}
	s.poke()
}

// poke wakes the delivery loop.
func (s *Server) poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}
