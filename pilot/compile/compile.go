// Package compile turns one store revision (plus the workloads connected sidecars
// registered) into an immutable ir.Mesh.
//
// Objects reaching Compile have been decoded and validated (resource.Decode), but
// Compile still treats zero values as the documented defaults (targetPort=port,
// weight=1, protocol=HTTP, ...) so a hand-built object compiles the same way.
//
// Errors vs warnings: a value that cannot be interpreted (a bad duration, an unknown
// protocol) is an error naming the object and field, because validation should have
// rejected it. A reference that cannot be resolved at this revision (a Route naming
// a missing subset, a second Route for the same host, a sidecar that does not match
// anything) is a warning in Mesh.Warnings, and the piece is left out, so one bad
// reference never stops the whole mesh from compiling.
//
// The rules, in one place:
//   - Endpoints: a Service's endpoints are the Workloads of its namespace and the
//     registered sidecars (node.Registers) of its namespace whose labels match
//     its selector; an empty selector selects nothing. A Workload endpoint is
//     address:targetPort (or the Workload's port override by port name); an
//     explicit sidecar's endpoint is address:inboundPort, the sidecar's inbound
//     listener; an intercepted sidecar's (node.Interception set) is
//     address:targetPort, which its inbound capture takes to that listener.
//   - Identity: a sidecar may only register the identity it connected with. Its
//     endpoint carries exactly the node's namespace, service account and labels,
//     and it only joins Services of its own namespace (pilot/xds/authn binds
//     namespace and service account to the node's certificate).
//   - mTLS (Istio's auto-mTLS): an endpoint takes mTLS (ir.Endpoint.MTLS) when
//     the node behind it proved, with its certificate (node.Identity), exactly
//     the endpoint's SPIFFE ID, and the workload's mode (ir.Mesh.MTLSMode:
//     selector PeerAuthentication, then namespace-wide, then
//     MeshConfig.defaultMtls) is not DISABLE. A registered sidecar is the
//     node; a Workload's is a connected proxyless gRPC server with the
//     Workload's address. Each cluster lists its mTLS endpoints' identities
//     (ir.Cluster.Identities) for clients to match the peer against.
//   - Duplicates: one address:port per cluster (the first by source wins).
//   - Policies: one DestinationPolicy per Service, from the Service's namespace.
//   - Routes: see routes (own-namespace Route for everyone; another namespace's
//     Route only for that namespace's sidecars).
//   - Scope: see scopes.
package compile

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/weft-mesh/weft/bootstrap/node"
	"github.com/weft-mesh/weft/pilot/ir"
	"github.com/weft-mesh/weft/pilot/resource"
)

// DefaultInboundPort is the sidecar inbound listener port used when a registering
// node does not carry one in its metadata.
const DefaultInboundPort = 15006

// Input is everything Compile reads; it reads nothing else.
type Input struct {
	Revision int64
	Objects  []*resource.Object // every object stored at Revision
	// Proxies are the connected sidecars that register their own workload, and
	// the connected proxyless servers (an Identity and an Address, no
	// namespace): those mark the Workload at their address mTLS-capable.
	Proxies []*node.Node
	// WriteTimes maps a store revision to when it was written, for the
	// revisions pilot saw written (watch events; optional, may be partial).
	// An Override's expiry reads its revision's time (ir.Override.WrittenAt).
	WriteTimes map[int64]time.Time
	// Now, when set, is the time of the compile: an Override whose expiry is
	// known (its write time + TTL) and past is left out. Sidecars stop
	// enforcing it then by themselves; a proxyless gRPC server cannot, and
	// stops with this compile. ir.Mesh.NextExpiry says when the next one is due.
	Now time.Time
	// Previous, if set, is the mesh compiled before this one. Clusters whose
	// contents did not change are carried over from it (same pointer), with
	// their cached wire form, so a one-endpoint change re-marshals one cluster.
	// Optional: the result is the same without it, only slower to generate.
	Previous *ir.Mesh
}

