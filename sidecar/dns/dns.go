// Package dns is the sidecar's DNS proxy (Istio's DNS proxying): UDP and TCP on
// one address (127.0.0.1:15053 when intercepting; port 53 is redirected to it),
// answering the mesh's names (A and AAAA) from the active configuration's name
// table (dataplane.DNSTable: svc, svc.ns, svc.ns.svc and svc.ns.svc.<domain>,
// relative to the sidecar's namespace) and forwarding everything else to the
// nameservers of the pod's resolv.conf, over the transport the query came on.
//
// It reads the runtime's active configuration on every query, so it answers
// from the last-known-good snapshot when pilot is down exactly as the listeners
// route from it. The wire format is github.com/miekg/dns's.
//
// Bounds: MaxInFlight queries at once (past it: REFUSED, counted), each forward
// within ForwardTimeout across the upstreams (then SERVFAIL), MaxTCPConns client
// TCP connections (past it: closed at accept, counted), UDP messages within
// MaxUDPSize (longer answers truncated with TC; the client retries over TCP) and
// read buffers of MaxUDPReadBytes; TCP messages are at most 64 KiB by their
// length prefix.
package dns

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	mdns "github.com/miekg/dns"

	"github.com/weft-mesh/weft/sidecar/dataplane"
)

// Defaults and bounds of Config.
const (
	// DefaultAddr is the proxy's address when the sidecar intercepts.
	DefaultAddr = "127.0.0.1:15053"
	// DefaultMaxInFlight is CoreDNS forward's max_concurrent order of magnitude.
	DefaultMaxInFlight = 1024
	MaxMaxInFlight     = 1 << 20
	// DefaultForwardTimeout bounds one forwarded query over all upstreams
	// (glibc waits 5s per server; a pod's client retries on its own).
	DefaultForwardTimeout = 2 * time.Second
	MaxForwardTimeout     = 30 * time.Second
	DefaultMaxTCPConns    = 256
	MaxMaxTCPConns        = 1 << 16
	// DefaultTCPIdleTimeout closes a client TCP connection idle this long
	// between queries (RFC 7766 leaves it to the server; miekg's default).
	DefaultTCPIdleTimeout = 8 * time.Second
	// ReadTimeout is the first query's deadline on a new TCP connection, and
	// WriteTimeout every reply's.
	ReadTimeout  = 2 * time.Second
	WriteTimeout = 2 * time.Second
	// MaxTCPQueriesPerConn: after this many queries a client TCP connection is
	// closed (the client reconnects), so one connection cannot hold a slot forever.
	MaxTCPQueriesPerConn = 1024
	// MaxUDPReadBytes is the read buffer of one UDP query.
	MaxUDPReadBytes = 4096
	// ShutdownTimeout bounds waiting for queries in flight at stop.
	ShutdownTimeout = 5 * time.Second
)

// ErrConfig wraps every error of New.
var ErrConfig = errors.New("dns: invalid config")

// Snapshot is where the proxy reads the active configuration (the runtime).
type Snapshot interface {
	Load() *dataplane.Config
}

// Config of the proxy; checked by New.
type Config struct {
	Logger   hclog.Logger
	Snapshot Snapshot
	// Namespace is the sidecar's: the one-label names (svc) resolve in it.
	Namespace string
	// Upstreams are the nameservers ("ip:port") tried in order; ReadResolvConf
	// gives the pod's. Empty: every non-mesh query fails (SERVFAIL).
	Upstreams []string
	// ResolvConf is the file Upstreams came from (shown in config_dump).
	ResolvConf string
	// Zero values below take the defaults.
	MaxInFlight    int
	ForwardTimeout time.Duration
	MaxTCPConns    int
	TCPIdleTimeout time.Duration
	// Dialer dials upstreams (a Control setting SO_MARK, say); nil: a plain one.
	Dialer *net.Dialer
}

// Server is the DNS proxy.
type Server struct {
	cfg Config
	log hclog.Logger
	// Counters, written by query goroutines, read by Status and Collect.
	inFlight   atomic.Int64
	tcpConns   atomic.Int64
	tcpRefused atomic.Uint64
	queries    [numOutcomes][2]atomic.Uint64 // by outcome, by transport (udp, tcp)
	// addrs are the addresses served (each Serve adds its own).
	mu    sync.Mutex
	addrs []string
}

