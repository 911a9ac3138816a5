package console

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"cloud.google.com/go/cloudtasks/apiv2/cloudtaskspb"
	"github.com/googleapis/gax-go/v2"
	"google.golang.org/api/iterator"
	locationpb "google.golang.org/genproto/googleapis/cloud/location"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/ctdispatch/ctdispatch/cloudtasks/emulator/emuproto"
	"github.com/ctdispatch/ctdispatch/naming"
	"github.com/ctdispatch/ctdispatch/outbox"
)

// discover asks the emulator for every location that holds a queue, with
// ListLocations on "projects/-" (the emulator's wildcard, see
// emuproto.Wildcard), and remembers the HTTP address its answer
// advertises (emuproto.HTTPAddrMetadata). An endpoint that does not take
// the wildcard (Unimplemented, InvalidArgument, NotFound or
// PermissionDenied: another emulator, or a service that documents no
// wildcard) yields no locations and no error, so the console shows the
// locations it was given.
func (s *Server) discover(ctx context.Context) ([]string, error) {
	var md metadata.MD
	it := s.client.ListLocations(ctx, &locationpb.ListLocationsRequest{Name: "projects/" + emuproto.Wildcard}, gax.WithGRPCOptions(grpc.Header(&md)))
	var locs []string
	for {
		l, err := it.Next()
		if err == iterator.Done {
			break
		}
		switch status.Code(err) {
		case codes.OK:
			locs = append(locs, l.GetName())
			continue
		case codes.Unimplemented, codes.InvalidArgument, codes.NotFound, codes.PermissionDenied:
			// Not an endpoint that takes the wildcard: no discovery.
			return nil, nil
		}
		return nil, fmt.Errorf("ListLocations projects/%s: %w", emuproto.Wildcard, err)
	}
	if v := md.Get(emuproto.HTTPAddrMetadata); len(v) == 1 {
		addr := reachable(v[0], s.cfg.Emulator)
		s.found.Store(&addr)
	}
	return locs, nil
}

// reachable is the address at which the console can reach a listener that
// the emulator reports as advertised: an unspecified host (0.0.0.0, [::])
// is replaced by the host through which the console reaches the emulator.
func reachable(advertised, grpcAddr string) string {
	host, port, err := net.SplitHostPort(advertised)
	if err != nil {
		return advertised
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		if h, _, err := net.SplitHostPort(grpcAddr); err == nil {
			return net.JoinHostPort(h, port)
		}
	}
	return advertised
}

// emulatorHTTP is the address of the emulator's HTTP server: the
// configured one, else the one the emulator advertised (asking it once if
// it has not been asked yet); "" when there is none.
func (s *Server) emulatorHTTP(ctx context.Context) string {
	if s.cfg.EmulatorHTTP != "" {
		return s.cfg.EmulatorHTTP
	}
	if a := s.found.Load(); a != nil {
		return *a
	}
	if _, err := s.discover(ctx); err != nil {
		return ""
	}
	if a := s.found.Load(); a != nil {
		return *a
	}
	return ""
}

