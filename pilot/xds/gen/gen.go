// Package gen turns an ir.Mesh and one proxy into that proxy's consistent xDS
// snapshot. It reads only its arguments (no store, no clock).
//
// Two kinds of proxy:
//
//   - A Weft sidecar (node.Registers()): it gets an "outbound" listener, an
//     "inbound" listener for the Services its own workload belongs to, and the
//     clusters, endpoints and route configurations of its scope. Scope is decided
//     by compile (ir.Mesh.Scopes): the services of the sidecar's own namespace,
//     every Service a Route of that namespace names, and transitively whatever the
//     effective routes of those Services send to, so every route it holds only
//     references clusters it also holds. It also gets its staleness policy
//     (staleness.go): the rules of the StalenessPolicies that select it.
//   - Any other client (proxyless gRPC, a debugging tool): it gets the whole mesh,
//     with one api_listener Listener per HTTP-family service port named
//     "<svc>.<ns>.svc.<domain>:<port>" and a route configuration of the same name.
//     ADS only sends what such a client subscribes to by name.
//
// Everything that does not depend on the node (every cluster and endpoint
// assignment, the whole-mesh bundle, each namespace's outbound bundle) is built
// and marshalled once per Mesh through ir.Mesh.Derive and shared, read-only, by
// every snapshot; the inbound listener and clusters are built once per workload
// class (namespace, inbound port, Services backed), and so is the snapshot: a
// returned *snapshot.Snapshot may be shared by many nodes and must not be changed.
package gen

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"github.com/weft-mesh/weft/bootstrap/node"
	"github.com/weft-mesh/weft/pilot/ir"
	"github.com/weft-mesh/weft/pilot/xds/snapshot"
	"google.golang.org/protobuf/proto"
)

// Listener names and default addresses of a Weft sidecar.
const (
	OutboundListenerName = "outbound"
	InboundListenerName  = "inbound"
	OutboundAddress      = "127.0.0.1"
	OutboundPort         = 15001
	InboundAddress       = "0.0.0.0"
	InboundPort          = 15006
)

// OutboundRouteName is the route configuration the outbound listener's HTTP
// filter chain for port uses: "outbound|<port>".
func OutboundRouteName(port uint32) string {
	return "outbound|" + strconv.FormatUint(uint64(port), 10)
}

// APIListenerName is the Listener (and RouteConfiguration) name a proxyless gRPC
// client dialing xds:///<host>:<port> asks for.
func APIListenerName(host string, port uint32) string {
	return host + ":" + strconv.FormatUint(uint64(port), 10)
}

// Proxy generates the snapshot for n. A node without Weft metadata (proxyless gRPC,
// debugging tools) gets the whole mesh and asks for what it needs by name.
func Proxy(mesh *ir.Mesh, n *node.Node) (*snapshot.Snapshot, error) {
	if mesh == nil {
		return nil, errors.New("gen: mesh is nil")
	}
	if n == nil {
		return nil, errors.New("gen: node is nil")
	}
	if !n.Registers() {
		// Every such client gets the same snapshot: build it once per mesh
		// (and variant); a proxyless server adds its own listeners (server.go).
		v := proxylessPlain
		if n.Identity != "" {
			v = proxylessTLSCerts
		}
		snap, err := derive(mesh, meshSnapKey{v}, func() (*snapshot.Snapshot, error) {
			b, err := derive(mesh, meshKey{v}, func() (*bundle, error) { return wholeMesh(mesh, v) })
			if err != nil {
				return nil, err
			}
			return snapshot.FromSets(mesh.Revision, b.sets()), nil
		})
		if err == nil && n.Address != "" {
			snap, err = withServerListeners(mesh, n, v, snap)
		}
		if err != nil {
			return nil, fmt.Errorf("gen: node %s: %w", n.ID, err)
		}
		return snap, nil
	}
	// A sidecar's snapshot depends only on its namespace, its inbound port and
	// the Services it backs, so sidecars of one workload class share one
	// snapshot (10,000 sidecars of 100 classes cost 100 builds per mesh).
	class := workloadClass(mesh, n)
	snap, err := derive(mesh, class.key(), func() (*snapshot.Snapshot, error) { return sidecarSnapshot(mesh, class) })
	if err != nil {
		return nil, fmt.Errorf("gen: node %s: %w", n.ID, err)
	}
	return snap, nil
}

