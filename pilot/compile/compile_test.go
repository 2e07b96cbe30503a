package compile

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/weft-mesh/weft/bootstrap/node"
	"github.com/weft-mesh/weft/pilot/ir"
	"github.com/weft-mesh/weft/pilot/resource"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// ---- object builders (keyed, so each test shows only what matters) ----

func obj(kind, ns, name string, labels map[string]string, spec any) *resource.Object {
	return &resource.Object{APIVersion: resource.APIVersion, Kind: kind,
		Metadata: resource.Metadata{Name: name, Namespace: ns, Labels: labels}, Spec: spec}
}

func service(ns, name string, sel map[string]string, ports ...resource.ServicePort) *resource.Object {
	return obj(resource.KindService, ns, name, nil, &resource.ServiceSpec{Selector: sel, Ports: ports})
}

func httpPort(p int32) resource.ServicePort {
	return resource.ServicePort{Name: "http", Port: p}
}

func workload(ns, name, addr string, labels map[string]string) *resource.Object {
	return obj(resource.KindWorkload, ns, name, labels, &resource.WorkloadSpec{Address: addr})
}

func policy(ns, name, svc string, subsets ...resource.Subset) *resource.Object {
	return obj(resource.KindDestinationPolicy, ns, name, nil, &resource.DestinationPolicySpec{Service: svc, Subsets: subsets})
}

func route(ns, name string, hosts []string, rules ...resource.HTTPRoute) *resource.Object {
	return obj(resource.KindRoute, ns, name, nil, &resource.RouteSpec{Hosts: hosts, HTTP: rules})
}

func to(svc, subset string, port, weight int32) resource.RouteDestination {
	return resource.RouteDestination{Destination: resource.Destination{Service: svc, Subset: subset, Port: port}, Weight: weight}
}

func str(s string) *string { return &s }

func sidecar(id, ns, addr string, labels map[string]string) *node.Node {
	return &node.Node{ID: id, Namespace: ns, ServiceAccount: "sa-" + id, Address: addr, Labels: labels}
}

func mustCompile(t *testing.T, in Input) *ir.Mesh {
	t.Helper()
	m, err := Compile(in)
	if err != nil {
		t.Fatalf("Compile: %v", err)
	}
	return m
}

type epView struct {
	Addr   string
	Port   uint32
	SA     string
	Health ir.Health
	Source string
}

func endpointsOf(m *ir.Mesh, cluster string) []epView {
	c := m.Cluster(cluster)
	if c == nil {
		return nil
	}
	var out []epView
	for _, e := range c.Endpoints {
		out = append(out, epView{e.Address, e.Port, e.ServiceAccount, e.Health, e.Source})
	}
	return out
}

const reviews9080 = "outbound|9080||reviews.shop.svc.cluster.local"

func TestEndpoints(t *testing.T) {
	app := map[string]string{"app": "reviews"}
	tests := []struct {
		name    string
		objs    []*resource.Object
		proxies []*node.Node
		cluster string
		want    []epView
		warning string // substring of a warning that must be present
	}{
		{
			name:    "workloads matching the selector, targetPort defaults to port",
			objs:    []*resource.Object{service("shop", "reviews", app, httpPort(9080)), workload("shop", "r1", "10.0.0.2", app), workload("shop", "r0", "10.0.0.1", map[string]string{"app": "reviews", "v": "1"}), workload("shop", "other", "10.0.0.3", map[string]string{"app": "x"})},
			cluster: reviews9080,
			want: []epView{
				{"10.0.0.1", 9080, "default", ir.HealthUnknown, "Workload/shop/r0"},
				{"10.0.0.2", 9080, "default", ir.HealthUnknown, "Workload/shop/r1"},
			},
		},
		{
			name: "targetPort and workload port override by name",
			objs: []*resource.Object{
				service("shop", "reviews", app, resource.ServicePort{Name: "http", Port: 9080, TargetPort: 8080}),
				workload("shop", "a", "10.0.0.1", app),
				obj(resource.KindWorkload, "shop", "b", app, &resource.WorkloadSpec{Address: "10.0.0.2", Ports: map[string]int32{"http": 7070}}),
			},
			cluster: reviews9080,
			want: []epView{
				{"10.0.0.1", 8080, "default", ir.HealthUnknown, "Workload/shop/a"},
				{"10.0.0.2", 7070, "default", ir.HealthUnknown, "Workload/shop/b"},
			},
		},
		{
			name:    "workload in another namespace does not join",
			objs:    []*resource.Object{service("shop", "reviews", app, httpPort(9080)), workload("other", "r1", "10.0.0.2", app)},
			cluster: reviews9080,
			want:    nil,
		},
		{
			name:    "empty selector selects nothing",
			objs:    []*resource.Object{service("shop", "reviews", nil, httpPort(9080)), workload("shop", "r1", "10.0.0.2", app)},
			cluster: reviews9080,
			want:    nil,
		},
		{
			name:    "registered sidecar points at its inbound listener with its own identity",
			objs:    []*resource.Object{service("shop", "reviews", app, httpPort(9080))},
			proxies: []*node.Node{sidecar("p1", "shop", "10.1.0.1", app), {ID: "p2", Namespace: "shop", Address: "10.1.0.2", InboundPort: 16006, Labels: app}},
			cluster: reviews9080,
			want: []epView{
				{"10.1.0.1", DefaultInboundPort, "sa-p1", ir.HealthHealthy, "sidecar/p1"},
				{"10.1.0.2", 16006, "default", ir.HealthHealthy, "sidecar/p2"},
			},
		},
		{
			name: "intercepted sidecar is address:targetPort, explicit one address:inboundPort",
			objs: []*resource.Object{service("shop", "reviews", app, resource.ServicePort{Name: "http", Port: 9080, TargetPort: 8080})},
			proxies: []*node.Node{
				{ID: "p1", Namespace: "shop", Address: "10.1.0.1", Labels: app, Interception: node.InterceptionIPTables},
				{ID: "p2", Namespace: "shop", Address: "10.1.0.2", InboundPort: 16006, Labels: app, Interception: node.InterceptionEBPF},
				{ID: "p3", Namespace: "shop", Address: "10.1.0.3", InboundPort: 16006, Labels: app},
			},
			cluster: reviews9080,
			want: []epView{
				{"10.1.0.1", 8080, "default", ir.HealthHealthy, "sidecar/p1"},
				{"10.1.0.2", 8080, "default", ir.HealthHealthy, "sidecar/p2"},
				{"10.1.0.3", 16006, "default", ir.HealthHealthy, "sidecar/p3"},
			},
		},
		{
			name:    "sidecar from another namespace cannot join even with matching labels",
			objs:    []*resource.Object{service("shop", "reviews", app, httpPort(9080))},
			proxies: []*node.Node{sidecar("evil", "attacker", "10.9.9.9", app)},
			cluster: reviews9080,
			want:    nil,
		},
		{
			name:    "node without registration (proxyless) is not an endpoint",
			objs:    []*resource.Object{service("shop", "reviews", app, httpPort(9080))},
			proxies: []*node.Node{{ID: "grpc-client", Labels: app}},
			cluster: reviews9080,
			want:    nil,
		},
		{
			name:    "invalid sidecar address is skipped with a warning",
			objs:    []*resource.Object{service("shop", "reviews", app, httpPort(9080))},
			proxies: []*node.Node{sidecar("bad", "shop", "not-an-ip", app)},
			cluster: reviews9080,
			want:    nil,
			warning: "sidecar bad: not registered",
		},
		{
			name:    "duplicate node id registers once",
			objs:    []*resource.Object{service("shop", "reviews", app, httpPort(9080))},
			proxies: []*node.Node{sidecar("p1", "shop", "10.1.0.1", app), sidecar("p1", "shop", "10.1.0.9", app)},
			cluster: reviews9080,
			want:    []epView{{"10.1.0.1", DefaultInboundPort, "sa-p1", ir.HealthHealthy, "sidecar/p1"}},
			warning: "sidecar p1: registered twice",
		},
		{
			name:    "duplicate address:port keeps the first",
			objs:    []*resource.Object{service("shop", "reviews", app, httpPort(9080)), workload("shop", "a", "10.0.0.1", app), workload("shop", "b", "10.0.0.1", app)},
			cluster: reviews9080,
			want:    []epView{{"10.0.0.1", 9080, "default", ir.HealthUnknown, "Workload/shop/a"}},
			warning: "Workload/shop/b has the same address 10.0.0.1:9080 as Workload/shop/a",
		},
		{
			name: "subset cluster narrows by labels",
			objs: []*resource.Object{
				service("shop", "reviews", app, httpPort(9080)),
				workload("shop", "v1", "10.0.0.1", map[string]string{"app": "reviews", "version": "v1"}),
				workload("shop", "v2", "10.0.0.2", map[string]string{"app": "reviews", "version": "v2"}),
				policy("shop", "reviews", "reviews", resource.Subset{Name: "v2", Labels: map[string]string{"version": "v2"}}),
			},
			cluster: "outbound|9080|v2|reviews.shop.svc.cluster.local",
			want:    []epView{{"10.0.0.2", 9080, "default", ir.HealthUnknown, "Workload/shop/v2"}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := mustCompile(t, Input{Revision: 7, Objects: tt.objs, Proxies: tt.proxies})
			if m.Cluster(tt.cluster) == nil {
				t.Fatalf("cluster %s missing; have %v", tt.cluster, clusterNames(m))
			}
			if diff := cmp.Diff(tt.want, endpointsOf(m, tt.cluster)); diff != "" {
				t.Errorf("endpoints (-want +got):\n%s", diff)
			}
			if tt.warning != "" && !hasWarning(m, tt.warning) {
				t.Errorf("warnings %q lack %q", m.Warnings, tt.warning)
			}
		})
	}
}

