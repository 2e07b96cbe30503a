package svid

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"math/big"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var t0 = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

func leaf(t *testing.T, key crypto.Signer, uris ...string) *x509.Certificate {
	t.Helper()
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(42),
		NotBefore:    t0,
		NotAfter:     t0.Add(time.Hour),
	}
	for _, u := range uris {
		p, err := url.Parse(u)
		if err != nil {
			t.Fatal(err)
		}
		tmpl.URIs = append(tmpl.URIs, p)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func newKey(t *testing.T) *ecdsa.PrivateKey {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestNew(t *testing.T) {
	k, other := newKey(t), newKey(t)
	const id = "spiffe://cluster.local/ns/shop/sa/reviews"
	good := leaf(t, k, id)
	s, err := New([]*x509.Certificate{good}, k)
	if err != nil {
		t.Fatal(err)
	}
	if s.ID.String() != id || !s.NotBefore.Equal(t0) || !s.NotAfter.Equal(t0.Add(time.Hour)) || s.Cert.Leaf != good || s.Lifetime() != time.Hour {
		t.Fatalf("got %+v", s)
	}
	if !s.ValidAt(t0) || !s.ValidAt(t0.Add(time.Hour)) || s.ValidAt(t0.Add(time.Hour+time.Nanosecond)) || s.ValidAt(t0.Add(-time.Nanosecond)) {
		t.Fatal("ValidAt bounds wrong")
	}
	for _, tc := range []struct {
		name  string
		chain []*x509.Certificate
		key   crypto.Signer
		want  string
	}{
		{"empty chain", nil, k, "empty certificate chain"},
		{"no key", []*x509.Certificate{good}, nil, "no private key"},
		{"no URI SAN", []*x509.Certificate{leaf(t, k)}, k, "serial 42: certificate contains no URI SAN"},
		{"two URI SANs", []*x509.Certificate{leaf(t, k, id, "spiffe://cluster.local/ns/x/sa/y")}, k, "more than one URI SAN"},
		{"not spiffe", []*x509.Certificate{leaf(t, k, "https://cluster.local/x")}, k, "serial 42"},
		{"wrong key", []*x509.Certificate{good}, other, "(" + id + "): public key does not match"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(tc.chain, tc.key)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to contain %q", err, tc.want)
			}
		})
	}
}

func TestHolder(t *testing.T) {
	var h Holder // zero value usable
	if h.Load() != nil || h.Generation() != 0 {
		t.Fatalf("zero holder not empty: generation %d", h.Generation())
	}
	if _, err := h.GetClientCertificate(nil); err != ErrEmpty {
		t.Fatalf("empty GetClientCertificate err = %v", err)
	}
	if _, err := h.GetCertificate(nil); err != ErrEmpty {
		t.Fatalf("empty GetCertificate err = %v", err)
	}
	k := newKey(t)
	s1, err := New([]*x509.Certificate{leaf(t, k, "spiffe://td/ns/a/sa/b")}, k)
	if err != nil {
		t.Fatal(err)
	}
	ch := h.Changed()
	if h.Changed() != ch {
		t.Fatal("Changed replaced without a Store")
	}
	select {
	case <-ch:
		t.Fatal("closed before Store")
	default:
	}
	h.Store(s1)
	<-ch // closed by Store
	if h.Load() != s1 || h.Generation() != 1 {
		t.Fatalf("Load after Store, generation %d want 1", h.Generation())
	}
	ch2 := h.Changed()
	if ch2 == ch {
		t.Fatal("Changed not replaced")
	}
	c, err := h.GetClientCertificate(&tls.CertificateRequestInfo{})
	if err != nil || c != &s1.Cert {
		t.Fatalf("GetClientCertificate = %v, %v", c, err)
	}
	s2, _ := New([]*x509.Certificate{leaf(t, k, "spiffe://td/ns/a/sa/b")}, k)
	h.Store(s2)
	<-ch2
	if c, _ := h.GetCertificate(nil); c != &s2.Cert || h.Generation() != 2 {
		t.Fatalf("GetCertificate does not serve the new SVID (generation %d want 2)", h.Generation())
	}
	h.Store(nil)
	if h.Load() != nil || h.Generation() != 3 {
		t.Fatalf("Store(nil) did not empty (generation %d want 3)", h.Generation())
	}
}

// Many waiters see one Store; Load never observes a torn value (run with -race).
func TestHolderFanOut(t *testing.T) {
	var h Holder
	k := newKey(t)
	s, _ := New([]*x509.Certificate{leaf(t, k, "spiffe://td/ns/a/sa/b")}, k)
	ch := h.Changed()
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			<-ch
			if h.Load() != s {
				t.Error("woken before the new SVID is visible")
			}
		})
	}
	h.Store(s)
	wg.Wait()
}

func BenchmarkLoad(b *testing.B) {
	var h Holder
	h.Store(&SVID{})
	b.ReportAllocs()
	for b.Loop() {
		if h.Load() == nil {
			b.Fatal("nil")
		}
	}
}