// ScopeKey returns a key such that, for any one mesh, nodes with equal keys get
// the same snapshot from Proxy: it is everything of the node Proxy reads. A
// node that does not register reads nothing (every such node shares one key);
// a sidecar reads its namespace, labels, inbound port, whether it has an
// identity, whether it is intercepted and whether it takes LEDS, not its ID, address, service account, locality or which identity.
// A proxyless node reads whether it has an identity, and its address (server
// listeners). Callers may generate once per key.
func ScopeKey(n *node.Node) string {
	tls := "plain"
	if n.Identity != "" {
		tls = "tls"
	}
	if !n.Registers() {
		return "proxyless\x00" + tls + "\x00" + n.Address
	}
	port := n.InboundPort
	if port == 0 {
		port = InboundPort
	}
	mode := "explicit"
	if n.Interception != node.InterceptionNone {
		mode = "intercepted" // iptables and ebpf get the same snapshot
	}
	if n.LEDS {
		mode += "+leds"
	}
	return "sidecar\x00" + tls + "\x00" + mode + "\x00" + n.Namespace + "\x00" + strconv.FormatUint(uint64(port), 10) + "\x00" + node.LabelString(n.Labels)
}

// class is what a sidecar's snapshot depends on.
type class struct {
	namespace   string
	inboundPort uint32
	backs       []*ir.Service // services of its namespace whose selector matches it, sorted
	staleness   stalenessPick // the StalenessPolicies that select it
	// tls: the node has a verified identity (node.Identity): its inbound
	// gets TLS chains by mode and its outbound clusters transport sockets.
	tls bool
	// intercepted: the node's traffic is intercepted (node.Interception):
	// it gets the outbound wire by VIP:port (outbound).
	intercepted bool
	// leds: the node takes endpoints as LbEndpoint resources (node.LEDS).
	leds  bool
	mode  string    // its resolved mTLS mode (ir.Mesh.MTLSMode)
	authz authzPick // the authorization policies and overrides that apply to it
}

// tlsChains reports whether the inbound listener has TLS chains.
func (c class) tlsChains() bool { return c.tls && c.mode != ir.MTLSDisable }

// classKey is the memo key of a class: namespace, port and backed services.
type classKey string

func workloadClass(mesh *ir.Mesh, n *node.Node) class {
	c := class{namespace: n.Namespace, inboundPort: n.InboundPort, staleness: pickStaleness(mesh, n),
		tls: n.Identity != "", authz: pickAuthz(mesh, n.Namespace, n.Labels), intercepted: n.Interception != node.InterceptionNone,
		leds: n.LEDS}
	c.mode, _ = mesh.MTLSMode(n.Namespace, n.Labels)
	if c.inboundPort == 0 {
		c.inboundPort = InboundPort
	}
	if len(n.Labels) == 0 {
		return c // an empty label set matches no selector
	}
	ix := selectorIndexOf(mesh, n.Namespace)
	for k, v := range n.Labels {
		for _, svc := range ix[k+"="+v] {
			if ir.Selects(svc.Selector, n.Labels) {
				c.backs = append(c.backs, svc)
			}
		}
	}
	slices.SortFunc(c.backs, func(a, b *ir.Service) int { return strings.Compare(a.Name, b.Name) })
	return c
}

type selectorIndexKey string

// selectorIndexOf maps "key=value" to the services of namespace ns whose
// selector's smallest key is that pair. Each service is listed once, so a
// node's candidates are found from its own labels without scanning every
// service of a large namespace.
func selectorIndexOf(mesh *ir.Mesh, ns string) map[string][]*ir.Service {
	ix, _ := derive(mesh, selectorIndexKey(ns), func() (map[string][]*ir.Service, error) {
		ix := map[string][]*ir.Service{}
		for _, svc := range mesh.Scopes[ns] {
			if svc.Namespace != ns || len(svc.Selector) == 0 {
				continue
			}
			k := ir.SortedKeys(svc.Selector)[0]
			ix[k+"="+svc.Selector[k]] = append(ix[k+"="+svc.Selector[k]], svc)
		}
		return ix, nil
	})
	return ix
}

func (c class) key() classKey {
	var b strings.Builder
	b.WriteString(c.namespace)
	b.WriteByte(0)
	b.WriteString(strconv.FormatUint(uint64(c.inboundPort), 10))
	for _, s := range c.backs {
		b.WriteByte(0)
		b.WriteString(s.Name)
	}
	if len(c.staleness.classes) > 0 {
		b.WriteByte(1) // names never hold \x01: the staleness pick cannot run into them
		b.WriteString(c.staleness.key())
	}
	if c.tls {
		b.WriteByte(2)
		b.WriteString(c.mode)
	}
	if len(c.authz.policies) > 0 {
		b.WriteByte(3)
		b.WriteString(c.authz.key())
	}
	if c.intercepted {
		b.WriteByte(4)
	}
	if c.leds {
		b.WriteByte(5)
	}
	return classKey(b.String())
}

