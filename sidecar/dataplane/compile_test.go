package dataplane_test

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"go.uber.org/goleak"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/weft-mesh/weft/sidecar/dataplane"
	dt "github.com/weft-mesh/weft/sidecar/dataplane/dataplanetest"
	"github.com/weft-mesh/weft/sidecar/xdsresource"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var ep = dt.MustAddr("127.0.0.1:9000")

func base() dt.Resources {
	return dt.Simple("outbound", dt.MustAddr("127.0.0.1:15001"), false, ep)
}

func TestCompileCrossReferences(t *testing.T) {
	tests := []struct {
		name string
		res  func() dt.Resources
		want string
	}{
		{"missing route", func() dt.Resources {
			r := base()
			r[xdsresource.ListenerType] = nil
			return r.Add(xdsresource.ListenerType, dt.HTTPListener("outbound", dt.MustAddr("127.0.0.1:15001"), "nope"))
		}, `invalid configuration: listener "outbound": filter_chains[0].filters[0].typed_config.rds.route_config_name: route "nope" not found`},
		{"missing cluster", func() dt.Resources {
			r := base()
			r[xdsresource.RouteType] = nil
			return r.Add(xdsresource.RouteType, dt.RouteConfig("routes", dt.VirtualHost("v", []string{"*"}, dt.PrefixRoute("/", "backend", 0), dt.PrefixRoute("/x", "ghost", 0))))
		}, `invalid configuration: route "routes": virtual_hosts[0].routes[1].route: cluster "ghost" not found`},
		{"missing endpoints", func() dt.Resources {
			r := base()
			r[xdsresource.EndpointType] = nil
			return r
		}, `invalid configuration: cluster "backend": eds_cluster_config.service_name: endpoints "backend" not found`},
		{"missing tcp cluster", func() dt.Resources {
			r := base()
			return r.Add(xdsresource.ListenerType, dt.Listener("inbound", dt.MustAddr("127.0.0.1:15006"), dt.TCPChain(0, "ghost")))
		}, `invalid configuration: listener "inbound": filter_chains[0].filters[0].typed_config.cluster: cluster "ghost" not found`},
		{"address clash", func() dt.Resources {
			r := base()
			return r.Add(xdsresource.ListenerType, dt.HTTPListener("other", dt.MustAddr("127.0.0.1:15001"), "routes"))
		}, `invalid configuration: listener "outbound": address 127.0.0.1:15001 already used by listener "other"`},
		{"missing fallback", func() dt.Resources {
			r := base()
			rt := dt.PrefixRoute("/", "backend", 0)
			fb, _ := structpb.NewStruct(map[string]any{"clusters": []any{"ghost"}})
			rt.Metadata = &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{"weft.fallback": fb}}
			r[xdsresource.RouteType] = nil
			return r.Add(xdsresource.RouteType, dt.RouteConfig("routes", dt.VirtualHost("v", []string{"*"}, rt)))
		}, `invalid configuration: route "routes": virtual_hosts[0].routes[0].metadata.filter_metadata["weft.fallback"].clusters[0]: cluster "ghost" not found`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.res().Compile(dataplane.Options{})
			if err == nil || err.Error() != tc.want {
				t.Fatalf("Compile error\n got: %v\nwant: %s", err, tc.want)
			}
			if !errors.Is(err, dataplane.ErrInvalid) {
				t.Errorf("error does not wrap ErrInvalid")
			}
		})
	}
	st := map[string]map[string]any{xdsresource.ClusterType: {"c": "not a cluster"}}
	if _, err := dataplane.Compile(st); err == nil || err.Error() != `invalid configuration: cluster "c": value is string, want *xdsresource.Cluster` {
		t.Errorf("wrong value type: %v", err)
	}
	if _, err := base().Compile(dataplane.Options{}); err != nil {
		t.Fatalf("valid config: %v", err)
	}
}

type hdrs map[string]string

func (h hdrs) Get(n string) (string, bool) { v, ok := h[n]; return v, ok }

func route(name string, m *routev3.RouteMatch) *routev3.Route {
	r := dt.PrefixRoute("/", "backend", 0)
	r.Name, r.Match = name, m
	return r
}

func strMatch(name string, sm *matcherv3.StringMatcher) *routev3.HeaderMatcher {
	return &routev3.HeaderMatcher{Name: name, HeaderMatchSpecifier: &routev3.HeaderMatcher_StringMatch{StringMatch: sm}}
}

