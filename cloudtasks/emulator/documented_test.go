package emulator_test

import (
	"context"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/cloudtasks/apiv2/cloudtaskspb"
	"cloud.google.com/go/iam/apiv1/iampb"
	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"
	"google.golang.org/api/idtoken"
	"google.golang.org/api/iterator"
	"google.golang.org/api/option"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/fieldmaskpb"

	"github.com/ctdispatch/ctdispatch/cloudtasks/emulator"
	"github.com/ctdispatch/ctdispatch/cloudtasks/emulator/emuproto"
)

// The tests in this file hold the emulator to what Google documents for
// the service: ID token claims, the headers a worker receives, queue
// defaults, ListQueues filters, IAM policies and batch operations.

func TestOIDCTokenPassesGoogleIDTokenValidator(t *testing.T) {
	t.Parallel()
	// idtoken checks expiry against the real time, so the clock starts now.
	b := setup(t, func(c *emulator.Config) { c.Clock = clockwork.NewFakeClockAt(time.Now()) })
	ctx := context.Background()
	w := newWorker(t, 200)
	tests := []struct {
		name, audience, want string
	}{
		{"explicit audience", "https://worker.example.com/aud", "https://worker.example.com/aud"},
		{"audience defaults to the URL", "", w.srv.URL + "/work"},
	}
	for i, tt := range tests {
		task := w.task(fmt.Sprintf("%s/tasks/oidc-%d", queue, i))
		task.GetHttpRequest().AuthorizationHeader = &cloudtaskspb.HttpRequest_OidcToken{OidcToken: &cloudtaskspb.OidcToken{
			ServiceAccountEmail: "worker@p.iam.gserviceaccount.com", Audience: tt.audience,
		}}
		_, err := b.client.CreateTask(ctx, &cloudtaskspb.CreateTaskRequest{Parent: queue, Task: task})
		require.NoError(t, err)
	}
	require.Equal(t, 2, runDue(t, b))
	got := w.requests()
	require.Len(t, got, 2)

	v, err := idtoken.NewValidator(ctx, option.WithHTTPClient(b.srv.KeysClient()))
	require.NoError(t, err)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var tok string
			for _, r := range got {
				claims, err := idtoken.ParsePayload(strings.TrimPrefix(r.header.Get("Authorization"), "Bearer "))
				require.NoError(t, err)
				if claims.Audience == tt.want {
					tok = strings.TrimPrefix(r.header.Get("Authorization"), "Bearer ")
				}
			}
			require.NotEmpty(t, tok, "no delivery carried a token for audience %s", tt.want)
			p, err := v.Validate(ctx, tok, tt.want)
			require.NoError(t, err)
			require.Equal(t, tt.want, p.Audience)
			require.Equal(t, b.srv.Issuer(), p.Issuer)
			require.Equal(t, "worker@p.iam.gserviceaccount.com", p.Subject)
			require.Equal(t, "worker@p.iam.gserviceaccount.com", p.Claims["email"])
			require.Equal(t, true, p.Claims["email_verified"])
			require.Equal(t, int64(3600), p.Expires-p.IssuedAt)

			// The raw claim is a JSON string, as in Google's ID tokens.
			seg := strings.Split(tok, ".")
			require.Len(t, seg, 3)
			raw, err := base64.RawURLEncoding.DecodeString(seg[1])
			require.NoError(t, err)
			var fields map[string]json.RawMessage
			require.NoError(t, json.Unmarshal(raw, &fields))
			require.Equal(t, `"`+tt.want+`"`, string(fields["aud"]))
			keys := make([]string, 0, len(fields))
			for k := range fields {
				keys = append(keys, k)
			}
			require.ElementsMatch(t, []string{"aud", "email", "email_verified", "exp", "iat", "iss", "sub"}, keys)

			_, err = v.Validate(ctx, tok, "https://someone-else.example.com")
			require.ErrorContains(t, err, "audience provided does not match")
		})
	}
}

