// Package httpproxy is the sidecar's HTTP request path. HTTP/1.1 runs on a purpose-built
// keep-alive loop (own parser, pooled buffers, pooled upstream connections, no
// per-request goroutines); HTTP/2 (h2c, or h2 inside mTLS) and gRPC clients are
// served by sidecar/h2server (Config.H2Server; net/http's server is the
// fallback), and go upstream through an HTTP/2 transport that multiplexes
// requests on pooled connections.
//
// Each request loads the active *dataplane.Config once and finishes on it, so a swap
// never changes a request midway.
//
// # Local answers
//
// Every response the sidecar generates itself, rather than relays from an upstream,
// carries the header x-weft-local (LocalHeader) naming the part that answered, so a
// user can tell a sidecar's 503 from an application's:
//
//	parser            400, 414, 431, 501: the request is malformed, too large or unsupported
//	router            404 nothing routes this host/port/path (the body names what was
//	                  looked for and which ports the host is served on); 503 no
//	                  configuration or listener
//	direct            a route's configured direct response
//	degraded          503 failing closed; x-weft-degraded says why
//	overflow          503 a circuit breaker or limit refused the request;
//	                  x-weft-overflow names the sidecar bound when it was one
//	upstream-connect  503 no connection, or reset before response headers
//	upstream-protocol 502 the upstream's response was not valid HTTP/1.1
//	timeout           504 the route (or per-try) timeout passed; x-weft-timeout
//	                  names which
//	retries           the last upstream status after retries, not the upstream's body
//	ratelimit         429 the cluster's local rate limit (DestinationPolicy
//	                  localRateLimit) refused the request; x-weft-ratelimited
//	                  names the service key, retry-after the seconds until a
//	                  token is back (rounded up)
//
// HTTP/1.1 and HTTP/2 answers use the same values.
package httpproxy

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/spiffe/go-spiffe/v2/spiffeid"

	"github.com/weft-mesh/weft/sidecar/authz"
	"github.com/weft-mesh/weft/sidecar/cluster"
	"github.com/weft-mesh/weft/sidecar/dataplane"
	"github.com/weft-mesh/weft/sidecar/h2server"
	"github.com/weft-mesh/weft/sidecar/mtls"
	"github.com/weft-mesh/weft/sidecar/overload"
)

// Snapshot yields the active config; *atomic.Pointer[dataplane.Config] satisfies it.
type Snapshot interface {
	Load() *dataplane.Config
}

// DegradedFunc reports whether routing must fail closed (staleness expiry) and why.
// It is called once per request and must be cheap (an atomic load).
type DegradedFunc func() (reason string, degraded bool)

