package emulator_test

import (
	"context"
	"net"
	"testing"

	cloudtasks "cloud.google.com/go/cloudtasks/apiv2"
	"cloud.google.com/go/cloudtasks/apiv2/cloudtaskspb"
	"github.com/stretchr/testify/require"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"

	"github.com/ctdispatch/ctdispatch/cloudtasks/emulator"
)

// An in-memory listener works too: the test dials it and hands the
// connection to the official client.
func TestInMemoryListener(t *testing.T) {
	t.Parallel()
	lis := bufconn.Listen(1 << 20)
	srv, err := emulator.New(emulator.Config{Listener: lis, DisableDelivery: true, Queues: []emulator.QueueConfig{{Name: queue}}})
	require.NoError(t, err)
	defer srv.Close()
	conn, err := grpc.NewClient("passthrough:///bufnet",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer conn.Close()
	client, err := cloudtasks.NewClient(context.Background(), option.WithGRPCConn(conn))
	require.NoError(t, err)
	q, err := client.GetQueue(context.Background(), &cloudtaskspb.GetQueueRequest{Name: queue})
	require.NoError(t, err)
	require.Equal(t, queue, q.Name)
}
