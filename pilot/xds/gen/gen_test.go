package gen

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"github.com/google/go-cmp/cmp"
	"github.com/weft-mesh/weft/bootstrap/node"
	"github.com/weft-mesh/weft/bootstrap/stalenesspb"
	"github.com/weft-mesh/weft/pilot/compile"
	"github.com/weft-mesh/weft/pilot/ir"
	"github.com/weft-mesh/weft/pilot/resource"
	"github.com/weft-mesh/weft/pilot/xds/snapshot"
	"google.golang.org/protobuf/proto"
)

func mustProxy(t testing.TB, m *ir.Mesh, n *node.Node) *snapshot.Snapshot {
	t.Helper()
	s, err := Proxy(m, n)
	if err != nil {
		t.Fatalf("Proxy(%s): %v", n.ID, err)
	}
	return s
}

func proxyByID(t testing.TB, ps []*node.Node, id string) *node.Node {
	t.Helper()
	for _, p := range ps {
		if p.ID == id {
			return p
		}
	}
	t.Fatalf("no proxy %s", id)
	return nil
}

func decode[T proto.Message](t testing.TB, s *snapshot.Snapshot, typ, name string, m T) T {
	t.Helper()
	r, ok := s.Resources[typ][name]
	if !ok {
		t.Fatalf("snapshot lacks %s %q; has %v", typ, name, s.Names(typ))
	}
	if err := r.Any.UnmarshalTo(m); err != nil {
		t.Fatal(err)
	}
	return m
}

func TestProxyArguments(t *testing.T) {
	tests := []struct {
		name string
		mesh *ir.Mesh
		node *node.Node
		want string
	}{
		{"nil mesh", nil, &node.Node{ID: "x"}, "gen: mesh is nil"},
		{"nil node", &ir.Mesh{}, nil, "gen: node is nil"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Proxy(tt.mesh, tt.node)
			if err == nil || err.Error() != tt.want {
				t.Errorf("err = %v, want %q", err, tt.want)
			}
		})
	}
}

// TestEmptyMesh: a hand-built, empty mesh gives every kind of node an empty,
// consistent snapshot, except that a sidecar always gets its (here empty)
// staleness policy.
func TestEmptyMesh(t *testing.T) {
	m := &ir.Mesh{Revision: 4}
	m.Index()
	for _, n := range []*node.Node{{ID: "proxyless"}, {ID: "sidecar", Namespace: "a", Address: "10.0.0.1"}} {
		s := mustProxy(t, m, n)
		if s.Revision != 4 {
			t.Errorf("%s: revision %d", n.ID, s.Revision)
		}
		for _, typ := range snapshot.PushOrder {
			if typ == snapshot.StalenessType && n.Registers() {
				if r, ok := s.Resources[typ][stalenesspb.Name]; len(s.Resources[typ]) != 1 || !ok || len(r.Any.GetValue()) != 0 {
					t.Errorf("%s: staleness %v, want one empty policy", n.ID, s.Names(typ))
				}
				continue
			}
			if len(s.Resources[typ]) != 0 {
				t.Errorf("%s: %s not empty: %v", n.ID, typ, s.Names(typ))
			}
		}
	}
}

