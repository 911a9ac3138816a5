package worker

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/cloudtasks/apiv2/cloudtaskspb"
	"github.com/golang-jwt/jwt/v5"
	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/ctdispatch/ctdispatch/cloudtasks/emulator"
)

// Time budget: about 3 s (a second RSA key, four emulators).

// Every token that is not a valid Google-style ID token from an allowed
// service account, issuer and audience is refused with the exact status,
// and the handler never runs.
func TestTokensRefused(t *testing.T) {
	t.Parallel()
	main := startEmulator(t)
	var calls atomic.Int32
	mux := http.NewServeMux()
	url := serve(t, mux) + "/work"
	w, err := New(context.Background(), main.verifiedConfig(url, NewMemoryInbox()), func(context.Context, *Delivery) error {
		calls.Add(1)
		return nil
	})
	require.NoError(t, err)
	mux.Handle("/work", w)

	otherKey, err := rsa.GenerateKey(rand.Reader, 2048)
	require.NoError(t, err)
	emulators := map[string]*emu{
		"main":         main,
		"expired":      startEmulator(t, func(c *emulator.Config) { c.Clock = clockwork.NewFakeClockAt(time.Now().Add(-2 * time.Hour)) }),
		"other key":    startEmulator(t, func(c *emulator.Config) { c.SigningKey = otherKey }),
		"other issuer": startEmulator(t, func(c *emulator.Config) { c.OIDCIssuer = "https://issuer.example.com" }),
	}
	tests := []struct {
		name, emulator string
		mutate         func(*cloudtaskspb.HttpRequest)
		want           int
	}{
		{"valid", "main", nil, 200},
		{"no token", "main", func(hr *cloudtaskspb.HttpRequest) { hr.AuthorizationHeader = nil }, 401},
		{"expired", "expired", nil, 401},
		{"signed by another key", "other key", nil, 401},
		{"wrong issuer", "other issuer", nil, 403},
		{"wrong audience", "main", func(hr *cloudtaskspb.HttpRequest) {
			hr.GetOidcToken().Audience = "https://someone-else.example.com"
		}, 403},
		{"wrong signer", "main", func(hr *cloudtaskspb.HttpRequest) {
			hr.GetOidcToken().ServiceAccountEmail = "intruder@p.iam.gserviceaccount.com"
		}, 403},
	}
	for i, tt := range tests {
		e := emulators[tt.emulator]
		var mutate []func(*cloudtaskspb.HttpRequest)
		if tt.mutate != nil {
			mutate = append(mutate, tt.mutate)
		}
		e.createTask(t, mustID(t, "tokens", fmt.Sprint("t", i), "1"), url, mutate...)
		_, err := e.srv.RunDue(context.Background())
		require.NoError(t, err)
		got := e.srv.Deliveries()
		require.Equal(t, tt.want, got[len(got)-1].StatusCode, tt.name)
	}
	require.Equal(t, int32(1), calls.Load(), "only the valid token reached the handler")

	// Tokens that no emulator would send, posted directly.
	good := bearerToken(t, main, url)
	seg := strings.Split(good, ".")
	payload, err := base64.RawURLEncoding.DecodeString(seg[1])
	require.NoError(t, err)
	forged := seg[0] + "." + base64.RawURLEncoding.EncodeToString(bytes.Replace(payload, []byte(testSA), []byte("admin@p.iam.gserviceaccount.com"), 1)) + "." + seg[2]
	direct := []struct {
		name, authorization string
		want                int
	}{
		{"payload altered after signing", "Bearer " + forged, 401},
		{"basic auth", "Basic dXNlcjpwYXNz", 401},
		{"not a JWT", "Bearer not-a-jwt", 401},
		{"empty bearer", "Bearer ", 401},
	}
	for _, tt := range direct {
		h := cloudTasksHeaders(mustID(t, "tokens", "direct", "1"))
		h.Set("Authorization", tt.authorization)
		code, body, _ := post(t, url, h, "")
		require.Equal(t, tt.want, code, tt.name)
		require.Equal(t, "unauthorized\n", body, tt.name)
	}
	require.Equal(t, int32(1), calls.Load(), "no forged token reached the handler")
}

