// Package xdsresource decodes Envoy v3 xDS resources (Listener, RouteConfiguration,
// Cluster, ClusterLoadAssignment) and Weft's delivered StalenessPolicy into Weft's own
// validated Go types. Protos stay at this edge: everything downstream
// (dataplane.Compile, the runtime, the request path) sees only the types below. Every rejection names the resource and the field path.
//
// Decoded values are immutable after Decode returns; compiled regexps inside them are
// safe for concurrent use.
package xdsresource

import (
	"math"
	"net/netip"
	"regexp"
	"slices"
	"time"

	"github.com/weft-mesh/weft/sidecar/authz"
)

// Type URLs this package decodes.
const (
	ListenerType = "type.googleapis.com/envoy.config.listener.v3.Listener"
	RouteType    = "type.googleapis.com/envoy.config.route.v3.RouteConfiguration"
	ClusterType  = "type.googleapis.com/envoy.config.cluster.v3.Cluster"
	EndpointType = "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment"
)

// Limits bound the complexity of what a sidecar accepts. Generated config is well below
// them; they stop a bad push from costing unbounded memory or CPU.
const (
	MaxNameBytes       = 512
	MaxFilterChains    = 1024
	MaxVirtualHosts    = 4096
	MaxDomains         = 256 // per virtual host
	MaxRoutes          = 1024
	MaxHeaderMatchers  = 32
	MaxWeightedTargets = 64
	MaxFallbacks       = 8
	MaxRegexBytes      = 1024
	MaxRetries         = 10
	MaxEndpoints       = 10000
	MaxRingSize        = 1 << 20
	MaxDirectBodyBytes = 4096
	// MaxPrefixRanges bounds one filter chain's filter_chain_match.prefix_ranges
	// (an HTTP port's chain lists the VIPs of every HTTP service on the port);
	// MaxListenerPrefixRanges bounds their sum over a listener's chains.
	MaxPrefixRanges         = 1 << 16
	MaxListenerPrefixRanges = 1 << 17
	// MinOutlierDuration and MaxOutlierDuration bound outlier detection's interval,
	// ejection times and jitter (outlier.MinDuration, MaxDuration).
	MinOutlierDuration = time.Millisecond
	MaxOutlierDuration = 10 * 365 * 24 * time.Hour
	// MaxRateLimitRPS and MaxRateLimitBurst bound a decoded local rate limit.
	MaxRateLimitRPS   = 1e9
	MaxRateLimitBurst = 1 << 30
)

// Referrer is implemented by decoded values that name other resources.
type Referrer interface {
	References() (typeURL string, names []string)
}

// Listener is a decoded envoy.config.listener.v3.Listener.
type Listener struct {
	Name string
	// Addr is the bind address. Zero for API listeners (proxyless gRPC), which a
	// sidecar keeps but never binds.
	Addr         netip.AddrPort
	APIOnly      bool
	FilterChains []FilterChain
	// Default is used when no chain matches (default_filter_chain); may be nil.
	Default *FilterChain
	// Overrides is metadata "weft.overrides": the TTL of each Override policy
	// of the chains' weft.override filters (rbac.go).
	Overrides []authz.Override
	// DNS is metadata "weft.dns": the mesh's name table (dns.go); nil: none.
	DNS *DNSTable
}

// AllReferences adds the validation secret the listener's TLS chains name.
func (l *Listener) AllReferences() map[string][]string {
	var names []string
	for i := range l.FilterChains {
		if t := l.FilterChains[i].TLS; t != nil && !slices.Contains(names, t.ValidationSecret) {
			names = append(names, t.ValidationSecret)
		}
	}
	if l.Default != nil && l.Default.TLS != nil && !slices.Contains(names, l.Default.TLS.ValidationSecret) {
		names = append(names, l.Default.TLS.ValidationSecret)
	}
	if names == nil {
		return nil
	}
	return map[string][]string{SecretType: names}
}

