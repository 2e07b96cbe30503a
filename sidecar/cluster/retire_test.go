package cluster_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/netip"
	"testing"
	"time"

	"github.com/spiffe/go-spiffe/v2/spiffeid"

	"github.com/weft-mesh/weft/sidecar/circuitbreak"
	"github.com/weft-mesh/weft/sidecar/cluster"
	"github.com/weft-mesh/weft/sidecar/mtls"
	"github.com/weft-mesh/weft/sidecar/mtls/mtlstest"
	"github.com/weft-mesh/weft/sidecar/svid"
	"github.com/weft-mesh/weft/tools/testkit"
)

const reviewsID = "spiffe://cluster.local/ns/shop/sa/reviews"

// renewable is a client sidecar's identity whose certificate the test renews.
type renewable struct {
	ca *mtlstest.CA
	h  *svid.Holder
	m  *mtls.Manager
}

func newRenewable(t *testing.T, ca *mtlstest.CA) *renewable {
	t.Helper()
	r := &renewable{ca: ca, h: &svid.Holder{}}
	r.renew(t)
	r.m = managerOf(t, ca, r.h)
	return r
}

func (r *renewable) renew(t *testing.T) {
	r.h.Store(r.ca.Workload(t, "cluster.local", "shop", "productpage"))
}

// mtlsCluster is a cluster of one mTLS endpoint at addr (ALPN alpn).
func mtlsCluster(t *testing.T, addr netip.AddrPort, peer bool, alpn ...string) (*cluster.Cluster, *cluster.Endpoint) {
	t.Helper()
	up, err := mtls.NewUpstream("reviews", []spiffeid.ID{spiffeid.RequireFromString(reviewsID)}, alpn)
	if err != nil {
		t.Fatal(err)
	}
	e := cluster.NewEndpoint(addr, 1, true)
	e.MTLS, e.Peer = true, peer
	c, err := cluster.New(cluster.Spec{Name: "reviews", ConnectTimeout: time.Second, QueueTimeout: time.Second, Endpoints: []*cluster.Endpoint{e}, TLS: up,
		Limits: circuitbreak.Limits{MaxConnections: 4, MaxPendingRequests: 4, MaxRequests: 16, MaxRetries: 1}})
	if err != nil {
		t.Fatal(err)
	}
	return c, e
}