// Config configures a Proxy.
type Config struct {
	Logger hclog.Logger // required
	// Pool is the HTTP/1.1 upstream pool; required. It outlives config swaps.
	Pool *cluster.Pool
	// Dial opens the HTTP/2 pool's upstream connections and those of upgraded
	// requests (the HTTP/1.1 Pool has its own PoolConfig.Dial); nil: net.Dialer.
	Dial func(ctx context.Context, addr string) (net.Conn, error)
	// Passthrough gives requests routed to an original-destination cluster
	// their connection's original destination (Target.Dest) and refuses, and
	// counts, loops to the sidecar's own listeners and black-hole clusters;
	// nil: a private one that knows no own addresses.
	Passthrough *cluster.Passthrough
	// Degraded, when set and reporting true, makes every request answer 503 with
	// header x-weft-degraded: <reason>.
	Degraded DegradedFunc
	// AuthzExpired, when set and reporting true, denies every request on a
	// chain under authorization (authz.go): authorization state is past its
	// staleness expiry and fails closed.
	AuthzExpired DegradedFunc
	// BufferSize is the per-connection read and write buffer (also the longest
	// request or status line). Default 16 KiB.
	BufferSize int
	// MaxHeaderBytes bounds a request's or response's header section. Default 64 KiB.
	MaxHeaderBytes int
	// MaxHeaderFields bounds header lines per message. Default 128.
	MaxHeaderFields int
	// IdleTimeout closes a client connection idle between requests. Default 5m.
	// It fires between IdleTimeout and IdleTimeout + IdleTimeout/IdleTimeoutSlackDivisor
	// after the last answer (never early), so a busy connection need not move its
	// deadline on every request.
	IdleTimeout time.Duration
	// ReadHeaderTimeout bounds reading one request's header section, from its first
	// byte (the first request's: from accept). Default 30s. A head that arrived whole
	// with its first byte needs no read, so it is parsed under the idle deadline.
	ReadHeaderTimeout time.Duration
	// UpgradeIdleTimeout closes an upgraded (WebSocket) connection silent both ways
	// this long; route timeouts do not apply after the 101. Default 5m.
	UpgradeIdleTimeout time.Duration
	// ExpectContinueTimeout is how long a request with "Expect: 100-continue" waits
	// for the upstream's first answer before the proxy sends the client 100
	// Continue itself (an upstream that ignores Expect waits for the body). Default 1s.
	ExpectContinueTimeout time.Duration
	// MaxURIBytes bounds an HTTP/1.1 request target; longer ones answer 414.
	// Default DefaultMaxURIBytes (at most BufferSize-1024, as the request line must
	// fit the read buffer); 64..BufferSize-1024.
	MaxURIBytes int
	// Rand picks weighted clusters; nil uses math/rand/v2.
	Rand func() uint64
	// Observer, when set, is told of every answered request. nil records nothing.
	Observer Observer
	// MaxConcurrentStreams is the HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS offered
	// to each client connection. 0 means DefaultMaxConcurrentStreams.
	MaxConcurrentStreams int
	// H2StreamBuffer and H2ConnBuffer bound the request body bytes one HTTP/2
	// client stream, and one connection, may have the sidecar buffer (the
	// flow-control windows it grants). 0 means DefaultH2Buffer.
	H2StreamBuffer int
	H2ConnBuffer   int
	// H2MaxFrameSize is the largest HTTP/2 frame a client may send. The server
	// keeps a read buffer of the largest frame read for the connection's life, so
	// this bounds what every idle HTTP/2 connection costs. 0 means
	// DefaultH2MaxFrameSize; MinH2MaxFrameSize..MaxH2MaxFrameSize (RFC 9113).
	H2MaxFrameSize int
	// Memory, when set and shedding, makes every new request answer 503 with
	// header x-weft-overflow: memory (one atomic load per request).
	Memory *overload.Memory
	// MaxRetryBodyBytes bounds the request body kept for replay by retries and
	// fallbacks; a longer body is sent once (counted). 0 means
	// DefaultMaxRetryBodyBytes; MinMaxRetryBodyBytes..MaxMaxRetryBodyBytes.
	MaxRetryBodyBytes int
	// MTLS dials the mTLS connections to peer sidecars that need them (the H2
	// pool's; Pool has its own); nil: this sidecar has no identity.
	MTLS *mtls.Manager
	// H2Server picks the HTTP/2 server of the listeners' prior-knowledge
	// HTTP/2 connections (the peer hop from other sidecars, gRPC clients):
	// H2ServerWeft (sidecar/h2server) or H2ServerStd (net/http's). "" means
	// DefaultH2Server.
	H2Server string
	// H2Client picks the HTTP/2 client of the pooled peer hop and HTTP/2
	// upstreams: cluster.H2ClientWeft (sidecar/h2client) or
	// cluster.H2ClientStd (net/http's). "" means cluster.DefaultH2Client.
	H2Client string
}

// Values of Config.H2Server.
const (
	H2ServerStd  = "std"
	H2ServerWeft = "weft"
	// DefaultH2Server is the one the sidecar-pair benchmark favours.
	DefaultH2Server = H2ServerWeft
)

// Defaults and bounds of Config.
const (
	DefaultBufferSize        = 16 << 10
	MinBufferSize            = 4 << 10
	MaxBufferSize            = 1 << 20
	DefaultMaxHeaderBytes    = 64 << 10
	MinMaxHeaderBytes        = 1 << 10
	MaxMaxHeaderBytes        = 1 << 20
	DefaultMaxHeaderFields   = 128
	MinMaxHeaderFields       = 8
	MaxMaxHeaderFields       = 1024
	DefaultIdleTimeout       = 5 * time.Minute
	DefaultReadHeaderTimeout = 30 * time.Second
	// DefaultMaxConcurrentStreams is Go's own HTTP/2 server default; the
	// H2Pool of a peer sidecar opens another connection beyond it.
	DefaultMaxConcurrentStreams = 250
	MaxMaxConcurrentStreams     = 1 << 16
	// DefaultH2MaxFrameSize is HTTP/2's initial SETTINGS_MAX_FRAME_SIZE (also
	// Envoy's): with 1 MiB, 300 idle client connections that had sent large
	// bodies held 92 MiB of read buffers (drill TestDrillMemoryShedding).
	DefaultH2MaxFrameSize = 16 << 10
	MinH2MaxFrameSize     = 16 << 10
	MaxH2MaxFrameSize     = 1<<24 - 1
	// DefaultH2Buffer is Go's HTTP/2 server default for both windows.
	DefaultH2Buffer = 1 << 20
	MinH2Buffer     = 64 << 10
	MaxH2Buffer     = 16 << 20
)

