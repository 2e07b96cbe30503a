package ca

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	"github.com/weft-mesh/weft/certs/bundle"
	certca "github.com/weft-mesh/weft/certs/ca"
	"github.com/weft-mesh/weft/certs/csrrpc"
	"github.com/weft-mesh/weft/certs/revoke"
	"github.com/weft-mesh/weft/certs/token"
	"github.com/weft-mesh/weft/pilot/resource"
	"github.com/weft-mesh/weft/tools/testkit"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// clock is a settable time source.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func newService(t testing.TB, dir string, mod func(*ServiceConfig)) *Service {
	t.Helper()
	cfg := ServiceConfig{DataDir: dir, ServingIPs: []net.IP{net.IPv4(127, 0, 0, 1)}, Logger: hclog.NewNullLogger()}
	if mod != nil {
		mod(&cfg)
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// serveTLS serves s's CSR service on a real TLS listener that asks for (but
// does not itself verify) client certificates, so the service's own check is
// what is tested.
func serveTLS(t testing.TB, s *Service) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer(grpc.Creds(credentials.NewTLS(&tls.Config{GetCertificate: s.ServingCert, ClientAuth: tls.RequestClientCert, MinVersion: tls.VersionTLS13})))
	s.Register(g)
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(g.Stop)
	return lis.Addr().String()
}

// workload is a sidecar's side: its key, and a connection to pilot that
// verifies pilot's certificate against root.pem and its SPIFFE ID.
type workload struct {
	key *ecdsa.PrivateKey
}

func newWorkload(t testing.TB) *workload {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return &workload{key: k}
}

func (w *workload) csr(t testing.TB, id string) []byte {
	u, _ := url.Parse(id)
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{URIs: []*url.URL{u}}, w.key)
	if err != nil {
		t.Fatal(err)
	}
	return der
}

func dial(t testing.TB, s *Service, addr string, client []*x509.Certificate, key any) *grpc.ClientConn {
	t.Helper()
	cfg := &tls.Config{RootCAs: s.Bundle().Pool(), ServerName: "127.0.0.1", MinVersion: tls.VersionTLS13}
	if client != nil {
		c := tls.Certificate{PrivateKey: key, Leaf: client[0]}
		for _, x := range client {
			c.Certificate = append(c.Certificate, x.Raw)
		}
		cfg.Certificates = []tls.Certificate{c}
	}
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return c
}

const reviews = "spiffe://cluster.local/ns/shop/sa/reviews"

