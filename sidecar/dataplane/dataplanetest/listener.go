package dataplanetest

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/weft-mesh/weft/sidecar/cluster"
	"github.com/weft-mesh/weft/sidecar/httpproxy"
	"github.com/weft-mesh/weft/sidecar/listener"
	"github.com/weft-mesh/weft/sidecar/tcpproxy"
)

// Proxies are an HTTP proxy (default settings but degraded, which may be nil)
// over a fresh upstream pool and a TCP proxy, as a listener.Config wants them;
// the proxies and the pool are closed when the test ends.
func Proxies(tb testing.TB, log hclog.Logger, degraded httpproxy.DegradedFunc) (*httpproxy.Proxy, *tcpproxy.Proxy) {
	tb.Helper()
	pool, err := cluster.NewPool(cluster.PoolConfig{MaxIdlePerHost: 8, IdleTimeout: time.Minute, BufferSize: 16 << 10})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(pool.Close)
	hp, err := httpproxy.New(httpproxy.Config{Logger: log, Pool: pool, Degraded: degraded})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(hp.Close)
	tp, err := tcpproxy.New(tcpproxy.Config{Logger: log})
	if err != nil {
		tb.Fatal(err)
	}
	return hp, tp
}

// Serve runs srv on ln (nil: a fresh loopback port) until stop is called or the
// test ends: then Serve's context is cancelled and Serve awaited; an error from
// Serve fails the test. It returns the address served.
func Serve(tb testing.TB, srv *listener.Server, ln net.Listener) (addr netip.AddrPort, stop func()) {
	tb.Helper()
	if ln == nil {
		var err error
		if ln, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			tb.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln) }()
	stop = sync.OnceFunc(func() {
		cancel()
		if err := <-done; err != nil {
			tb.Errorf("Serve: %v", err)
		}
	})
	tb.Cleanup(stop)
	return netip.MustParseAddrPort(ln.Addr().String()), stop
}

// StatusLine sends req on a new connection to addr and returns the status line
// of the answer ("" if none came within 5s).
func StatusLine(tb testing.TB, addr, req string) string {
	tb.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		tb.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, req); err != nil {
		tb.Fatal(err)
	}
	l, _ := bufio.NewReader(c).ReadString('\n')
	return strings.TrimSpace(l)
}
