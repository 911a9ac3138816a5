package container_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/ctdispatch/ctdispatch/cloudtasks/emulator"

	cloudtasks "cloud.google.com/go/cloudtasks/apiv2"
	"cloud.google.com/go/cloudtasks/apiv2/cloudtaskspb"
	"github.com/stretchr/testify/require"
	"google.golang.org/api/idtoken"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// The tests of this module drive ctdispatch's container image from the
// host, as its users do. scripts/container-test builds the image, starts
// it, and passes what it started through these variables; without them
// the tests skip, unless requiredEnv says they must run.
const (
	// grpcEnv is the host address of the container's gRPC port (8123).
	grpcEnv = "CTDISPATCH_TEST_EMULATOR_GRPC"
	// publicURLEnv is the host URL of the container's HTTP port (8124),
	// given to the container as its public URL.
	publicURLEnv = "CTDISPATCH_TEST_EMULATOR_PUBLIC_URL"
	// imageEnv names the image the testcontainers test starts.
	imageEnv = "CTDISPATCH_TEST_IMAGE"
	// workerHostEnv is the name under which containers reach the host;
	// defaults to host.containers.internal (podman's name; Docker's is
	// host.docker.internal).
	workerHostEnv = "CTDISPATCH_TEST_WORKER_HOST"
	// composeGRPCEnv and composePublicURLEnv are the host address and
	// public URL of the compose service the script started from
	// compose.yaml.
	composeGRPCEnv      = "CTDISPATCH_TEST_COMPOSE_GRPC"
	composePublicURLEnv = "CTDISPATCH_TEST_COMPOSE_PUBLIC_URL"
	// requiredEnv set to 1 turns a skip for a missing variable into a
	// failure, so CI cannot pass without running these tests.
	requiredEnv = "CTDISPATCH_TEST_CONTAINER_REQUIRED"
)

// getenv returns the variable or skips the test (fails it under
// requiredEnv=1).
func getenv(t *testing.T, name string) string {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		if os.Getenv(requiredEnv) == "1" {
			t.Fatalf("$%s is not set and $%s=1: run this test through scripts/container-test", name, requiredEnv)
		}
		t.Skipf("$%s is not set: run scripts/container-test", name)
	}
	return v
}

func workerHost() string {
	if h := os.Getenv(workerHostEnv); h != "" {
		return h
	}
	return "host.containers.internal"
}

func TestImageStartedByScript(t *testing.T) {
	t.Parallel()
	grpcAddr := getenv(t, grpcEnv)
	// scripts/container-test appends --queue from-flag to the image's
	// command line, and mounts a config file with the queue from-config.
	checkEmulator(t, grpcAddr, getenv(t, publicURLEnv), "projects/p/locations/europe-west1/queues/from-flag")

	ctx := context.Background()
	client, err := cloudtasks.NewClient(ctx, clientOptions(grpcAddr)...)
	require.NoError(t, err)
	defer client.Close()
	q, err := client.GetQueue(ctx, &cloudtaskspb.GetQueueRequest{Name: "projects/p/locations/europe-west1/queues/from-config"})
	require.NoError(t, err)
	require.Equal(t, int32(3), q.GetRetryConfig().GetMaxAttempts(), "the config file's setting")
}

// clientOptions point the official client at an emulator, as the README
// says: no credentials, no TLS.
func clientOptions(grpcAddr string) []option.ClientOption {
	return []option.ClientOption{
		option.WithEndpoint(grpcAddr),
		option.WithoutAuthentication(),
		option.WithGRPCDialOption(grpc.WithTransportCredentials(insecure.NewCredentials())),
	}
}

