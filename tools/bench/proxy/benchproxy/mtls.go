package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/weft-mesh/weft/certs/ca"
	"github.com/weft-mesh/weft/certs/revoke"
	"github.com/weft-mesh/weft/certs/spiffe"
	"github.com/weft-mesh/weft/sidecar/mtls"
	"github.com/weft-mesh/weft/sidecar/svid"
)

// The bench mesh's identities: the client hop runs as productpage, the server
// hop as reviews (the client expects reviews).
const benchTD = "cluster.local"

var benchSAs = map[string]string{"client": "productpage", "server": "reviews"}

// genMTLS writes a mesh CA (certs/ca, as pilot's) under dir/ca, an SVID per
// side (dir/<side>.pem, dir/<side>-key.pem) and a CRL (dir/crl.pem).
func genMTLS(dir string) error {
	c, err := ca.Open(ca.Config{Dir: filepath.Join(dir, "ca"), TrustDomain: benchTD})
	if err != nil {
		return err
	}
	for side, sa := range benchSAs {
		id, err := spiffe.Workload(benchTD, "bench", sa)
		if err != nil {
			return err
		}
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return err
		}
		chain, err := c.SignKey(key.Public(), id, nil, nil, 24*time.Hour)
		if err != nil {
			return err
		}
		kd, err := x509.MarshalPKCS8PrivateKey(key)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, side+".pem"), ca.EncodeChain(chain), 0o600); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, side+"-key.pem"), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kd}), 0o600); err != nil {
			return err
		}
	}
	issuer, key := c.CRLSigner()
	der, err := revoke.Build(issuer, key, 1, nil, time.Now().Add(-time.Minute), 24*time.Hour)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "crl.pem"), revoke.PEM(der), 0o600)
}

// loadMTLS reads genMTLS's files for side: a manager holding the side's SVID,
// and the root and CRL PEM for the ROOTCA secret.
func loadMTLS(dir, side string, log hclog.Logger) (m *mtls.Manager, rootPEM, crlPEM []byte, err error) {
	certPEM, err := os.ReadFile(filepath.Join(dir, side+".pem"))
	if err != nil {
		return nil, nil, nil, err
	}
	keyPEM, err := os.ReadFile(filepath.Join(dir, side+"-key.pem"))
	if err != nil {
		return nil, nil, nil, err
	}
	var chain []*x509.Certificate
	for rest := certPEM; ; {
		var b *pem.Block
		if b, rest = pem.Decode(rest); b == nil {
			break
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			return nil, nil, nil, err
		}
		chain = append(chain, c)
	}
	kb, _ := pem.Decode(keyPEM)
	if kb == nil {
		return nil, nil, nil, fmt.Errorf("%s-key.pem: no PEM block", side)
	}
	k, err := x509.ParsePKCS8PrivateKey(kb.Bytes)
	if err != nil {
		return nil, nil, nil, err
	}
	key, ok := k.(*ecdsa.PrivateKey)
	if !ok {
		return nil, nil, nil, fmt.Errorf("%s-key.pem: %T, want ECDSA", side, k)
	}
	s, err := svid.New(chain, key)
	if err != nil {
		return nil, nil, nil, err
	}
	h := &svid.Holder{}
	h.Store(s)
	if m, err = mtls.New(mtls.Config{SVID: h, Logger: log}); err != nil {
		return nil, nil, nil, err
	}
	if rootPEM, err = os.ReadFile(filepath.Join(dir, "ca", ca.RootFile)); err != nil {
		return nil, nil, nil, err
	}
	if crlPEM, err = os.ReadFile(filepath.Join(dir, "crl.pem")); err != nil {
		return nil, nil, nil, err
	}
	return m, rootPEM, crlPEM, nil
}
