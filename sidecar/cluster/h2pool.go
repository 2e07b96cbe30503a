package cluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http2"

	"github.com/weft-mesh/weft/sidecar/circuitbreak"
	"github.com/weft-mesh/weft/sidecar/h2client"
	"github.com/weft-mesh/weft/sidecar/mtls"
)

// H2Config configures an H2Pool.
type H2Config struct {
	// IdleTimeout closes a connection with no stream in flight for this long, > 0.
	IdleTimeout time.Duration
	// PingTimeout, when > 0, pings a connection silent for this long and closes it
	// if the ping is not answered within the same time (a peer that vanished
	// without a FIN or RST).
	PingTimeout time.Duration
	// MaxReadFrameSize is the largest frame the peer may send; 0 uses 1 MiB.
	MaxReadFrameSize int
	// Dial opens a connection; nil uses net.Dialer.
	Dial func(ctx context.Context, addr string) (net.Conn, error)
	// MTLS makes the mTLS connections to endpoints that need them (see
	// DialEndpoint): HTTP/2 then runs inside the verified TLS connection (ALPN
	// h2 negotiated). nil: this sidecar has no identity and such endpoints fail.
	MTLS *mtls.Manager
	// Client picks the HTTP/2 client: H2ClientWeft (sidecar/h2client) or
	// H2ClientStd (net/http's). "": DefaultH2Client.
	Client string
}

// Values of H2Config.Client.
const (
	H2ClientStd  = "std"
	H2ClientWeft = "weft"
	// DefaultH2Client is the one the sidecar-pair benchmark favours.
	DefaultH2Client = H2ClientWeft
)

// H2Conn is one pooled HTTP/2 client connection, net/http's
// (*http.ClientConn) or sidecar/h2client's (*h2client.Conn).
type H2Conn interface {
	Reserve() error
	Release()
	RoundTrip(*http.Request) (*http.Response, error)
	InFlight() int
	Err() error
	Close() error
}

// H2Pool multiplexes HTTP/2 (prior-knowledge h2c until mTLS) requests on a few
// connections per endpoint: a request takes a free stream on an existing
// connection, and a new connection is dialled only when every connection to the
// endpoint is at the peer's SETTINGS_MAX_CONCURRENT_STREAMS (or closing). New
// connections count against the cluster's maxConnections (its breaker) until they
// close; at that limit, or while a dial to the endpoint is already under way, a
// request waits as a pending request (maxPendingRequests) for a stream or a
// connection slot, up to the cluster's queue timeout (then *OverflowError
// maxConnections; a full queue is maxPendingRequests at once). At the limit a
// connection of the same breaker to another address with no stream in flight is
// closed to make room, as Pool closes an idle one. Like Pool it outlives config
// swaps.
//
// Until a new connection has read the peer's SETTINGS, Go's client assumes 100
// concurrent streams; a peer allowing fewer makes the excess of a first burst
// wait on that connection rather than open another. Our sidecars allow 250.
type H2Pool struct {
	tr     *http.Transport  // H2ClientStd: only its NewClientConn is used, dialling and the h2 client
	weft   *h2client.Config // H2ClientWeft: the connections' configuration
	dialer DialFunc         // H2ClientWeft: dials a connection (mTLS added by DialEndpoint)
	mtls   *mtls.Manager    // H2Config.MTLS: its own certificate generation retires connections (retire.go)

	mu     sync.Mutex         // guards the fields below
	hosts  map[string]*h2host // by "ip:port"
	closed bool
	// waiting is every host's waiters summed: when some wait on another host
	// than the one whose connection changed, they are woken too (a connection
	// with no stream left may now be closed to make room for them).
	waiting int
}

// h2host is the pool's state for one endpoint address; guarded by H2Pool.mu.
type h2host struct {
	conns   []*h2conn
	dialing int           // dials in flight
	waiters int           // requests waiting on changed
	changed chan struct{} // closed (and replaced) when a stream or connection slot may be free
	// gen counts those changes, woken for or not: a Get that saw no free stream
	// and finds gen moved before it waits looks again (a stream freed before it
	// registered woke nobody).
	gen uint64
}

type h2conn struct {
	cc      H2Conn
	addr    string
	breaker *circuitbreak.Breaker // the breaker this connection's slot is held in
	gone    bool                  // removed and its slot released; guarded by H2Pool.mu
	// draining: chosen to be closed for a request of its Service waiting on
	// another address (see evict); a Get that reserved a stream on it then gives
	// the stream back.
	draining atomic.Bool
	// mTLS retirement (retire.go): set before the connection is published;
	// retireTimer is stopped under H2Pool.mu once the connection is gone.
	tls         bool
	ownGen      uint64
	retired     atomic.Bool
	retireTimer *time.Timer
}

