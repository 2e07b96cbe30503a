// Package h2server is the sidecar's own HTTP/2 server connection handling, for
// prior-knowledge HTTP/2 connections (h2c, or h2 inside mTLS) a listener has
// already accepted and sniffed. Frames are read and written with
// golang.org/x/net/http2's Framer and HPACK with its hpack package: this package
// parses no frame and no header block itself.
//
// Why not x/net/http2's Server: its request path hops goroutines several times
// (frame reader → serve loop → handler → serve loop → frame writer), and on the
// sidecar's pooled peer hop those hops, not the protocol, were much of the CPU a
// request cost. Here the goroutine that reads a connection's frames dispatches
// each request to a handler worker, and handlers write their HEADERS, DATA and
// trailers to the connection themselves, under a write lock, in one buffered
// flush per response where it fits (a response of one write costs one socket
// write). Handler workers are pooled per Server so their grown stacks are kept
// between requests.
//
// It is a complete HTTP/2 server for what a proxy needs: SETTINGS exchange and
// ACK, PING, GOAWAY (graceful drain, and on connection errors), RST_STREAM both
// ways, stream states and SETTINGS_MAX_CONCURRENT_STREAMS, connection and stream
// flow control both ways, request header validation as x/net/http2 does it,
// trailers both ways, and header-list and frame-size bounds. Not supported: server
// push, extended CONNECT (:protocol), h2c upgrade from HTTP/1.1, RFC 7540/9218
// prioritization (streams are written as their handlers write them).
//
// Each deliberate difference from x/net/http2's Server is listed in
// difffuzz_test.go, which compares the two on the same client byte streams.
package h2server

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// Defaults and bounds of Config.
const (
	// DefaultMaxConcurrentStreams is x/net/http2's default.
	DefaultMaxConcurrentStreams = 250
	MaxMaxConcurrentStreams     = 1 << 16
	// DefaultMaxReadFrameSize is HTTP/2's initial SETTINGS_MAX_FRAME_SIZE: the
	// read buffer each connection keeps is this big.
	DefaultMaxReadFrameSize = 16 << 10
	MinMaxReadFrameSize     = 16 << 10
	MaxMaxReadFrameSize     = 1<<24 - 1
	// DefaultMaxHeaderListSize is the SETTINGS_MAX_HEADER_LIST_SIZE advertised
	// and enforced (RFC 9113 §6.5.2 units: name + value + 32 per field); a
	// request over it is answered 431 (its fields are decoded no further).
	DefaultMaxHeaderListSize = 64<<10 + 320
	MinMaxHeaderListSize     = 1 << 10
	MaxMaxHeaderListSize     = 16 << 20
	// DefaultWindow is the receive window granted per stream and per connection
	// (x/net/http2's default), the request body bytes buffered at most.
	DefaultWindow = 1 << 20
	MinWindow     = 64 << 10
	MaxWindow     = 16 << 20
	// DefaultIdleTimeout closes (GOAWAY, then close) a connection without
	// streams this long; it fires between IdleTimeout and twice that.
	DefaultIdleTimeout = 5 * time.Minute
	// DefaultResponseBufferBytes is how much response body a handler may write
	// before its HEADERS go out, so a small response leaves in one flush.
	DefaultResponseBufferBytes = 16 << 10
	MinResponseBufferBytes     = 1 << 10
	MaxResponseBufferBytes     = 1 << 20
)

// Fixed protocol bounds.
const (
	// MaxSettingsPerFrame: a SETTINGS frame with more entries (or a repeated
	// one) is a connection error, as in x/net/http2 (a settings flood).
	MaxSettingsPerFrame = 100
	// FirstSettingsTimeout bounds the wait for the client's first SETTINGS
	// after its preface (x/net/http2's value).
	FirstSettingsTimeout = 2 * time.Second
	// GoAwayTimeout is how long a connection that sent its last GOAWAY waits
	// for the client to close before closing it, so the GOAWAY is read and not
	// lost to a TCP reset (x/net/http2's value).
	GoAwayTimeout = time.Second
	// MaxIdleWorkers bounds the handler goroutines a Server keeps waiting for
	// a next request (each keeps its grown stack); more exit when done.
	MaxIdleWorkers = 64
	// MaxRecentResets is how many of the streams it reset last a connection
	// remembers, to ignore the frames the client had in flight for them.
	MaxRecentResets = 16
	initialWindow   = 65535
	maxWindow       = 1<<31 - 1
)

