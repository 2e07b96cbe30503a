// Package dataplane compiles validated xDS resources (xdsresource types) into one
// immutable *Config: listeners with their filter chains, route tables indexed by host,
// compiled matchers and cluster pickers. The request path reads only a *Config and
// never xDS types. Publish it with atomic.Pointer[Config]; a request or connection
// loads the pointer once and finishes on that snapshot even if a newer one is stored.
package dataplane

import (
	"net/netip"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/weft-mesh/weft/sidecar/authz"
	"github.com/weft-mesh/weft/sidecar/cluster"
	"github.com/weft-mesh/weft/sidecar/mtls"
	"github.com/weft-mesh/weft/sidecar/xdsresource"
)

// Config is one compiled, consistent data-plane configuration. Immutable after
// Compile (cluster counters aside).
type Config struct {
	listeners map[string]*Listener
	routes    map[string]*RouteTable
	clusters  map[string]*cluster.Cluster
	// defaultTimeout is the route timeout given to routes that set none (0: none);
	// only compilation reads it.
	defaultTimeout time.Duration
	// reg holds the long-lived state the clusters point into; commits apply this
	// config's settings to it in place (see Activate).
	reg     *cluster.Registry
	commits []func()
	// Authorization (authz.go): the long-lived state, the compile's time and
	// the chains' engines, whose Override sightings Activate commits.
	authzState *authz.State
	compiledAt time.Time
	engines    []*authz.Engine
	// trust is the ROOTCA secret compiled (nil: none); needsMTLS says a chain or
	// cluster uses it.
	trust     *mtls.Trust
	needsMTLS bool
	// dns is the name table (dns.go); nil: none.
	dns *DNSTable
	// oneTargets: compile scratch (see targets), nil once compiled.
	oneTargets map[oneTarget][]target
}

// Activate is the retire step of build → validate → swap → retire, called by the
// owner right after it swaps c in (never for a refused candidate): it applies c's
// settings in place to the long-lived per-Service state (breaker limits; H1's
// detector and H4's limiter configuration), whose counts and state carry on, and
// retires the registry's entries c does not reference. Requests still running on
// the previous configuration keep their pointers; what they release lands in the
// retired objects. A config compiled without Options.Registry had its settings
// applied by Compile (its private state is used by nothing else), so Activate is
// optional for it. Not safe for concurrent calls; the runtime calls it under its
// activation lock.
func (c *Config) Activate() {
	for _, f := range c.commits {
		f()
	}
	c.commitAuthz()
	live := make([]*cluster.Cluster, 0, len(c.clusters))
	for _, cl := range c.clusters {
		live = append(live, cl)
	}
	c.reg.Retain(live)
}

// Registry is the registry c's clusters hold their long-lived state in.
func (c *Config) Registry() *cluster.Registry { return c.reg }

// Listener returns the named listener or nil.
func (c *Config) Listener(name string) *Listener { return c.listeners[name] }

// Listeners returns all bindable listeners (API-only listeners are omitted).
func (c *Config) Listeners() []*Listener {
	out := make([]*Listener, 0, len(c.listeners))
	for _, l := range c.listeners {
		out = append(out, l)
	}
	return out
}

// RouteTable returns the named route table or nil.
func (c *Config) RouteTable(name string) *RouteTable { return c.routes[name] }

// Cluster returns the named cluster or nil.
func (c *Config) Cluster(name string) *cluster.Cluster { return c.clusters[name] }

// AddEndpointAddrs adds the pool key ("ip:port", prefixed with the mTLS
// verification for mTLS endpoints) of every endpoint of every cluster to into:
// the live set the upstream pool's Reap keeps idle connections for.
func (c *Config) AddEndpointAddrs(into map[string]struct{}) {
	for _, cl := range c.clusters {
		for _, e := range cl.Endpoints() {
			into[e.PoolKey()] = struct{}{}
		}
	}
}

// Listener is a compiled listener: filter chains by destination port, then by
// the most specific destination prefix, then by transport protocol (Envoy's
// order for the matches Weft supports).
type Listener struct {
	Name    string
	Addr    netip.AddrPort
	byPort  map[uint32]*portChains
	anyPort *portChains // chains without a port match
	def     *chainSet   // default_filter_chain
	// defPassthrough: the default chain only forwards to an original
	// destination (ORIGINAL_DST) or drops (a cluster without endpoints). It
	// means nothing for a connection made to the listener itself, whose
	// original destination is the listener: explicit connections skip it.
	defPassthrough bool
}

