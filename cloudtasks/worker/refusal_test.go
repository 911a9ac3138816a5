package worker

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/ctdispatch/ctdispatch/cloudtasks/emulator"
)

// allRefusals lists every Refusal the package declares.
var allRefusals = []Refusal{
	RefusalNoToken, RefusalMalformed, RefusalAlgorithm, RefusalExpired, RefusalUnknownKey, RefusalSignature,
	RefusalIssuer, RefusalAudience, RefusalEmail, RefusalEmailNotVerified, RefusalKeysUnavailable,
}

// refusalBench is a verifying worker on loopback whose clock for tokens is
// fixed at now and which accepts what testSigningKey signs for its URL,
// with its log, metrics and spans kept for the test.
type refusalBench struct {
	e      *emu
	url    string
	kid    string
	now    time.Time
	logs   bytes.Buffer
	reader *sdkmetric.ManualReader
	spans  *tracetest.SpanRecorder
	calls  atomic.Int32
}

// newRefusalBench starts a bench; explain sets Config.ExplainRefusals, and
// keysDown makes every fetch of the signing keys fail.
func newRefusalBench(t *testing.T, explain, keysDown bool) *refusalBench {
	t.Helper()
	key := testSigningKey()
	b := &refusalBench{
		e:      startEmulator(t, func(c *emulator.Config) { c.SigningKey = key }),
		kid:    emulatorKeyID(&key.PublicKey),
		now:    time.Now().Truncate(time.Second),
		reader: sdkmetric.NewManualReader(),
		spans:  tracetest.NewSpanRecorder(),
	}
	mux := http.NewServeMux()
	b.url = serve(t, mux) + "/work"
	cfg := b.e.verifiedConfig(b.url, NewMemoryInbox())
	cfg.ExplainRefusals = explain
	if keysDown {
		cfg.KeysClient = &http.Client{Transport: roundTripFunc(func(*http.Request) (*http.Response, error) {
			return nil, errors.New("network unreachable")
		})}
	}
	cfg.Logger = slog.New(slog.NewJSONHandler(&b.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	cfg.MeterProvider = sdkmetric.NewMeterProvider(sdkmetric.WithReader(b.reader))
	cfg.TracerProvider = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(b.spans))
	w, err := New(context.Background(), cfg, func(context.Context, *Delivery) error {
		b.calls.Add(1)
		return nil
	})
	require.NoError(t, err)
	w.verify.clock = clockwork.NewFakeClockAt(b.now)
	mux.Handle("/work", w)
	b.logs.Reset() // New's own warning, if any
	return b
}

// claims are those of a token valid for the bench, changed by the edits.
func (b *refusalBench) claims(edits ...func(jwt.MapClaims)) jwt.MapClaims {
	c := jwt.MapClaims{"iss": b.e.srv.Issuer(), "aud": b.url, "sub": testSA, "email": testSA, "email_verified": true,
		"iat": b.now.Add(-time.Minute).Unix(), "exp": b.now.Add(59 * time.Minute).Unix()}
	for _, edit := range edits {
		edit(c)
	}
	return c
}

// bearer is an Authorization header with claims signed for the bench.
func (b *refusalBench) bearer(t *testing.T, c jwt.MapClaims) string {
	return "Bearer " + mint(t, jwt.SigningMethodRS256, testSigningKey(), b.kid, c)
}

// tokenCase is a request's Authorization header and what the worker makes
// of it: the status, and for a refusal its code and its full reason.
type tokenCase struct {
	name, authorization string
	status              int
	reason              Refusal
	message             string
}

// cases are tokens minted here as no emulator would sign them, one or more
// for every refusal a token can earn, and two valid ones.
func (b *refusalBench) cases(t *testing.T) []tokenCase {
	set := func(name string, v any) func(jwt.MapClaims) { return func(c jwt.MapClaims) { c[name] = v } }
	drop := func(name string) func(jwt.MapClaims) { return func(c jwt.MapClaims) { delete(c, name) } }
	key := testSigningKey()
	valid := strings.Split(mint(t, jwt.SigningMethodRS256, key, b.kid, b.claims()), ".")
	payload, err := base64.RawURLEncoding.DecodeString(valid[1])
	require.NoError(t, err)
	altered := valid[0] + "." + base64.RawURLEncoding.EncodeToString(bytes.Replace(payload, []byte(testSA), []byte("admin@p.iam.gserviceaccount.com"), 1)) + "." + valid[2]
	utc := func(d time.Duration) string { return b.now.Add(d).UTC().Format(time.RFC3339) }
	return []tokenCase{
		{"valid", b.bearer(t, b.claims()), 200, "", ""},
		{"email_verified as the string \"true\"", b.bearer(t, b.claims(set("email_verified", "true"))), 200, "", ""},
		{"no token", "", 401, RefusalNoToken, `no Authorization header; Cloud Tasks sends "Bearer <OIDC token>" for a task with an OidcToken`},
		{"basic auth", "Basic dXNlcjpwYXNz", 401, RefusalMalformed, `Authorization header is not "Bearer <token>"`},
		{"empty bearer", "Bearer ", 401, RefusalMalformed, `Authorization header is not "Bearer <token>"`},
		{"not a JWT", "Bearer not-a-jwt", 401, RefusalMalformed, "token has 1 dot-separated segments; a JWT has 3 (header.payload.signature)"},
		{"header not base64url", "Bearer !!.e30.c2ln", 401, RefusalMalformed, "token header is not base64url-encoded JSON: illegal base64 data at input byte 0"},
		{"no kid", "Bearer " + mint(t, jwt.SigningMethodRS256, key, "", b.claims()), 401, RefusalMalformed,
			`token header has no "kid"; Google's tokens name the key that signed them`},
		{"no exp", b.bearer(t, b.claims(drop("exp"))), 401, RefusalMalformed,
			`token has no positive "exp" claim; Google's tokens expire an hour after they are signed`},
		{"exp not a number", b.bearer(t, b.claims(set("exp", "tomorrow"))), 401, RefusalMalformed,
			"token payload is not base64url-encoded JSON claims: json: cannot unmarshal string into Go struct field .exp of type int64"},
		{"HS256", "Bearer " + mint(t, jwt.SigningMethodHS256, []byte("shared secret"), b.kid, b.claims()), 401, RefusalAlgorithm,
			`token algorithm "HS256" not accepted; accepted: [RS256] (Google signs Cloud Tasks' OIDC tokens with it)`},
		{"payload altered after signing", "Bearer " + altered, 401, RefusalSignature,
			fmt.Sprintf("token signature does not verify with key %q (RS256)", b.kid)},
		{"a key the worker does not know", "Bearer " + mint(t, jwt.SigningMethodRS256, key, "retired-key", b.claims()), 401, RefusalUnknownKey,
			`token key "retired-key" is not among the signing keys fetched from https://www.googleapis.com/oauth2/v3/certs ` +
				`(Config.KeysClient answers that URL; the emulator's KeysClient() serves its keys)`},
		{"signed with iat and exp in the past", b.bearer(t, b.claims(set("iat", b.now.Add(-3*time.Hour).Unix()), set("exp", b.now.Add(-2*time.Hour).Unix()))), 401, RefusalExpired,
			"token expired at " + utc(-2*time.Hour) + " (exp), 2h0m0s before the worker's clock (" + utc(0) + "); tokens are accepted until exp; " +
				"issued at " + utc(-3*time.Hour) + " (iat), 3h0m0s from the worker's clock: the signer's clock and the worker's disagree " +
				"(an emulator with a fake clock set in the past signs such tokens), or the token was replayed"},
		{"a short-lived token that just expired", b.bearer(t, b.claims(set("iat", b.now.Add(-2*time.Minute).Unix()), set("exp", b.now.Add(-time.Minute).Unix()))), 401, RefusalExpired,
			"token expired at " + utc(-time.Minute) + " (exp), 1m0s before the worker's clock (" + utc(0) + "); tokens are accepted until exp; " +
				"issued at " + utc(-2*time.Minute) + " (iat)"},
		{"issuer", b.bearer(t, b.claims(set("iss", "http://127.0.0.1:1234"))), 403, RefusalIssuer,
			fmt.Sprintf(`issuer "http://127.0.0.1:1234" not accepted; accepted: [%q] (Config.Issuers)`, b.e.srv.Issuer())},
		{"a long audience is cut", b.bearer(t, b.claims(set("aud", strings.Repeat("a", 200)))), 403, RefusalAudience,
			fmt.Sprintf(`audience "%s"… not accepted; accepted: [%q] (Config.Audiences)`, strings.Repeat("a", 128), b.url)},
		{"email", b.bearer(t, b.claims(set("email", "intruder@p.iam.gserviceaccount.com"))), 403, RefusalEmail,
			`service account "intruder@p.iam.gserviceaccount.com" not accepted; accepted: ["tasks@p.iam.gserviceaccount.com"] (Config.ServiceAccounts)`},
		{"email not verified", b.bearer(t, b.claims(set("email_verified", false))), 403, RefusalEmailNotVerified,
			`service account "tasks@p.iam.gserviceaccount.com" not verified: email_verified is false; want true`},
		{"email_verified missing", b.bearer(t, b.claims(drop("email_verified"))), 403, RefusalEmailNotVerified,
			`service account "tasks@p.iam.gserviceaccount.com" not verified: email_verified is missing; want true`},
		{"email_verified of another type", b.bearer(t, b.claims(set("email_verified", 1))), 403, RefusalEmailNotVerified,
			`service account "tasks@p.iam.gserviceaccount.com" not verified: email_verified is 1; want true`},
	}
}

// post sends the case's header to the bench and returns the answer and the
// request's one log line, decoded.
func (b *refusalBench) post(t *testing.T, i int, authorization string) (answer, map[string]any) {
	t.Helper()
	b.logs.Reset()
	got := postToken(t, b.url, authorization, cloudTasksHeaders(mustID(t, "why", fmt.Sprint("t", i), "1")))
	var line map[string]any
	require.NoError(t, json.Unmarshal(b.logs.Bytes(), &line))
	return got, line
}

// lastTraceID is the trace of the span the last request ran in.
func (b *refusalBench) lastTraceID(t *testing.T) string {
	t.Helper()
	ended := b.spans.Ended()
	require.NotEmpty(t, ended)
	return ended[len(ended)-1].SpanContext().TraceID().String()
}

// The configuration a caller must not learn from a refusal: the accepted
// issuer, audience and service account, the key a signature was checked
// against, the accepted algorithm, and the worker's clock.
func (b *refusalBench) configuration() []string {
	return []string{
		b.e.srv.Issuer(), b.url, strings.TrimPrefix(b.url, "http://"), testSA, b.kid, "RS256",
		b.now.UTC().Format(time.RFC3339), b.now.UTC().Format(time.DateOnly), fmt.Sprint(b.now.Unix()), "Config.",
	}
}

// By default a refused caller learns the outcome and the refusal's code,
// for every refusal: the body is "unauthorized", "forbidden" or
// "keys_unavailable" alone, and neither it nor HeaderRefusal holds a value
// of the configuration. The full reason is in the request's log line, with
// its trace, and the code in the metrics' refusal attribute.
func TestRefusalsTellTheCallerNothing(t *testing.T) {
	t.Parallel()
	b := newRefusalBench(t, false, false)
	secrets := b.configuration()
	seen := map[Refusal]bool{}
	wantCounts := map[string]int64{}
	for i, tc := range b.cases(t) {
		got, line := b.post(t, i, tc.authorization)
		if tc.status == http.StatusOK {
			require.Equal(t, answer{200, "", "done\n"}, got, tc.name)
			wantCounts["done"]++
			continue
		}
		require.Equal(t, refused(tc.status, tc.reason), got, tc.name)
		for _, v := range secrets {
			require.NotContains(t, got.body, v, tc.name)
			require.NotContains(t, got.refusal, v, tc.name)
		}
		require.Equal(t, []any{"WARN", string(tc.reason), tc.message, b.lastTraceID(t)},
			[]any{line["level"], line["refusal"], line["error"], line["trace_id"]}, tc.name)
		seen[tc.reason] = true
		wantCounts[string(refusalOutcome(tc.status))+"/"+string(tc.reason)]++
	}
	require.Equal(t, wantCounts, deliveryCounts(t, b.reader))
	require.Equal(t, int32(2), b.calls.Load(), "only the valid tokens reached the handler")

	// The one refusal no token earns: the keys could not be fetched.
	down := newRefusalBench(t, false, true)
	got, line := down.post(t, 0, down.bearer(t, down.claims()))
	require.Equal(t, refused(500, RefusalKeysUnavailable), got)
	for _, v := range down.configuration() {
		require.NotContains(t, got.body, v)
	}
	require.Equal(t, []any{"ERROR", string(RefusalKeysUnavailable), "the worker could not fetch the keys that verify tokens; its log says why: " +
		`Get "https://www.googleapis.com/oauth2/v3/certs": signing keys unavailable: network unreachable`, down.lastTraceID(t)},
		[]any{line["level"], line["refusal"], line["error"], line["trace_id"]})
	require.Equal(t, map[string]int64{"keys_unavailable/keys_unavailable": 1}, deliveryCounts(t, down.reader))
	seen[RefusalKeysUnavailable] = true

	want := map[Refusal]bool{}
	for _, r := range allRefusals {
		want[r] = true
	}
	require.Equal(t, want, seen, "every refusal is covered")
}

// With the development option Config.ExplainRefusals, every refusal's body
// says why after the outcome: the reason and a message that names the value
// and the rule, the same message as the log's. Neither the answer nor the
// log quotes the token.
func TestRefusalsSayWhy(t *testing.T) {
	t.Parallel()
	b := newRefusalBench(t, true, false)
	for i, tc := range b.cases(t) {
		got, line := b.post(t, i, tc.authorization)
		if tc.status == http.StatusOK {
			require.Equal(t, answer{200, "", "done\n"}, got, tc.name)
			continue
		}
		require.Equal(t, explained(tc.status, tc.reason, tc.message), got, tc.name)
		require.Equal(t, []any{"WARN", string(tc.reason), tc.message}, []any{line["level"], line["refusal"], line["error"]}, tc.name)
		if _, token, ok := strings.Cut(tc.authorization, " "); ok && len(token) > 8 {
			require.NotContains(t, b.logs.String(), token, tc.name)
			require.NotContains(t, got.body, token, tc.name)
		}
	}
	require.Equal(t, int32(2), b.calls.Load(), "only the valid tokens reached the handler")
}

// The development option says so when the worker starts.
func TestExplainRefusalsWarns(t *testing.T) {
	t.Parallel()
	e := startEmulator(t)
	var logs bytes.Buffer
	cfg := e.verifiedConfig("https://w/tasks", NewMemoryInbox())
	cfg.ExplainRefusals = true
	cfg.Logger = slog.New(slog.NewJSONHandler(&logs, nil))
	_, err := New(context.Background(), cfg, func(context.Context, *Delivery) error { return nil })
	require.NoError(t, err)
	var line map[string]any
	require.NoError(t, json.Unmarshal(logs.Bytes(), &line))
	require.Equal(t, []any{"WARN", "worker: refusals are explained to the caller (Config.ExplainRefusals): an answer names the accepted issuers, audiences and service accounts; for development only"},
		[]any{line["level"], line["msg"]})
}
