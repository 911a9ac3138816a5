package emulator_test

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/ctdispatch/ctdispatch/cloudtasks/emulator"
	ctworker "github.com/ctdispatch/ctdispatch/cloudtasks/worker"
	"github.com/ctdispatch/ctdispatch/naming"
)

const (
	tokenAudience = "https://worker.example/tasks"
	tokenEmail    = "dispatcher@p.iam.gserviceaccount.com"
)

// TestSignTokenClaims pins what a token says: the claims of a Google ID
// token, from the emulator's clock and issuer unless the spec says
// otherwise, and the key ID of the emulator's key set.
func TestSignTokenClaims(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 11, 27, 9, 0, 0, 0, time.UTC)
	srv, err := emulator.New(emulator.Config{Clock: clockwork.NewFakeClockAt(at), SigningKey: testKey, DisableDelivery: true})
	require.NoError(t, err)
	t.Cleanup(func() { srv.Close() })

	tests := []struct {
		name string
		spec emulator.TokenSpec
		want jwt.MapClaims
	}{
		{"defaults", emulator.TokenSpec{Audience: tokenAudience, Email: tokenEmail}, jwt.MapClaims{
			"iss": srv.Issuer(), "aud": tokenAudience, "sub": tokenEmail, "email": tokenEmail, "email_verified": true,
			"iat": float64(at.Unix()), "exp": float64(at.Add(time.Hour).Unix()),
		}},
		{"every field", emulator.TokenSpec{
			Audience: "other", Email: "x@y", IssuedAt: at.Add(-3 * time.Hour), Lifetime: time.Minute,
			EmailUnverified: true, Issuer: "https://issuer.example",
		}, jwt.MapClaims{
			"iss": "https://issuer.example", "aud": "other", "sub": "x@y", "email": "x@y", "email_verified": false,
			"iat": float64(at.Add(-3 * time.Hour).Unix()), "exp": float64(at.Add(-3*time.Hour + time.Minute).Unix()),
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tok, err := srv.SignToken(tt.spec)
			require.NoError(t, err)
			claims := jwt.MapClaims{}
			parsed, err := jwt.NewParser(jwt.WithoutClaimsValidation()).ParseWithClaims(tok, claims, func(*jwt.Token) (any, error) {
				return srv.PublicKey(), nil
			})
			require.NoError(t, err)
			require.Equal(t, "RS256", parsed.Header["alg"])
			require.Equal(t, tt.want, claims)
		})
	}
}

func TestSignTokenRefusesAnIncompleteSpec(t *testing.T) {
	t.Parallel()
	srv, err := emulator.New(emulator.Config{SigningKey: testKey, DisableDelivery: true})
	require.NoError(t, err)
	t.Cleanup(func() { srv.Close() })
	tests := []struct {
		spec emulator.TokenSpec
		want string
	}{
		{emulator.TokenSpec{Email: tokenEmail}, "emulator: TokenSpec.Audience is empty; a token names its audience"},
		{emulator.TokenSpec{Audience: tokenAudience}, "emulator: TokenSpec.Email is empty; a token names its service account"},
		{emulator.TokenSpec{Audience: tokenAudience, Email: tokenEmail, Lifetime: -time.Second}, "emulator: TokenSpec.Lifetime -1s is negative; want 0 (one hour) or more"},
	}
	for _, tt := range tests {
		_, err := srv.SignToken(tt.spec)
		require.EqualError(t, err, tt.want)
	}
}

// TestWorkerVerifiesSignedTokens is the recipe of docs/emulator.md: a
// worker given the emulator's issuer, keys client and its own audience
// accepts the token a delivery would carry and refuses the others, each
// with the status the worker documents.
func TestWorkerVerifiesSignedTokens(t *testing.T) {
	t.Parallel()
	// The real clock, as the worker's verifier checks expiry on it.
	srv, err := emulator.New(emulator.Config{SigningKey: testKey, DisableDelivery: true})
	require.NoError(t, err)
	t.Cleanup(func() { srv.Close() })
	w, err := ctworker.New(context.Background(), &ctworker.Config{
		Audiences: []string{tokenAudience}, ServiceAccounts: []string{tokenEmail},
		Issuers: []string{srv.Issuer()}, KeysClient: srv.KeysClient(),
		Inbox: ctworker.NewMemoryInbox(),
	}, func(context.Context, *ctworker.Delivery) error { return nil })
	require.NoError(t, err)
	ws := httptest.NewServer(w)
	t.Cleanup(ws.Close)
	otherKey, err := rsa.GenerateKey(rand.Reader, 2048)
	require.NoError(t, err)

	valid := emulator.TokenSpec{Audience: tokenAudience, Email: tokenEmail}
	with := func(edit func(*emulator.TokenSpec)) emulator.TokenSpec { s := valid; edit(&s); return s }
	tests := []struct {
		name    string
		spec    emulator.TokenSpec
		want    int
		refusal ctworker.Refusal
	}{
		{"valid", valid, http.StatusOK, ""},
		{"expired", with(func(s *emulator.TokenSpec) { s.IssuedAt = time.Now().Add(-2 * time.Hour) }), http.StatusUnauthorized, ctworker.RefusalExpired},
		{"another key", with(func(s *emulator.TokenSpec) { s.SigningKey = otherKey }), http.StatusUnauthorized, ctworker.RefusalUnknownKey},
		{"another audience", with(func(s *emulator.TokenSpec) { s.Audience = "https://elsewhere.example/" }), http.StatusForbidden, ctworker.RefusalAudience},
		{"another issuer", with(func(s *emulator.TokenSpec) { s.Issuer = "https://accounts.google.com" }), http.StatusForbidden, ctworker.RefusalIssuer},
		{"another account", with(func(s *emulator.TokenSpec) { s.Email = "someone@else" }), http.StatusForbidden, ctworker.RefusalEmail},
		{"email not verified", with(func(s *emulator.TokenSpec) { s.EmailUnverified = true }), http.StatusForbidden, ctworker.RefusalEmailNotVerified},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tok, err := srv.SignToken(tt.spec)
			require.NoError(t, err)
			id, err := naming.NewDispatch("run1", "token", naming.Attempt(uint64(i+1)))
			require.NoError(t, err)
			code, refusal := postToWorker(t, ws.URL, id, tok)
			require.Equal(t, tt.want, code)
			require.Equal(t, string(tt.refusal), refusal)
		})
	}
}

// postToWorker sends what Cloud Tasks sends for id, with token, and
// returns the worker's status and the refusal it names, if any.
func postToWorker(t *testing.T, url string, id naming.ID, token string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader("{}"))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set(ctworker.HeaderQueueName, "q")
	req.Header.Set(ctworker.HeaderTaskName, id.CloudTaskID())
	req.Header.Set(ctworker.HeaderRetryCount, "0")
	req.Header.Set(ctworker.HeaderExecutionCount, "0")
	req.Header.Set(ctworker.HeaderETA, "1764061200.0")
	req.Header.Set(ctworker.HeaderIdempotencyKey, id.String())
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	return resp.StatusCode, resp.Header.Get(ctworker.HeaderRefusal)
}
