package cluster

import (
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"
)

// Why a passthrough was refused (the reason label of its metric).
const (
	RefusedLoop          = "loop"           // the original destination is one of the sidecar's own listeners
	RefusedBlackHole     = "blackhole"      // the cluster has no endpoints on purpose (REGISTRY_ONLY)
	RefusedNoDestination = "no_destination" // no original destination known (explicit connection, unset Dest)
)

// Errors of Passthrough.Endpoint.
var (
	ErrLoop          = errors.New("original destination is the sidecar's own listener (loop refused)")
	ErrBlackHole     = errors.New("black hole cluster: traffic to destinations outside the mesh is not allowed")
	ErrNoDestination = errors.New("no original destination to pass through to")
)

// MaxOriginalDstHosts bounds the endpoints an original-destination cluster
// keeps for reuse (so HTTP requests to one destination share pooled
// connections without an allocation each); past it each request gets a
// fresh, unkept endpoint. The cache goes with the cluster (the next config).
const MaxOriginalDstHosts = 1024

// Self is the set of the sidecar's own listening addresses, which a
// passthrough must never dial: a connection redirected to the sidecar and
// passed through to the sidecar again would loop (an explicit connection
// routed to an ORIGINAL_DST cluster has the listener itself as its
// destination). A wildcard listen address (0.0.0.0, ::) owns its port on
// loopback, on the unspecified address and on every local address given.
// Immutable.
type Self struct {
	exact    map[netip.AddrPort]struct{}
	wildcard map[uint16]struct{}
	local    map[netip.Addr]struct{}
}

// NewSelf builds the set from the addresses the sidecar listens on and the
// machine's (pod's) own addresses.
func NewSelf(listen []netip.AddrPort, local []netip.Addr) *Self {
	s := &Self{exact: map[netip.AddrPort]struct{}{}, wildcard: map[uint16]struct{}{}, local: map[netip.Addr]struct{}{}}
	for _, a := range listen {
		if a.Addr().IsUnspecified() {
			s.wildcard[a.Port()] = struct{}{}
			continue
		}
		s.exact[netip.AddrPortFrom(a.Addr().Unmap(), a.Port())] = struct{}{}
	}
	for _, a := range local {
		s.local[a.Unmap()] = struct{}{}
	}
	return s
}

// Contains says dst is one of the sidecar's own listeners. Allocation-free.
func (s *Self) Contains(dst netip.AddrPort) bool {
	if s == nil {
		return false
	}
	a := dst.Addr().Unmap()
	if _, ok := s.exact[netip.AddrPortFrom(a, dst.Port())]; ok {
		return true
	}
	if _, ok := s.wildcard[dst.Port()]; !ok {
		return false
	}
	if a.IsLoopback() || a.IsUnspecified() {
		return true
	}
	_, ok := s.local[a]
	return ok
}

// Passthrough decides where a connection or request to an original-
// destination cluster goes and counts what it refused. One per sidecar,
// shared by the TCP and HTTP proxies; safe for concurrent use.
type Passthrough struct {
	self *Self

	forwarded, loops, blackholed, noDest atomic.Uint64
}

// NewPassthrough guards against self (nil: nothing is known to be the
// sidecar's own; tests).
func NewPassthrough(self *Self) *Passthrough { return &Passthrough{self: self} }

// PassthroughStats are the counters of a Passthrough.
type PassthroughStats struct {
	Forwarded  uint64 // connections and requests sent on to their original destination
	Loops      uint64 // refused: the destination is the sidecar's own listener
	BlackHoled uint64 // refused: a black-hole cluster
	NoDest     uint64 // refused: no original destination known
}

// Stats reads the counters.
func (p *Passthrough) Stats() PassthroughStats {
	return PassthroughStats{Forwarded: p.forwarded.Load(), Loops: p.loops.Load(), BlackHoled: p.blackholed.Load(), NoDest: p.noDest.Load()}
}

// Special says c is an original-destination or black-hole cluster: its
// endpoint comes from Endpoint, not from its picker.
func (c *Cluster) Special() bool { return c.OriginalDst || c.BlackHole }

// Endpoint is the endpoint of special cluster c (Special) for a connection
// whose original destination is dst: dst itself for an original-destination
// cluster unless it is the sidecar's own (ErrLoop) or unknown
// (ErrNoDestination); ErrBlackHole for a black hole. Each refusal is
// counted; the error names the cluster and destination (allocating, only
// when refused). The endpoint is reused per destination (up to
// MaxOriginalDstHosts), so the forwarding path does not allocate.
func (p *Passthrough) Endpoint(c *Cluster, dst netip.AddrPort) (*Endpoint, error) {
	switch {
	case c.BlackHole:
		p.blackholed.Add(1)
		return nil, fmt.Errorf("cluster %q: %s: %w", c.Name, dst, ErrBlackHole)
	case !c.OriginalDst:
		return nil, fmt.Errorf("cluster %q: not an original-destination cluster", c.Name)
	case !dst.IsValid() || dst.Port() == 0 || dst.Addr().IsUnspecified():
		p.noDest.Add(1)
		return nil, fmt.Errorf("cluster %q: %w", c.Name, ErrNoDestination)
	case p.self.Contains(dst):
		p.loops.Add(1)
		return nil, fmt.Errorf("cluster %q: %s: %w", c.Name, dst, ErrLoop)
	}
	p.forwarded.Add(1)
	return c.dynamic.get(dst), nil
}

// dynamicHosts are an original-destination cluster's endpoints by
// destination, made on first use; lock-free once a destination is known.
type dynamicHosts struct {
	m sync.Map // netip.AddrPort → *Endpoint
	n atomic.Int64
}

func (d *dynamicHosts) get(dst netip.AddrPort) *Endpoint {
	dst = netip.AddrPortFrom(dst.Addr().Unmap(), dst.Port())
	if e, ok := d.m.Load(dst); ok {
		return e.(*Endpoint)
	}
	e := NewEndpoint(dst, 1, true)
	if d.n.Load() >= MaxOriginalDstHosts {
		return e // not kept: the bound is reached
	}
	if v, loaded := d.m.LoadOrStore(dst, e); loaded {
		return v.(*Endpoint)
	}
	d.n.Add(1)
	return e
}