func clusterNames(m *ir.Mesh) []string {
	var out []string
	for _, c := range m.Clusters {
		out = append(out, c.Name)
	}
	return out
}

func hasWarning(m *ir.Mesh, sub string) bool {
	return slices.ContainsFunc(m.Warnings, func(w string) bool { return strings.Contains(w, sub) })
}

func TestSidecarEndpointCarriesNodeIdentity(t *testing.T) {
	app := map[string]string{"app": "reviews", "version": "v3"}
	n := &node.Node{ID: "p1", Namespace: "shop", ServiceAccount: "reviews", Address: "10.1.0.1", Labels: app,
		Locality: node.Locality{Region: "eu", Zone: "eu-1"}}
	m := mustCompile(t, Input{Objects: []*resource.Object{service("shop", "reviews", map[string]string{"app": "reviews"}, httpPort(9080))}, Proxies: []*node.Node{n}})
	want := []ir.Endpoint{{Address: "10.1.0.1", Port: DefaultInboundPort, Namespace: "shop", ServiceAccount: "reviews",
		Labels: app, Locality: ir.Locality{Region: "eu", Zone: "eu-1"}, Weight: 1, Health: ir.HealthHealthy, Source: "sidecar/p1", Sidecar: true}}
	if diff := cmp.Diff(want, m.Cluster(reviews9080).Endpoints); diff != "" {
		t.Errorf("endpoint (-want +got):\n%s", diff)
	}
}

