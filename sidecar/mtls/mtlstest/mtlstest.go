// Package mtlstest makes test certificate authorities, workload SVIDs and CRLs
// with crypto/x509, for tests of mTLS that must not depend on pilot's CA.
package mtlstest

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
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
	"github.com/weft-mesh/weft/certs/revoke"
	"github.com/weft-mesh/weft/sidecar/svid"
)

// CA is a self-signed test root that issues SVIDs and signs CRLs.
type CA struct {
	Cert *x509.Certificate
	Key  crypto.Signer
}

// NewCA makes a root valid from an hour before now to a year after.
func NewCA(t testing.TB, name string) *CA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial(t),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(365 * 24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &CA{Cert: c, Key: key}
}

func serial(t testing.TB) *big.Int {
	s, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		t.Fatal(err)
	}
	return s.Add(s, big.NewInt(1))
}

// Bundle is a trust bundle of this root alone.
func (ca *CA) Bundle(t testing.TB) *bundle.Bundle {
	t.Helper()
	b, err := bundle.New(ca.Cert)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Issue makes an SVID for id valid from notBefore to notAfter.
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

// Workload issues a day-long SVID spiffe://<td>/ns/<ns>/sa/<sa>.
func (ca *CA) Workload(t testing.TB, td, ns, sa string) *svid.SVID {
	now := time.Now()
	return ca.Issue(t, fmt.Sprintf("spiffe://%s/ns/%s/sa/%s", td, ns, sa), now.Add(-time.Minute), now.Add(24*time.Hour))
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

// RootPEM is the root certificate as PEM (a bundle of one).
func (ca *CA) RootPEM() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Cert.Raw})
}

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