// TestGRPCShapes checks, against the golden grpc input, the rules grpc-go v1.85
// enforces (research/xds-peers.md §1.2): what a proxyless client reads must not
// be NACKed or silently ignored.
func TestGRPCShapes(t *testing.T) {
	m, ps := meshFromFile(t, "testdata/grpc.input.yaml")
	s := mustProxy(t, m, proxyByID(t, ps, "grpc-client"))
	const host = "greeter.rpc.svc.cluster.local:50051"
	lis := decode(t, s, snapshot.ListenerType, host, &listenerv3.Listener{})
	h := &hcmv3.HttpConnectionManager{}
	if err := lis.GetApiListener().GetApiListener().UnmarshalTo(h); err != nil {
		t.Fatalf("api_listener: %v", err)
	}
	if h.GetRds().GetConfigSource().GetAds() == nil || h.GetRds().GetRouteConfigName() != host {
		t.Errorf("api_listener must use RDS over ADS named %s: %v", host, h.GetRds())
	}
	if f := h.GetHttpFilters(); len(f) == 0 || f[len(f)-1].GetTypedConfig().GetTypeUrl() != "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router" {
		t.Errorf("last http filter must be the router: %v", f)
	}
	rc := decode(t, s, snapshot.RouteType, host, &routev3.RouteConfiguration{})
	if vh := rc.GetVirtualHosts(); len(vh) != 1 || !contains(vh[0].GetDomains(), host) {
		t.Fatalf("virtual host must match the channel authority %s: %v", host, vh)
	}
	r := rc.GetVirtualHosts()[0].GetRoutes()[0]
	if r.GetMatch().GetPrefix() != "/" {
		t.Errorf("route needs a path specifier: %v", r.GetMatch())
	}
	ra := r.GetRoute()
	if got := ra.GetMaxStreamDuration().GetMaxStreamDuration().AsDuration().String(); got != "3s" {
		t.Errorf("gRPC timeout must be max_stream_duration 3s, got %s", got)
	}
	if rp := ra.GetRetryPolicy(); rp.GetNumRetries().GetValue() < 1 || !strings.Contains(rp.GetRetryOn(), "unavailable") {
		t.Errorf("gRPC retry policy must have num_retries >= 1 and a gRPC status: %v", rp)
	}
	cl := decode(t, s, snapshot.ClusterType, ra.GetCluster(), &clusterv3.Cluster{})
	if cl.GetType() != clusterv3.Cluster_EDS || cl.GetEdsClusterConfig().GetEdsConfig().GetAds() == nil {
		t.Errorf("cluster must be EDS over ADS: %v", cl)
	}
	if cl.GetLbPolicy() != clusterv3.Cluster_ROUND_ROBIN {
		t.Errorf("RANDOM must reach grpc-go as ROUND_ROBIN, got %v", cl.GetLbPolicy())
	}
	if cl.GetCircuitBreakers().GetThresholds()[0].GetMaxRequests().GetValue() != 500 {
		t.Errorf("max_requests: %v", cl.GetCircuitBreakers())
	}
	cla := decode(t, s, snapshot.EndpointType, cl.GetName(), &endpointv3.ClusterLoadAssignment{})
	seen := map[string]bool{}
	for _, loc := range cla.GetEndpoints() {
		if loc.GetLocality() == nil || loc.GetLoadBalancingWeight().GetValue() == 0 || loc.GetPriority() != 0 {
			t.Errorf("locality needs an ID and a non-zero weight: %v", loc)
		}
		for _, ep := range loc.GetLbEndpoints() {
			a := ep.GetEndpoint().GetAddress().GetSocketAddress()
			key := fmt.Sprintf("%s:%d", a.GetAddress(), a.GetPortValue())
			if seen[key] {
				t.Errorf("duplicate endpoint %s", key)
			}
			seen[key] = true
			if w := ep.GetLoadBalancingWeight(); w != nil && w.GetValue() == 0 {
				t.Errorf("endpoint weight 0: %v", ep)
			}
		}
	}
	if len(seen) != 3 { // two Workloads and the registered greeter sidecar
		t.Errorf("want 3 endpoints, got %d", len(seen))
	}

	// The sidecar of the same mesh keeps RANDOM (Envoy and our sidecar accept it).
	side := mustProxy(t, m, proxyByID(t, ps, "greeter-sidecar"))
	if got := decode(t, side, snapshot.ClusterType, cl.GetName(), &clusterv3.Cluster{}).GetLbPolicy(); got != clusterv3.Cluster_RANDOM {
		t.Errorf("sidecar LB = %v, want RANDOM", got)
	}
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

func TestRetryOn(t *testing.T) {
	tests := []struct {
		tokens []string
		grpc   bool
		want   string
	}{
		{nil, false, "connect-failure,refused-stream"},
		{nil, true, "connect-failure,refused-stream,unavailable"},
		{[]string{"5xx"}, false, "5xx"},
		{[]string{"5xx"}, true, "5xx,unavailable"},
		{[]string{"retriable-4xx"}, true, "retriable-4xx"},
		{[]string{"gateway-error", "reset"}, true, "gateway-error,reset,unavailable"},
		{[]string{"cancelled", "deadline-exceeded", "resource-exhausted", "unavailable"}, true, "cancelled,deadline-exceeded,resource-exhausted,unavailable"},
		{[]string{"5xx", "unavailable"}, true, "5xx,unavailable"},
		{[]string{"resource-exhausted"}, false, "resource-exhausted"},
	}
	for _, tt := range tests {
		if got := retryOn(tt.tokens, tt.grpc); got != tt.want {
			t.Errorf("retryOn(%v, grpc=%v) = %q, want %q", tt.tokens, tt.grpc, got, tt.want)
		}
	}
}

func TestDomains(t *testing.T) {
	svc := &ir.Service{Namespace: "shop", Name: "reviews", Host: "reviews.shop.svc.cluster.local"}
	tests := []struct {
		short bool
		want  []string
	}{
		{true, []string{"reviews", "reviews:9080", "reviews.shop", "reviews.shop:9080", "reviews.shop.svc", "reviews.shop.svc:9080", "reviews.shop.svc.cluster.local", "reviews.shop.svc.cluster.local:9080"}},
		{false, []string{"reviews.shop", "reviews.shop:9080", "reviews.shop.svc", "reviews.shop.svc:9080", "reviews.shop.svc.cluster.local", "reviews.shop.svc.cluster.local:9080"}},
	}
	for _, tt := range tests {
		if diff := cmp.Diff(tt.want, domains(svc, 9080, tt.short)); diff != "" {
			t.Errorf("short=%v (-want +got):\n%s", tt.short, diff)
		}
	}
}

// TestScopeAndSharing: sidecars of one namespace share every resource except
// their inbound pieces (same *anypb.Any, so 10,000 proxies do not hold 10,000
// copies), and a sidecar never gets a service outside its scope.
func TestScopeAndSharing(t *testing.T) {
	m, ps := meshFromFile(t, "testdata/scoping.input.yaml")
	web := mustProxy(t, m, proxyByID(t, ps, "web-1"))
	store := mustProxy(t, m, proxyByID(t, ps, "store-1"))
	want := map[string][]string{
		"web-1": {"inbound|80||", "outbound|80||frontend.web.svc.cluster.local", "outbound|80||gateway.api.svc.cluster.local", "outbound|80||inventory.store.svc.cluster.local"},
		// store-1 backs inventory: its inbound cluster is per node.
		"store-1": {"inbound|80||", "outbound|80||inventory.store.svc.cluster.local", "outbound|80||secret.store.svc.cluster.local"},
	}
	for id, s := range map[string]*snapshot.Snapshot{"web-1": web, "store-1": store} {
		if diff := cmp.Diff(want[id], s.Names(snapshot.ClusterType)); diff != "" {
			t.Errorf("%s clusters (-want +got):\n%s", id, diff)
		}
	}
	// A second web sidecar shares the namespace bundle.
	web2 := mustProxy(t, m, &node.Node{ID: "web-2", Namespace: "web", Address: "10.3.0.9", Labels: map[string]string{"app": "other"}})
	for _, typ := range []string{snapshot.ClusterType, snapshot.EndpointType, snapshot.RouteType} {
		for name, r := range web.Resources[typ] {
			if strings.HasPrefix(name, "inbound|") {
				continue // per node
			}
			if web2.Resources[typ][name].Any != r.Any {
				t.Errorf("%s %s not shared between sidecars of one namespace", typ, name)
			}
		}
	}
	web3 := mustProxy(t, m, &node.Node{ID: "web-3", Namespace: "web", Address: "10.3.0.10"})
	for _, typ := range snapshot.PushOrder {
		if web2.Version(typ) != web3.Version(typ) {
			t.Errorf("%s: same scope and no inbound, different versions", typ)
		}
	}
	// web-1 backs frontend (inbound listener); web-2 backs nothing.
	if diff := cmp.Diff([]string{"inbound", "outbound"}, web.Names(snapshot.ListenerType)); diff != "" {
		t.Errorf("web-1 listeners (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"outbound"}, web2.Names(snapshot.ListenerType)); diff != "" {
		t.Errorf("web-2 listeners (-want +got):\n%s", diff)
	}
}

// TestInboundIsOwnNamespaceOnly: a sidecar whose labels match a Service of
// another namespace gets no inbound chain for it and is no endpoint of it.
func TestInboundIsOwnNamespaceOnly(t *testing.T) {
	m, ps := meshFromFile(t, "testdata/sidecar-endpoints.input.yaml")
	intruder := mustProxy(t, m, proxyByID(t, ps, "intruder"))
	if n := len(intruder.Resources[snapshot.ListenerType]); n != 0 {
		t.Errorf("intruder got listeners %v", intruder.Names(snapshot.ListenerType))
	}
	for _, c := range m.Clusters {
		for _, ep := range c.Endpoints {
			if ep.Source == "sidecar/intruder" {
				t.Errorf("intruder is an endpoint of %s", c.Name)
			}
		}
	}
	r2 := mustProxy(t, m, proxyByID(t, ps, "reviews-2"))
	lis := decode(t, r2, snapshot.ListenerType, InboundListenerName, &listenerv3.Listener{})
	if got := lis.GetAddress().GetSocketAddress().GetPortValue(); got != 16006 {
		t.Errorf("inbound port = %d, want the node's 16006", got)
	}
	var ports []uint32
	for _, fc := range lis.GetFilterChains() {
		ports = append(ports, fc.GetFilterChainMatch().GetDestinationPort().GetValue())
	}
	if diff := cmp.Diff([]uint32{7000, 8080, 9090}, ports); diff != "" {
		t.Errorf("inbound chains by target port (-want +got):\n%s", diff)
	}
}

func TestConsistentDetects(t *testing.T) {
	lis := &listenerv3.Listener{Name: "l", ApiListener: &listenerv3.ApiListener{ApiListener: mustAny(rdsHCM("l", "missing-rc"))}}
	lis2 := &listenerv3.Listener{Name: "l2", FilterChains: []*listenerv3.FilterChain{{Name: "a", FilterChainMatch: portMatch(80)}, {Name: "b", FilterChainMatch: portMatch(80)}}}
	rc := &routev3.RouteConfiguration{Name: "rc", VirtualHosts: []*routev3.VirtualHost{{Name: "w", Domains: []string{"x"}}, {Name: "v", Domains: []string{"*", "x"}, Routes: []*routev3.Route{{
		Match:    &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}},
		Action:   &routev3.Route_Route{Route: &routev3.RouteAction{ClusterSpecifier: &routev3.RouteAction_Cluster{Cluster: "missing-cluster"}}},
		Metadata: fallbackMetadata([]string{"missing-fallback"}),
	}}}}}
	cl := outboundCluster(&ir.Cluster{Name: "c", Policy: ir.ClusterPolicy{LB: ir.LBRoundRobin}}, false)
	s, err := snapshot.New(1, map[string]map[string]proto.Message{
		snapshot.ListenerType: {"l": lis, "l2": lis2},
		snapshot.RouteType:    {"rc": rc, "renamed": &routev3.RouteConfiguration{Name: "other"}},
		snapshot.ClusterType:  {"c": cl},
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		`listener l references route configuration "missing-rc", which the snapshot lacks`,
		`route configuration rc references cluster "missing-cluster", which the snapshot lacks`,
		`route configuration rc fallback references cluster "missing-fallback", which the snapshot lacks`,
		`route configuration "renamed": carries name "other"`,
		`EDS cluster "c" has no ClusterLoadAssignment "c"`,
		`route configuration rc: domain "x" is in virtual hosts "w" and "v"`,
		`listener l2: filter chains "a" and "b" have the same match`,
	}
	err = Consistent(s)
	if err == nil {
		t.Fatal("Consistent accepted a broken snapshot")
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("Consistent error lacks %q; got:\n%v", w, err)
		}
	}
}

