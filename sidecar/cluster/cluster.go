// Package cluster holds what the request path needs to reach a cluster: its endpoints,
// a load-balancing picker (round robin, least request, random, ring hash), its circuit
// breaker, and upstream connection pools that outlive config swaps.
package cluster

import (
	"errors"
	"fmt"
	"net/netip"
	"sync/atomic"
	"time"

	"github.com/weft-mesh/weft/sidecar/circuitbreak"
	"github.com/weft-mesh/weft/sidecar/mtls"
	"github.com/weft-mesh/weft/sidecar/outlier"
)

// Policy is a load-balancing policy.
type Policy uint8

// Policies.
const (
	RoundRobin Policy = iota
	LeastRequest
	Random
	RingHash
)

// Endpoint is one upstream host as one configuration has it (cheap, rebuilt on every
// compile); its long-lived state (the in-flight count least request reads) is in
// Host, shared by every configuration and subset cluster of its service key.
type Endpoint struct {
	Addr     netip.AddrPort
	Weight   uint32
	Healthy  bool
	Locality string
	// Peer: a peer sidecar's inbound listener; HTTP goes to it over h2c on the
	// H2Pool whatever the cluster's protocol.
	Peer bool
	// MTLS: the endpoint's sidecar has a mesh identity; with a cluster TLS
	// (Spec.TLS) it is dialled with mTLS (auto-mTLS).
	MTLS bool
	// Host is the long-lived state of Addr. NewEndpoint gives a private one; New
	// replaces it with its Shared's host for Addr.
	Host *Host
	// tls is the cluster's upstream when the endpoint is dialled with mTLS; key
	// is what the pools file its connections under: the address, prefixed with
	// the verification for mTLS ones (a connection verified for one set of
	// SPIFFE IDs is not handed to a cluster expecting another). Set by New.
	tls *mtls.Upstream
	key string
}

// NewEndpoint builds an endpoint; weight 0 becomes 1.
func NewEndpoint(a netip.AddrPort, weight uint32, healthy bool) *Endpoint {
	return &Endpoint{Addr: a, Weight: max(weight, 1), Healthy: healthy, Host: newHost(a)}
}

// Address is the dialable "ip:port".
func (e *Endpoint) Address() string { return e.Host.addr }

// PoolKey is what upstream pools key e's connections by: Address for plaintext,
// the mTLS verification and the address for mTLS.
func (e *Endpoint) PoolKey() string {
	if e.key == "" {
		return e.Host.addr
	}
	return e.key
}

// TLS is the mTLS upstream e is dialled with; nil: plaintext.
func (e *Endpoint) TLS() *mtls.Upstream { return e.tls }

// Begin marks a request to e in flight; End ends it.
func (e *Endpoint) Begin() { e.Host.Begin() }

// End ends a request started with Begin.
func (e *Endpoint) End() { e.Host.End() }

// Active reports requests in flight to e's host (over every configuration).
func (e *Endpoint) Active() int64 { return e.Host.Active() }

// Spec describes a cluster to build.
type Spec struct {
	Name           string
	Policy         Policy
	RingMin        uint64 // ring hash only
	RingMax        uint64
	HTTP2          bool
	ConnectTimeout time.Duration
	// QueueTimeout bounds a pending request's wait for a connection; 0 means
	// DefaultQueueTimeout.
	QueueTimeout time.Duration
	// Limits configure a private breaker when Shared is nil; with a Shared, the
	// caller applies limits to Shared.Breaker (dataplane does, at activation).
	Limits circuitbreak.Limits
	Shared *Shared // nil: a private one (unit tests, one-off configs)
	// Outlier configures a private Shared's detector (nil: detection off); with a
	// Shared, the caller configures Shared.Outlier (dataplane does, at activation).
	Outlier *outlier.Config
	// PanicThreshold is the percent of usable endpoints below which the pickers
	// ignore ejections (Envoy's healthy_panic_threshold; 0: never).
	PanicThreshold float64
	Endpoints      []*Endpoint
	// TLS, when set, is the cluster's mTLS upstream (its transport socket):
	// endpoints marked MTLS are dialled with it, the others in plaintext.
	TLS *mtls.Upstream
	// Rand returns a uniformly random uint64; nil uses math/rand/v2. Tests pass a
	// seeded source to make random and least-request picks reproducible.
	Rand func() uint64
	// OriginalDst: the cluster has no endpoints of its own; each connection or
	// request goes to its original destination (OriginalDstEndpoint). Endpoints
	// must be empty.
	OriginalDst bool
	// BlackHole: a static cluster without endpoints on purpose (Istio's
	// BlackHoleCluster): what is sent to it is refused and counted.
	BlackHole bool
}

