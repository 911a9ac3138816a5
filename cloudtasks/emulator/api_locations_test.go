package emulator_test

import (
	"context"
	"testing"

	"cloud.google.com/go/cloudtasks/apiv2/cloudtaskspb"
	"github.com/googleapis/gax-go/v2"
	"github.com/stretchr/testify/require"
	"google.golang.org/api/iterator"
	"google.golang.org/genproto/googleapis/cloud/location"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"

	"github.com/ctdispatch/ctdispatch/cloudtasks/emulator"
	"github.com/ctdispatch/ctdispatch/cloudtasks/emulator/emuproto"
)

// Time budget for this file: under a second (one emulator per test).

// locationsBundle is an emulator holding queues in three locations of two
// projects.
func locationsBundle(t *testing.T) *testBundle {
	t.Helper()
	return setup(t, func(c *emulator.Config) {
		c.DisableDelivery = true
		c.Queues = []emulator.QueueConfig{
			{Name: "projects/p/locations/l/queues/a"},
			{Name: "projects/p/locations/l/queues/b"},
			{Name: "projects/p/locations/europe-west1/queues/c"},
			{Name: "projects/other/locations/us-central1/queues/d", Paused: true},
		}
	})
}

func listLocations(t *testing.T, b *testBundle, req *location.ListLocationsRequest, opts ...gax.CallOption) ([]string, error) {
	t.Helper()
	it := b.client.ListLocations(context.Background(), req, opts...)
	var names []string
	for {
		l, err := it.Next()
		if err == iterator.Done {
			return names, nil
		}
		if err != nil {
			return names, err
		}
		names = append(names, l.Name)
	}
}

