package listener_test

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	"github.com/hashicorp/go-hclog"

	"github.com/weft-mesh/weft/sidecar/cluster"
	"github.com/weft-mesh/weft/sidecar/dataplane"
	dt "github.com/weft-mesh/weft/sidecar/dataplane/dataplanetest"
	"github.com/weft-mesh/weft/sidecar/httpproxy"
	"github.com/weft-mesh/weft/sidecar/listener"
	"github.com/weft-mesh/weft/sidecar/mtls"
	"github.com/weft-mesh/weft/sidecar/mtls/mtlstest"
	"github.com/weft-mesh/weft/sidecar/svid"
	"github.com/weft-mesh/weft/sidecar/tcpproxy"
	"github.com/weft-mesh/weft/sidecar/xdsresource"
	"github.com/weft-mesh/weft/tools/testkit"
)

const (
	reviewsID     = "spiffe://cluster.local/ns/shop/sa/reviews"
	productpageID = "spiffe://cluster.local/ns/shop/sa/productpage"
)

// sidecar is one in-process sidecar: an identity, proxies over pools that dial
// mTLS, and one listener serving the snapshot.
type sidecar struct {
	m    *mtls.Manager
	snap atomic.Pointer[dataplane.Config]
	srv  *listener.Server
	ln   net.Listener
	addr netip.AddrPort
}

func newSidecar(t *testing.T, name string, id *svid.SVID) *sidecar {
	t.Helper()
	log := hclog.NewNullLogger()
	h := &svid.Holder{}
	h.Store(id)
	m, err := mtls.New(mtls.Config{SVID: h, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	pool, err := cluster.NewPool(cluster.PoolConfig{MaxIdlePerHost: 8, IdleTimeout: time.Minute, BufferSize: 16 << 10, MTLS: m})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	hp, err := httpproxy.New(httpproxy.Config{Logger: log, Pool: pool, MTLS: m})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(hp.Close)
	tp, err := tcpproxy.New(tcpproxy.Config{Logger: log, MTLS: m})
	if err != nil {
		t.Fatal(err)
	}
	s := &sidecar{m: m}
	if s.srv, err = listener.New(listener.Config{Name: name, Logger: log, Snapshot: &s.snap, HTTP: hp, TCP: tp, MTLS: m}); err != nil {
		t.Fatal(err)
	}
	if s.ln, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	s.addr = netip.MustParseAddrPort(s.ln.Addr().String())
	return s
}

func (s *sidecar) start(t *testing.T) { dt.Serve(t, s.srv, s.ln) }

func (s *sidecar) activate(t *testing.T, r dt.Resources) {
	t.Helper()
	cfg, err := r.Compile(dataplane.Options{MTLS: s.m}) // a private registry: activated at once
	if err != nil {
		t.Fatal(err)
	}
	s.snap.Store(cfg)
}

// mesh is a client sidecar (outbound) → server sidecar (inbound) → app, with
// the server's inbound port in mode (STRICT: mTLS only, PERMISSIVE: both).
type mesh struct {
	ca             *mtlstest.CA
	client, server *sidecar
	cliID, srvID   *svid.SVID
	app            netip.AddrPort
	permissive     bool
	clientSANs     []string
}

func newMesh(t *testing.T, permissive bool) *mesh {
	ca := mtlstest.NewCA(t, "mesh root")
	w := &mesh{ca: ca, cliID: ca.Workload(t, "cluster.local", "shop", "productpage"), srvID: ca.Workload(t, "cluster.local", "shop", "reviews"),
		permissive: permissive, clientSANs: []string{reviewsID}}
	w.client = newSidecar(t, "outbound", w.cliID)
	w.server = newSidecar(t, "inbound", w.srvID)
	appLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	app := &http.Server{Handler: http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(rw, "app") })}
	go func() { _ = app.Serve(appLn) }()
	t.Cleanup(func() { app.Close() })
	w.app = netip.MustParseAddrPort(appLn.Addr().String())
	w.push(t, 1)
	w.client.start(t)
	w.server.start(t)
	return w
}

