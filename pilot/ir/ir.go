// Package ir is the compiled, proto-free, immutable model of the mesh at one store
// revision: what compile produces and gen consumes.
//
// Everything reachable from a *Mesh is read-only once compile.Compile returns it;
// slices are sorted so that generation is deterministic. The only mutable part is
// the derived-value memo (see Mesh.Derive), which caches pure functions of the mesh.
package ir

import (
	"slices"
	"sort"
	"strconv"
	"time"
)

// DefaultTrustDomain is used when no MeshConfig sets one; it is also the DNS domain
// in cluster names and virtual host domains.
const DefaultTrustDomain = "cluster.local"

// Protocol of a Service port.
type Protocol string

const (
	ProtocolHTTP  Protocol = "HTTP"
	ProtocolHTTP2 Protocol = "HTTP2"
	ProtocolGRPC  Protocol = "GRPC"
	ProtocolTCP   Protocol = "TCP"
)

// IsHTTP reports whether traffic on the port is routed by an HTTP connection
// manager (everything but TCP).
func (p Protocol) IsHTTP() bool { return p != ProtocolTCP }

// IsHTTP2 reports whether the upstream speaks HTTP/2 (h2c) only.
func (p Protocol) IsHTTP2() bool { return p == ProtocolHTTP2 || p == ProtocolGRPC }

// Mesh is immutable once returned by compile.Compile.
type Mesh struct {
	Revision    int64
	TrustDomain string // from MeshConfig, DefaultTrustDomain when unset
	DefaultMTLS string // STRICT | PERMISSIVE | DISABLE
	CertTTL     time.Duration
	// OutboundPolicy is MeshConfig.outboundTrafficPolicy: what an intercepted
	// sidecar does with a destination outside the mesh (OutboundAllowAny
	// when unset).
	OutboundPolicy string
	// NextExpiry is the earliest expiry (WrittenAt+TTL) still ahead of the
	// compile's Input.Now among Overrides, zero when none: pilot compiles
	// again then, so an expired Override leaves every snapshot.
	NextExpiry time.Time

	// Services sorted by (Namespace, Name).
	Services []*Service
	// Clusters are every outbound cluster (one per service port and per subset),
	// sorted by Name; each carries its endpoints.
	Clusters []*Cluster
	// Policies, sorted by (Namespace, Name); only the ones that took effect are
	// also linked from their Service.
	Policies  []*DestinationPolicy
	PeerAuthn []*PeerAuthentication
	Authz     []*AuthorizationPolicy
	Staleness []*StalenessPolicy
	Overrides []*Override

	// Scopes maps a namespace to the services a sidecar in that namespace may
	// need (see compile for the rule), sorted. Namespaces with nothing in scope
	// are absent.
	Scopes map[string][]*Service

	// Warnings explain what compile skipped (dangling references, conflicting
	// objects, identities a sidecar may not register). Sorted.
	Warnings []string

	serviceIndex map[string]*Service // "ns/name" -> service
	clusterIndex map[string]*Cluster // name -> cluster
	peerAuthnNS  map[string][]*PeerAuthentication
	memo         memo
}

// Index builds the lookup tables; compile calls it once before returning, and
// tests that build a Mesh by hand call it too.
func (m *Mesh) Index() {
	m.serviceIndex = make(map[string]*Service, len(m.Services))
	for _, s := range m.Services {
		m.serviceIndex[s.Namespace+"/"+s.Name] = s
	}
	m.clusterIndex = make(map[string]*Cluster, len(m.Clusters))
	for _, c := range m.Clusters {
		m.clusterIndex[c.Name] = c
	}
	m.peerAuthnNS = map[string][]*PeerAuthentication{}
	for _, pa := range m.PeerAuthn {
		m.peerAuthnNS[pa.Namespace] = append(m.peerAuthnNS[pa.Namespace], pa)
	}
}

// Outbound traffic policies (MeshConfig.outboundTrafficPolicy, Istio's names).
const (
	OutboundAllowAny     = "ALLOW_ANY"
	OutboundRegistryOnly = "REGISTRY_ONLY"
)

// mTLS modes of PeerAuthentication and MeshConfig.defaultMtls.
const (
	MTLSStrict     = "STRICT"
	MTLSPermissive = "PERMISSIVE"
	MTLSDisable    = "DISABLE"
)

