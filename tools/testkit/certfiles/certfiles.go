// Package certfiles issues mesh certificates (certs/ca) into PEM files, for
// tests whose real TLS peers read certificates from disk: grpc-go's
// file_watcher certificate provider, a sidecar's flags.
package certfiles

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"github.com/weft-mesh/weft/certs/ca"
	"github.com/weft-mesh/weft/certs/spiffe"
	"github.com/weft-mesh/weft/internal/atomicfile"
)

// DefaultTTL is the lifetime of a certificate Issue makes.
const DefaultTTL = time.Hour

// CA is a mesh CA in a test's temporary directory.
type CA struct {
	*ca.CA
	Dir string
	// RootFile holds the trust bundle (PEM).
	RootFile string
	// RootCertFile and RootKeyFile are the CA's root and its key: what pilot's
	// --ca-root-cert/--ca-root-key (a plugged-in CA) take.
	RootCertFile, RootKeyFile string
	TrustDomain               string
}

// NewCA opens a fresh CA for trustDomain and writes its bundle to RootFile.
func NewCA(t testing.TB, trustDomain string) *CA {
	t.Helper()
	dir := t.TempDir()
	c, err := ca.Open(ca.Config{Dir: filepath.Join(dir, "ca"), TrustDomain: trustDomain})
	if err != nil {
		t.Fatalf("certfiles: open CA: %v", err)
	}
	out := &CA{CA: c, Dir: dir, RootFile: filepath.Join(dir, "root.pem"), TrustDomain: trustDomain,
		RootCertFile: filepath.Join(dir, "ca", ca.RootFile), RootKeyFile: filepath.Join(dir, "ca", ca.RootKeyFile)}
	if err := os.WriteFile(out.RootFile, c.Bundle().PEM(), 0o644); err != nil {
		t.Fatal(err)
	}
	return out
}

// Workload is the SPIFFE ID of ns/sa in the CA's trust domain.
func (c *CA) Workload(t testing.TB, ns, sa string) spiffeid.ID {
	t.Helper()
	id, err := spiffe.Workload(c.TrustDomain, ns, sa)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// Issue makes a P-256 key and a certificate for id (valid DefaultTTL) and
// writes them as <name>.pem (leaf, then intermediates) and <name>-key.pem.
func (c *CA) Issue(t testing.TB, id spiffeid.ID, name string) (certFile, keyFile string) {
	t.Helper()
	return c.IssueTTL(t, id, name, DefaultTTL)
}

// IssueTTL is Issue with the certificate valid until ttl from now. Each file is
// replaced atomically, so a reader watching them (grpc-go's file_watcher)
// sees a rotation as old or new files, never half of one.
func (c *CA) IssueTTL(t testing.TB, id spiffeid.ID, name string, ttl time.Duration) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	chain, err := c.SignKey(&key.PublicKey, id, nil, nil, ttl)
	if err != nil {
		t.Fatalf("certfiles: sign %s: %v", id, err)
	}
	var certPEM []byte
	for _, cert := range chain {
		certPEM = append(certPEM, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Raw})...)
	}
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(c.Dir, name+".pem"), filepath.Join(c.Dir, name+"-key.pem")
	if err := atomicfile.Write(certFile, certPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := atomicfile.Write(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}