func TestRoutes(t *testing.T) {
	app := map[string]string{"app": "reviews"}
	base := []*resource.Object{
		service("shop", "reviews", app, httpPort(9080)),
		service("shop", "backup", map[string]string{"app": "backup"}, httpPort(9080)),
		service("shop", "db", map[string]string{"app": "db"}, resource.ServicePort{Name: "pg", Port: 5432, Protocol: "TCP"}),
		policy("shop", "reviews", "reviews", resource.Subset{Name: "v1", Labels: map[string]string{"version": "v1"}}, resource.Subset{Name: "v2", Labels: map[string]string{"version": "v2"}}),
	}
	v1 := "outbound|9080|v1|reviews.shop.svc.cluster.local"
	v2 := "outbound|9080|v2|reviews.shop.svc.cluster.local"
	backup := "outbound|9080||backup.shop.svc.cluster.local"
	tests := []struct {
		name    string
		routes  []*resource.Object
		want    []*ir.Rule
		source  string
		warning string
	}{
		{
			name:   "no route: default",
			want:   nil,
			source: "",
		},
		{
			name: "weighted subsets, matches, timeout, retries, fallback",
			routes: []*resource.Object{route("shop", "reviews", []string{"reviews"}, resource.HTTPRoute{
				Name: "canary",
				Match: []resource.HTTPMatch{
					{Path: &resource.StringMatch{Prefix: str("/api")}, Headers: map[string]resource.StringMatch{"X-User": {Exact: str("jason")}, "a-first": {Regex: str("^x.*")}}, Method: "get"},
					{Path: &resource.StringMatch{Exact: str("/health")}},
				},
				Route:   []resource.RouteDestination{to("reviews", "v1", 9080, 90), to("reviews", "v2", 0, 10)},
				Timeout: "2s",
				Retries: &resource.RetryPolicy{Attempts: 3, PerTryTimeout: "500ms", RetryOn: []string{"reset", "5xx", "5xx"},
					Backoff: &resource.RetryBackoff{BaseInterval: "10ms", MaxInterval: "1s"}},
				Fallback: []resource.FallbackDestination{{Destination: resource.Destination{Service: "backup"}}},
			})},
			source: "shop/reviews",
			want: []*ir.Rule{{
				Name: "canary",
				Matches: []ir.Match{
					{Path: &ir.StringMatch{Kind: ir.MatchPrefix, Value: "/api"}, Method: "GET", Headers: []ir.HeaderMatch{
						{Name: "x-user", StringMatch: ir.StringMatch{Kind: ir.MatchExact, Value: "jason"}},
						{Name: "a-first", StringMatch: ir.StringMatch{Kind: ir.MatchRegex, Value: "^x.*"}},
					}},
					{Path: &ir.StringMatch{Kind: ir.MatchExact, Value: "/health"}},
				},
				Destinations: []ir.WeightedCluster{{Cluster: v1, Weight: 90}, {Cluster: v2, Weight: 10}},
				Timeout:      2 * time.Second,
				Retries: &ir.Retries{Attempts: 3, PerTryTimeout: 500 * time.Millisecond, RetryOn: []string{"5xx", "reset"},
					BackoffBase: 10 * time.Millisecond, BackoffMax: time.Second},
				Fallback: []string{backup},
			}},
		},
		{
			name: "single destination without weight gets 100; zero attempts means no retries",
			routes: []*resource.Object{route("shop", "r", []string{"reviews.shop"}, resource.HTTPRoute{
				Route: []resource.RouteDestination{to("backup", "", 0, 0)}, Retries: &resource.RetryPolicy{Attempts: 0},
			})},
			source: "shop/r",
			want:   []*ir.Rule{{Destinations: []ir.WeightedCluster{{Cluster: backup, Weight: 100}}}},
		},
		{
			name: "missing subset and TCP target are left out with warnings",
			routes: []*resource.Object{route("shop", "r", []string{"reviews"}, resource.HTTPRoute{
				Route: []resource.RouteDestination{to("reviews", "v9", 0, 50), to("db", "", 5432, 50)},
			})},
			source:  "shop/r",
			want:    []*ir.Rule{{}},
			warning: `has no subset "v9"`,
		},
		{
			name: "another namespace's route does not become the service's route",
			routes: []*resource.Object{
				route("aaa", "first", []string{"reviews.shop"}, resource.HTTPRoute{Route: []resource.RouteDestination{to("reviews.shop", "v1", 0, 100)}}),
				route("shop", "zzz", []string{"reviews"}, resource.HTTPRoute{Route: []resource.RouteDestination{to("reviews", "v2", 0, 100)}}),
			},
			source: "shop/zzz",
			want:   []*ir.Rule{{Destinations: []ir.WeightedCluster{{Cluster: v2, Weight: 100}}}},
		},
		{
			name: "destinations naming one cluster are merged; fallback deduplicated",
			routes: []*resource.Object{route("shop", "r", []string{"reviews"}, resource.HTTPRoute{
				Route:    []resource.RouteDestination{to("reviews", "v1", 9080, 30), to("reviews", "v2", 0, 40), to("reviews.shop", "v1", 0, 30)},
				Fallback: []resource.FallbackDestination{{Destination: resource.Destination{Service: "backup"}}, {Destination: resource.Destination{Service: "backup", Port: 9080}}},
			})},
			source: "shop/r",
			want: []*ir.Rule{{
				Destinations: []ir.WeightedCluster{{Cluster: v1, Weight: 60}, {Cluster: v2, Weight: 40}},
				Fallback:     []string{backup},
			}},
		},
		{
			name: "second route of the same namespace is ignored",
			routes: []*resource.Object{
				route("shop", "a", []string{"reviews"}, resource.HTTPRoute{Route: []resource.RouteDestination{to("reviews", "v1", 0, 100)}}),
				route("shop", "b", []string{"reviews"}, resource.HTTPRoute{Route: []resource.RouteDestination{to("reviews", "v2", 0, 100)}}),
			},
			source:  "shop/a",
			want:    []*ir.Rule{{Destinations: []ir.WeightedCluster{{Cluster: v1, Weight: 100}}}},
			warning: "Route/shop/b: ignored for Service shop/reviews: Route/shop/a already routes it for namespace shop",
		},
		{
			name: "host not found is a warning",
			routes: []*resource.Object{
				route("shop", "r", []string{"nope", "reviews"}, resource.HTTPRoute{Route: []resource.RouteDestination{to("reviews", "v1", 0, 100)}}),
			},
			source:  "shop/r",
			want:    []*ir.Rule{{Destinations: []ir.WeightedCluster{{Cluster: v1, Weight: 100}}}},
			warning: `Route/shop/r: spec.hosts[0]: Service "nope" not found`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := mustCompile(t, Input{Objects: append(slices.Clone(base), tt.routes...)})
			svc := m.Service("shop", "reviews")
			if svc.RouteSource != tt.source {
				t.Errorf("RouteSource = %q, want %q", svc.RouteSource, tt.source)
			}
			if diff := cmp.Diff(tt.want, svc.Ports[0].Rules); diff != "" {
				t.Errorf("rules (-want +got):\n%s", diff)
			}
			if tt.warning != "" && !hasWarning(m, tt.warning) {
				t.Errorf("warnings %q lack %q", m.Warnings, tt.warning)
			}
			if db := m.Service("shop", "db"); db.Ports[0].Rules != nil {
				t.Errorf("TCP port got rules: %v", db.Ports[0].Rules)
			}
		})
	}
}

