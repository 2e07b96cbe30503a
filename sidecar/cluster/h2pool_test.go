package cluster_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/weft-mesh/weft/sidecar/circuitbreak"
	"github.com/weft-mesh/weft/sidecar/cluster"
	"github.com/weft-mesh/weft/sidecar/h2client"
	"github.com/weft-mesh/weft/tools/testkit"
)

// h2Server is a real h2c (prior knowledge) server that counts TCP connections and
// holds each request until release is closed.
type h2Server struct {
	addr    netip.AddrPort
	srv     *http.Server
	conns   atomic.Int64 // connections accepted
	arrived chan struct{}
	release chan struct{}
	done    chan struct{}
}

func newH2Server(t *testing.T, maxStreams uint32) *h2Server {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &h2Server{addr: netip.MustParseAddrPort(ln.Addr().String()), arrived: make(chan struct{}, 1024), release: make(chan struct{}), done: make(chan struct{})}
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	s.srv = &http.Server{
		Protocols: &p,
		HTTP2:     &http.HTTP2Config{MaxConcurrentStreams: int(maxStreams)},
		ConnState: func(_ net.Conn, st http.ConnState) {
			if st == http.StateNew {
				s.conns.Add(1)
			}
		},
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.ProtoMajor != 2 {
				http.Error(w, "want HTTP/2", http.StatusHTTPVersionNotSupported)
				return
			}
			if r.URL.Path == "/warm" {
				return
			}
			s.arrived <- struct{}{}
			select {
			case <-s.release:
			case <-r.Context().Done():
			}
			io.WriteString(w, "ok")
		}),
	}
	go func() { defer close(s.done); _ = s.srv.Serve(ln) }()
	t.Cleanup(func() { s.srv.Close(); <-s.done })
	return s
}

func h2Cluster(t *testing.T, s *h2Server, l circuitbreak.Limits, connect time.Duration) (*cluster.Cluster, *cluster.Endpoint) {
	t.Helper()
	e := cluster.NewEndpoint(s.addr, 1, true)
	e.Peer = true
	c, err := cluster.New(cluster.Spec{Name: "peer", ConnectTimeout: connect, QueueTimeout: connect, Limits: l, Endpoints: []*cluster.Endpoint{e}})
	if err != nil {
		t.Fatal(err)
	}
	return c, e
}

// h2clientFlag picks the pools' HTTP/2 client (H2Config.Client; "" the
// default): go test ./sidecar/cluster -args -h2client=std.
var h2clientFlag = flag.String("h2client", "", "HTTP/2 client of the tests' pools: std or weft (default: cluster.DefaultH2Client)")

