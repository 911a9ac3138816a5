package worker

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/cloudtasks/apiv2/cloudtaskspb"
	"github.com/golang-jwt/jwt/v5"
	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/ctdispatch/ctdispatch/cloudtasks/emulator"
)

// Time budget: about 3 s (one RSA key of the tests' own, five emulators).

// testSigningKey signs the tokens the tests mint by hand; an emulator given
// it as its SigningKey serves it, so a worker pointed at that emulator
// accepts what the key signs.
var testSigningKey = sync.OnceValue(func() *rsa.PrivateKey {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		panic(err)
	}
	return key
})

// emulatorKeyID names a key as the emulator does: the first 12 bytes of
// SHA-256 over the modulus, base64url. A token minted with the emulator's
// key and this kid is one the emulator could have signed.
func emulatorKeyID(pub *rsa.PublicKey) string {
	sum := sha256.Sum256(pub.N.Bytes())
	return base64.RawURLEncoding.EncodeToString(sum[:12])
}

// mint signs claims with method and key, with the given kid ("" for none).
func mint(t testing.TB, method jwt.SigningMethod, key any, kid string, claims jwt.MapClaims) string {
	t.Helper()
	tok := jwt.NewWithClaims(method, claims)
	if kid != "" {
		tok.Header["kid"] = kid
	}
	s, err := tok.SignedString(key)
	require.NoError(t, err)
	return s
}

// answer is what a worker answered one request.
type answer struct {
	status  int
	refusal string
	body    string
}

func postToken(t testing.TB, url, authorization string, h http.Header) answer {
	t.Helper()
	if authorization != "" {
		h.Set("Authorization", authorization)
	}
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(`{}`))
	require.NoError(t, err)
	req.Header = h
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return answer{resp.StatusCode, resp.Header.Get(HeaderRefusal), string(b)}
}

// refusalOutcome is the outcome a refusal answered with status is.
func refusalOutcome(status int) Outcome {
	return map[int]Outcome{401: OutcomeUnauthorized, 403: OutcomeForbidden, 500: OutcomeKeysUnavailable}[status]
}

// refused is the answer to a refused token by default: the outcome alone,
// and the reason's code in HeaderRefusal.
func refused(status int, reason Refusal) answer {
	return answer{status, string(reason), string(refusalOutcome(status)) + "\n"}
}

// explained is the answer to a refused token with Config.ExplainRefusals:
// the outcome, then the reason and the message.
func explained(status int, reason Refusal, message string) answer {
	return answer{status, string(reason), fmt.Sprintf("%s\n%s: %s\n", refusalOutcome(status), reason, message)}
}

// Tokens the emulator signs and delivers: every one that is not valid for
// this worker is refused with the exact status and, with the development
// option Config.ExplainRefusals, a body that says why, which the
// emulator's delivery log keeps; the handler never runs.
func TestTokensRefused(t *testing.T) {
	t.Parallel()
	now := time.Now().Truncate(time.Second)
	atNow := func(c *emulator.Config) { c.Clock = clockwork.NewFakeClockAt(now) }
	main := startEmulator(t, atNow)
	var calls atomic.Int32
	mux := http.NewServeMux()
	url := serve(t, mux) + "/work"
	cfg := main.verifiedConfig(url, NewMemoryInbox())
	cfg.ExplainRefusals = true
	w, err := New(context.Background(), cfg, func(context.Context, *Delivery) error {
		calls.Add(1)
		return nil
	})
	require.NoError(t, err)
	w.verify.clock = clockwork.NewFakeClockAt(now)
	mux.Handle("/work", w)

	emulators := map[string]*emu{
		"main":         main,
		"expired":      startEmulator(t, func(c *emulator.Config) { c.Clock = clockwork.NewFakeClockAt(now.Add(-2 * time.Hour)) }),
		"other key":    startEmulator(t, atNow, func(c *emulator.Config) { c.SigningKey = testSigningKey() }),
		"other issuer": startEmulator(t, atNow, func(c *emulator.Config) { c.OIDCIssuer = "https://issuer.example.com" }),
	}
	utc := func(d time.Duration) string { return now.Add(d).UTC().Format(time.RFC3339) }
	tests := []struct {
		name, emulator string
		mutate         func(*cloudtaskspb.HttpRequest)
		want           answer
	}{
		{"valid", "main", nil, answer{200, "", "done\n"}},
		{"no token", "main", func(hr *cloudtaskspb.HttpRequest) { hr.AuthorizationHeader = nil },
			explained(401, RefusalNoToken, `no Authorization header; Cloud Tasks sends "Bearer <OIDC token>" for a task with an OidcToken`)},
		{"signed by a clock two hours behind", "expired", nil, explained(401, RefusalExpired,
			"token expired at "+utc(-time.Hour)+" (exp), 1h0m0s before the worker's clock ("+utc(0)+"); tokens are accepted until exp; "+
				"issued at "+utc(-2*time.Hour)+" (iat), 2h0m0s from the worker's clock: the signer's clock and the worker's disagree "+
				"(an emulator with a fake clock set in the past signs such tokens), or the token was replayed")},
		{"signed by another key", "other key", nil, explained(401, RefusalUnknownKey,
			fmt.Sprintf("token key %q is not among the signing keys fetched from https://www.googleapis.com/oauth2/v3/certs "+
				"(Config.KeysClient answers that URL; the emulator's KeysClient() serves its keys)", emulatorKeyID(&testSigningKey().PublicKey)))},
		{"wrong issuer", "other issuer", nil, explained(403, RefusalIssuer,
			fmt.Sprintf(`issuer "https://issuer.example.com" not accepted; accepted: [%q] (Config.Issuers)`, main.srv.Issuer()))},
		{"wrong audience", "main", func(hr *cloudtaskspb.HttpRequest) {
			hr.GetOidcToken().Audience = "https://someone-else.example.com"
		}, explained(403, RefusalAudience, fmt.Sprintf(`audience "https://someone-else.example.com" not accepted; accepted: [%q] (Config.Audiences)`, url))},
		{"wrong signer", "main", func(hr *cloudtaskspb.HttpRequest) {
			hr.GetOidcToken().ServiceAccountEmail = "intruder@p.iam.gserviceaccount.com"
		}, explained(403, RefusalEmail, `service account "intruder@p.iam.gserviceaccount.com" not accepted; accepted: ["tasks@p.iam.gserviceaccount.com"] (Config.ServiceAccounts)`)},
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
		last := got[len(got)-1]
		require.Equal(t, tt.want.status, last.StatusCode, tt.name)
		require.Equal(t, tt.want.body, string(last.ResponseBody), tt.name)
	}
	require.Equal(t, int32(1), calls.Load(), "only the valid token reached the handler")
}

