package listener_test

import (
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/weft-mesh/weft/sidecar/cluster"
	"github.com/weft-mesh/weft/sidecar/dataplane"
	dt "github.com/weft-mesh/weft/sidecar/dataplane/dataplanetest"
	"github.com/weft-mesh/weft/sidecar/httpproxy"
	"github.com/weft-mesh/weft/sidecar/listener"
	"github.com/weft-mesh/weft/sidecar/tcpproxy"
	"github.com/weft-mesh/weft/sidecar/xdsresource"
)

// dstOf answers the original destination the test sets (what SO_ORIGINAL_DST
// would say for a redirected connection).
type dstOf struct {
	p *atomic.Pointer[netip.AddrPort]
}

func (d dstOf) Destination(net.Conn) (netip.AddrPort, error) { return *d.p.Load(), nil }

// passthroughSidecar serves an "outbound" listener (xDS address
// 127.0.0.1:15001) whose default chain goes to def, with an HTTP chain for
// httpPort on 127.0.0.1 routed to PassthroughCluster; own are the sidecar's
// own addresses for the loop guard.
func passthroughSidecar(t *testing.T, def string, httpPort uint16, own ...netip.AddrPort) (addr string, dst *atomic.Pointer[netip.AddrPort], pt *cluster.Passthrough) {
	t.Helper()
	r := dt.Resources{}
	out := dt.Listener("outbound", dt.MustAddr("127.0.0.1:15001"),
		dt.WithPrefixRanges(dt.HTTPChain(uint32(httpPort), "r"), "127.0.0.1"))
	dt.WithDefault(out, dt.TCPChain(0, def))
	r.Add(xdsresource.ListenerType, out)
	r.Add(xdsresource.RouteType, dt.RouteConfig("r", dt.VirtualHost("all", []string{"*"}, dt.PrefixRoute("/", "PassthroughCluster", 5*time.Second))))
	r.Add(xdsresource.ClusterType, dt.OriginalDstCluster("PassthroughCluster", time.Second), dt.BlackHoleCluster("BlackHoleCluster"))
	cfg, err := r.Compile(dataplane.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var snap atomic.Pointer[dataplane.Config]
	snap.Store(cfg)
	pt = cluster.NewPassthrough(cluster.NewSelf(own, nil))
	log := hclog.NewNullLogger()
	pool, err := cluster.NewPool(cluster.PoolConfig{MaxIdlePerHost: 8, IdleTimeout: time.Minute, BufferSize: 16 << 10})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	hp, err := httpproxy.New(httpproxy.Config{Logger: log, Pool: pool, Passthrough: pt})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(hp.Close)
	tp, err := tcpproxy.New(tcpproxy.Config{Logger: log, Passthrough: pt})
	if err != nil {
		t.Fatal(err)
	}
	dst = &atomic.Pointer[netip.AddrPort]{}
	s, err := listener.New(listener.Config{Name: "outbound", Logger: log, Snapshot: &snap, HTTP: hp, TCP: tp, Destination: dstOf{dst}})
	if err != nil {
		t.Fatal(err)
	}
	a, _ := dt.Serve(t, s, nil)
	return a.String(), dst, pt
}

func setDst(p *atomic.Pointer[netip.AddrPort], s string) {
	a := netip.MustParseAddrPort(s)
	p.Store(&a)
}

// exchange writes msg, half-closes and reads everything back ("" when the
// sidecar closed the connection without forwarding).
func exchange(t *testing.T, addr, msg string) string {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	_, _ = io.WriteString(c, msg)
	_ = c.(*net.TCPConn).CloseWrite()
	b, _ := io.ReadAll(c)
	return string(b)
}

func httpUpstream(t *testing.T) netip.AddrPort {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "upstream saw host "+r.Host)
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close() })
	return netip.MustParseAddrPort(ln.Addr().String())
}

func TestPassthroughTCP(t *testing.T) {
	echo := dt.ServeTCP(t, dt.Echo)
	addr, dst, pt := passthroughSidecar(t, "PassthroughCluster", 1, dt.MustAddr("127.0.0.1:15006"))
	setDst(dst, echo.String()) // a destination no chain matches: the default chain
	if got := exchange(t, addr, "ping"); got != "ping" {
		t.Fatalf("passthrough to %s: got %q", echo, got)
	}
	// A destination that is the sidecar's own listener: refused, counted.
	setDst(dst, "127.0.0.1:15006")
	if got := exchange(t, addr, "ping"); got != "" {
		t.Errorf("loop: got %q, want the connection closed", got)
	}
	if s := pt.Stats(); s.Forwarded != 1 || s.Loops != 1 {
		t.Errorf("stats %+v", s)
	}
}

func TestPassthroughBlackHole(t *testing.T) {
	echo := dt.ServeTCP(t, dt.Echo)
	addr, dst, pt := passthroughSidecar(t, "BlackHoleCluster", 1)
	setDst(dst, echo.String())
	if got := exchange(t, addr, "ping"); got != "" {
		t.Errorf("black hole: got %q, want the connection closed", got)
	}
	if s := pt.Stats(); s.BlackHoled != 1 || s.Forwarded != 0 {
		t.Errorf("stats %+v", s)
	}
}

// TestPassthroughHTTP: an HTTP route to the ORIGINAL_DST cluster sends the
// request to the connection's original destination; in explicit mode (the
// destination is the listener itself) the loop guard refuses it.
func TestPassthroughHTTP(t *testing.T) {
	up := httpUpstream(t)
	addr, dst, pt := passthroughSidecar(t, "PassthroughCluster", up.Port(), dt.MustAddr("127.0.0.1:15001"))
	setDst(dst, up.String()) // intercepted: chain by port and IP, route, original destination
	req := "GET / HTTP/1.1\r\nHost: example.com\r\nConnection: close\r\n\r\n"
	got := exchange(t, addr, req)
	if !strings.HasPrefix(got, "HTTP/1.1 200 ") || !strings.HasSuffix(got, "upstream saw host example.com") {
		t.Fatalf("intercepted HTTP passthrough: %q", got)
	}
	// Explicit: the destination is the listener's own address; Host's port
	// picks the HTTP chain, whose route's original destination would be the
	// sidecar itself.
	setDst(dst, "127.0.0.1:15001")
	got = exchange(t, addr, "GET / HTTP/1.1\r\nHost: 127.0.0.1:"+strconv.Itoa(int(up.Port()))+"\r\nConnection: close\r\n\r\n")
	if !strings.HasPrefix(got, "HTTP/1.1 503 ") {
		t.Errorf("explicit request to the passthrough cluster: %q, want 503", got)
	}
	if s := pt.Stats(); s.Forwarded != 1 || s.Loops == 0 {
		t.Errorf("stats %+v", s)
	}
}

// TestPassthroughHTTP2: an HTTP/2 (h2c) client's request routed to the
// ORIGINAL_DST cluster goes to the original destination too.
func TestPassthroughHTTP2(t *testing.T) {
	up := httpUpstream(t)
	addr, dst, pt := passthroughSidecar(t, "PassthroughCluster", up.Port())
	setDst(dst, up.String())
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	tr := &http.Transport{Protocols: &p}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Timeout: 5 * time.Second, Transport: tr}
	req, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/", nil)
	req.Host = "example.com"
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.ProtoMajor != 2 || resp.StatusCode != 200 || string(b) != "upstream saw host example.com" {
		t.Fatalf("h2c passthrough: %s %d %q", resp.Proto, resp.StatusCode, b)
	}
	if s := pt.Stats(); s.Forwarded != 1 {
		t.Errorf("stats %+v", s)
	}
}
