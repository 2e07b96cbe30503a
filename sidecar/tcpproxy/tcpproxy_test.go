package tcpproxy_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"go.uber.org/goleak"

	"github.com/weft-mesh/weft/sidecar/circuitbreak"
	"github.com/weft-mesh/weft/sidecar/cluster"
	"github.com/weft-mesh/weft/sidecar/dataplane"
	dt "github.com/weft-mesh/weft/sidecar/dataplane/dataplanetest"
	"github.com/weft-mesh/weft/sidecar/tcpproxy"
	"github.com/weft-mesh/weft/sidecar/xdsresource"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func route(t *testing.T, upstream netip.AddrPort, maxConns uint32, idle time.Duration) *dataplane.TCPRoute {
	t.Helper()
	r := dt.Resources{}
	chain := dt.TCPChain(0, "db")
	if idle > 0 {
		chain = dt.TCPChainIdle(0, "db", idle)
	}
	r.Add(xdsresource.ListenerType, dt.Listener("tcp", dt.MustAddr("127.0.0.1:1"), chain))
	r.Add(xdsresource.ClusterType, dt.EDSCluster("db", dt.ClusterOpts{MaxConns: maxConns, Connect: time.Second}))
	r.Add(xdsresource.EndpointType, dt.Endpoints("db", upstream))
	cfg, err := r.Compile(dataplane.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return cfg.Listener("tcp").Chain(1).TCP
}

func newProxy(t *testing.T) *tcpproxy.Proxy {
	p, err := tcpproxy.New(tcpproxy.Config{Logger: hclog.NewNullLogger()})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// echoServer echoes until the peer half-closes.
func echoServer(t *testing.T) netip.AddrPort { return dt.ServeTCP(t, dt.Echo) }

func TestConnectFailureNamesCluster(t *testing.T) {
	// A loopback address of its own: on 127.0.0.1 the freed port could become
	// another test's ephemeral port and accept the connection.
	ln, err := net.Listen("tcp", "127.77.100.3:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := netip.MustParseAddrPort(ln.Addr().String())
	ln.Close()
	a, b := net.Pipe()
	defer b.Close()
	err = newProxy(t).Serve(context.Background(), a, route(t, dead, 0, 0), netip.Addr{})
	if err == nil || !strings.HasPrefix(err.Error(), `cluster "db": connect `+dead.String()+": ") {
		t.Errorf("got %v, want connect error naming cluster db", err)
	}
}

func TestMaxConnections(t *testing.T) {
	up := echoServer(t)
	rt := route(t, up, 1, 0)
	p := newProxy(t)
	c1, s1 := net.Pipe()
	done := make(chan error, 1)
	go func() { done <- p.Serve(context.Background(), s1, rt, netip.Addr{}) }()
	// The first stream is established once an echo comes back.
	if _, err := c1.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(c1, make([]byte, 1)); err != nil {
		t.Fatal(err)
	}
	c2, s2 := net.Pipe()
	defer c2.Close()
	err := p.Serve(context.Background(), s2, rt, netip.Addr{})
	if l, ok := cluster.Overflowed(err); !ok || l != circuitbreak.MaxConnections || !errors.Is(err, cluster.ErrOverflow) ||
		err.Error() != `cluster "db": upstream overflow: maxConnections` {
		t.Errorf("second stream: %v, want overflow", err)
	}
	// Refused: the client's connection is closed, nothing was read from it.
	if _, err := c2.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
		t.Errorf("refused stream read: %v, want EOF (closed)", err)
	}
	if n := rt.Pick(0).Breaker.Overflows(circuitbreak.MaxConnections); n != 1 {
		t.Errorf("maxConnections overflows %d, want 1", n)
	}
	c1.Close()
	if err := <-done; err != nil {
		t.Errorf("first stream: %v", err)
	}
}

func TestIdleTimeoutAndCancel(t *testing.T) {
	up := echoServer(t)
	p := newProxy(t)
	c, s := net.Pipe()
	defer c.Close()
	start := time.Now()
	err := p.Serve(context.Background(), s, route(t, up, 0, 100*time.Millisecond), netip.Addr{})
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("idle stream lasted %v", d)
	}
	if err == nil {
		t.Error("idle timeout: want an error")
	}
	// Context cancellation ends a busy-less stream at once.
	c2, s2 := net.Pipe()
	defer c2.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Serve(ctx, s2, route(t, up, 0, 0), netip.Addr{}) }()
	if _, err := c2.Write([]byte("y")); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(c2, make([]byte, 1)); err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("cancelled stream: %v", err)
	}
}