// Cluster is immutable except for counters; built once per config. Its long-lived
// state is in Shared, which outlives the config.
type Cluster struct {
	Name           string
	HTTP2          bool
	TLS            *mtls.Upstream // nil: no transport socket (plaintext to every endpoint)
	ConnectTimeout time.Duration
	QueueTimeout   time.Duration // a pending request's longest wait (see DefaultQueueTimeout)
	Shared         *Shared
	Breaker        *circuitbreak.Breaker // Shared.Breaker
	Hashed         bool                  // picker wants a request hash (ring hash)
	OriginalDst    bool                  // Spec.OriginalDst
	BlackHole      bool                  // Spec.BlackHole
	dynamic        dynamicHosts          // OriginalDst: endpoints by destination (passthrough.go)
	endpoints      []*Endpoint
	usable         []*Endpoint // what the picker picks from (PickAvoiding's scan)
	picker         picker
	rnd            func() uint64
	panicThreshold float64
	// health caches the panic-mode verdict with the detector generation it was
	// computed at (see healthState); written by any picking goroutine.
	health atomic.Uint64
}

// ErrNoEndpoint is returned when a cluster has no endpoint to send to.
var ErrNoEndpoint = errors.New("no healthy upstream")

// New builds a cluster and its picker.
func New(s Spec) (*Cluster, error) {
	if s.Name == "" {
		return nil, errors.New("cluster: empty name")
	}
	if s.ConnectTimeout <= 0 {
		return nil, fmt.Errorf("cluster %q: connect timeout must be positive", s.Name)
	}
	switch {
	case s.QueueTimeout == 0:
		s.QueueTimeout = DefaultQueueTimeout
	case s.QueueTimeout < 0 || s.QueueTimeout > MaxQueueTimeout:
		return nil, fmt.Errorf("cluster %q: queue timeout %v outside (0, %v]", s.Name, s.QueueTimeout, MaxQueueTimeout)
	}
	sh := s.Shared
	if sh == nil {
		if err := s.Limits.Check(); err != nil {
			return nil, fmt.Errorf("cluster %q: %w", s.Name, err)
		}
		if s.Outlier != nil {
			if err := s.Outlier.Validate(); err != nil {
				return nil, fmt.Errorf("cluster %q: %w", s.Name, err)
			}
		}
		reg := NewRegistry()
		sh = reg.Shared(ServiceKey(s.Name))
		_ = sh.Breaker.SetLimits(s.Limits)  // checked above
		_ = sh.Outlier.Configure(s.Outlier) // checked above
		defer func() {
			reg.mu.Lock()
			sh.syncOutlierLocked() // the private detector's members are these endpoints
			reg.mu.Unlock()
		}()
	}
	if (s.OriginalDst || s.BlackHole) && len(s.Endpoints) > 0 {
		return nil, fmt.Errorf("cluster %q: an original-destination or black-hole cluster has no endpoints, got %d", s.Name, len(s.Endpoints))
	}
	if s.OriginalDst && s.BlackHole {
		return nil, fmt.Errorf("cluster %q: OriginalDst and BlackHole exclude each other", s.Name)
	}
	if !(s.PanicThreshold >= 0 && s.PanicThreshold <= 100) {
		return nil, fmt.Errorf("cluster %q: panic threshold %v outside 0..100", s.Name, s.PanicThreshold)
	}
	for _, e := range s.Endpoints {
		e.Host = sh.Host(e.Addr)
		e.tls, e.key = nil, ""
		if s.TLS != nil && e.MTLS {
			e.tls, e.key = s.TLS, s.TLS.Key()+"@"+e.Host.addr
		}
	}
	c := &Cluster{Name: s.Name, HTTP2: s.HTTP2, TLS: s.TLS, ConnectTimeout: s.ConnectTimeout, QueueTimeout: s.QueueTimeout, Shared: sh, Breaker: sh.Breaker,
		endpoints: s.Endpoints, Hashed: s.Policy == RingHash, panicThreshold: s.PanicThreshold,
		OriginalDst: s.OriginalDst, BlackHole: s.BlackHole}
	// Pick among healthy endpoints; if none is healthy, use all (Envoy's panic mode).
	eps := make([]*Endpoint, 0, len(s.Endpoints))
	for _, e := range s.Endpoints {
		if e.Healthy {
			eps = append(eps, e)
		}
	}
	if len(eps) == 0 {
		eps = s.Endpoints
	}
	rnd := s.Rand
	if rnd == nil {
		rnd = defaultRand
	}
	c.usable, c.rnd = eps, rnd
	switch {
	case len(eps) == 0:
		c.picker = emptyPicker{}
	case s.Policy == RoundRobin:
		c.picker = newRoundRobin(eps)
	case s.Policy == LeastRequest:
		c.picker = &leastRequest{eps: eps, rnd: rnd}
	case s.Policy == Random:
		c.picker = newRandom(eps, rnd)
	case s.Policy == RingHash:
		r, err := newRing(eps, s.RingMin, s.RingMax)
		if err != nil {
			return nil, fmt.Errorf("cluster %q: %w", s.Name, err)
		}
		c.picker = r
	default:
		return nil, fmt.Errorf("cluster %q: unknown policy %d", s.Name, s.Policy)
	}
	return c, nil
}