func TestEnrollRenewAndRefusals(t *testing.T) {
	clk := &clock{t: time.Now().Truncate(time.Second)}
	ttl := 24 * time.Hour
	s := newService(t, t.TempDir(), func(c *ServiceConfig) { c.Now = clk.Now; c.CertTTL = func() time.Duration { return ttl } })
	addr := serveTLS(t, s)
	w := newWorkload(t)
	tok, _, err := s.IssueToken("shop", "reviews", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	anon := dial(t, s, addr, nil, nil)

	// First CSR with the token.
	chain, err := csrrpc.Sign(ctx(t), anon, w.csr(t, reviews), tok)
	if err != nil {
		t.Fatal(err)
	}
	if id, err := s.Bundle().Verify(chain, clk.Now()); err != nil || id.String() != reviews {
		t.Fatalf("issued %v %v", id, err)
	}
	if got := chain[0].NotAfter.Sub(clk.Now()); got != ttl {
		t.Fatalf("TTL %v, want CertTTL %v", got, ttl)
	}
	// CertTTL is read per issuance.
	ttl = 2 * time.Hour
	mtls := dial(t, s, addr, chain, w.key)
	renewed, err := csrrpc.Sign(ctx(t), mtls, w.csr(t, reviews), "")
	if err != nil {
		t.Fatalf("renewal by certificate: %v", err)
	}
	if renewed[0].NotAfter.Sub(clk.Now()) != 2*time.Hour || renewed[0].SerialNumber.Cmp(chain[0].SerialNumber) == 0 {
		t.Fatal("renewal did not issue a new 2h certificate")
	}

	other := newService(t, t.TempDir(), nil)
	otherTok, _, _ := other.IssueToken("shop", "reviews", time.Hour)
	otherChain, err := other.CA().Sign(mustCSR(t, w.csr(t, reviews)), spiffeid.RequireFromString(reviews), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	foreign := dial(t, s, addr, otherChain, w.key)
	expiring, _, _ := s.IssueToken("shop", "reviews", time.Minute)
	pilotCert, _ := s.ServingCert(nil)
	asPilot := dial(t, s, addr, []*x509.Certificate{pilotCert.Leaf}, pilotCert.PrivateKey)

	for _, tc := range []struct {
		name string
		cc   *grpc.ClientConn
		csr  []byte
		tok  string
		code codes.Code
		msg  string
		at   time.Duration // clock offset
	}{
		{"token for another ID", anon, w.csr(t, "spiffe://cluster.local/ns/shop/sa/admin"), tok, codes.PermissionDenied,
			"CSR asks for SPIFFE ID spiffe://cluster.local/ns/shop/sa/admin, the credential grants spiffe://cluster.local/ns/shop/sa/reviews", 0},
		{"certificate for another ID", mtls, w.csr(t, "spiffe://cluster.local/ns/shop/sa/admin"), "", codes.PermissionDenied,
			"CSR asks for SPIFFE ID spiffe://cluster.local/ns/shop/sa/admin, the credential grants spiffe://cluster.local/ns/shop/sa/reviews", 0},
		{"no credential", anon, w.csr(t, reviews), "", codes.Unauthenticated, "no bootstrap token and no TLS client certificate", 0},
		{"token of another CA", anon, w.csr(t, reviews), otherTok, codes.Unauthenticated, "bootstrap token from", 0},
		{"expired token", anon, w.csr(t, reviews), expiring, codes.Unauthenticated, "token is expired", time.Minute + token.Leeway + time.Second},
		{"client certificate of another CA", foreign, w.csr(t, reviews), "", codes.Unauthenticated, "certificate signed by unknown authority", 0},
		{"expired client certificate", mtls, w.csr(t, reviews), "", codes.Unauthenticated, "expired or is not yet valid", 25 * time.Hour},
		{"CSR over MaxCSRBytes", anon, make([]byte, csrrpc.MaxCSRBytes), tok, codes.InvalidArgument, "csr:", 0},
		{"CSR with DNS SANs", anon, dnsCSR(t, w), tok, codes.PermissionDenied, "CSR has DNS SANs", 0},
		{"CSR on P-384", anon, p384CSR(t), tok, codes.InvalidArgument, "key is *ecdsa.PublicKey, want ECDSA P-256", 0},
		{"CSR with a bad signature", anon, tamper(w.csr(t, reviews)), tok, codes.InvalidArgument, "csr", 0},
		{"pilot's own certificate renewing as a workload", asPilot, w.csr(t, reviews), "", codes.PermissionDenied, "spiffe://cluster.local/weft/pilot: not a workload ID", 0},
		{"bad authorization", anon, w.csr(t, reviews), " ", codes.Unauthenticated, "not \"Bearer <token>\"", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk.Add(tc.at)
			defer clk.Add(-tc.at)
			_, err := csrrpc.Sign(ctx(t), tc.cc, tc.csr, tc.tok)
			if status.Code(err) != tc.code || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("err = %v, want %v %q", err, tc.code, tc.msg)
			}
		})
	}

	// Revoked certificate: refused renewal.
	if _, _, err := s.Revoke(serialKey(chain[0].SerialNumber), "", "keyCompromise"); err != nil {
		t.Fatal(err)
	}
	if _, err := csrrpc.Sign(ctx(t), mtls, w.csr(t, reviews), ""); status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "serial "+serialKey(chain[0].SerialNumber)+" (spiffe://cluster.local/ns/shop/sa/reviews) is revoked") {
		t.Fatalf("revoked renewal: %v", err)
	}
	// Revoked ID: the renewed certificate is revoked too, the old token refused, a new token works.
	clk.Add(time.Second)
	revs, _, err := s.Revoke("", reviews, "")
	if err != nil || len(revs) != 1 || revs[0].Serial.Cmp(renewed[0].SerialNumber) != 0 {
		t.Fatalf("revoke ID: %v %v", revs, err)
	}
	if !s.CRL().Revoked(renewed[0].SerialNumber) || !s.CRL().Revoked(chain[0].SerialNumber) {
		t.Fatal("the CRL does not list the revoked serials")
	}
	if _, err := csrrpc.Sign(ctx(t), anon, w.csr(t, reviews), tok); status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "before spiffe://cluster.local/ns/shop/sa/reviews was revoked") {
		t.Fatalf("token older than the ID revocation: %v", err)
	}
	clk.Add(time.Second)
	fresh, _, _ := s.IssueToken("shop", "reviews", time.Hour)
	if _, err := csrrpc.Sign(ctx(t), anon, w.csr(t, reviews), fresh); err != nil {
		t.Fatalf("a token issued after the revocation: %v", err)
	}
}