// References lists the RDS route configurations this listener's chains name.
func (l *Listener) References() (string, []string) {
	var names []string
	add := func(fc *FilterChain) {
		if fc != nil && fc.HTTP != nil && fc.HTTP.RDSName != "" {
			names = append(names, fc.HTTP.RDSName)
		}
	}
	for i := range l.FilterChains {
		add(&l.FilterChains[i])
	}
	add(l.Default)
	return RouteType, names
}

// FilterChain is one chain: a match on the destination port and the transport
// protocol, and exactly one terminal network filter (HTTP connection manager or
// TCP proxy).
type FilterChain struct {
	Name            string
	DestinationPort uint32 // 0: any port
	// PrefixRanges is filter_chain_match.prefix_ranges: the chain takes only
	// connections whose original destination IP is in one of them (masked,
	// in wire order, no duplicates). Empty: any destination IP.
	PrefixRanges []netip.Prefix
	// TransportProtocol is TransportAny, TransportTLS or TransportRaw (what the
	// first byte of the connection says, as Envoy's tls_inspector). A chain with
	// TLS matches TransportTLS only.
	TransportProtocol string
	TLS               *DownstreamTLS // terminate mTLS; nil: plaintext
	HTTP              *HTTPManager
	TCP               *TCPProxy
	// RBAC are the chain's RBAC filters in order (rbac.go): HTTP filters of
	// the connection manager, or network filters before the tcp_proxy.
	RBAC []authz.Filter
}

// HTTPManager is a decoded HttpConnectionManager: either an RDS name or an inline
// route configuration.
type HTTPManager struct {
	RDSName string
	Inline  *RouteConfig
}

// TCPProxy is a decoded tcp_proxy filter.
type TCPProxy struct {
	Clusters    []WeightedCluster
	IdleTimeout time.Duration // 0: no idle timeout
}

// RouteConfig is a decoded envoy.config.route.v3.RouteConfiguration.
type RouteConfig struct {
	Name         string
	VirtualHosts []VirtualHost
}

// VirtualHost is a named set of domains and ordered routes (first match wins).
type VirtualHost struct {
	Name    string
	Domains []string // lower-cased; "*", "*.suffix" or "prefix*" wildcards allowed
	Routes  []Route
}

// PathKind says how RouteMatch.Path is compared.
type PathKind uint8

// Path match kinds.
const (
	PathPrefix PathKind = iota
	PathExact
	PathRegex
)

// StringKind says how a header value is compared.
type StringKind uint8

// String match kinds.
const (
	StringExact StringKind = iota
	StringPrefix
	StringSuffix
	StringContains
	StringRegex
	StringPresent
)

// HeaderMatch matches one request header (":method" and ":authority" included).
type HeaderMatch struct {
	Name   string // lower-cased
	Kind   StringKind
	Value  string
	Regex  *regexp.Regexp // set when Kind == StringRegex
	Invert bool
}

// RouteMatch is an AND of a path match and header matches.
type RouteMatch struct {
	PathKind      PathKind
	Path          string
	PathRegex     *regexp.Regexp // set when PathKind == PathRegex
	CaseSensitive bool
	Headers       []HeaderMatch
}

// WeightedCluster is one weighted destination.
type WeightedCluster struct {
	Name   string
	Weight uint32
}

// RetryPolicy is a decoded Envoy retry policy.
type RetryPolicy struct {
	RetryOn       []string // Envoy retry_on conditions: 5xx, gateway-error, reset, connect-failure, retriable-4xx, ...
	NumRetries    uint32
	PerTryTimeout time.Duration // 0: the route timeout bounds each try
	// BackoffBase and BackoffMax are retry_policy.retry_back_off (base_interval,
	// max_interval); without it Envoy's defaults, DefaultBackoffBase and 10× base.
	BackoffBase, BackoffMax time.Duration
}

// Envoy's retry back-off defaults: base 25ms, max 10× the base.
const (
	DefaultBackoffBase    = 25 * time.Millisecond
	DefaultBackoffMaxMult = 10
)

// HashPolicy says what a ring-hash cluster hashes for this route.
type HashPolicy struct {
	Header   string // lower-cased header name; empty with SourceIP
	SourceIP bool
}

// DirectResponse answers without an upstream.
type DirectResponse struct {
	Status uint32
	Body   string
}

