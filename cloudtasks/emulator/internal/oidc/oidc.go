// Package oidc is the emulator's OpenID Connect issuer: one RSA key, the
// tokens it signs in the shape of Google's ID tokens, and the HTTP
// endpoints from which a verifier reads the key (a JSON Web Key Set, PEM
// certificates and the discovery document).
package oidc

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

	"github.com/ctdispatch/ctdispatch/cloudtasks/emulator/emuproto"
)

// processKey signs for every Issuer of the process that was given no key:
// generating an RSA key takes long enough to slow down test suites that
// start many emulators, and an emulator's key guards nothing.
var processKey = sync.OnceValues(func() (*rsa.PrivateKey, error) {
	return rsa.GenerateKey(rand.Reader, 2048)
})

// Issuer signs tokens as one issuer with one key and serves that key.
// Its methods are safe for concurrent use.
type Issuer struct {
	url     string // the "iss" claim
	jwksURL string // where the discovery document points verifiers

	once  sync.Once
	given *rsa.PrivateKey
	key   *rsa.PrivateKey
	kid   string
	err   error
}

// New returns an issuer named url whose key set is served at jwksURL. It
// signs with key, or with a key shared by the process when key is nil,
// generated on first use so that an emulator that never signs starts fast.
func New(url, jwksURL string, key *rsa.PrivateKey) *Issuer {
	return &Issuer{url: url, jwksURL: jwksURL, given: key}
}

// URL is the "iss" claim of the tokens the issuer signs.
func (i *Issuer) URL() string { return i.url }

// Key returns the signing key and its key ID.
func (i *Issuer) Key() (*rsa.PrivateKey, string, error) {
	i.once.Do(func() {
		i.key = i.given
		if i.key == nil {
			i.key, i.err = processKey()
		}
		if i.err == nil {
			i.kid = KeyID(&i.key.PublicKey)
		}
	})
	return i.key, i.kid, i.err
}

// KeyID names a public key in a key set and in a token's "kid" header.
func KeyID(pub *rsa.PublicKey) string {
	sum := sha256.Sum256(pub.N.Bytes())
	return base64.RawURLEncoding.EncodeToString(sum[:12])
}

// Claims are what a token says. Sign writes them as they are given.
type Claims struct {
	Issuer        string
	Audience      string
	Email         string
	EmailVerified bool
	IssuedAt      time.Time
	Expiry        time.Time
}

// Sign returns an RS256 JWT carrying c, signed with key and naming kid.
// The claims are those of a Google ID token: iss, aud, sub and email (both
// the email), email_verified, iat and exp. "aud" is a single string, which
// Google's verifiers (Go's idtoken, Node's google-auth-library) require;
// jwt.RegisteredClaims would encode it as an array.
func Sign(c Claims, key *rsa.PrivateKey, kid string) (string, error) {
	tok := jwt.NewWithClaims(jwt.SigningMethodRS256, jwt.MapClaims{
		"iss":            c.Issuer,
		"aud":            c.Audience,
		"sub":            c.Email,
		"email":          c.Email,
		"email_verified": c.EmailVerified,
		"iat":            c.IssuedAt.Unix(),
		"exp":            c.Expiry.Unix(),
	})
	tok.Header["kid"] = kid
	return tok.SignedString(key)
}

// Handler serves the issuer's key set at emuproto.JWKSPath, the same key
// as PEM certificates at emuproto.PEMCertsPath and the discovery document
// at emuproto.DiscoveryPath.
func (i *Issuer) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+emuproto.JWKSPath, i.serveJWKS)
	mux.HandleFunc("GET "+emuproto.PEMCertsPath, i.servePEM)
	mux.HandleFunc("GET "+emuproto.DiscoveryPath, i.serveDiscovery)
	return mux
}

func (i *Issuer) serveJWKS(w http.ResponseWriter, _ *http.Request) {
	key, kid, err := i.Key()
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	set := emuproto.JWKS{Keys: []emuproto.JWK{{
		Kty: "RSA", Alg: "RS256", Use: "sig", Kid: kid,
		N: base64.RawURLEncoding.EncodeToString(key.N.Bytes()),
		E: base64.RawURLEncoding.EncodeToString(big.NewInt(int64(key.E)).Bytes()),
	}}}
	w.Header().Set("Content-Type", "application/json")
	// As Google's endpoint does: verifiers (Go's idtoken) cache the keys
	// only for the max-age given here.
	w.Header().Set("Cache-Control", "public, max-age=3600")
	_ = json.NewEncoder(w).Encode(set)
}

func (i *Issuer) servePEM(w http.ResponseWriter, _ *http.Request) {
	key, kid, err := i.Key()
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
}

func (i *Issuer) serveDiscovery(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{
		"issuer":                                i.url,
		"jwks_uri":                              i.jwksURL,
		"id_token_signing_alg_values_supported": []string{"RS256"},
		"subject_types_supported":               []string{"public"},
		"response_types_supported":              []string{"id_token"},
	})
}

// googleKeysHost is where Google's verifiers (Go's idtoken among them)
// fetch the keys of Google-signed ID tokens, at emuproto.JWKSPath.
const googleKeysHost = "www.googleapis.com"

// KeysTransport answers a request for Google's token keys
// (https://www.googleapis.com/oauth2/v3/certs) with the keys of the
// emulator whose HTTP server listens on httpAddr, and refuses any other
// request.
func KeysTransport(httpAddr string) http.RoundTripper { return keysRedirect{host: httpAddr} }

// keysRedirect sends the requests for Google's keys to the emulator.
type keysRedirect struct{ host string }

func (r keysRedirect) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL.Host != googleKeysHost || req.URL.Path != emuproto.JWKSPath {
		return nil, fmt.Errorf("emulator keys client: %s is not Google's key URL; only that one is answered", req.URL)
	}
	req = req.Clone(req.Context())
	req.URL.Scheme, req.URL.Host, req.Host = "http", r.host, r.host
	return http.DefaultTransport.RoundTrip(req)
}