func mustCSR(t testing.TB, der []byte) *x509.CertificateRequest {
	c, err := x509.ParseCertificateRequest(der)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func dnsCSR(t testing.TB, w *workload) []byte {
	u, _ := url.Parse(reviews)
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{URIs: []*url.URL{u}, DNSNames: []string{"reviews"}}, w.key)
	if err != nil {
		t.Fatal(err)
	}
	return der
}

func TestMaxTTLMatchesMeshConfigBound(t *testing.T) {
	if certca.MaxTTL != resource.MaxCertificateTTL {
		t.Fatalf("certs/ca.MaxTTL %v != resource.MaxCertificateTTL %v: an accepted certificateTTL would be refused at issuance", certca.MaxTTL, resource.MaxCertificateTTL)
	}
}

func TestRegistryBound(t *testing.T) {
	clk := &clock{t: time.Now().Truncate(time.Second)}
	// pilot's serving and publisher certificates take two entries.
	s := newService(t, t.TempDir(), func(c *ServiceConfig) {
		c.Now, c.MaxIssued, c.CertTTL = clk.Now, 4, func() time.Duration { return time.Hour }
	})
	addr := serveTLS(t, s)
	cc := dial(t, s, addr, nil, nil)
	w := newWorkload(t)
	tok, _, _ := s.IssueToken("shop", "reviews", 3*time.Hour)
	for i := range 2 {
		if _, err := csrrpc.Sign(ctx(t), cc, w.csr(t, reviews), tok); err != nil {
			t.Fatalf("certificate %d of the bound: %v", i+3, err)
		}
	}
	_, err := csrrpc.Sign(ctx(t), cc, w.csr(t, reviews), tok)
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "issued registry full: 4 unexpired certificates (--max-issued 4)") {
		t.Fatalf("one past the bound: %v", err)
	}
	// Once they expire, the oldest expired make room.
	clk.Add(time.Hour + time.Second)
	if _, err := csrrpc.Sign(ctx(t), cc, w.csr(t, reviews), tok); err != nil {
		t.Fatalf("after expiry: %v", err)
	}
	if n := len(s.Certificates()); n != 1 {
		t.Fatalf("%d entries after dropping expired ones, want 1", n)
	}
}

func TestPersistenceAcrossRestart(t *testing.T) {
	dir := t.TempDir()
	s := newService(t, dir, nil)
	c, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(c) }()
	w := newWorkload(t)
	chain, err := s.issue(func() ([]*x509.Certificate, error) {
		return s.CA().Sign(mustCSR(t, w.csr(t, reviews)), spiffeid.RequireFromString(reviews), time.Hour)
	}, "test", false)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Revoke(serialKey(chain[0].SerialNumber), "", "superseded"); err != nil {
		t.Fatal(err)
	}
	number := s.CRL().Number()
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	r := newService(t, dir, nil)
	if !r.CRL().Revoked(chain[0].SerialNumber) || r.CRL().Number() <= number {
		t.Fatalf("after restart: revoked %v, CRL number %d (was %d)", r.CRL().Revoked(chain[0].SerialNumber), r.CRL().Number(), number)
	}
	found := false
	for _, c := range r.Certificates() {
		if c.Serial == serialKey(chain[0].SerialNumber) {
			found = c.State == StateRevoked && c.SPIFFEID == reviews && c.Node == "test"
		}
	}
	if !found {
		t.Fatalf("issued registry lost the certificate across a restart: %+v", r.Certificates())
	}
	if !r.Bundle().Equal(s.Bundle()) || r.TokenPublicKey().Equal(s.TokenPublicKey()) == false {
		t.Fatal("root or token key changed across a restart")
	}
	pub1, _ := s.Publisher()
	pub2, _ := r.Publisher()
	if !pub1.Equal(pub2) {
		t.Fatal("publisher key changed across a restart")
	}
	for _, f := range []string{TokenKeyFile, RevocationsFile, IssuedFile, certca.RootKeyFile} {
		st, err := os.Stat(filepath.Join(dir, "ca", f))
		if err != nil || st.Mode().Perm() != 0o600 {
			t.Errorf("%s: %v %v", f, st.Mode(), err)
		}
	}
}