// MTLSMode resolves the inbound mTLS mode of a workload of namespace ns with
// labels, as Istio does: the PeerAuthentication of ns whose (non-empty)
// selector matches the labels beats the namespace-wide one (empty selector),
// which beats MeshConfig.defaultMtls. Within a group the first by name wins
// (compile warns about the others). It returns the mode and the policy that
// set it (nil: the mesh default).
func (m *Mesh) MTLSMode(ns string, labels map[string]string) (string, *PeerAuthentication) {
	var wide *PeerAuthentication
	for _, pa := range m.peerAuthnNS[ns] { // sorted by name
		switch {
		case len(pa.Selector) == 0:
			if wide == nil {
				wide = pa
			}
		case Contains(labels, pa.Selector):
			return pa.MTLS, pa
		}
	}
	if wide != nil {
		return wide.MTLS, wide
	}
	return m.DefaultMTLS, nil
}

// WorkloadID is a workload's SPIFFE ID, spiffe://<td>/ns/<ns>/sa/<sa>: what its
// certificate carries and what clients match its peer certificate against.
func WorkloadID(trustDomain, ns, sa string) string {
	return "spiffe://" + trustDomain + "/ns/" + ns + "/sa/" + sa
}

// Service returns the service ns/name, or nil.
func (m *Mesh) Service(ns, name string) *Service { return m.serviceIndex[ns+"/"+name] }

// Cluster returns the outbound cluster with that name, or nil.
func (m *Mesh) Cluster(name string) *Cluster { return m.clusterIndex[name] }

// Service is one Service object with its effective routing and policy.
type Service struct {
	Namespace string
	Name      string
	Host      string            // <name>.<ns>.svc.<domain>
	Selector  map[string]string // empty selects nothing
	Ports     []*Port           // in spec order
	// Addresses are the Service's VIPs (spec.addresses, else the ones pilot
	// allocated into status.addresses), canonical literals, sorted (IPv4
	// before IPv6). Empty: the Service is reachable by Host header only.
	Addresses []string
	Policy    *DestinationPolicy
	// RouteSource is the Route object ("ns/name") of the Service's own
	// namespace that supplied Ports[*].Rules; "" when it has none.
	RouteSource string
	// Consumers holds, per client namespace, the Route that namespace wrote for
	// this Service. It applies only to sidecars of that namespace, before the
	// Service's own Route: another namespace can shape its own traffic to a
	// Service but never anybody else's.
	Consumers map[string]*ConsumerRoute
}

// ConsumerRoute is one client namespace's Route for a Service of another
// namespace.
type ConsumerRoute struct {
	Source string             // the Route object, "ns/name"
	Rules  map[uint32][]*Rule // by service port; every HTTP-family port is present
}

// RulesFor returns the rules a sidecar of namespace ns uses for port p of s:
// its own namespace's Route for s if any, else s's own Route (p.Rules). nil
// means the default route. Proxyless clients (no namespace) pass "".
func (s *Service) RulesFor(ns string, p *Port) []*Rule {
	if c, ok := s.Consumers[ns]; ok && ns != "" {
		return c.Rules[p.Port]
	}
	return p.Rules
}

// PortByNumber returns the port with that service port number, or nil.
func (s *Service) PortByNumber(p uint32) *Port {
	for _, sp := range s.Ports {
		if sp.Port == p {
			return sp
		}
	}
	return nil
}

// Port is one port of a Service.
type Port struct {
	Name       string
	Port       uint32
	TargetPort uint32
	Protocol   Protocol
	// Cluster is the outbound cluster without subset for this port.
	Cluster string
	// Subsets are the subset clusters for this port, in policy order.
	Subsets []string
	// Rules are the ordered HTTP rules of the Service's own Route for this
	// host:port; nil means one default rule sending everything to Cluster.
	// Always nil for TCP ports. Clients read them through Service.RulesFor.
	Rules []*Rule
}

