package cluster

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"syscall"
	"time"

	"github.com/weft-mesh/weft/sidecar/circuitbreak"
)

// PoolConfig configures an upstream HTTP/1.1 connection pool.
type PoolConfig struct {
	MaxIdlePerHost int           // idle connections kept per endpoint, > 0
	IdleTimeout    time.Duration // idle connections older than this are closed, > 0
	BufferSize     int           // bufio reader/writer size per connection, ≥ 4096
	// Dial opens a connection; nil uses net.Dialer.
	Dial func(ctx context.Context, addr string) (net.Conn, error)
}

// Defaults for the owner of a pool: idle connections are closed after
// DefaultIdleTimeout (net/http's IdleConnTimeout) and Reap runs every ReapInterval,
// so a closed idle connection lingers at most that much past its timeout.
const (
	DefaultIdleTimeout = 90 * time.Second
	ReapInterval       = 10 * time.Second
)

// ErrOverflow is returned when a circuit-breaker limit refuses a request.
var ErrOverflow = errors.New("upstream overflow")

// ErrPoolClosed is returned by Get after Close.
var ErrPoolClosed = errors.New("pool closed")

// Pool keeps idle keep-alive connections per endpoint address. It lives as long as the
// proxy, across config swaps, so a route change never drops warm connections.
type Pool struct {
	cfg PoolConfig

	mu     sync.Mutex       // guards the fields below
	hosts  map[string]*host // by "ip:port"
	closed bool
}

type host struct {
	idle    []*Conn      // LIFO: the warmest connection first
	waiters []chan *Conn // pending requests waiting for a connection
}

// Conn is one upstream connection with its buffers; owned by one request at a time.
type Conn struct {
	net.Conn
	R *bufio.Reader
	W *bufio.Writer

	addr    string
	breaker *circuitbreak.Breaker // the cluster's breaker the connection is counted in
	pool    *Pool
	idleAt  time.Time
	closed  bool

	// The idle readability check: rc is the raw socket (nil when the dialer gave no
	// *net.TCPConn), peekFn is c.peek bound once so a check allocates nothing.
	rc      syscall.RawConn
	peekFn  func(fd uintptr)
	peekBuf [1]byte
	peekBad bool
}

// NewPool checks cfg.
func NewPool(cfg PoolConfig) (*Pool, error) {
	if cfg.MaxIdlePerHost <= 0 || cfg.IdleTimeout <= 0 {
		return nil, fmt.Errorf("cluster pool: MaxIdlePerHost and IdleTimeout must be positive: %+v", cfg)
	}
	if cfg.BufferSize < 4096 {
		return nil, fmt.Errorf("cluster pool: BufferSize %d < 4096", cfg.BufferSize)
	}
	if cfg.Dial == nil {
		d := &net.Dialer{}
		cfg.Dial = func(ctx context.Context, addr string) (net.Conn, error) { return d.DialContext(ctx, "tcp", addr) }
	}
	return &Pool{cfg: cfg, hosts: make(map[string]*host)}, nil
}

// Get returns an idle connection to e, dials a new one within c's connection limit, or
// waits (as a pending request, within that limit) for one to be released. reused says
// the connection served a request before (it may have been closed by the peer).
// A pooled connection on which anything arrived while it was idle (bytes the peer
// sent past its last response, or its close) is closed here, never handed out: those
// bytes would be read as the next request's response. A reused connection keeps the
// deadline its last user left (possibly passed): the caller sets its own before any
// I/O, so a release need not clear it.
func (p *Pool) Get(ctx context.Context, c *Cluster, e *Endpoint) (conn *Conn, reused bool, err error) {
	addr := e.Address()
	for {
		conn, err = p.takeIdle(addr)
		if err != nil {
			return nil, false, err
		}
		if conn == nil {
			break
		}
		if conn.quiet() {
			return conn, true, nil
		}
		conn.Close()
	}
	for {
		if c.Breaker.Acquire(circuitbreak.Connections) {
			conn, err = p.dial(ctx, c, addr)
			return conn, false, err
		}
		conn, err = p.wait(ctx, c, addr)
		if err != nil {
			return nil, false, err
		}
		if conn.quiet() {
			return conn, true, nil
		}
		conn.Close() // frees a connection slot: dial on the next turn
	}
}

// takeIdle pops the warmest idle connection to addr that is not past IdleTimeout.
func (p *Pool) takeIdle(addr string) (*Conn, error) {
	now := time.Now()
	var conn *Conn
	var stale []*Conn
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil, ErrPoolClosed
	}
	h := p.hosts[addr]
	if h == nil {
		h = &host{}
		p.hosts[addr] = h
	}
	for len(h.idle) > 0 {
		conn = h.idle[len(h.idle)-1]
		h.idle[len(h.idle)-1] = nil
		h.idle = h.idle[:len(h.idle)-1]
		if now.Sub(conn.idleAt) < p.cfg.IdleTimeout {
			break
		}
		stale = append(stale, conn)
		conn = nil
	}
	p.mu.Unlock()
	for _, s := range stale {
		s.Close()
	}
	return conn, nil
}