// New checks cfg and applies defaults.
func New(cfg Config) (*Server, error) {
	switch {
	case cfg.Logger == nil:
		return nil, fmt.Errorf("%w: Logger required", ErrConfig)
	case cfg.Snapshot == nil:
		return nil, fmt.Errorf("%w: Snapshot required", ErrConfig)
	}
	if cfg.MaxInFlight == 0 {
		cfg.MaxInFlight = DefaultMaxInFlight
	}
	if cfg.ForwardTimeout == 0 {
		cfg.ForwardTimeout = DefaultForwardTimeout
	}
	if cfg.MaxTCPConns == 0 {
		cfg.MaxTCPConns = DefaultMaxTCPConns
	}
	if cfg.TCPIdleTimeout == 0 {
		cfg.TCPIdleTimeout = DefaultTCPIdleTimeout
	}
	switch {
	case cfg.MaxInFlight < 1 || cfg.MaxInFlight > MaxMaxInFlight:
		return nil, fmt.Errorf("%w: MaxInFlight %d outside 1..%d", ErrConfig, cfg.MaxInFlight, MaxMaxInFlight)
	case cfg.ForwardTimeout < 0 || cfg.ForwardTimeout > MaxForwardTimeout:
		return nil, fmt.Errorf("%w: ForwardTimeout %s outside (0, %s]", ErrConfig, cfg.ForwardTimeout, MaxForwardTimeout)
	case cfg.MaxTCPConns < 1 || cfg.MaxTCPConns > MaxMaxTCPConns:
		return nil, fmt.Errorf("%w: MaxTCPConns %d outside 1..%d", ErrConfig, cfg.MaxTCPConns, MaxMaxTCPConns)
	case cfg.TCPIdleTimeout < 0:
		return nil, fmt.Errorf("%w: TCPIdleTimeout %s is negative", ErrConfig, cfg.TCPIdleTimeout)
	case len(cfg.Upstreams) > MaxUpstreams:
		return nil, fmt.Errorf("%w: %d upstreams, limit %d", ErrConfig, len(cfg.Upstreams), MaxUpstreams)
	}
	for _, u := range cfg.Upstreams {
		if _, err := netip.ParseAddrPort(u); err != nil {
			return nil, fmt.Errorf("%w: upstream %q: want IP:PORT", ErrConfig, u)
		}
	}
	cfg.Upstreams = append([]string(nil), cfg.Upstreams...)
	return &Server{cfg: cfg, log: cfg.Logger}, nil
}

// Listen binds UDP and TCP on addr (a port of 0: the same free port for both).
// Multipath TCP is off, as on the sidecar's other listeners in intercept modes.
func Listen(addr netip.AddrPort) (net.PacketConn, net.Listener, error) {
	var lc net.ListenConfig
	lc.SetMultipathTCP(false)
	for try := 0; ; try++ {
		ln, err := lc.Listen(context.Background(), "tcp", addr.String())
		if err != nil {
			return nil, nil, fmt.Errorf("dns: tcp %s: %w", addr, err)
		}
		tcpAddr := ln.Addr().(*net.TCPAddr).AddrPort()
		pc, err := lc.ListenPacket(context.Background(), "udp", netip.AddrPortFrom(addr.Addr(), tcpAddr.Port()).String())
		if err == nil {
			return pc, ln, nil
		}
		ln.Close()
		if addr.Port() != 0 || try == 9 { // a free TCP port can be a taken UDP one: take another
			return nil, nil, fmt.Errorf("dns: udp %s: %w", addr, err)
		}
	}
}

