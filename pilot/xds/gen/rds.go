package gen

import (
	"slices"
	"strconv"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"github.com/weft-mesh/weft/pilot/ir"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// FallbackMetadataKey is the Route filter_metadata key carrying a rule's fallback
// chain: {"clusters": ["outbound|...", ...]}, tried in order by our sidecar when
// the route's destinations fail. Other clients ignore route metadata.
const FallbackMetadataKey = "weft.fallback"

// vhostSpec is one Service port to render as a virtual host. shortNames adds the
// bare "<svc>" domains, which are only unambiguous within the Service's namespace.
type vhostSpec struct {
	svc        *ir.Service
	port       *ir.Port
	rules      []*ir.Rule // what svc.RulesFor says for the client
	shortNames bool
	vips       bool // also the Service's VIPs as domains (a sidecar's outbound routes)
}

func routeConfig(name string, vhosts []vhostSpec) *routev3.RouteConfiguration {
	rc := &routev3.RouteConfiguration{Name: name, VirtualHosts: make([]*routev3.VirtualHost, 0, len(vhosts))}
	for _, v := range vhosts {
		ds := domains(v.svc, v.port.Port, v.shortNames)
		if v.vips {
			ds = append(ds, vipDomains(v.svc, v.port.Port)...)
		}
		rc.VirtualHosts = append(rc.VirtualHosts, &routev3.VirtualHost{
			Name:    APIListenerName(v.svc.Host, v.port.Port),
			Domains: ds,
			Routes:  routes(v.port, v.rules),
		})
	}
	return rc
}

// domains are the names API.md gives a Service, each also with ":<port>".
func domains(svc *ir.Service, port uint32, shortNames bool) []string {
	p := ":" + strconv.FormatUint(uint64(port), 10)
	names := []string{svc.Name + "." + svc.Namespace, svc.Name + "." + svc.Namespace + ".svc", svc.Host}
	if shortNames {
		names = append([]string{svc.Name}, names...)
	}
	out := make([]string, 0, 2*len(names))
	for _, n := range names {
		out = append(out, n, n+p)
	}
	return out
}

// routes renders a port's rules in order; nil rules give one default route to
// the port's cluster. Envoy routes have no OR of matches, so a rule with n
// matches becomes n routes with the same action.
func routes(p *ir.Port, rules []*ir.Rule) []*routev3.Route {
	if rules == nil {
		return []*routev3.Route{{
			Match: &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}},
			// No timeout: the client's default route timeout applies (Envoy's and
			// our sidecar's: 15s).
			Action: &routev3.Route_Route{Route: &routev3.RouteAction{ClusterSpecifier: &routev3.RouteAction_Cluster{Cluster: p.Cluster}}},
		}}
	}
	var out []*routev3.Route
	for _, r := range rules {
		matches := r.Matches
		if len(matches) == 0 {
			matches = []ir.Match{{}}
		}
		for _, m := range matches {
			rt := &routev3.Route{Name: r.Name, Match: routeMatch(m), Metadata: fallbackMetadata(r.Fallback)}
			if len(r.Destinations) == 0 {
				// Every destination was left out by compile: fail closed rather
				// than let the request fall through to a later rule.
				rt.Action = &routev3.Route_DirectResponse{DirectResponse: &routev3.DirectResponseAction{Status: 503}}
			} else {
				rt.Action = &routev3.Route_Route{Route: routeAction(r, p.Protocol)}
			}
			out = append(out, rt)
		}
	}
	return out
}

func routeMatch(m ir.Match) *routev3.RouteMatch {
	rm := &routev3.RouteMatch{}
	switch {
	case m.Path == nil:
		rm.PathSpecifier = &routev3.RouteMatch_Prefix{Prefix: "/"}
	case m.Path.Kind == ir.MatchExact:
		rm.PathSpecifier = &routev3.RouteMatch_Path{Path: m.Path.Value}
	case m.Path.Kind == ir.MatchRegex:
		rm.PathSpecifier = &routev3.RouteMatch_SafeRegex{SafeRegex: &matcherv3.RegexMatcher{Regex: m.Path.Value}}
	default:
		rm.PathSpecifier = &routev3.RouteMatch_Prefix{Prefix: m.Path.Value}
	}
	for _, h := range m.Headers {
		rm.Headers = append(rm.Headers, headerMatcher(h.Name, h.StringMatch))
	}
	if m.Method != "" {
		rm.Headers = append(rm.Headers, headerMatcher(":method", ir.StringMatch{Kind: ir.MatchExact, Value: m.Method}))
	}
	return rm
}

