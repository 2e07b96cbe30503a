//lint:file-ignore SA1019 deprecated Envoy header specifiers are still sent by peers; the fast path must read them as the reference does.

package xdsresource_test

import (
	"regexp"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	dt "github.com/weft-mesh/weft/sidecar/dataplane/dataplanetest"
	"github.com/weft-mesh/weft/sidecar/xdsresource"
)

// checkRouteWire is the differential check of RDS decoding's two paths: when
// the fast path takes b, the reference path must accept it too and decode the
// same value. It reports whether the fast path took b.
func checkRouteWire(t *testing.T, b []byte) bool {
	t.Helper()
	fast, ok := xdsresource.FastRouteConfig(b)
	if !ok {
		return false
	}
	ref, err := xdsresource.ReferenceRouteConfig(b)
	if err != nil {
		t.Fatalf("the fast path takes what the reference path refuses: %v", err)
	}
	if d := cmp.Diff(ref, fast, cmp.Comparer(func(a, b *regexp.Regexp) bool {
		return (a == nil) == (b == nil) && (a == nil || a.String() == b.String())
	})); d != "" {
		t.Fatalf("the fast path decodes differently (-reference +fast):\n%s", d)
	}
	return true
}

// pilotRoutes is a route configuration of the shape pilot generates: the one
// the fast path is for.
func pilotRoutes() *routev3.RouteConfiguration {
	hdr := func(name string, sm *matcherv3.StringMatcher) *routev3.HeaderMatcher {
		return &routev3.HeaderMatcher{Name: name, HeaderMatchSpecifier: &routev3.HeaderMatcher_StringMatch{StringMatch: sm}}
	}
	exact := func(v string) *matcherv3.StringMatcher {
		return &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Exact{Exact: v}}
	}
	var vhs []*routev3.VirtualHost
	for _, svc := range []string{"a", "b"} {
		c := "outbound|8080||" + svc + ".ns.svc.cluster.local"
		r0 := dt.PrefixRoute("/api/", c, 2*time.Second)
		r0.Name = "rule-0"
		r0.Match.Headers = []*routev3.HeaderMatcher{hdr("X-Tenant", exact("t0")),
			hdr("x-b", &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Prefix{Prefix: "p"}}),
			hdr("x-c", &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Suffix{Suffix: "s"}, IgnoreCase: false}),
			hdr("x-d", &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Contains{Contains: "c"}}),
			{Name: "x-e", HeaderMatchSpecifier: &routev3.HeaderMatcher_PresentMatch{PresentMatch: false}, InvertMatch: true},
			{Name: "x-f"},
			{Name: "x-g", HeaderMatchSpecifier: &routev3.HeaderMatcher_ExactMatch{ExactMatch: "legacy"}, InvertMatch: true},
			{Name: "x-h", HeaderMatchSpecifier: &routev3.HeaderMatcher_PrefixMatch{PrefixMatch: "lp"}}}
		r1 := dt.PrefixRoute("", c, 0)
		r1.Match.PathSpecifier = &routev3.RouteMatch_Path{Path: "/Exact"}
		r1.GetRoute().Timeout = nil
		r2 := dt.PrefixRoute("/", c, 1500*time.Millisecond)
		r2.Name = "rule-0" // the same name in another place: interned
		vhs = append(vhs, dt.VirtualHost(svc+".ns.svc.cluster.local:8080", []string{svc, svc + ":8080", "*." + svc + ".example", "Upper." + svc}, r0, r1, r2))
	}
	vhs = append(vhs, dt.VirtualHost("empty", []string{"*"}))
	return dt.RouteConfig("outbound|8080", vhs...)
}