func TestServiceComputedHeaders(t *testing.T) {
	t.Parallel()
	b := setup(t)
	w := newWorker(t, 200)
	task := w.task(queue + "/tasks/headers")
	task.GetHttpRequest().Headers = map[string]string{
		"Host":                "evil.example.com",
		"Content-Length":      "9999",
		"X-Google-Internal":   "spoofed",
		"x-google-lowercase":  "spoofed",
		"X-AppEngine-Country": "ZZ",
		"X-Appengine-Cron":    "true",
		"X-Googlers":          "kept: not the X-Google- prefix",
		"Content-Type":        "text/plain",
		"Idempotency-Key":     "dispatch:r:t:1",
	}
	_, err := b.client.CreateTask(context.Background(), &cloudtaskspb.CreateTaskRequest{Parent: queue, Task: task})
	require.NoError(t, err)
	require.Equal(t, 1, runDue(t, b))
	got := w.requests()
	require.Len(t, got, 1)
	r := got[0]
	require.Equal(t, strings.TrimPrefix(w.srv.URL, "http://"), r.host, "Host comes from the URL")
	require.Equal(t, int64(len("payload")), r.contentLength, "Content-Length is computed")
	var sent []string
	for k := range r.header {
		sent = append(sent, k)
	}
	require.ElementsMatch(t, []string{
		"Accept-Encoding", "Content-Length", "Content-Type", "Idempotency-Key", "User-Agent", "X-Googlers",
		"X-Cloudtasks-Queuename", "X-Cloudtasks-Taskname", "X-Cloudtasks-Taskretrycount",
		"X-Cloudtasks-Taskexecutioncount", "X-Cloudtasks-Tasketa",
	}, sent)
	require.Equal(t, "7", r.header.Get("Content-Length"))
}

func TestDefaultBurstSize(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *emulator.Config) { c.DisableDelivery = true })
	ctx := context.Background()
	tests := []struct {
		rate float64
		want int32
	}{
		{0, 100}, // unset: 500/s, the service shows a burst of 100
		{500, 100},
		{101, 100},
		{10, 10},
		{2.5, 3},
		{0.1, 1},
	}
	for i, tt := range tests {
		t.Run(fmt.Sprint(tt.rate), func(t *testing.T) {
			q, err := b.client.CreateQueue(ctx, &cloudtaskspb.CreateQueueRequest{Parent: loc, Queue: &cloudtaskspb.Queue{
				Name: fmt.Sprintf("%s/queues/burst-%d", loc, i), RateLimits: &cloudtaskspb.RateLimits{MaxDispatchesPerSecond: tt.rate},
			}})
			require.NoError(t, err)
			require.Equal(t, tt.want, q.RateLimits.MaxBurstSize)
		})
	}
}

func TestDefaultQueueDispatchesABurstOf100(t *testing.T) {
	t.Parallel()
	b := setup(t)
	w := newWorker(t, 200)
	w.arrived = make(chan struct{}, 200)
	for i := range 150 {
		_, err := b.client.CreateTask(context.Background(), &cloudtaskspb.CreateTaskRequest{Parent: queue, Task: w.task(fmt.Sprintf("%s/tasks/t%d", queue, i))})
		require.NoError(t, err)
	}
	require.Equal(t, 100, emulator.DispatchOnce(b.srv), "a full bucket holds 100 tokens")
	require.Equal(t, 0, emulator.DispatchOnce(b.srv), "no time has passed")
	b.clock.Advance(100 * time.Millisecond) // 500/s refills 50 tokens
	require.Equal(t, 50, runDue(t, b))
}

func TestListQueuesFilter(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *emulator.Config) {
		c.DisableDelivery = true
		c.Queues = []emulator.QueueConfig{{Name: loc + "/queues/run-a"}, {Name: loc + "/queues/paused-b", Paused: true}, {Name: loc + "/queues/run-c"}}
	})
	ctx := context.Background()
	list := func(filter string) ([]string, error) {
		var names []string
		it := b.client.ListQueues(ctx, &cloudtaskspb.ListQueuesRequest{Parent: loc, Filter: filter, PageSize: 1})
		for {
			q, err := it.Next()
			if errors.Is(err, iterator.Done) {
				return names, nil
			}
			if err != nil {
				return nil, err
			}
			names = append(names, strings.TrimPrefix(q.Name, loc+"/queues/"))
		}
	}
	tests := []struct {
		filter string
		want   []string
	}{
		{"", []string{"paused-b", "run-a", "run-c"}},
		{"state: PAUSED", []string{"paused-b"}},
		{"state: RUNNING", []string{"run-a", "run-c"}},
		{"state:RUNNING", []string{"run-a", "run-c"}},
		{"state = paused", []string{"paused-b"}},
		{"state: DISABLED", nil},
	}
	for _, tt := range tests {
		t.Run(tt.filter, func(t *testing.T) {
			got, err := list(tt.filter)
			require.NoError(t, err)
			require.Equal(t, tt.want, got)
		})
	}
	for _, bad := range []string{"name: run-a", "state: SLEEPING", "state: PAUSED OR state: RUNNING", "state: STATE_UNSPECIFIED"} {
		t.Run("refused "+bad, func(t *testing.T) {
			_, err := list(bad)
			requireCode(t, err, codes.InvalidArgument, fmt.Sprintf("filter %q is not supported by the emulator; supported: state: RUNNING, state: PAUSED or state: DISABLED", bad))
		})
	}
}