// Config configures a Server.
type Config struct {
	// Handler serves each request; required. It runs on a pooled goroutine.
	Handler http.Handler
	// MaxConcurrentStreams is SETTINGS_MAX_CONCURRENT_STREAMS; a stream over
	// it is refused (RST_STREAM REFUSED_STREAM). 0: DefaultMaxConcurrentStreams.
	MaxConcurrentStreams int
	// MaxReadFrameSize is SETTINGS_MAX_FRAME_SIZE, the largest frame read.
	// 0: DefaultMaxReadFrameSize.
	MaxReadFrameSize int
	// MaxHeaderListSize is SETTINGS_MAX_HEADER_LIST_SIZE. 0: DefaultMaxHeaderListSize.
	MaxHeaderListSize int
	// StreamWindow and ConnWindow are the receive windows granted per stream
	// and per connection. 0: DefaultWindow.
	StreamWindow int
	ConnWindow   int
	// IdleTimeout: 0 means DefaultIdleTimeout; negative never.
	IdleTimeout time.Duration
	// ResponseBufferBytes: 0 means DefaultResponseBufferBytes.
	ResponseBufferBytes int
	// Commit, when set, is told every change of BodyBytesCommitted (a memory
	// guard's overload.Memory.Commit); it must be quick and safe for concurrent
	// use: connections call it under their lock.
	Commit func(delta int64)
	// Logf, when set, is told of handler panics and connection errors.
	Logf func(format string, args ...any)

	// forgetResets (tests only) turns off the ignoring of frames on streams
	// this server reset (recentResets), to model x/net/http2 once its
	// RST_STREAM has been written.
	forgetResets bool
}

// Server serves HTTP/2 connections handed to ServeConn.
type Server struct {
	cfg Config

	mu       sync.Mutex // guards conns and shutdown
	conns    map[*conn]struct{}
	shutdown bool // Shutdown or Close was called: new connections are closed

	work     chan *stream  // to an idle worker (unbuffered: a direct handoff)
	quit     chan struct{} // closed by Close: idle workers exit
	quitOnce sync.Once
	idle     atomic.Int32 // workers waiting on work
	workers  sync.WaitGroup
	bufs     sync.Pool // *[]byte of cap ResponseBufferBytes: response bodies held before their HEADERS

	committed atomic.Int64 // BodyBytesCommitted: the connections' shares, each updated under its mu
}

// BodyBytesCommitted is how many bytes of request bodies the server holds unread
// or has granted clients flow-control credit to send on streams whose bodies are
// still open: memory it has promised, which arrives whether or not a handler has
// run yet. Each stream counts its unread bytes plus its remaining credit (at most
// what its content-length has left); each connection at most its ConnWindow. A
// memory guard adds this to what the runtime reports, so requests admitted
// between two samples cannot push it past its ceiling with bodies they were
// already allowed to send (sidecar/overload). One atomic load.
func (s *Server) BodyBytesCommitted() int64 { return s.committed.Load() }

