package mtls_test

import (
	"context"
	"errors"
	"io"
	"math/big"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"go.uber.org/goleak"

	"github.com/weft-mesh/weft/sidecar/mtls"
	"github.com/weft-mesh/weft/sidecar/mtls/mtlstest"
	"github.com/weft-mesh/weft/sidecar/svid"
	"github.com/weft-mesh/weft/tools/testkit"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const td = "cluster.local"

// clock is a settable test clock.
type clock struct{ ns atomic.Int64 }

func newClock() *clock               { c := &clock{}; c.ns.Store(time.Now().UnixNano()); return c }
func (c *clock) Now() time.Time      { return time.Unix(0, c.ns.Load()) }
func (c *clock) Add(d time.Duration) { c.ns.Add(int64(d)) }
func (c *clock) Set(t time.Time)     { c.ns.Store(t.UnixNano()) }

func ids(s ...string) []spiffeid.ID {
	out := make([]spiffeid.ID, len(s))
	for i, x := range s {
		out[i] = spiffeid.RequireFromString(x)
	}
	return out
}

// side is one sidecar's identity: its holder and manager.
type side struct {
	h *svid.Holder
	m *mtls.Manager
}

func newSide(t testing.TB, s *svid.SVID, clk *clock, trust *mtls.Trust) *side {
	t.Helper()
	h := &svid.Holder{}
	if s != nil {
		h.Store(s)
	}
	m, err := mtls.New(mtls.Config{SVID: h, Logger: hclog.NewNullLogger(), Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	m.SetTrust(trust, true)
	return &side{h: h, m: m}
}

// server accepts mTLS connections with m, writes "hi" on each (so the client
// reads the session ticket) and keeps them open until the test ends.
type server struct {
	addr string
	errs chan error
	mu   sync.Mutex
	open []*mtls.Conn
}

func serve(t *testing.T, m *mtls.Manager) *server {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &server{addr: ln.Addr().String(), errs: make(chan error, 100)}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			raw, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				c, err := m.Server(context.Background(), raw)
				if err != nil {
					s.errs <- err
					return
				}
				s.mu.Lock()
				s.open = append(s.open, c)
				s.mu.Unlock()
				_, _ = c.Write([]byte("hi"))
				_, _ = io.Copy(io.Discard, c) // until the client or the test closes it
				c.Close()
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		s.mu.Lock()
		for _, c := range s.open {
			c.Close()
		}
		s.mu.Unlock()
		wg.Wait()
	})
	return s
}

func dial(t *testing.T, m *mtls.Manager, addr string, up *mtls.Upstream) (*mtls.Conn, error) {
	t.Helper()
	raw, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	c, err := m.Client(context.Background(), raw, addr, up)
	if err != nil {
		return nil, err
	}
	buf := make([]byte, 2)
	if _, err := io.ReadFull(c, buf); err != nil { // also takes in the session ticket
		c.Close()
		return nil, err
	}
	t.Cleanup(func() { c.Close() })
	return c, nil
}

func upstream(t *testing.T, want ...string) *mtls.Upstream {
	t.Helper()
	u, err := mtls.NewUpstream("outbound|80||reviews.shop", ids(want...), []string{mtls.ALPNH2})
	if err != nil {
		t.Fatal(err)
	}
	return u
}

func refusal(err error) string {
	var re *mtls.RefusedError
	if errors.As(err, &re) {
		return re.Result
	}
	return ""
}

const (
	reviews     = "spiffe://cluster.local/ns/shop/sa/reviews"
	productpage = "spiffe://cluster.local/ns/shop/sa/productpage"
)

type world struct {
	ca     *mtlstest.CA
	clk    *clock
	trust  *mtls.Trust
	srvID  *svid.SVID
	cliID  *svid.SVID
	srv    *side
	cli    *side
	server *server
}

func newWorld(t *testing.T) *world {
	w := &world{ca: mtlstest.NewCA(t, "mesh root"), clk: newClock()}
	w.trust = w.trustWith(t, 1)
	w.srvID = w.ca.Workload(t, td, "shop", "reviews")
	w.cliID = w.ca.Workload(t, td, "shop", "productpage")
	w.srv = newSide(t, w.srvID, w.clk, w.trust)
	w.cli = newSide(t, w.cliID, w.clk, w.trust)
	w.server = serve(t, w.srv.m)
	return w
}

func (w *world) trustWith(t *testing.T, number int64, revoked ...*svid.SVID) *mtls.Trust {
	var serials []*big.Int
	for _, s := range revoked {
		serials = append(serials, s.Cert.Leaf.SerialNumber)
	}
	tr, err := mtls.NewTrust(w.ca.Bundle(t), w.ca.CRL(t, number, w.clk.Now().Add(-time.Minute), time.Hour, serials...))
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

func TestHandshakeAndResumption(t *testing.T) {
	w := newWorld(t)
	c, err := dial(t, w.cli.m, w.server.addr, upstream(t, reviews))
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Peer().ID.String(); got != reviews {
		t.Errorf("client sees peer %s, want %s", got, reviews)
	}
	if c.NegotiatedProtocol() != mtls.ALPNH2 || c.Resumed() {
		t.Errorf("first connection: alpn %q resumed %v, want h2 and a full handshake", c.NegotiatedProtocol(), c.Resumed())
	}
	if id, ok := mtls.PeerID(c); !ok || id.String() != reviews {
		t.Errorf("PeerID = %v %v", id, ok)
	}
	c2, err := dial(t, w.cli.m, w.server.addr, upstream(t, reviews))
	if err != nil {
		t.Fatal(err)
	}
	if !c2.Resumed() || c2.Peer().ID.String() != reviews {
		t.Errorf("second connection: resumed %v peer %s, want a resumed session with %s", c2.Resumed(), c2.Peer().ID, reviews)
	}
	// The server saw the client's identity on both.
	testkit.Eventually(t, 5*time.Second, "two server connections", func() bool {
		w.server.mu.Lock()
		defer w.server.mu.Unlock()
		return len(w.server.open) == 2
	})
	w.server.mu.Lock()
	for _, sc := range w.server.open {
		if sc.Peer().ID.String() != productpage {
			t.Errorf("server sees peer %s, want %s", sc.Peer().ID, productpage)
		}
	}
	w.server.mu.Unlock()
	hs := w.cli.m.Counts().Handshakes[mtls.SideClient]
	if hs[mtls.ResultOK] != 1 || hs[mtls.ResultResumed] != 1 {
		t.Errorf("client handshakes %v, want one ok and one resumed", hs)
	}
	if n := w.srv.m.Counts().Handshakes[mtls.SideServer][mtls.ResultResumed]; n != 1 {
		t.Errorf("server resumed %d, want 1", n)
	}
}

func TestClientFromAnotherCARefused(t *testing.T) {
	w := newWorld(t)
	other := mtlstest.NewCA(t, "another root")
	stranger := newSide(t, other.Workload(t, td, "shop", "productpage"), w.clk, w.trust)
	if _, err := dial(t, stranger.m, w.server.addr, upstream(t, reviews)); err == nil {
		t.Fatal("a client certified by another CA was accepted")
	}
	err := <-w.server.errs
	if refusal(err) != mtls.ResultUntrusted || !strings.Contains(err.Error(), "serial") {
		t.Errorf("server error %v, want untrusted naming the serial", err)
	}
}

func TestWrongServerIDRefusedByClient(t *testing.T) {
	w := newWorld(t)
	_, err := dial(t, w.cli.m, w.server.addr, upstream(t, "spiffe://cluster.local/ns/shop/sa/ratings"))
	if refusal(err) != mtls.ResultUnexpectedPeer {
		t.Fatalf("err %v, want unexpected_peer", err)
	}
	for _, want := range []string{reviews, "spiffe://cluster.local/ns/shop/sa/ratings"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %s", err, want)
		}
	}
	if n := w.cli.m.Counts().Handshakes[mtls.SideClient][mtls.ResultUnexpectedPeer]; n != 1 {
		t.Errorf("client unexpected_peer count %d, want 1", n)
	}
}

func TestRevokedClientRefusedAndLiveConnectionClosed(t *testing.T) {
	w := newWorld(t)
	c, err := dial(t, w.cli.m, w.server.addr, upstream(t, reviews))
	if err != nil {
		t.Fatal(err)
	}
	// A new CRL revoking the client: the server closes the open connection...
	w.srv.m.SetTrust(w.trustWith(t, 2, w.cliID), true)
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	var ne net.Error
	if _, err := c.Read(make([]byte, 1)); err == nil || (errors.As(err, &ne) && ne.Timeout()) {
		t.Fatalf("read on a revoked peer's connection: %v, want it closed", err)
	}
	if n := w.srv.m.Counts().ClosedRevoked; n != 1 {
		t.Errorf("closed for revocation: %d, want 1", n)
	}
	// ...and refuses the next handshake, resumed or not, naming the serial.
	_, err = dial(t, w.cli.m, w.server.addr, upstream(t, reviews))
	if err == nil {
		t.Fatal("a revoked client was accepted")
	}
	serr := <-w.server.errs
	if refusal(serr) != mtls.ResultRevoked || !strings.Contains(serr.Error(), w.cliID.Cert.Leaf.SerialNumber.Text(16)) {
		t.Errorf("server error %v, want revoked naming serial %x", serr, w.cliID.Cert.Leaf.SerialNumber)
	}
}

func TestRevokedServerRefusedOnResumption(t *testing.T) {
	w := newWorld(t)
	if _, err := dial(t, w.cli.m, w.server.addr, upstream(t, reviews)); err != nil {
		t.Fatal(err)
	}
	w.cli.m.SetTrust(w.trustWith(t, 2, w.srvID), true)
	_, err := dial(t, w.cli.m, w.server.addr, upstream(t, reviews))
	if refusal(err) != mtls.ResultRevoked {
		t.Fatalf("err %v, want the resumed session refused as revoked", err)
	}
}

func TestOwnCertificateExpiredFailsClosed(t *testing.T) {
	w := newWorld(t)
	c, err := dial(t, w.cli.m, w.server.addr, upstream(t, reviews))
	if err != nil {
		t.Fatal(err)
	}
	// One second past the client's NotAfter: no connection is made.
	w.clk.Set(w.cliID.NotAfter)
	w.srv.h.Store(w.ca.Issue(t, reviews, w.clk.Now().Add(-time.Hour), w.clk.Now().Add(time.Hour)))
	w.cli.m.SetTrust(w.trustWith(t, 2), true)
	w.srv.m.SetTrust(w.trustWith(t, 2), true)
	if _, err := dial(t, w.cli.m, w.server.addr, upstream(t, reviews)); err != nil {
		t.Fatalf("at NotAfter exactly the certificate is still valid: %v", err)
	}
	w.clk.Add(time.Second)
	_, err = dial(t, w.cli.m, w.server.addr, upstream(t, reviews))
	if refusal(err) != mtls.ResultCertificateExpired || !strings.Contains(err.Error(), productpage) {
		t.Fatalf("err %v, want certificate_expired naming %s", err, productpage)
	}
	if st := w.cli.m.Status(w.clk.Now()); st.Ready || st.Cert != mtls.CertExpired {
		t.Errorf("status %+v, want expired and not ready", st)
	}
	// Sweep closes what was open.
	w.cli.m.Sweep(w.clk.Now())
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Error("a connection of an expired sidecar is still open after Sweep")
	}
	if w.cli.m.Live() != 0 {
		t.Errorf("live %d after Sweep, want 0", w.cli.m.Live())
	}
}