func newH2Pool(t *testing.T, idle time.Duration) *cluster.H2Pool {
	t.Helper()
	p, err := cluster.NewH2Pool(cluster.H2Config{IdleTimeout: idle, Client: *h2clientFlag})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// warm sends one request the server answers at once, so the pool holds a
// connection that has seen the server's SETTINGS (until then a client assumes
// 100 concurrent streams and may queue streams on the first connection).
func warm(t *testing.T, p *cluster.H2Pool, c *cluster.Cluster, e *cluster.Endpoint) {
	t.Helper()
	collect(t, []<-chan error{sendPath(t.Context(), p, c, e, "/warm")})
}

// send gets a stream and starts a request on it; the result arrives on the channel.
func send(ctx context.Context, p *cluster.H2Pool, c *cluster.Cluster, e *cluster.Endpoint) <-chan error {
	return sendPath(ctx, p, c, e, "/")
}

func sendPath(ctx context.Context, p *cluster.H2Pool, c *cluster.Cluster, e *cluster.Endpoint, path string) <-chan error {
	ch := make(chan error, 1)
	go func() {
		cc, err := p.Get(ctx, c, e)
		if err != nil {
			ch <- err
			return
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+e.Address()+path, nil)
		resp, err := cc.RoundTrip(req)
		if err == nil {
			_, err = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		ch <- err
	}()
	return ch
}

func waitArrived(t *testing.T, s *h2Server, n int) {
	t.Helper()
	deadline := time.After(5 * time.Second)
	for range n {
		select {
		case <-s.arrived:
		case <-deadline:
			t.Fatalf("requests did not reach the server")
		}
	}
}

func collect(t *testing.T, chs []<-chan error) {
	t.Helper()
	for i, ch := range chs {
		select {
		case err := <-ch:
			if err != nil {
				t.Errorf("request %d: %v", i, err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("request %d did not finish", i)
		}
	}
}

// TestH2PoolMultiplexes: concurrent requests share connections; a new one is
// dialled only when the peer's max concurrent streams is reached. (Until a new
// connection has read the peer's SETTINGS, Go's client assumes 100 streams, so
// the cases keep each burst within one new connection's real limit.)
func TestH2PoolMultiplexes(t *testing.T) {
	for _, tc := range []struct {
		name       string
		maxStreams uint32
		requests   int
		wantConns  int64
	}{
		{"one connection for all", 250, 20, 1},
		{"new connection per 2 streams", 2, 4, 2},
		{"exactly full", 4, 8, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newH2Server(t, tc.maxStreams)
			p := newH2Pool(t, time.Minute)
			c, e := h2Cluster(t, s, circuitbreak.Limits{MaxConnections: 100, MaxPendingRequests: 100, MaxRequests: 100}, time.Second)
			warm(t, p, c, e)
			var chs []<-chan error
			for range tc.requests {
				chs = append(chs, send(t.Context(), p, c, e))
			}
			waitArrived(t, s, tc.requests) // all in flight at once
			if got := s.conns.Load(); got != tc.wantConns {
				t.Errorf("server saw %d connections, want %d", got, tc.wantConns)
			}
			if got := c.Breaker.InUse(circuitbreak.Connections); got != tc.wantConns {
				t.Errorf("breaker counts %d connections, want %d", got, tc.wantConns)
			}
			close(s.release)
			collect(t, chs)
		})
	}
}

// TestH2PoolMaxConnections: at the cluster's maxConnections, requests wait as
// pending for a stream; beyond maxPendingRequests they overflow at once, and a
// waiter gives up after the queue timeout.
func TestH2PoolMaxConnections(t *testing.T) {
	s := newH2Server(t, 2)
	p := newH2Pool(t, time.Minute)
	c, e := h2Cluster(t, s, circuitbreak.Limits{MaxConnections: 1, MaxPendingRequests: 1, MaxRequests: 100}, 300*time.Millisecond)
	warm(t, p, c, e)
	first := []<-chan error{send(t.Context(), p, c, e), send(t.Context(), p, c, e)}
	waitArrived(t, s, 2) // the only connection is full
	waiter := send(t.Context(), p, c, e)
	testkit.Eventually(t, 10*time.Second, "a pending request", func() bool { return c.Breaker.InUse(circuitbreak.Pending) == 1 })
	if _, err := p.Get(t.Context(), c, e); !errors.Is(err, cluster.ErrOverflow) {
		t.Errorf("Get beyond max pending: err = %v, want ErrOverflow", err)
	}
	if err := <-waiter; !errors.Is(err, cluster.ErrOverflow) {
		t.Errorf("waiter past the queue timeout: err = %v, want ErrOverflow", err)
	}
	// A waiter proceeds as soon as a stream frees up.
	waiter = send(t.Context(), p, c, e)
	testkit.Eventually(t, 10*time.Second, "a pending request", func() bool { return c.Breaker.InUse(circuitbreak.Pending) == 1 })
	s.release <- struct{}{}
	waitArrived(t, s, 1)
	close(s.release)
	collect(t, append(first, waiter))
	if got := s.conns.Load(); got != 1 {
		t.Errorf("server saw %d connections, want 1 (maxConnections)", got)
	}
}

// TestH2PoolConnectionLifecycle: a connection closed by the peer or idle past
// IdleTimeout leaves the pool and frees its slot; the next request dials anew.
func TestH2PoolConnectionLifecycle(t *testing.T) {
	s := newH2Server(t, 100)
	close(s.release)
	p := newH2Pool(t, 200*time.Millisecond)
	c, e := h2Cluster(t, s, circuitbreak.Limits{MaxConnections: 1, MaxPendingRequests: 1, MaxRequests: 100}, time.Second)
	collect(t, []<-chan error{send(t.Context(), p, c, e)})
	waitArrived(t, s, 1)
	if p.Conns(e.Address()) != 1 {
		t.Fatalf("Conns = %d after a request, want 1", p.Conns(e.Address()))
	}
	testkit.Eventually(t, 10*time.Second, "the idle connection to close", func() bool {
		return p.Conns(e.Address()) == 0 && c.Breaker.InUse(circuitbreak.Connections) == 0
	})
	collect(t, []<-chan error{send(t.Context(), p, c, e)})
	waitArrived(t, s, 1)
	if got := s.conns.Load(); got != 2 {
		t.Errorf("server saw %d connections, want 2", got)
	}
	// The peer goes away: the slot is freed, and Get reports the connect error.
	s.srv.Close()
	testkit.Eventually(t, 10*time.Second, "the closed connection to leave the pool", func() bool { return c.Breaker.InUse(circuitbreak.Connections) == 0 })
	if _, err := p.Get(t.Context(), c, e); err == nil || errors.Is(err, cluster.ErrOverflow) {
		t.Errorf("Get to a closed peer: err = %v, want a connect error", err)
	}
	p.Close()
	if _, err := p.Get(t.Context(), c, e); !errors.Is(err, cluster.ErrPoolClosed) {
		t.Errorf("Get after Close: err = %v, want ErrPoolClosed", err)
	}
}

func TestNewH2PoolRejects(t *testing.T) {
	for _, cfg := range []cluster.H2Config{
		{},
		{IdleTimeout: time.Second, PingTimeout: -1},
		{IdleTimeout: time.Second, MaxReadFrameSize: 1024},
		{IdleTimeout: time.Second, MaxReadFrameSize: 1 << 24},
		{IdleTimeout: time.Second, Client: "nghttp2"},
	} {
		if _, err := cluster.NewH2Pool(cfg); err == nil {
			t.Errorf("NewH2Pool(%+v) accepted", cfg)
		}
	}
}

func TestUnprocessed(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{nil, false},
		{http2.StreamError{StreamID: 3, Code: http2.ErrCodeRefusedStream}, true},
		{fmt.Errorf("round trip: %w", http2.StreamError{StreamID: 3, Code: http2.ErrCodeRefusedStream}), true},
		{http2.StreamError{StreamID: 3, Code: http2.ErrCodeCancel}, false},
		{h2client.ErrGoAway, true},
		{fmt.Errorf("round trip: %w", h2client.ErrUnusable), true},
		{errors.New("http2: Transport received Server's graceful shutdown GOAWAY"), true},
		{fmt.Errorf("x: %w", errors.New("http2: client conn not usable")), true},
		{errors.New("http2: client connection lost"), false},
		{io.ErrUnexpectedEOF, false},
	} {
		if got := cluster.Unprocessed(tc.err); got != tc.want {
			t.Errorf("Unprocessed(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

// At maxConnections a request for one address closes a connection of the same
// Service to another address that has no stream in flight, rather than wait for
// it to idle out; a connection with a stream in flight is left alone, and the
// waiter proceeds once its stream ends.
func TestH2PoolMakesRoomAcrossAddresses(t *testing.T) {
	a, b := newH2Server(t, 100), newH2Server(t, 100)
	p := newH2Pool(t, time.Minute)
	ea, eb := cluster.NewEndpoint(a.addr, 1, true), cluster.NewEndpoint(b.addr, 1, true)
	ea.Peer, eb.Peer = true, true
	c, err := cluster.New(cluster.Spec{Name: "peer", ConnectTimeout: time.Second, QueueTimeout: 10 * time.Second,
		Limits:    circuitbreak.Limits{MaxConnections: 1, MaxPendingRequests: 4, MaxRequests: 100},
		Endpoints: []*cluster.Endpoint{ea, eb}})
	if err != nil {
		t.Fatal(err)
	}
	warm(t, p, c, eb) // b's connection stays open, no stream in flight
	start := time.Now()
	first := send(t.Context(), p, c, ea)
	waitArrived(t, a, 1) // it took b's slot
	if took := time.Since(start); took >= 5*time.Second {
		t.Errorf("took %v: waited instead of closing b's idle connection", took)
	}
	testkit.Eventually(t, 5*time.Second, "b's connection closed", func() bool { return p.Conns(eb.Address()) == 0 })
	// a's connection has a stream in flight: a request for b waits for it.
	second := send(t.Context(), p, c, eb)
	testkit.Eventually(t, 5*time.Second, "b's request pending", func() bool { return c.Breaker.InUse(circuitbreak.Pending) == 1 })
	if p.Conns(ea.Address()) != 1 {
		t.Fatal("a connection with a stream in flight was closed")
	}
	a.release <- struct{}{} // a's stream ends: its connection can go
	collect(t, []<-chan error{first})
	waitArrived(t, b, 1)
	close(b.release)
	collect(t, []<-chan error{second})
	close(a.release)
	if n := c.Breaker.InUse(circuitbreak.Connections); n != 1 {
		t.Errorf("connections in use %d, want 1", n)
	}
	if a.conns.Load() != 1 || b.conns.Load() != 2 {
		t.Errorf("connections seen by a %d, b %d; want 1, 2", a.conns.Load(), b.conns.Load())
	}
}