// Cluster is one outbound cluster: a service port, optionally narrowed to a subset.
type Cluster struct {
	Name      string
	Namespace string
	Service   string
	Port      uint32
	Subset    string
	Protocol  Protocol
	Policy    ClusterPolicy
	Endpoints []Endpoint // sorted by (Locality, Address, Port)
	// Identities are the SPIFFE IDs (WorkloadID) of the service accounts of
	// the endpoints that take mTLS (Endpoint.MTLS), sorted and unique: a
	// client's TLS connection to this cluster must present one of them. Empty
	// when no endpoint takes mTLS (then clients never use TLS to it).
	Identities []string

	// memo caches values derived from this cluster alone (gen's marshalled
	// Cluster and ClusterLoadAssignment). compile hands an unchanged cluster
	// from the previous mesh to the next one, memo included, so an endpoint
	// change re-marshals one cluster, not all of them.
	memo memo
}

// Derive is Mesh.Derive for values that depend on this cluster alone.
func (c *Cluster) Derive(key any, build func() (any, error)) (any, error) {
	return c.memo.derive(key, build)
}

// Same reports whether c and o have equal contents (everything but the memo).
func (c *Cluster) Same(o *Cluster) bool {
	if c == o {
		return true
	}
	if c.Name != o.Name || c.Namespace != o.Namespace || c.Service != o.Service || c.Port != o.Port ||
		c.Subset != o.Subset || c.Protocol != o.Protocol || !c.Policy.same(&o.Policy) || len(c.Endpoints) != len(o.Endpoints) ||
		!slices.Equal(c.Identities, o.Identities) {
		return false
	}
	for i := range c.Endpoints {
		if !c.Endpoints[i].same(&o.Endpoints[i]) {
			return false
		}
	}
	return true
}

func (p *ClusterPolicy) same(o *ClusterPolicy) bool {
	return p.LB == o.LB && p.ConnectTimeout == o.ConnectTimeout &&
		samePtr(p.Pool, o.Pool, func(a, b *ConnectionPool) bool {
			return a.MaxConnections == b.MaxConnections && a.MaxPendingRequests == b.MaxPendingRequests &&
				a.MaxRequests == b.MaxRequests && a.MaxRetries == b.MaxRetries && samePtr(a.RetryBudget, b.RetryBudget, eq[RetryBudget])
		}) &&
		samePtr(p.Outlier, o.Outlier, func(a, b *OutlierDetection) bool {
			return a.Consecutive5xx == b.Consecutive5xx && a.ConsecutiveGatewayErrors == b.ConsecutiveGatewayErrors &&
				a.ConsecutiveLocalOriginFailures == b.ConsecutiveLocalOriginFailures &&
				samePtr(a.SuccessRate, b.SuccessRate, eq[SuccessRate]) &&
				samePtr(a.FailurePercentage, b.FailurePercentage, eq[FailurePercentage]) &&
				a.Interval == b.Interval && a.BaseEjectionTime == b.BaseEjectionTime && a.MaxEjectionTime == b.MaxEjectionTime &&
				a.MaxEjectionTimeJitter == b.MaxEjectionTimeJitter && a.SplitExternalLocalOriginErrors == b.SplitExternalLocalOriginErrors &&
				a.MaxEjectionPercent == b.MaxEjectionPercent && a.MinHealthPercent == b.MinHealthPercent
		}) &&
		samePtr(p.RateLimit, o.RateLimit, eq[LocalRateLimit])
}

func (e *Endpoint) same(o *Endpoint) bool {
	if e.Address != o.Address || e.Port != o.Port || e.Namespace != o.Namespace || e.ServiceAccount != o.ServiceAccount ||
		e.Locality != o.Locality || e.Weight != o.Weight || e.Health != o.Health || e.Source != o.Source || e.Sidecar != o.Sidecar || e.MTLS != o.MTLS || len(e.Labels) != len(o.Labels) {
		return false
	}
	for k, v := range e.Labels {
		if ov, ok := o.Labels[k]; !ok || ov != v {
			return false
		}
	}
	return true
}

func eq[T comparable](a, b *T) bool { return *a == *b }

func samePtr[T any](a, b *T, same func(a, b *T) bool) bool {
	if a == nil || b == nil {
		return a == b
	}
	return same(a, b)
}

// ClusterPolicy is what a DestinationPolicy says about one cluster (defaults
// filled in).
type ClusterPolicy struct {
	LB             LBPolicy
	ConnectTimeout time.Duration
	Pool           *ConnectionPool   // nil: no circuit breaker thresholds set
	Outlier        *OutlierDetection // nil: no outlier detection
	RateLimit      *LocalRateLimit   // nil: none
}

// LBPolicy is the load balancing algorithm.
type LBPolicy string

