package container_test

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"testing"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/network"
	"github.com/stretchr/testify/require"
	"github.com/testcontainers/testcontainers-go"
	"github.com/testcontainers/testcontainers-go/wait"
)

func TestTestcontainers(t *testing.T) {
	t.Parallel()
	image := getenv(t, imageEnv)
	getenv(t, "DOCKER_HOST") // podman's socket, set by scripts/container-test
	grpcAddr, publicURL := startEmulator(context.Background(), t, image)
	t.Logf("emulator at %s, public URL %s", grpcAddr, publicURL)
	checkEmulator(t, grpcAddr, publicURL, "projects/p/locations/europe-west1/queues/work")
}

// startEmulator is the snippet of docs/emulator.md: it starts ctdispatch's
// emulator image with testcontainers-go, with the queue
// projects/p/locations/europe-west1/queues/work, and returns the gRPC
// address for the client and the emulator's public URL (its OIDC issuer
// and key server) as this host reaches them. Workers in the test reach
// the emulator and are reached by it through the host.
func startEmulator(ctx context.Context, t *testing.T, image string) (grpcAddr, publicURL string) {
	t.Helper()
	// The public URL goes into the tokens, so it must be known before the
	// container starts: publish the key server on a port chosen here.
	httpPort := freePort(t)
	publicURL = fmt.Sprintf("http://127.0.0.1:%d", httpPort)
	ctr, err := testcontainers.Run(ctx, image,
		testcontainers.WithExposedPorts("8123/tcp", "8124/tcp"),
		testcontainers.WithEnv(map[string]string{
			"CTDISPATCH_EMULATOR_QUEUES":     "work",
			"CTDISPATCH_EMULATOR_PUBLIC_URL": publicURL,
		}),
		// Ready when the image's own health check passes. A scratch image
		// has no shell, which testcontainers' port checks run in.
		testcontainers.WithWaitStrategy(wait.ForExec([]string{
			"/ctdispatch", "emulator", "health", "--addr", "127.0.0.1:8123", "--http-addr", "127.0.0.1:8124",
		})),
		testcontainers.WithHostConfigModifier(func(hc *container.HostConfig) {
			// Published on loopback only, since the emulator has no
			// authentication; the key server on the port the public URL names.
			loopback := netip.MustParseAddr("127.0.0.1")
			hc.PortBindings = network.PortMap{
				network.MustParsePort("8123/tcp"): {{HostIP: loopback}},
				network.MustParsePort("8124/tcp"): {{HostIP: loopback, HostPort: strconv.Itoa(httpPort)}},
			}
			// Rootful podman with runc cannot apply its default open-files
			// limit on some hosts; explicit limits work there and under Docker.
			hc.Ulimits = []*container.Ulimit{
				{Name: "nofile", Soft: 1024, Hard: 20000},
				{Name: "nproc", Soft: 1024, Hard: 1024},
			}
		}),
	)
	testcontainers.CleanupContainer(t, ctr)
	require.NoError(t, err)
	grpcAddr, err = ctr.PortEndpoint(ctx, "8123/tcp", "")
	require.NoError(t, err)
	return grpcAddr, publicURL
}

// freePort returns a loopback port nothing listens on at the moment.
func freePort(t *testing.T) int {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer lis.Close()
	return lis.Addr().(*net.TCPAddr).Port
}