// Observer receives one call per request the proxy answered, on the request's
// goroutine, so it must be cheap and must not allocate: the HTTP/1.1 path is
// allocation-free and stays so.
type Observer interface {
	// Request reports the answer: cluster is the cluster that produced it ("" when
	// the proxy answered itself: no route, direct response, degraded, bad request,
	// overflow or connect failure before any cluster was picked); code is the
	// status sent, 0 when the client went away before one was; dur runs from the
	// parsed request head (HTTP/1.1) or the handler start (HTTP/2) to the end of the
	// response body (about 0 for a request rejected as unparseable). A gRPC error the
	// proxy answers itself is sent, and reported, as 200 with a grpc-status.
	Request(cluster string, code int, dur time.Duration)
}

// observe reports a request to the configured Observer, if any.
func (p *Proxy) observe(cluster string, code int, start time.Time) {
	if p.cfg.Observer != nil {
		p.cfg.Observer.Request(cluster, code, time.Since(start))
	}
}

// observeAt is observe with the end time already read.
func (p *Proxy) observeAt(cluster string, code int, start, end time.Time) {
	if p.cfg.Observer != nil {
		p.cfg.Observer.Request(cluster, code, end.Sub(start))
	}
}

// Proxy serves HTTP connections handed to it by a listener.
type Proxy struct {
	cfg      Config
	log      hclog.Logger
	h2       *cluster.H2Pool // h2c upstreams (peer sidecars, HTTP2/gRPC apps), multiplexed
	h1std    *http.Transport // HTTP/1.1 upstreams reached from HTTP/2 clients
	h2c      http.Protocols
	h2mu     sync.Mutex           // guards h2srvs and closed
	h2srvs   map[string]*h2Server // by listener name: serve h2c connections handed over by ServeConn
	closed   bool                 // Close was called: no new HTTP/2 servers
	readers  sync.Pool            // *bufio.Reader
	writers  sync.Pool            // *bufio.Writer
	ctx      context.Context
	cancel   context.CancelFunc
	retries  RetryStats
	bodies   sync.Pool     // *[]byte of cap MaxRetryBodyBytes: request bodies kept for replay
	authzLog authz.Sampler // rate-limits denial logs (authz.go)
	auditLog authz.Sampler // rate-limits AUDIT logs (authz.go)
}

// HTTP/2 upstream connections idle this long are closed; one silent for
// h2PingTimeout is pinged and closed if the ping goes unanswered as long.
const (
	h2IdleTimeout = 90 * time.Second
	h2PingTimeout = 30 * time.Second
)

// DefaultExpectContinueTimeout is Config.ExpectContinueTimeout's default (curl's
// and net/http's usual client-side wait).
const DefaultExpectContinueTimeout = time.Second

// Response header naming why a request was failed closed.
const DegradedHeader = "x-weft-degraded"

// LocalHeader is set on every answer the sidecar generated itself; its value (one of
// the Local* constants) names the part that answered. See the package doc.
const LocalHeader = "x-weft-local"

// Values of LocalHeader.
const (
	LocalParser           = "parser"
	LocalRouter           = "router"
	LocalDirect           = "direct"
	LocalDegraded         = "degraded"
	LocalOverflow         = "overflow"
	LocalUpstreamConnect  = "upstream-connect"
	LocalUpstreamProtocol = "upstream-protocol"
	LocalTimeout          = "timeout"
	LocalRetries          = "retries"
)

// DefaultMaxURIBytes is Config.MaxURIBytes's default (as nginx's and Envoy's
// usual request-line bounds).
const DefaultMaxURIBytes = 8 << 10

