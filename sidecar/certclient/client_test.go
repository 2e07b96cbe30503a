package certclient

import (
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/weft-mesh/weft/certs/bundle"
	"github.com/weft-mesh/weft/certs/ca"
	"github.com/weft-mesh/weft/certs/csrrpc"
	"github.com/weft-mesh/weft/certs/spiffe"
	"github.com/weft-mesh/weft/certs/token"
	"github.com/weft-mesh/weft/sidecar/svid"
	"github.com/weft-mesh/weft/tools/testkit"
)

const td = "cluster.local"

// fakePilot is a real gRPC server on TLS with the real CA, serving the CSR
// service as pilot does: a token grants its namespace and service account, a
// client certificate its own SPIFFE ID.
type fakePilot struct {
	ca   *ca.CA
	pub  ed25519.PublicKey
	priv ed25519.PrivateKey
	addr string
	ttl  time.Duration

	mu    sync.Mutex
	calls []string // credential of each successful call, in order
	// grantAs, when not zero, is issued instead of what the credential grants.
	grantAs spiffeid.ID
	refuse  atomic.Bool
	refused atomic.Int64
}

func (p *fakePilot) Sign(ctx context.Context, req *wrapperspb.BytesValue) (*wrapperspb.BytesValue, error) {
	if p.refuse.Load() {
		p.refused.Add(1)
		return nil, status.Error(codes.Unavailable, "refusing (test)")
	}
	var id spiffeid.ID
	cred := "token"
	pr, _ := peer.FromContext(ctx)
	if ti, ok := pr.AuthInfo.(credentials.TLSInfo); ok && len(ti.State.PeerCertificates) > 0 {
		got, err := p.ca.Bundle().Verify(ti.State.PeerCertificates, time.Now())
		if err != nil {
			return nil, status.Errorf(codes.Unauthenticated, "client certificate: %v", err)
		}
		id, cred = got, "certificate"
	} else {
		tok, err := csrrpc.BearerToken(ctx)
		if err != nil || tok == "" {
			return nil, status.Errorf(codes.Unauthenticated, "no credential (%v)", err)
		}
		cl, err := token.Verify(tok, p.pub, td, time.Now())
		if err != nil {
			return nil, status.Errorf(codes.Unauthenticated, "token: %v", err)
		}
		if id, err = spiffe.Workload(cl.TrustDomain, cl.Namespace, cl.ServiceAccount); err != nil {
			return nil, status.Error(codes.InvalidArgument, err.Error())
		}
	}
	csr, err := x509.ParseCertificateRequest(req.GetValue())
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	p.mu.Lock()
	grant := p.grantAs
	p.mu.Unlock()
	if !grant.IsZero() {
		csr.URIs[0] = grant.URL()
		id = grant
	}
	chain, err := p.ca.Sign(csr, id, p.ttl)
	if err != nil && grant.IsZero() {
		return nil, status.Error(codes.PermissionDenied, err.Error())
	}
	if !grant.IsZero() { // sign for the wrong ID whatever the CSR's signature says
		k, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		chain, err = p.ca.SignKey(k.Public(), grant, nil, nil, p.ttl)
		if err != nil {
			return nil, status.Error(codes.Internal, err.Error())
		}
	}
	p.mu.Lock()
	p.calls = append(p.calls, cred)
	p.mu.Unlock()
	return wrapperspb.Bytes(ca.EncodeChain(chain)), nil
}

func (p *fakePilot) Calls() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.calls...)
}

// startPilot serves the CSR service on 127.0.0.1 with a serving certificate
// for servingID from c (pilot's own ID unless a test says otherwise).
func startPilot(t *testing.T, c *ca.CA, servingID spiffeid.ID, ttl time.Duration) *fakePilot {
	t.Helper()
	pub, priv, _ := ed25519.GenerateKey(rand.Reader)
	p := &fakePilot{ca: c, pub: pub, priv: priv, ttl: ttl}
	k, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	chain, err := c.SignKey(k.Public(), servingID, nil, []net.IP{net.IPv4(127, 0, 0, 1)}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	cert := tls.Certificate{PrivateKey: k, Leaf: chain[0]}
	for _, x := range chain {
		cert.Certificate = append(cert.Certificate, x.Raw)
	}
	srv := grpc.NewServer(grpc.Creds(credentials.NewTLS(&tls.Config{MinVersion: tls.VersionTLS13,
		Certificates: []tls.Certificate{cert}, ClientAuth: tls.RequestClientCert})))
	srv.RegisterService(&csrrpc.ServiceDesc, p)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p.addr = ln.Addr().String()
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Stop(); <-done })
	return p
}

