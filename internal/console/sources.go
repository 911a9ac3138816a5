package console

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"

	"cloud.google.com/go/cloudtasks/apiv2/cloudtaskspb"
	"golang.org/x/sync/errgroup"
	"google.golang.org/api/iterator"

	"github.com/ctdispatch/ctdispatch/cloudtasks/emulator"
	"github.com/ctdispatch/ctdispatch/outbox"
)

// inspect asks the emulator's HTTP server for its load and recent
// deliveries; nil without error when no inspection address is configured.
func (s *Server) inspect(ctx context.Context, queue, task string, limit int) (*emulator.Inspection, error) {
	if s.cfg.EmulatorHTTP == "" {
		return nil, nil
	}
	q := url.Values{"limit": {strconv.Itoa(limit)}}
	if queue != "" {
		q.Set("queue", queue)
	}
	if task != "" {
		q.Set("task", task)
	}
	u := "http://" + s.cfg.EmulatorHTTP + emulator.InspectPath + "?" + q.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	resp, err := s.web.Do(req)
	if err != nil {
		return nil, fmt.Errorf("emulator inspection at %s: %w", s.cfg.EmulatorHTTP, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("emulator inspection at %s: HTTP %d", s.cfg.EmulatorHTTP, resp.StatusCode)
	}
	var ins emulator.Inspection
	if err := json.NewDecoder(resp.Body).Decode(&ins); err != nil {
		return nil, fmt.Errorf("emulator inspection at %s: %w", s.cfg.EmulatorHTTP, err)
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
			h[k] = []string{emulator.RedactedValue}
		}
	}
	return h
}

// listQueues lists the queues of every configured location and of every
// location the inspection names, sorted by name.
func (s *Server) listQueues(ctx context.Context, ins *emulator.Inspection) ([]*cloudtaskspb.Queue, error) {
	locs := map[string]bool{}
	for _, l := range s.cfg.Locations {
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

// listTaskPage returns one page of a queue's tasks and the token of the next.
func (s *Server) listTaskPage(ctx context.Context, queue, token string) ([]*cloudtaskspb.Task, string, error) {
	it := s.client.ListTasks(ctx, &cloudtaskspb.ListTasksRequest{Parent: queue, ResponseView: cloudtaskspb.Task_BASIC})
	var tasks []*cloudtaskspb.Task
	next, err := iterator.NewPager(it, s.cfg.PageSize, token).NextPage(&tasks)
	if err != nil {
		return nil, "", fmt.Errorf("ListTasks %s: %w", queue, err)
	}
	return tasks, next, nil
}

// internalIDs looks up the internal ID of each Cloud Tasks ID in the
// outbox, a few lookups at a time; IDs the outbox does not know are absent.
func (s *Server) internalIDs(ctx context.Context, cloudIDs []string) (map[string]string, error) {
	out := make(map[string]string, len(cloudIDs))
	if s.box == nil {
		return out, nil
	}
	ids := make([]string, len(cloudIDs))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(8)
	for i, cid := range cloudIDs {
		g.Go(func() error {
			recs, err := s.box.Lookup(gctx, outbox.Query{CloudTaskID: cid})
			if err != nil {
				return fmt.Errorf("outbox lookup of %s: %w", cid, err)
			}
			if len(recs) > 0 {
				ids[i] = recs[0].ID
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return out, err
	}
	for i, cid := range cloudIDs {
		if ids[i] != "" {
			out[cid] = ids[i]
		}
	}
	return out, nil
}
