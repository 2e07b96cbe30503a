package listener_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"go.uber.org/goleak"
	"golang.org/x/net/http2"

	"github.com/weft-mesh/weft/conformance/pods"
	"github.com/weft-mesh/weft/sidecar/dataplane"
	dt "github.com/weft-mesh/weft/sidecar/dataplane/dataplanetest"
	"github.com/weft-mesh/weft/sidecar/httpproxy"
	"github.com/weft-mesh/weft/sidecar/listener"
	"github.com/weft-mesh/weft/sidecar/overload"
	"github.com/weft-mesh/weft/sidecar/tcpproxy"
	"github.com/weft-mesh/weft/tools/testkit"
)

func TestMain(m *testing.M) {
	if err := pods.Sweep(); err != nil { // what a killed run of these tests left
		fmt.Fprintln(os.Stderr, err)
	}
	goleak.VerifyTestMain(m)
}

type fixedDest struct{ port uint16 }

func (d fixedDest) Destination(c net.Conn) (netip.AddrPort, error) {
	return netip.AddrPortFrom(netip.MustParseAddr("10.9.9.9"), d.port), nil
}

type failDest struct{}

func (failDest) Destination(net.Conn) (netip.AddrPort, error) {
	return netip.AddrPort{}, errors.New("no original destination")
}

func setup(t *testing.T) (*httpproxy.Proxy, *tcpproxy.Proxy, hclog.Logger) {
	t.Helper()
	log := hclog.NewNullLogger()
	hp, tp := dt.Proxies(t, log, nil)
	return hp, tp, log
}

func TestNewChecksConfig(t *testing.T) {
	hp, tp, log := setup(t)
	var snap atomic.Pointer[dataplane.Config]
	tests := []struct {
		name string
		cfg  listener.Config
		want string
	}{
		{"no name", listener.Config{Logger: log, Snapshot: &snap, HTTP: hp, TCP: tp}, "listener: Name is required"},
		{"no logger", listener.Config{Name: "x", Snapshot: &snap, HTTP: hp, TCP: tp}, "listener: Logger is required"},
		{"no snapshot", listener.Config{Name: "x", Logger: log, HTTP: hp, TCP: tp}, "listener: Snapshot is required"},
		{"no proxies", listener.Config{Name: "x", Logger: log, Snapshot: &snap}, "listener: HTTP and TCP proxies are required"},
		{"negative max", listener.Config{Name: "x", Logger: log, Snapshot: &snap, HTTP: hp, TCP: tp, MaxConnections: -1}, "listener: MaxConnections must not be negative"},
	}
	for _, tc := range tests {
		if _, err := listener.New(tc.cfg); err == nil || err.Error() != tc.want {
			t.Errorf("%s: got %v, want %q", tc.name, err, tc.want)
		}
	}
}

// serve runs a listener with no active config; HTTP requests get 503 with a reason.
func serve(t *testing.T, cfg listener.Config) (addr string, stop func()) {
	t.Helper()
	_, addr, stop = serveServer(t, cfg)
	return addr, stop
}

// serveServer is serve returning the Server too.
func serveServer(t *testing.T, cfg listener.Config) (srv *listener.Server, addr string, stop func()) {
	t.Helper()
	hp, tp, log := setup(t)
	var snap atomic.Pointer[dataplane.Config]
	cfg.Name, cfg.Logger, cfg.Snapshot, cfg.HTTP, cfg.TCP = "outbound", log, &snap, hp, tp
	s, err := listener.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	a, stop := dt.Serve(t, s, nil)
	return s, a.String(), stop
}

func TestNoConfigAnswers503(t *testing.T) {
	addr, stop := serve(t, listener.Config{Destination: fixedDest{port: 9080}})
	defer stop()
	if got := dt.StatusLine(t, addr, "GET / HTTP/1.1\r\nHost: a\r\n\r\n"); got != "HTTP/1.1 503 Service Unavailable" {
		t.Errorf("status %q", got)
	}
}

