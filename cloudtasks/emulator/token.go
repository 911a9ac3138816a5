package emulator

import (
	"crypto/rsa"
	"fmt"
	"time"

	"github.com/ctdispatch/ctdispatch/cloudtasks/emulator/internal/oidc"
)

// TokenSpec describes an OIDC token for SignToken. The zero value of every
// field but Audience and Email gives the token a delivery would carry; the
// other fields make the tokens a verifier must refuse.
type TokenSpec struct {
	// Audience is the "aud" claim: the audience of the task's OIDC token,
	// which defaults to the task's URL. Required.
	Audience string
	// Email is the service account the token speaks for, its "email" and
	// "sub" claims. Required.
	Email string
	// IssuedAt is the "iat" claim. Defaults to the emulator's clock now
	// (Config.Clock), as a delivery's token; a fake clock far from the
	// real one makes a token that verifiers on the real clock refuse.
	IssuedAt time.Time
	// Lifetime is how long after IssuedAt the token expires ("exp").
	// Defaults to one hour, as Google's tokens; negative is refused (give
	// an IssuedAt in the past for an expired token).
	Lifetime time.Duration
	// EmailUnverified signs "email_verified": false instead of true.
	EmailUnverified bool
	// Issuer is the "iss" claim. Defaults to Server.Issuer.
	Issuer string
	// SigningKey signs the token instead of the emulator's key, under that
	// key's own key ID, which the emulator's key set does not list: a
	// forged token. Defaults to the emulator's key.
	SigningKey *rsa.PrivateKey
}

// SignToken returns a token signed as the emulator signs a delivery's OIDC
// token (RS256, the claims of a Google ID token, the key ID of the key
// served at JWKSURL), with the claims spec gives. A worker's tests use it
// to send valid, expired, other-audience and forged tokens without
// creating a task.
func (s *Server) SignToken(spec TokenSpec) (string, error) {
	switch {
	case spec.Audience == "":
		return "", fmt.Errorf("emulator: TokenSpec.Audience is empty; a token names its audience")
	case spec.Email == "":
		return "", fmt.Errorf("emulator: TokenSpec.Email is empty; a token names its service account")
	case spec.Lifetime < 0:
		return "", fmt.Errorf("emulator: TokenSpec.Lifetime %s is negative; want 0 (one hour) or more", spec.Lifetime)
	}
	return s.sign(spec)
}

// sign is SignToken without its checks, which a delivery's token, made
// from a task the API accepted, does not need.
func (s *Server) sign(spec TokenSpec) (string, error) {
	if spec.IssuedAt.IsZero() {
		spec.IssuedAt = s.clock.Now()
	}
	if spec.Lifetime == 0 {
		spec.Lifetime = tokenLifetime
	}
	if spec.Issuer == "" {
		spec.Issuer = s.oidc.URL()
	}
	key, kid, err := s.oidc.Key()
	if err != nil {
		return "", err
	}
	if spec.SigningKey != nil {
		key, kid = spec.SigningKey, oidc.KeyID(&spec.SigningKey.PublicKey)
	}
	return oidc.Sign(oidc.Claims{
		Issuer: spec.Issuer, Audience: spec.Audience, Email: spec.Email, EmailVerified: !spec.EmailUnverified,
		IssuedAt: spec.IssuedAt, Expiry: spec.IssuedAt.Add(spec.Lifetime),
	}, key, kid)
}
