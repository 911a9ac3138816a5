package emulator

import (
	"crypto/rsa"
	"net/http"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/ctdispatch/ctdispatch/cloudtasks/emulator/emuproto"
	"github.com/ctdispatch/ctdispatch/cloudtasks/emulator/internal/oidc"
)

// tokenLifetime is how long a signed OIDC token is valid, as Google's are.
const tokenLifetime = time.Hour

// OIDCClaims decode the tokens the emulator signs, for example with
// jwt.ParseWithClaims. The tokens themselves carry the claims of a Google
// ID token: iss, aud (one JSON string, never an array), sub, email,
// email_verified, iat and exp.
type OIDCClaims struct {
	// Email is the task's service account.
	Email string `json:"email"`
	// EmailVerified is true in every token a delivery carries.
	EmailVerified bool `json:"email_verified"`
	jwt.RegisteredClaims
}

// signOIDC returns the token of a task's OIDC authorization at now.
func (s *Server) signOIDC(serviceAccount, audience string, now time.Time) (string, error) {
	return s.sign(TokenSpec{Audience: audience, Email: serviceAccount, IssuedAt: now})
}

// Issuer is the "iss" claim of the OIDC tokens the emulator signs.
func (s *Server) Issuer() string { return s.oidc.URL() }

// PublicURL is the base URL of the HTTP server as workers reach it:
// Config.PublicURL, or "http://" and HTTPAddr.
func (s *Server) PublicURL() string { return s.public }

// JWKSURL is where a worker fetches the keys that verify the tokens, as a
// JSON Web Key Set.
func (s *Server) JWKSURL() string { return s.public + emuproto.JWKSPath }

// PEMCertsURL is where a worker fetches the same keys in PEM form, keyed
// by key ID, as Google's v1 certificates endpoint serves them.
func (s *Server) PEMCertsURL() string { return s.public + emuproto.PEMCertsPath }

// PublicKey returns the key that verifies the emulator's OIDC tokens.
// It is nil if no key could be generated.
func (s *Server) PublicKey() *rsa.PublicKey {
	key, _, err := s.oidc.Key()
	if err != nil {
		return nil
	}
	return &key.PublicKey
}

// KeysClient returns an *http.Client that answers a request for Google's
// token keys (https://www.googleapis.com/oauth2/v3/certs, the URL Go's
// idtoken verifier fetches) with this emulator's keys, and refuses any
// other request. Give it to a verifier (for idtoken:
// idtoken.NewValidator(ctx, option.WithHTTPClient(srv.KeysClient()))) so
// that it accepts the emulator's tokens in a test without reaching Google.
func (s *Server) KeysClient() *http.Client { return KeysClient(s.HTTPAddr()) }

// KeysClient is Server.KeysClient for an emulator known by the address of
// its HTTP server (its --http-addr), for example one in another process.
func KeysClient(httpAddr string) *http.Client {
	return &http.Client{Transport: oidc.KeysTransport(httpAddr)}
}
