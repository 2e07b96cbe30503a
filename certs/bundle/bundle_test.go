package bundle_test

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spiffe/go-spiffe/v2/spiffeid"

	"github.com/weft-mesh/weft/certs/bundle"
	"github.com/weft-mesh/weft/certs/ca"
)

var t0 = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

func newCA(t testing.TB) *ca.CA {
	t.Helper()
	c, err := ca.Open(ca.Config{Dir: t.TempDir(), TrustDomain: "td", Now: func() time.Time { return t0 }})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func leaf(t testing.TB, c *ca.CA, id string, ttl time.Duration) []*x509.Certificate {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	u, _ := url.Parse(id)
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{URIs: []*url.URL{u}}, key)
	if err != nil {
		t.Fatal(err)
	}
	csr, _ := x509.ParseCertificateRequest(der)
	chain, err := c.Sign(csr, spiffeid.RequireFromString(id), ttl)
	if err != nil {
		t.Fatal(err)
	}
	return chain
}

func TestVerify(t *testing.T) {
	c, other := newCA(t), newCA(t)
	id := "spiffe://td/ns/a/sa/b"
	good := leaf(t, c, id, time.Hour)
	foreign := leaf(t, other, id, time.Hour)
	b := c.Bundle()
	root := b.Roots()[0]
	for _, tc := range []struct {
		name  string
		chain []*x509.Certificate
		now   time.Time
		err   string
	}{
		{"valid", good, t0, ""},
		{"at NotBefore", good, good[0].NotBefore, ""},
		{"at NotAfter", good, good[0].NotAfter, ""},
		{"before NotBefore", good, good[0].NotBefore.Add(-time.Second), "certificate has expired or is not yet valid"},
		{"past NotAfter", good, good[0].NotAfter.Add(time.Second), "certificate has expired or is not yet valid"},
		{"another CA", foreign, t0, "certificate signed by unknown authority"},
		{"CA as leaf", []*x509.Certificate{root}, t0, "leaf certificate with CA flag set to true"},
		{"empty", nil, t0, "empty chain"},
		{"zero time", good, time.Time{}, "zero time"},
		{"over MaxChain", append(good, good[0], good[0], good[0], good[0], good[0], good[0], good[0], good[0]), t0, "chain of 9 certificates, over the bound of 8"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := b.Verify(tc.chain, tc.now)
			if tc.err == "" {
				if err != nil || got.String() != id {
					t.Fatalf("Verify = %v, %v", got, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("err = %v, want %q", err, tc.err)
			}
		})
	}
	if _, err := b.Verify(append(good, good[0], good[0], good[0], good[0], good[0], good[0], good[0]), t0); err != nil {
		t.Fatalf("chain of MaxChain: %v", err)
	}
}

func TestParseRoundTripAndRefusals(t *testing.T) {
	c := newCA(t)
	b := c.Bundle()
	p, err := bundle.Parse(b.PEM())
	if err != nil || !p.Equal(b) || !bytes.Equal(p.PEM(), b.PEM()) {
		t.Fatalf("round trip: %v", err)
	}
	roots := make([]*x509.Certificate, bundle.MaxRoots+1)
	var all []byte
	for i := range roots {
		roots[i] = newCA(t).Signer()
		all = append(all, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: roots[i].Raw})...)
	}
	if _, err := bundle.New(roots[:bundle.MaxRoots]...); err != nil {
		t.Fatalf("MaxRoots roots: %v", err)
	}
	if _, err := bundle.New(roots...); err == nil || !strings.Contains(err.Error(), "17 roots, over the bound of 16") {
		t.Fatalf("MaxRoots+1: %v", err)
	}
	atBound := bytes.Join(bytes.SplitAfter(all, []byte("-----END CERTIFICATE-----\n"))[:bundle.MaxRoots], nil)
	if _, err := bundle.Parse(atBound); err != nil {
		t.Fatalf("Parse of MaxRoots: %v", err)
	}
	// ParseCertificates (Parse's and csrrpc.ParseChain's reader): at its limit
	// and one past, and what follows the last block comes back as rest.
	if got, rest, err := bundle.ParseCertificates(append(atBound[:len(atBound):len(atBound)], "tail"...), bundle.MaxRoots); err != nil || len(got) != bundle.MaxRoots || string(rest) != "tail" {
		t.Fatalf("ParseCertificates at the limit: %d certificates, rest %q, %v", len(got), rest, err)
	}
	if _, _, err := bundle.ParseCertificates(all, bundle.MaxRoots); err == nil || err.Error() != "more than 16 certificates" {
		t.Fatalf("ParseCertificates one past the limit: %v", err)
	}
	leafPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: leaf(t, c, "spiffe://td/ns/a/sa/b", time.Hour)[0].Raw})
	for _, tc := range []struct {
		name string
		in   []byte
		err  string
	}{
		{"empty", nil, "no roots"},
		{"MaxRoots+1", all, "more than 16 certificates"},
		{"over MaxPEMBytes", make([]byte, bundle.MaxPEMBytes+1), "98305 bytes, over the bound of 98304"},
		{"key block", pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: []byte{1}}), "PEM type \"PRIVATE KEY\", want CERTIFICATE"},
		{"trailing garbage", append(append([]byte(nil), b.PEM()...), "junk"...), "4 bytes of trailing data"},
		{"bad DER", pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: []byte{0x30, 1, 2}}), "certificate 0"},
		{"leaf as root", leafPEM, "not a CA certificate"},
	} {
		if _, err := bundle.Parse(tc.in); err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.err)
		}
	}
	// What pilot writes to root.pem parses.
	dir := t.TempDir()
	if _, err := ca.Open(ca.Config{Dir: dir, TrustDomain: "td"}); err != nil {
		t.Fatal(err)
	}
	rootPEM, _ := os.ReadFile(filepath.Join(dir, ca.RootFile))
	if _, err := bundle.Parse(rootPEM); err != nil {
		t.Fatal(err)
	}
}