// TestConsumerRoutes: a Route written in namespace aaa for shop/reviews shapes
// only aaa's traffic; shop's own Route (or the default) applies to everybody
// else, proxyless clients included.
func TestConsumerRoutes(t *testing.T) {
	app := map[string]string{"app": "reviews"}
	objs := []*resource.Object{
		service("shop", "reviews", app, httpPort(9080)),
		policy("shop", "reviews", "reviews", resource.Subset{Name: "v1", Labels: map[string]string{"version": "v1"}}, resource.Subset{Name: "v2", Labels: map[string]string{"version": "v2"}}),
		route("aaa", "mine", []string{"reviews.shop"}, resource.HTTPRoute{Route: []resource.RouteDestination{to("reviews.shop", "v1", 0, 100)}}),
		route("aaa", "zzz", []string{"reviews.shop"}, resource.HTTPRoute{Route: []resource.RouteDestination{to("reviews.shop", "v2", 0, 100)}}),
		route("shop", "own", []string{"reviews"}, resource.HTTPRoute{Route: []resource.RouteDestination{to("reviews", "v2", 0, 100)}}),
	}
	m := mustCompile(t, Input{Objects: objs})
	svc := m.Service("shop", "reviews")
	v1 := []*ir.Rule{{Destinations: []ir.WeightedCluster{{Cluster: "outbound|9080|v1|reviews.shop.svc.cluster.local", Weight: 100}}}}
	v2 := []*ir.Rule{{Destinations: []ir.WeightedCluster{{Cluster: "outbound|9080|v2|reviews.shop.svc.cluster.local", Weight: 100}}}}
	for _, tt := range []struct {
		ns   string
		want []*ir.Rule
	}{{"aaa", v1}, {"shop", v2}, {"other", v2}, {"", v2}} {
		if diff := cmp.Diff(tt.want, svc.RulesFor(tt.ns, svc.Ports[0])); diff != "" {
			t.Errorf("RulesFor(%q) (-want +got):\n%s", tt.ns, diff)
		}
	}
	if got := svc.Consumers["aaa"].Source; got != "aaa/mine" {
		t.Errorf("consumer source = %q", got)
	}
	if !hasWarning(m, "Route/aaa/zzz: ignored for Service shop/reviews: Route/aaa/mine already routes it for namespace aaa") {
		t.Errorf("warnings %q lack the conflict", m.Warnings)
	}
}

func TestPolicy(t *testing.T) {
	dp := obj(resource.KindDestinationPolicy, "shop", "reviews", nil, &resource.DestinationPolicySpec{
		Service:        "reviews",
		LoadBalancer:   "LEAST_REQUEST",
		ConnectionPool: &resource.ConnectionPool{MaxConnections: 100, MaxRequests: 1000, RetryBudget: &resource.RetryBudget{Percent: 20, MinConcurrency: 3}, ConnectTimeout: "1s"},
		OutlierDetection: &resource.OutlierDetection{Consecutive5xx: 5, Interval: "10s", BaseEjectionTime: "30s", MaxEjectionTimeJitter: "3s", MaxEjectionPercent: 10, MinHealthPercent: ptr(50.0),
			SuccessRate: &resource.SuccessRate{MinHosts: 5, RequestVolume: 100, StdevFactor: 1.9}},
		LocalRateLimit: &resource.LocalRateLimit{RequestsPerSecond: 100, Burst: 200, DryRun: true},
	})
	m := mustCompile(t, Input{Objects: []*resource.Object{service("shop", "reviews", nil, httpPort(9080)), dp, policy("shop", "second", "reviews")}})
	want := ir.ClusterPolicy{
		LB: ir.LBLeastRequest, ConnectTimeout: time.Second,
		Pool:      &ir.ConnectionPool{MaxConnections: 100, MaxRequests: 1000, RetryBudget: &ir.RetryBudget{Percent: 20, MinConcurrency: 3}},
		Outlier:   &ir.OutlierDetection{Consecutive5xx: 5, Interval: 10 * time.Second, BaseEjectionTime: 30 * time.Second, MaxEjectionTimeJitter: 3 * time.Second, MaxEjectionPercent: 10, MinHealthPercent: 50, SuccessRate: &ir.SuccessRate{MinHosts: 5, RequestVolume: 100, StdevFactor: 1.9}},
		RateLimit: &ir.LocalRateLimit{RequestsPerSecond: 100, Burst: 200, DryRun: true},
	}
	if diff := cmp.Diff(want, m.Cluster(reviews9080).Policy); diff != "" {
		t.Errorf("policy (-want +got):\n%s", diff)
	}
	if !hasWarning(m, "DestinationPolicy/shop/second: ignored: DestinationPolicy/shop/reviews already applies") {
		t.Errorf("warnings %q lack the conflict", m.Warnings)
	}
	// splitExternalLocalOriginErrors: absent follows consecutiveLocalOriginFailures;
	// explicit true stands alone.
	for _, tc := range []struct {
		od   resource.OutlierDetection
		want bool
	}{
		{resource.OutlierDetection{Consecutive5xx: 1}, false},
		{resource.OutlierDetection{ConsecutiveLocalOriginFailures: 1}, true},
		{resource.OutlierDetection{Consecutive5xx: 1, SplitExternalLocalOriginErrors: ptr(true)}, true},
		{resource.OutlierDetection{Consecutive5xx: 1, SplitExternalLocalOriginErrors: ptr(false)}, false},
	} {
		od := tc.od
		p := obj(resource.KindDestinationPolicy, "shop", "reviews", nil, &resource.DestinationPolicySpec{Service: "reviews", OutlierDetection: &od})
		m := mustCompile(t, Input{Objects: []*resource.Object{service("shop", "reviews", nil, httpPort(9080)), p}})
		if got := m.Cluster(reviews9080).Policy.Outlier.SplitExternalLocalOriginErrors; got != tc.want {
			t.Errorf("%+v: split = %v, want %v", tc.od, got, tc.want)
		}
	}
	// A service without policy gets the defaults.
	m = mustCompile(t, Input{Objects: []*resource.Object{service("shop", "reviews", nil, httpPort(9080))}})
	if diff := cmp.Diff(ir.ClusterPolicy{LB: ir.LBRoundRobin, ConnectTimeout: ir.DefaultConnectTimeout}, m.Cluster(reviews9080).Policy); diff != "" {
		t.Errorf("default policy (-want +got):\n%s", diff)
	}
}