// mtlsPool is an HTTP/1.1 pool dialling mTLS with m, closed when the test ends.
func mtlsPool(t *testing.T, m *mtls.Manager) *cluster.Pool {
	t.Helper()
	pool, err := cluster.NewPool(cluster.PoolConfig{MaxIdlePerHost: 4, IdleTimeout: time.Minute, BufferSize: 4096, MTLS: m})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// TestPoolRetiresConnectionsAfterRenewal: once the client sidecar renewed its
// certificate, an HTTP/1.1 connection made with the old one is not handed out
// again (it is closed instead), one in use at the renewal is closed when its
// request is done rather than pooled, and Reap closes an idle one; requests
// meanwhile go on new connections, made with the new certificate.
func TestPoolRetiresConnectionsAfterRenewal(t *testing.T) {
	ca := mtlstest.NewCA(t, "root")
	srv := &tlsPeer{m: manager(t, ca, "reviews"), done: make(chan struct{}, 64)}
	serveTLSHTTP(t, srv)
	cli := newRenewable(t, ca)
	c, e := mtlsCluster(t, srv.addr, false)
	pool := mtlsPool(t, cli.m)
	serverConns := func(n int) {
		t.Helper()
		testkit.Eventually(t, 5*time.Second, "server connections", func() bool { return srv.m.Live() == n })
	}
	if roundTrip(t, pool, c) || !roundTrip(t, pool, c) {
		t.Fatal("before the renewal: want a new connection, then the same one reused")
	}
	ctx := t.Context()
	inUse, reused, err := pool.Get(ctx, c, e) // the warm one, taken by a request
	if err != nil || !reused {
		t.Fatalf("Get: reused %v, %v", reused, err)
	}
	if roundTrip(t, pool, c) { // a second connection, left idle
		t.Fatal("a connection in use was handed out twice")
	}
	serverConns(2)
	cli.renew(t)
	if roundTrip(t, pool, c) {
		t.Fatal("after the renewal a connection of the old certificate was handed out")
	}
	pool.Put(inUse) // its request is done: closed, not pooled
	if n := pool.Idle(e.PoolKey()); n != 1 {
		t.Fatalf("idle %d after the renewal, want 1 (the connection made after it)", n)
	}
	serverConns(1)
	if !roundTrip(t, pool, c) {
		t.Fatal("the connection made after the renewal was not reused")
	}
	// Renewed again: Reap closes the idle connection of the older certificate.
	cli.renew(t)
	pool.Reap(time.Now(), map[string]struct{}{e.PoolKey(): {}})
	if n := pool.Idle(e.PoolKey()); n != 0 {
		t.Fatalf("idle %d after Reap, want 0", n)
	}
	serverConns(0)
	if c.Breaker.InUse(circuitbreak.Connections) != 0 {
		t.Errorf("%d connection slots held with none open", c.Breaker.InUse(circuitbreak.Connections))
	}
}

// TestPoolRetiresAtPeerRetirePoint: a connection whose server's certificate
// passed its retire point (the server renewed by then) is not reused; the one
// made after it (the server did not renew) is, until halfway to NotAfter.
func TestPoolRetiresAtPeerRetirePoint(t *testing.T) {
	ca := mtlstest.NewCA(t, "root")
	sm, point := agingServer(t, ca)
	srv := &tlsPeer{m: sm, done: make(chan struct{}, 64)}
	serveTLSHTTP(t, srv)
	cli := newRenewable(t, ca)
	c, _ := mtlsCluster(t, srv.addr, false)
	pool := mtlsPool(t, cli.m)
	if roundTrip(t, pool, c) {
		t.Fatal("first request reused a connection")
	}
	if time.Now().Before(point) && !roundTrip(t, pool, c) {
		t.Fatal("before the retire point the connection was not reused")
	}
	testkit.Eventually(t, 5*time.Second, "the server certificate's retire point", func() bool { return time.Now().After(point) })
	if roundTrip(t, pool, c) {
		t.Fatal("a connection past its peer certificate's retire point was reused")
	}
	if !roundTrip(t, pool, c) {
		t.Fatal("the connection made after the retire point (no renewal to meet) was not reused")
	}
	testkit.Eventually(t, 5*time.Second, "one server connection", func() bool { return sm.Live() == 1 })
}

// agingServer is a server sidecar's identity whose certificate reaches its
// retire point (3/4 of an 8s life) at most a second from now (x509 keeps whole
// seconds).
func agingServer(t *testing.T, ca *mtlstest.CA) (*mtls.Manager, time.Time) {
	t.Helper()
	nb := time.Now().Truncate(time.Second).Add(-5 * time.Second)
	s := ca.Issue(t, reviewsID, nb, nb.Add(8*time.Second))
	h := &svid.Holder{}
	h.Store(s)
	return managerOf(t, ca, h), mtls.RetireAt(s.NotBefore, s.NotAfter, s.NotBefore)
}

// mtlsH2Server answers HTTP/2 (prior knowledge inside our mTLS, as sidecars
// speak it) with "ok"; /slow waits for release.
type mtlsH2Server struct {
	m       *mtls.Manager
	addr    netip.AddrPort
	arrived chan struct{}
	release chan struct{}
}

func newMTLSH2Server(t *testing.T, m *mtls.Manager) *mtlsH2Server {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &mtlsH2Server{m: m, addr: netip.MustParseAddrPort(ln.Addr().String()), arrived: make(chan struct{}, 16), release: make(chan struct{})}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			s.arrived <- struct{}{}
			select {
			case <-s.release:
			case <-r.Context().Done():
			}
		}
		io.WriteString(w, "ok")
	})
	var protos http.Protocols
	protos.SetUnencryptedHTTP2(true) // prior knowledge inside the mTLS, as sidecars speak
	hs := &http.Server{Protocols: &protos, Handler: h}
	done := make(chan struct{})
	go func() { defer close(done); _ = hs.Serve(mtlsListener{Listener: ln, m: m}) }()
	t.Cleanup(func() { hs.Close(); <-done })
	return s
}