func sidecarSnapshot(mesh *ir.Mesh, c class) (*snapshot.Snapshot, error) {
	v := plainClusters
	if c.tls {
		v = sidecarTLS
	}
	b, err := derive(mesh, nsKey{c.namespace, v, c.intercepted, c.leds}, func() (*bundle, error) {
		return namespaceBundle(mesh, c.namespace, v, c.intercepted, c.leds)
	})
	if err != nil {
		return nil, err
	}
	in, err := inbound(mesh, c)
	if err != nil {
		return nil, err
	}
	sets := b.sets()
	if sets[snapshot.StalenessType], err = stalenessSet(mesh, c.staleness); err != nil {
		return nil, err
	}
	if len(in.clusters) > 0 {
		// The shared maps are never written; the inbound pieces go into copies
		// of the two types they add to. Inbound clusters depend only on target
		// ports and protocols, which many classes of a namespace have in
		// common, so the (large) merged cluster set is shared between them.
		names := ir.SortedKeys(in.clusters)
		var sig strings.Builder
		sig.WriteString(c.namespace)
		sig.WriteByte(byte(v))
		if c.intercepted { // its bundle has the passthrough clusters
			sig.WriteByte(0xff)
		}
		if c.leds { // the same clusters; kept apart so the key says what the bundle is
			sig.WriteByte(0xfe)
		}
		for _, n := range names {
			sig.WriteByte(0)
			sig.WriteString(n)
			sig.WriteByte(0)
			sig.WriteString(in.clusters[n].Version)
		}
		cs, err := derive(mesh, clusterSetKey(sig.String()), func() (snapshot.Set, error) {
			return snapshot.NewSet(merged(b.clusters.Resources, in.clusters)), nil
		})
		if err != nil {
			return nil, err
		}
		sets[snapshot.ClusterType] = cs
		sets[snapshot.ListenerType] = snapshot.NewSet(merged(b.listeners.Resources, in.listeners))
	}
	return snapshot.FromSets(mesh.Revision, sets), nil
}

// Memo keys, one type per kind of derived value.
type (
	meshKey     struct{ v clusterVariant }
	meshSnapKey struct{ v clusterVariant }
	nsKey       struct {
		ns          string
		v           clusterVariant
		intercepted bool
		leds        bool
	}
	ledsAllKey    struct{}
	allKey        struct{ v clusterVariant }
	clusterSetKey string // namespace, variant, interception and inbound clusters (name, version)
)

// clusterVariant is which form of the outbound clusters a node gets.
type clusterVariant uint8

const (
	plainClusters     clusterVariant = iota // no TLS (a node without identity)
	sidecarTLS                              // Weft sidecar with identity: SDS roots, typed SANs
	proxylessPlain                          // grpc-go without identity: RANDOM as ROUND_ROBIN
	proxylessTLSCerts                       // grpc-go with identity: certificate-provider roots
)

func derive[T any](mesh *ir.Mesh, key any, build func() (T, error)) (T, error) {
	v, err := mesh.Derive(key, func() (any, error) { return build() })
	if err != nil {
		var zero T
		return zero, err
	}
	return v.(T), nil
}

// bundle is one set of marshalled resources per type; immutable once sealed.
// lbEndpoints is set (hasLEDS) for a LEDS node's bundle only: a node without
// LEDS gets no LbEndpoint type at all.
type bundle struct {
	clusters, endpoints, listeners, routes snapshot.Set
	lbEndpoints                            snapshot.Set
	hasLEDS                                bool
}

// builder collects a bundle's resources.
type builder map[string]map[string]snapshot.Resource

func newBuilder() builder {
	return builder{
		snapshot.ClusterType:  {},
		snapshot.EndpointType: {},
		snapshot.ListenerType: {},
		snapshot.RouteType:    {},
	}
}

func (b builder) add(typ, name string, m proto.Message) error {
	r, err := snapshot.NewResource(typ, name, m)
	if err != nil {
		return err
	}
	b[typ][name] = r
	return nil
}

// seal hashes each type once.
func (b builder) seal() *bundle {
	return &bundle{
		clusters:  snapshot.NewSet(b[snapshot.ClusterType]),
		endpoints: snapshot.NewSet(b[snapshot.EndpointType]),
		listeners: snapshot.NewSet(b[snapshot.ListenerType]),
		routes:    snapshot.NewSet(b[snapshot.RouteType]),
	}
}

