// Package resource holds Weft's user-facing resource API (mesh.weft.dev/v1alpha1):
// the kinds, their strict decoding, defaults and validation. Field names are the
// contract documented in shared/API.md; do not rename them.
package resource

import (
	"fmt"
	"strings"
)

// APIVersion is the only apiVersion this package accepts.
const APIVersion = "mesh.weft.dev/v1alpha1"

// DefaultNamespace is used when metadata.namespace is empty on a namespaced kind.
const DefaultNamespace = "default"

// Kind names, as written in YAML.
const (
	KindService             = "Service"
	KindWorkload            = "Workload"
	KindRoute               = "Route"
	KindDestinationPolicy   = "DestinationPolicy"
	KindPeerAuthentication  = "PeerAuthentication"
	KindAuthorizationPolicy = "AuthorizationPolicy"
	KindStalenessPolicy     = "StalenessPolicy"
	KindOverride            = "Override"
	KindMeshConfig          = "MeshConfig"
)

// Key identifies one object in the store. Namespace is empty for cluster-wide kinds.
type Key struct {
	Kind      string
	Namespace string
	Name      string
}

// String renders Kind/namespace/name (Kind/name for cluster-wide kinds); it is the
// prefix of every validation error.
func (k Key) String() string {
	if k.Namespace == "" {
		return k.Kind + "/" + k.Name
	}
	return k.Kind + "/" + k.Namespace + "/" + k.Name
}