func marshal(t testing.TB, m proto.Message) []byte {
	t.Helper()
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// routeWireCases are route configurations by what they test, and whether the
// fast path takes them (false: the reference path decodes them, or refuses).
func routeWireCases(t testing.TB) []struct {
	name string
	b    []byte
	fast bool
} {
	type c = struct {
		name string
		b    []byte
		fast bool
	}
	edit := func(fn func(rc *routev3.RouteConfiguration)) []byte {
		rc := pilotRoutes()
		fn(rc)
		return marshal(t, rc)
	}
	r0 := func(rc *routev3.RouteConfiguration) *routev3.Route { return rc.VirtualHosts[0].Routes[0] }
	base := marshal(t, pilotRoutes())
	appendField := func(b []byte, num protowire.Number, v string) []byte {
		return protowire.AppendString(protowire.AppendTag(append([]byte(nil), b...), num, protowire.BytesType), v)
	}
	out := []c{
		{"pilot's shape", base, true},
		{"no virtual hosts", marshal(t, &routev3.RouteConfiguration{Name: "r"}), true},
		{"name twice (last wins)", appendField(base, 1, "other"), false},
		{"unknown field", protowire.AppendVarint(protowire.AppendTag(append([]byte(nil), base...), 99, protowire.VarintType), 1), false},
		{"name as a varint", protowire.AppendVarint(protowire.AppendTag(append([]byte(nil), base...), 1, protowire.VarintType), 1), false},
		{"truncated", base[:len(base)-3], false},
		{"empty name", edit(func(rc *routev3.RouteConfiguration) { rc.Name = "" }), false},
		{"long name", edit(func(rc *routev3.RouteConfiguration) { rc.Name = strings.Repeat("n", xdsresource.MaxNameBytes+1) }), false},
		{"duplicate domain", edit(func(rc *routev3.RouteConfiguration) { rc.VirtualHosts[1].Domains[0] = "A" }), false},
		{"bad wildcard", edit(func(rc *routev3.RouteConfiguration) { rc.VirtualHosts[0].Domains[0] = "a*b" }), false},
		{"no domains", edit(func(rc *routev3.RouteConfiguration) { rc.VirtualHosts[0].Domains = nil }), false},
		{"case insensitive", edit(func(rc *routev3.RouteConfiguration) { r0(rc).Match.CaseSensitive = wrapperspb.Bool(false) }), false},
		{"regex path", edit(func(rc *routev3.RouteConfiguration) {
			r0(rc).Match.PathSpecifier = &routev3.RouteMatch_SafeRegex{SafeRegex: &matcherv3.RegexMatcher{Regex: "/a.*"}}
		}), false},
		{"no path specifier", edit(func(rc *routev3.RouteConfiguration) { r0(rc).Match.PathSpecifier = nil }), false},
		{"no match", edit(func(rc *routev3.RouteConfiguration) { r0(rc).Match = nil }), false},
		{"query parameters", edit(func(rc *routev3.RouteConfiguration) {
			r0(rc).Match.QueryParameters = []*routev3.QueryParameterMatcher{{Name: "q"}}
		}), false},
		{"empty header name", edit(func(rc *routev3.RouteConfiguration) { r0(rc).Match.Headers[0].Name = "" }), false},
		{"ignore case", edit(func(rc *routev3.RouteConfiguration) { r0(rc).Match.Headers[0].GetStringMatch().IgnoreCase = true }), false},
		{"header regex", edit(func(rc *routev3.RouteConfiguration) {
			r0(rc).Match.Headers[0].GetStringMatch().MatchPattern = &matcherv3.StringMatcher_SafeRegex{SafeRegex: &matcherv3.RegexMatcher{Regex: "t.*"}}
		}), false},
		{"empty string matcher", edit(func(rc *routev3.RouteConfiguration) { r0(rc).Match.Headers[0].GetStringMatch().MatchPattern = nil }), false},
		{"treat missing as empty", edit(func(rc *routev3.RouteConfiguration) { r0(rc).Match.Headers[0].TreatMissingHeaderAsEmpty = true }), false},
		{"too many header matchers", edit(func(rc *routev3.RouteConfiguration) {
			for len(r0(rc).Match.Headers) <= xdsresource.MaxHeaderMatchers {
				r0(rc).Match.Headers = append(r0(rc).Match.Headers, &routev3.HeaderMatcher{Name: "x"})
			}
		}), false},
		{"weighted clusters", edit(func(rc *routev3.RouteConfiguration) {
			r0(rc).GetRoute().ClusterSpecifier = &routev3.RouteAction_WeightedClusters{WeightedClusters: &routev3.WeightedCluster{
				Clusters: []*routev3.WeightedCluster_ClusterWeight{{Name: "a", Weight: wrapperspb.UInt32(1)}}}}
		}), false},
		{"no cluster", edit(func(rc *routev3.RouteConfiguration) { r0(rc).GetRoute().ClusterSpecifier = nil }), false},
		{"empty cluster", edit(func(rc *routev3.RouteConfiguration) {
			r0(rc).GetRoute().ClusterSpecifier = &routev3.RouteAction_Cluster{Cluster: ""}
		}), false},
		{"negative timeout", edit(func(rc *routev3.RouteConfiguration) { r0(rc).GetRoute().Timeout = &durationpb.Duration{Seconds: -1} }), false},
		{"invalid timeout", edit(func(rc *routev3.RouteConfiguration) {
			r0(rc).GetRoute().Timeout = &durationpb.Duration{Seconds: 1, Nanos: -1}
		}), false},
		{"zero timeout", edit(func(rc *routev3.RouteConfiguration) { r0(rc).GetRoute().Timeout = &durationpb.Duration{} }), true},
		{"retry policy", edit(func(rc *routev3.RouteConfiguration) {
			r0(rc).GetRoute().RetryPolicy = &routev3.RetryPolicy{RetryOn: "5xx", NumRetries: wrapperspb.UInt32(2)}
		}), false},
		{"hash policy", edit(func(rc *routev3.RouteConfiguration) {
			r0(rc).GetRoute().HashPolicy = []*routev3.RouteAction_HashPolicy{{PolicySpecifier: &routev3.RouteAction_HashPolicy_Header_{
				Header: &routev3.RouteAction_HashPolicy_Header{HeaderName: "x"}}}}
		}), false},
		{"direct response", edit(func(rc *routev3.RouteConfiguration) {
			r0(rc).Action = &routev3.Route_DirectResponse{DirectResponse: &routev3.DirectResponseAction{Status: 503}}
		}), false},
		{"no action", edit(func(rc *routev3.RouteConfiguration) { r0(rc).Action = nil }), false},
		{"fallback metadata", edit(func(rc *routev3.RouteConfiguration) {
			s, _ := structpb.NewStruct(map[string]any{"clusters": []any{"outbound|8080||b.ns.svc.cluster.local"}})
			r0(rc).Metadata = &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{xdsresource.FallbackMetadataKey: s}}
		}), false},
	}
	// Invalid UTF-8 in a route name (proto3 refuses it).
	bad := pilotRoutes()
	bad.VirtualHosts[0].Routes[0].Name = "\xff"
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(bad)
	if err == nil {
		out = append(out, c{"invalid UTF-8 route name", b, false})
	} else {
		// The marshaller refuses it too: splice the byte in by hand.
		bad.VirtualHosts[0].Routes[0].Name = "\x01"
		b := marshal(t, bad)
		i := strings.IndexByte(string(b), 0x01)
		b[i] = 0xff
		out = append(out, c{"invalid UTF-8 route name", b, false})
	}
	return out
}

