// Package listener accepts connections for one configured listener, finds each
// connection's original destination, and hands it to the HTTP or TCP proxy chosen by
// the active config's filter chain.
package listener

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/spiffe/go-spiffe/v2/spiffeid"

	"github.com/weft-mesh/weft/sidecar/dataplane"
	"github.com/weft-mesh/weft/sidecar/httpproxy"
	"github.com/weft-mesh/weft/sidecar/mtls"
	"github.com/weft-mesh/weft/sidecar/overload"
	"github.com/weft-mesh/weft/sidecar/tcpproxy"
)

// Destination reports where a connection was originally headed. In explicit mode that
// is the listener's own address (LocalAddr); with interception it will come from
// SO_ORIGINAL_DST or an eBPF map, behind this same interface.
type Destination interface {
	Destination(c net.Conn) (netip.AddrPort, error)
}

// LocalAddr is the explicit-mode Destination.
type LocalAddr struct{}

// Destination returns c's local address.
func (LocalAddr) Destination(c net.Conn) (netip.AddrPort, error) {
	a, ok := c.LocalAddr().(*net.TCPAddr)
	if !ok {
		return netip.AddrPort{}, fmt.Errorf("listener: local address %v is not TCP", c.LocalAddr())
	}
	return a.AddrPort(), nil
}

// Config configures a Server.
type Config struct {
	Name        string // the xDS listener name to route with ("outbound", "inbound")
	Logger      hclog.Logger
	Snapshot    httpproxy.Snapshot
	HTTP        *httpproxy.Proxy
	TCP         *tcpproxy.Proxy
	Destination Destination // nil: LocalAddr
	// MaxConnections bounds this listener's concurrent client connections (HTTP/1.1,
	// HTTP/2 and TCP alike, each counted until it closes); further accepts are
	// closed at once. 0 means DefaultMaxConnections; at most overload.MaxLimit.
	MaxConnections int
	// Connections, when set, is a bound shared with the sidecar's other listeners:
	// a connection needs a slot in it as well as in MaxConnections.
	Connections *overload.Limit
	// MaxRequests bounds this listener's concurrent HTTP requests (HTTP/1.1
	// requests and HTTP/2 streams together); further requests are answered 503
	// with header x-weft-overflow: requests. 0 means DefaultMaxRequests; at most
	// overload.MaxLimit.
	MaxRequests int
	// DrainTimeout is how long shutdown lets HTTP/2 connections finish their
	// streams after GOAWAY (requests in flight on HTTP/1.1 connections go on
	// meanwhile) before every connection is closed. 0 means DefaultDrainTimeout;
	// at most MaxDrainTimeout.
	DrainTimeout time.Duration
	// MTLS terminates the mutual TLS of chains that carry a DownstreamTlsContext;
	// nil: this sidecar has no identity and connections to such chains are
	// closed (never served in plaintext).
	MTLS *mtls.Manager
	// SniffTimeout bounds the wait for a connection's first byte on a port
	// whose chains are chosen by transport (TLS or plaintext). 0 means
	// DefaultSniffTimeout; at most MaxSniffTimeout.
	SniffTimeout time.Duration
}

// Defaults of Config.
const (
	DefaultMaxConnections = 10000
	DefaultMaxRequests    = 10000
	// DefaultDrainTimeout is Istio's default termination drain duration.
	DefaultDrainTimeout = 5 * time.Second
	MaxDrainTimeout     = 10 * time.Minute
	// DefaultSniffTimeout is Envoy's listener_filters_timeout (tls_inspector).
	DefaultSniffTimeout = 15 * time.Second
	MaxSniffTimeout     = time.Minute
)

// Reasons a connection is refused (label values of the refusal metric).
const (
	RefusedListener = "listener_max_connections" // this listener's MaxConnections
	RefusedSidecar  = "sidecar_max_connections"  // the shared Connections bound
)

// tlsRecordHandshake is the first byte of a TLS connection (a handshake record),
// what Envoy's tls_inspector looks for.
const tlsRecordHandshake = 0x16

var errEOF = errors.New("connection closed before its first byte")