// push activates both sidecars' configs with CRL number n revoking revoked.
func (w *mesh) push(t *testing.T, n int64, revoked ...*svid.SVID) {
	t.Helper()
	var serials []*big.Int
	for _, s := range revoked {
		serials = append(serials, s.Cert.Leaf.SerialNumber)
	}
	secret := dt.RootCA(w.ca.RootPEM(), w.ca.CRLPEM(t, n, time.Now().Add(-time.Minute), time.Hour, serials...))
	port := uint32(w.server.addr.Port())
	chains := []*listenerv3.FilterChain{dt.WithTransport(dt.HTTPChain(port, "in"), xdsresource.TransportTLS)}
	if w.permissive {
		chains = append(chains, dt.WithTransport(dt.HTTPChain(port, "in"), xdsresource.TransportRaw))
	}
	srv := dt.Resources{}
	srv.Add(xdsresource.ListenerType, dt.Listener("inbound", w.server.addr, chains...))
	srv.Add(xdsresource.RouteType, dt.RouteConfig("in", dt.VirtualHost("all", []string{"*"}, dt.PrefixRoute("/", "app", 0))))
	srv.Add(xdsresource.ClusterType, dt.EDSCluster("app", dt.ClusterOpts{}))
	srv.Add(xdsresource.EndpointType, dt.Endpoints("app", w.app))
	srv.Add(xdsresource.SecretType, secret)
	w.server.activate(t, srv)

	cl := dt.Resources{}
	cl.Add(xdsresource.ListenerType, dt.HTTPListener("outbound", w.client.addr, "out"))
	cl.Add(xdsresource.RouteType, dt.RouteConfig("out", dt.VirtualHost("all", []string{"*"}, dt.PrefixRoute("/", "reviews", 0))))
	c := dt.EDSCluster("reviews", dt.ClusterOpts{})
	c.TransportSocket = dt.UpstreamTLS("reviews", []string{"h2"}, w.clientSANs...)
	cl.Add(xdsresource.ClusterType, c)
	cl.Add(xdsresource.EndpointType, dt.MarkMTLS(dt.MarkPeer(dt.Endpoints("reviews", w.server.addr), w.server.addr), w.server.addr))
	cl.Add(xdsresource.SecretType, secret)
	w.client.activate(t, cl)
}