// A token signed with another algorithm than RS256 (ES256, which idtoken
// would check against another key set, HS256, or none at all) is refused
// with 401 before any key is fetched: it is logged at warn level and
// counted as unauthorized, not as a key failure.
func TestAlgorithmRefusedBeforeAnyKeyFetch(t *testing.T) {
	t.Parallel()
	key := testSigningKey()
	kid := emulatorKeyID(&key.PublicKey)
	e := startEmulator(t, func(c *emulator.Config) { c.SigningKey = key })
	mux := http.NewServeMux()
	url := serve(t, mux) + "/work"
	cfg := e.verifiedConfig(url, NewMemoryInbox())
	var fetches atomic.Int32
	redirect := cfg.KeysClient.Transport
	cfg.KeysClient = &http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
		fetches.Add(1)
		return redirect.RoundTrip(r)
	})}
	var logs bytes.Buffer
	cfg.Logger = slog.New(slog.NewJSONHandler(&logs, nil))
	reader := sdkmetric.NewManualReader()
	cfg.MeterProvider = sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	w, err := New(context.Background(), cfg, func(context.Context, *Delivery) error { return nil })
	require.NoError(t, err)
	mux.Handle("/work", w)

	claims := jwt.MapClaims{"iss": e.srv.Issuer(), "aud": url, "email": testSA, "email_verified": true,
		"iat": time.Now().Unix(), "exp": time.Now().Add(time.Hour).Unix()}
	ecKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tokens := map[string]string{
		"ES256": mint(t, jwt.SigningMethodES256, ecKey, kid, claims),
		"HS256": mint(t, jwt.SigningMethodHS256, []byte("shared secret"), kid, claims),
		"none":  mint(t, jwt.SigningMethodNone, jwt.UnsafeAllowNoneSignatureType, kid, claims),
	}
	for alg, token := range tokens {
		got := postToken(t, url, "Bearer "+token, cloudTasksHeaders(mustID(t, "alg", alg, "1")))
		require.Equal(t, refused(401, RefusalAlgorithm), got, alg)
	}
	require.Equal(t, int32(0), fetches.Load(), "no key fetched for another algorithm")
	var levels []string
	for _, l := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		var line map[string]any
		require.NoError(t, json.Unmarshal([]byte(l), &line))
		levels = append(levels, line["level"].(string))
	}
	require.Equal(t, []string{"WARN", "WARN", "WARN"}, levels)
	require.Equal(t, map[string]int64{"unauthorized/algorithm": 3}, deliveryCounts(t, reader))

	// The counting client does count: an RS256 token makes the one fetch.
	got := postToken(t, url, "Bearer "+mint(t, jwt.SigningMethodRS256, key, kid, claims), cloudTasksHeaders(mustID(t, "alg", "RS256", "1")))
	require.Equal(t, answer{200, "", "done\n"}, got)
	require.Equal(t, int32(1), fetches.Load())
}

// deliveryCounts reads MetricDeliveries by outcome, and by outcome and
// refusal ("unauthorized/expired") for refused tokens.
func deliveryCounts(t *testing.T, reader *sdkmetric.ManualReader) map[string]int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(context.Background(), &rm))
	counts := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if sum, ok := m.Data.(metricdata.Sum[int64]); ok && m.Name == MetricDeliveries {
				for _, p := range sum.DataPoints {
					v, _ := p.Attributes.Value(attribute.Key("outcome"))
					key := v.AsString()
					if r, ok := p.Attributes.Value(attribute.Key("refusal")); ok {
						key += "/" + r.AsString()
					}
					counts[key] += p.Value
				}
			}
		}
	}
	return counts
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
// problem (500), not the caller's (401): the caller is told the keys were
// unavailable (the outcome and the refusal's code), and only the log says
// why.
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
	var logs bytes.Buffer
	cfg.Logger = slog.New(slog.NewJSONHandler(&logs, nil))
	w2, err := New(context.Background(), cfg, func(context.Context, *Delivery) error { return nil })
	require.NoError(t, err)
	url2 := serve(t, w2)
	got := postToken(t, url2, "Bearer "+bearerToken(t, e, url), cloudTasksHeaders(mustID(t, "keys", "t", "9")))
	require.Equal(t, refused(500, RefusalKeysUnavailable), got)
	var line map[string]any
	require.NoError(t, json.Unmarshal(logs.Bytes(), &line))
	require.Equal(t, []any{"ERROR", "keys_unavailable", "the worker could not fetch the keys that verify tokens; its log says why: " +
		`Get "https://www.googleapis.com/oauth2/v3/certs": signing keys unavailable: network unreachable`},
		[]any{line["level"], line["refusal"], line["error"]})
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
