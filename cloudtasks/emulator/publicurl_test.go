package emulator_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/ctdispatch/ctdispatch/cloudtasks/emulator"
	"github.com/ctdispatch/ctdispatch/cloudtasks/emulator/emuproto"
)

// The tests in this file cover what an emulator in a container needs: a
// public URL other than its listen address, and a health check that any
// gRPC health client can make.

func TestPublicURLIsIssuerAndKeyLocation(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *emulator.Config) { c.PublicURL = "http://emulator.example:8124/" })
	require.Equal(t, "http://emulator.example:8124", b.srv.PublicURL(), "the trailing slash is dropped")
	require.Equal(t, "http://emulator.example:8124", b.srv.Issuer())
	require.Equal(t, "http://emulator.example:8124/oauth2/v3/certs", b.srv.JWKSURL())
	require.Equal(t, "http://emulator.example:8124/oauth2/v1/certs", b.srv.PEMCertsURL())

	// The discovery document is fetched at the listen address but
	// advertises the public one.
	resp, err := http.Get("http://" + b.srv.HTTPAddr() + emuproto.DiscoveryPath)
	require.NoError(t, err)
	defer resp.Body.Close()
	var doc struct {
		Issuer  string `json:"issuer"`
		JWKSURI string `json:"jwks_uri"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&doc))
	require.Equal(t, "http://emulator.example:8124", doc.Issuer)
	require.Equal(t, "http://emulator.example:8124/oauth2/v3/certs", doc.JWKSURI)
}

func TestPublicURLDefaultsAndExplicitIssuer(t *testing.T) {
	t.Parallel()
	b := setup(t)
	require.Equal(t, "http://"+b.srv.HTTPAddr(), b.srv.PublicURL())
	require.Equal(t, b.srv.PublicURL(), b.srv.Issuer())

	b = setup(t, func(c *emulator.Config) {
		c.PublicURL = "https://tasks.example/keys"
		c.OIDCIssuer = "https://issuer.example"
	})
	require.Equal(t, "https://issuer.example", b.srv.Issuer(), "an explicit issuer wins over the public URL")
	require.Equal(t, "https://tasks.example/keys/oauth2/v3/certs", b.srv.JWKSURL())
}

func TestPublicURLValidation(t *testing.T) {
	t.Parallel()
	tests := []struct{ url, msg string }{
		{"localhost:8124", `Config.PublicURL "localhost:8124" must start with http:// or https://`},
		{"ftp://h/", `Config.PublicURL "ftp://h/" must start with http:// or https://`},
		{"http:///keys", `Config.PublicURL "http:///keys" must name a host, for example http://localhost:8124`},
		{"http://h:1/?a=b", `Config.PublicURL "http://h:1/?a=b" must not have a query, a fragment or user information`},
		{"http://u:p@h:1", `Config.PublicURL "http://u:p@h:1" must not have a query, a fragment or user information`},
		{"http://h:1/%zz", `Config.PublicURL "http://h:1/%zz" is not a URL`},
	}
	for _, tt := range tests {
		t.Run(tt.url, func(t *testing.T) {
			_, err := emulator.New(emulator.Config{PublicURL: tt.url})
			require.ErrorIs(t, err, emulator.ErrInvalidConfig)
			require.ErrorContains(t, err, tt.msg)
		})
	}
}

func TestHealthServiceServesUntilClose(t *testing.T) {
	t.Parallel()
	srv, err := emulator.New(emulator.Config{DisableDelivery: true})
	require.NoError(t, err)
	conn, err := grpc.NewClient(srv.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer conn.Close()
	client := healthpb.NewHealthClient(conn)
	ctx := context.Background()
	for _, service := range []string{"", emuproto.HealthService} {
		resp, err := client.Check(ctx, &healthpb.HealthCheckRequest{Service: service})
		require.NoError(t, err, "service %q", service)
		require.Equal(t, healthpb.HealthCheckResponse_SERVING, resp.GetStatus(), "service %q", service)
	}
	require.NoError(t, srv.Close())
	_, err = client.Check(ctx, &healthpb.HealthCheckRequest{})
	require.Error(t, err, "a closed emulator must not answer as healthy")
}