// New checks cfg and builds a Proxy. Close releases its upstream connections.
func New(cfg Config) (*Proxy, error) {
	if cfg.Logger == nil {
		return nil, errors.New("httpproxy: Logger is required")
	}
	if cfg.Pool == nil {
		return nil, errors.New("httpproxy: Pool is required")
	}
	if cfg.Passthrough == nil {
		cfg.Passthrough = cluster.NewPassthrough(nil)
	}
	if cfg.BufferSize == 0 {
		cfg.BufferSize = DefaultBufferSize
	}
	if cfg.MaxHeaderBytes == 0 {
		cfg.MaxHeaderBytes = DefaultMaxHeaderBytes
	}
	if cfg.MaxHeaderFields == 0 {
		cfg.MaxHeaderFields = DefaultMaxHeaderFields
	}
	if cfg.IdleTimeout == 0 {
		cfg.IdleTimeout = DefaultIdleTimeout
	}
	if cfg.ReadHeaderTimeout == 0 {
		cfg.ReadHeaderTimeout = DefaultReadHeaderTimeout
	}
	if cfg.MaxConcurrentStreams == 0 {
		cfg.MaxConcurrentStreams = DefaultMaxConcurrentStreams
	}
	if cfg.H2StreamBuffer == 0 {
		cfg.H2StreamBuffer = DefaultH2Buffer
	}
	if cfg.H2ConnBuffer == 0 {
		cfg.H2ConnBuffer = DefaultH2Buffer
	}
	if cfg.H2MaxFrameSize == 0 {
		cfg.H2MaxFrameSize = DefaultH2MaxFrameSize
	}
	if cfg.UpgradeIdleTimeout == 0 {
		cfg.UpgradeIdleTimeout = DefaultUpgradeIdleTimeout
	}
	if cfg.ExpectContinueTimeout == 0 {
		cfg.ExpectContinueTimeout = DefaultExpectContinueTimeout
	}
	if cfg.MaxURIBytes == 0 {
		cfg.MaxURIBytes = min(DefaultMaxURIBytes, cfg.BufferSize-1024)
	}
	if cfg.MaxRetryBodyBytes == 0 {
		cfg.MaxRetryBodyBytes = DefaultMaxRetryBodyBytes
	}
	if cfg.H2Server == "" {
		cfg.H2Server = DefaultH2Server
	}
	switch {
	case cfg.H2Server != H2ServerStd && cfg.H2Server != H2ServerWeft:
		return nil, fmt.Errorf("httpproxy: H2Server %q is neither %q nor %q", cfg.H2Server, H2ServerStd, H2ServerWeft)
	case cfg.BufferSize < MinBufferSize || cfg.BufferSize > MaxBufferSize:
		return nil, fmt.Errorf("httpproxy: BufferSize %d outside 4KiB..1MiB", cfg.BufferSize)
	case cfg.MaxHeaderBytes < MinMaxHeaderBytes || cfg.MaxHeaderBytes > MaxMaxHeaderBytes:
		return nil, fmt.Errorf("httpproxy: MaxHeaderBytes %d outside 1KiB..1MiB", cfg.MaxHeaderBytes)
	case cfg.MaxHeaderFields < MinMaxHeaderFields || cfg.MaxHeaderFields > MaxMaxHeaderFields:
		return nil, fmt.Errorf("httpproxy: MaxHeaderFields %d outside 8..1024", cfg.MaxHeaderFields)
	case cfg.MaxURIBytes < 64 || cfg.MaxURIBytes > cfg.BufferSize-1024:
		return nil, fmt.Errorf("httpproxy: MaxURIBytes %d outside 64..BufferSize-1024 (%d)", cfg.MaxURIBytes, cfg.BufferSize-1024)
	case cfg.IdleTimeout < 0 || cfg.ReadHeaderTimeout < 0 || cfg.ExpectContinueTimeout < 0 || cfg.UpgradeIdleTimeout < 0:
		return nil, errors.New("httpproxy: timeouts must not be negative")
	case cfg.MaxConcurrentStreams < 1 || cfg.MaxConcurrentStreams > MaxMaxConcurrentStreams:
		return nil, fmt.Errorf("httpproxy: MaxConcurrentStreams %d outside 1..%d", cfg.MaxConcurrentStreams, MaxMaxConcurrentStreams)
	case cfg.H2StreamBuffer < MinH2Buffer || cfg.H2StreamBuffer > MaxH2Buffer:
		return nil, fmt.Errorf("httpproxy: H2StreamBuffer %d outside %d..%d", cfg.H2StreamBuffer, MinH2Buffer, MaxH2Buffer)
	case cfg.H2ConnBuffer < MinH2Buffer || cfg.H2ConnBuffer > MaxH2Buffer:
		return nil, fmt.Errorf("httpproxy: H2ConnBuffer %d outside %d..%d", cfg.H2ConnBuffer, MinH2Buffer, MaxH2Buffer)
	case cfg.MaxRetryBodyBytes < MinMaxRetryBodyBytes || cfg.MaxRetryBodyBytes > MaxMaxRetryBodyBytes:
		return nil, fmt.Errorf("httpproxy: MaxRetryBodyBytes %d outside %d..%d", cfg.MaxRetryBodyBytes, MinMaxRetryBodyBytes, MaxMaxRetryBodyBytes)
	case cfg.H2MaxFrameSize < MinH2MaxFrameSize || cfg.H2MaxFrameSize > MaxH2MaxFrameSize:
		return nil, fmt.Errorf("httpproxy: H2MaxFrameSize %d outside %d..%d", cfg.H2MaxFrameSize, MinH2MaxFrameSize, MaxH2MaxFrameSize)
	}
	if cfg.Rand == nil {
		cfg.Rand = rand.Uint64
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &Proxy{cfg: cfg, log: cfg.Logger, ctx: ctx, cancel: cancel}
	p.bodies.New = func() any { b := make([]byte, 0, cfg.MaxRetryBodyBytes); return &b }
	dial := cfg.Dial
	if dial == nil {
		d := &net.Dialer{}
		dial = func(ctx context.Context, addr string) (net.Conn, error) { return d.DialContext(ctx, "tcp", addr) }
	}
	var h2c http.Protocols
	h2c.SetUnencryptedHTTP2(true) // prior knowledge: to peers inside mTLS (the pool's TLS), h2c otherwise
	h2, err := cluster.NewH2Pool(cluster.H2Config{IdleTimeout: h2IdleTimeout, PingTimeout: h2PingTimeout, MTLS: cfg.MTLS, Dial: cfg.Dial,
		Client: cfg.H2Client})
	if err != nil {
		cancel()
		return nil, fmt.Errorf("httpproxy: %w", err)
	}
	p.h2 = h2
	p.h1std = &http.Transport{
		DialContext:         func(ctx context.Context, _, addr string) (net.Conn, error) { return dial(ctx, addr) },
		MaxIdleConnsPerHost: 64,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
	}
	p.h2c = h2c
	p.h2srvs = map[string]*h2Server{}
	return p, nil
}

// h2Server is one listener's HTTP/2 server, so a listener's shutdown drains its
// own connections (GOAWAY) and no other listener's: weft, or srv (net/http's).
type h2Server struct {
	weft *h2server.Server
	srv  *http.Server
	ln   *connListener
	done chan struct{} // closed when srv.Serve returns
}

// h2For returns listener's HTTP/2 server, starting it on first use; nil once
// the proxy is closed.
func (p *Proxy) h2For(listener string) *h2Server {
	p.h2mu.Lock()
	defer p.h2mu.Unlock()
	if p.closed {
		return nil
	}
	if s := p.h2srvs[listener]; s != nil {
		return s
	}
	cfg := p.cfg
	if cfg.H2Server == H2ServerWeft {
		ws, err := h2server.New(h2server.Config{Handler: http.HandlerFunc(p.serveH2Request),
			MaxConcurrentStreams: cfg.MaxConcurrentStreams, MaxReadFrameSize: cfg.H2MaxFrameSize,
			MaxHeaderListSize: cfg.MaxHeaderBytes + h2HeaderListSlack, StreamWindow: cfg.H2StreamBuffer,
			ConnWindow: cfg.H2ConnBuffer, IdleTimeout: cfg.IdleTimeout, Commit: cfg.Memory.Commit,
			Logf: func(format string, args ...any) { p.log.Debug(fmt.Sprintf(format, args...)) }})
		if err != nil { // New checked every bound
			p.log.Error("HTTP/2 server", "listener", listener, "error", err)
			return nil
		}
		s := &h2Server{weft: ws}
		p.h2srvs[listener] = s
		return s
	}
	s := &h2Server{ln: newConnListener(), done: make(chan struct{})}
	s.srv = &http.Server{
		Protocols:         &p.h2c,
		Handler:           http.HandlerFunc(p.serveH2Request),
		IdleTimeout:       cfg.IdleTimeout,
		ReadHeaderTimeout: cfg.ReadHeaderTimeout,
		ErrorLog:          cfg.Logger.StandardLogger(&hclog.StandardLoggerOptions{InferLevels: true}),
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			if tc, ok := c.(*bufConn); ok {
				return context.WithValue(ctx, targetKey{}, &tc.t)
			}
			return ctx
		},
		HTTP2: &http.HTTP2Config{MaxReadFrameSize: cfg.H2MaxFrameSize, MaxConcurrentStreams: cfg.MaxConcurrentStreams,
			MaxReceiveBufferPerConnection: cfg.H2ConnBuffer, MaxReceiveBufferPerStream: cfg.H2StreamBuffer},
	}
	go func() {
		defer close(s.done)
		_ = s.srv.Serve(s.ln)
	}()
	p.h2srvs[listener] = s
	return s
}