// NewH2Pool checks cfg.
func NewH2Pool(cfg H2Config) (*H2Pool, error) {
	if cfg.IdleTimeout <= 0 {
		return nil, fmt.Errorf("cluster h2 pool: IdleTimeout must be positive, got %v", cfg.IdleTimeout)
	}
	if cfg.PingTimeout < 0 {
		return nil, fmt.Errorf("cluster h2 pool: PingTimeout must not be negative, got %v", cfg.PingTimeout)
	}
	if cfg.MaxReadFrameSize == 0 {
		cfg.MaxReadFrameSize = 1 << 20
	}
	if cfg.MaxReadFrameSize < 16<<10 || cfg.MaxReadFrameSize > 16<<20-1 {
		return nil, fmt.Errorf("cluster h2 pool: MaxReadFrameSize %d outside 16KiB..16MiB-1", cfg.MaxReadFrameSize)
	}
	if cfg.Client == "" {
		cfg.Client = DefaultH2Client
	}
	if cfg.Client != H2ClientStd && cfg.Client != H2ClientWeft {
		return nil, fmt.Errorf("cluster h2 pool: Client %q is neither %q nor %q", cfg.Client, H2ClientStd, H2ClientWeft)
	}
	dial := cfg.Dial
	if dial == nil {
		d := &net.Dialer{}
		dial = func(ctx context.Context, addr string) (net.Conn, error) { return d.DialContext(ctx, "tcp", addr) }
	}
	var h2c http.Protocols
	h2c.SetUnencryptedHTTP2(true) // prior knowledge: no upgrade round trip
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
			// An mTLS endpoint's connection is verified before net/http speaks
			// HTTP/2 on it (prior knowledge: the TLS is ours, not net/http's).
			if d, ok := ctx.Value(endpointKey{}).(*h2dial); ok {
				nc, err := DialEndpoint(ctx, dial, cfg.MTLS, d.e)
				d.conn = nc
				return nc, err
			}
			return dial(ctx, addr)
		},
		Protocols:          &h2c,
		DisableCompression: true, // a proxy passes bodies through as they are
		IdleConnTimeout:    cfg.IdleTimeout,
		HTTP2: &http.HTTP2Config{
			MaxReadFrameSize: cfg.MaxReadFrameSize,
			SendPingTimeout:  cfg.PingTimeout,
			PingTimeout:      cfg.PingTimeout,
		},
	}
	p := &H2Pool{dialer: dial, mtls: cfg.MTLS, hosts: make(map[string]*h2host)}
	if cfg.Client == H2ClientStd {
		p.tr = tr
	} else {
		p.weft = &h2client.Config{MaxReadFrameSize: cfg.MaxReadFrameSize, IdleTimeout: cfg.IdleTimeout, PingTimeout: cfg.PingTimeout}
	}
	return p, nil
}

// Get returns a connection to e with one stream reserved for the caller, who must
// call RoundTrip or Release on it exactly once. See H2Pool for when it dials,
// waits or refuses (ErrOverflow).
func (p *H2Pool) Get(ctx context.Context, c *Cluster, e *Endpoint) (H2Conn, error) {
	addr := e.PoolKey()
	var pending bool
	defer func() {
		if pending {
			c.Breaker.Release(circuitbreak.Pending)
		}
	}()
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	var scratch, othersBuf [8]*h2conn
	others := othersBuf[:0]
	evictTried := false
	var gen uint64 // this sidecar's certificate generation: older connections retire
	if p.mtls != nil {
		gen = p.mtls.OwnGeneration()
	}
	for {
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			return nil, ErrPoolClosed
		}
		h := p.hostLocked(addr)
		seen, seenGen := h, h.gen
		// Reserve outside the lock: a reservation can run the connection's state
		// hook synchronously, and the hook takes p.mu.
		cands := append(scratch[:0], h.conns...)
		p.mu.Unlock()
		for _, hc := range cands {
			if hc.draining.Load() || staleH2(hc, gen) || hc.cc.Reserve() != nil {
				continue
			}
			if hc.draining.Load() || hc.retired.Load() { // evict or retire saw no stream in flight before ours
				hc.cc.Release()
				continue
			}
			return hc.cc, nil
		}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			return nil, ErrPoolClosed
		}
		h = p.hostLocked(addr)
		atLimit := h.dialing == 0 && len(h.conns) == len(cands)
		if atLimit && tryConn(c.Breaker) {
			h.dialing++
			p.mu.Unlock()
			cc, err := p.dial(ctx, c, e)
			if err != nil {
				return nil, err
			}
			if cc.Reserve() == nil {
				return cc, nil
			}
			continue // closed already or no stream allowed: look again
		}
		if len(h.conns) != len(cands) {
			p.mu.Unlock()
			continue // a connection arrived meanwhile: try it first
		}
		if atLimit && !evictTried {
			// At maxConnections: a connection of this Service to another address
			// with no stream in flight is worth less than this request. Closing
			// it frees its slot (its state hook wakes every waiter).
			evictTried = true
			others := p.othersLocked(c.Breaker, addr, others[:0])
			p.mu.Unlock()
			if evict(others) {
				continue
			}
			p.mu.Lock()
			if p.closed {
				p.mu.Unlock()
				return nil, ErrPoolClosed
			}
			h = p.hostLocked(addr)
			if len(h.conns) != len(cands) || h.dialing != 0 {
				p.mu.Unlock()
				continue
			}
		}
		if h != seen || h.gen != seenGen {
			p.mu.Unlock()
			continue // a stream may have been freed since the look: look again
		}
		if !pending {
			if _, ok := c.Breaker.Admit(circuitbreak.Pending); !ok {
				p.mu.Unlock()
				return nil, &OverflowError{Cluster: c.Name, Limit: circuitbreak.MaxPendingRequests}
			}
			pending = true
		}
		ch := h.changed
		h.waiters++
		p.waiting++
		p.mu.Unlock()
		if timer == nil {
			timer = time.NewTimer(c.QueueTimeout)
		}
		var err error
		select {
		case <-ch:
		case <-ctx.Done():
			err = ctx.Err()
		case <-timer.C:
			c.Breaker.CountOverflow(circuitbreak.MaxConnections)
			err = &OverflowError{Cluster: c.Name, Limit: circuitbreak.MaxConnections,
				Detail: "no stream free within the queue timeout " + c.QueueTimeout.String()}
		}
		p.mu.Lock()
		p.hostLocked(addr).waiters--
		p.waiting--
		p.forgetLocked(addr)
		p.mu.Unlock()
		if err != nil {
			return nil, err
		}
		evictTried = false // something changed: a connection may be idle now
	}
}