// mtlsListener hands out mTLS connections as plain net.Conns: net/http
// speaks h2c prior knowledge only on a connection that is not TLS to it.
type mtlsListener struct {
	net.Listener
	m *mtls.Manager
}

func (l mtlsListener) Accept() (net.Conn, error) {
	for {
		raw, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if c, err := l.m.Server(context.Background(), raw); err == nil {
			return struct{ net.Conn }{c}, nil
		}
	}
}

// mtlsH2Pool is an HTTP/2 pool dialling mTLS with m, closed when the test ends.
func mtlsH2Pool(t *testing.T, m *mtls.Manager) *cluster.H2Pool {
	t.Helper()
	p, err := cluster.NewH2Pool(cluster.H2Config{IdleTimeout: time.Minute, MTLS: m, Client: *h2clientFlag})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// TestH2PoolRetiresConnectionsAfterRenewal: after the client sidecar renewed
// its certificate, an HTTP/2 connection made with the old one takes no new
// stream: a new request goes on a new connection while the request in flight on
// the old one finishes, then the old one closes; an idle one closes at the
// first Get after the renewal.
func TestH2PoolRetiresConnectionsAfterRenewal(t *testing.T) {
	ca := mtlstest.NewCA(t, "root")
	s := newMTLSH2Server(t, manager(t, ca, "reviews"))
	cli := newRenewable(t, ca)
	c, e := mtlsCluster(t, s.addr, true, mtls.ALPNH2)
	p := mtlsH2Pool(t, cli.m)
	warm(t, p, c, e)
	slow := sendPath(t.Context(), p, c, e, "/slow")
	select {
	case <-s.arrived:
	case <-time.After(5 * time.Second):
		t.Fatal("the slow request did not arrive")
	}
	cli.renew(t)
	warm(t, p, c, e) // a new connection: the old one takes no new stream
	if n, live := p.Conns(e.PoolKey()), s.m.Live(); n != 2 || live != 2 {
		t.Fatalf("after the renewal: pool %d connections, server %d, want 2 and 2 (old draining, new)", n, live)
	}
	close(s.release)
	collect(t, []<-chan error{slow}) // the request in flight on the old connection finished
	testkit.Eventually(t, 5*time.Second, "the old connection closed once idle", func() bool {
		return p.Conns(e.PoolKey()) == 1 && s.m.Live() == 1
	})
	// Renewed again: the idle connection closes at the next Get.
	cli.renew(t)
	warm(t, p, c, e)
	testkit.Eventually(t, 5*time.Second, "one connection, of the newest certificate", func() bool {
		return p.Conns(e.PoolKey()) == 1 && s.m.Live() == 1 && c.Breaker.InUse(circuitbreak.Connections) == 1
	})
	if hs := s.m.Counts().Handshakes[mtls.SideServer]; hs[mtls.ResultOK]+hs[mtls.ResultResumed] != 3 {
		t.Errorf("server handshakes %v, want 3 connections in all", hs)
	}
}

// TestH2PoolRetiresAtPeerRetirePoint: an idle HTTP/2 connection closes by
// itself at its server certificate's retire point (no Get needed); the next
// request makes a new one.
func TestH2PoolRetiresAtPeerRetirePoint(t *testing.T) {
	ca := mtlstest.NewCA(t, "root")
	sm, point := agingServer(t, ca)
	s := newMTLSH2Server(t, sm)
	cli := newRenewable(t, ca)
	c, e := mtlsCluster(t, s.addr, true, mtls.ALPNH2)
	p := mtlsH2Pool(t, cli.m)
	warm(t, p, c, e)
	testkit.Eventually(t, 5*time.Second, "the idle connection closed at the retire point", func() bool {
		return p.Conns(e.PoolKey()) == 0 && sm.Live() == 0
	})
	if time.Now().Before(point) {
		t.Fatalf("closed %s before the retire point", time.Until(point))
	}
	warm(t, p, c, e)
	if n := p.Conns(e.PoolKey()); n != 1 {
		t.Fatalf("%d connections after a request, want 1", n)
	}
}