// DrainHTTP2 gracefully shuts down listener's HTTP/2 connections: each is sent
// GOAWAY, takes no new streams and closes when its streams have finished. It
// returns when they all have, or when ctx ends, and then closes what remains.
// A later connection for listener gets a new server.
func (p *Proxy) DrainHTTP2(ctx context.Context, listener string) {
	p.h2mu.Lock()
	s := p.h2srvs[listener]
	delete(p.h2srvs, listener)
	p.h2mu.Unlock()
	if s == nil {
		return
	}
	s.close(ctx)
}

// close drains s's connections until ctx ends, then closes what remains.
func (s *h2Server) close(ctx context.Context) {
	if s.weft != nil {
		_ = s.weft.Shutdown(ctx)
		s.weft.Close()
		return
	}
	_ = s.srv.Shutdown(ctx)
	_ = s.srv.Close()
	<-s.done
}

// Close closes the HTTP/2 upstream pool (interrupting its requests), the HTTP/2
// servers and their connections, and drops idle connections of the bridging
// transport. The HTTP/1.1 pool is the caller's to close.
func (p *Proxy) Close() {
	p.cancel()
	p.h2mu.Lock()
	p.closed = true
	srvs := p.h2srvs
	p.h2srvs = nil
	p.h2mu.Unlock()
	done, cancel := context.WithCancel(context.Background())
	cancel() // no drain: closed at once
	for _, s := range srvs {
		s.close(done)
	}
	p.h2.Close()
	p.h1std.CloseIdleConnections()
}

