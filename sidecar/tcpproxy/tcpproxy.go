// Package tcpproxy proxies TCP connections to a cluster as byte streams. Between two
// *net.TCPConn, io.Copy uses splice(2) on Linux, so bytes never enter user space.
package tcpproxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/weft-mesh/weft/sidecar/authz"
	"github.com/weft-mesh/weft/sidecar/circuitbreak"
	"github.com/weft-mesh/weft/sidecar/cluster"
	"github.com/weft-mesh/weft/sidecar/dataplane"
	"github.com/weft-mesh/weft/sidecar/mtls"
	"github.com/weft-mesh/weft/sidecar/outlier"
)

// Config configures a Proxy.
type Config struct {
	Logger hclog.Logger // required
	// Dial opens upstream connections; nil uses net.Dialer.
	Dial func(ctx context.Context, addr string) (net.Conn, error)
	// Rand picks weighted clusters; nil uses math/rand/v2.
	Rand func() uint64
	// Observer, when set, is told of every connection that reached an upstream.
	Observer Observer
	// AuthzExpired, when set and reporting true, refuses every connection on a
	// chain under authorization (authz.go): its state is past staleness expiry.
	AuthzExpired func() (reason string, expired bool)
	// MTLS makes the mTLS connections to endpoints that need them
	// (cluster.DialEndpoint); nil: this sidecar has no identity and such
	// endpoints are refused, never reached in plaintext.
	MTLS *mtls.Manager
	// Passthrough gives connections to an original-destination cluster their
	// original destination and refuses, and counts, loops to the sidecar's own
	// listeners and black-hole clusters; nil: a private one that knows no own
	// addresses.
	Passthrough *cluster.Passthrough
}

// Observer receives one call per proxied connection, when it ends.
type Observer interface {
	// TCPConn reports a finished connection to cluster: bytesIn were read from the
	// client (and sent upstream), bytesOut were written to the client.
	TCPConn(cluster string, bytesIn, bytesOut int64)
}

// ErrRateLimited: the cluster's local rate limit refused the connection.
var ErrRateLimited = errors.New("local rate limit exceeded")

// Proxy forwards TCP connections.
type Proxy struct {
	cfg Config
	// Authorization logs, sampled (authz.go).
	denyLog, auditLog authz.Sampler
}

// New checks cfg.
func New(cfg Config) (*Proxy, error) {
	if cfg.Logger == nil {
		return nil, errors.New("tcpproxy: Logger is required")
	}
	if cfg.Dial == nil {
		d := &net.Dialer{}
		cfg.Dial = func(ctx context.Context, addr string) (net.Conn, error) { return d.DialContext(ctx, "tcp", addr) }
	}
	if cfg.Rand == nil {
		cfg.Rand = rand.Uint64
	}
	if cfg.Passthrough == nil {
		cfg.Passthrough = cluster.NewPassthrough(nil)
	}
	return &Proxy{cfg: cfg}, nil
}

// Serve is ServeTo with no original destination known (a passthrough is
// then refused).
func (p *Proxy) Serve(ctx context.Context, client net.Conn, route *dataplane.TCPRoute, src netip.Addr) error {
	return p.ServeTo(ctx, client, route, src, netip.AddrPort{})
}

// ServeTo proxies client to a cluster of route until either side finishes or
// ctx ends. It closes client. src is used for ring-hash clusters (hash of the
// source address); dst is the connection's original destination, where an
// original-destination (passthrough) cluster sends it.
func (p *Proxy) ServeTo(ctx context.Context, client net.Conn, route *dataplane.TCPRoute, src netip.Addr, dst netip.AddrPort) error {
	defer client.Close()
	now := time.Now()
	if err := p.authorize(client, route, now); err != nil {
		return err
	}
	c := route.Pick(p.cfg.Rand())
	// A connection is one request for a TCP cluster's local rate limit (as
	// Envoy's network local_ratelimit filter): past it, the connection is closed.
	if ok, _ := c.Shared.Limiter.Allow(now); !ok {
		return fmt.Errorf("cluster %q: %w", c.Name, ErrRateLimited)
	}
	var hash uint64
	if c.Hashed && src.IsValid() {
		b := src.As16()
		hash = cluster.Hash(b[:])
	}
	var e *cluster.Endpoint
	var err error
	if c.Special() {
		e, err = p.cfg.Passthrough.Endpoint(c, dst) // refusals counted there
	} else {
		e, err = c.Pick(hash)
	}
	if err != nil {
		return err
	}
	// A TCP stream has no pending queue: at maxConnections it is refused, the
	// client's connection closed at once (the deferred Close) and the overflow
	// counted in the breaker (/metrics).
	if l, ok := c.Breaker.Admit(circuitbreak.Connections); !ok {
		return &cluster.OverflowError{Cluster: c.Name, Limit: l}
	}
	defer c.Breaker.Release(circuitbreak.Connections)
	e.Begin()
	defer e.End()
	dctx, cancel := context.WithTimeout(ctx, c.ConnectTimeout)
	up, err := cluster.DialEndpoint(dctx, p.cfg.Dial, p.cfg.MTLS, e)
	cancel()
	if err != nil {
		if ctx.Err() == nil { // not the host's doing when the listener is stopping
			c.Observe(e, outlier.ConnectFailed)
		}
		return fmt.Errorf("cluster %q: connect %s: %w", c.Name, e.Address(), err)
	}
	c.Observe(e, outlier.ConnectSucceeded)
	defer up.Close()
	stop := context.AfterFunc(ctx, func() { client.Close(); up.Close() })
	defer stop()
	var wg sync.WaitGroup
	var upErr, downErr error
	var bytesIn, bytesOut int64
	wg.Add(2)
	go func() { defer wg.Done(); bytesIn, upErr = pipe(up, client, route.IdleTimeout) }()
	go func() { defer wg.Done(); bytesOut, downErr = pipe(client, up, route.IdleTimeout) }()
	wg.Wait()
	if p.cfg.Observer != nil {
		p.cfg.Observer.TCPConn(c.Name, bytesIn, bytesOut)
	}
	if err := errors.Join(upErr, downErr); err != nil && ctx.Err() == nil {
		return fmt.Errorf("cluster %q: %w", c.Name, err)
	}
	return nil
}

// pipe copies src to dst, then half-closes dst so the peer sees EOF while the other
// direction keeps flowing. It returns the bytes copied.
func pipe(dst, src net.Conn, idle time.Duration) (int64, error) {
	var n int64
	var err error
	if idle <= 0 {
		n, err = io.Copy(dst, src) // splice between TCP conns
	} else {
		n, err = copyIdle(dst, src, idle)
	}
	if cw, ok := dst.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	} else {
		_ = dst.Close()
	}
	if err != nil && !errors.Is(err, net.ErrClosed) {
		return n, err
	}
	return n, nil
}

// copyIdle copies with a deadline refreshed on every read, closing idle streams.
func copyIdle(dst, src net.Conn, idle time.Duration) (int64, error) {
	buf := make([]byte, 32<<10)
	var total int64
	for {
		_ = src.SetReadDeadline(time.Now().Add(idle))
		n, err := src.Read(buf)
		if n > 0 {
			w, werr := dst.Write(buf[:n])
			total += int64(w)
			if werr != nil {
				return total, werr
			}
		}
		if err == io.EOF {
			return total, nil
		}
		if err != nil {
			return total, err
		}
	}
}