// Route is one match and its action.
type Route struct {
	Name     string
	Match    RouteMatch
	Clusters []WeightedCluster // one entry for a plain cluster action
	Timeout  time.Duration     // 0: no timeout (Envoy's "disabled")
	// DefaultTimeout: the action sets no timeout, so the sidecar's default route
	// timeout applies (Envoy's is 15s); Timeout is then 0.
	DefaultTimeout bool
	Retry          *RetryPolicy
	Hash           []HashPolicy
	// Fallback are cluster names tried in order when the chosen cluster fails
	// (filter_metadata "weft.fallback", field "clusters").
	Fallback []string
	Direct   *DirectResponse
}

// LBPolicy is a cluster's load-balancing policy.
type LBPolicy uint8

// Load-balancing policies.
const (
	RoundRobin LBPolicy = iota
	LeastRequest
	Random
	RingHash
)

func (p LBPolicy) String() string {
	switch p {
	case RoundRobin:
		return "ROUND_ROBIN"
	case LeastRequest:
		return "LEAST_REQUEST"
	case Random:
		return "RANDOM"
	case RingHash:
		return "RING_HASH"
	}
	return "UNKNOWN"
}

// Thresholds are a cluster's circuit-breaker limits (DEFAULT priority). Zero values are
// replaced by Envoy's defaults at decode time.
type Thresholds struct {
	MaxConnections     uint32
	MaxPendingRequests uint32
	MaxRequests        uint32
	MaxRetries         uint32
}

// Envoy's default circuit-breaker thresholds.
var DefaultThresholds = Thresholds{MaxConnections: 1024, MaxPendingRequests: 1024, MaxRequests: 1024, MaxRetries: 3}

// Outlier is a cluster's outlier detection (envoy.config.cluster.v3.OutlierDetection)
// with Envoy's defaults filled in for absent fields. Percents are 0..100. As in Envoy,
// the local-origin fields (ConsecutiveLocalOriginFailure, its enforcing percent and
// the EnforcingLocalOrigin of SuccessRate and FailurePercentage) only apply when
// SplitExternalLocalOriginErrors is set; without it a local-origin failure (connect
// failure, reset, timeout) counts as an upstream 5xx/gateway failure.
type Outlier struct {
	Consecutive5xx                         uint32
	ConsecutiveGatewayFailure              uint32
	ConsecutiveLocalOriginFailure          uint32
	EnforcingConsecutive5xx                uint32
	EnforcingConsecutiveGatewayFailure     uint32
	EnforcingConsecutiveLocalOriginFailure uint32
	SplitExternalLocalOriginErrors         bool
	SuccessRate                            *SuccessRate       // nil: detector off (no enforcement can apply)
	FailurePercentage                      *FailurePercentage // nil: detector off
	Interval                               time.Duration      // > 0
	BaseEjectionTime                       time.Duration      // > 0
	MaxEjectionTime                        time.Duration      // ≥ BaseEjectionTime
	MaxEjectionTimeJitter                  time.Duration      // ≥ 0; a random 0..jitter is added to each ejection
	MaxEjectionPercent                     uint32
}

// SuccessRate is the success-rate detector: a host is an outlier below
// mean − StdevFactor × stdev over hosts with at least RequestVolume requests, once at
// least MinimumHosts hosts qualify.
type SuccessRate struct {
	MinimumHosts, RequestVolume uint32
	StdevFactor                 float64 // Envoy's success_rate_stdev_factor / 1000 (1900 → 1.9)
	Enforcing                   uint32  // enforcing_success_rate
	EnforcingLocalOrigin        uint32  // enforcing_local_origin_success_rate (split only)
}

// FailurePercentage is the failure-percentage detector: a host is an outlier when its
// failure percentage is ≥ Threshold (0..100).
type FailurePercentage struct {
	Threshold, MinimumHosts, RequestVolume uint32
	Enforcing                              uint32 // enforcing_failure_percentage
	EnforcingLocalOrigin                   uint32 // enforcing_failure_percentage_local_origin (split only)
}