// Serve answers on pc (UDP) and ln (TCP), which it closes, until ctx ends; then
// it waits up to ShutdownTimeout for queries in flight. It may run once per
// address at the same time (127.0.0.1 and ::1): the bounds and counters are
// the Server's.
func (s *Server) Serve(ctx context.Context, pc net.PacketConn, ln net.Listener) error {
	s.mu.Lock()
	s.addrs = append(s.addrs, ln.Addr().String())
	s.mu.Unlock()
	// Forwards in flight end with the servers (their deadlines bound them anyway).
	fctx, cancel := context.WithCancel(ctx)
	defer cancel()
	mk := func(net string) *mdns.Server {
		return &mdns.Server{Net: net, UDPSize: MaxUDPReadBytes, ReadTimeout: ReadTimeout, WriteTimeout: WriteTimeout,
			IdleTimeout: func() time.Duration { return s.cfg.TCPIdleTimeout }, MaxTCPQueries: MaxTCPQueriesPerConn,
			MsgAcceptFunc: s.accept, MsgInvalidFunc: s.invalid,
			Handler: mdns.HandlerFunc(func(w mdns.ResponseWriter, req *mdns.Msg) { s.serveDNS(fctx, w, req) })}
	}
	udp, tcp := mk("udp"), mk("tcp")
	udp.PacketConn = pc
	tcp.Listener = &limitListener{Listener: ln, s: s}
	errc := make(chan error, 2)
	var started sync.WaitGroup
	for _, srv := range []*mdns.Server{udp, tcp} {
		started.Add(1)
		var once sync.Once
		srv.NotifyStartedFunc = func() { once.Do(started.Done) }
		go func() {
			err := srv.ActivateAndServe()
			once.Do(started.Done) // failed before starting
			errc <- err
		}()
	}
	// Shutdown only works on a started server: wait for both (or their failure).
	started.Wait()
	var failed error
	pending := 2
	select {
	case <-ctx.Done():
	case failed = <-errc: // one server failed: stop the other and say why
		pending--
		if failed == nil {
			failed = errors.New("dns: server stopped")
		}
	}
	cancel()
	sctx, scancel := context.WithTimeout(context.Background(), ShutdownTimeout)
	defer scancel()
	for _, srv := range []*mdns.Server{udp, tcp} {
		_ = srv.ShutdownContext(sctx) // "not started" for the one that failed
	}
	for ; pending > 0; pending-- {
		if err := <-errc; err != nil && failed == nil {
			failed = err
		}
	}
	pc.Close()
	ln.Close()
	return failed
}

// accept is miekg's default check, counting what it refuses.
func (s *Server) accept(dh mdns.Header) mdns.MsgAcceptAction {
	a := mdns.DefaultMsgAcceptFunc(dh)
	if a == mdns.MsgAccept && int(dh.Bits>>11)&0xF != mdns.OpcodeQuery {
		a = mdns.MsgRejectNotImplemented // NOTIFY: not a zone server
	}
	if a != mdns.MsgAccept {
		s.queries[OutcomeInvalid][0].Add(1) // transport unknown here: counted as UDP
	}
	return a
}

func (s *Server) invalid([]byte, error) { s.queries[OutcomeInvalid][0].Add(1) }

// serveDNS answers one query: from the mesh, or forwarded.
func (s *Server) serveDNS(ctx context.Context, w mdns.ResponseWriter, req *mdns.Msg) {
	tcp := isTCP(w)
	var r *mdns.Msg
	var o Outcome
	if s.acquire() {
		r, o = Answer(req, s.cfg.Snapshot.Load().DNS(), s.cfg.Namespace)
		if o == OutcomeForwarded {
			r, o = s.forward(ctx, req, tcp)
		}
		s.inFlight.Add(-1)
	} else {
		r, o = reply(req, mdns.RcodeRefused), OutcomeRefused
	}
	s.count(o, tcp)
	if r == nil {
		return
	}
	if !tcp {
		r.Truncate(udpSize(req)) // sets TC when records had to go
	}
	if err := w.WriteMsg(r); err != nil {
		s.log.Debug("dns: write reply", "error", err, "name", qname(req))
	}
}

// acquire takes an in-flight slot; false at MaxInFlight. A compare-and-swap,
// so refused queries never hold a slot even for a moment.
func (s *Server) acquire() bool {
	for {
		n := s.inFlight.Load()
		if n >= int64(s.cfg.MaxInFlight) {
			return false
		}
		if s.inFlight.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

func (s *Server) count(o Outcome, tcp bool) {
	t := 0
	if tcp {
		t = 1
	}
	s.queries[o][t].Add(1)
}

func isTCP(w mdns.ResponseWriter) bool {
	_, ok := w.LocalAddr().(*net.TCPAddr)
	return ok
}

func qname(m *mdns.Msg) string {
	if len(m.Question) == 0 {
		return ""
	}
	return m.Question[0].Name
}

// limitListener closes connections past MaxTCPConns at accept, so a client
// flood cannot hold unbounded connections and their 64 KiB read buffers.
type limitListener struct {
	net.Listener
	s *Server
}

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if l.s.tcpConns.Add(1) > int64(l.s.cfg.MaxTCPConns) {
			l.s.tcpConns.Add(-1)
			l.s.tcpRefused.Add(1)
			c.Close()
			continue
		}
		return &countedConn{Conn: c, n: &l.s.tcpConns}, nil
	}
}

// countedConn gives its slot back once, at its first Close.
type countedConn struct {
	net.Conn
	n    *atomic.Int64
	once sync.Once
}

func (c *countedConn) Close() error {
	c.once.Do(func() { c.n.Add(-1) })
	return c.Conn.Close()
}