func get(t *testing.T, addr netip.AddrPort) (int, string) {
	t.Helper()
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := c.Get("http://" + addr.String() + "/")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestMTLSThroughSidecarPair(t *testing.T) {
	w := newMesh(t, false)
	if code, body := get(t, w.client.addr); code != 200 || body != "app" {
		t.Fatalf("client sidecar → server sidecar → app: %d %q", code, body)
	}
	if code, _ := get(t, w.client.addr); code != 200 {
		t.Fatalf("second request: %d", code)
	}
	// One pooled HTTP/2 connection carried both: one handshake each side.
	if hs := w.client.m.Counts().Handshakes[mtls.SideClient]; hs[mtls.ResultOK]+hs[mtls.ResultResumed] != 1 {
		t.Errorf("client handshakes %v, want exactly one for two requests", hs)
	}
	if n := w.server.m.Counts().Handshakes[mtls.SideServer][mtls.ResultOK]; n != 1 {
		t.Errorf("server handshakes ok = %d, want 1", n)
	}
}

func TestStrictRefusesPlaintext(t *testing.T) {
	w := newMesh(t, false)
	c, err := net.Dial("tcp", w.server.addr.String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	// Closed unread: EOF, or a reset since the request was not read.
	if b, err := io.ReadAll(c); len(b) != 0 || (err != nil && !errors.Is(err, syscall.ECONNRESET)) {
		t.Fatalf("plaintext to a STRICT port got %q, %v; want the connection closed", b, err)
	}
	testkit.Eventually(t, 5*time.Second, "plaintext refusal counted", func() bool {
		return w.server.srv.Stats().RefusedPlaintext == 1 && w.server.m.Counts().PlaintextRefused == 1
	})
}

func TestPermissiveAcceptsBoth(t *testing.T) {
	w := newMesh(t, true)
	if code, body := get(t, w.server.addr); code != 200 || body != "app" {
		t.Fatalf("plaintext to a PERMISSIVE port: %d %q", code, body)
	}
	if n := w.server.m.Counts().PlaintextAccepted; n != 1 {
		t.Errorf("plaintext accepted %d, want 1", n)
	}
	if code, _ := get(t, w.client.addr); code != 200 {
		t.Fatalf("mTLS to a PERMISSIVE port: %d", code)
	}
}

func TestClientFromAnotherCARefused(t *testing.T) {
	w := newMesh(t, false)
	other := mtlstest.NewCA(t, "another root")
	stranger := other.Workload(t, "cluster.local", "shop", "productpage")
	cfg := &tls.Config{MinVersion: tls.VersionTLS13, InsecureSkipVerify: true, Certificates: []tls.Certificate{stranger.Cert}}
	c, err := tls.Dial("tcp", w.server.addr.String(), cfg)
	if err == nil {
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		_, err = c.Read(make([]byte, 1)) // TLS 1.3: the server's refusal arrives after the client's Finished
		c.Close()
	}
	if err == nil || !strings.Contains(err.Error(), "bad certificate") {
		t.Fatalf("a client certified by another CA: %v, want the server's bad_certificate alert", err)
	}
	testkit.Eventually(t, 5*time.Second, "untrusted handshake counted", func() bool {
		return w.server.m.Counts().Handshakes[mtls.SideServer][mtls.ResultUntrusted] == 1
	})
}

func TestRevokedClientClosedAndRefused(t *testing.T) {
	w := newMesh(t, false)
	if code, _ := get(t, w.client.addr); code != 200 {
		t.Fatalf("before revocation: %d", code)
	}
	if w.server.m.Live() != 1 {
		t.Fatalf("server live mTLS connections %d, want the pooled one", w.server.m.Live())
	}
	w.push(t, 2, w.cliID) // one CRL push revoking the client
	testkit.Eventually(t, 5*time.Second, "revoked peer's connection closed", func() bool {
		return w.server.m.Live() == 0 && w.server.m.Counts().ClosedRevoked == 1
	})
	// The first request may go out on the client's pooled HTTP/2 connection
	// before its read loop has seen the server close it (a 503 with no new
	// handshake, under load): keep calling, never served, until a new
	// handshake was refused as revoked.
	testkit.Eventually(t, 5*time.Second, "revoked handshake counted", func() bool {
		if code, body := get(t, w.client.addr); code == 200 {
			t.Fatalf("a revoked client was served: %d %q", code, body)
		}
		return w.server.m.Counts().Handshakes[mtls.SideServer][mtls.ResultRevoked] >= 1
	})
}

func TestWrongServerIDRefusedByClient(t *testing.T) {
	w := newMesh(t, false)
	w.clientSANs = []string{"spiffe://cluster.local/ns/shop/sa/ratings"}
	w.push(t, 2)
	if code, body := get(t, w.client.addr); code == 200 {
		t.Fatalf("served by a server with the wrong SPIFFE ID: %d %q", code, body)
	}
	if n := w.client.m.Counts().Handshakes[mtls.SideClient][mtls.ResultUnexpectedPeer]; n < 1 {
		t.Errorf("client unexpected_peer %d, want ≥ 1", n)
	}
}

// TestMTLSTCPThroughSidecarPair: a TCP Service over mTLS (no ALPN): the client
// sidecar's tcp_proxy dials the server sidecar with mTLS, the server's TLS chain
// proxies the decrypted stream to the app; half-close travels as close_notify.
func TestMTLSTCPThroughSidecarPair(t *testing.T) {
	ca := mtlstest.NewCA(t, "mesh root")
	client := newSidecar(t, "outbound", ca.Workload(t, "cluster.local", "shop", "productpage"))
	server := newSidecar(t, "inbound", ca.Workload(t, "cluster.local", "shop", "db"))
	app := dt.ServeTCP(t, dt.Echo)
	secret := dt.RootCA(ca.RootPEM(), ca.CRLPEM(t, 1, time.Now().Add(-time.Minute), time.Hour))

	srv := dt.Resources{}
	srv.Add(xdsresource.ListenerType, dt.Listener("inbound", server.addr, dt.WithTransport(dt.TCPChain(0, "app"), xdsresource.TransportTLS)))
	srv.Add(xdsresource.ClusterType, dt.EDSCluster("app", dt.ClusterOpts{}))
	srv.Add(xdsresource.EndpointType, dt.Endpoints("app", app))
	srv.Add(xdsresource.SecretType, secret)
	server.activate(t, srv)

	cl := dt.Resources{}
	cl.Add(xdsresource.ListenerType, dt.Listener("outbound", client.addr, dt.TCPChain(0, "db")))
	c := dt.EDSCluster("db", dt.ClusterOpts{})
	c.TransportSocket = dt.UpstreamTLS("db", nil, "spiffe://cluster.local/ns/shop/sa/db")
	cl.Add(xdsresource.ClusterType, c)
	cl.Add(xdsresource.EndpointType, dt.MarkMTLS(dt.MarkPeer(dt.Endpoints("db", server.addr), server.addr), server.addr))
	cl.Add(xdsresource.SecretType, secret)
	client.activate(t, cl)
	client.start(t)
	server.start(t)

	conn, err := net.Dial("tcp", client.addr.String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(conn, "ping over mTLS"); err != nil {
		t.Fatal(err)
	}
	_ = conn.(*net.TCPConn).CloseWrite()
	got, err := io.ReadAll(conn)
	if err != nil || string(got) != "ping over mTLS" {
		t.Fatalf("echo through the pair: %q, %v", got, err)
	}
	if n := server.m.Counts().Handshakes[mtls.SideServer][mtls.ResultOK]; n != 1 {
		t.Errorf("server handshakes ok %d, want 1", n)
	}
}

func TestSniffTimeout(t *testing.T) {
	hp, tp, log := setup(t)
	var snap atomic.Pointer[dataplane.Config]
	for _, tc := range []struct {
		d  time.Duration
		ok bool
	}{{listener.MaxSniffTimeout, true}, {listener.MaxSniffTimeout + 1, false}, {-1, false}} {
		_, err := listener.New(listener.Config{Name: "x", Logger: log, Snapshot: &snap, HTTP: hp, TCP: tp, SniffTimeout: tc.d})
		if (err == nil) != tc.ok {
			t.Errorf("SniffTimeout %v: err %v, want ok=%v", tc.d, err, tc.ok)
		}
	}
	// A client that sends nothing to an mTLS port is closed at the timeout.
	ca := mtlstest.NewCA(t, "root")
	sc := newSidecar(t, "inbound", ca.Workload(t, "cluster.local", "shop", "reviews"))
	r := dt.Resources{}
	r.Add(xdsresource.ListenerType, dt.Listener("inbound", sc.addr, dt.WithTransport(dt.TCPChain(0, "app"), xdsresource.TransportTLS)))
	r.Add(xdsresource.ClusterType, dt.EDSCluster("app", dt.ClusterOpts{}))
	r.Add(xdsresource.EndpointType, dt.Endpoints("app", dt.MustAddr("127.0.0.1:9")))
	r.Add(xdsresource.SecretType, dt.RootCA(ca.RootPEM(), ca.CRLPEM(t, 1, time.Now().Add(-time.Minute), time.Hour)))
	sc.activate(t, r)
	srv, err := listener.New(listener.Config{Name: "inbound", Logger: log, Snapshot: &sc.snap, HTTP: hp, TCP: tp, MTLS: sc.m,
		SniffTimeout: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	addr, _ := dt.Serve(t, srv, sc.ln)
	c, err := net.Dial("tcp", addr.String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := c.Read(make([]byte, 1)); n != 0 || err == nil {
		t.Fatalf("silent client: read %d, %v; want the connection closed", n, err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("closed after %v, want about the 100ms sniff timeout", d)
	}
}
