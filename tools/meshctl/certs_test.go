package meshctl_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/credentials"

	"github.com/weft-mesh/weft/certs/bundle"
	"github.com/weft-mesh/weft/pilot/ca"
	"github.com/weft-mesh/weft/pilot/server"
	"github.com/weft-mesh/weft/pilot/server/servertest"
	"github.com/weft-mesh/weft/tools/testkit/proc"
)

// startCAPilot is pilot with its mesh CA, as pilot/cmd/pilot runs it.
func startCAPilot(t *testing.T) *servertest.Pilot {
	t.Helper()
	return servertest.Start(t, servertest.Options{Secure: true, CA: func(_ context.Context, env server.AuthorityEnv) (server.Authority, error) {
		return ca.New(ca.ServiceConfig{DataDir: env.DataDir, TrustDomain: env.TrustDomain, ServingIPs: []net.IP{net.IPv4(127, 0, 0, 1)}, Logger: env.Logger})
	}})
}

// enroll is a sidecar's first CSR with tok over pilot's TLS listener,
// trusting pilot through the root.pem pilot wrote.
func enroll(t *testing.T, p *servertest.Pilot, tok, id string) *x509.Certificate {
	t.Helper()
	pemBytes, err := os.ReadFile(filepath.Join(p.DataDir, "ca", "root.pem"))
	if err != nil {
		t.Fatal(err)
	}
	roots, err := bundle.Parse(pemBytes)
	if err != nil {
		t.Fatal(err)
	}
	chain, _ := proc.Enroll(t, p.XDSTLSAddr, credentials.NewTLS(&tls.Config{RootCAs: roots.Pool(), ServerName: "127.0.0.1", MinVersion: tls.VersionTLS13}), tok, id, 10*time.Second)
	return chain[0]
}

