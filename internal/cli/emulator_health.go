package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/ctdispatch/ctdispatch/cloudtasks/emulator/emuproto"
)

// defaultHealthTimeout bounds a health check: well under the 30 s a
// container runtime gives a HEALTHCHECK by default, so a hung emulator is
// reported by this command rather than killed by the runtime.
const defaultHealthTimeout = 5 * time.Second

// newEmulatorHealthCmd checks a running emulator the way a container
// runtime's HEALTHCHECK needs: no shell and no other tool, an exit status
// of 0 or 1, one line saying what was checked or what failed.
func newEmulatorHealthCmd(env *Env) *cobra.Command {
	var (
		addr, httpAddr string
		timeout        time.Duration
	)
	cmd := &cobra.Command{
		Use:   "health [--addr HOST:PORT] [--http-addr HOST:PORT]",
		Short: "Check that a running emulator serves (exit 0) or not (exit 1)",
		Long: `Check that a running emulator serves: its gRPC server must answer the
standard gRPC health check (grpc.health.v1) with SERVING for the Cloud
Tasks service, and, when --http-addr is given, its HTTP server must serve
the OpenID discovery document workers use to find the token keys.

--addr defaults to $` + emulatorHostEnv + ` or ` + defaultEmulatorAddr + `; an address on every
interface (0.0.0.0:8123) is checked on loopback. Exit status 0 means
healthy and 1 unhealthy, as a container HEALTHCHECK expects; a mistake in
the command line itself exits 2, which Docker reserves, so test the
command by hand before putting it in an image.`,
		Example: `  ctdispatch emulator health --addr 127.0.0.1:8123 --http-addr 127.0.0.1:8124`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if addr == "" {
				addr = env.Getenv(emulatorHostEnv)
			}
			if addr == "" {
				addr = defaultEmulatorAddr
			}
			if err := checkHostPort("--addr", addr); err != nil {
				return err
			}
			if httpAddr != "" {
				if err := checkHostPort("--http-addr", httpAddr); err != nil {
					return err
				}
			}
			if timeout <= 0 {
				return usagef("--timeout %s: want a positive duration, for example 5s", timeout)
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			target := dialAddr(addr)
			if err := checkGRPCHealth(ctx, target); err != nil {
				return fmt.Errorf("emulator at %s is not healthy: %w", target, err)
			}
			report := "gRPC " + target + " SERVING"
			if httpAddr != "" {
				base := "http://" + dialAddr(httpAddr)
				issuer, err := checkDiscovery(ctx, base)
				if err != nil {
					return fmt.Errorf("emulator HTTP server at %s is not healthy: %w", base, err)
				}
				report += "; HTTP " + base + " serves keys for issuer " + issuer
			}
			_, err := fmt.Fprintln(cmd.OutOrStdout(), "healthy: "+report)
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&addr, "addr", "", "gRPC address of the emulator (default $"+emulatorHostEnv+" or "+defaultEmulatorAddr+")")
	f.StringVar(&httpAddr, "http-addr", "", "also check the emulator's HTTP server (OIDC keys) at this address")
	f.DurationVar(&timeout, "timeout", defaultHealthTimeout, "give up and report unhealthy after this long")
	return cmd
}

// checkGRPCHealth asks the standard gRPC health service about the Cloud
// Tasks service; anything but SERVING, or no answer, is an error.
func checkGRPCHealth(ctx context.Context, target string) error {
	conn, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: emuproto.HealthService})
	if err != nil {
		return fmt.Errorf("health check: %w", err)
	}
	if s := resp.GetStatus(); s != healthpb.HealthCheckResponse_SERVING {
		return fmt.Errorf("health check: status %s, want SERVING", s)
	}
	return nil
}

// checkDiscovery fetches the OpenID discovery document and returns its
// issuer; a document without issuer or key URL is an error, since workers
// could not verify tokens with it.
func checkDiscovery(ctx context.Context, base string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+emuproto.DiscoveryPath, nil)
	if err != nil {
		return "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET %s: status %s, want 200 OK", emuproto.DiscoveryPath, resp.Status)
	}
	var doc struct {
		Issuer  string `json:"issuer"`
		JWKSURI string `json:"jwks_uri"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&doc); err != nil {
		return "", fmt.Errorf("GET %s: %w", emuproto.DiscoveryPath, err)
	}
	if doc.Issuer == "" || doc.JWKSURI == "" {
		return "", fmt.Errorf("GET %s: the document has no issuer or jwks_uri", emuproto.DiscoveryPath)
	}
	return doc.Issuer, nil
}
