package ca

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"go.uber.org/goleak"

	"github.com/weft-mesh/weft/certs/bundle"
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

func TestSignRefusals(t *testing.T) {
	now := t0
	c := openCA(t, t.TempDir(), &now)
	id := spiffeid.RequireFromString("spiffe://cluster.local/ns/shop/sa/reviews")
	_, good := csrFor(t, id.String())
	_, two := csrFor(t, id.String(), "spiffe://cluster.local/ns/shop/sa/other")
	_, wrong := csrFor(t, "spiffe://cluster.local/ns/shop/sa/other")
	_, none := csrFor(t)
	_, notSpiffe := csrFor(t, "https://cluster.local/ns/shop/sa/reviews")
	withDNS := csrTmpl(t, &x509.CertificateRequest{URIs: good.URIs, DNSNames: []string{"reviews.shop"}}, p256(t))
	withIP := csrTmpl(t, &x509.CertificateRequest{URIs: good.URIs, IPAddresses: []net.IP{net.IPv4(10, 0, 0, 1)}}, p256(t))
	withMail := csrTmpl(t, &x509.CertificateRequest{URIs: good.URIs, EmailAddresses: []string{"a@b.c"}}, p256(t))
	p384, _ := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	_, edKey, _ := ed25519.GenerateKey(rand.Reader)
	onP384 := csrTmpl(t, &x509.CertificateRequest{URIs: good.URIs}, p384)
	onEd := csrTmpl(t, &x509.CertificateRequest{URIs: good.URIs}, edKey)
	tampered := *good
	tampered.Signature = append([]byte(nil), good.Signature...)
	tampered.Signature[len(tampered.Signature)-1] ^= 1
	otherTD := spiffeid.RequireFromString("spiffe://other.td/ns/shop/sa/reviews")
	_, otherTDCSR := csrFor(t, otherTD.String())

	for _, tc := range []struct {
		name string
		csr  *x509.CertificateRequest
		id   spiffeid.ID
		ttl  time.Duration
		err  string
	}{
		{"ttl at MaxTTL", good, id, MaxTTL, ""},
		{"ttl past MaxTTL", good, id, MaxTTL + time.Nanosecond, "ttl 8760h0m0.000000001s not in (0, 8760h0m0s]"},
		{"ttl zero", good, id, 0, "ttl 0s not in"},
		{"ttl negative", good, id, -time.Second, "ttl -1s not in"},
		{"two URI SANs", two, id, time.Hour, "CSR has 2 URI SANs, want exactly one"},
		{"no URI SAN", none, id, time.Hour, "CSR has 0 URI SANs"},
		{"wrong ID", wrong, id, time.Hour, "CSR asks for SPIFFE ID spiffe://cluster.local/ns/shop/sa/other, the credential grants spiffe://cluster.local/ns/shop/sa/reviews"},
		{"not a SPIFFE URI", notSpiffe, id, time.Hour, "CSR URI SAN \"https://cluster.local/ns/shop/sa/reviews\""},
		{"DNS SANs", withDNS, id, time.Hour, "CSR has DNS SANs [\"reviews.shop\"]"},
		{"IP SANs", withIP, id, time.Hour, "CSR has IP SANs [10.0.0.1]"},
		{"e-mail SANs", withMail, id, time.Hour, "CSR has e-mail SANs"},
		{"P-384 key", onP384, id, time.Hour, "CSR key is *ecdsa.PublicKey, want ECDSA P-256"},
		{"Ed25519 key", onEd, id, time.Hour, "CSR key is ed25519.PublicKey, want ECDSA P-256"},
		{"tampered signature", &tampered, id, time.Hour, "CSR signature"},
		{"other trust domain", otherTDCSR, otherTD, time.Hour, "trust domain other.td, this CA signs for cluster.local"},
		{"nil CSR", nil, id, time.Hour, "no CSR"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			chain, err := c.Sign(tc.csr, tc.id, tc.ttl)
			if tc.err == "" {
				if err != nil {
					t.Fatal(err)
				}
				if !chain[0].NotAfter.Equal(now.Add(tc.ttl)) {
					t.Fatalf("NotAfter %v", chain[0].NotAfter)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("err = %v, want %q", err, tc.err)
			}
		})
	}
}