func TestTokenCertRevokeRotate(t *testing.T) {
	p := startCAPilot(t)
	const id = "spiffe://cluster.local/ns/shop/sa/reviews"

	code, tok, stderr := runX(t, p, "token", "create", "--namespace", "shop", "--service-account", "reviews", "--ttl", "10m")
	if code != 0 || !strings.Contains(stderr, "for "+id+", expires ") {
		t.Fatalf("token create: exit %d stdout %q stderr %q", code, tok, stderr)
	}
	leaf := enroll(t, p, strings.TrimSpace(tok), id)
	serial := leaf.SerialNumber.Text(16)

	code, out, stderr := runX(t, p, "cert", "list")
	if code != 0 {
		t.Fatalf("cert list: exit %d %s", code, stderr)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if !regexp.MustCompile(`^SERIAL +SPIFFE-ID +NOT-AFTER +STATE$`).MatchString(lines[0]) || len(lines) != 4 {
		t.Fatalf("cert list:\n%s", out)
	}
	row := regexp.MustCompile(`(?m)^` + serial + ` +` + regexp.QuoteMeta(id) + ` +` + leaf.NotAfter.UTC().Format(time.RFC3339) + ` +VALID$`)
	if !row.MatchString(out) {
		t.Fatalf("cert list lacks the issued certificate %s:\n%s", serial, out)
	}
	for _, who := range []string{"spiffe://cluster.local/weft/pilot", "spiffe://cluster.local/weft/publisher"} {
		if !strings.Contains(out, who) {
			t.Errorf("cert list lacks pilot's own %s", who)
		}
	}

	code, out, stderr = runX(t, p, "cert", "revoke", "--serial", serial, "--reason", "keyCompromise")
	if code != 0 || strings.TrimSpace(out) != serial || !strings.Contains(stderr, "1 certificate(s) revoked; published in CRL number") {
		t.Fatalf("cert revoke: exit %d stdout %q stderr %q", code, out, stderr)
	}
	if _, out, _ = runX(t, p, "cert", "list"); !regexp.MustCompile(`(?m)^` + serial + ` .* REVOKED$`).MatchString(out) {
		t.Fatalf("after revoke:\n%s", out)
	}
	if code, _, stderr = runX(t, p, "cert", "revoke", "--spiffe-id", id); code != 0 || !strings.Contains(stderr, "0 certificate(s) revoked") {
		t.Fatalf("revoke by ID (its one certificate already revoked): exit %d %s", code, stderr)
	}

	for _, tc := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"token", "create", "--namespace", "shop"}, 2, "usage: meshctl token create"},
		{[]string{"token", "create", "--namespace", "shop", "--service-account", "r", "--ttl", "168h0m1s"}, 1, "--ttl 168h0m1s: want more than 0 and at most 168h0m0s"},
		{[]string{"token", "create", "--namespace", "shop", "--service-account", "r", "--ttl", "0s"}, 1, "--ttl 0s"},
		{[]string{"token", "create", "--namespace", "Shop", "--service-account", "r"}, 1, "pilot answered 400: namespace: \"Shop\" is not a DNS-1123 label"},
		{[]string{"token", "frob"}, 2, "usage: meshctl token create"},
		{[]string{"cert", "revoke"}, 2, "usage: meshctl cert revoke --serial S | --spiffe-id ID"},
		{[]string{"cert", "revoke", "--serial", "ab", "--spiffe-id", id}, 2, "usage: meshctl cert revoke"},
		{[]string{"cert", "revoke", "--serial", "zz"}, 1, "serial \"zz\": not a positive hexadecimal serial"},
		{[]string{"cert", "revoke", "--serial", "ab", "--reason", "bored"}, 1, "reason \"bored\": want one of"},
		{[]string{"cert", "frob"}, 2, "usage: meshctl cert list"},
		{[]string{"ca", "rotate", "finish"}, 2, "pilot answered 409: finish rotation: ca: finish rotation: no rotation in progress"},
		{[]string{"ca", "rotate"}, 2, "usage: meshctl ca rotate"},
	} {
		code, _, stderr := runX(t, p, tc.args...)
		if code != tc.code || !strings.Contains(stderr, tc.msg) {
			t.Errorf("meshctl %q: exit %d stderr %q, want %d %q", tc.args, code, stderr, tc.code, tc.msg)
		}
	}
	if code, tok, _ := runX(t, p, "token", "create", "--namespace", "shop", "--service-account", "r", "--ttl", "168h"); code != 0 || tok == "" {
		t.Fatalf("token at MaxTTL: exit %d", code)
	}

	// Rotation: a live certificate from the old root blocks finish; --force drops it.
	code, tok, _ = runX(t, p, "token", "create", "--namespace", "shop", "--service-account", "ratings")
	if code != 0 {
		t.Fatal("token")
	}
	enroll(t, p, strings.TrimSpace(tok), "spiffe://cluster.local/ns/shop/sa/ratings")
	if code, out, _ = runX(t, p, "ca", "rotate", "start"); code != 0 || !strings.Contains(out, "rotating: new root") || !strings.Contains(out, "(1 unexpired certificates from it)") {
		t.Fatalf("rotate start: exit %d %q", code, out)
	}
	if code, out, _ = runX(t, p, "ca", "rotate", "status"); code != 0 || !strings.Contains(out, "rotating") {
		t.Fatalf("rotate status: exit %d %q", code, out)
	}
	root, _ := os.ReadFile(filepath.Join(p.DataDir, "ca", "root.pem"))
	if b, err := bundle.Parse(root); err != nil || len(b.Roots()) != 2 {
		t.Fatalf("root.pem during rotation: %v", err)
	}
	if code, _, stderr = runX(t, p, "ca", "rotate", "finish"); code != 2 || !strings.Contains(stderr, "1 unexpired certificates from the old root") {
		t.Fatalf("finish with a live old certificate: exit %d %q", code, stderr)
	}
	if code, out, _ = runX(t, p, "ca", "rotate", "finish", "--force"); code != 0 || !strings.Contains(out, "not rotating: root") {
		t.Fatalf("finish --force: exit %d %q", code, out)
	}
}

func TestCertHelp(t *testing.T) {
	for args, want := range map[string]string{
		"token create --help": "usage: meshctl token create --namespace NS --service-account SA [--ttl D]\n",
		"token --help":        "usage: meshctl token create --namespace NS --service-account SA [--ttl D]\n",
		"help token":          "usage: meshctl token create --namespace NS --service-account SA [--ttl D]\n",
		"cert list --help":    "usage: meshctl cert list [-o json]\n",
		"cert revoke --help":  "usage: meshctl cert revoke --serial S | --spiffe-id ID [--reason R]\n",
		"help cert":           "usage: meshctl cert list [-o json]\n",
		"ca rotate --help":    "usage: meshctl ca rotate start|finish [--force] | ca rotate status\n",
		"help ca":             "usage: meshctl ca rotate start|finish [--force] | ca rotate status\n",
	} {
		r := run(append([]string{"--pilot", "http://127.0.0.1:1"}, strings.Fields(args)...)...)
		if r.code != 0 || !strings.HasPrefix(r.stdout, want) {
			t.Errorf("meshctl %s: exit %d stdout %q", args, r.code, r.stdout)
		}
	}
	r := run("--help")
	for _, want := range []string{"token create --namespace NS", "cert list [-o json]", "cert revoke --serial S", "ca rotate start|finish"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("usage lacks %q", want)
		}
	}
	if r := run("cert", "revoke", "--help"); !strings.Contains(r.stdout, "  -spiffe-id ") || !strings.Contains(r.stdout, "  -reason ") {
		t.Errorf("cert revoke --help lacks its flags:\n%s", r.stdout)
	}
}