func TestIAMPolicyPerQueue(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *emulator.Config) {
		c.DisableDelivery = true
		c.Queues = []emulator.QueueConfig{{Name: queue}, {Name: loc + "/queues/other"}}
	})
	ctx := context.Background()
	empty, err := b.client.GetIamPolicy(ctx, &iampb.GetIamPolicyRequest{Resource: queue})
	require.NoError(t, err)
	require.Empty(t, empty.Bindings)
	require.Equal(t, "ACAB", base64.StdEncoding.EncodeToString(empty.Etag))

	binding := &iampb.Binding{Role: "roles/cloudtasks.enqueuer", Members: []string{"serviceAccount:dispatcher@p.iam.gserviceaccount.com"}}
	set, err := b.client.SetIamPolicy(ctx, &iampb.SetIamPolicyRequest{Resource: queue, Policy: &iampb.Policy{Bindings: []*iampb.Binding{binding}, Etag: empty.Etag}})
	require.NoError(t, err)
	require.NotEqual(t, empty.Etag, set.Etag)
	got, err := b.client.GetIamPolicy(ctx, &iampb.GetIamPolicyRequest{Resource: queue})
	require.NoError(t, err)
	require.Equal(t, set.Etag, got.Etag)
	require.Len(t, got.Bindings, 1)
	require.Equal(t, "roles/cloudtasks.enqueuer", got.Bindings[0].Role)
	require.Equal(t, []string{"serviceAccount:dispatcher@p.iam.gserviceaccount.com"}, got.Bindings[0].Members)

	other, err := b.client.GetIamPolicy(ctx, &iampb.GetIamPolicyRequest{Resource: loc + "/queues/other"})
	require.NoError(t, err)
	require.Empty(t, other.Bindings, "each queue has its own policy")

	// A write based on a stale read is refused; an unconditional one is not.
	_, err = b.client.SetIamPolicy(ctx, &iampb.SetIamPolicyRequest{Resource: queue, Policy: &iampb.Policy{Etag: empty.Etag}})
	requireCode(t, err, codes.Aborted, "is not the current etag")
	cleared, err := b.client.SetIamPolicy(ctx, &iampb.SetIamPolicyRequest{Resource: queue, Policy: &iampb.Policy{}})
	require.NoError(t, err)
	require.Empty(t, cleared.Bindings)
	require.NotEqual(t, set.Etag, cleared.Etag)

	_, err = b.client.SetIamPolicy(ctx, &iampb.SetIamPolicyRequest{Resource: queue, Policy: &iampb.Policy{}, UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"owner"}}})
	requireCode(t, err, codes.InvalidArgument, `update_mask path "owner" is not a policy field`)

	perms := []string{"cloudtasks.tasks.create", "cloudtasks.queues.get"}
	tp, err := b.client.TestIamPermissions(ctx, &iampb.TestIamPermissionsRequest{Resource: queue, Permissions: perms})
	require.NoError(t, err)
	require.Equal(t, perms, tp.Permissions)
	_, err = b.client.TestIamPermissions(ctx, &iampb.TestIamPermissionsRequest{Resource: queue, Permissions: []string{"cloudtasks.*"}})
	requireCode(t, err, codes.InvalidArgument, "wildcards")

	_, err = b.client.GetIamPolicy(ctx, &iampb.GetIamPolicyRequest{Resource: loc + "/queues/missing"})
	requireCode(t, err, codes.NotFound, "does not exist")

	// A deleted and re-created queue starts with an empty policy.
	require.NoError(t, b.client.DeleteQueue(ctx, &cloudtaskspb.DeleteQueueRequest{Name: loc + "/queues/other"}))
	_, err = b.client.SetIamPolicy(ctx, &iampb.SetIamPolicyRequest{Resource: loc + "/queues/other", Policy: &iampb.Policy{}})
	requireCode(t, err, codes.NotFound, "does not exist")
}