func TestCRLPastGraceRefusesNewHandshakes(t *testing.T) {
	w := newWorld(t)
	next := w.trust.CRL().NextUpdate()
	w.clk.Set(next.Add(time.Hour)) // DefaultGrace: still Lapsed, still served
	if _, err := dial(t, w.cli.m, w.server.addr, upstream(t, reviews)); err != nil {
		t.Fatalf("at NextUpdate + grace: %v", err)
	}
	w.clk.Add(time.Nanosecond)
	_, err := dial(t, w.cli.m, w.server.addr, upstream(t, reviews))
	if refusal(err) != mtls.ResultCRLExpired || !strings.Contains(err.Error(), "CRL number 1") {
		t.Fatalf("err %v, want crl_expired naming the CRL", err)
	}
	st := w.srv.m.Status(w.clk.Now())
	if st.Ready || st.CRL != mtls.CRLExpired || !strings.Contains(st.Lines(), "crl: expired") || !strings.Contains(st.Lines(), "NextUpdate") {
		t.Errorf("status %q, want not ready with the CRL reason", st.Lines())
	}
}

func TestConfigBounds(t *testing.T) {
	h := &svid.Holder{}
	log := hclog.NewNullLogger()
	for _, tc := range []struct {
		name string
		cfg  mtls.Config
		ok   bool
	}{
		{"grace at max", mtls.Config{CRLGrace: mtls.MaxCRLGrace}, true},
		{"grace past max", mtls.Config{CRLGrace: mtls.MaxCRLGrace + 1}, false},
		{"grace negative", mtls.Config{CRLGrace: -1}, false},
		{"handshake timeout at max", mtls.Config{HandshakeTimeout: mtls.MaxHandshakeTimeout}, true},
		{"handshake timeout past max", mtls.Config{HandshakeTimeout: mtls.MaxHandshakeTimeout + 1}, false},
		{"session cache at max", mtls.Config{SessionCacheSize: mtls.MaxSessionCacheSize}, true},
		{"session cache past max", mtls.Config{SessionCacheSize: mtls.MaxSessionCacheSize + 1}, false},
		{"session cache negative", mtls.Config{SessionCacheSize: -1}, false},
	} {
		tc.cfg.SVID, tc.cfg.Logger = h, log
		_, err := mtls.New(tc.cfg)
		if (err == nil) != tc.ok {
			t.Errorf("%s: err %v, want ok=%v", tc.name, err, tc.ok)
		}
	}
	if _, err := mtls.New(mtls.Config{Logger: log}); err == nil {
		t.Error("no SVID holder accepted")
	}
	if _, err := mtls.NewUpstream("x", nil, nil); err == nil {
		t.Error("an upstream expecting no identity accepted")
	}
}