// Target names what a connection was accepted for: the listener to route with and the
// connection's original destination (the listener's own address in explicit mode).
type Target struct {
	Snapshot Snapshot
	Listener string
	Dest     netip.AddrPort
	// Direct: Dest is the address the connection was accepted on (explicit
	// mode, not redirected): chains are chosen by port alone, the port in
	// Host when the listener's own port has none.
	Direct bool
	Source netip.Addr // client address (ring hash on source IP)
	// Requests bounds the listener's requests in flight (HTTP/1.1 requests and
	// HTTP/2 streams together); nil is unbounded.
	Requests *overload.Limit
	// Drain, when it ends, drains an HTTP/1.1 connection: closed at once if it
	// is waiting for a request, after its answer if one is in flight. (HTTP/2
	// connections are drained by DrainHTTP2.) nil: never.
	Drain context.Context
	// Peer is the client's SPIFFE ID verified by the mTLS handshake the listener
	// terminated (sidecar/mtls); zero for a plaintext connection. It is the
	// principal authorization decides on, never a header.
	Peer spiffeid.ID
}

// h2Preface is the client connection preface of prior-knowledge h2c.
const h2Preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

// ServeConn serves one client connection until it closes or ctx ends. It closes conn
// and returns only once conn is closed, HTTP/2 connections included, so the
// caller's accounting (connection limits, shutdown) covers the connection's life.
func (p *Proxy) ServeConn(ctx context.Context, conn net.Conn, t Target) {
	if id, ok := mtls.PeerID(conn); ok && t.Peer.IsZero() {
		t.Peer = id // once per connection, for authorization
	}
	br := p.getReader(conn)
	dw := watchDrain(conn, t.Drain) // the sniff waits like an idle connection
	var rd readDeadline
	// Sniff: prior-knowledge h2c (sidecar peers, gRPC clients) or HTTP/1.1.
	dw.readDeadline(conn, &rd, time.Now().Add(p.cfg.ReadHeaderTimeout))
	if isH2Preface(br) {
		dw.close()
		_ = conn.SetReadDeadline(time.Time{})
		if p.cfg.H2Server == H2ServerWeft {
			p.serveWeftH2(ctx, conn, br, t)
			return
		}
		p.serveH2Conn(ctx, &bufConn{Conn: conn, r: br, w: newWriteBehind(conn), t: t, closed: make(chan struct{})})
		return
	}
	defer p.putReader(br)
	defer dw.close()
	p.serveH1(ctx, conn, br, t, dw, &rd)
}

// isH2Preface reports whether br starts with the h2c client preface. It decides at
// the first byte that differs, reading only what has arrived: a request shorter
// than the preface ("GET / HTTP/1.0\r\n\r\n") is not held waiting for 24 bytes.
// A read error (EOF, deadline) leaves the HTTP/1.1 path to see and report it.
func isH2Preface(br *bufio.Reader) bool {
	for n := 1; ; {
		_, err := br.Peek(n) // blocks until n bytes have arrived (or err)
		b, _ := br.Peek(min(br.Buffered(), len(h2Preface)))
		if string(b) != h2Preface[:len(b)] {
			return false
		}
		if len(b) == len(h2Preface) {
			return true
		}
		if err != nil {
			return false
		}
		// Everything that arrived matches so far: wait for one byte more.
		n = len(b) + 1
	}
}

// serveH2Conn hands bc to its listener's HTTP/2 server, which owns it (and its
// reader) from then on, and waits until the server has closed it. Ending ctx
// does not close it: the listener's shutdown drains it (DrainHTTP2) and then
// closes every connection it still has.
func (p *Proxy) serveH2Conn(ctx context.Context, bc *bufConn) {
	s := p.h2For(bc.t.Listener)
	if s == nil || !s.ln.push(ctx, bc) {
		bc.Close()
		return
	}
	<-bc.closed
}