func TestCRLResignedAtHalfValidity(t *testing.T) {
	s := newService(t, t.TempDir(), func(c *ServiceConfig) { c.CRLValidity = func() time.Duration { return MinCRLValidity } })
	first := s.Trust()
	crl, err := revoke.ParsePEM(first.CRLPEM, s.Bundle())
	if err != nil {
		t.Fatal(err)
	}
	if got := crl.NextUpdate().Sub(crl.ThisUpdate()); got != MinCRLValidity {
		t.Fatalf("validity %v, want CRLValidity %v", got, MinCRLValidity)
	}
	changed := s.TrustChanged()
	c, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(c) }()
	defer func() { cancel(); <-done }()
	testkit.Eventually(t, 5*time.Second, "trust changed (CRL re-signed)", func() bool {
		select {
		case <-changed:
			return true
		default:
			return false
		}
	})
	next := s.Trust()
	again, err := revoke.ParsePEM(next.CRLPEM, s.Bundle())
	if err != nil {
		t.Fatal(err)
	}
	if next.Version == first.Version || again.Number() != crl.Number()+1 {
		t.Fatalf("version %s→%s, number %d→%d", first.Version, next.Version, crl.Number(), again.Number())
	}
	if half := crl.ThisUpdate().Add(MinCRLValidity / 2); again.ThisUpdate().Before(half.Add(-time.Second)) {
		t.Fatalf("re-signed at %v, before half validity %v", again.ThisUpdate(), half)
	}
	if crl.State(again.ThisUpdate(), 0) != revoke.Fresh {
		t.Fatal("re-signed only after the old CRL lapsed")
	}
}

func TestRotation(t *testing.T) {
	clk := &clock{t: time.Now().Truncate(time.Second)}
	s := newService(t, t.TempDir(), func(c *ServiceConfig) { c.Now = clk.Now })
	w := newWorkload(t)
	sign := func() []*x509.Certificate {
		chain, err := s.issue(func() ([]*x509.Certificate, error) {
			return s.CA().Sign(mustCSR(t, w.csr(t, reviews)), spiffeid.RequireFromString(reviews), time.Hour)
		}, "test", false)
		if err != nil {
			t.Fatal(err)
		}
		return chain
	}
	old := sign()
	oldServing := servingLeaf(s)
	oldRoot := s.CA().Signer()
	if err := s.FinishRotation(false); err == nil || !strings.Contains(err.Error(), "no rotation in progress") {
		t.Fatalf("finish without start: %v", err)
	}
	v0 := s.Trust().Version
	if err := s.StartRotation(); err != nil {
		t.Fatal(err)
	}
	if s.Trust().Version == v0 || len(s.Bundle().Roots()) != 2 {
		t.Fatal("start did not publish a two-root bundle")
	}
	if servingLeaf(s).CheckSignatureFrom(s.CA().Signer()) != nil || oldServing.Equal(servingLeaf(s)) {
		t.Fatal("the serving certificate was not reissued from the new root")
	}
	if _, pubChain := s.Publisher(); pubChain[0].CheckSignatureFrom(s.CA().Signer()) != nil {
		t.Fatal("the publisher certificate was not reissued from the new root")
	}
	// A sidecar whose --ca-root is still the old root alone verifies pilot.
	serving, _ := s.ServingCert(nil)
	var servingChain []*x509.Certificate
	for _, der := range serving.Certificate {
		c, _ := x509.ParseCertificate(der)
		servingChain = append(servingChain, c)
	}
	oldOnly, _ := bundle.New(oldRoot)
	if got, err := oldOnly.Verify(servingChain, clk.Now()); err != nil || got.String() != "spiffe://cluster.local/weft/pilot" {
		t.Fatalf("pilot's new serving certificate against the old root alone: %v %v", got, err)
	}
	err := s.FinishRotation(false)
	if err == nil || !strings.Contains(err.Error(), "1 unexpired certificates from the old root") {
		t.Fatalf("finish with a live old certificate: %v", err)
	}
	st := s.RotationStatus()
	if !st.Rotating || st.OldRootCertificates != 1 {
		t.Fatalf("status %+v", st)
	}
	// Reissued from the new root (counted by root, not by the cross
	// certificate it carries), and the old one expired: finish is allowed.
	renewed := sign()
	s.mu.Lock()
	issuer := s.reg.issued[serialKey(renewed[0].SerialNumber)].Issuer
	s.mu.Unlock()
	if issuer != serialKey(s.CA().Signer().SerialNumber) {
		t.Fatalf("issuer recorded %s, want the new root %s", issuer, serialKey(s.CA().Signer().SerialNumber))
	}
	clk.Add(time.Hour + time.Second)
	if err := s.FinishRotation(false); err != nil {
		t.Fatal(err)
	}
	if len(s.Bundle().Roots()) != 1 {
		t.Fatal("finish kept the old root")
	}
	if _, err := s.Bundle().Verify(old, clk.Now().Add(-time.Hour)); err == nil {
		t.Fatal("an old-root certificate still verifies")
	}
	// force drops the old root with live certificates.
	if err := s.StartRotation(); err != nil {
		t.Fatal(err)
	}
	_ = old
	clk.Add(-2 * time.Hour) // make the certificates of the previous root live again for this check
	s.mu.Lock()
	s.reg.issued["live"] = &Issued{Serial: old[0].SerialNumber, ID: spiffeid.RequireFromString(reviews), NotAfter: clk.Now().Add(time.Hour), Issuer: serialKey(s.CA().Rotating().SerialNumber)}
	s.mu.Unlock()
	if err := s.FinishRotation(false); err == nil {
		t.Fatal("finish with a live certificate accepted")
	}
	if err := s.FinishRotation(true); err != nil {
		t.Fatalf("force: %v", err)
	}
}

