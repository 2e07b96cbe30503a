package xdsresource_test

import (
	"errors"
	"net/netip"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"go.uber.org/goleak"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	dt "github.com/weft-mesh/weft/sidecar/dataplane/dataplanetest"
	"github.com/weft-mesh/weft/sidecar/xdsresource"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func regexRoute(re string) *routev3.Route {
	r := dt.PrefixRoute("/", "c", 0)
	r.Match.PathSpecifier = &routev3.RouteMatch_SafeRegex{SafeRegex: &matcherv3.RegexMatcher{Regex: re}}
	return r
}

func TestDecodeErrors(t *testing.T) {
	bigRoutes := make([]*routev3.Route, xdsresource.MaxRoutes+1)
	for i := range bigRoutes {
		bigRoutes[i] = dt.PrefixRoute("/", "c", 0)
	}
	noPort := dt.HTTPListener("outbound", dt.MustAddr("127.0.0.1:15001"), "r")
	noPort.Address.GetSocketAddress().PortSpecifier = &corev3.SocketAddress_PortValue{PortValue: 0}
	dnsEP := dt.Endpoints("c", dt.MustAddr("10.0.0.1:80"))
	dnsEP.Endpoints[0].LbEndpoints[0].GetEndpoint().Address.GetSocketAddress().Address = "reviews.shop"
	badLB := dt.EDSCluster("c", dt.ClusterOpts{LB: clusterv3.Cluster_MAGLEV})
	zeroCB := dt.EDSCluster("c", dt.ClusterOpts{MaxConns: 1})
	zeroCB.CircuitBreakers.Thresholds[0].MaxConnections = wrapperspb.UInt32(0)
	badRetry := dt.PrefixRoute("/", "c", 0)
	badRetry.GetRoute().RetryPolicy = &routev3.RetryPolicy{RetryOn: "5xx,sometimes"}
	noBase := dt.PrefixRoute("/", "c", 0)
	noBase.GetRoute().RetryPolicy = &routev3.RetryPolicy{RetryOn: "5xx", RetryBackOff: &routev3.RetryPolicy_RetryBackOff{MaxInterval: durationpb.New(time.Second)}}
	zeroBase := dt.PrefixRoute("/", "c", 0)
	zeroBase.GetRoute().RetryPolicy = &routev3.RetryPolicy{RetryOn: "5xx", RetryBackOff: &routev3.RetryPolicy_RetryBackOff{BaseInterval: durationpb.New(0)}}
	maxBelowBase := dt.PrefixRoute("/", "c", 0)
	maxBelowBase.GetRoute().RetryPolicy = &routev3.RetryPolicy{RetryOn: "5xx", RetryBackOff: &routev3.RetryPolicy_RetryBackOff{
		BaseInterval: durationpb.New(100 * time.Millisecond), MaxInterval: durationpb.New(99 * time.Millisecond)}}
	zeroWeights := dt.PrefixRoute("/", "c", 0)
	zeroWeights.GetRoute().ClusterSpecifier = &routev3.RouteAction_WeightedClusters{WeightedClusters: &routev3.WeightedCluster{
		Clusters: []*routev3.WeightedCluster_ClusterWeight{{Name: "a", Weight: wrapperspb.UInt32(0)}}}}
	noHeaderName := dt.PrefixRoute("/", "c", 0)
	noHeaderName.Match.Headers = []*routev3.HeaderMatcher{{Name: "x-a"}, {Name: "x-b"}, {Name: ""}}
	badHeaderRegex := dt.PrefixRoute("/", "c", 0)
	badHeaderRegex.Match.Headers = []*routev3.HeaderMatcher{{Name: "x-a", HeaderMatchSpecifier: &routev3.HeaderMatcher_StringMatch{
		StringMatch: &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_SafeRegex{SafeRegex: &matcherv3.RegexMatcher{Regex: "(a"}}}}}}
	noWeightedName := dt.PrefixRoute("/", "c", 0)
	noWeightedName.GetRoute().ClusterSpecifier = &routev3.RouteAction_WeightedClusters{WeightedClusters: &routev3.WeightedCluster{
		Clusters: []*routev3.WeightedCluster_ClusterWeight{{Name: "a", Weight: wrapperspb.UInt32(1)}, {Name: "", Weight: wrapperspb.UInt32(1)}}}}
	badFallback := dt.PrefixRoute("/", "c", 0)
	badFallback.Metadata = &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{"weft.fallback": {Fields: map[string]*structpb.Value{"clusters": structpb.NewStringValue("x")}}}}
	missingEmpty := dt.PrefixRoute("/", "c", 0)
	missingEmpty.Match.Headers = []*routev3.HeaderMatcher{{Name: "x-a", TreatMissingHeaderAsEmpty: true}}
	twoFilters := dt.Listener("in", dt.MustAddr("127.0.0.1:15006"), dt.HTTPChain(0, "r"))
	twoFilters.FilterChains[0].Filters = append(twoFilters.FilterChains[0].Filters, twoFilters.FilterChains[0].Filters[0])

	tests := []struct {
		name    string
		typeURL string
		msg     proto.Message
		want    string
	}{
		{"regex", xdsresource.RouteType, dt.RouteConfig("outbound|9080", dt.VirtualHost("v", []string{"a"}, dt.PrefixRoute("/", "c", 0), dt.PrefixRoute("/", "c", 0), regexRoute("(a"))),
			`route "outbound|9080": virtual_hosts[0].routes[2].match.safe_regex: invalid RE2: missing closing )`},
		{"regex too long", xdsresource.RouteType, dt.RouteConfig("r", dt.VirtualHost("v", []string{"a"}, regexRoute(string(make([]byte, 1025))))),
			`route "r": virtual_hosts[0].routes[0].match.safe_regex: regex is 1025 bytes, limit 1024`},
		{"too many routes", xdsresource.RouteType, dt.RouteConfig("r", dt.VirtualHost("v", []string{"a"}, bigRoutes...)),
			`route "r": virtual_hosts[0].routes: 1025 routes, limit 1024`},
		{"duplicate domain", xdsresource.RouteType, dt.RouteConfig("r", dt.VirtualHost("v", []string{"a"}), dt.VirtualHost("w", []string{"A"})),
			`route "r": virtual_hosts[1].domains[0]: "a" already used by virtual_hosts[0]`},
		{"bad wildcard", xdsresource.RouteType, dt.RouteConfig("r", dt.VirtualHost("v", []string{"a*b"})),
			`route "r": virtual_hosts[0].domains[0]: "a*b": wildcard only allowed as a whole prefix or suffix`},
		{"unknown retry_on", xdsresource.RouteType, dt.RouteConfig("r", dt.VirtualHost("v", []string{"a"}, badRetry)),
			`route "r": virtual_hosts[0].routes[0].route.retry_policy.retry_on: unknown condition "sometimes"`},
		{"back-off without base", xdsresource.RouteType, dt.RouteConfig("r", dt.VirtualHost("v", []string{"a"}, noBase)),
			`route "r": virtual_hosts[0].routes[0].route.retry_policy.retry_back_off.base_interval: required`},
		{"back-off base zero", xdsresource.RouteType, dt.RouteConfig("r", dt.VirtualHost("v", []string{"a"}, zeroBase)),
			`route "r": virtual_hosts[0].routes[0].route.retry_policy.retry_back_off.base_interval: must be positive`},
		{"back-off max below base", xdsresource.RouteType, dt.RouteConfig("r", dt.VirtualHost("v", []string{"a"}, maxBelowBase)),
			`route "r": virtual_hosts[0].routes[0].route.retry_policy.retry_back_off.max_interval: 99ms is below base_interval 100ms`},
		{"zero weights", xdsresource.RouteType, dt.RouteConfig("r", dt.VirtualHost("v", []string{"a"}, zeroWeights)),
			`route "r": virtual_hosts[0].routes[0].route.weighted_clusters: weights sum to 0`},
		{"header matcher without name", xdsresource.RouteType, dt.RouteConfig("r", dt.VirtualHost("v", []string{"a"}), dt.VirtualHost("w", []string{"b"}, dt.PrefixRoute("/", "c", 0), noHeaderName)),
			`route "r": virtual_hosts[1].routes[1].match.headers[2].name: must not be empty`},
		{"header regex", xdsresource.RouteType, dt.RouteConfig("r", dt.VirtualHost("v", []string{"a"}, badHeaderRegex)),
			`route "r": virtual_hosts[0].routes[0].match.headers[0].string_match.safe_regex: invalid RE2: missing closing )`},
		{"treat missing header as empty", xdsresource.RouteType, dt.RouteConfig("r", dt.VirtualHost("v", []string{"a"}, missingEmpty)),
			`route "r": virtual_hosts[0].routes[0].match.headers[0].treat_missing_header_as_empty: not supported`},
		{"weighted cluster without name", xdsresource.RouteType, dt.RouteConfig("r", dt.VirtualHost("v", []string{"a"}, noWeightedName)),
			`route "r": virtual_hosts[0].routes[0].route.weighted_clusters.clusters[1].name: must not be empty`},
		{"fallback not list", xdsresource.RouteType, dt.RouteConfig("r", dt.VirtualHost("v", []string{"a"}, badFallback)),
			`route "r": virtual_hosts[0].routes[0].metadata.filter_metadata["weft.fallback"].clusters: must be a list of cluster names`},
		{"empty route name", xdsresource.RouteType, dt.RouteConfig(""), `route "": name: must not be empty`},
		{"port zero", xdsresource.ListenerType, noPort,
			`listener "outbound": address.socket_address.port_value: must be 1..65535, got 0`},
		{"two filters", xdsresource.ListenerType, twoFilters,
			`listener "in": filter_chains[0].filters[0].typed_config: only envoy.filters.network.rbac may precede the terminal filter, got "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager"`},
		{"duplicate chain", xdsresource.ListenerType, dt.Listener("in", dt.MustAddr("127.0.0.1:15006"), dt.HTTPChain(80, "r"), dt.TCPChain(80, "c")),
			`listener "in": filter_chains[1].filter_chain_match: same match as filter_chains[0]`},
		{"no chains", xdsresource.ListenerType, dt.Listener("in", dt.MustAddr("127.0.0.1:15006")),
			`listener "in": filter_chains: no filter chains and no default_filter_chain`},
		{"hostname endpoint", xdsresource.EndpointType, dnsEP,
			`endpoints "c": endpoints[0].lb_endpoints[0].endpoint.address.socket_address.address: not an IP literal: "reviews.shop"`},
		{"maglev", xdsresource.ClusterType, badLB, `cluster "c": lb_policy: unsupported MAGLEV`},
		{"zero max connections", xdsresource.ClusterType, zeroCB, `cluster "c": circuit_breakers.thresholds[0].max_connections: must be positive`},
		{"logical dns", xdsresource.ClusterType, &clusterv3.Cluster{Name: "c", ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_LOGICAL_DNS}},
			`cluster "c": type: unsupported discovery type LOGICAL_DNS (want EDS, STATIC or ORIGINAL_DST)`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := xdsresource.Decode(tc.typeURL, dt.Any(tc.msg))
			if err == nil {
				t.Fatalf("Decode: no error, want %q", tc.want)
			}
			if err.Error() != tc.want {
				t.Errorf("Decode error\n got: %s\nwant: %s", err, tc.want)
			}
			if !errors.Is(err, xdsresource.ErrInvalid) {
				t.Errorf("error does not wrap ErrInvalid")
			}
		})
	}
}