// Server is one accepting listener.
type Server struct {
	cfg      Config
	log      hclog.Logger
	conns    *overload.Limit // this listener's connections
	requests *overload.Limit // this listener's HTTP requests in flight

	refusedListener atomic.Uint64
	refusedSidecar  atomic.Uint64
	// Connections no chain of their port takes: plaintext to an mTLS-only
	// (STRICT) port, TLS to a plaintext-only one; and failed mTLS handshakes.
	refusedPlaintext atomic.Uint64
	refusedTLS       atomic.Uint64
	failedHandshakes atomic.Uint64

	drain context.Context // ends when shutdown starts; set by Serve before any handler

	mu   sync.Mutex            // guards open
	open map[net.Conn]struct{} // open client connections, closed on shutdown
	wg   sync.WaitGroup
}

// Stats is a listener's load and limits, for /metrics.
type Stats struct {
	Name               string
	Connections        int64 // open client connections (HTTP/2 ones until they close)
	MaxConnections     int64
	Requests           int64 // HTTP requests and streams in flight
	MaxRequests        int64
	RefusedListener    uint64 // connections refused by MaxConnections
	RefusedSidecar     uint64 // connections refused by the shared bound
	RequestsOverflowed uint64 // requests answered 503 by MaxRequests
	RefusedPlaintext   uint64 // plaintext connections to a port that takes only mTLS (closed)
	RefusedTLS         uint64 // TLS connections to a port that takes only plaintext (closed)
	FailedHandshakes   uint64 // mTLS server handshakes refused or failed (closed)
}

// Stats reads the listener's counters (atomics: cheap, never blocks the accept loop).
func (s *Server) Stats() Stats {
	return Stats{Name: s.cfg.Name, Connections: s.conns.Current(), MaxConnections: s.conns.Max(),
		Requests: s.requests.Current(), MaxRequests: s.requests.Max(),
		RefusedListener: s.refusedListener.Load(), RefusedSidecar: s.refusedSidecar.Load(),
		RequestsOverflowed: s.requests.Refused(), RefusedPlaintext: s.refusedPlaintext.Load(), RefusedTLS: s.refusedTLS.Load(),
		FailedHandshakes: s.failedHandshakes.Load()}
}

// New checks cfg.
func New(cfg Config) (*Server, error) {
	switch {
	case cfg.Name == "":
		return nil, errors.New("listener: Name is required")
	case cfg.Logger == nil:
		return nil, errors.New("listener: Logger is required")
	case cfg.Snapshot == nil:
		return nil, errors.New("listener: Snapshot is required")
	case cfg.HTTP == nil || cfg.TCP == nil:
		return nil, errors.New("listener: HTTP and TCP proxies are required")
	case cfg.MaxConnections < 0:
		return nil, errors.New("listener: MaxConnections must not be negative")
	case cfg.MaxRequests < 0:
		return nil, errors.New("listener: MaxRequests must not be negative")
	case cfg.DrainTimeout < 0 || cfg.DrainTimeout > MaxDrainTimeout:
		return nil, fmt.Errorf("listener: DrainTimeout %s outside 0..%s", cfg.DrainTimeout, MaxDrainTimeout)
	case cfg.SniffTimeout < 0 || cfg.SniffTimeout > MaxSniffTimeout:
		return nil, fmt.Errorf("listener: SniffTimeout %s outside 0..%s", cfg.SniffTimeout, MaxSniffTimeout)
	}
	if cfg.SniffTimeout == 0 {
		cfg.SniffTimeout = DefaultSniffTimeout
	}
	if cfg.DrainTimeout == 0 {
		cfg.DrainTimeout = DefaultDrainTimeout
	}
	if cfg.MaxConnections == 0 {
		cfg.MaxConnections = DefaultMaxConnections
	}
	if cfg.MaxRequests == 0 {
		cfg.MaxRequests = DefaultMaxRequests
	}
	if cfg.Destination == nil {
		cfg.Destination = LocalAddr{}
	}
	conns, err := overload.NewLimit(RefusedListener, cfg.MaxConnections)
	if err != nil {
		return nil, fmt.Errorf("listener %s: MaxConnections: %w", cfg.Name, err)
	}
	reqs, err := overload.NewLimit(httpproxy.OverflowRequests, cfg.MaxRequests)
	if err != nil {
		return nil, fmt.Errorf("listener %s: MaxRequests: %w", cfg.Name, err)
	}
	return &Server{cfg: cfg, log: cfg.Logger.Named(cfg.Name), conns: conns, requests: reqs, open: make(map[net.Conn]struct{})}, nil
}