// TestDeterministicAcrossMeshes: compiling the same input twice gives byte-equal
// snapshots (versions are content hashes, so equal inputs must not cause pushes).
func TestDeterministicAcrossMeshes(t *testing.T) {
	for _, in := range []string{"testdata/weighted.input.yaml", "testdata/sidecar-endpoints.input.yaml"} {
		m1, ps := meshFromFile(t, in)
		m2, _ := meshFromFile(t, in)
		for _, p := range ps {
			a, b := mustProxy(t, m1, p), mustProxy(t, m2, p)
			for _, typ := range snapshot.PushOrder {
				if a.Version(typ) != b.Version(typ) {
					t.Errorf("%s %s: version %s vs %s", in, p.ID, a.Version(typ), b.Version(typ))
				}
			}
		}
	}
}

// TestScopeKey: nodes with equal ScopeKey get the same snapshot; nodes whose
// keys differ in what Proxy reads may not.
func TestScopeKey(t *testing.T) {
	m, _ := meshFromFile(t, "testdata/sidecar-endpoints.input.yaml")
	app := map[string]string{"app": "reviews"}
	base := &node.Node{ID: "a", Namespace: "shop", Address: "10.1.0.1", Labels: app}
	same := []*node.Node{
		{ID: "b", Namespace: "shop", Address: "10.1.0.2", Labels: map[string]string{"app": "reviews"}, ServiceAccount: "x", Locality: node.Locality{Region: "r"}},
		{ID: "c", Namespace: "shop", Address: "10.1.0.3", Labels: app, InboundPort: InboundPort},
	}
	different := []*node.Node{
		{ID: "d", Namespace: "shop", Address: "10.1.0.4", Labels: app, InboundPort: 16006},
		{ID: "e", Namespace: "other", Address: "10.1.0.5", Labels: app},
		{ID: "f", Namespace: "shop", Address: "10.1.0.6", Labels: map[string]string{"app": "x"}},
		{ID: "g"},
		{ID: "h", Namespace: "shop", Address: "10.1.0.7", Labels: app, Identity: "spiffe://cluster.local/ns/shop/sa/default"},
		{ID: "i", Namespace: "shop", Address: "10.1.0.1", Labels: app, Proxyless: true},
		{ID: "j", Namespace: "shop", Address: "10.1.0.1", Labels: app, Interception: node.InterceptionIPTables},
	}
	// iptables and eBPF interception read the same wire.
	if a, b := (&node.Node{ID: "k", Namespace: "shop", Address: "10.1.0.1", Labels: app, Interception: node.InterceptionIPTables}),
		(&node.Node{ID: "l", Namespace: "shop", Address: "10.1.0.2", Labels: app, Interception: node.InterceptionEBPF}); ScopeKey(a) != ScopeKey(b) {
		t.Errorf("iptables and ebpf keys differ: %q, %q", ScopeKey(a), ScopeKey(b))
	}
	want := mustProxy(t, m, base)
	for _, n := range same {
		if ScopeKey(n) != ScopeKey(base) {
			t.Errorf("%s: key %q, want %q", n.ID, ScopeKey(n), ScopeKey(base))
		}
		got := mustProxy(t, m, n)
		for _, typ := range snapshot.PushOrder {
			if got.Version(typ) != want.Version(typ) {
				t.Errorf("%s: same key, different %s", n.ID, typ)
			}
		}
	}
	for _, n := range different {
		if ScopeKey(n) == ScopeKey(base) {
			t.Errorf("%s: same key as base", n.ID)
		}
	}
	if ScopeKey(&node.Node{ID: "x"}) != ScopeKey(&node.Node{ID: "y", Labels: app}) {
		t.Errorf("non-registering nodes must share a key")
	}
	// Sidecars with an identity share a key whichever identity (it decides TLS,
	// not its contents); proxyless nodes split by identity and by address
	// (server listeners).
	idA := &node.Node{ID: "ia", Namespace: "shop", Address: "10.1.0.8", Labels: app, Identity: "spiffe://cluster.local/ns/shop/sa/a"}
	idB := &node.Node{ID: "ib", Namespace: "shop", Address: "10.1.0.9", Labels: app, Identity: "spiffe://cluster.local/ns/shop/sa/b"}
	if ScopeKey(idA) != ScopeKey(idB) {
		t.Errorf("sidecars with identities: keys %q and %q differ", ScopeKey(idA), ScopeKey(idB))
	}
	for _, typ := range snapshot.PushOrder {
		if mustProxy(t, m, idA).Version(typ) != mustProxy(t, m, idB).Version(typ) {
			t.Errorf("sidecars with identities: same key, different %s", typ)
		}
	}
	plain, tls := &node.Node{ID: "p"}, &node.Node{ID: "q", Identity: "spiffe://cluster.local/ns/shop/sa/c"}
	srv := &node.Node{ID: "r", Address: "10.0.0.1", Identity: "spiffe://cluster.local/ns/shop/sa/c", Proxyless: true}
	if ScopeKey(plain) == ScopeKey(tls) || ScopeKey(tls) == ScopeKey(srv) {
		t.Errorf("proxyless keys: plain %q, identity %q, server %q: want all different", ScopeKey(plain), ScopeKey(tls), ScopeKey(srv))
	}
}