// h2HeaderListSlack is added to MaxHeaderBytes for SETTINGS_MAX_HEADER_LIST_SIZE,
// which counts 32 bytes more per field than the bytes on the wire (x/net/http2
// pads net/http's MaxHeaderBytes the same way: ten fields' worth).
const h2HeaderListSlack = 10 * 32

// serveWeftH2 serves conn (its preface still in br) on its listener's own HTTP/2
// server until it closes.
func (p *Proxy) serveWeftH2(ctx context.Context, conn net.Conn, br *bufio.Reader, t Target) {
	s := p.h2For(t.Listener)
	if s == nil {
		conn.Close()
		return
	}
	if tc := mtls.Of(conn); tc != nil && tc != conn {
		conn = retirable{conn, tc} // the listener's wrapper stays outermost
	}
	s.weft.ServeConn(context.WithValue(ctx, targetKey{}, &t), conn, br)
	p.putReader(br) // ServeConn returned: nothing reads br any more
}

// retirable is a wrapped mTLS connection that passes on its OnRetire
// (h2server.Retirer): an HTTP/2 connection is drained with a GOAWAY before its
// certificates' NotAfter cuts it.
type retirable struct {
	net.Conn
	tc *mtls.Conn
}

func (r retirable) OnRetire(drain func()) { r.tc.OnRetire(drain) }

// NetConn is the connection retirable wraps (mtls.PeerID looks through it).
func (r retirable) NetConn() net.Conn { return r.Conn }

// bufConn replays bytes already buffered by the sniffing reader, joins the
// server's writes (writeBehind) and reports when the HTTP/2 server closes it.
type bufConn struct {
	net.Conn
	r      *bufio.Reader
	w      *writeBehind
	t      Target
	once   sync.Once
	closed chan struct{} // closed by the first Close
	err    error         // of the first Close
}

// Close closes the connection once; later calls return the first call's error.
func (c *bufConn) Close() error {
	c.once.Do(func() {
		c.w.close() // what the server wrote goes out before the FIN
		c.err = c.Conn.Close()
		close(c.closed)
	})
	return c.err
}

type targetKey struct{}

// connListener feeds connections the sniffer classified as h2c to the HTTP/2 server.
type connListener struct {
	ch   chan net.Conn
	done chan struct{}
	once sync.Once
}

func newConnListener() *connListener {
	return &connListener{ch: make(chan net.Conn), done: make(chan struct{})}
}

func (l *connListener) push(ctx context.Context, c net.Conn) bool {
	select {
	case l.ch <- c:
		return true
	case <-l.done:
		return false
	case <-ctx.Done():
		return false
	}
}

func (l *connListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.ch:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *connListener) Close() error { l.once.Do(func() { close(l.done) }); return nil }

func (l *connListener) Addr() net.Addr { return &net.TCPAddr{} }

func (c *bufConn) Read(b []byte) (int, error) { return c.r.Read(b) }

func (c *bufConn) Write(b []byte) (int, error) { return c.w.Write(b) }

func (p *Proxy) getReader(c net.Conn) *bufio.Reader {
	if v := p.readers.Get(); v != nil {
		br := v.(*bufio.Reader)
		br.Reset(c)
		return br
	}
	return bufio.NewReaderSize(c, p.cfg.BufferSize)
}

func (p *Proxy) putReader(br *bufio.Reader) { br.Reset(nil); p.readers.Put(br) }

func (p *Proxy) getWriter(c io.Writer) *bufio.Writer {
	if v := p.writers.Get(); v != nil {
		bw := v.(*bufio.Writer)
		bw.Reset(c)
		return bw
	}
	return bufio.NewWriterSize(c, p.cfg.BufferSize)
}

func (p *Proxy) putWriter(bw *bufio.Writer) { bw.Reset(nil); p.writers.Put(bw) }

// routeResult is what routing decided for one request.
type routeResult struct {
	route  *dataplane.Route
	status int    // non-zero: answer locally with this status
	local  string // with status: the LocalHeader value
	reason string // body / degraded reason
	// hdrName, hdrValue: one more header of a local answer ("" none).
	hdrName, hdrValue string
}

