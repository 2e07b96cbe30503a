// Package token issues and verifies bootstrap tokens: EdDSA-signed JWTs,
// audience-bound to the mesh CA, naming one namespace and service account, that
// authenticate a workload's first CSR.
package token

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"

	"github.com/weft-mesh/weft/certs/spiffe"
)

// Bounds: a token lives at most MaxTTL (a week: long enough to stage a node,
// short enough that a leaked one dies), DefaultTTL when not said; a token
// longer than MaxBytes is refused before it is parsed.
const (
	MaxTTL     = 7 * 24 * time.Hour
	DefaultTTL = time.Hour
	MaxBytes   = 4096
)

// Leeway is the clock skew tolerated on exp, nbf and iat.
const Leeway = time.Minute

// Claims a token grants.
type Claims struct {
	TrustDomain    string
	Namespace      string
	ServiceAccount string
	ID             string // jti; Issue makes a random one when empty
	IssuedAt       time.Time
	Expiry         time.Time
}

// TTL is Expiry-IssuedAt.
func (c Claims) TTL() time.Duration { return c.Expiry.Sub(c.IssuedAt) }

// Audience is the "aud" of tokens for the CA of trustDomain.
func Audience(trustDomain string) string { return "spiffe://" + trustDomain + "/weft/ca" }

// wire is the JWT body: registered claims plus Weft's.
type wire struct {
	jwt.Claims
	Namespace      string `json:"weft.dev/namespace"`
	ServiceAccount string `json:"weft.dev/serviceAccount"`
}

func (c Claims) check() error {
	if _, err := spiffe.Workload(c.TrustDomain, c.Namespace, c.ServiceAccount); err != nil {
		return err
	}
	switch ttl := c.TTL(); {
	case c.IssuedAt.IsZero() || c.Expiry.IsZero():
		return errors.New("issuedAt and expiry are required")
	case ttl <= 0:
		return fmt.Errorf("ttl %v is not positive", ttl)
	case ttl > MaxTTL:
		return fmt.Errorf("ttl %v is over the bound of %v", ttl, MaxTTL)
	}
	return nil
}

// Issue signs c with key. IssuedAt and Expiry are the caller's (no clock here);
// Expiry-IssuedAt must be in (0, MaxTTL].
func Issue(key ed25519.PrivateKey, c Claims) (string, error) {
	if len(key) != ed25519.PrivateKeySize {
		return "", errors.New("issue token: no Ed25519 key")
	}
	if err := c.check(); err != nil {
		return "", fmt.Errorf("issue token: %w", err)
	}
	if c.ID == "" {
		var b [16]byte
		if _, err := rand.Read(b[:]); err != nil {
			return "", fmt.Errorf("issue token: %w", err)
		}
		c.ID = hex.EncodeToString(b[:])
	}
	sig, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.EdDSA, Key: key}, (&jose.SignerOptions{}).WithType("JWT"))
	if err != nil {
		return "", fmt.Errorf("issue token: %w", err)
	}
	aud := Audience(c.TrustDomain)
	w := wire{
		Claims: jwt.Claims{
			Issuer:    aud,
			Audience:  jwt.Audience{aud},
			ID:        c.ID,
			IssuedAt:  jwt.NewNumericDate(c.IssuedAt),
			NotBefore: jwt.NewNumericDate(c.IssuedAt),
			Expiry:    jwt.NewNumericDate(c.Expiry),
		},
		Namespace:      c.Namespace,
		ServiceAccount: c.ServiceAccount,
	}
	s, err := jwt.Signed(sig).Claims(w).Serialize()
	if err != nil {
		return "", fmt.Errorf("issue token: %w", err)
	}
	if len(s) > MaxBytes {
		return "", fmt.Errorf("issue token: %d bytes, over the bound of %d", len(s), MaxBytes)
	}
	return s, nil
}

// Verify checks tok at now: at most MaxBytes, compact JWS signed with EdDSA
// (the only algorithm accepted; "none" and every other are refused) by pub,
// audience Audience(trustDomain), iat/nbf/exp within Leeway, lifetime at most
// MaxTTL, and names a valid namespace and service account.
func Verify(tok string, pub ed25519.PublicKey, trustDomain string, now time.Time) (Claims, error) {
	if len(tok) > MaxBytes {
		return Claims{}, fmt.Errorf("token: %d bytes, over the bound of %d", len(tok), MaxBytes)
	}
	if len(pub) != ed25519.PublicKeySize {
		return Claims{}, errors.New("token: no Ed25519 public key to verify it with")
	}
	if now.IsZero() {
		return Claims{}, errors.New("token: zero time") // go-jose would read the clock
	}
	t, err := jwt.ParseSigned(tok, []jose.SignatureAlgorithm{jose.EdDSA})
	if err != nil {
		return Claims{}, fmt.Errorf("token: %w", err)
	}
	if len(t.Headers) != 1 || t.Headers[0].Algorithm != string(jose.EdDSA) {
		return Claims{}, errors.New("token: not a single EdDSA signature")
	}
	var w wire
	if err := t.Claims(pub, &w); err != nil {
		return Claims{}, fmt.Errorf("token: %w", err)
	}
	aud := Audience(trustDomain)
	if !w.Audience.Contains(aud) {
		return Claims{}, fmt.Errorf("token %s: audience %q does not include %q", w.ID, []string(w.Audience), aud)
	}
	if w.Expiry == nil || w.IssuedAt == nil {
		return Claims{}, fmt.Errorf("token %s: exp and iat are required", w.ID)
	}
	if err := w.Claims.ValidateWithLeeway(jwt.Expected{Issuer: aud, AnyAudience: jwt.Audience{aud}, Time: now}, Leeway); err != nil {
		return Claims{}, fmt.Errorf("token %s (exp %v): %w", w.ID, w.Expiry.Time().UTC(), err)
	}
	c := Claims{
		TrustDomain:    trustDomain,
		Namespace:      w.Namespace,
		ServiceAccount: w.ServiceAccount,
		ID:             w.ID,
		IssuedAt:       w.IssuedAt.Time(),
		Expiry:         w.Expiry.Time(),
	}
	if err := c.check(); err != nil {
		return Claims{}, fmt.Errorf("token %s: %w", w.ID, err)
	}
	return c, nil
}
