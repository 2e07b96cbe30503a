package cluster

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/weft-mesh/weft/sidecar/circuitbreak"
	"github.com/weft-mesh/weft/sidecar/mtls"
)

// PoolConfig configures an upstream HTTP/1.1 connection pool.
type PoolConfig struct {
	MaxIdlePerHost int           // idle connections kept per endpoint, > 0
	IdleTimeout    time.Duration // idle connections older than this are closed, > 0
	BufferSize     int           // bufio reader/writer size per connection, ≥ 4096
	// Dial opens a connection; nil uses net.Dialer.
	Dial func(ctx context.Context, addr string) (net.Conn, error)
	// MTLS makes the mTLS connections to endpoints that need them (see
	// DialEndpoint); nil: this sidecar has no identity and such endpoints fail.
	MTLS *mtls.Manager
}

// Defaults for the owner of a pool: idle connections are closed after
// DefaultIdleTimeout (net/http's IdleConnTimeout) and Reap runs every ReapInterval,
// so a closed idle connection lingers at most that much past its timeout.
const (
	DefaultIdleTimeout = 90 * time.Second
	ReapInterval       = 10 * time.Second
)

// ErrPoolClosed is returned by Get after Close.
var ErrPoolClosed = errors.New("pool closed")

// Pool keeps idle keep-alive connections per endpoint address. It lives as long as the
// proxy, across config swaps, so a route change never drops warm connections.
type Pool struct {
	cfg PoolConfig

	mu    sync.Mutex       // guards the fields below
	hosts map[string]*host // by "ip:port"
	// slotWaiters are the pending requests per breaker, oldest first: a closed
	// connection frees a slot in its breaker, which any of them (whatever its
	// address) may take.
	slotWaiters map[*circuitbreak.Breaker][]*waiter
	closed      bool
	// waiting counts pending requests, so a Close with none skips the lock.
	waiting atomic.Int64
}

type host struct {
	idle    []*Conn   // LIFO: the warmest connection first
	waiters []*waiter // pending requests for this address, oldest first
}

// waiter is one pending request: ch (buffered 1) receives a released connection
// to addr, or nil when a slot in b was freed (take it and dial).
type waiter struct {
	ch   chan *Conn
	addr string
	b    *circuitbreak.Breaker
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
	// tls: Conn is an *mtls.Conn (rc is its socket): bytes waiting in the
	// kernel may be TLS messages that are not data (a session ticket, a key
	// update), which quiet lets crypto/tls consume. age retires it (retire.go).
	tls bool
	age tlsAge
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
	return &Pool{cfg: cfg, hosts: make(map[string]*host), slotWaiters: make(map[*circuitbreak.Breaker][]*waiter)}, nil
}

// Get returns an idle connection to e, dials a new one within c's connection limit, or
// waits (as a pending request, within c's maxPendingRequests, for at most c's queue
// timeout) for a connection to e to be released or a connection slot to be freed.
// At the limit it first closes an idle connection to another address of c's breaker:
// an idle connection is worth less than a waiting request. Refusals are
// *OverflowError: a full queue maxPendingRequests at once, a queue timeout
// maxConnections. reused says the connection served a request before (it may have
// been closed by the peer).
// A pooled connection on which anything arrived while it was idle (bytes the peer
// sent past its last response, or its close) is closed here, never handed out: those
// bytes would be read as the next request's response. A reused connection keeps the
// deadline its last user left (possibly passed): the caller sets its own before any
// I/O, so a release need not clear it.
func (p *Pool) Get(ctx context.Context, c *Cluster, e *Endpoint) (conn *Conn, reused bool, err error) {
	addr := e.PoolKey()
	var q *queued // set once this request is pending
	defer func() {
		if q != nil {
			q.stop()
		}
	}()
	for {
		// An idle connection first, on every turn: one put back while this
		// request was on its way to waiting went idle (no waiter to hand it to),
		// and wait sends the request back here rather than let it sit there.
		conn, err = p.takeIdle(addr)
		if err != nil {
			return nil, false, err
		}
		if conn != nil {
			if conn.quiet() {
				return conn, true, nil
			}
			conn.Close()
			continue
		}
		if _, ok := c.Breaker.TryAcquire(circuitbreak.Connections); ok {
			conn, err = p.dial(ctx, c, e)
			return conn, false, err
		}
		if p.evictIdle(c.Breaker, addr) {
			continue // a slot was freed: take it
		}
		if q == nil {
			if q, err = p.enqueue(c); err != nil {
				return nil, false, err
			}
		}
		conn, err = p.wait(ctx, c, addr, q)
		if err != nil {
			return nil, false, err
		}
		if conn == nil {
			continue // a slot was freed: try to take it
		}
		if conn.quiet() {
			return conn, true, nil
		}
		conn.Close() // frees a connection slot: dial on the next turn
	}
}