// Serve accepts on ln until ctx ends, then closes ln and every open connection and
// waits for their handlers to return.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	// Connections outlive ctx by the drain: they run on connCtx, cut only when
	// the drain is over; drain tells HTTP/1.1 connections to finish.
	connCtx, force := context.WithCancel(context.WithoutCancel(ctx))
	drain, startDrain := context.WithCancel(context.Background())
	defer s.shutdown(startDrain, force)
	s.drain = drain
	var backoff time.Duration
	for {
		c, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return nil
			}
			// Transient (EMFILE and the like): back off rather than spin.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			s.log.Warn("accept failed", "error", err, "backoff", backoff)
			select {
			case <-time.After(backoff):
			case <-ctx.Done():
				return nil
			}
			continue
		}
		backoff = 0
		if !s.track(c) {
			c.Close()
			continue
		}
		s.wg.Add(1)
		go s.handle(connCtx, c)
	}
}

// track admits c under both connection bounds and records it for shutdown. A
// refusal costs no allocation beyond what Accept made: the caller closes c at once.
func (s *Server) track(c net.Conn) bool {
	if !s.conns.Acquire() {
		s.refusedListener.Add(1)
		return false
	}
	if !s.cfg.Connections.Acquire() {
		s.conns.Release()
		s.refusedSidecar.Add(1)
		return false
	}
	s.mu.Lock()
	s.open[c] = struct{}{}
	s.mu.Unlock()
	return true
}

func (s *Server) untrack(c net.Conn) {
	s.mu.Lock()
	delete(s.open, c)
	s.mu.Unlock()
	s.cfg.Connections.Release()
	s.conns.Release()
}

// shutdown drains the listener: HTTP/1.1 connections waiting for a request
// close at once and those with one in flight after its answer; HTTP/2 ones get
// GOAWAY and finish their streams. After DrainTimeout (or once all are done)
// every connection still open is closed, and shutdown waits for the handlers.
func (s *Server) shutdown(startDrain, force context.CancelFunc) {
	startDrain()
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.DrainTimeout)
	defer cancel()
	all := make(chan struct{})
	go func() { s.wg.Wait(); close(all) }() // no Add after Serve's accept loop ended
	s.cfg.HTTP.DrainHTTP2(ctx, s.cfg.Name)
	select {
	case <-all:
	case <-ctx.Done():
	}
	force()
	s.mu.Lock()
	for c := range s.open {
		c.Close()
	}
	s.mu.Unlock()
	<-all
}

func (s *Server) handle(ctx context.Context, c net.Conn) {
	defer s.wg.Done()
	defer s.untrack(c)
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true)
	}
	dst, err := s.cfg.Destination.Destination(c)
	if err != nil {
		s.log.Warn("original destination", "error", err)
		c.Close()
		return
	}
	var src netip.Addr
	if a, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		src = a.AddrPort().Addr()
	}
	// Direct: made to the address it was accepted on, not redirected here
	// (explicit mode): chains are then chosen by port alone.
	var direct bool
	if a, ok := c.LocalAddr().(*net.TCPAddr); ok {
		la := a.AddrPort()
		direct = la.Port() == dst.Port() && la.Addr().Unmap() == dst.Addr().Unmap()
	}
	// The chain's kind is decided once per connection; HTTP requests then re-load the
	// config per request, TCP streams keep the snapshot they started with.
	cfg := s.cfg.Snapshot.Load()
	var fc *dataplane.FilterChain
	var peer spiffeid.ID
	if cfg != nil {
		if l := cfg.Listener(s.cfg.Name); l != nil {
			if !l.SniffConn(dst, direct) {
				fc = l.SelectConn(dst, direct, false) // no mTLS for this destination: nothing is read first
			} else {
				var ok bool
				if c, fc, peer, ok = s.terminate(ctx, c, l, dst, direct); !ok {
					return
				}
			}
		}
	}
	if fc != nil && fc.TCP != nil {
		if err := s.cfg.TCP.ServeTo(ctx, c, fc.TCP, src, dst); err != nil {
			s.log.Debug("tcp proxy", "error", err)
		}
		return
	}
	// HTTP, or nothing configured yet: the HTTP proxy answers 503/404 with a reason.
	// ServeConn returns when the connection has closed, HTTP/2 ones included, so
	// the connection stays counted and is drained and closed on shutdown.
	s.cfg.HTTP.ServeConn(ctx, c, httpproxy.Target{Snapshot: s.cfg.Snapshot, Listener: s.cfg.Name, Dest: dst, Direct: direct, Source: src,
		Requests: s.requests, Drain: s.drain, Peer: peer})
}