// New checks cfg and returns a Server.
func New(cfg Config) (*Server, error) {
	if cfg.Handler == nil {
		return nil, errors.New("h2server: Handler is required")
	}
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	def(&cfg.MaxConcurrentStreams, DefaultMaxConcurrentStreams)
	def(&cfg.MaxReadFrameSize, DefaultMaxReadFrameSize)
	def(&cfg.MaxHeaderListSize, DefaultMaxHeaderListSize)
	def(&cfg.StreamWindow, DefaultWindow)
	def(&cfg.ConnWindow, DefaultWindow)
	def(&cfg.ResponseBufferBytes, DefaultResponseBufferBytes)
	if cfg.IdleTimeout == 0 {
		cfg.IdleTimeout = DefaultIdleTimeout
	}
	for _, b := range []struct {
		name      string
		v, lo, hi int
	}{
		{"MaxConcurrentStreams", cfg.MaxConcurrentStreams, 1, MaxMaxConcurrentStreams},
		{"MaxReadFrameSize", cfg.MaxReadFrameSize, MinMaxReadFrameSize, MaxMaxReadFrameSize},
		{"MaxHeaderListSize", cfg.MaxHeaderListSize, MinMaxHeaderListSize, MaxMaxHeaderListSize},
		{"StreamWindow", cfg.StreamWindow, MinWindow, MaxWindow},
		{"ConnWindow", cfg.ConnWindow, MinWindow, MaxWindow},
		{"ResponseBufferBytes", cfg.ResponseBufferBytes, MinResponseBufferBytes, MaxResponseBufferBytes},
	} {
		if b.v < b.lo || b.v > b.hi {
			return nil, fmt.Errorf("h2server: %s %d outside %d..%d", b.name, b.v, b.lo, b.hi)
		}
	}
	return &Server{cfg: cfg, conns: map[*conn]struct{}{}, work: make(chan *stream), quit: make(chan struct{})}, nil
}

// Retirer is a connection that can tell its server it got old (an mTLS
// connection whose certificates are due for renewal, sidecar/mtls
// Conn.OnRetire): ServeConn registers a graceful GOAWAY, after which the
// client's requests in flight finish and new ones go to a new connection.
type Retirer interface {
	OnRetire(drain func())
}

// ServeConn serves c, whose client preface has not been read yet, until it
// closes; it closes c and returns when every handler of c has returned. br,
// when not nil, is c's buffered reader (holding bytes already read from c).
// ctx is the parent of every request's context (its values reach handlers);
// ending it does not end the connection (Shutdown and Close do).
func (s *Server) ServeConn(ctx context.Context, c net.Conn, br *bufio.Reader) {
	if br == nil {
		br = bufio.NewReaderSize(c, 16<<10)
	}
	cc := newConn(s, ctx, c, br)
	if r, ok := c.(Retirer); ok {
		r.OnRetire(cc.startGracefulShutdown)
	}
	s.mu.Lock()
	if s.shutdown {
		s.mu.Unlock()
		_ = c.Close()
		return
	}
	s.conns[cc] = struct{}{}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.conns, cc)
		s.mu.Unlock()
	}()
	cc.serve()
}

// Shutdown sends each connection GOAWAY (no new streams) and returns when all
// have finished their streams and closed, or when ctx ends (then ctx's error;
// Close ends what remains). Connections handed over later are closed at once.
func (s *Server) Shutdown(ctx context.Context) error {
	conns := s.stop()
	for _, c := range conns {
		c.startGracefulShutdown()
	}
	for _, c := range conns {
		select {
		case <-c.done:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// Close closes every connection at once (their handlers' contexts end) and
// waits until they, and the idle workers, are gone.
func (s *Server) Close() {
	conns := s.stop()
	for _, c := range conns {
		c.abort()
	}
	for _, c := range conns {
		<-c.done
	}
	s.quitOnce.Do(func() { close(s.quit) })
	s.workers.Wait()
}

// stop takes no more connections and returns those served now.
func (s *Server) stop() []*conn {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.shutdown = true
	conns := make([]*conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	return conns
}

// dispatch runs st's handler on an idle worker, or a new one.
func (s *Server) dispatch(st *stream) {
	select {
	case s.work <- st:
	default:
		s.workers.Add(1)
		go s.worker(st)
	}
}

// worker runs st, then waits for more while fewer than MaxIdleWorkers wait.
func (s *Server) worker(st *stream) {
	defer s.workers.Done()
	for {
		st.run()
		if s.idle.Add(1) > MaxIdleWorkers {
			s.idle.Add(-1)
			return
		}
		select {
		case st = <-s.work:
			s.idle.Add(-1)
		case <-s.quit:
			s.idle.Add(-1)
			return
		}
	}
}

func (s *Server) logf(format string, args ...any) {
	if s.cfg.Logf != nil {
		s.cfg.Logf(format, args...)
	}
}
