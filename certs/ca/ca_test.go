package ca

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"net/url"
	"testing"
	"time"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var t0 = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

func fixedNow(t *time.Time) func() time.Time { return func() time.Time { return *t } }

func openCA(t testing.TB, dir string, now *time.Time) *CA {
	t.Helper()
	c, err := Open(Config{Dir: dir, TrustDomain: "cluster.local", Now: fixedNow(now)})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// csrFor makes a P-256 key and a CSR with the given URI SANs.
func csrFor(t testing.TB, uris ...string) (*ecdsa.PrivateKey, *x509.CertificateRequest) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.CertificateRequest{}
	for _, s := range uris {
		u, err := url.Parse(s)
		if err != nil {
			t.Fatal(err)
		}
		tmpl.URIs = append(tmpl.URIs, u)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, tmpl, key)
	if err != nil {
		t.Fatal(err)
	}
	csr, err := x509.ParseCertificateRequest(der)
	if err != nil {
		t.Fatal(err)
	}
	return key, csr
}

func TestSignVerifies(t *testing.T) {
	now := t0
	c := openCA(t, t.TempDir(), &now)
	id := spiffeid.RequireFromString("spiffe://cluster.local/ns/shop/sa/reviews")
	_, csr := csrFor(t, id.String())
	chain, err := c.Sign(csr, id, 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	got, err := c.Bundle().Verify(chain, now)
	if err != nil || got != id {
		t.Fatalf("Verify = %v, %v", got, err)
	}
	leaf := chain[0]
	if !leaf.NotBefore.Equal(now.Add(-Backdate)) || !leaf.NotAfter.Equal(now.Add(24*time.Hour)) {
		t.Fatalf("validity %v..%v", leaf.NotBefore, leaf.NotAfter)
	}
}
