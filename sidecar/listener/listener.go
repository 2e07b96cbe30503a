// Package listener accepts connections for one configured listener, finds each
// connection's original destination, and hands it to the HTTP or TCP proxy chosen by
// the active config's filter chain.
package listener

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/weft-mesh/weft/sidecar/dataplane"
	"github.com/weft-mesh/weft/sidecar/httpproxy"
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
	// MaxConnections bounds concurrent client connections; further accepts are closed
	// at once. Default 10000.
	MaxConnections int
}

// Server is one accepting listener.
type Server struct {
	cfg Config
	log hclog.Logger

	mu    sync.Mutex            // guards conns
	conns map[net.Conn]struct{} // open client connections, closed on shutdown
	wg    sync.WaitGroup
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
	}
	if cfg.MaxConnections == 0 {
		cfg.MaxConnections = 10000
	}
	if cfg.Destination == nil {
		cfg.Destination = LocalAddr{}
	}
	return &Server{cfg: cfg, log: cfg.Logger.Named(cfg.Name), conns: make(map[net.Conn]struct{})}, nil
}

// Serve accepts on ln until ctx ends, then closes ln and every open connection and
// waits for their handlers to return.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	defer s.shutdown()
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
		go s.handle(ctx, c)
	}
}

func (s *Server) track(c net.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.conns) >= s.cfg.MaxConnections {
		return false
	}
	s.conns[c] = struct{}{}
	return true
}

func (s *Server) untrack(c net.Conn) {
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
}

func (s *Server) shutdown() {
	s.mu.Lock()
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
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
	// The chain's kind is decided once per connection; HTTP requests then re-load the
	// config per request, TCP streams keep the snapshot they started with.
	cfg := s.cfg.Snapshot.Load()
	var fc *dataplane.FilterChain
	if cfg != nil {
		if l := cfg.Listener(s.cfg.Name); l != nil {
			fc = l.Chain(dst.Port())
		}
	}
	if fc != nil && fc.TCP != nil {
		if err := s.cfg.TCP.Serve(ctx, c, fc.TCP, src); err != nil {
			s.log.Debug("tcp proxy", "error", err)
		}
		return
	}
	// HTTP, or nothing configured yet: the HTTP proxy answers 503/404 with a reason.
	s.cfg.HTTP.ServeConn(ctx, c, httpproxy.Target{Snapshot: s.cfg.Snapshot, Listener: s.cfg.Name, Dest: dst, Source: src})
}
