// Package authntest builds real TLS credentials for tests of authenticated xDS:
// a mesh CA (certs/ca) in a temporary directory, X.509-SVIDs from it, malformed
// leaves signed by its root for refusal tests, and the server and client gRPC
// transport credentials pilot's TLS listener and a sidecar would use.
package authntest

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"net"
	"net/url"
	"testing"
	"time"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"google.golang.org/grpc/credentials"

	"github.com/weft-mesh/weft/certs/ca"
)

// CA is a test mesh CA of trust domain cluster.local.
type CA struct {
	*ca.CA
	Dir string
}

// NewCA opens a CA with a fresh self-signed root in a temporary directory.
func NewCA(t testing.TB) *CA {
	t.Helper()
	dir := t.TempDir()
	c, err := ca.Open(ca.Config{Dir: dir, TrustDomain: "cluster.local"})
	if err != nil {
		t.Fatal(err)
	}
	return &CA{CA: c, Dir: dir}
}

// Pool holds the trust bundle.
func (c *CA) Pool() *x509.CertPool { return c.Bundle().Pool() }

func key(t testing.TB) *ecdsa.PrivateKey {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// SVID issues an X.509-SVID for id (with ips as IP SANs) valid for an hour.
func (c *CA) SVID(t testing.TB, id string, ips ...net.IP) tls.Certificate {
	t.Helper()
	sid, err := spiffeid.FromString(id)
	if err != nil {
		t.Fatal(err)
	}
	k := key(t)
	chain, err := c.SignKey(&k.PublicKey, sid, nil, ips, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	out := tls.Certificate{PrivateKey: k, Leaf: chain[0]}
	for _, x := range chain {
		out.Certificate = append(out.Certificate, x.Raw)
	}
	return out
}

// Raw issues, directly under the CA's signer, a leaf with exactly the given
// URI SANs (none, several, another trust domain): what certs/ca refuses to
// make, for testing that pilot refuses it too.
func (c *CA) Raw(t testing.TB, uris ...string) tls.Certificate {
	t.Helper()
	issuer, signer := c.CRLSigner()
	k := key(t)
	serial, err := ca.Serial()
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial, NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth, x509.ExtKeyUsageServerAuth},
	}
	for _, u := range uris {
		pu, err := url.Parse(u)
		if err != nil {
			t.Fatal(err)
		}
		tmpl.URIs = append(tmpl.URIs, pu)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, issuer, &k.PublicKey, crypto.Signer(signer))
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: k, Leaf: leaf}
}

// ServingCert is pilot's serving certificate (spiffe://cluster.local/weft/pilot,
// IP SAN 127.0.0.1).
func (c *CA) ServingCert(t testing.TB) tls.Certificate {
	return c.SVID(t, "spiffe://cluster.local/weft/pilot", net.IPv4(127, 0, 0, 1))
}

// ServerCreds are pilot's TLS listener's: its serving certificate, client
// certificates verified against the bundle when given, TLS 1.3.
func (c *CA) ServerCreds(t testing.TB) credentials.TransportCredentials {
	t.Helper()
	cert := c.ServingCert(t)
	return credentials.NewTLS(&tls.Config{MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{cert},
		ClientAuth: tls.VerifyClientCertIfGiven, ClientCAs: c.Pool()})
}

// ClientCreds verify the server against the bundle and present cert (none
// when nil).
func (c *CA) ClientCreds(cert *tls.Certificate) credentials.TransportCredentials {
	cfg := &tls.Config{MinVersion: tls.VersionTLS13, RootCAs: c.Pool()}
	if cert != nil {
		cfg.Certificates = []tls.Certificate{*cert}
	}
	return credentials.NewTLS(cfg)
}