// TestRouteWire checks each case through both paths, and that the fast path
// takes pilot's shapes and gives up on the others.
func TestRouteWire(t *testing.T) {
	for _, tc := range routeWireCases(t) {
		t.Run(tc.name, func(t *testing.T) {
			if got := checkRouteWire(t, tc.b); got != tc.fast {
				_, err := xdsresource.ReferenceRouteConfig(tc.b)
				t.Fatalf("fast path took it: %v, want %v (reference path: %v)", got, tc.fast, err)
			}
		})
	}
}

// TestRouteWireGoldens: every route configuration pilot's gen goldens hold
// decodes the same through both paths.
func TestRouteWireGoldens(t *testing.T) {
	n, fast := 0, 0
	for _, r := range goldenResources(t) {
		if _, ok := r.full.(*routev3.RouteConfiguration); !ok {
			continue
		}
		n++
		if checkRouteWire(t, marshal(t, r.full)) {
			fast++
		}
	}
	if n == 0 || fast == 0 {
		t.Fatalf("%d route configurations in the goldens, %d on the fast path", n, fast)
	}
	t.Logf("%d of %d golden route configurations on the fast path", fast, n)
}

// FuzzRouteWire is checkRouteWire on any bytes.
func FuzzRouteWire(f *testing.F) {
	for _, tc := range routeWireCases(f) {
		f.Add(tc.b)
	}
	f.Fuzz(func(t *testing.T, b []byte) { checkRouteWire(t, b) })
}