// wait waits, as a pending request, for a connection to addr to be released.
func (p *Pool) wait(ctx context.Context, c *Cluster, addr string) (*Conn, error) {
	if !c.Breaker.Acquire(circuitbreak.Pending) {
		return nil, fmt.Errorf("cluster %q: %w: max pending requests", c.Name, ErrOverflow)
	}
	defer c.Breaker.Release(circuitbreak.Pending)
	ch := make(chan *Conn, 1)
	p.mu.Lock()
	h := p.hosts[addr]
	if h == nil {
		h = &host{}
		p.hosts[addr] = h
	}
	h.waiters = append(h.waiters, ch)
	p.mu.Unlock()
	t := time.NewTimer(c.ConnectTimeout)
	defer t.Stop()
	select {
	case conn := <-ch:
		return conn, nil
	case <-t.C:
	case <-ctx.Done():
	}
	p.mu.Lock()
	for i, w := range h.waiters {
		if w == ch {
			h.waiters = append(h.waiters[:i], h.waiters[i+1:]...)
			break
		}
	}
	p.mu.Unlock()
	// A Put may have handed us a connection just before we deregistered.
	select {
	case conn := <-ch:
		return conn, nil
	default:
	}
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	return nil, fmt.Errorf("cluster %q: %w: max connections, no connection released within %v", c.Name, ErrOverflow, c.ConnectTimeout)
}

func (p *Pool) dial(ctx context.Context, c *Cluster, addr string) (*Conn, error) {
	dctx, cancel := context.WithTimeout(ctx, c.ConnectTimeout)
	nc, err := p.cfg.Dial(dctx, addr)
	cancel()
	if err != nil {
		c.Breaker.Release(circuitbreak.Connections)
		return nil, fmt.Errorf("cluster %q: connect %s: %w", c.Name, addr, err)
	}
	if tc, ok := nc.(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true)
	}
	conn := &Conn{
		Conn: nc, addr: addr, breaker: c.Breaker, pool: p,
		R: bufio.NewReaderSize(nc, p.cfg.BufferSize), W: bufio.NewWriterSize(nc, p.cfg.BufferSize),
	}
	if sc, ok := nc.(syscall.Conn); ok {
		if rc, err := sc.SyscallConn(); err == nil {
			conn.rc, conn.peekFn = rc, conn.peek
		}
	}
	return conn, nil
}

// quiet reports that nothing arrived on an idle connection since its last response:
// no byte buffered and, on a raw socket, none (and no close) waiting in the kernel.
// The kernel check is one non-blocking MSG_PEEK recv per reuse; the alternative, a
// reader goroutine per idle connection as net/http keeps, costs a goroutine and a
// wake-up per response. Without a raw socket only the buffer is checked.
func (c *Conn) quiet() bool {
	if c.R.Buffered() > 0 {
		return false
	}
	if c.rc == nil {
		return true
	}
	c.peekBad = false
	if err := c.rc.Control(c.peekFn); err != nil {
		return false
	}
	return !c.peekBad
}

// Put returns a healthy keep-alive connection: to a waiting request first, else idle.
// A connection with unread bytes buffered (the upstream sent more than its response's
// framing allowed) is closed instead.
func (p *Pool) Put(conn *Conn) {
	if conn.R.Buffered() > 0 || conn.W.Buffered() > 0 {
		conn.Close()
		return
	}
	conn.idleAt = time.Now()
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		conn.Close()
		return
	}
	h := p.hosts[conn.addr]
	if h != nil && len(h.waiters) > 0 {
		w := h.waiters[0]
		h.waiters = h.waiters[1:]
		p.mu.Unlock()
		w <- conn // buffered 1 and removed from waiters: never blocks
		return
	}
	if h == nil || len(h.idle) >= p.cfg.MaxIdlePerHost {
		p.mu.Unlock()
		conn.Close()
		return
	}
	h.idle = append(h.idle, conn)
	p.mu.Unlock()
}

// Close closes the connection and releases its slot in the cluster's breaker.
func (c *Conn) Close() error {
	if c.closed {
		return nil
	}
	c.closed = true
	c.breaker.Release(circuitbreak.Connections)
	return c.Conn.Close()
}

// Idle reports idle connections per address (for tests and stats).
func (p *Pool) Idle(addr string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if h := p.hosts[addr]; h != nil {
		return len(h.idle)
	}
	return 0
}

// Reap closes idle connections unused for IdleTimeout at now and idle connections to
// addresses not in live (the "ip:port" of every endpoint of the active configs: an
// endpoint that left must not keep sockets open), and forgets addresses with nothing
// left, so endpoint churn does not grow the pool. Connections in use are not
// touched. The owner calls it every ReapInterval; Get also drops stale connections.
func (p *Pool) Reap(now time.Time, live map[string]struct{}) {
	var stale []*Conn
	p.mu.Lock()
	for a, h := range p.hosts {
		_, ok := live[a]
		keep := h.idle[:0]
		for _, c := range h.idle {
			if !ok || now.Sub(c.idleAt) >= p.cfg.IdleTimeout {
				stale = append(stale, c)
			} else {
				keep = append(keep, c)
			}
		}
		clear(h.idle[len(keep):])
		h.idle = keep
		if len(h.idle) == 0 && len(h.waiters) == 0 {
			delete(p.hosts, a)
		}
	}
	p.mu.Unlock()
	for _, c := range stale {
		c.Close()
	}
}

// Close closes every idle connection; later Puts close their connection.
func (p *Pool) Close() {
	p.mu.Lock()
	p.closed = true
	var all []*Conn
	for a, h := range p.hosts {
		all = append(all, h.idle...)
		delete(p.hosts, a)
	}
	p.mu.Unlock()
	for _, c := range all {
		c.Close()
	}
}