func TestDecodeEnvelope(t *testing.T) {
	tests := []struct {
		name    string
		typeURL string
		a       *anypb.Any
		want    string
	}{
		{"nil", xdsresource.ListenerType, nil, "invalid resource: nil resource of type " + xdsresource.ListenerType},
		{"type mismatch", xdsresource.ListenerType, dt.Any(dt.RouteConfig("r")),
			`invalid resource: resource has type "` + xdsresource.RouteType + `", want "` + xdsresource.ListenerType + `"`},
		{"unknown type", "type.googleapis.com/x.Y", &anypb.Any{TypeUrl: "type.googleapis.com/x.Y"}, `invalid resource: unsupported type "type.googleapis.com/x.Y"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := xdsresource.Decode(tc.typeURL, tc.a)
			if err == nil || err.Error() != tc.want {
				t.Fatalf("got %v, want %q", err, tc.want)
			}
		})
	}
	if _, _, err := xdsresource.Decode(xdsresource.RouteType, &anypb.Any{TypeUrl: xdsresource.RouteType, Value: []byte{0xff}}); !errors.Is(err, xdsresource.ErrInvalid) {
		t.Errorf("malformed bytes: got %v, want ErrInvalid", err)
	}
}

func TestDecodeValid(t *testing.T) {
	route := dt.PrefixRoute("/api", "a", 2*time.Second)
	route.Match.Headers = []*routev3.HeaderMatcher{
		{Name: ":method", HeaderMatchSpecifier: &routev3.HeaderMatcher_StringMatch{StringMatch: &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Exact{Exact: "GET"}}}},
		{Name: "End-User", HeaderMatchSpecifier: &routev3.HeaderMatcher_PresentMatch{PresentMatch: true}, InvertMatch: true},
	}
	route.GetRoute().RetryPolicy = &routev3.RetryPolicy{RetryOn: "5xx, connect-failure", NumRetries: wrapperspb.UInt32(2), PerTryTimeout: durationpb.New(300 * time.Millisecond)}
	route.GetRoute().ClusterSpecifier = &routev3.RouteAction_WeightedClusters{WeightedClusters: &routev3.WeightedCluster{Clusters: []*routev3.WeightedCluster_ClusterWeight{
		{Name: "a", Weight: wrapperspb.UInt32(90)}, {Name: "b", Weight: wrapperspb.UInt32(10)}}}}
	fb, _ := structpb.NewStruct(map[string]any{"clusters": []any{"backup"}})
	route.Metadata = &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{"weft.fallback": fb}}
	name, v, err := xdsresource.Decode(xdsresource.RouteType, dt.Any(dt.RouteConfig("outbound|9080", dt.VirtualHost("reviews", []string{"Reviews", "reviews:9080"}, route))))
	if err != nil {
		t.Fatal(err)
	}
	if name != "outbound|9080" {
		t.Errorf("name = %q", name)
	}
	want := &xdsresource.RouteConfig{Name: "outbound|9080", VirtualHosts: []xdsresource.VirtualHost{{
		Name: "reviews", Domains: []string{"reviews", "reviews:9080"},
		Routes: []xdsresource.Route{{
			Match: xdsresource.RouteMatch{PathKind: xdsresource.PathPrefix, Path: "/api", CaseSensitive: true, Headers: []xdsresource.HeaderMatch{
				{Name: ":method", Kind: xdsresource.StringExact, Value: "GET"},
				{Name: "end-user", Kind: xdsresource.StringPresent, Invert: true},
			}},
			Clusters: []xdsresource.WeightedCluster{{Name: "a", Weight: 90}, {Name: "b", Weight: 10}},
			Timeout:  2 * time.Second,
			Retry: &xdsresource.RetryPolicy{RetryOn: []string{"5xx", "connect-failure"}, NumRetries: 2, PerTryTimeout: 300 * time.Millisecond,
				BackoffBase: 25 * time.Millisecond, BackoffMax: 250 * time.Millisecond},
			Fallback: []string{"backup"},
		}},
	}}}
	if d := cmp.Diff(want, v, cmpopts.IgnoreUnexported()); d != "" {
		t.Errorf("route (-want +got):\n%s", d)
	}

	c := dt.EDSCluster("outbound|9080||reviews.shop.svc.cluster.local", dt.ClusterOpts{LB: clusterv3.Cluster_RING_HASH, HTTP2: true, MaxConns: 10, Connect: time.Second})
	_, cv, err := xdsresource.Decode(xdsresource.ClusterType, dt.Any(c))
	if err != nil {
		t.Fatal(err)
	}
	wantC := &xdsresource.Cluster{Name: c.Name, EDSName: c.Name, LB: xdsresource.RingHash, RingMin: 1024, RingMax: xdsresource.MaxRingSize,
		ConnectTimeout: time.Second, HTTP2: true, Limits: xdsresource.Thresholds{MaxConnections: 10, MaxPendingRequests: 1024, MaxRequests: 1024, MaxRetries: 3}, PanicThreshold: 50}
	if d := cmp.Diff(wantC, cv); d != "" {
		t.Errorf("cluster (-want +got):\n%s", d)
	}
	if tu, names := cv.(xdsresource.Referrer).References(); tu != xdsresource.EndpointType || !cmp.Equal(names, []string{c.Name}) {
		t.Errorf("cluster References = %s %v", tu, names)
	}

	l := dt.Listener("inbound", dt.MustAddr("10.0.0.1:15006"), dt.HTTPChain(9080, "inbound|9080"), dt.TCPChain(3306, "inbound|3306||"))
	_, lv, err := xdsresource.Decode(xdsresource.ListenerType, dt.Any(l))
	if err != nil {
		t.Fatal(err)
	}
	if tu, names := lv.(xdsresource.Referrer).References(); tu != xdsresource.RouteType || !cmp.Equal(names, []string{"inbound|9080"}) {
		t.Errorf("listener References = %s %v", tu, names)
	}
	if got := lv.(*xdsresource.Listener).Addr; got != netip.MustParseAddrPort("10.0.0.1:15006") {
		t.Errorf("listener addr = %v", got)
	}

	cla := dt.Endpoints("c", dt.MustAddr("10.0.0.1:15006"), dt.MustAddr("[::1]:15006"))
	cla.Endpoints[0].LoadBalancingWeight = wrapperspb.UInt32(3)
	cla.Endpoints[0].Locality = &corev3.Locality{Region: "eu", Zone: "a"}
	cla.Endpoints[0].LbEndpoints[1].HealthStatus = corev3.HealthStatus_UNHEALTHY
	cla.Endpoints[0].LbEndpoints[1].LoadBalancingWeight = wrapperspb.UInt32(2)
	_, ev, err := xdsresource.Decode(xdsresource.EndpointType, dt.Any(cla))
	if err != nil {
		t.Fatal(err)
	}
	wantE := &xdsresource.Endpoints{Name: "c", Endpoints: []xdsresource.Endpoint{
		{Addr: netip.MustParseAddrPort("10.0.0.1:15006"), Weight: 3, Healthy: true, Locality: "eu/a/"},
		{Addr: netip.MustParseAddrPort("[::1]:15006"), Weight: 6, Healthy: false, Locality: "eu/a/"},
	}}
	if d := cmp.Diff(wantE, ev, cmp.Comparer(func(a, b netip.AddrPort) bool { return a == b })); d != "" {
		t.Errorf("endpoints (-want +got):\n%s", d)
	}
}

// TestDecodeEndpointPeer: only filter_metadata weft.peer = "sidecar" marks an
// endpoint as a peer sidecar's inbound listener; anything else is the app.
func TestDecodeEndpointPeer(t *testing.T) {
	md := func(key, field string, v *structpb.Value) *corev3.Metadata {
		return &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{key: {Fields: map[string]*structpb.Value{field: v}}}}
	}
	for _, tc := range []struct {
		name string
		md   *corev3.Metadata
		want bool
	}{
		{"no metadata", nil, false},
		{"peer sidecar", md("weft", "peer", structpb.NewStringValue("sidecar")), true},
		{"other value", md("weft", "peer", structpb.NewStringValue("app")), false},
		{"number", md("weft", "peer", structpb.NewNumberValue(1)), false},
		{"other key", md("istio", "peer", structpb.NewStringValue("sidecar")), false},
		{"identity only", md("weft", "namespace", structpb.NewStringValue("shop")), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cla := dt.Endpoints("c", dt.MustAddr("10.0.0.1:15006"))
			cla.Endpoints[0].LbEndpoints[0].Metadata = tc.md
			_, v, err := xdsresource.Decode(xdsresource.EndpointType, dt.Any(cla))
			if err != nil {
				t.Fatal(err)
			}
			if got := v.(*xdsresource.Endpoints).Endpoints[0].Peer; got != tc.want {
				t.Errorf("Peer = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestDecodeEndpointGroupMeta: an endpoint without its own "weft" metadata
// takes its locality group's; one with its own is judged by it alone (pilot
// writes the group's common tuple once and only differing endpoints' own).
func TestDecodeEndpointGroupMeta(t *testing.T) {
	weft := func(fields map[string]string) *corev3.Metadata {
		f := map[string]*structpb.Value{}
		for k, v := range fields {
			f[k] = structpb.NewStringValue(v)
		}
		return &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{"weft": {Fields: f}}}
	}
	both := map[string]string{"peer": "sidecar", "mtls": "true"}
	for _, tc := range []struct {
		name             string
		group, own       *corev3.Metadata
		wantPeer, wantTL bool
	}{
		{"neither", nil, nil, false, false},
		{"group only", weft(both), nil, true, true},
		{"own only", nil, weft(both), true, true},
		{"own replaces group", weft(both), weft(map[string]string{"namespace": "shop"}), false, false},
		{"own peer, group mtls", weft(map[string]string{"mtls": "true"}), weft(map[string]string{"peer": "sidecar"}), true, false},
		{"group under another key", &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{"istio": weft(both).FilterMetadata["weft"]}}, nil, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cla := dt.Endpoints("c", dt.MustAddr("10.0.0.1:15006"))
			cla.Endpoints[0].Metadata = tc.group
			cla.Endpoints[0].LbEndpoints[0].Metadata = tc.own
			_, v, err := xdsresource.Decode(xdsresource.EndpointType, dt.Any(cla))
			if err != nil {
				t.Fatal(err)
			}
			ep := v.(*xdsresource.Endpoints).Endpoints[0]
			if ep.Peer != tc.wantPeer || ep.MTLS != tc.wantTL {
				t.Errorf("Peer, MTLS = %v, %v; want %v, %v", ep.Peer, ep.MTLS, tc.wantPeer, tc.wantTL)
			}
		})
	}
}

// An action without a timeout takes the sidecar's default (DefaultTimeout); an
// explicit 0 disables it, as in Envoy.
func TestDecodeRouteTimeoutUnsetVsZero(t *testing.T) {
	for _, tc := range []struct {
		timeout     time.Duration // < 0: unset
		want        time.Duration
		wantDefault bool
	}{{-1, 0, true}, {0, 0, false}, {3 * time.Second, 3 * time.Second, false}} {
		_, v, err := xdsresource.Decode(xdsresource.RouteType, dt.Any(dt.RouteConfig("r", dt.VirtualHost("v", []string{"*"}, dt.PrefixRoute("/", "c", tc.timeout)))))
		if err != nil {
			t.Fatal(err)
		}
		r := v.(*xdsresource.RouteConfig).VirtualHosts[0].Routes[0]
		if r.Timeout != tc.want || r.DefaultTimeout != tc.wantDefault {
			t.Errorf("timeout %v: decoded %v default=%v, want %v default=%v", tc.timeout, r.Timeout, r.DefaultTimeout, tc.want, tc.wantDefault)
		}
	}
}

// retry_back_off: absent gives Envoy's defaults; a base alone gets 10× it as max.
func TestDecodeRetryBackOff(t *testing.T) {
	for _, tc := range []struct {
		name      string
		bo        *routev3.RetryPolicy_RetryBackOff
		base, max time.Duration
	}{
		{"absent", nil, 25 * time.Millisecond, 250 * time.Millisecond},
		{"base only", &routev3.RetryPolicy_RetryBackOff{BaseInterval: durationpb.New(100 * time.Millisecond)}, 100 * time.Millisecond, time.Second},
		{"both", &routev3.RetryPolicy_RetryBackOff{BaseInterval: durationpb.New(10 * time.Millisecond), MaxInterval: durationpb.New(40 * time.Millisecond)}, 10 * time.Millisecond, 40 * time.Millisecond},
		{"max equals base", &routev3.RetryPolicy_RetryBackOff{BaseInterval: durationpb.New(10 * time.Millisecond), MaxInterval: durationpb.New(10 * time.Millisecond)}, 10 * time.Millisecond, 10 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := dt.PrefixRoute("/", "c", 0)
			r.GetRoute().RetryPolicy = &routev3.RetryPolicy{RetryOn: "5xx", RetryBackOff: tc.bo}
			_, v, err := xdsresource.Decode(xdsresource.RouteType, dt.Any(dt.RouteConfig("r", dt.VirtualHost("v", []string{"a"}, r))))
			if err != nil {
				t.Fatal(err)
			}
			p := v.(*xdsresource.RouteConfig).VirtualHosts[0].Routes[0].Retry
			if p.BackoffBase != tc.base || p.BackoffMax != tc.max {
				t.Errorf("back-off %v..%v, want %v..%v", p.BackoffBase, p.BackoffMax, tc.base, tc.max)
			}
		})
	}
}