// bearerToken has the emulator deliver a task to a recorder and returns
// the token it carried, for requests a test builds itself.
func bearerToken(t *testing.T, e *emu, audience string) string {
	t.Helper()
	got := make(chan string, 1)
	url := serve(t, http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		got <- strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
	}))
	e.createTask(t, mustID(t, "token", "capture", "1"), url, func(hr *cloudtaskspb.HttpRequest) {
		hr.GetOidcToken().Audience = audience
	})
	_, err := e.srv.RunDue(context.Background())
	require.NoError(t, err)
	return <-got
}

// The keys are fetched once and cached, because the emulator's JWKS, like
// Google's, says how long they may be kept; a failed fetch is the worker's
// problem (500), not the caller's (401).
func TestSigningKeysCachedAndTheirFailureIsA500(t *testing.T) {
	t.Parallel()
	e := startEmulator(t)
	var fetches atomic.Int32
	fail := atomic.Bool{}
	mux := http.NewServeMux()
	url := serve(t, mux) + "/work"
	cfg := e.verifiedConfig(url, NewMemoryInbox())
	redirect := cfg.KeysClient.Transport
	cfg.KeysClient = &http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
		fetches.Add(1)
		if fail.Load() {
			return nil, errors.New("network unreachable")
		}
		return redirect.RoundTrip(r)
	})}
	w, err := New(context.Background(), cfg, func(context.Context, *Delivery) error { return nil })
	require.NoError(t, err)
	mux.Handle("/work", w)
	// One delivery first: concurrent first deliveries would each fetch,
	// as idtoken does not share a fetch in flight.
	for i := range 3 {
		e.createTask(t, mustID(t, "keys", "t", string(rune('1'+i))), url)
		_, err = e.srv.RunDue(context.Background())
		require.NoError(t, err)
	}
	require.Equal(t, []int{200, 200, 200}, e.statuses())
	require.Equal(t, int32(1), fetches.Load())

	// A fresh worker whose key fetch fails.
	fail.Store(true)
	w2, err := New(context.Background(), cfg, func(context.Context, *Delivery) error { return nil })
	require.NoError(t, err)
	url2 := serve(t, w2)
	h := cloudTasksHeaders(mustID(t, "keys", "t", "9"))
	h.Set("Authorization", "Bearer "+bearerToken(t, e, url))
	code, body, _ := post(t, url2, h, "")
	require.Equal(t, 500, code)
	require.Equal(t, "keys_unavailable\n", body)
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// A token signed with the right key, for the right audience and account,
// whose email_verified claim is false or missing is refused (403); the
// string "true" some older tokens carry is accepted.
func TestEmailMustBeVerified(t *testing.T) {
	t.Parallel()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	require.NoError(t, err)
	e := startEmulator(t, func(c *emulator.Config) { c.SigningKey = key })
	var calls atomic.Int32
	mux := http.NewServeMux()
	url := serve(t, mux) + "/work"
	w, err := New(context.Background(), e.verifiedConfig(url, NewMemoryInbox()), func(context.Context, *Delivery) error {
		calls.Add(1)
		return nil
	})
	require.NoError(t, err)
	mux.Handle("/work", w)
	// The emulator names its key by the first 12 bytes of SHA-256 over the
	// modulus, base64url; a token minted here with the same key and kid is
	// one the emulator could have signed.
	sum := sha256.Sum256(key.PublicKey.N.Bytes())
	kid := base64.RawURLEncoding.EncodeToString(sum[:12])
	mint := func(verified any) string {
		claims := jwt.MapClaims{"iss": e.srv.Issuer(), "aud": url, "sub": testSA, "email": testSA,
			"iat": time.Now().Unix(), "exp": time.Now().Add(time.Hour).Unix()}
		if verified != nil {
			claims["email_verified"] = verified
		}
		tok := jwt.NewWithClaims(jwt.SigningMethodRS256, claims)
		tok.Header["kid"] = kid
		s, err := tok.SignedString(key)
		require.NoError(t, err)
		return s
	}
	tests := []struct {
		name     string
		verified any
		want     int
	}{
		{"verified", true, 200},
		{"verified as a string", "true", 200},
		{"not verified", false, 403},
		{"claim missing", nil, 403},
		{"claim of another type", 1, 403},
	}
	for i, tt := range tests {
		h := cloudTasksHeaders(mustID(t, "verified", fmt.Sprint("t", i), "1"))
		h.Set("Authorization", "Bearer "+mint(tt.verified))
		code, _, _ := post(t, url, h, "")
		require.Equal(t, tt.want, code, tt.name)
	}
	require.Equal(t, int32(2), calls.Load(), "only verified emails reached the handler")
}