func newCA(t *testing.T) *ca.CA {
	t.Helper()
	c, err := ca.Open(ca.Config{Dir: t.TempDir(), TrustDomain: td})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func pilotID(t *testing.T) spiffeid.ID {
	id, err := spiffe.Pilot(td)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func tokenFile(t *testing.T, p *fakePilot, ns, sa string) string {
	t.Helper()
	tok, err := token.Issue(p.priv, token.Claims{TrustDomain: td, Namespace: ns, ServiceAccount: sa,
		IssuedAt: time.Now(), Expiry: time.Now().Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(f, []byte(tok+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

func newClient(t *testing.T, p *fakePilot, roots *bundle.Bundle, tokFile string, mut func(*Config)) (*Client, *svid.Holder) {
	t.Helper()
	h := &svid.Holder{}
	cfg := Config{Holder: h, TrustDomain: td, Namespace: "shop", ServiceAccount: "reviews", TokenFile: tokFile,
		Trust: func() (*bundle.Bundle, error) { return roots, nil }, Servers: []string{p.addr},
		Logger: hclog.NewNullLogger(), CallTimeout: 5 * time.Second}
	if mut != nil {
		mut(&cfg)
	}
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c, h
}

func TestFirstCSRAndRenewal(t *testing.T) {
	c := newCA(t)
	p := startPilot(t, c, pilotID(t), 6*time.Second)
	cl, h := newClient(t, p, c.Bundle(), tokenFile(t, p, "shop", "reviews"), nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	ch := h.Changed()
	go func() { done <- cl.Run(ctx) }()
	defer func() { cancel(); <-done }()

	testkit.Wait(t, 10*time.Second, func() error {
		select {
		case <-ch:
			return nil
		default:
			return errors.New("no certificate yet")
		}
	})
	first, firstAt := h.Load(), time.Now()
	if first.ID.String() != "spiffe://cluster.local/ns/shop/sa/reviews" {
		t.Fatalf("ID %s", first.ID)
	}
	if _, ok := first.Cert.PrivateKey.(*ecdsa.PrivateKey); !ok || first.Cert.Leaf.PublicKeyAlgorithm != x509.ECDSA {
		t.Fatalf("key %T", first.Cert.PrivateKey)
	}
	if _, err := c.Bundle().Verify(chainOf(first), time.Now()); err != nil {
		t.Fatal(err)
	}
	// Renewal at 50-60% of 3s, authenticated by the certificate, with a new key.
	testkit.Wait(t, 10*time.Second, func() error {
		if s := h.Load(); s == first {
			return errors.New("not renewed yet")
		}
		return nil
	})
	second, gap := h.Load(), time.Since(firstAt)
	if second.Cert.Leaf.SerialNumber.Cmp(first.Cert.Leaf.SerialNumber) == 0 {
		t.Fatal("same serial")
	}
	if second.Cert.PrivateKey.(*ecdsa.PrivateKey).Equal(first.Cert.PrivateKey) {
		t.Fatal("renewal reused the key")
	}
	if got := p.Calls(); len(got) < 2 || got[0] != "token" || got[1] != "certificate" {
		t.Fatalf("credentials %v, want token then certificate", got)
	}
	// Renewal came at 50-60% of the usable lifetime (6s, less NotAfter's
	// truncation to whole seconds), seen within a poll interval.
	usable := first.NotAfter.Sub(firstAt)
	lo, hi := time.Duration(float64(usable)*RenewFraction)-100*time.Millisecond,
		time.Duration(float64(usable)*(RenewFraction+JitterFraction))+100*time.Millisecond
	t.Logf("renewed %v after the first certificate was seen (usable %v: want %v..%v)", gap, usable, lo, hi)
	if gap < lo || gap > hi {
		t.Fatalf("renewed %v after the first, want %v..%v", gap, lo, hi)
	}
}

func chainOf(s *svid.SVID) []*x509.Certificate {
	out := []*x509.Certificate{}
	for _, der := range s.Cert.Certificate {
		c, _ := x509.ParseCertificate(der)
		out = append(out, c)
	}
	return out
}

func TestAttemptRefusals(t *testing.T) {
	c := newCA(t)
	other := newCA(t)
	good := startPilot(t, c, pilotID(t), time.Hour)
	pubID, _ := spiffe.Publisher(td)
	impostor := startPilot(t, c, pubID, time.Hour)
	foreign := startPilot(t, other, pilotID(t), time.Hour)
	wrongGrant := startPilot(t, c, pilotID(t), time.Hour)
	wrongGrant.grantAs, _ = spiffe.Workload(td, "shop", "ratings")
	tok := tokenFile(t, good, "shop", "reviews")
	big := filepath.Join(t.TempDir(), "big")
	os.WriteFile(big, []byte(strings.Repeat("a", token.MaxBytes+1)), 0o600)
	atMax := filepath.Join(t.TempDir(), "max")
	os.WriteFile(atMax, []byte(strings.Repeat("a", token.MaxBytes)), 0o600)
	for _, tc := range []struct {
		name    string
		p       *fakePilot
		tokFile string
		want    string
	}{
		{"pilot with another SPIFFE ID", impostor, tok, "is spiffe://cluster.local/weft/publisher, want spiffe://cluster.local/weft/pilot"},
		{"pilot from another CA", foreign, tok, "verifying pilot (want spiffe://cluster.local/weft/pilot, serial "},
		{"issued for another ID", wrongGrant, tokenFile(t, wrongGrant, "shop", "reviews"), "is for spiffe://cluster.local/ns/shop/sa/ratings, asked for spiffe://cluster.local/ns/shop/sa/reviews"},
		{"token from another issuer", foreign, tokenFile(t, foreign, "shop", "reviews"), "verifying pilot"},
		{"token of another workload", good, tokenFile(t, good, "shop", "ratings"), "the credential grants spiffe://cluster.local/ns/shop/sa/ratings"},
		{"token file missing", good, "/nonexistent/token", "token-file: open /nonexistent/token"},
		{"token file one past MaxBytes", good, big, "more than 4096 bytes"},
		{"token file at MaxBytes reaches pilot", good, atMax, "Unauthenticated"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cl, h := newClient(t, tc.p, c.Bundle(), tc.tokFile, nil)
			_, err := cl.Attempt(context.Background(), Token)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to contain %q", err, tc.want)
			}
			if h.Load() != nil {
				t.Fatal("stored after a refusal")
			}
		})
	}
}

// Pilot away: the first CSR retries with backoff and succeeds once it answers.
func TestRetryUntilPilotAnswers(t *testing.T) {
	c := newCA(t)
	p := startPilot(t, c, pilotID(t), time.Hour)
	p.refuse.Store(true)
	cl, h := newClient(t, p, c.Bundle(), tokenFile(t, p, "shop", "reviews"), nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- cl.Run(ctx) }()
	defer func() { cancel(); <-done }()
	testkit.Wait(t, 10*time.Second, func() error {
		if p.refused.Load() < 2 {
			return errors.New("fewer than two refusals")
		}
		return nil
	})
	p.refuse.Store(false)
	testkit.Wait(t, 10*time.Second, func() error {
		if h.Load() == nil {
			return errors.New("no certificate")
		}
		return nil
	})
}

// A renewal presents the certificate (pilot sees a client certificate); past
// NotAfter the schedule picks the token again.
func TestRenewalPresentsCertificate(t *testing.T) {
	c := newCA(t)
	p := startPilot(t, c, pilotID(t), time.Hour)
	cl, h := newClient(t, p, c.Bundle(), tokenFile(t, p, "shop", "reviews"), nil)
	s, err := cl.Attempt(context.Background(), Token)
	if err != nil {
		t.Fatal(err)
	}
	h.Store(s)
	if got := CredentialFor(h.Load(), s.NotAfter.Add(time.Second), DefaultCallTimeout); got != Token {
		t.Fatalf("credential after NotAfter = %v", got)
	}
	if _, err := cl.Attempt(context.Background(), Certificate); err != nil {
		t.Fatal(err)
	}
	if got := p.Calls(); len(got) != 2 || got[1] != "certificate" {
		t.Fatalf("calls %v", got)
	}
}

func TestNewRefuses(t *testing.T) {
	h := &svid.Holder{}
	ok := Config{Holder: h, TrustDomain: td, Namespace: "shop", ServiceAccount: "reviews", TokenFile: "t",
		Trust: func() (*bundle.Bundle, error) { return nil, nil }, Servers: []string{"x:1"}, Logger: hclog.NewNullLogger()}
	for _, tc := range []struct {
		name string
		mut  func(*Config)
		want string
	}{
		{"no holder", func(c *Config) { c.Holder = nil }, "holder: required"},
		{"no token file", func(c *Config) { c.TokenFile = "" }, "token file: required"},
		{"no trust", func(c *Config) { c.Trust = nil }, "trust: required"},
		{"no servers", func(c *Config) { c.Servers = nil }, "servers: at least one required"},
		{"no logger", func(c *Config) { c.Logger = nil }, "logger: required"},
		{"call timeout one past the bound", func(c *Config) { c.CallTimeout = MaxCallTimeout + 1 }, "call timeout"},
		{"bad namespace", func(c *Config) { c.Namespace = "Shop" }, "workload SPIFFE ID"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := ok
			tc.mut(&c)
			if _, err := New(c); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
		})
	}
	c := ok
	c.CallTimeout = MaxCallTimeout // at the bound
	if _, err := New(c); err != nil {
		t.Fatal(err)
	}
}
