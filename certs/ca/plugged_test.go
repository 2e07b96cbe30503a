package ca

import (
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spiffe/go-spiffe/v2/spiffeid"

	"github.com/weft-mesh/weft/certs/revoke"
)

// operatorCA writes what an operator's own PKI hands pilot: a root, an
// intermediate it signed, and the intermediate's key.
func operatorCA(t *testing.T, dir string) (rootFile, interFile, interKeyFile, rootKeyFile string) {
	t.Helper()
	rootKey, interKey := p256(t), p256(t)
	rootTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "operator root"},
		NotBefore: t0.Add(-time.Hour), NotAfter: t0.Add(10 * 365 * 24 * time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign}
	rootDER, err := x509.CreateCertificate(rand.Reader, rootTmpl, rootTmpl, rootKey.Public(), rootKey)
	if err != nil {
		t.Fatal(err)
	}
	root, _ := x509.ParseCertificate(rootDER)
	interTmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "operator intermediate for weft"},
		NotBefore: t0.Add(-time.Hour), NotAfter: t0.Add(365 * 24 * time.Hour), IsCA: true, BasicConstraintsValid: true, MaxPathLenZero: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign}
	interDER, err := x509.CreateCertificate(rand.Reader, interTmpl, root, interKey.Public(), rootKey)
	if err != nil {
		t.Fatal(err)
	}
	write := func(name, typ string, der []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	ik, _ := x509.MarshalECPrivateKey(interKey)
	rk, _ := x509.MarshalPKCS8PrivateKey(rootKey)
	return write("root.crt", "CERTIFICATE", rootDER), write("inter.crt", "CERTIFICATE", interDER),
		write("inter.key", "EC PRIVATE KEY", ik), write("root.key", "PRIVATE KEY", rk)
}

func TestPluggedIntermediate(t *testing.T) {
	now := t0
	files := t.TempDir()
	rootFile, interFile, interKey, rootKey := operatorCA(t, files)
	dir := t.TempDir()
	c, err := Open(Config{Dir: dir, TrustDomain: "td", RootCertFile: rootFile, ChainFile: interFile, RootKeyFile: interKey, Now: fixedNow(&now)})
	if err != nil {
		t.Fatal(err)
	}
	if !c.Plugged() || len(c.Bundle().Roots()) != 2 {
		t.Fatalf("plugged %v, %d bundle certificates (want root + intermediate)", c.Plugged(), len(c.Bundle().Roots()))
	}
	id := spiffeid.RequireFromString("spiffe://td/ns/a/sa/b")
	_, csr := csrFor(t, id.String())
	chain, err := c.Sign(csr, id, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if len(chain) != 2 || chain[1].Subject.CommonName != "operator intermediate for weft" {
		t.Fatalf("chain of %d, want leaf + intermediate", len(chain))
	}
	// A peer that trusts only the operator's root verifies the chain too.
	rootOnly := x509.NewCertPool()
	rootOnly.AddCert(c.Bundle().Roots()[0])
	inter := x509.NewCertPool()
	inter.AddCert(chain[1])
	if _, err := chain[0].Verify(x509.VerifyOptions{Roots: rootOnly, Intermediates: inter, CurrentTime: now}); err != nil {
		t.Fatalf("against the root alone: %v", err)
	}
	if _, err := c.Bundle().Verify(chain, now); err != nil {
		t.Fatal(err)
	}
	// The CRL the intermediate signs verifies against the bundle.
	signer, key := c.CRLSigner()
	der, err := revoke.Build(signer, key, 1, nil, now, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := revoke.Parse(der, c.Bundle()); err != nil {
		t.Fatalf("CRL of a plugged-in intermediate: %v", err)
	}
	got, err := os.ReadFile(filepath.Join(dir, RootFile))
	if err != nil || string(got) != string(c.Bundle().PEM()) {
		t.Fatalf("root.pem not written from the plugged-in files: %v", err)
	}
	if err := c.StartRotation(); err == nil || !strings.Contains(err.Error(), "plugged-in CA rotates by replacing its files") {
		t.Fatalf("rotation of a plugged-in CA: %v", err)
	}
	if err := c.FinishRotation(); err == nil {
		t.Fatal("finish rotation of a plugged-in CA accepted")
	}

	// Root only: the root signs.
	r, err := Open(Config{Dir: t.TempDir(), TrustDomain: "td", RootCertFile: rootFile, RootKeyFile: rootKey, Now: fixedNow(&now)})
	if err != nil {
		t.Fatal(err)
	}
	if chain, err := r.Sign(csr, id, time.Hour); err != nil || len(chain) != 1 {
		t.Fatalf("root-only plugged CA: %d %v", len(chain), err)
	}

	for _, tc := range []struct {
		name string
		cfg  Config
		err  string
	}{
		{"key of the root for the intermediate", Config{RootCertFile: rootFile, ChainFile: interFile, RootKeyFile: rootKey}, "is not the key of the signer"},
		{"intermediate as root", Config{RootCertFile: interFile, RootKeyFile: interKey}, "not a self-signed root"},
		{"missing key file", Config{RootCertFile: rootFile, RootKeyFile: filepath.Join(files, "nope")}, "no such file"},
		{"certificate as key", Config{RootCertFile: rootFile, RootKeyFile: rootFile}, "PEM type \"CERTIFICATE\" is not a private key"},
	} {
		tc.cfg.Dir, tc.cfg.TrustDomain = t.TempDir(), "td"
		if _, err := Open(tc.cfg); err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.err)
		}
	}
	// An intermediate from another root.
	_, otherInter, otherKey, _ := operatorCA(t, t.TempDir())
	if _, err := Open(Config{Dir: t.TempDir(), TrustDomain: "td", RootCertFile: rootFile, ChainFile: otherInter, RootKeyFile: otherKey}); err == nil || !strings.Contains(err.Error(), "does not chain to the root") {
		t.Errorf("foreign intermediate: %v", err)
	}
}