// Compile builds the mesh. The result is deterministic: the same Input (in any
// order) gives an identical Mesh.
func Compile(in Input) (*ir.Mesh, error) {
	c := &compiler{
		mesh:      &ir.Mesh{Revision: in.Revision, TrustDomain: ir.DefaultTrustDomain, DefaultMTLS: "STRICT", OutboundPolicy: ir.OutboundAllowAny},
		byKind:    map[string][]*resource.Object{},
		workloads: map[string][]*resource.Object{},
		previous:  in.Previous,
	}
	for _, o := range in.Objects {
		if o == nil {
			continue
		}
		c.byKind[o.Kind] = append(c.byKind[o.Kind], o)
	}
	for _, objs := range c.byKind {
		sort.Slice(objs, func(i, j int) bool { return objKeyLess(objs[i], objs[j]) })
	}
	for _, w := range c.byKind[resource.KindWorkload] {
		c.workloads[w.Metadata.Namespace] = append(c.workloads[w.Metadata.Namespace], w)
	}
	steps := []func() error{
		c.meshConfig,
		c.services,
		c.policies,
		func() error { return c.security(in.WriteTimes, in.Now) },
		func() error { return c.endpoints(in.Proxies) },
		c.routes,
	}
	for _, step := range steps {
		if err := step(); err != nil {
			return nil, fmt.Errorf("compile revision %d: %w", in.Revision, err)
		}
	}
	c.scopes()
	sort.Strings(c.mesh.Warnings)
	return c.mesh, nil
}

type compiler struct {
	mesh      *ir.Mesh
	byKind    map[string][]*resource.Object
	workloads map[string][]*resource.Object // namespace -> workloads, sorted
	previous  *ir.Mesh                      // Input.Previous; read only
}

func (c *compiler) warnf(format string, args ...any) {
	c.mesh.Warnings = append(c.mesh.Warnings, fmt.Sprintf(format, args...))
}

func objKeyLess(a, b *resource.Object) bool {
	if a.Metadata.Namespace != b.Metadata.Namespace {
		return a.Metadata.Namespace < b.Metadata.Namespace
	}
	return a.Metadata.Name < b.Metadata.Name
}

func specOf[T any](o *resource.Object) (*T, error) {
	s, ok := o.Spec.(*T)
	if !ok || s == nil {
		return nil, fmt.Errorf("%s: spec: want %T, got %T", o, (*T)(nil), o.Spec)
	}
	return s, nil
}

func duration(o *resource.Object, field string, d resource.Duration) (time.Duration, error) {
	if d == "" {
		return 0, nil
	}
	v, err := time.ParseDuration(string(d))
	if err != nil || v < 0 {
		return 0, fmt.Errorf("%s: %s: invalid duration %q", o, field, d)
	}
	return v, nil
}

func nonNeg(o *resource.Object, field string, v int32) (uint32, error) {
	if v < 0 {
		return 0, fmt.Errorf("%s: %s: must not be negative, got %d", o, field, v)
	}
	return uint32(v), nil
}

// count is one non-negative integer field to convert; dur one duration field.
type (
	count struct {
		name string
		v    int32
		dst  *uint32
	}
	dur struct {
		name string
		v    resource.Duration
		dst  *time.Duration
	}
)

// counts converts each field (named prefix+name in errors) or fails on the first bad one.
func counts(o *resource.Object, prefix string, fs ...count) error {
	for _, f := range fs {
		v, err := nonNeg(o, prefix+f.name, f.v)
		if err != nil {
			return err
		}
		*f.dst = v
	}
	return nil
}

// durations parses each field (named prefix+name in errors) or fails on the first bad one.
func durations(o *resource.Object, prefix string, fs ...dur) error {
	for _, f := range fs {
		v, err := duration(o, prefix+f.name, f.v)
		if err != nil {
			return err
		}
		*f.dst = v
	}
	return nil
}