// queued is a pending request's place in maxPendingRequests and its deadline.
type queued struct {
	b     *circuitbreak.Breaker
	timer *time.Timer
}

func (q *queued) stop() {
	q.timer.Stop()
	q.b.Release(circuitbreak.Pending)
}

// enqueue admits a request as pending, or refuses it with maxPendingRequests.
func (p *Pool) enqueue(c *Cluster) (*queued, error) {
	if _, ok := c.Breaker.Admit(circuitbreak.Pending); !ok {
		return nil, &OverflowError{Cluster: c.Name, Limit: circuitbreak.MaxPendingRequests}
	}
	return &queued{b: c.Breaker, timer: time.NewTimer(c.QueueTimeout)}, nil
}

// takeIdle pops the warmest idle connection to addr that is not past
// IdleTimeout nor retired (retire.go).
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
		if now.Sub(conn.idleAt) < p.cfg.IdleTimeout && !p.retired(conn, now) {
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

// evictIdle closes the coldest idle connection held in b to an address other than
// addr, freeing its slot; false if there is none.
func (p *Pool) evictIdle(b *circuitbreak.Breaker, addr string) bool {
	var victim *Conn
	p.mu.Lock()
	for a, h := range p.hosts {
		if a == addr {
			continue
		}
		for i, cn := range h.idle {
			if cn.breaker == b {
				victim = cn
				h.idle = slices.Delete(h.idle, i, i+1)
				break
			}
		}
		if victim != nil {
			break
		}
	}
	p.mu.Unlock()
	if victim == nil {
		return false
	}
	victim.close(false) // its slot is for us: wake no other waiter
	return true
}

// wait waits, as the pending request q, for a connection to addr to be released
// (returned) or a slot in c's breaker to be freed (nil, nil), until q's deadline
// (overflow: maxConnections) or ctx ends.
func (p *Pool) wait(ctx context.Context, c *Cluster, addr string, q *queued) (*Conn, error) {
	w := &waiter{ch: make(chan *Conn, 1), addr: addr, b: c.Breaker}
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
	// A Put before this registration found no waiter and pooled its connection:
	// look again (Get takes it, or evicts one to another address for its slot)
	// rather than wait for the queue timeout beside an idle connection.
	if p.idleForLocked(c.Breaker, addr) {
		p.mu.Unlock()
		return nil, nil
	}
	h.waiters = append(h.waiters, w)
	p.slotWaiters[w.b] = append(p.slotWaiters[w.b], w)
	p.waiting.Add(1)
	p.mu.Unlock()
	// A slot freed between our TryAcquire and registering would wake nobody.
	if c.Breaker.Available(circuitbreak.Connections) {
		p.mu.Lock()
		p.removeWaiterLocked(w)
		p.mu.Unlock()
		select {
		case conn := <-w.ch:
			return conn, nil
		default:
			return nil, nil
		}
	}
	select {
	case conn := <-w.ch:
		return conn, nil
	case <-q.timer.C:
	case <-ctx.Done():
	}
	p.mu.Lock()
	p.removeWaiterLocked(w)
	p.mu.Unlock()
	// A Put or a freed slot may have reached us just before we deregistered.
	select {
	case conn := <-w.ch:
		if conn != nil {
			return conn, nil
		}
		p.wakeSlotWaiter(w.b) // pass the freed slot on
	default:
	}
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	c.Breaker.CountOverflow(circuitbreak.MaxConnections)
	return nil, &OverflowError{Cluster: c.Name, Limit: circuitbreak.MaxConnections,
		Detail: "no connection released within the queue timeout " + c.QueueTimeout.String()}
}

// idleForLocked reports an idle connection a request of b for addr may use: one to
// addr (takeIdle), or one held in b to another address (evictIdle).
func (p *Pool) idleForLocked(b *circuitbreak.Breaker, addr string) bool {
	for a, h := range p.hosts {
		if a == addr && len(h.idle) > 0 {
			return true
		}
		for _, cn := range h.idle {
			if cn.breaker == b {
				return true
			}
		}
	}
	return false
}

// removeWaiterLocked deregisters w if it is still registered.
func (p *Pool) removeWaiterLocked(w *waiter) {
	if h := p.hosts[w.addr]; h != nil {
		if i := slices.Index(h.waiters, w); i >= 0 {
			h.waiters = slices.Delete(h.waiters, i, i+1)
		}
	}
	ws := p.slotWaiters[w.b]
	if i := slices.Index(ws, w); i >= 0 {
		ws = slices.Delete(ws, i, i+1)
		p.waiting.Add(-1)
		if len(ws) == 0 {
			delete(p.slotWaiters, w.b)
		} else {
			p.slotWaiters[w.b] = ws
		}
	}
}

// wakeSlotWaiter tells the oldest pending request of b that a slot was freed.
func (p *Pool) wakeSlotWaiter(b *circuitbreak.Breaker) {
	if p.waiting.Load() == 0 {
		return
	}
	p.mu.Lock()
	var w *waiter
	if ws := p.slotWaiters[b]; len(ws) > 0 {
		w = ws[0]
		p.removeWaiterLocked(w)
	}
	p.mu.Unlock()
	if w != nil {
		w.ch <- nil // buffered 1 and deregistered: never blocks
	}
}

func (p *Pool) dial(ctx context.Context, c *Cluster, e *Endpoint) (*Conn, error) {
	dctx, cancel := context.WithTimeout(ctx, c.ConnectTimeout)
	nc, err := DialEndpoint(dctx, p.cfg.Dial, p.cfg.MTLS, e)
	cancel()
	if err != nil {
		c.Breaker.Release(circuitbreak.Connections)
		p.wakeSlotWaiter(c.Breaker)
		return nil, fmt.Errorf("cluster %q: connect %s: %w", c.Name, e.Address(), err)
	}
	raw := nc
	tc, isTLS := nc.(*mtls.Conn)
	if isTLS {
		raw = tc.NetConn()
	}
	if tc, ok := raw.(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true)
	}
	age, _ := ageOf(nc)
	conn := &Conn{
		Conn: nc, addr: e.PoolKey(), breaker: c.Breaker, pool: p, tls: isTLS, age: age,
		R: bufio.NewReaderSize(nc, p.cfg.BufferSize), W: bufio.NewWriterSize(nc, p.cfg.BufferSize),
	}
	if sc, ok := raw.(syscall.Conn); ok {
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
	if c.tls {
		return c.quietTLS(c.peekBad)
	}
	return !c.peekBad
}

// longAgo is a read deadline already passed: a read returns only what crypto/tls
// has buffered and never touches the socket.
var longAgo = time.Unix(1, 0)

// TLSPeekWait bounds how long the idle check of an mTLS connection with bytes
// waiting in its socket lets crypto/tls read them (a record in flight).
const TLSPeekWait = time.Millisecond

// quietTLS is the idle check of an mTLS connection. crypto/tls may hold records
// it read ahead (raw, undecrypted), and the socket may hold records that are
// not data (a session ticket, a key update): a read that cannot wait lets
// crypto/tls process both. Application data, an alert or the peer's close mean
// the connection must not carry another request; a timeout means quiet. With
// nothing in the socket (waiting false) the read never reaches it; otherwise it
// may wait TLSPeekWait. A read deadline's timeout is not sticky in crypto/tls,
// and the next user sets its own deadline.
func (c *Conn) quietTLS(waiting bool) bool {
	d := longAgo
	if waiting {
		d = time.Now().Add(TLSPeekWait)
	}
	_ = c.Conn.SetReadDeadline(d)
	_, err := c.R.Peek(1)
	if c.R.Buffered() > 0 {
		return false
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
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
	if p.retired(conn, conn.idleAt) {
		conn.Close() // its last request is done
		return
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		conn.Close()
		return
	}
	h := p.hosts[conn.addr]
	if h != nil && len(h.waiters) > 0 {
		w := h.waiters[0]
		p.removeWaiterLocked(w)
		p.mu.Unlock()
		w.ch <- conn // buffered 1 and deregistered: never blocks
		return
	}
	if len(p.slotWaiters[conn.breaker]) > 0 {
		// A request of the same Service waits for another address: its slot is
		// worth more than an idle connection. Close wakes it.
		p.mu.Unlock()
		conn.Close()
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

// Close closes the connection and releases its slot in the cluster's breaker, which
// the oldest request pending on that breaker is told it may take.
func (c *Conn) Close() error { return c.close(true) }

func (c *Conn) close(wake bool) error {
	if c.closed {
		return nil
	}
	c.closed = true
	// The socket first, then its slot: the limit holds on open sockets too.
	err := c.Conn.Close()
	c.breaker.Release(circuitbreak.Connections)
	if wake {
		c.pool.wakeSlotWaiter(c.breaker)
	}
	return err
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
			if !ok || now.Sub(c.idleAt) >= p.cfg.IdleTimeout || p.retired(c, now) {
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
