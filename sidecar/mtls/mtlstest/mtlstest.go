// Package mtlstest makes test certificate authorities, workload SVIDs and CRLs
// with crypto/x509, for tests of mTLS that must not depend on pilot's CA.
package mtlstest

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"math/big"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/spiffe/go-spiffe/v2/spiffeid"

	"github.com/weft-mesh/weft/certs/bundle"
	"github.com/weft-mesh/weft/certs/ca"
	"github.com/weft-mesh/weft/certs/revoke"
	"github.com/weft-mesh/weft/sidecar/svid"
)

// CA is a mesh CA for tests: certs/ca's (a self-signed root in a temp dir, as
// pilot's), which issues workload SVIDs and signs CRLs.
type CA struct {
	CA   *ca.CA
	Cert *x509.Certificate // the root (CRL signer)
	Key  crypto.Signer
}

// NewCA opens a fresh certs/ca CA for trust domain cluster.local.
func NewCA(t testing.TB, name string) *CA {
	t.Helper()
	c, err := ca.Open(ca.Config{Dir: filepath.Join(t.TempDir(), "ca-"+name), TrustDomain: "cluster.local"})
	if err != nil {
		t.Fatal(err)
	}
	cert, key := c.CRLSigner()
	return &CA{CA: c, Cert: cert, Key: key}
}

func serial(t testing.TB) *big.Int {
	s, err := ca.Serial()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// Bundle is the CA's trust bundle.
func (c *CA) Bundle(t testing.TB) *bundle.Bundle { return c.CA.Bundle() }

// Issue makes an SVID for id valid from notBefore to notAfter, signed by the
// root (certs/ca signs with now as NotBefore; tests of expiry need both ends).
func (ca *CA) Issue(t testing.TB, id string, notBefore, notAfter time.Time) *svid.SVID {
	t.Helper()
	sid, err := spiffeid.FromString(id)
	if err != nil {
		t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	u, _ := url.Parse(sid.String())
	tmpl := &x509.Certificate{
		SerialNumber: serial(t),
		NotBefore:    notBefore,
		NotAfter:     notAfter,
		URIs:         []*url.URL{u},
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, key.Public(), ca.Key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	s, err := svid.New([]*x509.Certificate{leaf}, key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// Workload issues a day-long SVID spiffe://<td>/ns/<ns>/sa/<sa> with certs/ca's
// Sign path (what pilot issues).
func (c *CA) Workload(t testing.TB, td, ns, sa string) *svid.SVID {
	t.Helper()
	id, err := spiffeid.FromString(fmt.Sprintf("spiffe://%s/ns/%s/sa/%s", td, ns, sa))
	if err != nil {
		t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	chain, err := c.CA.SignKey(key.Public(), id, nil, nil, 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	s, err := svid.New(chain, key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// CRLPEM signs a CRL (number, thisUpdate, validity) revoking serials, as PEM.
func (ca *CA) CRLPEM(t testing.TB, number int64, thisUpdate time.Time, validity time.Duration, serials ...*big.Int) []byte {
	t.Helper()
	var es []revoke.Entry
	for _, s := range serials {
		es = append(es, revoke.Entry{Serial: s, RevokedAt: thisUpdate})
	}
	der, err := revoke.Build(ca.Cert, ca.Key, number, es, thisUpdate, validity)
	if err != nil {
		t.Fatal(err)
	}
	return revoke.PEM(der)
}

// CRL is CRLPEM parsed against this root.
func (ca *CA) CRL(t testing.TB, number int64, thisUpdate time.Time, validity time.Duration, serials ...*big.Int) *revoke.CRL {
	t.Helper()
	c, err := revoke.ParsePEM(ca.CRLPEM(t, number, thisUpdate, validity, serials...), ca.Bundle(t))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// RootPEM is the trust bundle as PEM (root.pem).
func (c *CA) RootPEM() []byte { return c.CA.Bundle().PEM() }

// WriteSVID writes s's chain and key as PEM files cert.pem and key.pem in dir
// and returns their paths.
func WriteSVID(t testing.TB, dir string, s *svid.SVID) (certFile, keyFile string) {
	t.Helper()
	var chain []byte
	for _, der := range s.Cert.Certificate {
		chain = append(chain, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})...)
	}
	kd, err := x509.MarshalPKCS8PrivateKey(s.Cert.PrivateKey)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, chain, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kd}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}