func TestNoTrustRefuses(t *testing.T) {
	w := newWorld(t)
	w.cli.m.SetTrust(nil, true)
	_, err := dial(t, w.cli.m, w.server.addr, upstream(t, reviews))
	if refusal(err) != mtls.ResultNoTrust || !strings.Contains(err.Error(), mtls.RootCAName) {
		t.Fatalf("err %v, want no_trust naming %s", err, mtls.RootCAName)
	}
	none := newSide(t, nil, w.clk, w.trust)
	_, err = dial(t, none.m, w.server.addr, upstream(t, reviews))
	if refusal(err) != mtls.ResultNoCertificate {
		t.Fatalf("err %v, want no_certificate", err)
	}
}

// TestRefusalLogSampled: a refusal kind is logged at most once per LogEvery,
// saying how many went unlogged since.
func TestRefusalLogSampled(t *testing.T) {
	clk := newClock()
	var buf strings.Builder
	var mu sync.Mutex
	log := hclog.New(&hclog.LoggerOptions{Output: writerFunc(func(p []byte) (int, error) { mu.Lock(); defer mu.Unlock(); return buf.Write(p) })})
	m, err := mtls.New(mtls.Config{SVID: &svid.Holder{}, Logger: log, Now: clk.Now}) // no certificate: every handshake refused
	if err != nil {
		t.Fatal(err)
	}
	up := upstream(t, reviews)
	refuse := func() {
		a, b := net.Pipe()
		defer b.Close()
		if _, err := m.Client(context.Background(), a, "10.0.0.1:15006", up); refusal(err) != mtls.ResultNoCertificate {
			t.Fatalf("err %v, want no_certificate", err)
		}
	}
	lines := func() int { mu.Lock(); defer mu.Unlock(); return strings.Count(buf.String(), "mTLS handshake refused") }
	refuse()
	refuse()
	clk.Add(mtls.LogEvery - 1)
	refuse()
	if n := lines(); n != 1 {
		t.Fatalf("%d lines within LogEvery, want 1:\n%s", n, buf.String())
	}
	clk.Add(1)
	refuse()
	if n := lines(); n != 2 || !strings.Contains(buf.String(), "unlogged_since_last=2") {
		t.Fatalf("after LogEvery: %d lines, want 2 saying 2 unlogged:\n%s", n, buf.String())
	}
	if got := m.Counts().Handshakes[mtls.SideClient][mtls.ResultNoCertificate]; got != 4 {
		t.Errorf("counted %d refusals, want 4", got)
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// TestHandshakeTimeout: a client that starts a handshake and stalls is cut at
// HandshakeTimeout, counted as error.
func TestHandshakeTimeout(t *testing.T) {
	w := newWorld(t)
	m, err := mtls.New(mtls.Config{SVID: w.srv.h, Logger: hclog.NewNullLogger(), Now: w.clk.Now, HandshakeTimeout: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	m.SetTrust(w.trust, true)
	a, b := net.Pipe()
	defer b.Close()
	go func() { _, _ = b.Write([]byte{0x16, 3, 1}) }() // a record header, then nothing
	start := time.Now()
	if _, err := m.Server(context.Background(), a); err == nil || refusal(err) != "" {
		t.Fatalf("err %v, want a timeout", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("cut after %v, want about 100ms", d)
	}
	if n := m.Counts().Handshakes[mtls.SideServer][mtls.ResultError]; n != 1 {
		t.Errorf("error count %d, want 1", n)
	}
}

// TestRenewalNeverResumesTheOldCertificate: a client renewed its certificate
// and the old one was revoked; its cached session carries the old one. The
// session cache is keyed by the client's own serial too, so the next handshake
// is a full one with the new certificate, and it succeeds.
func TestRenewalNeverResumesTheOldCertificate(t *testing.T) {
	w := newWorld(t)
	if _, err := dial(t, w.cli.m, w.server.addr, upstream(t, reviews)); err != nil {
		t.Fatal(err)
	}
	if c, err := dial(t, w.cli.m, w.server.addr, upstream(t, reviews)); err != nil || !c.Resumed() {
		t.Fatalf("before the renewal: %v, want a resumed session", err)
	}
	old, renewed := w.cliID, w.ca.Workload(t, td, "shop", "productpage")
	w.cli.h.Store(renewed)
	w.srv.m.SetTrust(w.trustWith(t, 2, old), true) // the old certificate revoked
	c, err := dial(t, w.cli.m, w.server.addr, upstream(t, reviews))
	if err != nil {
		t.Fatalf("after the renewal: %v, want a full handshake with the new certificate", err)
	}
	if c.Resumed() {
		t.Error("a session of the old certificate was offered")
	}
	testkit.Eventually(t, 5*time.Second, "the server sees the new serial", func() bool {
		w.server.mu.Lock()
		defer w.server.mu.Unlock()
		last := w.server.open[len(w.server.open)-1]
		return last.Peer().Serial.Cmp(renewed.Cert.Leaf.SerialNumber) == 0
	})
}

// TestRenewalGenerationsAndRetirement: a client connection records the own
// certificate generation it was made with and when its peer's certificate gets
// old. A server's renewal does not reach a client that resumes (TLS 1.3
// resumption carries the first handshake's certificates along), so a session
// is not resumed past its peer certificate's retire point: the next handshake
// is a full one and meets the renewed certificate.
func TestRenewalGenerationsAndRetirement(t *testing.T) {
	w := newWorld(t)
	made := w.clk.Now()
	c1, err := dial(t, w.cli.m, w.server.addr, upstream(t, reviews))
	if err != nil {
		t.Fatal(err)
	}
	if g := w.cli.m.OwnGeneration(); g != 1 || c1.OwnGeneration() != g {
		t.Errorf("generation: manager %d connection %d, want 1 and 1", g, c1.OwnGeneration())
	}
	if want := mtls.RetireAt(w.srvID.NotBefore, w.srvID.NotAfter, made); !c1.RetireAt().Equal(want) {
		t.Errorf("RetireAt %s, want %s", c1.RetireAt(), want)
	}
	point := mtls.RetireAt(w.srvID.NotBefore, w.srvID.NotAfter, w.srvID.NotBefore)
	renewed := w.ca.Issue(t, reviews, point.Add(-time.Minute), point.Add(24*time.Hour))
	w.srv.h.Store(renewed)
	// Before the old certificate's retire point the session resumes, with the
	// old certificate.
	w.clk.Set(point.Add(-time.Second))
	w.cli.m.SetTrust(w.trustWith(t, 2), true)
	w.srv.m.SetTrust(w.trustWith(t, 2), true)
	c2, err := dial(t, w.cli.m, w.server.addr, upstream(t, reviews))
	if err != nil {
		t.Fatal(err)
	}
	if !c2.Resumed() || c2.Peer().Serial.Cmp(w.srvID.Cert.Leaf.SerialNumber) != 0 {
		t.Fatalf("before the retire point: resumed %v serial %x, want the old %x resumed", c2.Resumed(), c2.Peer().Serial, w.srvID.Cert.Leaf.SerialNumber)
	}
	// At it: a full handshake, the renewed certificate; then resumed again.
	w.clk.Set(point)
	c3, err := dial(t, w.cli.m, w.server.addr, upstream(t, reviews))
	if err != nil {
		t.Fatal(err)
	}
	if c3.Resumed() || c3.Peer().Serial.Cmp(renewed.Cert.Leaf.SerialNumber) != 0 {
		t.Fatalf("at the retire point: resumed %v serial %x, want a full handshake with %x", c3.Resumed(), c3.Peer().Serial, renewed.Cert.Leaf.SerialNumber)
	}
	if want := mtls.RetireAt(renewed.NotBefore, renewed.NotAfter, point); !c3.RetireAt().Equal(want) {
		t.Errorf("RetireAt %s, want %s", c3.RetireAt(), want)
	}
	if c4, err := dial(t, w.cli.m, w.server.addr, upstream(t, reviews)); err != nil || !c4.Resumed() ||
		c4.Peer().Serial.Cmp(renewed.Cert.Leaf.SerialNumber) != 0 {
		t.Fatalf("after: %v, want the renewed certificate's session resumed", err)
	}
	// The client's own renewal moves its generation; c1 keeps its own.
	w.cli.h.Store(w.ca.Issue(t, productpage, point.Add(-time.Minute), point.Add(24*time.Hour)))
	if g := w.cli.m.OwnGeneration(); g != 2 || c1.OwnGeneration() != 1 {
		t.Errorf("after the client's renewal: manager %d, c1 %d; want 2 and 1", g, c1.OwnGeneration())
	}
	c5, err := dial(t, w.cli.m, w.server.addr, upstream(t, reviews))
	if err != nil || c5.OwnGeneration() != 2 {
		t.Fatalf("after the client's renewal: %v, generation %d want 2", err, c5.OwnGeneration())
	}
}

// TestRootDroppedClosesLiveConnections: the client is certified by a second
// root, the server by the first, both trust both. A new trust material with
// the same roots (or one more) closes nothing; one without the root a live
// connection's peer chain verified against closes it on that side (fail
// closed), counted as untrusted, and new handshakes are refused.
func TestRootDroppedClosesLiveConnections(t *testing.T) {
	clk := newClock()
	a, b, c := mtlstest.NewCA(t, "root a"), mtlstest.NewCA(t, "root b"), mtlstest.NewCA(t, "root c")
	now := clk.Now()
	trust := func(number int64, crlBy *mtlstest.CA, cas ...*mtlstest.CA) *mtls.Trust {
		bu := cas[0].Bundle(t)
		for _, x := range cas[1:] {
			var err error
			if bu, err = bu.Union(x.Bundle(t)); err != nil {
				t.Fatal(err)
			}
		}
		tr, err := mtls.NewTrust(bu, crlBy.CRL(t, number, now.Add(-time.Minute), time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		return tr
	}
	both := trust(1, a, a, b)
	srv := newSide(t, a.Workload(t, td, "shop", "reviews"), clk, both)
	cli := newSide(t, b.Workload(t, td, "shop", "productpage"), clk, both)
	s := serve(t, srv.m)
	closed := func(c *mtls.Conn) bool {
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		var ne net.Error
		_, err := c.Read(make([]byte, 1))
		return err != nil && !(errors.As(err, &ne) && ne.Timeout())
	}
	open := func(c *mtls.Conn) bool {
		_ = c.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
		var ne net.Error
		_, err := c.Read(make([]byte, 1))
		return errors.As(err, &ne) && ne.Timeout()
	}
	c1, err := dial(t, cli.m, s.addr, upstream(t, reviews))
	if err != nil {
		t.Fatal(err)
	}
	for _, tr := range []*mtls.Trust{trust(2, a, a, b), trust(3, a, b, a, c)} {
		srv.m.SetTrust(tr, true)
		cli.m.SetTrust(tr, true)
	}
	if !open(c1) || srv.m.Counts().ClosedUntrusted+cli.m.Counts().ClosedUntrusted != 0 {
		t.Fatal("a bundle keeping both roots closed a connection")
	}
	// The server drops root b (the client's).
	srv.m.SetTrust(trust(4, a, a), true)
	if !closed(c1) {
		t.Fatal("the server kept a connection whose peer's root left its bundle")
	}
	c1.Close()
	if n := srv.m.Counts(); n.ClosedUntrusted != 1 || n.ClosedRevoked != 0 {
		t.Errorf("server closed untrusted %d revoked %d, want 1 and 0", n.ClosedUntrusted, n.ClosedRevoked)
	}
	if _, err := dial(t, cli.m, s.addr, upstream(t, reviews)); err == nil {
		t.Fatal("the server accepted a client of the dropped root")
	}
	if serr := <-s.errs; refusal(serr) != mtls.ResultUntrusted {
		t.Errorf("server refusal %v, want untrusted", serr)
	}
	// The client drops root a (the server's), on a connection the server accepts.
	srv.m.SetTrust(trust(5, a, a, b), true)
	c2, err := dial(t, cli.m, s.addr, upstream(t, reviews))
	if err != nil {
		t.Fatal(err)
	}
	cli.m.SetTrust(trust(6, b, b), true)
	if !closed(c2) {
		t.Fatal("the client kept a connection whose peer's root left its bundle")
	}
	if n := cli.m.Counts().ClosedUntrusted; n != 1 {
		t.Errorf("client closed untrusted %d, want 1", n)
	}
	testkit.Eventually(t, 5*time.Second, "no live connection on the client", func() bool { return cli.m.Live() == 0 })
}