func servingLeaf(s *Service) *x509.Certificate {
	c, _ := s.ServingCert(nil)
	return c.Leaf
}

func TestMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	s := newService(t, t.TempDir(), func(c *ServiceConfig) { c.Registerer = reg })
	addr := serveTLS(t, s)
	cc := dial(t, s, addr, nil, nil)
	w := newWorkload(t)
	tok, _, _ := s.IssueToken("shop", "reviews", time.Hour)
	if _, err := csrrpc.Sign(ctx(t), cc, w.csr(t, reviews), tok); err != nil {
		t.Fatal(err)
	}
	_, _ = csrrpc.Sign(ctx(t), cc, w.csr(t, reviews), "")
	_, _ = csrrpc.Sign(ctx(t), cc, w.csr(t, "spiffe://cluster.local/ns/shop/sa/x"), tok)
	got := map[string]float64{}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			name := mf.GetName()
			for _, l := range m.GetLabel() {
				name += "{" + l.GetName() + "=" + l.GetValue() + "}"
			}
			got[name] = m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	for name, want := range map[string]float64{
		"weft_pilot_ca_csr_total{result=issued}": 1, "weft_pilot_ca_csr_total{result=unauthenticated}": 1,
		"weft_pilot_ca_csr_total{result=denied}": 1, "weft_pilot_ca_csr_total{result=invalid}": 0,
		"weft_pilot_ca_issued_entries": 3, "weft_pilot_ca_rotating": 0, "weft_pilot_ca_revoked_serials": 0,
		"weft_pilot_ca_crl_number":                         float64(s.CRL().Number()),
		"weft_pilot_ca_crl_next_update_timestamp_seconds":  float64(s.CRL().NextUpdate().Unix()),
		"weft_pilot_ca_signer_not_after_timestamp_seconds": float64(s.CA().Signer().NotAfter.Unix()),
	} {
		if v, ok := got[name]; !ok || v != want {
			t.Errorf("%s = %v (present %v), want %v", name, v, ok, want)
		}
	}
}

