package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/credentials"

	"github.com/weft-mesh/weft/certs/bundle"
	"github.com/weft-mesh/weft/tools/testkit"
	"github.com/weft-mesh/weft/tools/testkit/proc"
)

// enroll sends a first CSR for id with tok to the pilot process over TLS,
// trusting it through the root.pem it wrote, as a sidecar's --ca-root does.
func enroll(t *testing.T, p *proc.PilotProcess, tok, id string) []*x509.Certificate {
	t.Helper()
	pemBytes, err := os.ReadFile(p.CARootFile())
	if err != nil {
		t.Fatal(err)
	}
	roots, err := bundle.Parse(pemBytes)
	if err != nil {
		t.Fatal(err)
	}
	// --tls-san put pilot's IP in its serving certificate.
	chain, _ := proc.Enroll(t, p.XDSTLSAddr(), credentials.NewTLS(&tls.Config{RootCAs: roots.Pool(), ServerName: p.IP, MinVersion: tls.VersionTLS13}), tok, id, 20*time.Second)
	return chain
}

// metric reads one gauge of pilot's /metrics.
func metric(p *proc.PilotProcess, name string) (float64, error) {
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := hc.Get(p.URL() + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, name+" "); ok {
			return strconv.ParseFloat(v, 64)
		}
	}
	return 0, fmt.Errorf("no metric %s", name)
}

// TestCA: bin/pilot runs the mesh CA: a token from its admin API enrolls over
// its TLS listener; MeshConfig's certificateTTL and crlValidity apply to the
// next certificate and CRL.
func TestCA(t *testing.T) {
	const ip = "127.91.9.1"
	p := proc.StartPilot(t, ip, t.TempDir(), proc.Secure(), "--tls-san", ip+",pilot.weft.test")
	const id = "spiffe://cluster.local/ns/shop/sa/reviews"
	chain := enroll(t, p, proc.MintToken(t, p, "shop", "reviews", time.Minute), id)
	if got := chain[0].NotAfter.Sub(chain[0].NotBefore); got != 24*time.Hour+time.Minute {
		t.Fatalf("default lifetime %v, want 24h (+1m backdating)", got)
	}
	n0, err := metric(p, "weft_pilot_ca_crl_number")
	if err != nil {
		t.Fatal(err)
	}
	p.Apply(t, `apiVersion: mesh.weft.dev/v1alpha1
kind: MeshConfig
metadata: {name: default}
spec:
  certificateTTL: 90s
  crlValidity: 2s
`)
	chain = enroll(t, p, proc.MintToken(t, p, "shop", "reviews", time.Minute), id)
	if got := chain[0].NotAfter.Sub(chain[0].NotBefore); got != 90*time.Second+time.Minute {
		t.Fatalf("lifetime %v after certificateTTL: 90s, want 90s (+1m backdating)", got)
	}
	// Re-signed at half of 2s: several CRLs within a few seconds.
	testkit.Wait(t, 20*time.Second, func() error {
		n, err := metric(p, "weft_pilot_ca_crl_number")
		if err != nil {
			return err
		}
		if n < n0+3 {
			return fmt.Errorf("CRL number %v, want at least %v", n, n0+3)
		}
		return nil
	})
	if v, err := metric(p, `weft_pilot_ca_csr_total{result="issued"}`); err != nil || v != 2 {
		t.Fatalf("issued CSRs %v, %v", v, err)
	}
}

// TestPluggedInCA: --ca-root-cert/--ca-chain/--ca-root-key: the intermediate
// signs, the chain carries it, root.pem holds what sidecars trust.
func TestPluggedInCA(t *testing.T) {
	dir := t.TempDir()
	now := time.Now()
	rootKey, interKey := newKey(t), newKey(t)
	rootTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "operator root"}, NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign}
	rootDER, _ := x509.CreateCertificate(rand.Reader, rootTmpl, rootTmpl, rootKey.Public(), rootKey)
	root, _ := x509.ParseCertificate(rootDER)
	interTmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "weft intermediate"}, NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, MaxPathLenZero: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign}
	interDER, _ := x509.CreateCertificate(rand.Reader, interTmpl, root, interKey.Public(), rootKey)
	keyDER, _ := x509.MarshalPKCS8PrivateKey(interKey)
	write := func(name, typ string, der []byte) string {
		f := filepath.Join(dir, name)
		if err := os.WriteFile(f, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return f
	}
	const ip = "127.91.9.2"
	p := proc.StartPilot(t, ip, t.TempDir(), proc.Secure(), "--tls-san", ip,
		"--ca-root-cert", write("root.crt", "CERTIFICATE", rootDER), "--ca-chain", write("inter.crt", "CERTIFICATE", interDER), "--ca-root-key", write("inter.key", "PRIVATE KEY", keyDER))
	chain := enroll(t, p, proc.MintToken(t, p, "shop", "reviews", time.Minute), "spiffe://cluster.local/ns/shop/sa/reviews")
	if len(chain) != 2 || chain[1].Subject.CommonName != "weft intermediate" {
		t.Fatalf("chain of %d, want leaf + the plugged-in intermediate", len(chain))
	}
	pool := x509.NewCertPool()
	pool.AddCert(root)
	inter := x509.NewCertPool()
	inter.AddCert(chain[1])
	if _, err := chain[0].Verify(x509.VerifyOptions{Roots: pool, Intermediates: inter}); err != nil {
		t.Fatalf("against the operator's root: %v", err)
	}
}

func newKey(t *testing.T) *ecdsa.PrivateKey {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}