// terminate chooses the chain of a port whose chains include mTLS by the
// connection's first byte (0x16: a TLS handshake, as Envoy's tls_inspector),
// and for an mTLS chain runs the server handshake: the decrypted, verified
// connection and its peer go on to the chain's HTTP or TCP handling. A
// connection no chain takes is closed and counted: plaintext to a STRICT port,
// TLS to a DISABLE one. ok=false: c was closed.
func (s *Server) terminate(ctx context.Context, c net.Conn, l *dataplane.Listener, dst netip.AddrPort, direct bool) (net.Conn, *dataplane.FilterChain, spiffeid.ID, bool) {
	_ = c.SetReadDeadline(time.Now().Add(s.cfg.SniffTimeout))
	b, peeked, err := peekByte(c)
	if !peeked && err == nil {
		// Not a socket (tests over pipes): read the byte and replay it.
		var buf [1]byte
		if _, err = io.ReadFull(c, buf[:]); err == nil {
			b, c = buf[0], &replayConn{Conn: c, first: buf[:]}
		}
	}
	_ = c.SetReadDeadline(time.Time{})
	if err != nil {
		s.log.Debug("no first byte", "remote", c.RemoteAddr(), "error", err)
		c.Close()
		return nil, nil, spiffeid.ID{}, false
	}
	isTLS := b == tlsRecordHandshake
	fc := l.SelectConn(dst, direct, isTLS)
	switch {
	case fc == nil && !isTLS:
		s.refusedPlaintext.Add(1)
		if s.cfg.MTLS != nil {
			s.cfg.MTLS.CountPlaintextRefused()
		}
		s.log.Debug("plaintext connection refused: the port takes only mTLS", "port", dst.Port(), "remote", c.RemoteAddr())
		c.Close()
		return nil, nil, spiffeid.ID{}, false
	case fc == nil:
		s.refusedTLS.Add(1)
		s.log.Debug("TLS connection refused: the port takes only plaintext", "port", dst.Port(), "remote", c.RemoteAddr())
		c.Close()
		return nil, nil, spiffeid.ID{}, false
	case !fc.MTLS:
		if s.cfg.MTLS != nil {
			s.cfg.MTLS.CountPlaintextAccepted() // PERMISSIVE
		}
		return c, fc, spiffeid.ID{}, true
	case s.cfg.MTLS == nil:
		s.failedHandshakes.Add(1)
		s.log.Warn("mTLS connection refused: this sidecar has no workload identity", "port", dst.Port(), "remote", c.RemoteAddr())
		c.Close()
		return nil, nil, spiffeid.ID{}, false
	}
	tc, err := s.cfg.MTLS.Server(ctx, c)
	if err != nil {
		s.failedHandshakes.Add(1)
		s.log.Debug("mTLS handshake refused", "port", dst.Port(), "remote", c.RemoteAddr(), "error", err) // mtls logs it, sampled
		return nil, nil, spiffeid.ID{}, false
	}
	return tc, fc, tc.Peer().ID, true
}

// replayConn gives back the byte read to choose a chain.
type replayConn struct {
	net.Conn
	first []byte
}

func (r *replayConn) Read(p []byte) (int, error) {
	if len(r.first) > 0 && len(p) > 0 {
		n := copy(p, r.first)
		r.first = r.first[n:]
		return n, nil
	}
	return r.Conn.Read(p)
}