func TestErrorsNameObjectAndField(t *testing.T) {
	tests := []struct {
		name string
		obj  *resource.Object
		want string
	}{
		{"bad protocol", service("shop", "s", nil, resource.ServicePort{Name: "x", Port: 80, Protocol: "UDP"}),
			`compile revision 3: Service/shop/s: spec.ports[0].protocol: unknown protocol "UDP" (want HTTP, HTTP2, GRPC or TCP)`},
		{"port out of range", service("shop", "s", nil, resource.ServicePort{Name: "x", Port: 70000}),
			`compile revision 3: Service/shop/s: spec.ports[0].port: 70000 out of range 1..65535`},
		{"duplicate port", service("shop", "s", nil, httpPort(80), httpPort(80)),
			`compile revision 3: Service/shop/s: spec.ports[1].port: duplicate port 80`},
		{"bad route timeout", route("shop", "r", nil, resource.HTTPRoute{Timeout: "soon"}),
			``}, // no host resolves, so the rule is never compiled: no error
		{"bad workload address", workload("shop", "w", "300.1.1.1", nil),
			`compile revision 3: Workload/shop/w: spec.address: "300.1.1.1" is not an IP literal`},
		{"bad workload weight", obj(resource.KindWorkload, "shop", "w", nil, &resource.WorkloadSpec{Address: "10.0.0.1", Weight: 500}),
			`compile revision 3: Workload/shop/w: spec.weight: 500 out of range 1..128`},
		{"bad lb", obj(resource.KindDestinationPolicy, "shop", "p", nil, &resource.DestinationPolicySpec{Service: "s", LoadBalancer: "FASTEST"}),
			`compile revision 3: DestinationPolicy/shop/p: spec.loadBalancer: unknown policy "FASTEST"`},
		{"bad outlier interval", obj(resource.KindDestinationPolicy, "shop", "p", nil, &resource.DestinationPolicySpec{Service: "s", OutlierDetection: &resource.OutlierDetection{Interval: "-1s"}}),
			`compile revision 3: DestinationPolicy/shop/p: spec.outlierDetection.interval: invalid duration "-1s"`},
		{"bad outlier jitter", obj(resource.KindDestinationPolicy, "shop", "p", nil, &resource.DestinationPolicySpec{Service: "s", OutlierDetection: &resource.OutlierDetection{MaxEjectionTimeJitter: "x"}}),
			`compile revision 3: DestinationPolicy/shop/p: spec.outlierDetection.maxEjectionTimeJitter: invalid duration "x"`},
		{"split false with local origin", obj(resource.KindDestinationPolicy, "shop", "p", nil, &resource.DestinationPolicySpec{Service: "s", OutlierDetection: &resource.OutlierDetection{ConsecutiveLocalOriginFailures: 2, SplitExternalLocalOriginErrors: ptr(false)}}),
			`compile revision 3: DestinationPolicy/shop/p: spec.outlierDetection.splitExternalLocalOriginErrors: false, but consecutiveLocalOriginFailures is set`},
		{"override without ttl", obj(resource.KindOverride, "shop", "o", nil, &resource.OverrideSpec{Action: "DENY"}),
			`compile revision 3: Override/shop/o: spec.ttl: required and must be > 0`},
		{"wrong spec type", obj(resource.KindService, "shop", "s", nil, &resource.RouteSpec{}),
			`compile revision 3: Service/shop/s: spec: want *resource.ServiceSpec, got *resource.RouteSpec`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Compile(Input{Revision: 3, Objects: []*resource.Object{tt.obj}})
			got := ""
			if err != nil {
				got = err.Error()
			}
			if got != tt.want {
				t.Errorf("error = %q\nwant    %q", got, tt.want)
			}
		})
	}
}

func TestScopes(t *testing.T) {
	objs := []*resource.Object{
		service("a", "front", map[string]string{"app": "front"}, httpPort(80)),
		service("b", "mid", map[string]string{"app": "mid"}, httpPort(80)),
		service("c", "back", map[string]string{"app": "back"}, httpPort(80)),
		service("d", "lonely", map[string]string{"app": "lonely"}, httpPort(80)),
		// a's Route sends front to b/mid; b's Route sends mid to c/back.
		route("a", "front", []string{"front"}, resource.HTTPRoute{Route: []resource.RouteDestination{to("mid.b", "", 0, 100)}}),
		route("b", "mid", []string{"mid"}, resource.HTTPRoute{Route: []resource.RouteDestination{to("back.c", "", 0, 100)}}),
	}
	m := mustCompile(t, Input{Objects: objs})
	names := func(ns string) []string {
		var out []string
		for _, s := range m.Scopes[ns] {
			out = append(out, s.Namespace+"/"+s.Name)
		}
		return out
	}
	want := map[string][]string{
		"a": {"a/front", "b/mid", "c/back"}, // transitively through b's Route
		"b": {"b/mid", "c/back"},
		"c": {"c/back"},
		"d": {"d/lonely"},
		"e": nil,
	}
	for ns, w := range want {
		if diff := cmp.Diff(w, names(ns)); diff != "" {
			t.Errorf("scope %s (-want +got):\n%s", ns, diff)
		}
	}
}