// Endpoints returns the cluster's endpoints (do not modify).
func (c *Cluster) Endpoints() []*Endpoint { return c.endpoints }

// Pick chooses an endpoint; hash is used by ring hash only. Ejected hosts are
// skipped unless the cluster is in panic mode (see computeHealth); with every
// pickable host ejected and no panic, there is no endpoint.
func (c *Cluster) Pick(hash uint64) (*Endpoint, error) {
	var e *Endpoint
	switch f := c.healthState(); {
	case f&healthNone != 0:
	case f&healthSkip != 0:
		e = c.picker.pick(hash, true)
	default:
		if f&healthIgnoring != 0 {
			c.Shared.Outlier.CountPanicPick()
		}
		e = c.picker.pick(hash, false)
	}
	if e == nil {
		return nil, fmt.Errorf("cluster %q: %w", c.Name, ErrNoEndpoint)
	}
	return e, nil
}

// MaxAvoidPicks bounds how often PickAvoiding asks the picker again before it
// scans for an untried endpoint (Envoy's host_selection_retry_max_attempts, fixed).
const MaxAvoidPicks = 3

// PickAvoiding is Pick for a retry: it prefers an endpoint not in tried when
// another usable one exists, and returns one of tried only when every usable
// endpoint was tried. The picker is asked up to MaxAvoidPicks times (so
// weights and least-request still shape the choice), then the usable endpoints
// are scanned from a random start. With tried empty it is Pick, allocation-free.
func (c *Cluster) PickAvoiding(hash uint64, tried []*Endpoint) (*Endpoint, error) {
	e, err := c.Pick(hash)
	if err != nil || !isTried(tried, e) {
		return e, err
	}
	for i := uint64(1); i < MaxAvoidPicks; i++ {
		// A ring-hash pick moves with the hash; the other pickers ignore it and
		// advance (round robin) or draw again (random, least request).
		if x, err := c.Pick(hash + i*0x9e3779b97f4a7c15); err == nil && !isTried(tried, x) {
			return x, nil
		}
	}
	if n := len(c.usable); n > 0 {
		start := int(c.rnd() % uint64(n))
		for i := range n {
			if x := c.usable[(start+i)%n]; !isTried(tried, x) && c.pickable(x) {
				return x, nil
			}
		}
	}
	return e, nil
}

func isTried(tried []*Endpoint, e *Endpoint) bool {
	for _, t := range tried {
		if t == e {
			return true
		}
	}
	return false
}