func p256(t testing.TB) *ecdsa.PrivateKey {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func csrTmpl(t testing.TB, tmpl *x509.CertificateRequest, key crypto.Signer) *x509.CertificateRequest {
	t.Helper()
	der, err := x509.CreateCertificateRequest(rand.Reader, tmpl, key)
	if err != nil {
		t.Fatal(err)
	}
	csr, err := x509.ParseCertificateRequest(der)
	if err != nil {
		t.Fatal(err)
	}
	return csr
}

func TestLeafShape(t *testing.T) {
	now := t0
	c := openCA(t, t.TempDir(), &now)
	id := spiffeid.RequireFromString("spiffe://cluster.local/ns/a/sa/b")
	_, csr := csrFor(t, id.String())
	seen := map[string]bool{}
	for range 20 {
		chain, err := c.Sign(csr, id, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		if len(chain) != 1 {
			t.Fatalf("self-signed mode chain of %d, want the leaf only", len(chain))
		}
		l := chain[0]
		switch {
		case l.IsCA:
			t.Fatal("leaf is a CA")
		case len(l.URIs) != 1 || l.URIs[0].String() != id.String():
			t.Fatalf("URIs %v", l.URIs)
		case len(l.DNSNames)+len(l.IPAddresses)+len(l.EmailAddresses) != 0:
			t.Fatal("leaf has non-URI SANs")
		case l.KeyUsage != x509.KeyUsageDigitalSignature:
			t.Fatalf("KeyUsage %v", l.KeyUsage)
		case len(l.ExtKeyUsage) != 2 || l.ExtKeyUsage[0] != x509.ExtKeyUsageServerAuth || l.ExtKeyUsage[1] != x509.ExtKeyUsageClientAuth:
			t.Fatalf("ExtKeyUsage %v", l.ExtKeyUsage)
		case l.SerialNumber.BitLen() > 128 || l.SerialNumber.BitLen() < 64:
			t.Fatalf("serial of %d bits", l.SerialNumber.BitLen())
		case seen[l.SerialNumber.String()]:
			t.Fatal("serial repeated")
		case !bytes.Equal(l.AuthorityKeyId, c.Signer().SubjectKeyId):
			t.Fatal("AuthorityKeyId is not the signer's SubjectKeyId")
		}
		seen[l.SerialNumber.String()] = true
	}
	root := c.Signer()
	if !root.IsCA || root.PublicKeyAlgorithm != x509.ECDSA || !root.NotAfter.Equal(now.Add(DefaultRootTTL)) {
		t.Fatalf("root: CA %v alg %v NotAfter %v", root.IsCA, root.PublicKeyAlgorithm, root.NotAfter)
	}
}

func TestLeafNeverOutlivesSigner(t *testing.T) {
	now := t0
	c, err := Open(Config{Dir: t.TempDir(), TrustDomain: "td", RootTTL: 2 * time.Hour, Now: fixedNow(&now)})
	if err != nil {
		t.Fatal(err)
	}
	id := spiffeid.RequireFromString("spiffe://td/ns/a/sa/b")
	_, csr := csrFor(t, id.String())
	chain, err := c.Sign(csr, id, 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if !chain[0].NotAfter.Equal(c.Signer().NotAfter) {
		t.Fatalf("leaf NotAfter %v, signer %v", chain[0].NotAfter, c.Signer().NotAfter)
	}
	now = now.Add(3 * time.Hour)
	if _, err := c.Sign(csr, id, time.Hour); err == nil || !strings.Contains(err.Error(), "expired at") {
		t.Fatalf("past the signer's NotAfter: err = %v", err)
	}
}

func TestSignKey(t *testing.T) {
	now := t0
	c := openCA(t, t.TempDir(), &now)
	pilot := spiffeid.RequireFromString("spiffe://cluster.local/weft/pilot")
	dns := make([]string, MaxDNSNames)
	for i := range dns {
		dns[i] = fmt.Sprintf("pilot-%d.weft", i)
	}
	chain, err := c.SignKey(p256(t).Public(), pilot, dns, []net.IP{net.IPv4(127, 0, 0, 1)}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if len(chain[0].DNSNames) != MaxDNSNames || len(chain[0].IPAddresses) != 1 {
		t.Fatalf("SANs %v %v", chain[0].DNSNames, chain[0].IPAddresses)
	}
	if _, err := c.SignKey(p256(t).Public(), pilot, append(dns, "one-more"), nil, time.Hour); err == nil || !strings.Contains(err.Error(), "33 DNS and 0 IP SANs, over the bounds of 32 and 32") {
		t.Fatalf("one DNS name past the bound: %v", err)
	}
	ips := make([]net.IP, MaxIPs+1)
	for i := range ips {
		ips[i] = net.IPv4(10, 0, 0, byte(i))
	}
	if _, err := c.SignKey(p256(t).Public(), pilot, nil, ips[:MaxIPs], time.Hour); err != nil {
		t.Fatalf("IPs at the bound: %v", err)
	}
	if _, err := c.SignKey(p256(t).Public(), pilot, nil, ips, time.Hour); err == nil {
		t.Fatal("one IP past the bound accepted")
	}
	edPub, _, _ := ed25519.GenerateKey(rand.Reader)
	pub := spiffeid.RequireFromString("spiffe://cluster.local/weft/publisher")
	chain, err = c.SignKey(edPub, pub, nil, nil, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := c.Bundle().Verify(chain, now); err != nil || got != pub {
		t.Fatalf("publisher cert: %v %v", got, err)
	}
	p384, _ := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	if _, err := c.SignKey(p384.Public(), pilot, nil, nil, time.Hour); err == nil || !strings.Contains(err.Error(), "ECDSA key on P-384, want P-256") {
		t.Fatalf("P-384: %v", err)
	}
	if _, err := c.SignKey("not a key", pilot, nil, nil, time.Hour); err == nil {
		t.Fatal("a string accepted as a key")
	}
}

func TestReopenKeepsRoot(t *testing.T) {
	now := t0
	dir := t.TempDir()
	a := openCA(t, dir, &now)
	b := openCA(t, dir, &now)
	if !a.Bundle().Equal(b.Bundle()) || !a.Signer().Equal(b.Signer()) {
		t.Fatal("reopen made a new root")
	}
	st, err := os.Stat(filepath.Join(dir, RootKeyFile))
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("root key mode %v, %v", st.Mode(), err)
	}
	if err := os.Remove(filepath.Join(dir, RootFile)); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(Config{Dir: dir, TrustDomain: "cluster.local"}); err == nil || !strings.Contains(err.Error(), "refusing to replace a key") {
		t.Fatalf("key without root: %v", err)
	}
}

func TestOpenRefusals(t *testing.T) {
	for _, tc := range []struct {
		cfg Config
		err string
	}{
		{Config{TrustDomain: "td"}, "Dir is required"},
		{Config{Dir: t.TempDir(), TrustDomain: "Bad TD"}, "trust domain \"Bad TD\""},
		{Config{Dir: t.TempDir(), TrustDomain: "td", RootTTL: -1}, "RootTTL -1ns is negative"},
		{Config{Dir: t.TempDir(), TrustDomain: "td", RootCertFile: "x"}, "needs both RootCertFile and RootKeyFile"},
	} {
		if _, err := Open(tc.cfg); err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("Open(%+v) = %v, want %q", tc.cfg, err, tc.err)
		}
	}
}

func TestRotation(t *testing.T) {
	now := t0
	dir := t.TempDir()
	c := openCA(t, dir, &now)
	id := spiffeid.RequireFromString("spiffe://cluster.local/ns/a/sa/b")
	_, csr := csrFor(t, id.String())
	oldLeaf, err := c.Sign(csr, id, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	oldRoot := c.Signer()
	if err := c.FinishRotation(); err == nil || !strings.Contains(err.Error(), "no rotation in progress") {
		t.Fatalf("finish before start: %v", err)
	}
	if err := c.StartRotation(); err != nil {
		t.Fatal(err)
	}
	if err := c.StartRotation(); err == nil || !strings.Contains(err.Error(), "already rotating") {
		t.Fatalf("second start: %v", err)
	}
	if c.Signer().Equal(oldRoot) || c.Rotating() == nil || !c.Rotating().Equal(oldRoot) || len(c.Bundle().Roots()) != 2 {
		t.Fatal("rotation did not switch the signer or keep the old root")
	}
	newLeaf, err := c.Sign(csr, id, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	for _, chain := range [][]*x509.Certificate{oldLeaf, newLeaf} {
		if _, err := c.Bundle().Verify(chain, now); err != nil {
			t.Fatalf("during rotation: %v", err)
		}
	}
	if err := newLeaf[0].CheckSignatureFrom(c.Signer()); err != nil {
		t.Fatal("new leaf not signed by the new root")
	}
	// The new leaf carries the new root cross-signed by the old: a peer that
	// trusts only the old root, or only the new one, verifies it.
	if len(newLeaf) != 2 || !newLeaf[1].IsCA || newLeaf[1].CheckSignatureFrom(oldRoot) != nil {
		t.Fatalf("during rotation the chain is %d certificates, want leaf + cross-signed new root", len(newLeaf))
	}
	oldOnly, _ := bundle.New(oldRoot)
	newOnly, _ := bundle.New(c.Signer())
	for name, b := range map[string]*bundle.Bundle{"old root only": oldOnly, "new root only": newOnly} {
		if _, err := b.Verify(newLeaf, now); err != nil {
			t.Fatalf("new leaf against the %s: %v", name, err)
		}
	}
	if _, err := newOnly.Verify(oldLeaf, now); err == nil {
		t.Fatal("an old leaf verifies against the new root alone")
	}
	// A restart in the middle keeps the rotation.
	r := openCA(t, dir, &now)
	if !r.Bundle().Equal(c.Bundle()) || !r.Signer().Equal(c.Signer()) || r.Rotating() == nil {
		t.Fatal("restart lost the rotation state")
	}
	if again, err := r.Sign(csr, id, time.Hour); err != nil || len(again) != 2 {
		t.Fatalf("after a restart in the rotation: chain of %d, %v; want the cross certificate kept", len(again), err)
	}
	if err := r.FinishRotation(); err != nil {
		t.Fatal(err)
	}
	if len(r.Bundle().Roots()) != 1 || r.Rotating() != nil {
		t.Fatal("finish kept the old root")
	}
	if _, err := r.Bundle().Verify(oldLeaf, now); err == nil {
		t.Fatal("an old-root leaf verifies after the rotation finished")
	}
	if _, err := r.Bundle().Verify(newLeaf, now); err != nil {
		t.Fatal(err)
	}
	if after, err := r.Sign(csr, id, time.Hour); err != nil || len(after) != 1 {
		t.Fatalf("after the rotation: chain of %d, %v; want the leaf alone", len(after), err)
	}
	if _, err := os.Stat(filepath.Join(dir, CrossFile)); !os.IsNotExist(err) {
		t.Fatalf("cross.pem left after the rotation: %v", err)
	}
	again := openCA(t, dir, &now)
	if !again.Bundle().Equal(r.Bundle()) || again.Rotating() != nil {
		t.Fatal("restart after finish does not match")
	}
	pemBytes, err := os.ReadFile(filepath.Join(dir, RootFile))
	if err != nil || !bytes.Equal(pemBytes, again.Bundle().PEM()) {
		t.Fatalf("root.pem is not the bundle: %v", err)
	}
}

func BenchmarkSign(b *testing.B) {
	now := t0
	c := openCA(b, b.TempDir(), &now)
	id := spiffeid.RequireFromString("spiffe://cluster.local/ns/shop/sa/reviews")
	_, csr := csrFor(b, id.String())
	b.ReportAllocs()
	for b.Loop() {
		if _, err := c.Sign(csr, id, 24*time.Hour); err != nil {
			b.Fatal(err)
		}
	}
}