func TestMeshConfigAndSecurity(t *testing.T) {
	objs := []*resource.Object{
		{APIVersion: resource.APIVersion, Kind: resource.KindMeshConfig, Metadata: resource.Metadata{Name: "default"},
			Spec: &resource.MeshConfigSpec{TrustDomain: "example.org", DefaultMTLS: "PERMISSIVE", CertificateTTL: "12h"}},
		service("shop", "reviews", nil, httpPort(9080)),
		obj(resource.KindPeerAuthentication, "shop", "default", nil, &resource.PeerAuthenticationSpec{MTLS: "STRICT"}),
		obj(resource.KindAuthorizationPolicy, "shop", "readers", nil, &resource.AuthorizationPolicySpec{Selector: map[string]string{"app": "reviews"},
			Rules: []resource.AuthzRule{{From: []resource.AuthzSource{{Principals: []string{"spiffe://example.org/ns/shop/sa/frontend"}}}, To: []resource.AuthzOperation{{Methods: []string{"GET"}, Ports: []int32{9080}}}}}}),
		obj(resource.KindStalenessPolicy, "shop", "default", nil, &resource.StalenessPolicySpec{Rules: []resource.StalenessRule{{Resource: "routes", WarnAfter: "5m", ExpireAfter: "24h", OnExpire: "failClosed", Jitter: 10}}}),
		{APIVersion: resource.APIVersion, Kind: resource.KindOverride, Metadata: resource.Metadata{Name: "block", Namespace: "shop", Revision: 42},
			Spec: &resource.OverrideSpec{TTL: "10m", Reason: "scraper", Action: "DENY", Match: resource.OverrideMatch{Paths: []string{"/x"}}}},
	}
	m := mustCompile(t, Input{Objects: objs})
	if m.TrustDomain != "example.org" || m.DefaultMTLS != "PERMISSIVE" || m.CertTTL != 12*time.Hour {
		t.Errorf("mesh config = %q %q %v", m.TrustDomain, m.DefaultMTLS, m.CertTTL)
	}
	if got, want := m.Service("shop", "reviews").Ports[0].Cluster, "outbound|9080||reviews.shop.svc.example.org"; got != want {
		t.Errorf("cluster = %q, want %q (domain from MeshConfig)", got, want)
	}
	want := &ir.Mesh{
		PeerAuthn: []*ir.PeerAuthentication{{Namespace: "shop", Name: "default", MTLS: "STRICT"}},
		Authz: []*ir.AuthorizationPolicy{{Namespace: "shop", Name: "readers", Selector: map[string]string{"app": "reviews"}, Action: "ALLOW",
			Rules: []ir.AuthzRule{{From: []ir.AuthzSource{{Principals: []string{"spiffe://example.org/ns/shop/sa/frontend"}}}, To: []ir.AuthzOperation{{Methods: []string{"GET"}, Ports: []uint32{9080}}}}}}},
		Staleness: []*ir.StalenessPolicy{{Namespace: "shop", Name: "default", Rules: []ir.StalenessRule{{Resource: "routes", WarnAfter: 5 * time.Minute, ExpireAfter: 24 * time.Hour, OnExpire: "failClosed", Jitter: 10}}}},
		Overrides: []*ir.Override{{Namespace: "shop", Name: "block", Revision: 42, TTL: 10 * time.Minute, Reason: "scraper", Action: "DENY", Paths: []string{"/x"}}},
	}
	opt := cmpopts.IgnoreFields(ir.Mesh{}, "Revision", "TrustDomain", "DefaultMTLS", "CertTTL", "OutboundPolicy", "Services", "Clusters", "Policies", "Scopes", "Warnings")
	if diff := cmp.Diff(want, m, opt, cmpopts.IgnoreUnexported(ir.Mesh{}, ir.Cluster{})); diff != "" {
		t.Errorf("policies (-want +got):\n%s", diff)
	}
}

// TestDeterministic compiles the same input in many orders and expects equal
// meshes.
func TestDeterministic(t *testing.T) {
	app := map[string]string{"app": "reviews"}
	objs := []*resource.Object{
		service("shop", "reviews", app, httpPort(9080)),
		service("shop", "backup", app, httpPort(9080)),
		workload("shop", "w1", "10.0.0.1", app), workload("shop", "w2", "10.0.0.2", app), workload("shop", "w3", "10.0.0.3", app),
		policy("shop", "reviews", "reviews", resource.Subset{Name: "v1", Labels: app}),
		route("shop", "r1", []string{"reviews"}, resource.HTTPRoute{Route: []resource.RouteDestination{to("reviews", "nope", 0, 50), to("backup", "x", 0, 50)}}),
		route("shop", "r2", []string{"reviews"}, resource.HTTPRoute{Route: []resource.RouteDestination{to("backup", "", 0, 100)}}),
	}
	proxies := []*node.Node{sidecar("a", "shop", "10.1.0.1", app), sidecar("b", "shop", "10.1.0.2", app), sidecar("c", "shop", "10.1.0.1", app)}
	first := mustCompile(t, Input{Revision: 1, Objects: objs, Proxies: proxies})
	r := rand.New(rand.NewPCG(1, 2))
	for i := range 20 {
		o, p := slices.Clone(objs), slices.Clone(proxies)
		r.Shuffle(len(o), func(i, j int) { o[i], o[j] = o[j], o[i] })
		r.Shuffle(len(p), func(i, j int) { p[i], p[j] = p[j], p[i] })
		got := mustCompile(t, Input{Revision: 1, Objects: o, Proxies: p})
		if diff := cmp.Diff(first, got, cmpopts.IgnoreUnexported(ir.Mesh{}, ir.Cluster{})); diff != "" {
			t.Fatalf("order %d differs (-first +got):\n%s", i, diff)
		}
	}
}

// TestPrevious: with Input.Previous, clusters whose contents did not change are
// the previous mesh's objects, changed ones are new, and the mesh is otherwise
// the same as one compiled without Previous.
func TestPrevious(t *testing.T) {
	app := map[string]string{"app": "reviews"}
	objs := func(addr string) []*resource.Object {
		return []*resource.Object{
			service("shop", "reviews", app, httpPort(9080)),
			service("shop", "ratings", map[string]string{"app": "ratings"}, httpPort(9080)),
			workload("shop", "r1", addr, map[string]string{"app": "reviews", "version": "v1"}),
			workload("shop", "r2", "10.0.0.2", map[string]string{"app": "reviews", "version": "v2"}),
			workload("shop", "ra", "10.0.0.3", map[string]string{"app": "ratings"}),
			policy("shop", "reviews", "reviews", resource.Subset{Name: "v1", Labels: map[string]string{"version": "v1"}}, resource.Subset{Name: "v2", Labels: map[string]string{"version": "v2"}}),
		}
	}
	m1 := mustCompile(t, Input{Revision: 1, Objects: objs("10.0.0.1")})
	m2 := mustCompile(t, Input{Revision: 2, Objects: objs("10.0.0.9"), Previous: m1})
	fresh := mustCompile(t, Input{Revision: 2, Objects: objs("10.0.0.9")})
	if diff := cmp.Diff(fresh, m2, cmpopts.IgnoreUnexported(ir.Mesh{}, ir.Cluster{})); diff != "" {
		t.Errorf("Previous changed the result (-without +with):\n%s", diff)
	}
	reused := map[string]bool{
		"outbound|9080||ratings.shop.svc.cluster.local":   true,  // untouched
		"outbound|9080|v2|reviews.shop.svc.cluster.local": true,  // r1 is not in v2
		"outbound|9080||reviews.shop.svc.cluster.local":   false, // r1 moved
		"outbound|9080|v1|reviews.shop.svc.cluster.local": false,
	}
	for name, want := range reused {
		if got := m2.Cluster(name) == m1.Cluster(name); got != want {
			t.Errorf("%s: reused = %v, want %v", name, got, want)
		}
	}
}

func ptr[T any](v T) *T { return &v }

func peerAuthn(ns, name, mode string, sel map[string]string) *resource.Object {
	return obj(resource.KindPeerAuthentication, ns, name, nil, &resource.PeerAuthenticationSpec{Selector: sel, MTLS: mode})
}