// checkEmulator drives an emulator in a container through the official
// client and has it deliver a task with an OIDC token to a worker on this
// host, which verifies the token with Google's idtoken package against
// the keys the emulator serves at publicURL.
// The queue must exist: it shows the emulator's configuration reached it.
func checkEmulator(t *testing.T, grpcAddr, publicURL, queue string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	var doc struct {
		Issuer  string `json:"issuer"`
		JWKSURI string `json:"jwks_uri"`
	}
	resp, err := http.Get(publicURL + "/.well-known/openid-configuration")
	require.NoError(t, err)
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&doc))
	resp.Body.Close()
	require.Equal(t, publicURL, doc.Issuer, "the public URL is the issuer")
	require.Equal(t, publicURL+"/oauth2/v3/certs", doc.JWKSURI, "and the key URL, not the address the container listens on")

	w := startWorker(t, ctx, publicURL)

	client, err := cloudtasks.NewClient(ctx, clientOptions(grpcAddr)...)
	require.NoError(t, err)
	defer client.Close()
	_, err = client.GetQueue(ctx, &cloudtaskspb.GetQueueRequest{Name: queue})
	require.NoError(t, err, "queue %s was configured at start", queue)

	const account = "worker@p.iam.gserviceaccount.com"
	name := fmt.Sprintf("%s/tasks/container-%d", queue, time.Now().UnixNano())
	_, err = client.CreateTask(ctx, &cloudtaskspb.CreateTaskRequest{Parent: queue, Task: &cloudtaskspb.Task{
		Name: name,
		MessageType: &cloudtaskspb.Task_HttpRequest{HttpRequest: &cloudtaskspb.HttpRequest{
			Url:        w.url,
			HttpMethod: cloudtaskspb.HttpMethod_POST,
			Body:       []byte("hello from the container"),
			AuthorizationHeader: &cloudtaskspb.HttpRequest_OidcToken{OidcToken: &cloudtaskspb.OidcToken{
				ServiceAccountEmail: account,
			}},
		}},
	}})
	require.NoError(t, err)

	var d delivery
	select {
	case d = <-w.got:
	case <-ctx.Done():
		t.Fatalf("no delivery to %s within a minute: can the container reach this host as %s?", w.url, workerHost())
	}
	require.NoError(t, d.err, "the token must pass Google's verifier")
	require.Equal(t, "hello from the container", d.body)
	require.Equal(t, name[strings.LastIndex(name, "/")+1:], d.header.Get("X-CloudTasks-TaskName"))
	require.Equal(t, queue[strings.LastIndex(queue, "/")+1:], d.header.Get("X-CloudTasks-QueueName"))
	require.Equal(t, w.url, d.payload.Audience, "the audience defaults to the task's URL")
	require.Equal(t, publicURL, d.payload.Issuer)
	require.Equal(t, account, d.payload.Claims["email"])

	// The worker answered 200, so the task is deleted; each GetTask is a
	// round trip to the container.
	for {
		_, err := client.GetTask(ctx, &cloudtaskspb.GetTaskRequest{Name: name})
		if status.Code(err) == codes.NotFound {
			break
		}
		require.NoError(t, err)
	}
}

// delivery is what the worker saw of one request.
type delivery struct {
	header  http.Header
	body    string
	payload *idtoken.Payload
	err     error
}

// worker is an HTTP target on this host that containers reach.
type worker struct {
	url string
	got chan delivery
}

// startWorker listens on every interface (a container reaches the host
// through its bridge, not loopback) and verifies each request's bearer
// token with idtoken, whose key fetches go to the emulator at publicURL.
func startWorker(t *testing.T, ctx context.Context, publicURL string) *worker {
	t.Helper()
	validator, err := idtoken.NewValidator(ctx, option.WithHTTPClient(emulator.KeysClient(strings.TrimPrefix(publicURL, "http://"))))
	require.NoError(t, err)
	lis, err := net.Listen("tcp", "0.0.0.0:0")
	require.NoError(t, err)
	w := &worker{
		url: fmt.Sprintf("http://%s:%d/work", workerHost(), lis.Addr().(*net.TCPAddr).Port),
		got: make(chan delivery, 1),
	}
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		d := delivery{header: r.Header.Clone(), body: string(body)}
		d.payload, d.err = validator.Validate(r.Context(), strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer "), w.url)
		select {
		case w.got <- d:
		default: // a retry after the test has its answer
		}
		if d.err != nil {
			http.Error(rw, d.err.Error(), http.StatusUnauthorized)
		}
	})}
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(func() { _ = srv.Close() })
	return w
}
