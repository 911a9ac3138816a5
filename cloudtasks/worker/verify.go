package worker

import (
	"context"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jonboulle/clockwork"
	"google.golang.org/api/idtoken"
	"google.golang.org/api/option"
)

// DefaultIssuers returns the "iss" values of Google-signed ID tokens, a new
// slice on each call.
func DefaultIssuers() []string {
	return []string{"https://accounts.google.com", "accounts.google.com"}
}

// HeaderRefusal is the response header that names, with a Refusal, why a
// request's token was refused. It carries the code only; the values behind
// it go to the log, and to the body only with Config.ExplainRefusals.
const HeaderRefusal = "X-Ctdispatch-Refusal"

// Refusal names why the worker refused a request's token. The names are
// stable: they are sent in HeaderRefusal, logged as "refusal", set as the
// "refusal" attribute of the worker's metrics, and may be matched by tools
// and tests. A name says which check failed, never with what value.
type Refusal string

// The refusals, with the status each is answered with.
const (
	// RefusalNoToken: the request has no Authorization header. 401.
	RefusalNoToken Refusal = "no_token"
	// RefusalMalformed: the Authorization header is not "Bearer <JWT>", or
	// the JWT cannot be decoded or lacks a key ID or an expiry. 401.
	RefusalMalformed Refusal = "malformed"
	// RefusalAlgorithm: the token is signed with another algorithm than
	// RS256, the one Google signs Cloud Tasks' tokens with. Refused before
	// any key is fetched. 401.
	RefusalAlgorithm Refusal = "algorithm"
	// RefusalExpired: the token's expiry has passed on the worker's
	// clock. 401.
	RefusalExpired Refusal = "expired"
	// RefusalUnknownKey: the token names a key that is not among the
	// signing keys. 401.
	RefusalUnknownKey Refusal = "unknown_key"
	// RefusalSignature: the signature does not verify with the key the
	// token names. 401.
	RefusalSignature Refusal = "signature"
	// RefusalIssuer: a valid token whose issuer is not in
	// Config.Issuers. 403.
	RefusalIssuer Refusal = "issuer"
	// RefusalAudience: a valid token whose audience is not in
	// Config.Audiences. 403.
	RefusalAudience Refusal = "audience"
	// RefusalEmail: a valid token whose service account is not in
	// Config.ServiceAccounts. 403.
	RefusalEmail Refusal = "email"
	// RefusalEmailNotVerified: a valid token whose email_verified claim
	// is not true. 403.
	RefusalEmailNotVerified Refusal = "email_not_verified"
	// RefusalKeysUnavailable: the signing keys could not be fetched, so
	// the token could not be checked. 500.
	RefusalKeysUnavailable Refusal = "keys_unavailable"
)

// signingAlgorithm is the only JWT algorithm Google signs Cloud Tasks'
// OIDC tokens (and its other service account ID tokens) with.
const signingAlgorithm = "RS256"

// googleKeysURL is where idtoken fetches the keys of RS256 tokens.
const googleKeysURL = "https://www.googleapis.com/oauth2/v3/certs"

// clockSkewHint is how far a token's issue time may be from the worker's
// clock before an expired token's refusal blames the clocks: Cloud Tasks
// signs a token as it sends the request.
const clockSkewHint = 5 * time.Minute

// errKeysUnavailable marks a failure to fetch the signing keys: the
// worker's problem, not the caller's, so it is answered 500, not 401.
var errKeysUnavailable = errors.New("signing keys unavailable")

// authError is a refused token. Message is the full reason, for the log
// (and for the caller only with Config.ExplainRefusals): it names the
// value and the rule and never quotes the token. Cause, when set, is for
// the log only (it may name the worker's own network).
type authError struct {
	Status  int
	Reason  Refusal
	Message string
	Cause   error
}

func (e *authError) Error() string {
	if e.Cause != nil {
		return e.Message + ": " + e.Cause.Error()
	}
	return e.Message
}

// refusalOf returns the refusal err is, or nil.
func refusalOf(err error) *authError {
	var ae *authError
	if errors.As(err, &ae) {
		return ae
	}
	return nil
}

func unauthorized(r Refusal, format string, args ...any) *authError {
	return &authError{Status: http.StatusUnauthorized, Reason: r, Message: fmt.Sprintf(format, args...)}
}

func forbidden(r Refusal, format string, args ...any) *authError {
	return &authError{Status: http.StatusForbidden, Reason: r, Message: fmt.Sprintf(format, args...)}
}