func TestRouting(t *testing.T) {
	r := base()
	r[xdsresource.RouteType] = nil
	r.Add(xdsresource.RouteType, dt.RouteConfig("routes",
		dt.VirtualHost("reviews", []string{"reviews", "reviews.shop", "reviews:9080"},
			route("exact", &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Path{Path: "/exact"}}),
			route("regex", &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_SafeRegex{SafeRegex: &matcherv3.RegexMatcher{Regex: "/v[0-9]+/items"}}}),
			route("jason", &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}, Headers: []*routev3.HeaderMatcher{
				strMatch("end-user", &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Exact{Exact: "jason"}}),
				strMatch(":method", &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Exact{Exact: "GET"}}),
			}}),
			route("ci", &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/CI"}, CaseSensitive: wrapperspb.Bool(false)}),
			route("api", &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/api"}}),
		),
		dt.VirtualHost("wild-suffix", []string{"*.example.com"}, route("suffix", &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}})),
		dt.VirtualHost("wild-longer", []string{"*.b.example.com"}, route("longer", &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}})),
		dt.VirtualHost("wild-prefix", []string{"ratings.*"}, route("prefix", &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}})),
		dt.VirtualHost("default", []string{"*"}, route("default", &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}})),
	))
	cfg, err := r.Compile(dataplane.Options{})
	if err != nil {
		t.Fatal(err)
	}
	rt := cfg.Listener("outbound").Chain(15001).HTTP
	tests := []struct {
		host, path string
		h          hdrs
		want       string // route name, "" for no match
	}{
		{"reviews", "/exact", hdrs{}, "exact"},
		{"reviews", "/exact?q=1", hdrs{}, "exact"},
		{"reviews", "/exactly", hdrs{":method": "GET"}, ""},
		{"reviews:9080", "/v2/items", hdrs{}, "regex"},
		{"REVIEWS.shop", "/v2/items/x", hdrs{}, ""},
		{"reviews.shop:1234", "/x", hdrs{"end-user": "jason", ":method": "GET"}, "jason"},
		{"reviews", "/x", hdrs{"end-user": "jason", ":method": "POST"}, ""},
		{"reviews", "/ci/x", hdrs{}, "ci"},
		{"reviews", "/api/x", hdrs{}, "api"},
		{"a.b.example.com", "/", hdrs{}, "longer"},
		{"x.example.com:80", "/", hdrs{}, "suffix"},
		{"ratings.shop", "/", hdrs{}, "prefix"},
		{"unknown", "/", hdrs{}, "default"},
	}
	for _, tc := range tests {
		vh := rt.Lookup(tc.host)
		if vh == nil {
			t.Errorf("%s: no virtual host", tc.host)
			continue
		}
		got := ""
		if m := vh.Match(tc.path, tc.h); m != nil {
			got = m.Name
		}
		if got != tc.want {
			t.Errorf("%s%s %v: route %q, want %q", tc.host, tc.path, tc.h, got, tc.want)
		}
	}
}

// TestWeightedClusters checks the split statistically with a seeded RNG: 100k picks
// of a 70/20/10 split land within 1% (about 5 sigma) of the weights.
func TestWeightedClusters(t *testing.T) {
	r := base()
	for _, n := range []string{"a", "b", "c"} {
		r.Add(xdsresource.ClusterType, dt.EDSCluster(n, dt.ClusterOpts{}))
		r.Add(xdsresource.EndpointType, dt.Endpoints(n, ep))
	}
	wr := dt.PrefixRoute("/", "a", 0)
	wr.GetRoute().ClusterSpecifier = &routev3.RouteAction_WeightedClusters{WeightedClusters: &routev3.WeightedCluster{Clusters: []*routev3.WeightedCluster_ClusterWeight{
		{Name: "a", Weight: wrapperspb.UInt32(70)}, {Name: "b", Weight: wrapperspb.UInt32(20)}, {Name: "c", Weight: wrapperspb.UInt32(10)}}}}
	r[xdsresource.RouteType] = nil
	r.Add(xdsresource.RouteType, dt.RouteConfig("routes", dt.VirtualHost("v", []string{"*"}, wr)))
	cfg, err := r.Compile(dataplane.Options{})
	if err != nil {
		t.Fatal(err)
	}
	rt := cfg.Listener("outbound").Chain(0).HTTP.Lookup("x").Match("/", hdrs{})
	rng := rand.New(rand.NewPCG(1, 2))
	const n = 100000
	counts := map[string]int{}
	for range n {
		counts[rt.Pick(rng.Uint64()).Name]++
	}
	for name, w := range map[string]float64{"a": 0.7, "b": 0.2, "c": 0.1} {
		if got := float64(counts[name]) / n; math.Abs(got-w) > 0.01 {
			t.Errorf("cluster %s: share %.4f, want %.2f±0.01", name, got, w)
		}
	}
}

// BenchmarkRoute measures the per-request routing work: virtual host lookup among
// 1000 hosts and a first-match scan with a header matcher.
func BenchmarkRoute(b *testing.B) {
	r := base()
	r[xdsresource.RouteType] = nil
	var vhs []*routev3.VirtualHost
	for i := range 1000 {
		h := fmt.Sprintf("svc%d", i)
		vhs = append(vhs, dt.VirtualHost(h, []string{h, h + ".ns", h + ":9080"},
			route("a", &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/api"}, Headers: []*routev3.HeaderMatcher{
				strMatch("end-user", &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Exact{Exact: "jason"}})}}),
			route("b", &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}})))
	}
	r.Add(xdsresource.RouteType, dt.RouteConfig("routes", vhs...))
	cfg, err := r.Compile(dataplane.Options{})
	if err != nil {
		b.Fatal(err)
	}
	rt := cfg.Listener("outbound").Chain(0).HTTP
	h := hdrs{"end-user": "mike"}
	b.ReportAllocs()
	for b.Loop() {
		if rt.Lookup("svc500:9080").Match("/api/v1/items?x=1", h).Name != "b" {
			b.Fatal("wrong route")
		}
	}
}

// TestCompileCarriesPeerMarking: an endpoint pilot marked as a peer sidecar's
// inbound listener stays marked in the compiled cluster; the others do not.
func TestCompileCarriesPeerMarking(t *testing.T) {
	peer := dt.MustAddr("127.0.0.2:15006")
	r := dt.Simple("outbound", dt.MustAddr("127.0.0.1:15001"), false, ep, peer)
	for _, m := range r[xdsresource.EndpointType] {
		dt.MarkPeer(m.(*endpointv3.ClusterLoadAssignment), peer)
	}
	cfg, err := r.Compile(dataplane.Options{})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, e := range cfg.Cluster("backend").Endpoints() {
		got[e.Address()] = e.Peer
	}
	want := map[string]bool{ep.String(): false, peer.String(): true}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("peer marking = %v, want %v", got, want)
	}
}
