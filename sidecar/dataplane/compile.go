package dataplane

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/weft-mesh/weft/sidecar/authz"
	"github.com/weft-mesh/weft/sidecar/circuitbreak"
	"github.com/weft-mesh/weft/sidecar/cluster"
	"github.com/weft-mesh/weft/sidecar/mtls"
	"github.com/weft-mesh/weft/sidecar/xdsresource"
)

// ErrInvalid wraps every reason a candidate state does not compile (a NACK).
var ErrInvalid = errors.New("invalid configuration")

// Limits on a whole candidate state.
const (
	MaxListeners = 256
	MaxClusters  = 10000
)

// Options tune Compile; the zero value is the production setting.
type Options struct {
	// Rand is the random source for random and least-request pickers; nil uses
	// math/rand/v2. Tests pass a seeded source.
	Rand func() uint64
	// DefaultRouteTimeout bounds a request on a route whose action sets no timeout
	// (Envoy's default, 15s). 0 means DefaultRouteTimeout; negative means none
	// (a route without a timeout then waits on its upstream without bound).
	DefaultRouteTimeout time.Duration
	// Registry holds the per-Service state that outlives configurations (breaker
	// counts, hosts); the sidecar creates one and passes it to every compile, and
	// calls Config.Activate after each swap. Nil: a private registry per compile,
	// with the settings applied at once (tests, benchproxy, pilot's check).
	Registry *cluster.Registry
	// QueueTimeout bounds how long a request waits as pending for an upstream
	// connection (see cluster.DefaultQueueTimeout, the value for 0).
	QueueTimeout time.Duration
	// Authz holds authorization state that outlives configurations (Override
	// first sightings, decision counters; see authz.go), committed by Activate
	// (which a compile without Registry runs itself). Nil: a private one.
	Authz *authz.State
	// Now is the clock a compile reads once (an Override's first sighting);
	// nil: time.Now.
	Now func() time.Time
	// MTLS, when set, is given the configuration's trust material at activation
	// (Manager.SetTrust), which closes live connections to peers a new CRL
	// revokes.
	MTLS *mtls.Manager
}

// DefaultRouteTimeout is the route timeout when a route sets none: Envoy's.
const DefaultRouteTimeout = 15 * time.Second

// Compile builds a Config from the xDS client's full candidate state (type URL → name
// → decoded xdsresource value), checking every cross-reference and limit.
func Compile(state map[string]map[string]any) (*Config, error) {
	return CompileWith(state, Options{})
}

