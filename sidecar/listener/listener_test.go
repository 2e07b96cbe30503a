package listener_test

import (
	"bufio"
	"context"
	"errors"
	"net"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"go.uber.org/goleak"

	"github.com/weft-mesh/weft/sidecar/cluster"
	"github.com/weft-mesh/weft/sidecar/dataplane"
	"github.com/weft-mesh/weft/sidecar/httpproxy"
	"github.com/weft-mesh/weft/sidecar/listener"
	"github.com/weft-mesh/weft/sidecar/tcpproxy"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

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
	pool, err := cluster.NewPool(cluster.PoolConfig{MaxIdlePerHost: 1, IdleTimeout: time.Minute, BufferSize: 4096})
	if err != nil {
		t.Fatal(err)
	}
	hp, err := httpproxy.New(httpproxy.Config{Logger: log, Pool: pool})
	if err != nil {
		t.Fatal(err)
	}
	tp, err := tcpproxy.New(tcpproxy.Config{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { hp.Close(); pool.Close() })
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
	hp, tp, log := setup(t)
	var snap atomic.Pointer[dataplane.Config]
	cfg.Name, cfg.Logger, cfg.Snapshot, cfg.HTTP, cfg.TCP = "outbound", log, &snap, hp, tp
	s, err := listener.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, ln) }()
	return ln.Addr().String(), func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	}
}

func statusLine(t *testing.T, addr string) string {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write([]byte("GET / HTTP/1.1\r\nHost: a\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	l, _ := bufio.NewReader(c).ReadString('\n')
	return strings.TrimSpace(l)
}

func TestNoConfigAnswers503(t *testing.T) {
	addr, stop := serve(t, listener.Config{Destination: fixedDest{port: 9080}})
	defer stop()
	if got := statusLine(t, addr); got != "HTTP/1.1 503 Service Unavailable" {
		t.Errorf("status %q", got)
	}
}

func TestDestinationFailureClosesConn(t *testing.T) {
	addr, stop := serve(t, listener.Config{Destination: failDest{}})
	defer stop()
	if got := statusLine(t, addr); got != "" {
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
	deadline := time.Now().Add(5 * time.Second)
	for {
		c2, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		_ = c2.SetReadDeadline(time.Now().Add(2 * time.Second))
		_, rerr := c2.Read(make([]byte, 1))
		c2.Close()
		if rerr != nil && !errors.Is(rerr, context.DeadlineExceeded) && !isTimeout(rerr) {
			break // closed by the listener: over the limit
		}
		if time.Now().After(deadline) {
			t.Fatal("second connection never refused")
		}
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