// portChains is the chains of one destination port (or of any port) by
// destination prefix. A full-length prefix (a VIP's /32 or /128) is an exact
// map entry; shorter ones are scanned longest first; chains without
// prefix_ranges serve every other address. explicit is the set a connection
// made to the listener itself uses, which has no destination IP to go by:
// the chains without prefix_ranges when they include HTTP, else the first set
// with an HTTP chain (the Host header then picks the virtual host), else the
// chains without prefix_ranges, else (a port's, not the any-port chains) the
// port's first chain in wire order (pilot orders a port's chains for this).
type portChains struct {
	exact    map[netip.Addr]*chainSet
	prefixes []prefixSet
	none     *chainSet
	explicit *chainSet
}

type prefixSet struct {
	p netip.Prefix
	s *chainSet
}

// match is the chain set for destination ip: the longest prefix containing
// it, else the chains without prefix_ranges; nil: none of this port's chains
// takes ip. Allocation-free.
func (pc *portChains) match(ip netip.Addr) *chainSet {
	if pc == nil {
		return nil
	}
	if s := pc.exact[ip]; s != nil {
		return s
	}
	for i := range pc.prefixes {
		if pc.prefixes[i].p.Contains(ip) {
			return pc.prefixes[i].s
		}
	}
	return pc.none
}

func (pc *portChains) explicitSet() *chainSet {
	if pc == nil {
		return nil
	}
	return pc.explicit
}

// chainSet is the chains of one destination port (or of any port) by transport
// protocol, as Envoy's tls_inspector names it.
type chainSet struct {
	any, tls, raw *FilterChain
}

func (s *chainSet) put(transport string, fc *FilterChain) {
	switch transport {
	case xdsresource.TransportTLS:
		s.tls = fc
	case xdsresource.TransportRaw:
		s.raw = fc
	default:
		s.any = fc
	}
}

func (s *chainSet) pick(tls bool) *FilterChain {
	if s == nil {
		return nil
	}
	if tls && s.tls != nil {
		return s.tls
	}
	if !tls && s.raw != nil {
		return s.raw
	}
	if s.any != nil && !s.any.MTLS {
		return s.any
	}
	return nil
}

func (s *chainSet) hasHTTP() bool {
	return s.any != nil && s.any.HTTP != nil || s.tls != nil && s.tls.HTTP != nil || s.raw != nil && s.raw.HTTP != nil
}

// Explicit says dst is the listener's own address: the connection was made to
// the listener (explicit mode, or a peer sidecar dialling the inbound port),
// not redirected to it. A wildcard listener (0.0.0.0, ::) owns its port on
// every local address, a loopback one on loopback in both families (the
// sidecar binds [::1] beside 127.0.0.1 when intercepting).
func (l *Listener) Explicit(dst netip.AddrPort) bool {
	if dst.Port() != l.Addr.Port() {
		return false
	}
	a, d := l.Addr.Addr(), dst.Addr().Unmap()
	return a.IsUnspecified() || a == d || a.IsLoopback() && d.IsLoopback()
}

// setDest is the chain set for a connection whose original destination is
// dst: by port (that port's chains, else the any-port chains), within it by
// the most specific prefix containing the destination IP (else the chains
// without prefix_ranges), else the default chain. A connection made to the
// listener itself is matched by port alone (setPort). Once a set matches, a
// connection whose transport none of its chains takes is refused, never
// handed to a wider set: a STRICT port must not fall through to a plaintext
// default chain.
func (l *Listener) setDest(dst netip.AddrPort, direct bool) *chainSet {
	if direct || l.Explicit(dst) {
		return l.setPort(dst.Port())
	}
	ip := dst.Addr().Unmap()
	if s := l.byPort[uint32(dst.Port())].match(ip); s != nil {
		return s
	}
	if s := l.anyPort.match(ip); s != nil {
		return s
	}
	return l.def
}

// setPort is the chain set for port when there is no destination IP to go
// by (explicit mode: the listener's own port, or the port in Host): the
// port's explicit set, else the any-port one, else the default chain unless
// it is a passthrough.
func (l *Listener) setPort(port uint16) *chainSet {
	if s := l.byPort[uint32(port)].explicitSet(); s != nil {
		return s
	}
	if s := l.anyPort.explicitSet(); s != nil {
		return s
	}
	if l.defPassthrough {
		return nil
	}
	return l.def
}

// Chain selects, by port alone (explicit mode), the filter chain for a
// plaintext connection: Select(port, false).
func (l *Listener) Chain(port uint16) *FilterChain { return l.setPort(port).pick(false) }

