package worker

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"google.golang.org/api/idtoken"
	"google.golang.org/api/option"
)

// DefaultIssuers returns the "iss" values of Google-signed ID tokens, a new
// slice on each call.
func DefaultIssuers() []string {
	return []string{"https://accounts.google.com", "accounts.google.com"}
}

// errKeysUnavailable marks a failure to fetch the signing keys: the
// worker's problem, not the caller's, so it is answered 500, not 401.
var errKeysUnavailable = errors.New("signing keys unavailable")

// authError is a refused token: Status is 401 or 403, or 500 when the keys
// to check it could not be fetched.
type authError struct {
	Status int
	Reason string
}

func (e *authError) Error() string { return e.Reason }

// verifier checks a request's bearer token: idtoken checks its signature
// against Google's keys (or the key set KeysClient serves) and its expiry;
// the verifier then checks what idtoken leaves to its caller.
type verifier struct {
	v         *idtoken.Validator
	audiences []string
	issuers   []string
	accounts  []string
}

func newVerifier(ctx context.Context, c *Config) (*verifier, error) {
	client := *c.KeysClient
	client.Transport = keysTransport{base: client.Transport}
	v, err := idtoken.NewValidator(ctx, option.WithHTTPClient(&client))
	if err != nil {
		return nil, fmt.Errorf("worker: token validator: %w", err)
	}
	return &verifier{v: v, audiences: c.Audiences, issuers: c.Issuers, accounts: c.ServiceAccounts}, nil
}

// verify returns the token's service account, or an *authError.
func (v *verifier) verify(ctx context.Context, authorization string) (string, error) {
	if authorization == "" {
		return "", &authError{http.StatusUnauthorized, "no Authorization header"}
	}
	scheme, token, ok := strings.Cut(authorization, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || token == "" {
		return "", &authError{http.StatusUnauthorized, "Authorization header is not \"Bearer <token>\""}
	}
	// An empty audience makes idtoken skip its own check, so a token for
	// another audience is told apart (403) from a forged one (401).
	p, err := v.v.Validate(ctx, token, "")
	if err != nil {
		if errors.Is(err, errKeysUnavailable) {
			return "", &authError{http.StatusInternalServerError, err.Error()}
		}
		return "", &authError{http.StatusUnauthorized, "token not valid: " + err.Error()}
	}
	email, _ := p.Claims["email"].(string)
	switch {
	case !slices.Contains(v.issuers, p.Issuer):
		return "", &authError{http.StatusForbidden, fmt.Sprintf("token issuer %q is not one of %q (Config.Issuers)", p.Issuer, v.issuers)}
	case !slices.Contains(v.audiences, p.Audience):
		return "", &authError{http.StatusForbidden, fmt.Sprintf("token audience %q is not one of %q (Config.Audiences)", p.Audience, v.audiences)}
	case !slices.Contains(v.accounts, email):
		return "", &authError{http.StatusForbidden, fmt.Sprintf("token email %q is not one of %q (Config.ServiceAccounts)", email, v.accounts)}
	case !emailVerified(p.Claims["email_verified"]):
		return "", &authError{http.StatusForbidden, fmt.Sprintf("token email %q is not verified (email_verified %v)", email, p.Claims["email_verified"])}
	}
	return email, nil
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