// othersLocked appends to into the live connections held in b to addresses other
// than addr.
func (p *H2Pool) othersLocked(b *circuitbreak.Breaker, addr string, into []*h2conn) []*h2conn {
	for a, h := range p.hosts {
		if a == addr {
			continue
		}
		for _, hc := range h.conns {
			if hc.breaker == b && !hc.gone {
				into = append(into, hc)
			}
		}
	}
	return into
}

// evict closes the first of cs with no stream in flight; false if none has none.
// Marking it draining before looking makes a Get that reserves a stream on it at
// the same time give the stream back, so no request is cut.
func evict(cs []*h2conn) bool {
	for _, hc := range cs {
		if !hc.draining.CompareAndSwap(false, true) {
			continue
		}
		if hc.cc.InFlight() == 0 {
			hc.cc.Close()
			return true
		}
		hc.draining.Store(false)
	}
	return false
}

// tryConn takes a connection slot without counting an overflow: a refused request
// waits as pending, and only its queue timeout is an overflow.
func tryConn(b *circuitbreak.Breaker) bool {
	_, ok := b.TryAcquire(circuitbreak.Connections)
	return ok
}

// hostLocked returns addr's entry, creating it.
func (p *H2Pool) hostLocked(addr string) *h2host {
	h := p.hosts[addr]
	if h == nil {
		h = &h2host{changed: make(chan struct{})}
		p.hosts[addr] = h
	}
	return h
}

// forgetLocked drops addr's entry when nothing refers to it, so endpoint churn
// does not grow the map.
func (p *H2Pool) forgetLocked(addr string) {
	if h := p.hosts[addr]; h != nil && len(h.conns) == 0 && h.dialing == 0 && h.waiters == 0 {
		delete(p.hosts, addr)
	}
}

// wakeAllLocked lets every waiter of every address look again.
func (p *H2Pool) wakeAllLocked() {
	if p.waiting == 0 {
		return
	}
	for _, h := range p.hosts {
		wakeLocked(h)
	}
}

// wakeLocked lets every waiter of h look again.
func wakeLocked(h *h2host) {
	h.gen++
	if h.waiters > 0 {
		close(h.changed)
		h.changed = make(chan struct{})
	}
}

