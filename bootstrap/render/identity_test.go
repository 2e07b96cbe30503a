package render

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io/fs"
	"math/big"
	"strings"
	"testing"
	"time"

	"github.com/weft-mesh/weft/certs/token"
)

func rootPEM(t *testing.T) string {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test root"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, k.Public(), k)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
}

func TestParseIdentity(t *testing.T) {
	root := rootPEM(t)
	id := map[string]string{
		"tok":       "eyJhbGciOiJFZERTQSJ9.x.y\n",
		"tok-max":   strings.Repeat("a", token.MaxBytes),
		"tok-over":  strings.Repeat("a", token.MaxBytes+1),
		"tok-empty": " \n",
		"root.pem":  root,
		"junk.pem":  "not pem",
		"max.pem":   root + strings.Repeat("\n", MaxCARootBytes-len(root)),
		"big.pem":   root + strings.Repeat("\n", MaxCARootBytes+1-len(root)),
		"boot.yaml": "token-file: tok\nca-root: root.pem\ntrust-domain: example.org\n",
	}
	read := func(name string) ([]byte, error) {
		if s, ok := id[name]; ok {
			return []byte(s), nil
		}
		if s, ok := files[name]; ok {
			return []byte(s), nil
		}
		return nil, fmt.Errorf("open %s: %w", name, fs.ErrNotExist)
	}
	ident := func(tok, root, td string) *Settings {
		return want(func(s *Settings) { s.TokenFile, s.CARoot, s.TrustDomain = tok, root, td })
	}
	for _, tc := range []struct {
		name string
		args []string
		want *Settings
		err  string
	}{
		{"no identity: default trust domain", base, ident("", "", "cluster.local"), ""},
		{"identity", with("--token-file", "tok", "--ca-root", "root.pem"), ident("tok", "root.pem", "cluster.local"), ""},
		{"trust domain", with("--token-file", "tok", "--ca-root", "root.pem", "--trust-domain", "prod.example.com"),
			ident("tok", "root.pem", "prod.example.com"), ""},
		{"bootstrap file keys", []string{"--bootstrap", "boot.yaml", "--node-id", "reviews-v1-a", "--namespace", "shop",
			"--service-account", "reviews", "--labels", "app=reviews,version=v1", "--address", "127.0.0.21",
			"--pilot", "127.0.0.1:15010,pilot.weft:15010", "--publisher-key", "/keys/publisher.pub", "--state-dir", "/state/a"},
			ident("tok", "root.pem", "example.org"), ""},
		{"flag overrides file", []string{"--bootstrap", "boot.yaml", "--node-id", "reviews-v1-a", "--namespace", "shop",
			"--service-account", "reviews", "--labels", "app=reviews,version=v1", "--address", "127.0.0.21",
			"--pilot", "127.0.0.1:15010,pilot.weft:15010", "--publisher-key", "/keys/publisher.pub", "--state-dir", "/state/a",
			"--trust-domain", "cluster.local", "--token-file", "tok-max"},
			ident("tok-max", "root.pem", "cluster.local"), ""},
		{"token at MaxBytes", with("--token-file", "tok-max", "--ca-root", "root.pem"), ident("tok-max", "root.pem", "cluster.local"), ""},
		{"token one past MaxBytes", with("--token-file", "tok-over", "--ca-root", "root.pem"), nil,
			fmt.Sprintf("sidecar settings: token-file tok-over: %d bytes, limit %d", token.MaxBytes+1, token.MaxBytes)},
		{"token empty", with("--token-file", "tok-empty", "--ca-root", "root.pem"), nil, "sidecar settings: token-file tok-empty: empty"},
		{"token missing", with("--token-file", "nope", "--ca-root", "root.pem"), nil,
			"sidecar settings: token-file: open nope: file does not exist"},
		{"key in memory only", with("--token-file", "tok", "--ca-root", "root.pem", "--certificate-in-memory-only"),
			func() *Settings {
				s := ident("tok", "root.pem", "cluster.local")
				s.CertificateInMemoryOnly = true
				return s
			}(), ""},
		{"key in memory only without a token", with("--certificate-in-memory-only"), nil,
			"sidecar settings: certificate-in-memory-only: only with token-file (without it the sidecar has no workload certificate)"},
		{"token without ca-root", with("--token-file", "tok"), nil, "sidecar settings: ca-root: required with token-file (it verifies pilot)"},
		{"ca-root without token (manifest trust only)", with("--ca-root", "root.pem"), ident("", "root.pem", "cluster.local"), ""},
		{"ca-root without token is still checked", with("--ca-root", "junk.pem"), nil, "sidecar settings: ca-root junk.pem: "},
		{"ca-root missing", with("--token-file", "tok", "--ca-root", "nope.pem"), nil, "sidecar settings: ca-root: open nope.pem: file does not exist"},
		{"ca-root not a bundle", with("--token-file", "tok", "--ca-root", "junk.pem"), nil, "sidecar settings: ca-root junk.pem: "},
		{"ca-root at the limit", with("--token-file", "tok", "--ca-root", "max.pem"), ident("tok", "max.pem", "cluster.local"), ""},
		{"ca-root one past the limit", with("--token-file", "tok", "--ca-root", "big.pem"), nil,
			fmt.Sprintf("sidecar settings: ca-root big.pem: %d bytes, limit %d", MaxCARootBytes+1, MaxCARootBytes)},
		{"trust domain uppercase", with("--trust-domain", "Cluster.local"), nil,
			`sidecar settings: trust-domain: "Cluster.local" is not a SPIFFE trust domain (lowercase letters, digits, '.', '-', '_')`},
		{"trust domain as URI", with("--trust-domain", "spiffe://cluster.local"), nil,
			`sidecar settings: trust-domain: "spiffe://cluster.local" is not a SPIFFE trust domain`},
		{"trust domain with a path", with("--trust-domain", "a/b"), nil, `sidecar settings: trust-domain: "a/b" is not`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Parse(tc.args, read)
			if tc.err != "" {
				if err == nil || !strings.HasPrefix(err.Error(), tc.err) {
					t.Fatalf("err = %v, want prefix %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.TokenFile != tc.want.TokenFile || got.CARoot != tc.want.CARoot || got.TrustDomain != tc.want.TrustDomain ||
				got.Identity() != (tc.want.TokenFile != "") {
				t.Fatalf("got token %q root %q td %q, want %q %q %q", got.TokenFile, got.CARoot, got.TrustDomain,
					tc.want.TokenFile, tc.want.CARoot, tc.want.TrustDomain)
			}
		})
	}
}