// verifier checks a request's bearer token. It decodes the token itself
// first, so that a token idtoken would send to another key set (ES256)
// or could not check is refused without a fetch, and an expired one is
// reported with both clocks; idtoken then checks the signature against
// Google's keys (or the key set KeysClient serves), and the verifier what
// idtoken leaves to its caller.
type verifier struct {
	v         *idtoken.Validator
	audiences []string
	issuers   []string
	accounts  []string
	// clock is the wall clock idtoken also reads; tests replace it to
	// give an expired token's refusal exact times.
	clock clockwork.Clock
}

func newVerifier(ctx context.Context, c *Config) (*verifier, error) {
	client := *c.KeysClient
	client.Transport = keysTransport{base: client.Transport}
	v, err := idtoken.NewValidator(ctx, option.WithHTTPClient(&client))
	if err != nil {
		return nil, fmt.Errorf("worker: token validator: %w", err)
	}
	return &verifier{v: v, audiences: c.Audiences, issuers: c.Issuers, accounts: c.ServiceAccounts,
		clock: clockwork.NewRealClock()}, nil
}

// verify returns the token's service account, or an *authError.
func (v *verifier) verify(ctx context.Context, authorization string) (string, error) {
	if authorization == "" {
		return "", unauthorized(RefusalNoToken, `no Authorization header; Cloud Tasks sends "Bearer <OIDC token>" for a task with an OidcToken`)
	}
	scheme, token, ok := strings.Cut(authorization, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || token == "" {
		// The header is not quoted: it may be a credential of another kind.
		return "", unauthorized(RefusalMalformed, `Authorization header is not "Bearer <token>"`)
	}
	claims, err := v.precheck(token)
	if err != nil {
		return "", err
	}
	// An empty audience makes idtoken skip its own check, so a token for
	// another audience is told apart (403) from a forged one (401).
	p, err := v.v.Validate(ctx, token, "")
	if err != nil {
		return "", v.classify(err, claims)
	}
	email, _ := p.Claims["email"].(string)
	switch {
	case !slices.Contains(v.issuers, p.Issuer):
		return "", forbidden(RefusalIssuer, "issuer %s not accepted; accepted: %q (Config.Issuers)", quote(p.Issuer), v.issuers)
	case !slices.Contains(v.audiences, p.Audience):
		return "", forbidden(RefusalAudience, "audience %s not accepted; accepted: %q (Config.Audiences)", quote(p.Audience), v.audiences)
	case !slices.Contains(v.accounts, email):
		return "", forbidden(RefusalEmail, "service account %s not accepted; accepted: %q (Config.ServiceAccounts)", quote(email), v.accounts)
	case !emailVerified(p.Claims["email_verified"]):
		return "", forbidden(RefusalEmailNotVerified, "service account %s not verified: email_verified is %s; want true", quote(email), claimText(p.Claims, "email_verified"))
	}
	return email, nil
}

// tokenHeader is the part of a JWT's header the verifier reads.
type tokenHeader struct {
	Alg string `json:"alg"`
	Kid string `json:"kid"`
}

// tokenClaims are the claims decoded before the signature is checked,
// for the refusals that name them.
type tokenClaims struct {
	kid      string
	exp, iat int64
}

// precheck decodes the token and refuses what needs no key: a token that
// is not a JWT, one with another algorithm than RS256 (idtoken would fetch
// a key set of its own for ES256), and one that has expired.
func (v *verifier) precheck(token string) (tokenClaims, error) {
	segments := strings.Split(token, ".")
	if len(segments) != 3 {
		return tokenClaims{}, unauthorized(RefusalMalformed, "token has %d dot-separated segments; a JWT has 3 (header.payload.signature)", len(segments))
	}
	var h tokenHeader
	if err := decodeSegment(segments[0], &h); err != nil {
		return tokenClaims{}, unauthorized(RefusalMalformed, "token header is not base64url-encoded JSON: %v", err)
	}
	if h.Alg != signingAlgorithm {
		return tokenClaims{}, unauthorized(RefusalAlgorithm, "token algorithm %s not accepted; accepted: [%s] (Google signs Cloud Tasks' OIDC tokens with it)", quote(h.Alg), signingAlgorithm)
	}
	if h.Kid == "" {
		return tokenClaims{}, unauthorized(RefusalMalformed, `token header has no "kid"; Google's tokens name the key that signed them`)
	}
	if _, err := base64.RawURLEncoding.DecodeString(segments[2]); err != nil {
		return tokenClaims{}, unauthorized(RefusalMalformed, "token signature is not base64url: %v", err)
	}
	var c struct {
		Exp *int64 `json:"exp"`
		Iat *int64 `json:"iat"` // optional: only the expiry's refusal reads it
	}
	if err := decodeSegment(segments[1], &c); err != nil {
		return tokenClaims{}, unauthorized(RefusalMalformed, "token payload is not base64url-encoded JSON claims: %v", err)
	}
	if c.Exp == nil || *c.Exp <= 0 {
		return tokenClaims{}, unauthorized(RefusalMalformed, `token has no positive "exp" claim; Google's tokens expire an hour after they are signed`)
	}
	var iat int64
	if c.Iat != nil {
		iat = *c.Iat
	}
	claims := tokenClaims{kid: h.Kid, exp: *c.Exp, iat: iat}
	// idtoken checks the expiry against the wall clock the same way; doing
	// it here first lets the refusal name both clocks.
	if now := v.clock.Now(); now.Unix() > claims.exp {
		return claims, expired(claims, now)
	}
	return claims, nil
}

// classify turns idtoken's error into a refusal.
func (v *verifier) classify(err error, claims tokenClaims) *authError {
	msg := err.Error()
	switch {
	case errors.Is(err, errKeysUnavailable):
		return &authError{Status: http.StatusInternalServerError, Reason: RefusalKeysUnavailable,
			Message: "the worker could not fetch the keys that verify tokens; its log says why", Cause: err}
	case errors.Is(err, rsa.ErrVerification):
		return unauthorized(RefusalSignature, "token signature does not verify with key %s (%s)", quote(claims.kid), signingAlgorithm)
	case strings.Contains(msg, "could not find matching cert keyId"):
		return unauthorized(RefusalUnknownKey, "token key %s is not among the signing keys fetched from %s (Config.KeysClient answers that URL; the emulator's KeysClient() serves its keys)", quote(claims.kid), googleKeysURL)
	case strings.Contains(msg, "token expired"):
		// The second turned between precheck and idtoken's own check.
		return expired(claims, v.clock.Now())
	default:
		return unauthorized(RefusalSignature, "token not valid: %s", msg)
	}
}

// expired is the refusal of a token whose expiry has passed at now. When
// its issue time is far from now, the signer's clock is the likely cause:
// Cloud Tasks signs a token as it sends the request, and an emulator whose
// fake clock is set in the past signs tokens that expired long ago.
func expired(c tokenClaims, now time.Time) *authError {
	exp := time.Unix(c.exp, 0).UTC()
	now = now.UTC().Truncate(time.Second)
	msg := fmt.Sprintf("token expired at %s (exp), %s before the worker's clock (%s); tokens are accepted until exp",
		exp.Format(time.RFC3339), now.Sub(exp), now.Format(time.RFC3339))
	if c.iat != 0 {
		iat := time.Unix(c.iat, 0).UTC()
		msg += fmt.Sprintf("; issued at %s (iat)", iat.Format(time.RFC3339))
		if off := now.Sub(iat); off > clockSkewHint || off < -clockSkewHint {
			msg += fmt.Sprintf(", %s from the worker's clock: the signer's clock and the worker's disagree (an emulator with a fake clock set in the past signs such tokens), or the token was replayed", off)
		}
	}
	return unauthorized(RefusalExpired, "%s", msg)
}

func decodeSegment(s string, into any) error {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, into)
}