func TestListLocations(t *testing.T) {
	t.Parallel()
	b := locationsBundle(t)
	for _, tc := range []struct {
		name string
		req  *location.ListLocationsRequest
		want []string
		code codes.Code
		msg  string
	}{
		{name: "one project", req: &location.ListLocationsRequest{Name: "projects/p"},
			want: []string{"projects/p/locations/europe-west1", "projects/p/locations/l"}},
		{name: "every project, through the wildcard", req: &location.ListLocationsRequest{Name: "projects/-"},
			want: []string{"projects/other/locations/us-central1", "projects/p/locations/europe-west1", "projects/p/locations/l"}},
		{name: "every project, one a page", req: &location.ListLocationsRequest{Name: "projects/-", PageSize: 1},
			want: []string{"projects/other/locations/us-central1", "projects/p/locations/europe-west1", "projects/p/locations/l"}},
		{name: "a project without queues", req: &location.ListLocationsRequest{Name: "projects/empty"}},
		{name: "not a project name", req: &location.ListLocationsRequest{Name: "projects/p/locations/l"},
			code: codes.InvalidArgument, msg: `name "projects/p/locations/l" is not a project name; want projects/PROJECT_ID (or projects/- for every project the emulator holds)`},
		{name: "a filter", req: &location.ListLocationsRequest{Name: "projects/p", Filter: `labels.x = "y"`},
			code: codes.InvalidArgument, msg: `filter "labels.x = \"y\"" is not supported by the emulator; leave it empty`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := listLocations(t, b, tc.req)
			if tc.code != codes.OK {
				requireCode(t, err, tc.code, tc.msg)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
}

func TestListLocationsRefusesForeignPageTokens(t *testing.T) {
	t.Parallel()
	b := locationsBundle(t)
	ctx := context.Background()
	it := b.client.ListLocations(ctx, &location.ListLocationsRequest{Name: "projects/-", PageSize: 1})
	_, err := it.Next()
	require.NoError(t, err)
	token := it.Response.(*location.ListLocationsResponse).NextPageToken
	require.NotEmpty(t, token)
	qit := b.client.ListQueues(ctx, &cloudtaskspb.ListQueuesRequest{Parent: "projects/p/locations/l", PageSize: 1})
	_, err = qit.Next()
	require.NoError(t, err)
	queuesToken := qit.Response.(*cloudtaskspb.ListQueuesResponse).NextPageToken
	require.NotEmpty(t, queuesToken)
	for _, tc := range []struct{ name, token string }{
		{"projects/p", token},             // another project's request
		{"projects/-", queuesToken},       // another method's token
		{"projects/-", "bm90LWEtdG9rZW4"}, // forged
	} {
		_, err := b.client.ListLocations(ctx, &location.ListLocationsRequest{Name: tc.name, PageToken: tc.token}).Next()
		requireCode(t, err, codes.InvalidArgument, `page_token "`+shortToken(tc.token)+`"`)
	}
	_, err = b.client.ListLocations(ctx, &location.ListLocationsRequest{Name: "projects/-", PageToken: token}).Next()
	require.NoError(t, err, "its own request's token")
}

func TestListLocationsAdvertisesTheHTTPAddress(t *testing.T) {
	t.Parallel()
	b := locationsBundle(t)
	var md metadata.MD
	_, err := listLocations(t, b, &location.ListLocationsRequest{Name: "projects/-"}, gax.WithGRPCOptions(grpc.Header(&md)))
	require.NoError(t, err)
	require.Equal(t, []string{b.srv.HTTPAddr()}, md.Get(emuproto.HTTPAddrMetadata))
}

func TestGetLocation(t *testing.T) {
	t.Parallel()
	b := locationsBundle(t)
	ctx := context.Background()
	got, err := b.client.GetLocation(ctx, &location.GetLocationRequest{Name: "projects/p/locations/europe-west1"})
	require.NoError(t, err)
	require.Equal(t, "projects/p/locations/europe-west1", got.Name)
	require.Equal(t, "europe-west1", got.LocationId)
	require.Equal(t, map[string]string{"cloud.googleapis.com/region": "europe-west1"}, got.Labels)
	for _, tc := range []struct {
		name string
		code codes.Code
		msg  string
	}{
		{"projects/p/locations/nowhere", codes.NotFound, "location projects/p/locations/nowhere holds no queue in this emulator (it knows a location by its queues)"},
		{"projects/p", codes.InvalidArgument, `name: "projects/p" is not a location name; want projects/PROJECT_ID/locations/LOCATION_ID`},
		{"projects/-/locations/l", codes.InvalidArgument, `name "projects/-/locations/l": the wildcard "-" is accepted only in the parent of ListLocations and ListQueues`},
	} {
		_, err := b.client.GetLocation(ctx, &location.GetLocationRequest{Name: tc.name})
		requireCode(t, err, tc.code, tc.msg)
	}
}

func TestListQueuesWildcards(t *testing.T) {
	t.Parallel()
	b := locationsBundle(t)
	ctx := context.Background()
	for _, tc := range []struct {
		parent, filter string
		want           []string
	}{
		{"projects/-/locations/-", "", []string{"projects/other/locations/us-central1/queues/d", "projects/p/locations/europe-west1/queues/c", "projects/p/locations/l/queues/a", "projects/p/locations/l/queues/b"}},
		{"projects/-/locations/-", "state: PAUSED", []string{"projects/other/locations/us-central1/queues/d"}},
		{"projects/p/locations/-", "", []string{"projects/p/locations/europe-west1/queues/c", "projects/p/locations/l/queues/a", "projects/p/locations/l/queues/b"}},
		{"projects/-/locations/l", "", []string{"projects/p/locations/l/queues/a", "projects/p/locations/l/queues/b"}},
		{"projects/p/locations/l", "", []string{"projects/p/locations/l/queues/a", "projects/p/locations/l/queues/b"}},
	} {
		it := b.client.ListQueues(ctx, &cloudtaskspb.ListQueuesRequest{Parent: tc.parent, Filter: tc.filter, PageSize: 1})
		var got []string
		for {
			q, err := it.Next()
			if err == iterator.Done {
				break
			}
			require.NoError(t, err, tc.parent)
			got = append(got, q.Name)
		}
		require.Equal(t, tc.want, got, "%s %q", tc.parent, tc.filter)
	}
	_, err := b.client.CreateQueue(ctx, &cloudtaskspb.CreateQueueRequest{Parent: "projects/-/locations/l", Queue: &cloudtaskspb.Queue{Name: "projects/-/locations/l/queues/x"}})
	requireCode(t, err, codes.InvalidArgument, `queue.name: "projects/-/locations/l/queues/x" names the wildcard "-" as a project or location; a queue lives in one project and location`)
}
