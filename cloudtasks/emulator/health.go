package emulator

import (
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/ctdispatch/ctdispatch/cloudtasks/emulator/emuproto"
)

// registerHealth answers health checks for as long as the gRPC server
// serves; Close stops the server, and with it the answers.
func registerHealth(srv *grpc.Server) {
	h := health.NewServer()
	h.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	h.SetServingStatus(emuproto.HealthService, healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(srv, h)
}