// A shorter CRLValidity (a MeshConfig change) reschedules the re-signing.
func TestCRLValidityChangeApplies(t *testing.T) {
	var validity atomic.Int64
	validity.Store(int64(time.Hour))
	s := newService(t, t.TempDir(), func(c *ServiceConfig) {
		c.CRLValidity = func() time.Duration { return time.Duration(validity.Load()) }
	})
	first := s.CRL()
	c, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(c) }()
	defer func() { cancel(); <-done }()
	validity.Store(int64(MinCRLValidity))
	testkit.Eventually(t, 5*time.Second, "a CRL signed with the new validity", func() bool {
		crl := s.CRL()
		return crl.Number() > first.Number() && crl.NextUpdate().Sub(crl.ThisUpdate()) == MinCRLValidity
	})
}

// pilot's own certificates are renewed at half their life by Run.
func TestOwnCertificatesRenewedAtHalfLife(t *testing.T) {
	s := newService(t, t.TempDir(), func(c *ServiceConfig) { c.CertTTL = func() time.Duration { return 4 * time.Second } })
	serving := servingLeaf(s)
	_, pub := s.Publisher()
	c, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(c) }()
	defer func() { cancel(); <-done }()
	testkit.Eventually(t, 10*time.Second, "serving and publisher certificates renewed", func() bool {
		_, p := s.Publisher()
		return !servingLeaf(s).Equal(serving) && !p[0].Equal(pub[0])
	})
	renewedAt := time.Now()
	// Not before half of the old one's life (issued at most 1s before its
	// NotAfter-4s, as X.509 times are whole seconds).
	if half := serving.NotAfter.Add(-2*time.Second - time.Second); renewedAt.Before(half) {
		t.Fatalf("renewed at %v, before half life %v", renewedAt, half)
	}
	if !servingLeaf(s).NotAfter.After(serving.NotAfter) {
		t.Fatal("the renewed certificate does not outlive the old one")
	}
}

func p384CSR(t testing.TB) []byte {
	k, _ := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	u, _ := url.Parse(reviews)
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{URIs: []*url.URL{u}}, k)
	if err != nil {
		t.Fatal(err)
	}
	return der
}

// tamper flips the last byte (inside the signature).
func tamper(der []byte) []byte {
	out := append([]byte(nil), der...)
	out[len(out)-1] ^= 1
	return out
}

// TestTokenCSRBound: one bootstrap token makes at most TokenCSRs CSRs per
// TokenCSRWindow over the real RPC (the one past is ResourceExhausted, naming
// the token), another token is not affected, and the bound itself is checked.
func TestTokenCSRBound(t *testing.T) {
	clk := &clock{t: time.Now().Truncate(time.Second)}
	s := newService(t, t.TempDir(), func(c *ServiceConfig) { c.Now, c.TokenCSRs = clk.Now, 2 })
	addr := serveTLS(t, s)
	cc := dial(t, s, addr, nil, nil)
	w := newWorkload(t)
	tok, _, _ := s.IssueToken("shop", "reviews", time.Hour)
	for i := range 2 {
		if _, err := csrrpc.Sign(ctx(t), cc, w.csr(t, reviews), tok); err != nil {
			t.Fatalf("CSR %d of the bound: %v", i+1, err)
		}
	}
	_, err := csrrpc.Sign(ctx(t), cc, w.csr(t, reviews), tok)
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "this bootstrap token made 2 CSRs") {
		t.Fatalf("one past the bound: %v", err)
	}
	other, _, _ := s.IssueToken("shop", "reviews", time.Hour)
	if _, err := csrrpc.Sign(ctx(t), cc, w.csr(t, reviews), other); err != nil {
		t.Fatalf("another token: %v", err)
	}
	clk.Add(TokenCSRWindow)
	if _, err := csrrpc.Sign(ctx(t), cc, w.csr(t, reviews), tok); err != nil {
		t.Fatalf("next window: %v", err)
	}
	for _, n := range []int{-1, MaxTokenCSRs + 1} {
		if _, err := New(ServiceConfig{DataDir: t.TempDir(), Logger: hclog.NewNullLogger(), TokenCSRs: n}); err == nil {
			t.Errorf("TokenCSRs %d accepted", n)
		}
	}
	if _, err := New(ServiceConfig{DataDir: t.TempDir(), Logger: hclog.NewNullLogger(), TokenCSRs: MaxTokenCSRs}); err != nil {
		t.Errorf("TokenCSRs at MaxTokenCSRs: %v", err)
	}
}