func TestBatchOperationsWhenEveryRequestFails(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *emulator.Config) { c.DisableDelivery = true })
	ctx := context.Background()
	_, err := b.client.CreateTask(ctx, &cloudtaskspb.CreateTaskRequest{Parent: queue, Task: httpTask(queue + "/tasks/dup")})
	require.NoError(t, err)

	// Create: the batch finished, so PARTIALLY_SUCCEEDED (FAILED is for an
	// operation that could not complete), with every failure listed.
	cop, err := b.client.BatchCreateTasks(ctx, &cloudtaskspb.BatchCreateTasksRequest{Parent: queue, Requests: []*cloudtaskspb.CreateTaskRequest{
		{Parent: queue, Task: httpTask(queue + "/tasks/dup")},
	}})
	require.NoError(t, err)
	resp, err := cop.Wait(ctx)
	require.NoError(t, err)
	require.Empty(t, resp.Tasks)
	cmeta, err := cop.Metadata()
	require.NoError(t, err)
	require.Equal(t, cloudtaskspb.BatchCreateTasksMetadata_PARTIALLY_SUCCEEDED, cmeta.State)
	require.Equal(t, int32(codes.AlreadyExists), cmeta.FailedRequests[0].Code)

	// Delete: as BatchDeleteTasksMetadata documents, ABORTED on the operation.
	dop, err := b.client.BatchDeleteTasks(ctx, &cloudtaskspb.BatchDeleteTasksRequest{Parent: queue, Names: []string{queue + "/tasks/missing"}})
	require.NoError(t, err)
	err = dop.Wait(ctx)
	requireCode(t, err, codes.Aborted, "None of the requests succeeded, refer to BatchDeleteTasksMetadata.failed_requests for individual error details")
	dmeta, err := dop.Metadata()
	require.NoError(t, err)
	require.Equal(t, cloudtaskspb.BatchDeleteTasksMetadata_PARTIALLY_SUCCEEDED, dmeta.State)
	require.Equal(t, int32(codes.NotFound), dmeta.FailedRequests[0].Code)
}

func TestPEMCertsServeTheSigningKey(t *testing.T) {
	t.Parallel()
	b := setup(t)
	resp, err := http.Get(b.srv.PEMCertsURL())
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "application/json", resp.Header.Get("Content-Type"))
	var certs map[string]string
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&certs))
	require.Len(t, certs, 1)
	jwks, err := http.Get(b.srv.JWKSURL())
	require.NoError(t, err)
	defer jwks.Body.Close()
	var set emuproto.JWKS
	require.NoError(t, json.NewDecoder(jwks.Body).Decode(&set))
	block, _ := pem.Decode([]byte(certs[set.Keys[0].Kid]))
	require.NotNil(t, block, "the key is listed under the JWKS key ID")
	require.Equal(t, "PUBLIC KEY", block.Type)
	pub, err := x509.ParsePKIXPublicKey(block.Bytes)
	require.NoError(t, err)
	require.True(t, b.srv.PublicKey().Equal(pub))
}

func TestTasksAreKeptAtMost31Days(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *emulator.Config) { c.Queues = []emulator.QueueConfig{{Name: queue, Paused: true}} })
	ctx := context.Background()
	w := newWorker(t, 200)
	for _, id := range []string{"waits", "fetched"} {
		_, err := b.client.CreateTask(ctx, &cloudtaskspb.CreateTaskRequest{Parent: queue, Task: w.task(queue + "/tasks/" + id)})
		require.NoError(t, err)
	}
	b.clock.Advance(31*24*time.Hour - time.Second)
	_, err := b.client.GetTask(ctx, &cloudtaskspb.GetTaskRequest{Name: queue + "/tasks/fetched"})
	require.NoError(t, err, "one second short of 31 days")
	b.clock.Advance(time.Second)
	_, err = b.client.GetTask(ctx, &cloudtaskspb.GetTaskRequest{Name: queue + "/tasks/fetched"})
	requireCode(t, err, codes.NotFound, "does not exist")

	_, err = b.client.ResumeQueue(ctx, &cloudtaskspb.ResumeQueueRequest{Name: queue})
	require.NoError(t, err)
	require.Equal(t, 0, runDue(t, b), "an expired task is deleted, not attempted")
	require.Empty(t, w.requests())
	require.Empty(t, b.srv.Tasks(queue))
	_, err = b.client.CreateTask(ctx, &cloudtaskspb.CreateTaskRequest{Parent: queue, Task: w.task(queue + "/tasks/waits")})
	requireCode(t, err, codes.AlreadyExists, "already exists") // the name stays taken for the reuse window
}