func headerMatcher(name string, m ir.StringMatch) *routev3.HeaderMatcher {
	hm := &routev3.HeaderMatcher{Name: name}
	sm := &matcherv3.StringMatcher{}
	switch m.Kind {
	case ir.MatchPresent:
		hm.HeaderMatchSpecifier = &routev3.HeaderMatcher_PresentMatch{PresentMatch: true}
		return hm
	case ir.MatchPrefix:
		sm.MatchPattern = &matcherv3.StringMatcher_Prefix{Prefix: m.Value}
	case ir.MatchRegex:
		sm.MatchPattern = &matcherv3.StringMatcher_SafeRegex{SafeRegex: &matcherv3.RegexMatcher{Regex: m.Value}}
	default:
		sm.MatchPattern = &matcherv3.StringMatcher_Exact{Exact: m.Value}
	}
	hm.HeaderMatchSpecifier = &routev3.HeaderMatcher_StringMatch{StringMatch: sm}
	return hm
}

func routeAction(r *ir.Rule, proto ir.Protocol) *routev3.RouteAction {
	a := &routev3.RouteAction{}
	if r.Timeout > 0 {
		// Unset, the client's default route timeout applies (Envoy's and our
		// sidecar's: 15s); the API has no way to disable it (timeouts are positive).
		a.Timeout = durationpb.New(r.Timeout)
	}
	if len(r.Destinations) == 1 {
		a.ClusterSpecifier = &routev3.RouteAction_Cluster{Cluster: r.Destinations[0].Cluster}
	} else {
		wc := &routev3.WeightedCluster{}
		for _, d := range r.Destinations {
			wc.Clusters = append(wc.Clusters, &routev3.WeightedCluster_ClusterWeight{Name: d.Cluster, Weight: wrapperspb.UInt32(d.Weight)})
		}
		a.ClusterSpecifier = &routev3.RouteAction_WeightedClusters{WeightedClusters: wc}
	}
	if proto == ir.ProtocolGRPC && r.Timeout > 0 {
		// grpc-go ignores RouteAction.timeout and honours max_stream_duration.
		a.MaxStreamDuration = &routev3.RouteAction_MaxStreamDuration{MaxStreamDuration: durationpb.New(r.Timeout)}
	}
	if rt := r.Retries; rt != nil && rt.Attempts > 0 {
		a.RetryPolicy = &routev3.RetryPolicy{
			RetryOn:       retryOn(rt.RetryOn, proto == ir.ProtocolGRPC),
			NumRetries:    wrapperspb.UInt32(rt.Attempts), // >= 1: grpc-go NACKs 0
			PerTryTimeout: dur(rt.PerTryTimeout),
		}
		if rt.BackoffBase > 0 {
			// max_interval absent is 10× the base for Envoy, grpc-go and Weft alike.
			a.RetryPolicy.RetryBackOff = &routev3.RetryPolicy_RetryBackOff{BaseInterval: durationpb.New(rt.BackoffBase), MaxInterval: dur(rt.BackoffMax)}
		}
	}
	return a
}

// defaultRetryOn is used when a rule sets attempts but no retryOn: only failures
// where the request cannot have reached the application.
var defaultRetryOn = []string{"connect-failure", "refused-stream"}

// retryOn maps the API's tokens to Envoy's retry_on (the API uses Envoy's names).
// grpc-go drops every token except gRPC status names, so for GRPC ports any
// transport or 5xx-class condition also adds "unavailable", the status those
// failures surface as in gRPC.
func retryOn(tokens []string, grpc bool) string {
	if len(tokens) == 0 {
		tokens = defaultRetryOn
	}
	out := make([]string, 0, len(tokens)+1)
	unavailable := false
	for _, t := range tokens {
		out = append(out, t)
		switch t {
		case "5xx", "gateway-error", "reset", "connect-failure", "refused-stream":
			unavailable = true
		}
	}
	if grpc && unavailable && !slices.Contains(out, "unavailable") {
		out = append(out, "unavailable")
	}
	return strings.Join(out, ",")
}

func fallbackMetadata(clusters []string) *corev3.Metadata {
	if len(clusters) == 0 {
		return nil
	}
	vals := make([]*structpb.Value, len(clusters))
	for i, c := range clusters {
		vals[i] = structpb.NewStringValue(c)
	}
	return &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{FallbackMetadataKey: {Fields: map[string]*structpb.Value{
		"clusters": structpb.NewListValue(&structpb.ListValue{Values: vals}),
	}}}}
}
