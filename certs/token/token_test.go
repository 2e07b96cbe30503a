package token

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/base64"
	"strings"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
)

var t0 = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

func key(t testing.TB) ed25519.PrivateKey {
	_, k, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func claims(ttl time.Duration) Claims {
	return Claims{TrustDomain: "cluster.local", Namespace: "shop", ServiceAccount: "reviews", IssuedAt: t0, Expiry: t0.Add(ttl)}
}

func TestIssueVerify(t *testing.T) {
	k := key(t)
	tok, err := Issue(k, claims(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	c, err := Verify(tok, k.Public().(ed25519.PublicKey), "cluster.local", t0.Add(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if c.Namespace != "shop" || c.ServiceAccount != "reviews" || len(c.ID) != 32 || !c.IssuedAt.Equal(t0) || c.TTL() != time.Hour {
		t.Fatalf("claims %+v", c)
	}
	tok2, _ := Issue(k, claims(time.Hour))
	c2, _ := Verify(tok2, k.Public().(ed25519.PublicKey), "cluster.local", t0)
	if c2.ID == c.ID {
		t.Fatal("two tokens with one jti")
	}
}

// sign signs an arbitrary body with alg (for the refusals Issue never makes).
func sign(t *testing.T, alg jose.SignatureAlgorithm, k any, body any) string {
	t.Helper()
	s, err := jose.NewSigner(jose.SigningKey{Algorithm: alg, Key: k}, nil)
	if err != nil {
		t.Fatal(err)
	}
	out, err := jwt.Signed(s).Claims(body).Serialize()
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestVerifyRefusals(t *testing.T) {
	k := key(t)
	pub := k.Public().(ed25519.PublicKey)
	good, err := Issue(k, claims(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	aud := Audience("cluster.local")
	body := func(mod func(*wire)) wire {
		w := wire{Claims: jwt.Claims{Issuer: aud, Audience: jwt.Audience{aud}, ID: "j", IssuedAt: jwt.NewNumericDate(t0), Expiry: jwt.NewNumericDate(t0.Add(time.Hour))},
			Namespace: "shop", ServiceAccount: "reviews"}
		mod(&w)
		return w
	}
	ec, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	parts := strings.Split(good, ".")
	none := base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"none","typ":"JWT"}`)) + "." + parts[1] + "."
	hs := sign(t, jose.HS256, []byte("0123456789abcdef0123456789abcdef"), body(func(*wire) {}))
	sig := []byte(parts[2])
	if sig[3] == 'A' {
		sig[3] = 'B'
	} else {
		sig[3] = 'A'
	}
	tamperedSig := parts[0] + "." + parts[1] + "." + string(sig)
	otherBody := base64.RawURLEncoding.EncodeToString([]byte(`{"aud":["` + aud + `"],"iss":"` + aud + `","exp":1900000000,"iat":1764590400,"weft.dev/namespace":"admin","weft.dev/serviceAccount":"root"}`))
	tamperedBody := parts[0] + "." + otherBody + "." + parts[2]

	for _, tc := range []struct {
		name string
		tok  string
		pub  ed25519.PublicKey
		td   string
		now  time.Time
		err  string
	}{
		{"good", good, pub, "cluster.local", t0, ""},
		{"at expiry + leeway", good, pub, "cluster.local", t0.Add(time.Hour + Leeway), ""},
		{"past expiry + leeway", good, pub, "cluster.local", t0.Add(time.Hour + Leeway + time.Second), "token is expired"},
		{"issued in the future past leeway", good, pub, "cluster.local", t0.Add(-Leeway - time.Second), "token not valid yet (nbf)"},
		{"wrong audience (other trust domain)", good, pub, "other.td", t0, "audience [\"spiffe://cluster.local/weft/ca\"] does not include \"spiffe://other.td/weft/ca\""},
		{"wrong key", good, key(t).Public().(ed25519.PublicKey), "cluster.local", t0, "error in cryptographic primitive"},
		{"alg none", none, pub, "cluster.local", t0, "unexpected signature algorithm \"none\""},
		{"alg HS256", hs, pub, "cluster.local", t0, "unexpected signature algorithm \"HS256\""},
		{"alg ES256", sign(t, jose.ES256, ec, body(func(*wire) {})), pub, "cluster.local", t0, "unexpected signature algorithm \"ES256\""},
		{"tampered signature", tamperedSig, pub, "cluster.local", t0, "token"},
		{"tampered body", tamperedBody, pub, "cluster.local", t0, "error in cryptographic primitive"},
		{"no exp", sign(t, jose.EdDSA, k, body(func(w *wire) { w.Expiry = nil })), pub, "cluster.local", t0, "exp and iat are required"},
		{"no iat", sign(t, jose.EdDSA, k, body(func(w *wire) { w.IssuedAt = nil })), pub, "cluster.local", t0, "exp and iat are required"},
		{"wrong issuer", sign(t, jose.EdDSA, k, body(func(w *wire) { w.Issuer = "x" })), pub, "cluster.local", t0, "invalid issuer claim (iss)"},
		{"lifetime over MaxTTL", sign(t, jose.EdDSA, k, body(func(w *wire) { w.Expiry = jwt.NewNumericDate(t0.Add(MaxTTL + time.Second)) })), pub, "cluster.local", t0, "ttl 168h0m1s is over the bound of 168h0m0s"},
		{"lifetime at MaxTTL", sign(t, jose.EdDSA, k, body(func(w *wire) { w.Expiry = jwt.NewNumericDate(t0.Add(MaxTTL)) })), pub, "cluster.local", t0, ""},
		{"bad namespace", sign(t, jose.EdDSA, k, body(func(w *wire) { w.Namespace = "Admin" })), pub, "cluster.local", t0, "namespace: \"Admin\" is not a DNS-1123 label"},
		{"no service account", sign(t, jose.EdDSA, k, body(func(w *wire) { w.ServiceAccount = "" })), pub, "cluster.local", t0, "service account: empty"},
		{"over MaxBytes", good + strings.Repeat("A", MaxBytes-len(good)+1), pub, "cluster.local", t0, "4097 bytes, over the bound of 4096"},
		{"at MaxBytes (parsed, then refused on its signature)", good + strings.Repeat("A", MaxBytes-len(good)), pub, "cluster.local", t0, "token:"},
		{"not a JWT", "a.b", pub, "cluster.local", t0, "token:"},
		{"no public key", good, nil, "cluster.local", t0, "no Ed25519 public key"},
		{"zero time", good, pub, "cluster.local", time.Time{}, "zero time"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Verify(tc.tok, tc.pub, tc.td, tc.now)
			if tc.err == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("err = %v, want %q", err, tc.err)
			}
			if strings.Contains(tc.name, "MaxBytes") && strings.Contains(tc.name, "at") && strings.Contains(err.Error(), "over the bound") {
				t.Fatal("a token of exactly MaxBytes was refused for its size")
			}
		})
	}
}

func TestIssueRefusals(t *testing.T) {
	k := key(t)
	for _, tc := range []struct {
		name string
		c    Claims
		err  string
	}{
		{"ttl at MaxTTL", claims(MaxTTL), ""},
		{"ttl past MaxTTL", claims(MaxTTL + time.Nanosecond), "is over the bound of 168h0m0s"},
		{"ttl zero", claims(0), "ttl 0s is not positive"},
		{"no times", Claims{TrustDomain: "td", Namespace: "a", ServiceAccount: "b"}, "issuedAt and expiry are required"},
		{"bad trust domain", Claims{TrustDomain: "TD!", Namespace: "a", ServiceAccount: "b", IssuedAt: t0, Expiry: t0.Add(time.Hour)}, "trust domain"},
		{"bad namespace", Claims{TrustDomain: "td", Namespace: "a_b", ServiceAccount: "b", IssuedAt: t0, Expiry: t0.Add(time.Hour)}, "namespace"},
	} {
		_, err := Issue(k, tc.c)
		if tc.err == "" {
			if err != nil {
				t.Errorf("%s: %v", tc.name, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.err)
		}
	}
	if _, err := Issue(nil, claims(time.Hour)); err == nil {
		t.Error("Issue without a key accepted")
	}
}

func FuzzVerify(f *testing.F) {
	k := key(f)
	pub := k.Public().(ed25519.PublicKey)
	good, _ := Issue(k, claims(time.Hour))
	f.Add(good)
	f.Add("eyJhbGciOiJub25lIn0.e30.")
	f.Add("a.b.c")
	f.Fuzz(func(t *testing.T, tok string) {
		c, err := Verify(tok, pub, "cluster.local", t0)
		if err != nil {
			return
		}
		// Whatever verifies was signed by k: only the seed (or the same token
		// with equivalent encodings) can get here, and its claims are valid.
		if c.Namespace != "shop" || c.ServiceAccount != "reviews" || c.TTL() > MaxTTL {
			t.Fatalf("verified claims %+v", c)
		}
	})
}

func BenchmarkVerify(b *testing.B) {
	k := key(b)
	pub := k.Public().(ed25519.PublicKey)
	tok, _ := Issue(k, claims(time.Hour))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Verify(tok, pub, "cluster.local", t0); err != nil {
			b.Fatal(err)
		}
	}
}