func copyLabels(m map[string]string) map[string]string {
	if len(m) == 0 {
		return nil
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// ---- MeshConfig ----

func (c *compiler) meshConfig() error {
	for _, o := range c.byKind[resource.KindMeshConfig] {
		if o.Metadata.Name != "default" {
			c.warnf("%s: ignored: only MeshConfig/default takes effect", o)
			continue
		}
		s, err := specOf[resource.MeshConfigSpec](o)
		if err != nil {
			return err
		}
		if s.TrustDomain != "" {
			c.mesh.TrustDomain = s.TrustDomain
		}
		if s.DefaultMTLS != "" {
			c.mesh.DefaultMTLS = s.DefaultMTLS
		}
		switch s.OutboundTrafficPolicy {
		case "":
		case ir.OutboundAllowAny, ir.OutboundRegistryOnly:
			c.mesh.OutboundPolicy = s.OutboundTrafficPolicy
		default:
			return fmt.Errorf("%s: spec.outboundTrafficPolicy: %q is not ALLOW_ANY or REGISTRY_ONLY", o, s.OutboundTrafficPolicy)
		}
		if c.mesh.CertTTL, err = duration(o, "spec.certificateTTL", s.CertificateTTL); err != nil {
			return err
		}
	}
	return nil
}

// ---- Services ----

func (c *compiler) services() error {
	for _, o := range c.byKind[resource.KindService] {
		s, err := specOf[resource.ServiceSpec](o)
		if err != nil {
			return err
		}
		ns := o.Metadata.Namespace
		svc := &ir.Service{
			Namespace: ns,
			Name:      o.Metadata.Name,
			Host:      ir.ServiceHost(o.Metadata.Name, ns, c.mesh.TrustDomain),
			Selector:  copyLabels(s.Selector),
		}
		field, addrs := resource.ServiceAddresses(o)
		for i, a := range addrs {
			ip, err := netip.ParseAddr(a)
			if err != nil {
				return fmt.Errorf("%s: %s[%d]: %q is not an IP literal", o, field, i, a)
			}
			svc.Addresses = append(svc.Addresses, ip.String())
		}
		slices.SortFunc(svc.Addresses, func(a, b string) int {
			return netip.MustParseAddr(a).Compare(netip.MustParseAddr(b))
		})
		for i, p := range s.Ports {
			field := fmt.Sprintf("spec.ports[%d]", i)
			if p.Port <= 0 || p.Port > 65535 {
				return fmt.Errorf("%s: %s.port: %d out of range 1..65535", o, field, p.Port)
			}
			target := p.TargetPort
			if target == 0 {
				target = p.Port
			}
			if target < 0 || target > 65535 {
				return fmt.Errorf("%s: %s.targetPort: %d out of range 1..65535", o, field, target)
			}
			proto, err := protocol(p.Protocol)
			if err != nil {
				return fmt.Errorf("%s: %s.protocol: %w", o, field, err)
			}
			if svc.PortByNumber(uint32(p.Port)) != nil {
				return fmt.Errorf("%s: %s.port: duplicate port %d", o, field, p.Port)
			}
			svc.Ports = append(svc.Ports, &ir.Port{
				Name:       p.Name,
				Port:       uint32(p.Port),
				TargetPort: uint32(target),
				Protocol:   proto,
				Cluster:    ir.OutboundClusterName(uint32(p.Port), "", svc.Host),
			})
		}
		c.mesh.Services = append(c.mesh.Services, svc)
	}
	c.mesh.Index()
	return nil
}

func protocol(p string) (ir.Protocol, error) {
	switch ir.Protocol(p) {
	case "":
		return ir.ProtocolHTTP, nil
	case ir.ProtocolHTTP, ir.ProtocolHTTP2, ir.ProtocolGRPC, ir.ProtocolTCP:
		return ir.Protocol(p), nil
	}
	return "", fmt.Errorf("unknown protocol %q (want HTTP, HTTP2, GRPC or TCP)", p)
}

// lookupService resolves a service reference written in namespace ns: "svc",
// "svc.ns" or the full host "svc.ns.svc.<domain>".
func (c *compiler) lookupService(ns, ref string) *ir.Service {
	if host, ok := strings.CutSuffix(ref, ".svc."+c.mesh.TrustDomain); ok {
		ref = host
	}
	name, refNS, found := strings.Cut(ref, ".")
	if !found {
		refNS = ns
	}
	return c.mesh.Service(refNS, name)
}

// ---- DestinationPolicy ----

func (c *compiler) policies() error {
	for _, o := range c.byKind[resource.KindDestinationPolicy] {
		s, err := specOf[resource.DestinationPolicySpec](o)
		if err != nil {
			return err
		}
		dp := &ir.DestinationPolicy{Namespace: o.Metadata.Namespace, Name: o.Metadata.Name, Service: s.Service}
		if dp.Policy, err = clusterPolicy(o, s); err != nil {
			return err
		}
		for _, ss := range s.Subsets {
			dp.Subsets = append(dp.Subsets, ir.Subset{Name: ss.Name, Labels: copyLabels(ss.Labels)})
		}
		c.mesh.Policies = append(c.mesh.Policies, dp)
		svc := c.lookupService(o.Metadata.Namespace, s.Service)
		switch {
		case svc == nil:
			c.warnf("%s: spec.service: Service %q not found; policy has no effect", o, s.Service)
		case svc.Policy != nil:
			// Objects are sorted by name, so the earliest name wins everywhere.
			c.warnf("%s: ignored: DestinationPolicy/%s/%s already applies to Service %s/%s", o, svc.Policy.Namespace, svc.Policy.Name, svc.Namespace, svc.Name)
		case svc.Namespace != o.Metadata.Namespace:
			c.warnf("%s: spec.service: %q is in another namespace; a policy only applies to its own namespace's services", o, s.Service)
		default:
			svc.Policy = dp
		}
	}
	return nil
}

func clusterPolicy(o *resource.Object, s *resource.DestinationPolicySpec) (ir.ClusterPolicy, error) {
	p := ir.ClusterPolicy{LB: ir.LBRoundRobin, ConnectTimeout: ir.DefaultConnectTimeout}
	switch lb := ir.LBPolicy(s.LoadBalancer); lb {
	case "":
	case ir.LBRoundRobin, ir.LBLeastRequest, ir.LBRandom, ir.LBRingHash:
		p.LB = lb
	default:
		return p, fmt.Errorf("%s: spec.loadBalancer: unknown policy %q", o, s.LoadBalancer)
	}
	if cp := s.ConnectionPool; cp != nil {
		pool := &ir.ConnectionPool{}
		if err := counts(o, "spec.connectionPool.",
			count{"maxConnections", cp.MaxConnections, &pool.MaxConnections},
			count{"maxPendingRequests", cp.MaxPendingRequests, &pool.MaxPendingRequests},
			count{"maxRequests", cp.MaxRequests, &pool.MaxRequests},
			count{"maxRetries", cp.MaxRetries, &pool.MaxRetries},
		); err != nil {
			return p, err
		}
		if rb := cp.RetryBudget; rb != nil {
			if rb.Percent < 0 || rb.Percent > 100 {
				return p, fmt.Errorf("%s: spec.connectionPool.retryBudget.percent: %v out of range 0..100", o, rb.Percent)
			}
			mc, err := nonNeg(o, "spec.connectionPool.retryBudget.minConcurrency", rb.MinConcurrency)
			if err != nil {
				return p, err
			}
			pool.RetryBudget = &ir.RetryBudget{Percent: rb.Percent, MinConcurrency: mc}
		}
		ct, err := duration(o, "spec.connectionPool.connectTimeout", cp.ConnectTimeout)
		if err != nil {
			return p, err
		}
		if ct > 0 {
			p.ConnectTimeout = ct
		}
		if *pool != (ir.ConnectionPool{}) {
			p.Pool = pool
		}
	}
	if od := s.OutlierDetection; od != nil {
		out, err := outlier(o, od)
		if err != nil {
			return p, err
		}
		p.Outlier = out
	}
	if rl := s.LocalRateLimit; rl != nil {
		if rl.RequestsPerSecond <= 0 {
			return p, fmt.Errorf("%s: spec.localRateLimit.requestsPerSecond: must be > 0, got %v", o, rl.RequestsPerSecond)
		}
		b, err := nonNeg(o, "spec.localRateLimit.burst", rl.Burst)
		if err != nil {
			return p, err
		}
		p.RateLimit = &ir.LocalRateLimit{RequestsPerSecond: rl.RequestsPerSecond, Burst: b, DryRun: rl.DryRun}
	}
	return p, nil
}

func percent(o *resource.Object, field string, v float64) error {
	if v < 0 || v > 100 {
		return fmt.Errorf("%s: %s: %v out of range 0..100", o, field, v)
	}
	return nil
}

func outlier(o *resource.Object, od *resource.OutlierDetection) (*ir.OutlierDetection, error) {
	const f = "spec.outlierDetection."
	out := &ir.OutlierDetection{}
	if err := counts(o, f,
		count{"consecutive5xx", od.Consecutive5xx, &out.Consecutive5xx},
		count{"consecutiveGatewayErrors", od.ConsecutiveGatewayErrors, &out.ConsecutiveGatewayErrors},
		count{"consecutiveLocalOriginFailures", od.ConsecutiveLocalOriginFailures, &out.ConsecutiveLocalOriginFailures},
	); err != nil {
		return nil, err
	}
	if err := durations(o, f,
		dur{"interval", od.Interval, &out.Interval},
		dur{"baseEjectionTime", od.BaseEjectionTime, &out.BaseEjectionTime},
		dur{"maxEjectionTime", od.MaxEjectionTime, &out.MaxEjectionTime},
		dur{"maxEjectionTimeJitter", od.MaxEjectionTimeJitter, &out.MaxEjectionTimeJitter},
	); err != nil {
		return nil, err
	}
	out.SplitExternalLocalOriginErrors = out.ConsecutiveLocalOriginFailures > 0
	if sp := od.SplitExternalLocalOriginErrors; sp != nil {
		if !*sp && out.ConsecutiveLocalOriginFailures > 0 {
			return nil, fmt.Errorf("%s: %ssplitExternalLocalOriginErrors: false, but consecutiveLocalOriginFailures is set", o, f)
		}
		out.SplitExternalLocalOriginErrors = *sp
	}
	if err := percent(o, f+"maxEjectionPercent", od.MaxEjectionPercent); err != nil {
		return nil, err
	}
	out.MinHealthPercent = ir.DefaultMinHealthPercent
	if od.MinHealthPercent != nil {
		if err := percent(o, f+"minHealthPercent", *od.MinHealthPercent); err != nil {
			return nil, err
		}
		out.MinHealthPercent = *od.MinHealthPercent
	}
	out.MaxEjectionPercent = od.MaxEjectionPercent
	if sr := od.SuccessRate; sr != nil {
		mh, err1 := nonNeg(o, f+"successRate.minHosts", sr.MinHosts)
		rv, err2 := nonNeg(o, f+"successRate.requestVolume", sr.RequestVolume)
		if err := cmp.Or(err1, err2); err != nil {
			return nil, err
		}
		if sr.StdevFactor < 0 {
			return nil, fmt.Errorf("%s: %ssuccessRate.stdevFactor: must not be negative, got %v", o, f, sr.StdevFactor)
		}
		out.SuccessRate = &ir.SuccessRate{MinHosts: mh, RequestVolume: rv, StdevFactor: sr.StdevFactor}
	}
	if fp := od.FailurePercentage; fp != nil {
		if err := percent(o, f+"failurePercentage.threshold", fp.Threshold); err != nil {
			return nil, err
		}
		mh, err1 := nonNeg(o, f+"failurePercentage.minHosts", fp.MinHosts)
		rv, err2 := nonNeg(o, f+"failurePercentage.requestVolume", fp.RequestVolume)
		if err := cmp.Or(err1, err2); err != nil {
			return nil, err
		}
		out.FailurePercentage = &ir.FailurePercentage{Threshold: fp.Threshold, MinHosts: mh, RequestVolume: rv}
	}
	return out, nil
}

// ---- Endpoints and clusters ----

// candidate is one workload (static or registered) that may back a service.
type candidate struct {
	source         string
	namespace      string
	address        string
	serviceAccount string
	labels         map[string]string
	locality       ir.Locality
	weight         uint32
	health         ir.Health
	ports          map[string]int32 // Workload port overrides by service port name
	inboundPort    uint32           // sidecars: every service port goes to the inbound listener
	intercepted    bool             // sidecars with inbound capture: the endpoint is address:targetPort
	mtls           bool             // see ir.Endpoint.MTLS
}

// proxylessServers maps address -> the identities of the connected proxyless
// nodes (no namespace) that present an address and a verified identity.
func proxylessServers(proxies []*node.Node) map[string][]string {
	out := map[string][]string{}
	for _, n := range proxies {
		if n == nil || n.Registers() || n.Identity == "" || n.Address == "" {
			continue
		}
		out[n.Address] = append(out[n.Address], n.Identity)
	}
	return out
}

// takesMTLS reports whether a workload of ns/sa with labels whose node proved
// identity takes mTLS: the identity is exactly the workload's SPIFFE ID and
// its mode is not DISABLE.
func (c *compiler) takesMTLS(identity, ns, sa string, labels map[string]string) bool {
	if identity == "" || identity != ir.WorkloadID(c.mesh.TrustDomain, ns, sa) {
		return false
	}
	mode, _ := c.mesh.MTLSMode(ns, labels)
	return mode != ir.MTLSDisable
}

func (c *compiler) workloadCandidates(servers map[string][]string) (map[string][]candidate, error) {
	out := map[string][]candidate{}
	for _, o := range c.byKind[resource.KindWorkload] {
		s, err := specOf[resource.WorkloadSpec](o)
		if err != nil {
			return nil, err
		}
		if _, err := netip.ParseAddr(s.Address); err != nil {
			return nil, fmt.Errorf("%s: spec.address: %q is not an IP literal", o, s.Address)
		}
		loc, err := node.ParseLocality(s.Locality)
		if err != nil {
			return nil, fmt.Errorf("%s: spec.locality: %w", o, err)
		}
		w := uint32(1)
		if s.Weight != 0 {
			if s.Weight < 1 || s.Weight > 128 {
				return nil, fmt.Errorf("%s: spec.weight: %d out of range 1..128", o, s.Weight)
			}
			w = uint32(s.Weight)
		}
		for name, p := range s.Ports {
			if p <= 0 || p > 65535 {
				return nil, fmt.Errorf("%s: spec.ports.%s: %d out of range 1..65535", o, name, p)
			}
		}
		ns := o.Metadata.Namespace
		sa := cmp.Or(s.ServiceAccount, "default")
		mtls := false
		for _, id := range servers[s.Address] {
			mtls = mtls || c.takesMTLS(id, ns, sa, o.Metadata.Labels)
		}
		if mode, _ := c.mesh.MTLSMode(ns, o.Metadata.Labels); mtls && mode == ir.MTLSPermissive {
			c.warnf("%s: PERMISSIVE: its proxyless gRPC server cannot accept plaintext and mTLS on one port; it requires mTLS (as STRICT)", o)
		}
		out[ns] = append(out[ns], candidate{
			source:         o.Key().String(),
			namespace:      ns,
			address:        s.Address,
			serviceAccount: sa,
			mtls:           mtls,
			labels:         o.Metadata.Labels,
			locality:       ir.Locality{Region: loc.Region, Zone: loc.Zone, SubZone: loc.SubZone},
			weight:         w,
			health:         ir.HealthUnknown,
			ports:          s.Ports,
		})
	}
	return out, nil
}

// sidecarCandidates turns registering nodes into candidates. A sidecar may only
// register the identity it connected with: its endpoint carries exactly the node's
// namespace, service account and labels, and it can only join Services in its own
// namespace. Today that identity is the node metadata it presents; the identity
// work binds it to the sidecar's certificate.
func (c *compiler) sidecarCandidates(proxies []*node.Node) map[string][]candidate {
	sorted := slices.Clone(proxies)
	sorted = slices.DeleteFunc(sorted, func(n *node.Node) bool { return n == nil })
	slices.SortStableFunc(sorted, func(a, b *node.Node) int { return strings.Compare(a.ID, b.ID) })
	out := map[string][]candidate{}
	for i, n := range sorted {
		if i > 0 && sorted[i-1].ID == n.ID {
			c.warnf("sidecar %s: registered twice; only the first registration is used", n.ID)
			continue
		}
		if !n.Registers() {
			continue
		}
		if err := n.Validate(); err != nil {
			c.warnf("sidecar %s: not registered: %v", n.ID, err)
			continue
		}
		inbound := n.InboundPort
		if inbound == 0 {
			inbound = DefaultInboundPort
		}
		sa := cmp.Or(n.ServiceAccount, "default")
		if n.Identity != "" {
			if want := ir.WorkloadID(c.mesh.TrustDomain, n.Namespace, sa); n.Identity != want {
				// pilot/xds/authn refuses such a registration; never trust it here either.
				c.warnf("sidecar %s: identity %s is not its workload's %s; its endpoint does not take mTLS", n.ID, n.Identity, want)
			}
		}
		out[n.Namespace] = append(out[n.Namespace], candidate{
			source:         "sidecar/" + n.ID,
			namespace:      n.Namespace,
			address:        n.Address,
			serviceAccount: sa,
			mtls:           c.takesMTLS(n.Identity, n.Namespace, sa, n.Labels),
			labels:         n.Labels,
			locality:       ir.Locality{Region: n.Locality.Region, Zone: n.Locality.Zone, SubZone: n.Locality.SubZone},
			weight:         1,
			health:         ir.HealthHealthy,
			inboundPort:    inbound,
			intercepted:    n.Interception != node.InterceptionNone,
		})
	}
	return out
}

func (c *compiler) endpoints(proxies []*node.Node) error {
	static, err := c.workloadCandidates(proxylessServers(proxies))
	if err != nil {
		return err
	}
	sidecars := c.sidecarCandidates(proxies)
	index := map[string]*labelIndex{}
	for ns, cands := range static {
		index[ns] = newLabelIndex(cands)
	}
	for ns, cands := range sidecars {
		if index[ns] == nil {
			index[ns] = newLabelIndex(nil)
		}
		index[ns].add(cands) // after the namespace's Workloads: static endpoints win duplicates
	}
	for _, svc := range c.mesh.Services {
		var members []candidate
		if ix := index[svc.Namespace]; ix != nil {
			members = ix.selectAll(svc.Selector)
		}
		for _, port := range svc.Ports {
			eps := c.portEndpoints(svc, port, members)
			pol := ir.ClusterPolicy{LB: ir.LBRoundRobin, ConnectTimeout: ir.DefaultConnectTimeout}
			if svc.Policy != nil {
				pol = svc.Policy.Policy
			}
			c.mesh.Clusters = append(c.mesh.Clusters, &ir.Cluster{
				Name: port.Cluster, Namespace: svc.Namespace, Service: svc.Name, Port: port.Port,
				Protocol: port.Protocol, Policy: pol, Endpoints: eps, Identities: c.identities(eps),
			})
			if svc.Policy == nil {
				continue
			}
			for _, ss := range svc.Policy.Subsets {
				name := ir.OutboundClusterName(port.Port, ss.Name, svc.Host)
				port.Subsets = append(port.Subsets, name)
				var sub []ir.Endpoint
				for _, ep := range eps {
					if ir.Contains(ep.Labels, ss.Labels) {
						sub = append(sub, ep)
					}
				}
				c.mesh.Clusters = append(c.mesh.Clusters, &ir.Cluster{
					Name: name, Namespace: svc.Namespace, Service: svc.Name, Port: port.Port, Subset: ss.Name,
					Protocol: port.Protocol, Policy: pol, Endpoints: sub, Identities: c.identities(sub),
				})
			}
		}
	}
	slices.SortFunc(c.mesh.Clusters, func(a, b *ir.Cluster) int { return strings.Compare(a.Name, b.Name) })
	if prev := c.previous; prev != nil {
		for i, cl := range c.mesh.Clusters {
			if old := prev.Cluster(cl.Name); old != nil && old.Same(cl) {
				c.mesh.Clusters[i] = old
			}
		}
	}
	c.mesh.Index()
	return nil
}

// portEndpoints builds the sorted, de-duplicated endpoints of one service port.
// Two members with the same address:port would be one upstream twice (and
// grpc-go NACKs a ClusterLoadAssignment with duplicate addresses), so the first in
// source order wins and the rest are reported.
func (c *compiler) portEndpoints(svc *ir.Service, port *ir.Port, members []candidate) []ir.Endpoint {
	seen := map[string]string{}
	var eps []ir.Endpoint
	for _, m := range members {
		p := port.TargetPort
		if m.inboundPort != 0 && !m.intercepted {
			p = m.inboundPort
		} else if o, ok := m.ports[port.Name]; ok && port.Name != "" {
			p = uint32(o)
		}
		addr := netip.AddrPortFrom(netip.MustParseAddr(m.address), uint16(p)).String()
		if first, dup := seen[addr]; dup {
			c.warnf("Service/%s/%s: port %d: %s has the same address %s as %s; skipped", svc.Namespace, svc.Name, port.Port, m.source, addr, first)
			continue
		}
		seen[addr] = m.source
		eps = append(eps, ir.Endpoint{
			Address: m.address, Port: p, Namespace: m.namespace, ServiceAccount: m.serviceAccount,
			Labels: m.labels, Locality: m.locality, Weight: m.weight, Health: m.health, Source: m.source,
			Sidecar: m.inboundPort != 0, MTLS: m.mtls,
		})
	}
	slices.SortFunc(eps, func(a, b ir.Endpoint) int {
		return cmp.Or(
			strings.Compare(a.Locality.Region, b.Locality.Region),
			strings.Compare(a.Locality.Zone, b.Locality.Zone),
			strings.Compare(a.Locality.SubZone, b.Locality.SubZone),
			strings.Compare(a.Address, b.Address),
			cmp.Compare(a.Port, b.Port),
		)
	})
	return eps
}

// identities lists the SPIFFE IDs of eps' mTLS endpoints, sorted and unique.
func (c *compiler) identities(eps []ir.Endpoint) []string {
	var out []string
	for _, ep := range eps {
		if ep.MTLS {
			out = append(out, ir.WorkloadID(c.mesh.TrustDomain, ep.Namespace, ep.ServiceAccount))
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// labelIndex finds the candidates of one namespace a selector matches without
// scanning them all for every Service: it intersects from the posting list of
// one of the selector's pairs (the shortest).
type labelIndex struct {
	cands    []candidate
	postings map[labelPair][]int // indexes into cands, ascending
}

type labelPair struct{ key, value string }

func newLabelIndex(cands []candidate) *labelIndex {
	ix := &labelIndex{postings: map[labelPair][]int{}}
	ix.add(cands)
	return ix
}

func (ix *labelIndex) add(cands []candidate) {
	for _, c := range cands {
		i := len(ix.cands)
		ix.cands = append(ix.cands, c)
		for k, v := range c.labels {
			ix.postings[labelPair{k, v}] = append(ix.postings[labelPair{k, v}], i)
		}
	}
}

// selectAll returns the matching candidates in insertion order; an empty
// selector selects nothing.
func (ix *labelIndex) selectAll(sel map[string]string) []candidate {
	if len(sel) == 0 {
		return nil
	}
	var best []int
	first := true
	for k, v := range sel {
		p := ix.postings[labelPair{k, v}]
		if first || len(p) < len(best) {
			best, first = p, false
		}
	}
	var out []candidate
	for _, i := range best {
		if ir.Selects(sel, ix.cands[i].labels) {
			out = append(out, ix.cands[i])
		}
	}
	return out
}