// Select selects, by port alone, the filter chain for a connection to port
// whose first byte was a TLS record (tls) or not: the choice for a connection
// made to the listener itself, and for the port in Host in explicit mode.
// nil: no chain takes it (a plaintext connection to a port that accepts only
// mTLS, or the reverse).
func (l *Listener) Select(port uint16, tls bool) *FilterChain { return l.setPort(port).pick(tls) }

// SelectDest selects the filter chain for a connection whose original
// destination is dst (SO_ORIGINAL_DST when intercepting; the listener's own
// address in explicit mode, then chosen by port alone) and whose first byte
// was a TLS record (tls) or not. Allocation-free.
func (l *Listener) SelectDest(dst netip.AddrPort, tls bool) *FilterChain {
	return l.setDest(dst, false).pick(tls)
}

// SelectConn is SelectDest for a connection the listener knows more about:
// direct says its destination is the very address it was accepted on (not
// redirected: explicit mode, wherever the sidecar is bound, which may differ
// from the LDS listener's address), so it is matched by port alone.
func (l *Listener) SelectConn(dst netip.AddrPort, direct, tls bool) *FilterChain {
	return l.setDest(dst, direct).pick(tls)
}

// Sniff says the chains for port include an mTLS one: the listener must look at
// the connection's first byte to choose. False: every connection is plaintext
// to the chain Chain(port) returns (no byte is read before it).
func (l *Listener) Sniff(port uint16) bool {
	s := l.setPort(port)
	return s != nil && s.tls != nil
}

// SniffDest is Sniff for a connection whose original destination is dst.
func (l *Listener) SniffDest(dst netip.AddrPort) bool { return l.SniffConn(dst, false) }

// SniffConn is SniffDest with direct as in SelectConn.
func (l *Listener) SniffConn(dst netip.AddrPort, direct bool) bool {
	s := l.setDest(dst, direct)
	return s != nil && s.tls != nil
}

// HTTPPorts lists, ascending, the destination ports whose HTTP route table has a
// virtual host for host (its port, if any, ignored), for error messages that tell
// a user where a host is served. It allocates; not for the request path's hits.
func (l *Listener) HTTPPorts(host string) []uint16 {
	if i := strings.LastIndexByte(host, ':'); i > 0 && !strings.HasSuffix(host, "]") {
		host = host[:i]
	}
	var ports []uint16
	for p, pc := range l.byPort {
		if s := pc.explicit; s != nil {
			for _, c := range []*FilterChain{s.any, s.raw, s.tls} {
				if c != nil && c.HTTP != nil && (c.HTTP.Lookup(host) != nil || c.HTTP.Lookup(host+":"+strconv.Itoa(int(p))) != nil) {
					ports = append(ports, uint16(p))
					break
				}
			}
		}
	}
	slices.Sort(ports)
	return ports
}

// FilterChain ends in exactly one of HTTP (a route table) or TCP.
type FilterChain struct {
	Name string
	// MTLS: the chain terminates mutual TLS (a DownstreamTlsContext): the
	// listener runs the server handshake and hands the decrypted connection on.
	MTLS bool
	HTTP *RouteTable
	TCP  *TCPRoute
	// Authz decides the chain's requests (connections, for TCP); nil: no
	// authorization applies (authz.go says which chains get one).
	Authz *authz.Engine
}

// TCPRoute is a tcp_proxy: weighted clusters and an idle timeout.
type TCPRoute struct {
	targets     []target
	total       uint64
	IdleTimeout time.Duration
	Authz       *authz.Engine // the chain's (FilterChain.Authz)
}

// Pick chooses a cluster by weight from r (uniform random).
func (t *TCPRoute) Pick(r uint64) *cluster.Cluster { return pickTarget(t.targets, t.total, r) }

// passthrough says every cluster of t forwards to the original destination
// or has no endpoints (a black hole): t needs a destination other than the
// listener's own to mean anything.
func (t *TCPRoute) passthrough() bool {
	for _, x := range t.targets {
		if !x.c.OriginalDst && !x.c.BlackHole {
			return false
		}
	}
	return len(t.targets) > 0
}

type target struct {
	c   *cluster.Cluster
	cum uint64 // cumulative weight, exclusive upper bound
}

func pickTarget(ts []target, total, r uint64) *cluster.Cluster {
	if len(ts) == 1 {
		return ts[0].c
	}
	x := r % total
	for _, t := range ts { // ≤ 64 targets: a scan beats a search
		if x < t.cum {
			return t.c
		}
	}
	return ts[len(ts)-1].c
}