// CompileWith is Compile with options.
func CompileWith(state map[string]map[string]any, o Options) (*Config, error) {
	cfg := &Config{
		listeners: make(map[string]*Listener),
		routes:    make(map[string]*RouteTable),
		clusters:  make(map[string]*cluster.Cluster),
		reg:       o.Registry,
		// authz.go
		authzState: o.Authz,
		compiledAt: compileTime(o),
	}
	private := cfg.reg == nil
	if private {
		cfg.reg = cluster.NewRegistry()
	}
	if cfg.authzState == nil {
		cfg.authzState = authz.NewState()
	}
	switch {
	case o.DefaultRouteTimeout == 0:
		cfg.defaultTimeout = DefaultRouteTimeout
	case o.DefaultRouteTimeout > 0:
		cfg.defaultTimeout = o.DefaultRouteTimeout
	}
	// Types other than these (secrets, Weft manifests) are activated elsewhere.
	if n := len(state[xdsresource.ClusterType]); n > MaxClusters {
		return nil, fmt.Errorf("%w: %d clusters, limit %d", ErrInvalid, n, MaxClusters)
	}
	if n := len(state[xdsresource.ListenerType]); n > MaxListeners {
		return nil, fmt.Errorf("%w: %d listeners, limit %d", ErrInvalid, n, MaxListeners)
	}
	// Assignments in LEDS form get their LbEndpoint resources (an orphan
	// LbEndpoint is a NACK).
	eps, err := xdsresource.ResolveLEDS(state[xdsresource.EndpointType], state[xdsresource.LbEndpointType])
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	trust, err := compileTrust(state[xdsresource.SecretType])
	if err != nil {
		return nil, err
	}
	cfg.trust = trust
	// Subset clusters of one Service share its breaker: they must agree on limits.
	byKey := make(map[string]*xdsresource.Cluster)
	for _, name := range sortedKeys(state[xdsresource.ClusterType]) {
		v := state[xdsresource.ClusterType][name]
		xc, ok := v.(*xdsresource.Cluster)
		if !ok {
			return nil, fmt.Errorf("%w: cluster %q: value is %T, want *xdsresource.Cluster", ErrInvalid, name, v)
		}
		c, lim, err := cfg.compileCluster(xc, eps, o)
		if err != nil {
			return nil, err
		}
		key := c.Shared.Key
		if err := cfg.rateLimit(c, xc, byKey[key]); err != nil {
			return nil, err
		}
		if other := byKey[key]; other != nil {
			if ol := breakerLimits(other); !ol.Equal(lim) {
				return nil, fmt.Errorf("%w: cluster %q: circuit_breakers (%s) differ from cluster %q's (%s): clusters of service key %q share one breaker",
					ErrInvalid, name, lim, other.Name, ol, key)
			}
		} else {
			byKey[key] = xc
			b := c.Shared.Breaker
			cfg.commits = append(cfg.commits, func() { _ = b.SetLimits(lim) }) // checked in compileCluster
		}
		if err := cfg.compileOutlier(c, xc, byKey[key]); err != nil {
			return nil, err
		}
		cfg.clusters[name] = c
	}
	for _, name := range sortedKeys(state[xdsresource.RouteType]) {
		v := state[xdsresource.RouteType][name]
		xr, ok := v.(*xdsresource.RouteConfig)
		if !ok {
			return nil, fmt.Errorf("%w: route %q: value is %T, want *xdsresource.RouteConfig", ErrInvalid, name, v)
		}
		rt, err := cfg.compileRoutes("route", name, xr)
		if err != nil {
			return nil, err
		}
		cfg.routes[name] = rt
	}
	bound := make(map[string]string)
	for _, name := range sortedKeys(state[xdsresource.ListenerType]) {
		v := state[xdsresource.ListenerType][name]
		xl, ok := v.(*xdsresource.Listener)
		if !ok {
			return nil, fmt.Errorf("%w: listener %q: value is %T, want *xdsresource.Listener", ErrInvalid, name, v)
		}
		if xl.APIOnly {
			continue
		}
		if other, dup := bound[xl.Addr.String()]; dup {
			return nil, fmt.Errorf("%w: listener %q: address %s already used by listener %q", ErrInvalid, name, xl.Addr, other)
		}
		bound[xl.Addr.String()] = name
		l, err := cfg.compileListener(xl)
		if err != nil {
			return nil, err
		}
		cfg.listeners[name] = l
		if err := cfg.compileDNS(xl); err != nil {
			return nil, err
		}
	}
	if o.MTLS != nil {
		m, t, needed := o.MTLS, cfg.trust, cfg.needsMTLS
		cfg.commits = append(cfg.commits, func() { m.SetTrust(t, needed) })
	}
	cfg.oneTargets = nil // compile scratch
	if private {
		cfg.Activate()
	}
	return cfg, nil
}

func sortedKeys(m map[string]any) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// breakerLimits are xc's circuit-breaker thresholds.
func breakerLimits(xc *xdsresource.Cluster) circuitbreak.Limits {
	l := circuitbreak.Limits{
		MaxConnections:     xc.Limits.MaxConnections,
		MaxPendingRequests: xc.Limits.MaxPendingRequests,
		MaxRequests:        xc.Limits.MaxRequests,
		MaxRetries:         xc.Limits.MaxRetries,
	}
	if b := xc.Budget; b != nil {
		l.Budget = &circuitbreak.Budget{Percent: b.Percent, MinConcurrency: b.MinConcurrency}
	}
	return l
}