const (
	LBRoundRobin   LBPolicy = "ROUND_ROBIN"
	LBLeastRequest LBPolicy = "LEAST_REQUEST"
	LBRandom       LBPolicy = "RANDOM"
	LBRingHash     LBPolicy = "RING_HASH"
)

// DefaultConnectTimeout applies when a policy does not set connectTimeout.
const DefaultConnectTimeout = 5 * time.Second

// Health of an endpoint.
type Health string

const (
	// HealthUnknown: a static Workload; pilot has no health signal for it.
	HealthUnknown Health = "UNKNOWN"
	// HealthHealthy: a sidecar currently connected to pilot registered it.
	HealthHealthy Health = "HEALTHY"
)

// Endpoint is one address a cluster sends to.
type Endpoint struct {
	Address        string
	Port           uint32
	Namespace      string
	ServiceAccount string
	Labels         map[string]string
	Locality       Locality
	Weight         uint32 // 1..128
	Health         Health
	// Source names where the endpoint came from: "Workload/ns/name" or
	// "sidecar/<node id>".
	Source string
	// Sidecar says the address is a registered sidecar's inbound listener, not
	// the application: clients speak HTTP/2 (h2c until mTLS) to it whatever the
	// service's protocol, and it delivers to the app in the app's protocol.
	Sidecar bool
	// MTLS says the endpoint accepts mTLS (Istio's auto-mTLS): a registered
	// sidecar, or a Workload served by a connected proxyless gRPC server,
	// whose connection to pilot proved the endpoint's own identity, and whose
	// resolved mode (Mesh.MTLSMode) is not DISABLE.
	MTLS bool
}

// Locality is region/zone/subzone.
type Locality struct{ Region, Zone, SubZone string }

func (l Locality) String() string { return l.Region + "/" + l.Zone + "/" + l.SubZone }

// Rule is one HTTP routing rule.
type Rule struct {
	Name         string
	Matches      []Match // OR; empty matches everything
	Destinations []WeightedCluster
	Timeout      time.Duration // 0: none
	Retries      *Retries
	// Fallback lists clusters tried in turn when the rule's destinations fail.
	Fallback []string
}

// WeightedCluster is one destination of a rule.
type WeightedCluster struct {
	Cluster string
	Weight  uint32
}

// Match is an AND of its fields.
type Match struct {
	Path    *StringMatch // nil: prefix "/"
	Headers []HeaderMatch
	Method  string
}

// MatchKind says how a StringMatch compares.
type MatchKind string

const (
	MatchExact   MatchKind = "exact"
	MatchPrefix  MatchKind = "prefix"
	MatchRegex   MatchKind = "regex"
	MatchPresent MatchKind = "present"
)

// StringMatch compares a value.
type StringMatch struct {
	Kind  MatchKind
	Value string
}

// HeaderMatch compares one header; sorted by Name within a Match.
type HeaderMatch struct {
	Name string
	StringMatch
}

// Retries is a rule's retry policy.
type Retries struct {
	Attempts      uint32
	PerTryTimeout time.Duration
	RetryOn       []string // API tokens, sorted
	// BackoffBase and BackoffMax are the retry back-off; 0 BackoffBase: the
	// client's default (Envoy's 25ms); 0 BackoffMax: 10× the base.
	BackoffBase, BackoffMax time.Duration
}

// DestinationPolicy as compiled.
type DestinationPolicy struct {
	Namespace string
	Name      string
	Service   string
	Subsets   []Subset
	Policy    ClusterPolicy
}

// Subset is a named label selection within a service.
type Subset struct {
	Name   string
	Labels map[string]string
}

// ConnectionPool holds circuit breaker thresholds; 0 means "not set".
type ConnectionPool struct {
	MaxConnections     uint32
	MaxPendingRequests uint32
	MaxRequests        uint32
	MaxRetries         uint32
	RetryBudget        *RetryBudget
}

// RetryBudget limits retries as a share of active requests.
type RetryBudget struct {
	Percent        float64
	MinConcurrency uint32
}