// TestEndpointMTLS: an endpoint takes mTLS only when its node proved exactly
// the endpoint's identity and its resolved mode is not DISABLE; each cluster
// lists its mTLS endpoints' SPIFFE IDs, sorted and unique.
func TestEndpointMTLS(t *testing.T) {
	app := map[string]string{"app": "reviews"}
	id := func(sa string) string { return "spiffe://cluster.local/ns/shop/sa/" + sa }
	withID := func(n *node.Node, identity string) *node.Node { n.Identity = identity; return n }
	grpcServer := func(addr, identity string) *node.Node {
		return &node.Node{ID: "px-" + addr, Address: addr, Identity: identity}
	}
	wl := func(name, addr, sa string, labels map[string]string) *resource.Object {
		return obj(resource.KindWorkload, "shop", name, labels, &resource.WorkloadSpec{Address: addr, ServiceAccount: sa})
	}
	tests := []struct {
		name       string
		objs       []*resource.Object
		proxies    []*node.Node
		wantMTLS   map[string]bool // endpoint address -> MTLS
		identities []string
		warning    string
	}{
		{
			name:     "sidecar with its own identity",
			proxies:  []*node.Node{withID(sidecar("a", "shop", "10.0.0.1", app), id("sa-a"))},
			wantMTLS: map[string]bool{"10.0.0.1": true}, identities: []string{id("sa-a")},
		},
		{
			name:     "sidecar without identity (plaintext registration)",
			proxies:  []*node.Node{sidecar("a", "shop", "10.0.0.1", app)},
			wantMTLS: map[string]bool{"10.0.0.1": false},
		},
		{
			name:     "sidecar whose identity is another workload's",
			proxies:  []*node.Node{withID(sidecar("a", "shop", "10.0.0.1", app), id("other"))},
			wantMTLS: map[string]bool{"10.0.0.1": false}, warning: "sidecar a: identity " + id("other") + " is not its workload's " + id("sa-a"),
		},
		{
			name:     "DISABLE for the workload",
			objs:     []*resource.Object{peerAuthn("shop", "off", "DISABLE", app)},
			proxies:  []*node.Node{withID(sidecar("a", "shop", "10.0.0.1", app), id("sa-a")), withID(sidecar("b", "shop", "10.0.0.2", map[string]string{"app": "reviews", "v": "2"}), id("sa-b"))},
			wantMTLS: map[string]bool{"10.0.0.1": false, "10.0.0.2": false},
		},
		{
			name:     "PERMISSIVE still takes mTLS; identities sorted and unique",
			objs:     []*resource.Object{peerAuthn("shop", "ns", "PERMISSIVE", nil)},
			proxies:  []*node.Node{withID(sidecar("b", "shop", "10.0.0.2", app), id("sa-b")), withID(sidecar("a", "shop", "10.0.0.1", app), id("sa-a")), withID(&node.Node{ID: "c", Namespace: "shop", ServiceAccount: "sa-a", Address: "10.0.0.3", Labels: app}, id("sa-a"))},
			wantMTLS: map[string]bool{"10.0.0.1": true, "10.0.0.2": true, "10.0.0.3": true}, identities: []string{id("sa-a"), id("sa-b")},
		},
		{
			name:     "Workload served by a proxyless server with its identity",
			objs:     []*resource.Object{wl("w1", "10.0.1.1", "greeter", app), wl("w2", "10.0.1.2", "greeter", app), wl("w3", "10.0.1.3", "greeter", app)},
			proxies:  []*node.Node{grpcServer("10.0.1.1", id("greeter")), grpcServer("10.0.1.2", id("intruder")), grpcServer("10.0.1.9", id("greeter"))},
			wantMTLS: map[string]bool{"10.0.1.1": true, "10.0.1.2": false, "10.0.1.3": false}, identities: []string{id("greeter")},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			objs := append([]*resource.Object{service("shop", "reviews", app, httpPort(9080))}, tt.objs...)
			m := mustCompile(t, Input{Objects: objs, Proxies: tt.proxies})
			c := m.Cluster("outbound|9080||reviews.shop.svc.cluster.local")
			got := map[string]bool{}
			for _, ep := range c.Endpoints {
				got[ep.Address] = ep.MTLS
			}
			if diff := cmp.Diff(tt.wantMTLS, got); diff != "" {
				t.Errorf("endpoint MTLS (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.identities, c.Identities); diff != "" {
				t.Errorf("cluster identities (-want +got):\n%s", diff)
			}
			if tt.warning != "" && !hasWarning(m, tt.warning) {
				t.Errorf("no warning %q in %v", tt.warning, m.Warnings)
			}
		})
	}
}

// TestSubsetIdentities: a subset cluster lists only its own endpoints' identities.
func TestSubsetIdentities(t *testing.T) {
	a := &node.Node{ID: "a", Namespace: "shop", ServiceAccount: "v1", Address: "10.0.0.1", Labels: map[string]string{"app": "r", "v": "1"}, Identity: "spiffe://cluster.local/ns/shop/sa/v1"}
	b := &node.Node{ID: "b", Namespace: "shop", ServiceAccount: "v2", Address: "10.0.0.2", Labels: map[string]string{"app": "r", "v": "2"}, Identity: "spiffe://cluster.local/ns/shop/sa/v2"}
	m := mustCompile(t, Input{Proxies: []*node.Node{a, b}, Objects: []*resource.Object{
		service("shop", "r", map[string]string{"app": "r"}, httpPort(80)),
		policy("shop", "r", "r", resource.Subset{Name: "v1", Labels: map[string]string{"v": "1"}}),
	}})
	if got := m.Cluster("outbound|80||r.shop.svc.cluster.local").Identities; len(got) != 2 {
		t.Errorf("service cluster identities = %v, want both", got)
	}
	if diff := cmp.Diff([]string{a.Identity}, m.Cluster("outbound|80|v1|r.shop.svc.cluster.local").Identities); diff != "" {
		t.Errorf("subset identities (-want +got):\n%s", diff)
	}
}