// TestPreviousReusesWire: a mesh compiled with Previous gives the same
// snapshots as one compiled without, and the clusters it carried over reuse
// their marshalled resources (same *anypb.Any), so an endpoint change costs one
// cluster's marshalling.
func TestPreviousReusesWire(t *testing.T) {
	in, proxies := loadInput(t, "testdata/weighted.input.yaml")
	m1, err := compile.Compile(in)
	if err != nil {
		t.Fatal(err)
	}
	p := proxyByID(t, proxies, "productpage-1")
	s1 := mustProxy(t, m1, p)

	// Move reviews-v2 to a new address.
	in2 := in
	in2.Objects = slices.Clone(in.Objects)
	for i, o := range in2.Objects {
		if o.Metadata.Name == "reviews-v2" {
			w := *o.Spec.(*resource.WorkloadSpec)
			w.Address = "10.0.0.99"
			moved := *o
			moved.Spec = &w
			in2.Objects[i] = &moved
		}
	}
	in2.Revision, in2.Previous = 2, m1
	m2, err := compile.Compile(in2)
	if err != nil {
		t.Fatal(err)
	}
	in2.Previous = nil
	fresh, err := compile.Compile(in2)
	if err != nil {
		t.Fatal(err)
	}
	s2, sFresh := mustProxy(t, m2, p), mustProxy(t, fresh, p)
	for _, typ := range snapshot.PushOrder {
		if s2.Version(typ) != sFresh.Version(typ) {
			t.Errorf("%s: version with Previous %s, without %s", typ, s2.Version(typ), sFresh.Version(typ))
		}
	}
	changed := map[string]bool{
		"outbound|9080||reviews.shop.svc.cluster.local":   true,
		"outbound|9080|v2|reviews.shop.svc.cluster.local": true,
	}
	for _, typ := range []string{snapshot.ClusterType, snapshot.EndpointType} {
		for name, r := range s2.Resources[typ] {
			shared := s1.Resources[typ][name].Any == r.Any
			if typ == snapshot.EndpointType && shared == changed[name] {
				t.Errorf("%s %s: shared with revision 1 = %v, want %v", typ, name, shared, !changed[name])
			}
			if typ == snapshot.ClusterType && !changed[name] && !shared {
				t.Errorf("%s %s: unchanged cluster re-marshalled", typ, name)
			}
		}
	}
}