// dial opens a connection holding one of c's connection slots (already acquired)
// and adds it to the pool.
func (p *H2Pool) dial(ctx context.Context, c *Cluster, e *Endpoint) (H2Conn, error) {
	addr := e.PoolKey()
	// The connection outlives this request: only the connect timeout and the
	// request's cancellation bound the dial itself.
	dctx, cancel := context.WithTimeout(ctx, c.ConnectTimeout)
	var d *h2dial
	if e.tls != nil {
		d = &h2dial{e: e}
	}
	var cc H2Conn
	var err error
	if p.tr != nil {
		if d != nil {
			dctx = context.WithValue(dctx, endpointKey{}, d)
		}
		cc, err = p.tr.NewClientConn(dctx, "http", e.Address())
	} else {
		cc, err = p.dialWeft(dctx, e, d)
	}
	cancel()
	p.mu.Lock()
	h := p.hostLocked(addr)
	h.dialing--
	wakeLocked(h)
	if err != nil || p.closed {
		// The slot is free before anyone is woken to take it.
		c.Breaker.Release(circuitbreak.Connections)
		p.wakeAllLocked()
		p.forgetLocked(addr)
		p.mu.Unlock()
		if err != nil {
			return nil, fmt.Errorf("cluster %q: connect %s: %w", c.Name, e.Address(), err)
		}
		cc.Close()
		return nil, ErrPoolClosed
	}
	hc := &h2conn{cc: cc, addr: addr, breaker: c.Breaker}
	if d != nil {
		p.adoptTLSLocked(hc, d)
	}
	h.conns = append(h.conns, hc)
	p.mu.Unlock()
	// Called when streams free up or the connection dies; never under p.mu.
	switch cc := cc.(type) {
	case *http.ClientConn:
		cc.SetStateHook(func(*http.ClientConn) { p.stateChanged(hc) })
	case *h2client.Conn:
		cc.SetStateHook(func() { p.stateChanged(hc) })
	}
	return cc, nil
}

// dialWeft opens an sidecar/h2client connection to e (inside mTLS when e
// needs it; d then brings the mTLS connection back).
func (p *H2Pool) dialWeft(ctx context.Context, e *Endpoint, d *h2dial) (H2Conn, error) {
	nc, err := DialEndpoint(ctx, p.dialer, p.mtls, e)
	if d != nil {
		d.conn = nc
	}
	if err != nil {
		return nil, err
	}
	cc, err := h2client.New(nc, *p.weft)
	if err != nil {
		return nil, err // New closed nc
	}
	return cc, nil
}

// stateChanged wakes the endpoint's waiters and, once the connection is dead,
// removes it and frees its connection slot.
func (p *H2Pool) stateChanged(hc *h2conn) {
	if hc.retired.Load() && hc.cc.InFlight() == 0 {
		hc.cc.Close() // its last stream ended (Close's own hook call is made after this one)
	}
	dead := hc.cc.Err() != nil
	p.mu.Lock()
	h := p.hosts[hc.addr]
	release := false
	if dead && !hc.gone {
		hc.gone, release = true, true
		if hc.retireTimer != nil {
			hc.retireTimer.Stop()
		}
		if h != nil {
			h.conns = slices.DeleteFunc(h.conns, func(x *h2conn) bool { return x == hc })
		}
		// Before the wake: a woken waiter must find the slot free.
		hc.breaker.Release(circuitbreak.Connections)
	}
	if h != nil {
		wakeLocked(h)
		p.forgetLocked(hc.addr)
	}
	if release || (p.waiting > 0 && (h == nil || p.waiting > h.waiters)) {
		// A freed slot, or a connection that may now have no stream in flight,
		// can serve a request pending on another address.
		p.wakeAllLocked()
	}
	p.mu.Unlock()
}

// Conns reports open connections to addr (for tests and stats).
func (p *H2Pool) Conns(addr string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if h := p.hosts[addr]; h != nil {
		return len(h.conns)
	}
	return 0
}

// Close closes every connection, interrupting requests in flight, and makes later
// Gets fail with ErrPoolClosed.
func (p *H2Pool) Close() {
	p.mu.Lock()
	p.closed = true
	var all []*h2conn
	for _, h := range p.hosts {
		all = append(all, h.conns...)
		wakeLocked(h)
	}
	p.mu.Unlock()
	for _, hc := range all {
		hc.cc.Close() // the state hook removes it and releases its slot
	}
}

// Messages of net/http's HTTP/2 client for a request the server never saw:
// a GOAWAY naming an earlier last stream, or a connection that became unusable
// before the request went out. They have no exported sentinels.
const (
	errGoAwayMsg   = "http2: Transport received Server's graceful shutdown GOAWAY"
	errUnusableMsg = "http2: client conn not usable"
)

// Unprocessed reports whether an HTTP/2 round trip failed before the peer
// processed the request (GOAWAY past the stream, REFUSED_STREAM, an unusable
// connection), so it can be sent again on another connection without risk,
// provided its body can be replayed.
func Unprocessed(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, h2client.ErrGoAway) || errors.Is(err, h2client.ErrUnusable) {
		return true
	}
	var se http2.StreamError
	if errors.As(err, &se) {
		return se.Code == http2.ErrCodeRefusedStream
	}
	for e := err; e != nil; e = errors.Unwrap(e) {
		if m := e.Error(); m == errGoAwayMsg || m == errUnusableMsg {
			return true
		}
	}
	return false
}