// RetryBudget is circuit_breakers.thresholds[DEFAULT].retry_budget: concurrent retries
// allowed as a share of active requests, never fewer than MinConcurrency.
type RetryBudget struct {
	Percent        float64 // 0..100; Envoy's default 20
	MinConcurrency uint32  // Envoy's default 3
}

// RateLimit is a local token bucket from the cluster's filter_metadata
// ["weft.localRateLimit"] (pilot's gen writes it).
type RateLimit struct {
	RequestsPerSecond float64 // > 0: the refill rate
	Burst             uint32  // ≥ 1: the bucket size; absent or 0 decodes as DefaultBurst(RequestsPerSecond)
	DryRun            bool    // count would-be rejections, do not reject
}

// DefaultBurst is the bucket size when a rate limit names none: one second's worth of
// tokens, at least 1.
func DefaultBurst(rps float64) uint32 {
	b := math.Ceil(rps)
	if b < 1 {
		return 1
	}
	if b > MaxRateLimitBurst {
		return MaxRateLimitBurst
	}
	return uint32(b)
}

// Cluster is a decoded envoy.config.cluster.v3.Cluster.
type Cluster struct {
	Name    string
	EDSName string     // set for EDS clusters: the ClusterLoadAssignment to use
	Static  *Endpoints // STATIC clusters (no endpoints: a black hole)
	// OriginalDst: type ORIGINAL_DST with lb_policy CLUSTER_PROVIDED (Istio's
	// PassthroughCluster): no endpoints; each connection goes to its own
	// original destination. EDSName and Static are then empty.
	OriginalDst    bool
	LB             LBPolicy
	RingMin        uint64
	RingMax        uint64
	ConnectTimeout time.Duration
	HTTP2          bool // upstream speaks HTTP/2 (h2c until mTLS)
	Limits         Thresholds
	Outlier        *Outlier // nil: outlier detection off
	// Budget nil: no budget (Limits.MaxRetries alone). Set: retries are bounded by
	// the budget and by Limits.MaxRetries, which is math.MaxUint32 (no bound) when
	// max_retries is absent, so the budget alone applies as in Envoy.
	Budget    *RetryBudget
	RateLimit *RateLimit // nil: none
	// PanicThreshold is common_lb_config.healthy_panic_threshold in percent (Envoy's
	// default 50): below this share of healthy hosts the picker ignores health and
	// ejections. 0 disables panic mode.
	PanicThreshold float64
	// TLS is the transport socket's UpstreamTlsContext: endpoints marked MTLS are
	// dialled with mTLS (auto-mTLS). nil: plaintext to every endpoint.
	TLS *UpstreamTLS
}

// AllReferences adds the validation secret a TLS cluster names.
func (c *Cluster) AllReferences() map[string][]string {
	if c.TLS == nil {
		return nil
	}
	return map[string][]string{SecretType: {c.TLS.ValidationSecret}}
}

// References names the cluster's EDS resource, if any.
func (c *Cluster) References() (string, []string) {
	if c.EDSName == "" {
		return EndpointType, nil
	}
	return EndpointType, []string{c.EDSName}
}

// Endpoints is a decoded ClusterLoadAssignment.
type Endpoints struct {
	Name      string
	Endpoints []Endpoint
	// LEDS are the localities in LEDS form, whose endpoints are LbEndpoint
	// resources: ResolveLEDS puts them into Endpoints (and clears this).
	LEDS []LEDSLocality
}

// Endpoint is one upstream host.
type Endpoint struct {
	Addr     netip.AddrPort
	Weight   uint32 // endpoint weight × locality weight, ≥ 1
	Healthy  bool
	Priority uint32
	Locality string // region/zone/subzone
	// Peer: the address is a peer sidecar's inbound listener (filter_metadata
	// "weft", field "peer" = "sidecar"): HTTP goes to it over h2c, multiplexed,
	// whatever the cluster's protocol. Otherwise it is the application itself.
	Peer bool
	// MTLS: the endpoint's sidecar has a mesh identity (filter_metadata "weft",
	// field "mtls" = "true"); with a TLS cluster it is dialled with mTLS.
	MTLS bool
}