// maxQuoted bounds a value from a token quoted in a refusal, so a caller
// cannot make the answer or the log line large.
const maxQuoted = 128

// quote quotes a value taken from a token, cut to maxQuoted bytes.
func quote(s string) string {
	if len(s) <= maxQuoted {
		return fmt.Sprintf("%q", s)
	}
	return fmt.Sprintf("%q…", cut(s))
}

// cut shortens s to at most maxQuoted bytes on a rune boundary.
func cut(s string) string {
	if len(s) <= maxQuoted {
		return s
	}
	n := maxQuoted
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// claimText renders a claim as the token carried it, in JSON, or
// "missing".
func claimText(claims map[string]any, name string) string {
	v, ok := claims[name]
	if !ok {
		return "missing"
	}
	b, err := json.Marshal(v)
	if err != nil {
		return "not JSON"
	}
	if len(b) > maxQuoted {
		return cut(string(b)) + "…"
	}
	return string(b)
}

// emailVerified accepts the claim as a JSON boolean, as Google sends it,
// or as the string "true", as some older tokens carried it.
func emailVerified(claim any) bool {
	return claim == true || claim == "true"
}

// keysTransport turns a failed key fetch (no answer, or not 200) into an
// error that wraps errKeysUnavailable, so verify can tell it from a bad token.
type keysTransport struct{ base http.RoundTripper }

func (t keysTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	base := t.base
	if base == nil {
		base = http.DefaultTransport
	}
	resp, err := base.RoundTrip(req)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errKeysUnavailable, err)
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		return nil, fmt.Errorf("%w: %s answered %s", errKeysUnavailable, req.URL, resp.Status)
	}
	return resp, nil
}