func TestDestinationFailureClosesConn(t *testing.T) {
	addr, stop := serve(t, listener.Config{Destination: failDest{}})
	defer stop()
	if got := dt.StatusLine(t, addr, "GET / HTTP/1.1\r\nHost: a\r\n\r\n"); got != "" {
		t.Errorf("want connection closed without a response, got %q", got)
	}
}

// TestShutdownClosesIdleConns: ending ctx closes open client connections and Serve
// returns only after their handlers have finished.
func TestShutdownClosesIdleConns(t *testing.T) {
	addr, stop := serve(t, listener.Config{})
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	stop()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Error("connection still open after shutdown")
	}
}

func TestMaxConnections(t *testing.T) {
	addr, stop := serve(t, listener.Config{MaxConnections: 1})
	defer stop()
	c1, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c1.Close()
	// c1 holds the only slot once accepted; poll until a second connection is refused.
	testkit.Wait(t, 5*time.Second, func() error {
		c2, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		_ = c2.SetReadDeadline(time.Now().Add(2 * time.Second))
		_, rerr := c2.Read(make([]byte, 1))
		c2.Close()
		if rerr == nil || errors.Is(rerr, context.DeadlineExceeded) || isTimeout(rerr) {
			return fmt.Errorf("second connection not refused (read: %v)", rerr)
		}
		return nil // closed by the listener: over the limit
	})
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// h2cConn opens a prior-knowledge HTTP/2 connection and completes one request
// (503: no config), so the sidecar has handed it to its HTTP/2 server.
func h2cConn(t *testing.T, addr string) (*http.Transport, func()) {
	t.Helper()
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	tr := &http.Transport{Protocols: &p}
	resp, err := (&http.Client{Transport: tr, Timeout: 5 * time.Second}).Get("http://" + addr + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.ProtoMajor != 2 || resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("h2c request: %s %d, want HTTP/2 503", resp.Proto, resp.StatusCode)
	}
	return tr, tr.CloseIdleConnections
}

// refused reports whether a new connection is closed by the listener at once.
func refused(t *testing.T, addr string) bool {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	_, rerr := c.Read(make([]byte, 1))
	return rerr != nil && !isTimeout(rerr)
}

// Finding 8: an HTTP/2 connection stays counted after the hand-off to the HTTP/2
// server until it really closes.
func TestHTTP2ConnectionCountsUntilClosed(t *testing.T) {
	s, addr, stop := serveServer(t, listener.Config{MaxConnections: 1})
	defer stop()
	_, closeH2 := h2cConn(t, addr)
	if got := s.Stats().Connections; got != 1 {
		t.Fatalf("open connections with one idle h2c connection: %d, want 1", got)
	}
	if !refused(t, addr) {
		t.Fatal("a second connection was accepted while the h2c connection held the only slot")
	}
	closeH2()
	testkit.Eventually(t, 5*time.Second, "the h2c connection's slot freed", func() bool { return s.Stats().Connections == 0 })
	if refused(t, addr) {
		t.Fatal("connection refused after the h2c connection closed")
	}
	if st := s.Stats(); st.RefusedListener != 1 || st.RefusedSidecar != 0 {
		t.Fatalf("refusals %+v, want 1 by the listener's limit", st)
	}
}

// Finding 8: shutdown closes HTTP/2 connections too, and Serve waits for them.
func TestShutdownClosesHTTP2Conns(t *testing.T) {
	s, addr, stop := serveServer(t, listener.Config{})
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(c, c)
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	// The server's SETTINGS: the HTTP/2 server has the connection.
	if f, err := fr.ReadFrame(); err != nil {
		t.Fatal(err)
	} else if _, ok := f.(*http2.SettingsFrame); !ok {
		t.Fatalf("first frame %v, want SETTINGS", f)
	}
	if n := s.Stats().Connections; n != 1 {
		t.Fatalf("connections %d after the hand-off, want 1", n)
	}
	stop()
	if n := s.Stats().Connections; n != 0 {
		t.Errorf("Serve returned with %d connections still counted", n)
	}
	if _, err := io.Copy(io.Discard, c); err != nil {
		t.Errorf("h2c connection not closed by shutdown: %v", err)
	}
}

// The sidecar-wide bound is shared: two listeners with room of their own refuse
// once the shared one is full, counted under the shared reason.
func TestSharedConnectionLimit(t *testing.T) {
	shared, err := overload.NewLimit("sidecar", 2)
	if err != nil {
		t.Fatal(err)
	}
	s1, a1, stop1 := serveServer(t, listener.Config{MaxConnections: 5, Connections: shared})
	defer stop1()
	s2, a2, stop2 := serveServer(t, listener.Config{MaxConnections: 5, Connections: shared})
	defer stop2()
	var held []net.Conn
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	for _, a := range []string{a1, a2} {
		c, err := net.Dial("tcp", a)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
	}
	testkit.Eventually(t, 5*time.Second, "both connections accepted", func() bool { return shared.Current() == 2 })
	if !refused(t, a2) {
		t.Fatal("third connection (one past the shared bound) accepted")
	}
	if st := s2.Stats(); st.RefusedSidecar != 1 || st.RefusedListener != 0 || st.Connections != 1 {
		t.Fatalf("listener 2 stats %+v, want one shared refusal and 1 open", st)
	}
	if st := s1.Stats(); st.RefusedSidecar != 0 || st.Connections != 1 {
		t.Fatalf("listener 1 stats %+v", st)
	}
	held[0].Close()
	testkit.Eventually(t, 5*time.Second, "slot freed", func() bool { return shared.Current() == 1 })
	if refused(t, a2) {
		t.Fatal("refused with a shared slot free")
	}
}

func TestMaxConnectionsAtBoundAndOnePast(t *testing.T) {
	const bound = 3
	s, addr, stop := serveServer(t, listener.Config{MaxConnections: bound})
	defer stop()
	for range bound {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
	}
	testkit.Eventually(t, 5*time.Second, "the bound's connections accepted", func() bool { return s.Stats().Connections == bound })
	if !refused(t, addr) {
		t.Fatal("connection one past the bound accepted")
	}
	if st := s.Stats(); st.MaxConnections != bound || st.RefusedListener != 1 || st.MaxRequests != listener.DefaultMaxRequests {
		t.Fatalf("stats %+v", st)
	}
}

func TestConfigBoundsAtBoundAndOnePast(t *testing.T) {
	hp, tp, log := setup(t)
	var snap atomic.Pointer[dataplane.Config]
	for _, tc := range []struct {
		name string
		edit func(*listener.Config)
		ok   bool
	}{
		{"drain at max", func(c *listener.Config) { c.DrainTimeout = listener.MaxDrainTimeout }, true},
		{"drain past max", func(c *listener.Config) { c.DrainTimeout = listener.MaxDrainTimeout + 1 }, false},
		{"drain negative", func(c *listener.Config) { c.DrainTimeout = -1 }, false},
		{"connections at max", func(c *listener.Config) { c.MaxConnections = overload.MaxLimit }, true},
		{"connections past max", func(c *listener.Config) { c.MaxConnections = overload.MaxLimit + 1 }, false},
		{"requests at max", func(c *listener.Config) { c.MaxRequests = overload.MaxLimit }, true},
		{"requests past max", func(c *listener.Config) { c.MaxRequests = overload.MaxLimit + 1 }, false},
		{"requests negative", func(c *listener.Config) { c.MaxRequests = -1 }, false},
	} {
		cfg := listener.Config{Name: "x", Logger: log, Snapshot: &snap, HTTP: hp, TCP: tp}
		tc.edit(&cfg)
		if _, err := listener.New(cfg); (err == nil) != tc.ok {
			t.Errorf("%s: %v, want ok=%v", tc.name, err, tc.ok)
		}
	}
}