// OutlierDetection is passive ejection; 0 means "not set".
type OutlierDetection struct {
	Consecutive5xx                 uint32
	ConsecutiveGatewayErrors       uint32
	ConsecutiveLocalOriginFailures uint32
	SuccessRate                    *SuccessRate
	FailurePercentage              *FailurePercentage
	Interval                       time.Duration
	BaseEjectionTime               time.Duration
	MaxEjectionTime                time.Duration
	MaxEjectionTimeJitter          time.Duration // 0: none
	MaxEjectionPercent             float64
	// MinHealthPercent is resolved: the API's absent is DefaultMinHealthPercent;
	// 0 means panic mode never applies (ejections always hold).
	MinHealthPercent float64
	// SplitExternalLocalOriginErrors is resolved (the API's absent means "on when
	// ConsecutiveLocalOriginFailures is set").
	SplitExternalLocalOriginErrors bool
}

// SuccessRate ejection.
type SuccessRate struct {
	MinHosts      uint32
	RequestVolume uint32
	StdevFactor   float64
}

// FailurePercentage ejection.
type FailurePercentage struct {
	Threshold     float64
	MinHosts      uint32
	RequestVolume uint32
}

// LocalRateLimit is a token bucket.
type LocalRateLimit struct {
	RequestsPerSecond float64
	Burst             uint32 // 0: one second's worth (the sidecar fills it in)
	DryRun            bool
}

// PeerAuthentication is the inbound mTLS mode for selected workloads.
type PeerAuthentication struct {
	Namespace string
	Name      string
	Selector  map[string]string // empty: whole namespace
	MTLS      string
}

// AuthorizationPolicy as compiled (rules copied from the object).
type AuthorizationPolicy struct {
	Namespace string
	Name      string
	Selector  map[string]string
	Action    string // ALLOW | DENY | AUDIT
	DryRun    bool
	Rules     []AuthzRule
}

// AuthzRule matches when any From and any To match (empty = any).
type AuthzRule struct {
	From []AuthzSource
	To   []AuthzOperation
}

// AuthzSource is an AND of its non-empty lists.
type AuthzSource struct {
	Principals []string
	Namespaces []string
}

// AuthzOperation is an AND of its non-empty lists.
type AuthzOperation struct {
	Methods []string
	Paths   []string
	Ports   []uint32
}

// StalenessPolicy as compiled.
type StalenessPolicy struct {
	Namespace string
	Name      string
	Selector  map[string]string
	Rules     []StalenessRule
}

// StalenessRule is the policy for one class of state.
type StalenessRule struct {
	Resource      string
	WarnAfter     time.Duration
	RestrictAfter time.Duration
	ExpireAfter   time.Duration
	OnExpire      string
	Jitter        float64
}

// Override is an emergency rule with a TTL.
type Override struct {
	Namespace string
	Name      string
	// Revision is the store revision of the object's last change: a sidecar
	// starts the TTL when it first sees that revision.
	Revision int64
	// WrittenAt is when the store wrote Revision, if pilot saw that write (a
	// watch event); zero when unknown (the revision predates pilot's start).
	// With it the sidecar can stop the override at WrittenAt+TTL even if it
	// first hears of it late.
	WrittenAt  time.Time
	TTL        time.Duration
	Reason     string
	Action     string
	Principals []string
	Paths      []string
	Methods    []string
}

// ---- names on the wire (API.md) ----

// ServiceHost is <svc>.<ns>.svc.<domain>.
func ServiceHost(name, ns, domain string) string { return name + "." + ns + ".svc." + domain }

// OutboundClusterName is outbound|<port>|<subset>|<host>.
func OutboundClusterName(port uint32, subset, host string) string {
	return "outbound|" + strconv.FormatUint(uint64(port), 10) + "|" + subset + "|" + host
}

// InboundClusterName is inbound|<port>||.
func InboundClusterName(port uint32) string {
	return "inbound|" + strconv.FormatUint(uint64(port), 10) + "||"
}

// Selects reports whether selector matches labels. An empty selector selects
// nothing (a Service without selector has no automatic endpoints).
func Selects(selector, labels map[string]string) bool {
	if len(selector) == 0 {
		return false
	}
	return Contains(labels, selector)
}

// Contains reports whether labels has every key=value of want (empty want: true).
func Contains(labels, want map[string]string) bool {
	for k, v := range want {
		if got, ok := labels[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// SortedKeys returns m's keys sorted.
func SortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// DefaultMinHealthPercent is the panic threshold when a policy's outlierDetection
// sets no minHealthPercent: Envoy's healthy_panic_threshold default.
const DefaultMinHealthPercent = 50.0