// compileCluster builds xc on its service key's long-lived state and returns the
// breaker limits to apply to it (at activation).
func (cfg *Config) compileCluster(xc *xdsresource.Cluster, eps map[string]any, o Options) (*cluster.Cluster, circuitbreak.Limits, error) {
	var src *xdsresource.Endpoints
	switch {
	case xc.OriginalDst:
		src = &xdsresource.Endpoints{Name: xc.Name} // each connection brings its own
	case xc.Static != nil:
		src = xc.Static
	default:
		v, ok := eps[xc.EDSName]
		if !ok {
			return nil, circuitbreak.Limits{}, fmt.Errorf("%w: cluster %q: eds_cluster_config.service_name: endpoints %q not found", ErrInvalid, xc.Name, xc.EDSName)
		}
		src, ok = v.(*xdsresource.Endpoints)
		if !ok {
			return nil, circuitbreak.Limits{}, fmt.Errorf("%w: endpoints %q: value is %T, want *xdsresource.Endpoints", ErrInvalid, xc.EDSName, v)
		}
	}
	// Only the highest-priority (lowest number) group with a healthy host serves;
	// failover between priorities is left to the next config when hosts change.
	list := make([]*cluster.Endpoint, 0, len(src.Endpoints))
	best := ^uint32(0)
	for _, e := range src.Endpoints {
		if e.Healthy && e.Priority < best {
			best = e.Priority
		}
	}
	for _, e := range src.Endpoints {
		if best != ^uint32(0) && e.Priority != best {
			continue
		}
		// No Host: cluster.New gives each endpoint its service key's long-lived one.
		list = append(list, &cluster.Endpoint{Addr: e.Addr, Weight: max(e.Weight, 1), Healthy: e.Healthy, Peer: e.Peer, Locality: e.Locality, MTLS: e.MTLS})
	}
	up, err := cfg.upstreamTLS(xc)
	if err != nil {
		return nil, circuitbreak.Limits{}, err
	}
	lim := breakerLimits(xc)
	if err := lim.Check(); err != nil {
		return nil, lim, fmt.Errorf("%w: cluster %q: circuit_breakers: %v", ErrInvalid, xc.Name, err)
	}
	c, err := cluster.New(cluster.Spec{
		Name:           xc.Name,
		Policy:         cluster.Policy(xc.LB), // same order by construction
		RingMin:        xc.RingMin,
		RingMax:        xc.RingMax,
		HTTP2:          xc.HTTP2,
		ConnectTimeout: xc.ConnectTimeout,
		QueueTimeout:   o.QueueTimeout,
		Shared:         cfg.reg.Shared(cluster.ServiceKey(xc.Name)),
		PanicThreshold: xc.PanicThreshold,
		Endpoints:      list,
		TLS:            up,
		Rand:           o.Rand,
		OriginalDst:    xc.OriginalDst,
		BlackHole:      xc.Static != nil && len(xc.Static.Endpoints) == 0,
	})
	if err != nil {
		return nil, lim, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	return c, lim, nil
}

func missingCluster(kind, name, field, cl string) error {
	return fmt.Errorf("%w: %s %q: %s: cluster %q not found", ErrInvalid, kind, name, field, cl)
}

// oneTarget is a plain cluster action's targets.
type oneTarget struct {
	name   string
	weight uint32
}

// targets resolves ws; field gives the field path of ws, called only to name
// a failure (a valid configuration of 10,000 routes builds no path string).
// Routes of one plain cluster action share their targets slice (immutable, as
// the Config is): most routes are that, a Service's rules all to its cluster.
func (cfg *Config) targets(kind, name string, field func() string, ws []xdsresource.WeightedCluster) ([]target, uint64, error) {
	if len(ws) == 1 && ws[0].Weight > 0 {
		k := oneTarget{ws[0].Name, ws[0].Weight}
		if ts, ok := cfg.oneTargets[k]; ok {
			return ts, uint64(k.weight), nil
		}
		c := cfg.clusters[k.name]
		if c == nil {
			return nil, 0, missingCluster(kind, name, field(), k.name)
		}
		ts := []target{{c: c, cum: uint64(k.weight)}}
		if cfg.oneTargets == nil {
			cfg.oneTargets = make(map[oneTarget][]target)
		}
		cfg.oneTargets[k] = ts
		return ts, uint64(k.weight), nil
	}
	ts := make([]target, 0, len(ws))
	var total uint64
	for i, w := range ws {
		c := cfg.clusters[w.Name]
		if c == nil {
			f := field()
			if len(ws) > 1 {
				f = fmt.Sprintf("%s.weighted_clusters.clusters[%d]", f, i)
			}
			return nil, 0, missingCluster(kind, name, f, w.Name)
		}
		if w.Weight == 0 {
			continue
		}
		total += uint64(w.Weight)
		ts = append(ts, target{c: c, cum: total})
	}
	return ts, total, nil
}

func (cfg *Config) compileRoutes(kind, name string, xr *xdsresource.RouteConfig) (*RouteTable, error) {
	n := 0
	for _, xv := range xr.VirtualHosts {
		n += len(xv.Domains)
	}
	rt := &RouteTable{Name: xr.Name, exact: make(map[string]*VirtualHost, n)} // sized: no rehash at 8,000 domains
	for i, xv := range xr.VirtualHosts {
		vh := &VirtualHost{Name: xv.Name, Routes: make([]*Route, 0, len(xv.Routes))}
		for j := range xv.Routes {
			f := func() string { return fmt.Sprintf("virtual_hosts[%d].routes[%d].route", i, j) }
			r, err := cfg.compileRoute(kind, name, f, &xv.Routes[j])
			if err != nil {
				return nil, err
			}
			vh.Routes = append(vh.Routes, r)
		}
		for _, d := range xv.Domains {
			switch {
			case d == "*":
				rt.star = vh
			case strings.HasPrefix(d, "*"):
				rt.suffixes = append(rt.suffixes, wildcard{s: d[1:], vh: vh})
			case strings.HasSuffix(d, "*"):
				rt.prefixes = append(rt.prefixes, wildcard{s: d[:len(d)-1], vh: vh})
			default:
				rt.exact[d] = vh
			}
		}
	}
	longestFirst := func(ws []wildcard) {
		sort.SliceStable(ws, func(i, j int) bool { return len(ws[i].s) > len(ws[j].s) })
	}
	longestFirst(rt.suffixes)
	longestFirst(rt.prefixes)
	return rt, nil
}

// compileRoute compiles x; f gives its field path (see targets).
func (cfg *Config) compileRoute(kind, name string, f func() string, x *xdsresource.Route) (*Route, error) {
	r := &Route{
		Name: x.Name, pathKind: x.Match.PathKind, path: x.Match.Path, pathRE: x.Match.PathRegex,
		caseSens: x.Match.CaseSensitive, headers: x.Match.Headers,
		Timeout: x.Timeout, Hash: x.Hash, Direct: x.Direct,
	}
	if x.DefaultTimeout {
		r.Timeout, r.DefaultTimeout = cfg.defaultTimeout, cfg.defaultTimeout > 0
	}
	if x.Direct == nil {
		ts, total, err := cfg.targets(kind, name, f, x.Clusters)
		if err != nil {
			return nil, err
		}
		r.targets, r.total = ts, total
	}
	if x.Retry != nil {
		rr := &Retry{NumRetries: int(x.Retry.NumRetries), PerTryTimeout: x.Retry.PerTryTimeout,
			BackoffBase: x.Retry.BackoffBase, BackoffMax: x.Retry.BackoffMax}
		if rr.BackoffBase <= 0 { // a policy built without the decoder: Envoy's defaults
			rr.BackoffBase = xdsresource.DefaultBackoffBase
		}
		if rr.BackoffMax < rr.BackoffBase {
			rr.BackoffMax = rr.BackoffBase * xdsresource.DefaultBackoffMaxMult
		}
		for _, c := range x.Retry.RetryOn {
			rr.On |= retryBits[c]
		}
		r.Retry = rr
	}
	for i, fb := range x.Fallback {
		c := cfg.clusters[fb]
		if c == nil {
			return nil, missingCluster(kind, name, fmt.Sprintf("%s.metadata.filter_metadata[%q].clusters[%d]",
				strings.TrimSuffix(f(), ".route"), xdsresource.FallbackMetadataKey, i), fb)
		}
		r.Fallback = append(r.Fallback, c)
	}
	return r, nil
}

func (cfg *Config) compileListener(xl *xdsresource.Listener) (*Listener, error) {
	l := &Listener{Name: xl.Name, Addr: xl.Addr, byPort: make(map[uint32]*portChains)}
	// Per port: a set per prefix (several chains may share it, one per
	// transport), built in chain order so explicit picks the first.
	type building struct {
		pc    *portChains
		sets  map[netip.Prefix]*chainSet
		order []*chainSet // sets in the order their first chain came
	}
	ports := map[uint32]*building{}
	var portOrder []uint32
	for i := range xl.FilterChains {
		x := &xl.FilterChains[i]
		fc, err := cfg.compileChain(xl, fmt.Sprintf("filter_chains[%d]", i), x)
		if err != nil {
			return nil, err
		}
		b := ports[x.DestinationPort]
		if b == nil {
			b = &building{pc: &portChains{}, sets: map[netip.Prefix]*chainSet{}}
			ports[x.DestinationPort] = b
			portOrder = append(portOrder, x.DestinationPort)
		}
		keys := x.PrefixRanges
		if len(keys) == 0 {
			keys = []netip.Prefix{{}} // the chains without prefix_ranges
		}
		for _, p := range keys {
			set := b.sets[p]
			if set == nil {
				set = &chainSet{}
				b.sets[p] = set
				b.order = append(b.order, set)
			}
			set.put(x.TransportProtocol, fc)
		}
	}
	for _, port := range portOrder {
		b := ports[port]
		pc := b.pc
		// Identical sets (every VIP of one HTTP chain) share one value.
		uniq := make(map[chainSet]*chainSet, len(b.order))
		share := func(s *chainSet) *chainSet {
			if u := uniq[*s]; u != nil {
				return u
			}
			uniq[*s] = s
			return s
		}
		for p, set := range b.sets {
			set = share(set)
			switch {
			case !p.IsValid():
				pc.none = set
			case p.IsSingleIP():
				if pc.exact == nil {
					pc.exact = make(map[netip.Addr]*chainSet)
				}
				pc.exact[p.Addr()] = set
			default:
				pc.prefixes = append(pc.prefixes, prefixSet{p: p, s: set})
			}
		}
		// Longest first, then by address, so the scan's first hit is the most
		// specific and the order does not depend on map iteration.
		slices.SortFunc(pc.prefixes, func(a, b prefixSet) int {
			if a.p.Bits() != b.p.Bits() {
				return b.p.Bits() - a.p.Bits()
			}
			return a.p.Addr().Compare(b.p.Addr())
		})
		if pc.none != nil && pc.none.hasHTTP() {
			pc.explicit = pc.none
		} else {
			for _, s := range b.order {
				if s.hasHTTP() {
					pc.explicit = share(s)
					break
				}
			}
			switch {
			case pc.explicit != nil:
			case pc.none != nil:
				pc.explicit = pc.none
			case port != 0:
				// Only prefix-matched TCP chains: the port's first in wire
				// order (pilot puts the sidecar's own namespace first). The
				// any-port chains are never taken this way: an explicit
				// connection to a port without chains is HTTP by Host.
				pc.explicit = share(b.order[0])
			}
		}
		if port == 0 {
			l.anyPort = pc
		} else {
			l.byPort[port] = pc
		}
	}
	if xl.Default != nil {
		fc, err := cfg.compileChain(xl, "default_filter_chain", xl.Default)
		if err != nil {
			return nil, err
		}
		l.def = &chainSet{}
		l.def.put(xl.Default.TransportProtocol, fc)
		l.defPassthrough = fc.TCP != nil && fc.TCP.passthrough()
	}
	return l, nil
}

func (cfg *Config) compileChain(xl *xdsresource.Listener, f string, x *xdsresource.FilterChain) (*FilterChain, error) {
	fc := &FilterChain{Name: x.Name}
	if x.TLS != nil {
		if err := cfg.needTrust("listener", xl.Name, f+".transport_socket", x.TLS.ValidationSecret); err != nil {
			return nil, err
		}
		fc.MTLS = true
	}
	switch {
	case x.HTTP != nil && x.HTTP.RDSName != "":
		rt := cfg.routes[x.HTTP.RDSName]
		if rt == nil {
			return nil, fmt.Errorf("%w: listener %q: %s.filters[0].typed_config.rds.route_config_name: route %q not found",
				ErrInvalid, xl.Name, f, x.HTTP.RDSName)
		}
		fc.HTTP = rt
	case x.HTTP != nil && x.HTTP.Inline != nil:
		rt, err := cfg.compileRoutes("listener", xl.Name, x.HTTP.Inline)
		if err != nil {
			return nil, err
		}
		fc.HTTP = rt
	case x.TCP != nil:
		ts, total, err := cfg.targets("listener", xl.Name, func() string { return f + ".filters[0].typed_config.cluster" }, x.TCP.Clusters)
		if err != nil {
			return nil, err
		}
		fc.TCP = &TCPRoute{targets: ts, total: total, IdleTimeout: x.TCP.IdleTimeout}
	default:
		return nil, fmt.Errorf("%w: listener %q: %s: no terminal filter", ErrInvalid, xl.Name, f)
	}
	if err := cfg.compileAuthz(xl, f, x, fc); err != nil {
		return nil, err
	}
	return fc, nil
}