// sets returns a fresh outer map over the bundle's (shared) sets.
func (b *bundle) sets() map[string]snapshot.Set {
	m := map[string]snapshot.Set{
		snapshot.ClusterType:  b.clusters,
		snapshot.EndpointType: b.endpoints,
		snapshot.ListenerType: b.listeners,
		snapshot.RouteType:    b.routes,
	}
	if b.hasLEDS {
		m[snapshot.LbEndpointType] = b.lbEndpoints
	}
	return m
}

func merged(a, b map[string]snapshot.Resource) map[string]snapshot.Resource {
	out := make(map[string]snapshot.Resource, len(a)+len(b))
	maps.Copy(out, a)
	maps.Copy(out, b)
	return out
}

// shared is every outbound cluster and its assignment, marshalled once per mesh
// and reused by every bundle.
type shared struct {
	clusters  map[string]snapshot.Resource
	endpoints map[string]snapshot.Resource
}

func sharedClusters(mesh *ir.Mesh, v clusterVariant) (*shared, error) {
	return derive(mesh, allKey{v}, func() (*shared, error) {
		s := &shared{clusters: make(map[string]snapshot.Resource, len(mesh.Clusters)), endpoints: make(map[string]snapshot.Resource, len(mesh.Clusters))}
		for _, c := range mesh.Clusters {
			w, err := clusterWireOf(c, v)
			if err != nil {
				return nil, err
			}
			s.clusters[c.Name], s.endpoints[c.Name] = w.cluster, w.endpoints
		}
		return s, nil
	})
}

// clusterWire is one cluster's marshalled Cluster and ClusterLoadAssignment.
type clusterWire struct{ cluster, endpoints snapshot.Resource }

// ledsWire is one cluster's assignment in LEDS form and its LbEndpoint
// resources by name.
type ledsWire struct {
	assignment snapshot.Resource
	endpoints  map[string]snapshot.Resource
}

type ledsWireKey struct{}

// ledsWireOf marshals c's LEDS form once per *ir.Cluster (carried from mesh
// to mesh with it while unchanged). A changed cluster is marshalled anew, its
// unchanged endpoints too: a few milliseconds for 2,000.
func ledsWireOf(c *ir.Cluster) (ledsWire, error) {
	w, err := c.Derive(ledsWireKey{}, func() (any, error) {
		cla, eps, err := ledsAssignment(c)
		if err != nil {
			return nil, err
		}
		ar, err := snapshot.NewResource(snapshot.EndpointType, c.Name, cla)
		if err != nil {
			return nil, err
		}
		out := ledsWire{assignment: ar, endpoints: make(map[string]snapshot.Resource, len(eps))}
		for name, ep := range eps {
			if out.endpoints[name], err = snapshot.NewResource(snapshot.LbEndpointType, name, ep); err != nil {
				return nil, err
			}
		}
		return out, nil
	})
	if err != nil {
		return ledsWire{}, err
	}
	return w.(ledsWire), nil
}

// sharedLEDS is every cluster's LEDS wire, once per mesh.
func sharedLEDS(mesh *ir.Mesh) (map[string]ledsWire, error) {
	return derive(mesh, ledsAllKey{}, func() (map[string]ledsWire, error) {
		out := make(map[string]ledsWire, len(mesh.Clusters))
		for _, c := range mesh.Clusters {
			w, err := ledsWireOf(c)
			if err != nil {
				return nil, err
			}
			out[c.Name] = w
		}
		return out, nil
	})
}

type clusterWireKey struct{ v clusterVariant }

// clusterWireOf marshals c once per *ir.Cluster and variant: they depend on c
// alone, and compile carries unchanged clusters (and so this cache) from one
// mesh to the next. A variant whose cluster is the plain one shares its bytes.
func clusterWireOf(c *ir.Cluster, v clusterVariant) (clusterWire, error) {
	if v != plainClusters {
		cl := variantCluster(c, v)
		if cl == nil {
			return clusterWireOf(c, plainClusters)
		}
		plain, err := clusterWireOf(c, plainClusters)
		if err != nil {
			return clusterWire{}, err
		}
		w, err := c.Derive(clusterWireKey{v}, func() (any, error) {
			cr, err := snapshot.NewResource(snapshot.ClusterType, c.Name, cl)
			if err != nil {
				return nil, err
			}
			return clusterWire{cluster: cr, endpoints: plain.endpoints}, nil
		})
		if err != nil {
			return clusterWire{}, err
		}
		return w.(clusterWire), nil
	}
	w, err := c.Derive(clusterWireKey{plainClusters}, func() (any, error) {
		cr, err := snapshot.NewResource(snapshot.ClusterType, c.Name, outboundCluster(c, false))
		if err != nil {
			return nil, err
		}
		er, err := snapshot.NewResource(snapshot.EndpointType, c.Name, loadAssignment(c))
		if err != nil {
			return nil, err
		}
		return clusterWire{cluster: cr, endpoints: er}, nil
	})
	if err != nil {
		return clusterWire{}, err
	}
	return w.(clusterWire), nil
}

