package emulator

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"net/http"
	"sync"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// Paths served by the emulator's HTTP server.
const (
	// DiscoveryPath serves the OpenID Connect discovery document.
	DiscoveryPath = "/.well-known/openid-configuration"
	// JWKSPath serves the public keys that verify the OIDC tokens, as JSON
	// Web Keys (the path of Google's own key set, which Go's idtoken reads).
	JWKSPath = "/oauth2/v3/certs"
	// PEMCertsPath serves the same keys in PEM form, keyed by key ID (the
	// path and shape of Google's v1 endpoint, which Node's
	// google-auth-library and Python's google-auth read).
	PEMCertsPath = "/oauth2/v1/certs"
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
	// EmailVerified is always true.
	EmailVerified bool `json:"email_verified"`
	jwt.RegisteredClaims
}

// processKey signs for every Server of the process that was given no
// SigningKey: generating an RSA key takes long enough to slow down test
// suites that start many servers, and an emulator's key guards nothing.
var processKey = sync.OnceValues(func() (*rsa.PrivateKey, error) {
	return rsa.GenerateKey(rand.Reader, 2048)
})

// signingKey returns the key and its ID, generating the key on first use
// so servers that never sign start fast.
func (s *Server) signingKey() (*rsa.PrivateKey, string, error) {
	s.keyOnce.Do(func() {
		s.key = s.cfg.SigningKey
		if s.key == nil {
			s.key, s.keyErr = processKey()
		}
		if s.keyErr == nil {
			s.kid = keyID(&s.key.PublicKey)
		}
	})
	return s.key, s.kid, s.keyErr
}

func keyID(pub *rsa.PublicKey) string {
	sum := sha256.Sum256(pub.N.Bytes())
	return base64.RawURLEncoding.EncodeToString(sum[:12])
}

// signOIDC returns an RS256 JWT for a task's OIDC token. The claims are
// those of a Google ID token: in particular "aud" is a single string,
// which Google's verifiers (Go's idtoken, Node's google-auth-library)
// require; jwt.RegisteredClaims would encode it as an array.
func (s *Server) signOIDC(serviceAccount, audience string, now time.Time) (string, error) {
	claims := jwt.MapClaims{
		"iss":            s.issuer,
		"aud":            audience,
		"sub":            serviceAccount,
		"email":          serviceAccount,
		"email_verified": true,
		"iat":            now.Unix(),
		"exp":            now.Add(tokenLifetime).Unix(),
	}
	tok := jwt.NewWithClaims(jwt.SigningMethodRS256, claims)
	key, kid, err := s.signingKey()
	if err != nil {
		return "", err
	}
	tok.Header["kid"] = kid
	return tok.SignedString(key)
}

// Issuer is the "iss" claim of the OIDC tokens the emulator signs.
func (s *Server) Issuer() string { return s.issuer }

// PublicURL is the base URL of the HTTP server as workers reach it:
// Config.PublicURL, or "http://" and HTTPAddr.
func (s *Server) PublicURL() string { return s.public }

// JWKSURL is where a worker fetches the keys that verify the tokens.
func (s *Server) JWKSURL() string { return s.public + JWKSPath }

// PEMCertsURL is where a worker fetches the same keys in PEM form.
func (s *Server) PEMCertsURL() string { return s.public + PEMCertsPath }

// PublicKey returns the key that verifies the emulator's OIDC tokens.
// It is nil if no key could be generated.
func (s *Server) PublicKey() *rsa.PublicKey {
	key, _, err := s.signingKey()
	if err != nil {
		return nil
	}
	return &key.PublicKey
}

// JWK is one RSA public key in JSON Web Key form.
type JWK struct {
	Kty string `json:"kty"`
	Alg string `json:"alg"`
	Use string `json:"use"`
	Kid string `json:"kid"`
	N   string `json:"n"`
	E   string `json:"e"`
}

// PublicKey decodes the key's modulus and exponent.
func (k JWK) PublicKey() (*rsa.PublicKey, error) {
	n, err := base64.RawURLEncoding.DecodeString(k.N)
	if err != nil {
		return nil, err
	}
	e, err := base64.RawURLEncoding.DecodeString(k.E)
	if err != nil {
		return nil, err
	}
	return &rsa.PublicKey{N: new(big.Int).SetBytes(n), E: int(new(big.Int).SetBytes(e).Int64())}, nil
}

// JWKS is a JSON Web Key Set, as served at JWKSPath.
type JWKS struct {
	Keys []JWK `json:"keys"`
}

func (s *Server) oidcHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+JWKSPath, func(w http.ResponseWriter, _ *http.Request) {
		key, kid, err := s.signingKey()
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		set := JWKS{Keys: []JWK{{
			Kty: "RSA", Alg: "RS256", Use: "sig", Kid: kid,
			N: base64.RawURLEncoding.EncodeToString(key.N.Bytes()),
			E: base64.RawURLEncoding.EncodeToString(big.NewInt(int64(key.E)).Bytes()),
		}}}
		w.Header().Set("Content-Type", "application/json")
		// As Google's endpoint does: verifiers (Go's idtoken) cache the keys
		// only for the max-age given here.
		w.Header().Set("Cache-Control", "public, max-age=3600")
		_ = json.NewEncoder(w).Encode(set)
	})
	mux.HandleFunc("GET "+PEMCertsPath, func(w http.ResponseWriter, _ *http.Request) {
		key, kid, err := s.signingKey()
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		der, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]string{kid: string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}))})
	})
	mux.HandleFunc("GET "+DiscoveryPath, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{
			"issuer":                                s.issuer,
			"jwks_uri":                              s.JWKSURL(),
			"id_token_signing_alg_values_supported": []string{"RS256"},
			"subject_types_supported":               []string{"public"},
			"response_types_supported":              []string{"id_token"},
		})
	})
	return mux
}

// googleKeysHost is where Google's verifiers (Go's idtoken among them)
// fetch the keys of Google-signed ID tokens, at JWKSPath.
const googleKeysHost = "www.googleapis.com"

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
	return &http.Client{Transport: keysRedirect{host: httpAddr}}
}

// keysRedirect sends the requests for Google's keys to the emulator.
type keysRedirect struct{ host string }

func (r keysRedirect) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL.Host != googleKeysHost || req.URL.Path != JWKSPath {
		return nil, fmt.Errorf("emulator keys client: %s is not Google's key URL; only that one is answered", req.URL)
	}
	req = req.Clone(req.Context())
	req.URL.Scheme, req.URL.Host, req.Host = "http", r.host, r.host
	return http.DefaultTransport.RoundTrip(req)
}
