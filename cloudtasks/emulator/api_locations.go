package emulator

import (
	"context"
	"regexp"
	"strings"

	"google.golang.org/genproto/googleapis/cloud/location"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/ctdispatch/ctdispatch/cloudtasks/emulator/emuproto"
)

// maxLocationPageSize bounds a ListLocations page. The service documents
// no maximum; a project has a few dozen locations at most.
const maxLocationPageSize = 1000

// projectRE matches the name ListLocations takes.
var projectRE = regexp.MustCompile(`^projects/([A-Za-z0-9:.-]+)$`)

// locations answers google.cloud.location.Locations, which the official
// client's ListLocations and GetLocation call on the same connection. The
// emulator accepts any location ID in a name, so it knows a location by
// the queues it holds there: a location with no queue is not found.
type locations struct {
	location.UnimplementedLocationsServer
	s *Server
}

func (l locations) ListLocations(ctx context.Context, req *location.ListLocationsRequest) (*location.ListLocationsResponse, error) {
	m := projectRE.FindStringSubmatch(req.GetName())
	if m == nil {
		return nil, invalid("name %q is not a project name; want projects/PROJECT_ID (or projects/- for every project the emulator holds)", req.GetName())
	}
	if strings.TrimSpace(req.GetFilter()) != "" {
		return nil, invalid("filter %q is not supported by the emulator; leave it empty", req.GetFilter())
	}
	s := l.s
	pr, err := s.startPage(pageScope("ListLocations", req.GetName(), req.GetFilter()), req.GetPageToken(), req.GetPageSize(), maxLocationPageSize)
	if err != nil {
		return nil, err
	}
	_ = grpc.SetHeader(ctx, metadata.Pairs(emuproto.HTTPAddrMetadata, s.HTTPAddr()))
	s.mu.Lock()
	defer s.mu.Unlock()
	seen := map[string]bool{}
	var names []string
	for name := range s.queues {
		qn, _ := parseQueueName(name) // stored names are valid
		project, _ := splitLocation(qn.location)
		if (m[1] == emuproto.Wildcard || m[1] == project) && qn.location > pr.after && !seen[qn.location] {
			seen[qn.location] = true
			names = append(names, qn.location)
		}
	}
	resp := &location.ListLocationsResponse{}
	resp.Locations, resp.NextPageToken = page(s, pr, names, locationOf)
	return resp, nil
}

func (l locations) GetLocation(_ context.Context, req *location.GetLocationRequest) (*location.Location, error) {
	name := req.GetName()
	if err := parseLocation(name); err != nil {
		return nil, invalid("name: %v", err)
	}
	if project, loc := splitLocation(name); project == emuproto.Wildcard || loc == emuproto.Wildcard {
		return nil, invalid("name %q: the wildcard %q is accepted only in the parent of ListLocations and ListQueues", name, emuproto.Wildcard)
	}
	s := l.s
	s.mu.Lock()
	defer s.mu.Unlock()
	for q := range s.queues {
		if strings.HasPrefix(q, name+"/queues/") {
			return locationOf(name), nil
		}
	}
	return nil, status.Errorf(codes.NotFound, "location %s holds no queue in this emulator (it knows a location by its queues)", name)
}

// locationOf describes a location (projects/P/locations/L) as the service
// does: its name, its ID, and the region label.
func locationOf(name string) *location.Location {
	_, id := splitLocation(name)
	return &location.Location{
		Name:       name,
		LocationId: id,
		Labels:     map[string]string{"cloud.googleapis.com/region": id},
	}
}

// splitLocation returns the project and location IDs of a valid location
// name, projects/P/locations/L.
func splitLocation(name string) (project, loc string) {
	parts := strings.Split(name, "/")
	return parts[1], parts[3]
}

// inLocation reports whether a queue (full name) is in parent, a location
// name in which either ID may be emuproto.Wildcard.
func inLocation(queue, parent string) bool {
	qp, ql := splitLocation(queue[:strings.Index(queue, "/queues/")])
	pp, pl := splitLocation(parent)
	return (pp == emuproto.Wildcard || pp == qp) && (pl == emuproto.Wildcard || pl == ql)
}