// TestPeerAuthentication: two namespace-wide policies in one namespace: the
// first by name applies and the other is reported; an unknown mode is an error
// naming the field.
func TestPeerAuthentication(t *testing.T) {
	m := mustCompile(t, Input{Objects: []*resource.Object{peerAuthn("shop", "a", "DISABLE", nil), peerAuthn("shop", "b", "STRICT", nil)}})
	if mode, from := m.MTLSMode("shop", nil); mode != "DISABLE" || from.Name != "a" {
		t.Errorf("MTLSMode = %s from %v, want DISABLE from a", mode, from)
	}
	if !hasWarning(m, "PeerAuthentication/shop/b: ignored: PeerAuthentication/shop/a already applies to the whole namespace") {
		t.Errorf("no warning for the second namespace-wide policy: %v", m.Warnings)
	}
	_, err := Compile(Input{Objects: []*resource.Object{peerAuthn("shop", "a", "MAYBE", nil)}})
	if err == nil || !strings.Contains(err.Error(), "PeerAuthentication/shop/a: spec.mtls: unknown mode \"MAYBE\"") {
		t.Errorf("err = %v, want one naming spec.mtls", err)
	}
}

// TestOverrideWrittenAt: an Override carries its revision's write time when
// pilot saw the write, and none otherwise.
func TestOverrideWrittenAt(t *testing.T) {
	at := time.Date(2026, 12, 1, 14, 0, 0, 0, time.UTC)
	ov := func(name string, rev int64) *resource.Object {
		return &resource.Object{APIVersion: resource.APIVersion, Kind: resource.KindOverride, Metadata: resource.Metadata{Name: name, Namespace: "shop", Revision: rev},
			Spec: &resource.OverrideSpec{TTL: "2s", Action: "DENY", Match: resource.OverrideMatch{Paths: []string{"/x"}}}}
	}
	m := mustCompile(t, Input{Objects: []*resource.Object{ov("seen", 7), ov("listed", 3)}, WriteTimes: map[int64]time.Time{7: at, 8: at.Add(time.Second)}})
	got := map[string]time.Time{}
	for _, o := range m.Overrides {
		got[o.Name] = o.WrittenAt
	}
	if diff := cmp.Diff(map[string]time.Time{"seen": at, "listed": {}}, got); diff != "" {
		t.Errorf("WrittenAt (-want +got):\n%s", diff)
	}
}

// TestOverrideExpiry: with the compile's time, an Override past its known
// expiry is left out, the earliest expiry still ahead is NextExpiry, and one
// whose write time is unknown stays (the sidecar times it from its sighting).
func TestOverrideExpiry(t *testing.T) {
	at := time.Date(2026, 12, 1, 14, 0, 0, 0, time.UTC)
	ov := func(name string, rev int64, ttl string) *resource.Object {
		return &resource.Object{APIVersion: resource.APIVersion, Kind: resource.KindOverride, Metadata: resource.Metadata{Name: name, Namespace: "shop", Revision: rev},
			Spec: &resource.OverrideSpec{TTL: resource.Duration(ttl), Action: "DENY", Match: resource.OverrideMatch{Paths: []string{"/x"}}}}
	}
	objs := []*resource.Object{ov("short", 1, "2s"), ov("long", 2, "10s"), ov("longer", 3, "20s"), ov("unknown", 4, "1s")}
	times := map[int64]time.Time{1: at, 2: at, 3: at}
	for _, tc := range []struct {
		name string
		now  time.Time
		kept []string
		next time.Time
	}{
		{"no clock: all kept, no expiry", time.Time{}, []string{"long", "longer", "short", "unknown"}, time.Time{}},
		{"before every expiry", at.Add(time.Second), []string{"long", "longer", "short", "unknown"}, at.Add(2 * time.Second)},
		{"at the first expiry", at.Add(2 * time.Second), []string{"long", "longer", "unknown"}, at.Add(10 * time.Second)},
		{"one past the second", at.Add(10*time.Second + time.Nanosecond), []string{"longer", "unknown"}, at.Add(20 * time.Second)},
		{"all known ones expired", at.Add(time.Hour), []string{"unknown"}, time.Time{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := mustCompile(t, Input{Objects: objs, WriteTimes: times, Now: tc.now})
			var kept []string
			for _, o := range m.Overrides {
				kept = append(kept, o.Name)
			}
			if diff := cmp.Diff(tc.kept, kept); diff != "" {
				t.Errorf("kept overrides (-want +got):\n%s", diff)
			}
			if !m.NextExpiry.Equal(tc.next) {
				t.Errorf("NextExpiry = %v, want %v", m.NextExpiry, tc.next)
			}
		})
	}
}

// Service VIPs: spec.addresses, else the allocated status.addresses, sorted
// (IPv4 first); MeshConfig's outboundTrafficPolicy reaches the mesh.
func TestServiceAddresses(t *testing.T) {
	withAddrs := func(o *resource.Object, spec, status []string) *resource.Object {
		o.Spec.(*resource.ServiceSpec).Addresses = spec
		if status != nil {
			o.Status = &resource.Status{Addresses: status}
		}
		return o
	}
	objs := []*resource.Object{
		withAddrs(service("shop", "a", nil, httpPort(80)), []string{"fd00::1", "240.240.0.20", "10.0.0.1"}, []string{"240.240.0.1"}),
		withAddrs(service("shop", "b", nil, httpPort(80)), nil, []string{"240.240.0.2"}),
		service("shop", "c", nil, httpPort(80)),
		obj(resource.KindMeshConfig, "", "default", nil, &resource.MeshConfigSpec{OutboundTrafficPolicy: "REGISTRY_ONLY"}),
	}
	m := mustCompile(t, Input{Objects: objs})
	for name, want := range map[string][]string{"a": {"10.0.0.1", "240.240.0.20", "fd00::1"}, "b": {"240.240.0.2"}, "c": nil} {
		if diff := cmp.Diff(want, m.Service("shop", name).Addresses); diff != "" {
			t.Errorf("Service %s addresses (-want +got):\n%s", name, diff)
		}
	}
	if m.OutboundPolicy != ir.OutboundRegistryOnly {
		t.Errorf("OutboundPolicy = %q, want REGISTRY_ONLY", m.OutboundPolicy)
	}
	if m := mustCompile(t, Input{Objects: objs[:3]}); m.OutboundPolicy != ir.OutboundAllowAny {
		t.Errorf("OutboundPolicy without MeshConfig = %q, want ALLOW_ANY", m.OutboundPolicy)
	}
	bad := obj(resource.KindMeshConfig, "", "default", nil, &resource.MeshConfigSpec{OutboundTrafficPolicy: "DENY"})
	if _, err := Compile(Input{Objects: []*resource.Object{bad}}); err == nil || !strings.Contains(err.Error(), `MeshConfig/default: spec.outboundTrafficPolicy: "DENY"`) {
		t.Errorf("bad policy: err = %v", err)
	}
}