// resolve finds the route for a request on the active config; now is the
// request's start (authorization reads no clock of its own).
func (p *Proxy) resolve(cfg *dataplane.Config, t *Target, host, path string, h dataplane.Headers, now time.Time) routeResult {
	if p.cfg.Degraded != nil {
		if reason, bad := p.cfg.Degraded(); bad {
			return routeResult{status: http.StatusServiceUnavailable, local: LocalDegraded, reason: reason}
		}
	}
	if cfg == nil {
		return routeResult{status: http.StatusServiceUnavailable, local: LocalRouter, reason: "no active configuration"}
	}
	l := cfg.Listener(t.Listener)
	if l == nil {
		return routeResult{status: http.StatusServiceUnavailable, local: LocalRouter, reason: "listener " + t.Listener + " not configured"}
	}
	// Chains are matched by original destination (port, then IP). A connection
	// made to the listener's own port (explicit mode) has none: the inbound
	// listener then has a default chain (pilot routes it by Host); the outbound
	// listener has per-service-port chains, so the port in Host (80 if absent)
	// picks one, by port alone.
	port := t.Dest.Port()
	tls := !t.Peer.IsZero() // the listener terminated mTLS: the TLS chain's routes
	fc := l.SelectConn(t.Dest, t.Direct, tls)
	if fc == nil && (t.Direct || port == l.Addr.Port()) {
		port = hostPort(host)
		fc = l.Select(port, tls)
	}
	if fc == nil || fc.HTTP == nil {
		return notFound(l, host, port, "no HTTP route table for port")
	}
	if fc.Authz != nil && port == l.Addr.Port() {
		return p.routeThenAuthorize(l, fc, t, host, port, path, h, now)
	}
	if rr, ok := p.authorize(fc, t, port, path, h, now); !ok {
		return rr
	}
	return p.route(l, fc, host, port, path, h)
}

// route finds the virtual host and route on fc.
func (p *Proxy) route(l *dataplane.Listener, fc *dataplane.FilterChain, host string, port uint16, path string, h dataplane.Headers) routeResult {
	vh := fc.HTTP.Lookup(host)
	if vh == nil {
		return notFound(l, host, port, "no virtual host for host")
	}
	r := vh.Match(path, h)
	if r == nil {
		return routeResult{status: http.StatusNotFound, local: LocalRouter,
			reason: fmt.Sprintf("no route for path %q on host %q port %d (virtual host %s)", clipStr(path), clipStr(host), port, vh.Name)}
	}
	return routeResult{route: r}
}

// notFound words a 404 a user can act on: what was looked for and the ports the
// host is served on. It allocates, which only a miss pays for.
func notFound(l *dataplane.Listener, host string, port uint16, what string) routeResult {
	bare := host
	if i := strings.LastIndexByte(host, ':'); i > 0 && !strings.HasSuffix(host, "]") {
		bare = host[:i]
	}
	ports := l.HTTPPorts(bare)
	serves := fmt.Sprintf("host %q is served on no port of listener %s", clipStr(bare), l.Name)
	if len(ports) > 0 {
		ps := make([]string, len(ports))
		for i, p := range ports {
			ps[i] = strconv.Itoa(int(p))
		}
		serves = fmt.Sprintf("host %q is served on port %s", clipStr(bare), strings.Join(ps, ", "))
	}
	return routeResult{status: http.StatusNotFound, local: LocalRouter,
		reason: fmt.Sprintf("%s: looked for host %q port %d on listener %s; %s", what, clipStr(host), port, l.Name, serves)}
}

// clipStr bounds request data quoted in an answer.
func clipStr(s string) string {
	if len(s) > 128 {
		return s[:128] + "..."
	}
	return s
}

// hostPort is the port in a Host header, 80 when it names none.
func hostPort(host string) uint16 {
	for i := len(host) - 1; i >= 0; i-- {
		c := host[i]
		if c == ':' {
			if n, err := strconv.ParseUint(host[i+1:], 10, 16); err == nil && n > 0 {
				return uint16(n)
			}
			return 0
		}
		if c < '0' || c > '9' {
			break
		}
	}
	return 80
}

// pickEndpoint is the endpoint of c for one attempt: the original
// destination for an original-destination cluster (none for a black hole),
// else c's pick preferring one not yet tried.
func (p *Proxy) pickEndpoint(c *cluster.Cluster, hash uint64, tried []*cluster.Endpoint, t *Target) (*cluster.Endpoint, error) {
	if !c.Special() {
		return c.PickAvoiding(hash, tried)
	}
	e, err := p.cfg.Passthrough.Endpoint(c, t.Dest)
	if err != nil {
		p.log.Debug("passthrough refused", "cluster", c.Name, "destination", t.Dest, "listener", t.Listener, "error", err)
	}
	return e, err
}

// requestHash computes the ring-hash key for a route's hash policy.
func requestHash(r *dataplane.Route, h dataplane.Headers, src netip.Addr) uint64 {
	for _, hp := range r.Hash {
		if hp.SourceIP && src.IsValid() {
			b := src.As16()
			return cluster.Hash(b[:])
		}
		if hp.Header != "" {
			if v, ok := h.Get(hp.Header); ok {
				return cluster.Hash([]byte(v))
			}
		}
	}
	return rand.Uint64()
}