// Metadata is the Kubernetes-style object metadata. Generation and Revision are set
// by the store, never by users: Generation counts changes to this object (1 on
// create), Revision is the store revision of its last change.
type Metadata struct {
	Name        string            `json:"name"`
	Namespace   string            `json:"namespace,omitempty"`
	Labels      map[string]string `json:"labels,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
	Generation  int64             `json:"generation,omitempty"`
	Revision    int64             `json:"revision,omitempty"`
}

// Object is one decoded, validated resource. Spec holds a pointer to the kind's
// spec struct (*ServiceSpec, *RouteSpec, ...). Objects handed out by the store are
// shared and must be treated as immutable.
type Object struct {
	APIVersion string   `json:"apiVersion"`
	Kind       string   `json:"kind"`
	Metadata   Metadata `json:"metadata"`
	Spec       any      `json:"spec"`
	// Status is written by pilot, never by users: Decode refuses an object
	// that carries one ("status is set by pilot"). Only a Service has one
	// (the VIPs pilot allocated for it); nil otherwise.
	Status *Status `json:"status,omitempty"`
}

// Status is the pilot-written part of an object, stored with it.
type Status struct {
	// Addresses are the VIPs pilot allocated to a Service that has no
	// spec.addresses, from MeshConfig.serviceAddressRange; kept across
	// applies and restarts because it is stored with the object.
	Addresses []string `json:"addresses,omitempty"`
}

// Key returns the object's store key.
func (o *Object) Key() Key {
	return Key{Kind: o.Kind, Namespace: o.Metadata.Namespace, Name: o.Metadata.Name}
}

func (o *Object) String() string { return o.Key().String() }

// Duration is a Go duration string in YAML ("250ms", "5m"); kept as text on the
// wire so objects round-trip exactly, parsed by validation.
type Duration string

// ---- Service ----

type ServiceSpec struct {
	Selector map[string]string `json:"selector,omitempty"`
	Ports    []ServicePort     `json:"ports"`
	// Addresses are the Service's virtual IPs (0..MaxServiceAddresses IP
	// literals, unique within the Service and across Services). Empty: pilot
	// allocates one from MeshConfig.serviceAddressRange into status.addresses.
	Addresses []string `json:"addresses,omitempty"`
}

type ServicePort struct {
	Name       string `json:"name"`
	Port       int32  `json:"port"`
	TargetPort int32  `json:"targetPort,omitempty"` // defaults to Port
	Protocol   string `json:"protocol,omitempty"`   // HTTP | HTTP2 | GRPC | TCP; default HTTP
}

// ---- Workload ----

type WorkloadSpec struct {
	Address        string           `json:"address"`
	ServiceAccount string           `json:"serviceAccount,omitempty"` // default "default"
	Locality       string           `json:"locality,omitempty"`
	Weight         int32            `json:"weight,omitempty"` // 1..128, default 1
	Ports          map[string]int32 `json:"ports,omitempty"`
}

// ---- Route ----

type RouteSpec struct {
	Hosts []string    `json:"hosts"`
	HTTP  []HTTPRoute `json:"http"`
}

type HTTPRoute struct {
	Name     string                `json:"name,omitempty"`
	Match    []HTTPMatch           `json:"match,omitempty"` // empty = match everything
	Route    []RouteDestination    `json:"route"`
	Timeout  Duration              `json:"timeout,omitempty"`
	Retries  *RetryPolicy          `json:"retries,omitempty"`
	Fallback []FallbackDestination `json:"fallback,omitempty"`
}

type HTTPMatch struct {
	Path    *StringMatch           `json:"path,omitempty"`
	Headers map[string]StringMatch `json:"headers,omitempty"`
	Method  string                 `json:"method,omitempty"`
}

// StringMatch: exactly one of Exact, Prefix, Regex, Present (Present only for headers).
type StringMatch struct {
	Exact   *string `json:"exact,omitempty"`
	Prefix  *string `json:"prefix,omitempty"`
	Regex   *string `json:"regex,omitempty"`
	Present *bool   `json:"present,omitempty"`
}

type Destination struct {
	Service string `json:"service"`
	Subset  string `json:"subset,omitempty"`
	Port    int32  `json:"port,omitempty"` // may be omitted when the Service has one port
}

type RouteDestination struct {
	Destination Destination `json:"destination"`
	Weight      int32       `json:"weight,omitempty"` // weights sum to 100; a single destination defaults to 100
}

type FallbackDestination struct {
	Destination Destination `json:"destination"`
}

type RetryPolicy struct {
	Attempts      int32    `json:"attempts"`
	PerTryTimeout Duration `json:"perTryTimeout,omitempty"`
	// RetryOn: 5xx | gateway-error | reset | connect-failure | retriable-4xx |
	// refused-stream, and gRPC statuses cancelled | deadline-exceeded |
	// unavailable | resource-exhausted | internal (Envoy's names).
	RetryOn []string      `json:"retryOn,omitempty"`
	Backoff *RetryBackoff `json:"backoff,omitempty"` // absent: Envoy's 25ms base, 10× it as max
}

// RetryBackoff is the wait before each retry: full jitter, uniform in
// [0, min(maxInterval, baseInterval × 2^n)) before retry n (0 for the first).
type RetryBackoff struct {
	BaseInterval Duration `json:"baseInterval"`
	MaxInterval  Duration `json:"maxInterval,omitempty"` // default 10× baseInterval
}

// ---- DestinationPolicy ----

type DestinationPolicySpec struct {
	Service          string            `json:"service"`
	Subsets          []Subset          `json:"subsets,omitempty"`
	LoadBalancer     string            `json:"loadBalancer,omitempty"` // default ROUND_ROBIN
	ConnectionPool   *ConnectionPool   `json:"connectionPool,omitempty"`
	OutlierDetection *OutlierDetection `json:"outlierDetection,omitempty"`
	LocalRateLimit   *LocalRateLimit   `json:"localRateLimit,omitempty"`
}

type Subset struct {
	Name   string            `json:"name"`
	Labels map[string]string `json:"labels"`
}

type ConnectionPool struct {
	MaxConnections     int32        `json:"maxConnections,omitempty"`
	MaxPendingRequests int32        `json:"maxPendingRequests,omitempty"`
	MaxRequests        int32        `json:"maxRequests,omitempty"`
	MaxRetries         int32        `json:"maxRetries,omitempty"`
	RetryBudget        *RetryBudget `json:"retryBudget,omitempty"`
	ConnectTimeout     Duration     `json:"connectTimeout,omitempty"`
}

type RetryBudget struct {
	Percent        float64 `json:"percent"`
	MinConcurrency int32   `json:"minConcurrency,omitempty"`
}

type OutlierDetection struct {
	Consecutive5xx                 int32 `json:"consecutive5xx,omitempty"`
	ConsecutiveGatewayErrors       int32 `json:"consecutiveGatewayErrors,omitempty"`
	ConsecutiveLocalOriginFailures int32 `json:"consecutiveLocalOriginFailures,omitempty"`
	// SplitExternalLocalOriginErrors counts local-origin failures (connect failures,
	// resets, timeouts) apart from upstream 5xx (Envoy's split_external_local_origin_errors).
	// Absent: on exactly when consecutiveLocalOriginFailures is set. An explicit false
	// with consecutiveLocalOriginFailures set is an error (that detector needs the split).
	SplitExternalLocalOriginErrors *bool              `json:"splitExternalLocalOriginErrors,omitempty"`
	SuccessRate                    *SuccessRate       `json:"successRate,omitempty"`
	FailurePercentage              *FailurePercentage `json:"failurePercentage,omitempty"`
	Interval                       Duration           `json:"interval,omitempty"`
	BaseEjectionTime               Duration           `json:"baseEjectionTime,omitempty"`
	MaxEjectionTime                Duration           `json:"maxEjectionTime,omitempty"`
	// MaxEjectionTimeJitter adds a random 0..jitter to every ejection (Envoy's
	// max_ejection_time_jitter), so hosts ejected together do not return together.
	MaxEjectionTimeJitter Duration `json:"maxEjectionTimeJitter,omitempty"`
	MaxEjectionPercent    float64  `json:"maxEjectionPercent,omitempty"`
	MinHealthPercent      *float64 `json:"minHealthPercent,omitempty"` // absent: 50 (Envoy's); 0: panic mode never
}

type SuccessRate struct {
	MinHosts      int32   `json:"minHosts,omitempty"`
	RequestVolume int32   `json:"requestVolume,omitempty"`
	StdevFactor   float64 `json:"stdevFactor,omitempty"`
}

type FailurePercentage struct {
	Threshold     float64 `json:"threshold"`
	MinHosts      int32   `json:"minHosts,omitempty"`
	RequestVolume int32   `json:"requestVolume,omitempty"`
}

type LocalRateLimit struct {
	RequestsPerSecond float64 `json:"requestsPerSecond"`
	Burst             int32   `json:"burst,omitempty"` // 0: one second's worth (ceil(requestsPerSecond))
	// DryRun counts would-be rejections (in the sidecar's /metrics) without rejecting.
	DryRun bool `json:"dryRun,omitempty"`
}

// ---- PeerAuthentication ----

type PeerAuthenticationSpec struct {
	Selector map[string]string `json:"selector,omitempty"`
	MTLS     string            `json:"mtls"` // STRICT | PERMISSIVE | DISABLE
}

// ---- AuthorizationPolicy ----

type AuthorizationPolicySpec struct {
	Selector map[string]string `json:"selector,omitempty"`
	Action   string            `json:"action,omitempty"` // ALLOW | DENY | AUDIT; default ALLOW
	DryRun   bool              `json:"dryRun,omitempty"`
	Rules    []AuthzRule       `json:"rules,omitempty"`
}

type AuthzRule struct {
	From []AuthzSource    `json:"from,omitempty"`
	To   []AuthzOperation `json:"to,omitempty"`
}

type AuthzSource struct {
	Principals []string `json:"principals,omitempty"`
	Namespaces []string `json:"namespaces,omitempty"`
}

type AuthzOperation struct {
	Methods []string `json:"methods,omitempty"`
	Paths   []string `json:"paths,omitempty"`
	Ports   []int32  `json:"ports,omitempty"`
}

// ---- StalenessPolicy ----

type StalenessPolicySpec struct {
	Selector map[string]string `json:"selector,omitempty"`
	Rules    []StalenessRule   `json:"rules"`
}

type StalenessRule struct {
	Resource      string   `json:"resource"` // listeners | routes | clusters | endpoints | secrets | revocation | authorization
	WarnAfter     Duration `json:"warnAfter,omitempty"`
	RestrictAfter Duration `json:"restrictAfter,omitempty"`
	ExpireAfter   Duration `json:"expireAfter,omitempty"`
	OnExpire      string   `json:"onExpire,omitempty"` // serveStale | failClosed | drop
	Jitter        float64  `json:"jitter,omitempty"`   // percent 0..100
}

// ---- Override ----

type OverrideSpec struct {
	TTL    Duration      `json:"ttl"`
	Reason string        `json:"reason,omitempty"`
	Action string        `json:"action"` // DENY | ALLOW
	Match  OverrideMatch `json:"match"`
}

type OverrideMatch struct {
	Principals []string `json:"principals,omitempty"`
	Paths      []string `json:"paths,omitempty"`
	Methods    []string `json:"methods,omitempty"`
}

// ---- MeshConfig ----

type MeshConfigSpec struct {
	TrustDomain    string   `json:"trustDomain,omitempty"` // default cluster.local
	DefaultMTLS    string   `json:"defaultMtls,omitempty"` // default STRICT
	CertificateTTL Duration `json:"certificateTTL,omitempty"`
	// CRLValidity is NextUpdate-ThisUpdate of the CRL pilot publishes (default
	// 1h); pilot re-signs it at half of it.
	CRLValidity Duration `json:"crlValidity,omitempty"`
	// ServiceAddressRange is the IPv4 CIDR pilot allocates Service VIPs from
	// (default DefaultServiceAddressRange, Istio's auto-allocation range).
	ServiceAddressRange string `json:"serviceAddressRange,omitempty"`
	// OutboundTrafficPolicy is what an intercepted sidecar does with a
	// destination that is not in the mesh: ALLOW_ANY (default: pass it
	// through to its original destination) or REGISTRY_ONLY (close it).
	OutboundTrafficPolicy string `json:"outboundTrafficPolicy,omitempty"`
	// Sidecar is the sidecar container injection adds.
	Sidecar *SidecarConfig `json:"sidecar,omitempty"`
}

// SidecarConfig is the sidecar container injection adds to a pod: its image
// and its resource requests (Kubernetes quantities).
type SidecarConfig struct {
	Image  string `json:"image,omitempty"`  // default DefaultSidecarImage
	CPU    string `json:"cpu,omitempty"`    // default DefaultSidecarCPU
	Memory string `json:"memory,omitempty"` // default DefaultSidecarMemory
}

// KindInfo describes one registered kind.
type KindInfo struct {
	Kind       string
	Plural     string // lower-case plural for REST paths, e.g. "destinationpolicies"
	Namespaced bool
	NewSpec    func() any // returns a pointer to a zero spec struct
	// ShortName is what users type at a prompt (meshctl get svc), after kubectl's
	// and Istio's: svc, pa and ap are theirs; dp and rt stand where Istio has dr
	// (DestinationRule) and vs (VirtualService).
	ShortName string
}

// kinds is the registry of every kind, in the order they are applied and listed
// (Services before the things that reference them).
var kinds = []KindInfo{
	{Kind: KindMeshConfig, Plural: "meshconfigs", Namespaced: false, NewSpec: func() any { return new(MeshConfigSpec) }, ShortName: "mc"},
	{Kind: KindService, Plural: "services", Namespaced: true, NewSpec: func() any { return new(ServiceSpec) }, ShortName: "svc"},
	{Kind: KindWorkload, Plural: "workloads", Namespaced: true, NewSpec: func() any { return new(WorkloadSpec) }, ShortName: "wl"},
	{Kind: KindDestinationPolicy, Plural: "destinationpolicies", Namespaced: true, NewSpec: func() any { return new(DestinationPolicySpec) }, ShortName: "dp"},
	{Kind: KindRoute, Plural: "routes", Namespaced: true, NewSpec: func() any { return new(RouteSpec) }, ShortName: "rt"},
	{Kind: KindPeerAuthentication, Plural: "peerauthentications", Namespaced: true, NewSpec: func() any { return new(PeerAuthenticationSpec) }, ShortName: "pa"},
	{Kind: KindAuthorizationPolicy, Plural: "authorizationpolicies", Namespaced: true, NewSpec: func() any { return new(AuthorizationPolicySpec) }, ShortName: "ap"},
	{Kind: KindStalenessPolicy, Plural: "stalenesspolicies", Namespaced: true, NewSpec: func() any { return new(StalenessPolicySpec) }, ShortName: "sp"},
	{Kind: KindOverride, Plural: "overrides", Namespaced: true, NewSpec: func() any { return new(OverrideSpec) }, ShortName: "ov"},
}

// Kinds returns every registered kind in apply order.
func Kinds() []KindInfo { return append([]KindInfo(nil), kinds...) }

// LookupKind finds a kind by its Kind name, its plural, or its lower-case name
// (so meshctl accepts "Route", "route" and "routes").
func LookupKind(s string) (KindInfo, error) {
	for _, k := range kinds {
		if s == k.Kind || s == k.Plural || strings.EqualFold(s, k.Kind) {
			return k, nil
		}
	}
	return KindInfo{}, fmt.Errorf("unknown kind %q", s)
}

// ResolveKind finds a kind by any name a person types: Kind, singular or plural,
// or short name, in any case ("svc", "Services", "DESTINATIONPOLICY"). The error
// for an unknown name lists every kind with its short name. The REST API keeps to
// LookupKind, so each path has one spelling.
func ResolveKind(s string) (KindInfo, error) {
	for _, k := range kinds {
		if strings.EqualFold(s, k.Kind) || strings.EqualFold(s, k.Plural) || strings.EqualFold(s, k.ShortName) {
			return k, nil
		}
	}
	names := make([]string, 0, len(kinds))
	for _, k := range kinds {
		names = append(names, k.Plural+" ("+k.ShortName+")")
	}
	return KindInfo{}, fmt.Errorf("unknown kind %q; kinds: %s", s, strings.Join(names, ", "))
}