// variantCluster is c in variant v, or nil when that is the plain cluster.
func variantCluster(c *ir.Cluster, v clusterVariant) *clusterv3.Cluster {
	proxyless := v == proxylessPlain || v == proxylessTLSCerts
	var ts *corev3.TransportSocket
	switch v {
	case sidecarTLS:
		ts = sidecarUpstreamTLS(c)
	case proxylessTLSCerts:
		ts = proxylessUpstreamTLS(c)
	}
	if ts == nil && !(proxyless && c.Policy.LB == ir.LBRandom) {
		return nil
	}
	out := outboundCluster(c, proxyless)
	out.TransportSocket = ts
	return out
}

// wholeMesh is what a client without Weft metadata can subscribe to: every
// cluster and assignment, and an api_listener plus route configuration per
// HTTP-family service port.
func wholeMesh(mesh *ir.Mesh, v clusterVariant) (*bundle, error) {
	// grpc-go NACKs RANDOM; proxyless clients get ROUND_ROBIN instead.
	sh, err := sharedClusters(mesh, v)
	if err != nil {
		return nil, err
	}
	b := newBuilder()
	maps.Copy(b[snapshot.EndpointType], sh.endpoints)
	maps.Copy(b[snapshot.ClusterType], sh.clusters)
	for _, svc := range mesh.Services {
		for _, p := range svc.Ports {
			if !p.Protocol.IsHTTP() {
				continue
			}
			name := APIListenerName(svc.Host, p.Port)
			if err := b.add(snapshot.ListenerType, name, apiListener(name)); err != nil {
				return nil, err
			}
			rc := routeConfig(name, []vhostSpec{{svc: svc, port: p, rules: p.Rules, shortNames: true}})
			if err := b.add(snapshot.RouteType, name, rc); err != nil {
				return nil, err
			}
		}
	}
	return b.seal(), nil
}

// namespaceBundle is everything a sidecar of namespace ns shares with the other
// sidecars of ns: its scope's clusters and assignments (in LEDS form with
// their LbEndpoint resources for withLEDS), the outbound listener and its
// route configurations.
func namespaceBundle(mesh *ir.Mesh, ns string, v clusterVariant, intercepted, withLEDS bool) (*bundle, error) {
	sh, err := sharedClusters(mesh, v)
	if err != nil {
		return nil, err
	}
	var lw map[string]ledsWire
	var lbEndpoints map[string]snapshot.Resource
	if withLEDS {
		if lw, err = sharedLEDS(mesh); err != nil {
			return nil, err
		}
		lbEndpoints = map[string]snapshot.Resource{}
	}
	b := newBuilder()
	scope := mesh.Scopes[ns]
	for _, svc := range scope {
		for _, p := range svc.Ports {
			for _, name := range append([]string{p.Cluster}, p.Subsets...) {
				b[snapshot.ClusterType][name] = sh.clusters[name]
				if !withLEDS {
					b[snapshot.EndpointType][name] = sh.endpoints[name]
					continue
				}
				w := lw[name]
				b[snapshot.EndpointType][name] = w.assignment
				maps.Copy(lbEndpoints, w.endpoints)
			}
		}
	}
	if err := addOutbound(b, mesh, ns, scope, intercepted); err != nil {
		return nil, err
	}
	out := b.seal()
	if withLEDS {
		out.lbEndpoints, out.hasLEDS = snapshot.NewSet(lbEndpoints), true
	}
	return out, nil
}

// addOutbound adds the outbound listener of namespace ns, its route
// configurations and (intercept) the passthrough clusters to b.
func addOutbound(b builder, mesh *ir.Mesh, ns string, scope []*ir.Service, intercept bool) error {
	if intercept {
		rs, err := passthroughResources()
		if err != nil {
			return err
		}
		for _, r := range rs {
			b[snapshot.ClusterType][r.Name] = r
		}
	}
	lis, rcs, err := outbound(mesh, ns, scope, intercept)
	if err != nil {
		return err
	}
	if lis != nil {
		if err := b.add(snapshot.ListenerType, lis.Name, lis); err != nil {
			return err
		}
	}
	for _, rc := range rcs {
		if err := b.add(snapshot.RouteType, rc.Name, rc); err != nil {
			return err
		}
	}
	return nil
}