func TestUnionEqual(t *testing.T) {
	a, b := newCA(t).Bundle(), newCA(t).Bundle()
	u, err := a.Union(b)
	if err != nil || len(u.Roots()) != 2 {
		t.Fatalf("union: %v", err)
	}
	uu, _ := u.Union(a)
	if !uu.Equal(u) || len(uu.Roots()) != 2 {
		t.Fatal("union with a subset added roots")
	}
	rev, _ := b.Union(a)
	if !rev.Equal(u) {
		t.Fatal("Equal depends on order")
	}
	if a.Equal(b) || a.Equal(nil) {
		t.Fatal("different bundles equal")
	}
	if r := a.Roots(); len(r) != 1 || !a.Pool().Equal(mustPool(r[0])) {
		t.Fatal("Pool does not hold the root")
	}
}

func mustPool(c *x509.Certificate) *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(c)
	return p
}

func FuzzParse(f *testing.F) {
	c := newCA(f)
	f.Add(c.Bundle().PEM())
	f.Add([]byte("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"))
	f.Fuzz(func(t *testing.T, in []byte) {
		b, err := bundle.Parse(in)
		if err != nil {
			return
		}
		again, err := bundle.Parse(b.PEM())
		if err != nil || !again.Equal(b) {
			t.Fatalf("a parsed bundle does not round-trip: %v", err)
		}
		if len(b.Roots()) == 0 || len(b.Roots()) > bundle.MaxRoots {
			t.Fatalf("%d roots", len(b.Roots()))
		}
	})
}

func BenchmarkVerify(b *testing.B) {
	c := newCA(b)
	chain := leaf(b, c, "spiffe://td/ns/a/sa/b", time.Hour)
	bu := c.Bundle()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := bu.Verify(chain, t0); err != nil {
			b.Fatal(err)
		}
	}
}
