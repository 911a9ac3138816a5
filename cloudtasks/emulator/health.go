package emulator

import (
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// HealthService is the service name under which the emulator reports
// itself SERVING through the standard gRPC health protocol
// (grpc.health.v1.Health), as does the empty name that asks about the
// whole server. Container health checks, Kubernetes gRPC probes and
// grpc_health_probe speak that protocol without knowing Cloud Tasks.
const HealthService = "google.cloud.tasks.v2.CloudTasks"

// registerHealth answers health checks for as long as the gRPC server
// serves; Close stops the server, and with it the answers.
func registerHealth(srv *grpc.Server) {
	h := health.NewServer()
	h.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	h.SetServingStatus(HealthService, healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(srv, h)
}