// inspect asks the emulator's HTTP server for its load and recent
// deliveries; nil without error when no inspection address is known.
func (s *Server) inspect(ctx context.Context, queue, task string, limit int) (*emuproto.Inspection, error) {
	addr := s.emulatorHTTP(ctx)
	if addr == "" {
		return nil, nil
	}
	q := url.Values{"limit": {strconv.Itoa(limit)}}
	if queue != "" {
		q.Set("queue", queue)
	}
	if task != "" {
		q.Set("task", task)
	}
	u := "http://" + addr + emuproto.InspectPath + "?" + q.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	resp, err := s.web.Do(req)
	if err != nil {
		return nil, fmt.Errorf("emulator inspection at %s: %w", addr, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("emulator inspection at %s: HTTP %d", addr, resp.StatusCode)
	}
	var ins emuproto.Inspection
	if err := json.NewDecoder(resp.Body).Decode(&ins); err != nil {
		return nil, fmt.Errorf("emulator inspection at %s: %w", addr, err)
	}
	for i := range ins.Deliveries {
		ins.Deliveries[i].Header = redactHeader(ins.Deliveries[i].Header)
	}
	return &ins, nil
}

// redactHeader hides credentials even from an emulator that did not: the
// console never shows an Authorization value.
func redactHeader(h http.Header) http.Header {
	for k := range h {
		if strings.EqualFold(k, "Authorization") || strings.EqualFold(k, "Proxy-Authorization") {
			h[k] = []string{emuproto.RedactedValue}
		}
	}
	return h
}

// listQueues lists the queues of every location found (by discover), every
// configured location and every location the inspection names, sorted by
// name.
func (s *Server) listQueues(ctx context.Context, found []string, ins *emuproto.Inspection) ([]*cloudtaskspb.Queue, error) {
	locs := map[string]bool{}
	for _, l := range append(found, s.cfg.Locations...) {
		locs[l] = true
	}
	if ins != nil {
		for _, q := range ins.Queues {
			if i := strings.Index(q.Name, "/queues/"); i > 0 {
				locs[q.Name[:i]] = true
			}
		}
	}
	var out []*cloudtaskspb.Queue
	for loc := range locs {
		it := s.client.ListQueues(ctx, &cloudtaskspb.ListQueuesRequest{Parent: loc})
		for {
			q, err := it.Next()
			if err == iterator.Done {
				break
			}
			if err != nil {
				return nil, fmt.Errorf("ListQueues %s: %w", loc, err)
			}
			out = append(out, q)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// listTaskPage returns one page of a queue's tasks and the token of the
// next. The full view carries the headers, where the internal ID is.
func (s *Server) listTaskPage(ctx context.Context, queue, token string) ([]*cloudtaskspb.Task, string, error) {
	it := s.client.ListTasks(ctx, &cloudtaskspb.ListTasksRequest{Parent: queue, ResponseView: cloudtaskspb.Task_FULL})
	var tasks []*cloudtaskspb.Task
	next, err := iterator.NewPager(it, s.cfg.PageSize, token).NextPage(&tasks)
	if err != nil {
		return nil, "", fmt.Errorf("ListTasks %s: %w", queue, err)
	}
	return tasks, next, nil
}

// internalIDs finds the internal ID of each task. A task made by the
// dispatcher carries it in its Idempotency-Key header, and the header is
// trusted only when it hashes to the task's own ID (naming.CloudTaskID),
// which costs no I/O. Other tasks are looked up in the outbox by
// cloud_task_id, at most lookupWorkers at a time across the server; the
// page waits for them until Config.LookupBudget after it started, and lookups still
// running go on in the background and remember what they find (the mapping
// never changes), so the page's next refresh shows it. Tasks the outbox
// does not know are absent from ids; those whose lookup has not finished
// are in late.
func (s *Server) internalIDs(ctx context.Context, tasks []*cloudtaskspb.Task, started time.Time) (ids map[string]string, late map[string]bool, err error) {
	ids, late = make(map[string]string, len(tasks)), map[string]bool{}
	var unknown []string
	for _, t := range tasks {
		cid := shortName(t.Name)
		if id := idempotencyKey(t); id != "" {
			if want, err := naming.CloudTaskID(id); err == nil && want == cid {
				ids[cid] = id
				continue
			}
		}
		if id, ok := s.ids.get(cid); ok {
			ids[cid] = id
			continue
		}
		unknown = append(unknown, cid)
	}
	if s.box == nil || len(unknown) == 0 {
		return ids, late, nil
	}
	type result struct {
		cid, id string
		err     error
	}
	results := make(chan result, len(unknown)) // never blocks a late lookup
	waiting := map[string]bool{}
	for _, cid := range unknown {
		waiting[cid] = true
		if !s.ids.begin(cid) {
			continue // an earlier page's lookup is still running
		}
		s.bg.Add(1)
		go func() {
			defer s.bg.Done()
			defer s.ids.end(cid)
			s.lookups <- struct{}{}
			defer func() { <-s.lookups }()
			lctx, cancel := context.WithTimeout(s.ctx, s.cfg.Timeout)
			defer cancel()
			recs, err := s.box.Lookup(lctx, outbox.Query{CloudTaskID: cid})
			r := result{cid: cid, err: err}
			if err == nil && len(recs) > 0 {
				r.id = recs[0].ID
				s.ids.put(cid, r.id)
			}
			results <- r
		}()
	}
	budget := s.cfg.Clock.NewTimer(max(0, s.cfg.LookupBudget-s.cfg.Clock.Since(started)))
	defer budget.Stop()
	for len(waiting) > 0 && len(late) == 0 {
		select {
		case r := <-results:
			delete(waiting, r.cid)
			if r.err != nil && err == nil {
				err = fmt.Errorf("outbox lookup of %s: %w", r.cid, r.err)
			}
			if r.id != "" {
				ids[r.cid] = r.id
			}
		case <-budget.Chan():
			for cid := range waiting {
				late[cid] = true
			}
		case <-ctx.Done():
			return ids, waiting, ctx.Err()
		}
	}
	return ids, late, err
}

func idempotencyKey(t *cloudtaskspb.Task) string {
	for k, v := range t.GetHttpRequest().GetHeaders() {
		if strings.EqualFold(k, "Idempotency-Key") {
			return v
		}
	}
	return ""
}

// lookupWorkers bounds the outbox lookups by Cloud Tasks ID running at
// once, across every page being served.
const lookupWorkers = 2

// idCache remembers Cloud Tasks ID → internal ID pairs found in the
// outbox, up to a bound past which it starts over, and which lookups are
// running.
type idCache struct {
	mu      sync.Mutex
	ids     map[string]string
	max     int
	running map[string]bool
}

// begin marks a lookup of cid as running; false if one already is.
func (c *idCache) begin(cid string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.running == nil {
		c.running = map[string]bool{}
	}
	if c.running[cid] {
		return false
	}
	c.running[cid] = true
	return true
}

func (c *idCache) end(cid string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.running, cid)
}

func (c *idCache) get(cid string) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	id, ok := c.ids[cid]
	return id, ok
}

func (c *idCache) put(cid, id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ids == nil || len(c.ids) >= c.max {
		c.ids = make(map[string]string)
	}
	c.ids[cid] = id
}