// RouteTable finds a virtual host by Host/:authority in O(1) for exact domains.
type RouteTable struct {
	Name     string
	exact    map[string]*VirtualHost
	suffixes []wildcard // "*.foo.com": longest first
	prefixes []wildcard // "foo.*": longest first
	star     *VirtualHost
}

type wildcard struct {
	s  string
	vh *VirtualHost
}

// Lookup returns the virtual host for host (as sent, maybe with ":port"), or nil.
// Like Envoy: exact domain (with port, then without), then suffix and prefix
// wildcards, then "*".
func (t *RouteTable) Lookup(host string) *VirtualHost {
	if vh := t.exact[host]; vh != nil {
		return vh
	}
	if hasUpper(host) {
		host = strings.ToLower(host)
		if vh := t.exact[host]; vh != nil {
			return vh
		}
	}
	bare := host
	if i := strings.LastIndexByte(host, ':'); i > 0 && !strings.HasSuffix(host, "]") {
		bare = host[:i]
		if vh := t.exact[bare]; vh != nil {
			return vh
		}
	}
	// Wildcards match the host without its port (domains list ports only for exact names).
	for _, w := range t.suffixes {
		if len(bare) > len(w.s) && strings.HasSuffix(bare, w.s) {
			return w.vh
		}
	}
	for _, w := range t.prefixes {
		if len(bare) > len(w.s) && strings.HasPrefix(bare, w.s) {
			return w.vh
		}
	}
	return t.star
}

func hasUpper(s string) bool {
	for i := 0; i < len(s); i++ {
		if 'A' <= s[i] && s[i] <= 'Z' {
			return true
		}
	}
	return false
}

// VirtualHost holds ordered routes; the first match wins.
type VirtualHost struct {
	Name   string
	Routes []*Route
}

// Headers gives a matcher access to request headers by lower-case name, pseudo-headers
// (":method", ":authority", ":path") included.
type Headers interface {
	Get(lowerName string) (string, bool)
}

// Match returns the first route matching method/path/headers, or nil.
func (v *VirtualHost) Match(path string, h Headers) *Route {
	if i := strings.IndexByte(path, '?'); i >= 0 {
		path = path[:i] // Envoy matches the path without the query string
	}
	for _, r := range v.Routes {
		if r.matches(path, h) {
			return r
		}
	}
	return nil
}

// Route is a compiled route.
type Route struct {
	Name     string
	pathKind xdsresource.PathKind
	path     string
	pathRE   *regexp.Regexp
	caseSens bool
	headers  []xdsresource.HeaderMatch

	targets []target
	total   uint64
	Timeout time.Duration // 0: none
	// DefaultTimeout says Timeout is the sidecar's default route timeout: the
	// route set none.
	DefaultTimeout bool
	Retry          *Retry // nil: no retries
	Hash           []xdsresource.HashPolicy
	Fallback       []*cluster.Cluster
	Direct         *xdsresource.DirectResponse
}

// Pick chooses a destination cluster by weight from r (uniform random).
func (r *Route) Pick(rnd uint64) *cluster.Cluster {
	if len(r.targets) == 0 {
		return nil
	}
	return pickTarget(r.targets, r.total, rnd)
}

func (r *Route) matches(path string, h Headers) bool {
	switch r.pathKind {
	case xdsresource.PathPrefix:
		if r.caseSens {
			if !strings.HasPrefix(path, r.path) {
				return false
			}
		} else if len(path) < len(r.path) || !strings.EqualFold(path[:len(r.path)], r.path) {
			return false
		}
	case xdsresource.PathExact:
		if r.caseSens {
			if path != r.path {
				return false
			}
		} else if !strings.EqualFold(path, r.path) {
			return false
		}
	case xdsresource.PathRegex:
		if !r.pathRE.MatchString(path) {
			return false
		}
	}
	for i := range r.headers {
		if !headerMatches(&r.headers[i], h) {
			return false
		}
	}
	return true
}

func headerMatches(m *xdsresource.HeaderMatch, h Headers) bool {
	v, ok := h.Get(m.Name)
	var res bool
	switch m.Kind {
	case xdsresource.StringPresent:
		res = ok
	case xdsresource.StringExact:
		res = ok && v == m.Value
	case xdsresource.StringPrefix:
		res = ok && strings.HasPrefix(v, m.Value)
	case xdsresource.StringSuffix:
		res = ok && strings.HasSuffix(v, m.Value)
	case xdsresource.StringContains:
		res = ok && strings.Contains(v, m.Value)
	case xdsresource.StringRegex:
		res = ok && m.Regex.MatchString(v)
	}
	if m.Invert {
		return !res
	}
	return res
}
