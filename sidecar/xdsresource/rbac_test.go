//lint:file-ignore SA1019 deprecated Envoy fields are still sent by peers; decoding them is deliberate.
package xdsresource_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	rbacv3 "github.com/envoyproxy/go-control-plane/envoy/config/rbac/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	rbachttpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rbac/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	rbacnetv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/rbac/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/weft-mesh/weft/sidecar/authz"
	dt "github.com/weft-mesh/weft/sidecar/dataplane/dataplanetest"
	"github.com/weft-mesh/weft/sidecar/xdsresource"
)

const (
	frontend = "spiffe://cluster.local/ns/shop/sa/frontend"
	bot      = "spiffe://cluster.local/ns/t42/sa/bot"
)

type policies = map[string]*rbacv3.Policy

// inboundWithRBAC is an inbound listener as gen emits it: an HTTP chain with
// weft.override, DENY, ALLOW (one dry-run policy in shadow_rules), AUDIT, then
// the router; a TCP chain with network RBAC; the Overrides' TTLs in metadata.
func inboundWithRBAC() *listenerv3.Listener {
	l := dt.Listener("inbound", dt.MustAddr("0.0.0.0:15006"), dt.HTTPChain(9080, "r"), dt.TCPChain(3306, "c"))
	block := dt.Policy([]*rbacv3.Permission{dt.OrRules(dt.PathPrefix("/reviews/"))}, []*rbacv3.Principal{dt.OrIDs(dt.Principal(bot))})
	readers := dt.Policy([]*rbacv3.Permission{dt.AndRules(dt.OrRules(dt.Method("GET")), dt.OrRules(dt.PathPrefix("/reviews/")), dt.OrRules(dt.Port(9080)))},
		[]*rbacv3.Principal{dt.AndIDs(dt.OrIDs(dt.Principal(frontend)), dt.OrIDs(dt.Namespace("cluster.local", "shop")))})
	denyPHP := dt.Policy([]*rbacv3.Permission{dt.OrRules(dt.PathSuffix(".php"), dt.PathExact("/admin"))}, []*rbacv3.Principal{dt.AnyPrincipal()})
	dt.WithHTTPFilters(l,
		dt.HTTPRBAC("weft.override", dt.Rules(rbacv3.RBAC_DENY, policies{"shop/block-scraper": block}), nil),
		dt.HTTPRBAC("envoy.filters.http.rbac", dt.Rules(rbacv3.RBAC_DENY, policies{"shop/deny-php": denyPHP}), nil),
		dt.HTTPRBAC("envoy.filters.http.rbac", dt.Rules(rbacv3.RBAC_ALLOW, policies{"shop/readers": readers}), dt.Rules(rbacv3.RBAC_ALLOW, policies{"shop/maybe": readers})),
		dt.HTTPRBAC("envoy.filters.http.rbac", dt.Rules(rbacv3.RBAC_LOG, policies{"shop/audit": dt.Policy([]*rbacv3.Permission{dt.AnyPermission()}, []*rbacv3.Principal{dt.AnyPrincipal()})}), nil),
	)
	dt.WithNetworkRBAC(l,
		dt.NetworkRBAC("weft.override", dt.Rules(rbacv3.RBAC_DENY, policies{"shop/block-scraper": block}), nil),
		dt.NetworkRBAC("envoy.filters.network.rbac", dt.Rules(rbacv3.RBAC_ALLOW, policies{"shop/db": dt.Policy([]*rbacv3.Permission{dt.Port(3306)}, []*rbacv3.Principal{dt.Namespace("cluster.local", "shop")})}), nil),
	)
	return dt.WithOverrides(l, dt.OverrideTTL{Name: "shop/block-scraper", TTL: 2 * time.Second, Revision: 42, ExpiresAt: time.Date(2026, 12, 1, 14, 0, 2, 0, time.UTC)})
}

func decodeListener(t *testing.T, l *listenerv3.Listener) (*xdsresource.Listener, error) {
	t.Helper()
	_, v, err := xdsresource.Decode(xdsresource.ListenerType, dt.Any(l))
	if err != nil {
		return nil, err
	}
	return v.(*xdsresource.Listener), nil
}

func TestDecodeRBAC(t *testing.T) {
	got, err := decodeListener(t, inboundWithRBAC())
	if err != nil {
		t.Fatal(err)
	}
	ex := func(v string) authz.StringMatch { return authz.StringMatch{Kind: authz.Exact, Value: v} }
	pre := func(v string) authz.StringMatch { return authz.StringMatch{Kind: authz.Prefix, Value: v} }
	id := func(m authz.StringMatch) authz.Principal {
		return authz.Principal{Kind: authz.PrincipalAuthenticated, Name: m}
	}
	or := func(ids ...authz.Principal) authz.Principal {
		return authz.Principal{Kind: authz.PrincipalOr, IDs: ids}
	}
	orP := func(ps ...authz.Permission) authz.Permission {
		return authz.Permission{Kind: authz.PermissionOr, Rules: ps}
	}
	path := func(m authz.StringMatch) authz.Permission {
		return authz.Permission{Kind: authz.PermissionPath, Match: m}
	}
	anyID := authz.Principal{Kind: authz.PrincipalAny}
	block := authz.Policy{Name: "shop/block-scraper", Permissions: []authz.Permission{orP(path(pre("/reviews/")))}, Principals: []authz.Principal{or(id(ex(bot)))}}
	readers := func(name string) authz.Policy {
		return authz.Policy{Name: name,
			Permissions: []authz.Permission{{Kind: authz.PermissionAnd, Rules: []authz.Permission{
				orP(authz.Permission{Kind: authz.PermissionMethod, Match: ex("GET")}), orP(path(pre("/reviews/"))), orP(authz.Permission{Kind: authz.PermissionPort, Port: 9080})}}},
			Principals: []authz.Principal{{Kind: authz.PrincipalAnd, IDs: []authz.Principal{or(id(ex(frontend))), or(id(pre("spiffe://cluster.local/ns/shop/")))}}}}
	}
	wantHTTP := []authz.Filter{
		{Name: "weft.override", Override: true, Rules: &authz.Rules{Action: authz.Deny, Policies: []authz.Policy{block}}},
		{Name: "envoy.filters.http.rbac", Rules: &authz.Rules{Action: authz.Deny, Policies: []authz.Policy{{Name: "shop/deny-php",
			Permissions: []authz.Permission{orP(path(authz.StringMatch{Kind: authz.Suffix, Value: ".php"}), path(ex("/admin")))}, Principals: []authz.Principal{anyID}}}}},
		{Name: "envoy.filters.http.rbac", Rules: &authz.Rules{Action: authz.Allow, Policies: []authz.Policy{readers("shop/readers")}},
			Shadow: &authz.Rules{Action: authz.Allow, Policies: []authz.Policy{readers("shop/maybe")}}},
		{Name: "envoy.filters.http.rbac", Rules: &authz.Rules{Action: authz.Log, Policies: []authz.Policy{{Name: "shop/audit",
			Permissions: []authz.Permission{{Kind: authz.PermissionAny}}, Principals: []authz.Principal{anyID}}}}},
	}
	if diff := cmp.Diff(wantHTTP, got.FilterChains[0].RBAC); diff != "" {
		t.Errorf("HTTP chain RBAC (-want +got):\n%s", diff)
	}
	wantTCP := []authz.Filter{
		{Name: "weft.override", Override: true, Rules: &authz.Rules{Action: authz.Deny, Policies: []authz.Policy{block}}},
		{Name: "envoy.filters.network.rbac", Rules: &authz.Rules{Action: authz.Allow, Policies: []authz.Policy{{Name: "shop/db",
			Permissions: []authz.Permission{{Kind: authz.PermissionPort, Port: 3306}}, Principals: []authz.Principal{id(pre("spiffe://cluster.local/ns/shop/"))}}}}},
	}
	if diff := cmp.Diff(wantTCP, got.FilterChains[1].RBAC); diff != "" {
		t.Errorf("TCP chain RBAC (-want +got):\n%s", diff)
	}
	if got.FilterChains[1].TCP == nil {
		t.Error("TCP chain lost its tcp_proxy")
	}
	wantO := []authz.Override{{Name: "shop/block-scraper", TTL: 2 * time.Second, Revision: 42, ExpiresAt: time.Date(2026, 12, 1, 14, 0, 2, 0, time.UTC)}}
	if diff := cmp.Diff(wantO, got.Overrides); diff != "" {
		t.Errorf("overrides (-want +got):\n%s", diff)
	}
	// Every decoded chain compiles.
	for i, fc := range got.FilterChains {
		if _, err := authz.New(authz.Config{Filters: fc.RBAC, Overrides: got.Overrides, TCP: fc.TCP != nil}, nil, time.Now()); err != nil {
			t.Errorf("chain %d: %v", i, err)
		}
	}
}

// mutate decodes inboundWithRBAC after change and returns the error text.
func mutate(t *testing.T, change func(l *listenerv3.Listener)) string {
	t.Helper()
	l := inboundWithRBAC()
	change(l)
	_, err := decodeListener(t, l)
	if err == nil {
		return ""
	}
	return err.Error()
}

// httpFilter rewrites the i-th http filter's RBAC of the HTTP chain.
func httpRBAC(i int, f func(r *rbachttpv3.RBAC)) func(*listenerv3.Listener) {
	return func(l *listenerv3.Listener) {
		fc := l.FilterChains[0].Filters[0]
		h := &hcmv3.HttpConnectionManager{}
		if err := fc.GetTypedConfig().UnmarshalTo(h); err != nil {
			panic(err)
		}
		r := &rbachttpv3.RBAC{}
		if err := h.HttpFilters[i].GetTypedConfig().UnmarshalTo(r); err != nil {
			panic(err)
		}
		f(r)
		h.HttpFilters[i].ConfigType = &hcmv3.HttpFilter_TypedConfig{TypedConfig: dt.Any(r)}
		fc.ConfigType = &listenerv3.Filter_TypedConfig{TypedConfig: dt.Any(h)}
	}
}

func hcm(f func(h *hcmv3.HttpConnectionManager)) func(*listenerv3.Listener) {
	return func(l *listenerv3.Listener) {
		fc := l.FilterChains[0].Filters[0]
		h := &hcmv3.HttpConnectionManager{}
		if err := fc.GetTypedConfig().UnmarshalTo(h); err != nil {
			panic(err)
		}
		f(h)
		fc.ConfigType = &listenerv3.Filter_TypedConfig{TypedConfig: dt.Any(h)}
	}
}

func netRBAC(i int, f func(r *rbacnetv3.RBAC)) func(*listenerv3.Listener) {
	return func(l *listenerv3.Listener) {
		nf := l.FilterChains[1].Filters[i]
		r := &rbacnetv3.RBAC{}
		if err := nf.GetTypedConfig().UnmarshalTo(r); err != nil {
			panic(err)
		}
		f(r)
		nf.ConfigType = &listenerv3.Filter_TypedConfig{TypedConfig: dt.Any(r)}
	}
}

// denyPolicy replaces the DENY filter's policy.
func denyPolicy(p *rbacv3.Policy) func(*listenerv3.Listener) {
	return httpRBAC(1, func(r *rbachttpv3.RBAC) { r.Rules.Policies = policies{"shop/deny-php": p} })
}

// setField sets message field num of m to an empty message (fields whose Go
// types live in modules this package does not import: the matcher API, CEL).
func setField(m proto.Message, num byte) {
	if err := (proto.UnmarshalOptions{Merge: true}).Unmarshal([]byte{num<<3 | 2, 0}, m); err != nil {
		panic(err)
	}
}

func withField(p *rbacv3.Policy, num byte) *rbacv3.Policy { setField(p, num); return p }

func nest(d int) *rbacv3.Permission {
	p := dt.AnyPermission()
	for range d - 1 {
		p = &rbacv3.Permission{Rule: &rbacv3.Permission_NotRule{NotRule: p}}
	}
	return p
}

func overrideMeta(f func(v map[string]*structpb.Value)) func(*listenerv3.Listener) {
	return func(l *listenerv3.Listener) {
		f(l.Metadata.FilterMetadata["weft.overrides"].Fields["shop/block-scraper"].GetStructValue().Fields)
	}
}

// TestDecodeRBACRefuses: everything outside pilot's subset is a NACK naming the
// field, never ignored; every bound at the limit and one past it.
func TestDecodeRBACRefuses(t *testing.T) {
	const hf = `listener "inbound": filter_chains[0].filters[0].typed_config.http_filters`
	any1 := []*rbacv3.Principal{dt.AnyPrincipal()}
	manyPolicies := func(n int) func(*listenerv3.Listener) {
		return httpRBAC(1, func(r *rbachttpv3.RBAC) {
			r.Rules.Policies = policies{}
			for i := range n {
				r.Rules.Policies[fmt.Sprintf("ns/p%d", i)] = dt.Policy([]*rbacv3.Permission{dt.AnyPermission()}, any1)
			}
		})
	}
	tests := []struct {
		name   string
		change func(*listenerv3.Listener)
		want   string // "" accepted
	}{
		{"unchanged", func(*listenerv3.Listener) {}, ""},
		{"unknown http filter", hcm(func(h *hcmv3.HttpConnectionManager) {
			h.HttpFilters = append([]*hcmv3.HttpFilter{{Name: "fault", ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: dt.Any(&structpb.Struct{})}}}, h.HttpFilters...)
		}), hf + `[0].typed_config: unsupported HTTP filter type "type.googleapis.com/google.protobuf.Struct" (supported: RBAC, router)`},
		{"router not last", hcm(func(h *hcmv3.HttpConnectionManager) {
			h.HttpFilters = append([]*hcmv3.HttpFilter{dt.Router()}, h.HttpFilters...)
		}),
			hf + `[0]: the router must be the last HTTP filter`},
		{"no router", hcm(func(h *hcmv3.HttpConnectionManager) { h.HttpFilters = h.HttpFilters[:len(h.HttpFilters)-1] }),
			hf + `: the last HTTP filter must be the router`},
		{"disabled filter", hcm(func(h *hcmv3.HttpConnectionManager) { h.HttpFilters[1].Disabled = true }), hf + `[1].disabled: filters disabled by default`},
		{"matcher API", httpRBAC(1, func(r *rbachttpv3.RBAC) { r.Rules = nil; setField(r, 4) }), hf + `[1].typed_config.matcher: the matcher API is not supported`},
		{"no rules at all", httpRBAC(1, func(r *rbachttpv3.RBAC) { r.Rules = nil }), hf + `[1].typed_config: RBAC filter "envoy.filters.http.rbac" has neither rules nor shadow_rules`},
		{"override allows", httpRBAC(0, func(r *rbachttpv3.RBAC) { r.Rules.Action = rbacv3.RBAC_ALLOW }), hf + `[0].typed_config.rules.action: the weft.override filter must DENY`},
		{"override dry run", httpRBAC(0, func(r *rbachttpv3.RBAC) { r.ShadowRules = r.Rules }), hf + `[0].typed_config.shadow_rules: the weft.override filter has no dry run`},
		{"audit logging options", httpRBAC(3, func(r *rbachttpv3.RBAC) { r.Rules.AuditLoggingOptions = &rbacv3.RBAC_AuditLoggingOptions{} }), hf + `[3].typed_config.rules.audit_logging_options: not supported`},
		{"CEL condition", denyPolicy(withField(&rbacv3.Policy{Permissions: []*rbacv3.Permission{dt.AnyPermission()}, Principals: any1}, 4)),
			hf + `[1].typed_config.rules.policies["shop/deny-php"].condition: CEL conditions are not supported`},
		{"empty permissions", denyPolicy(&rbacv3.Policy{Principals: any1}), `policies["shop/deny-php"].permissions: required`},
		{"empty principals", denyPolicy(&rbacv3.Policy{Permissions: []*rbacv3.Permission{dt.AnyPermission()}}), `policies["shop/deny-php"].principals: required`},
		{"header other than :method", denyPolicy(dt.Policy([]*rbacv3.Permission{{Rule: &rbacv3.Permission_Header{Header: &routev3.HeaderMatcher{Name: "x-user", HeaderMatchSpecifier: &routev3.HeaderMatcher_ExactMatch{ExactMatch: "a"}}}}}, any1)),
			`policies["shop/deny-php"].permissions[0].header.name: only :method is supported, got "x-user"`},
		{"method by prefix", denyPolicy(dt.Policy([]*rbacv3.Permission{{Rule: &rbacv3.Permission_Header{Header: &routev3.HeaderMatcher{Name: ":method", HeaderMatchSpecifier: &routev3.HeaderMatcher_PrefixMatch{PrefixMatch: "G"}}}}}, any1)),
			`permissions[0].header: :method takes exact_match or string_match.exact only, got prefix_match`},
		{"method exact_match (deprecated form)", denyPolicy(dt.Policy([]*rbacv3.Permission{{Rule: &rbacv3.Permission_Header{Header: &routev3.HeaderMatcher{Name: ":method", HeaderMatchSpecifier: &routev3.HeaderMatcher_ExactMatch{ExactMatch: "GET"}}}}}, any1)), ""},
		{"inverted method", denyPolicy(dt.Policy([]*rbacv3.Permission{{Rule: &rbacv3.Permission_Header{Header: &routev3.HeaderMatcher{Name: ":method", InvertMatch: true, HeaderMatchSpecifier: &routev3.HeaderMatcher_ExactMatch{ExactMatch: "GET"}}}}}, any1)),
			`permissions[0].header: invert_match and treat_missing_header_as_empty are not supported`},
		{"path regex", denyPolicy(dt.Policy([]*rbacv3.Permission{{Rule: &rbacv3.Permission_UrlPath{UrlPath: &matcherv3.PathMatcher{Rule: &matcherv3.PathMatcher_Path{Path: &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_SafeRegex{SafeRegex: &matcherv3.RegexMatcher{Regex: ".*"}}}}}}}}, any1)),
			`permissions[0].url_path.path: unsupported string match safe_regex (supported: exact, prefix, suffix)`},
		{"path ignore case", denyPolicy(dt.Policy([]*rbacv3.Permission{{Rule: &rbacv3.Permission_UrlPath{UrlPath: &matcherv3.PathMatcher{Rule: &matcherv3.PathMatcher_Path{Path: &matcherv3.StringMatcher{IgnoreCase: true, MatchPattern: &matcherv3.StringMatcher_Exact{Exact: "/a"}}}}}}}, any1)),
			`permissions[0].url_path.path.ignore_case: not supported`},
		{"destination ip", denyPolicy(dt.Policy([]*rbacv3.Permission{{Rule: &rbacv3.Permission_DestinationIp{}}}, any1)),
			`permissions[0]: unsupported permission destination_ip`},
		{"port range", denyPolicy(dt.Policy([]*rbacv3.Permission{{Rule: &rbacv3.Permission_DestinationPortRange{}}}, any1)),
			`permissions[0]: unsupported permission destination_port_range`},
		{"port 0", denyPolicy(dt.Policy([]*rbacv3.Permission{dt.Port(0)}, any1)), `permissions[0].destination_port: must be 1..65535, got 0`},
		{"port 65536", denyPolicy(dt.Policy([]*rbacv3.Permission{dt.Port(65536)}, any1)), `permissions[0].destination_port: must be 1..65535, got 65536`},
		{"any false", denyPolicy(dt.Policy([]*rbacv3.Permission{{Rule: &rbacv3.Permission_Any{}}}, any1)), `permissions[0].any: must be true`},
		{"empty or_rules", denyPolicy(dt.Policy([]*rbacv3.Permission{dt.OrRules()}, any1)), `permissions[0].or_rules.rules: want 1..1024 rules, got 0`},
		{"depth at bound", denyPolicy(dt.Policy([]*rbacv3.Permission{nest(authz.MaxDepth)}, any1)), ""},
		{"depth past bound", denyPolicy(dt.Policy([]*rbacv3.Permission{nest(authz.MaxDepth + 1)}, any1)), `nested deeper than 8`},
		{"source ip principal", denyPolicy(dt.Policy([]*rbacv3.Permission{dt.AnyPermission()}, []*rbacv3.Principal{{Identifier: &rbacv3.Principal_SourceIp{}}})),
			`principals[0]: unsupported principal source_ip`},
		{"header principal", denyPolicy(dt.Policy([]*rbacv3.Permission{dt.AnyPermission()}, []*rbacv3.Principal{{Identifier: &rbacv3.Principal_Header{}}})),
			`principals[0]: unsupported principal header`},
		{"principal suffix", denyPolicy(dt.Policy([]*rbacv3.Permission{dt.AnyPermission()}, []*rbacv3.Principal{{Identifier: &rbacv3.Principal_Authenticated_{Authenticated: &rbacv3.Principal_Authenticated{PrincipalName: &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Suffix{Suffix: "/bot"}}}}}})),
			""},
		{"principal regex", denyPolicy(dt.Policy([]*rbacv3.Permission{dt.AnyPermission()}, []*rbacv3.Principal{{Identifier: &rbacv3.Principal_Authenticated_{Authenticated: &rbacv3.Principal_Authenticated{PrincipalName: &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_SafeRegex{SafeRegex: &matcherv3.RegexMatcher{Regex: ".*"}}}}}}})),
			`principals[0].authenticated.principal_name: unsupported string match safe_regex`},
		{"principal value at bound", denyPolicy(dt.Policy([]*rbacv3.Permission{dt.AnyPermission()}, []*rbacv3.Principal{dt.Principal(strings.Repeat("a", authz.MaxMatchBytes))})), ""},
		{"principal value past bound", denyPolicy(dt.Policy([]*rbacv3.Permission{dt.AnyPermission()}, []*rbacv3.Principal{dt.Principal(strings.Repeat("a", authz.MaxMatchBytes+1))})),
			`principals[0].authenticated.principal_name: is 1025 bytes, limit 1024`},
		{"policies at bound", manyPolicies(authz.MaxPolicies), ""},
		{"policies past bound", manyPolicies(authz.MaxPolicies + 1), hf + `[1].typed_config.rules.policies: 1025 policies, limit 1024`},
		{"unknown action", httpRBAC(1, func(r *rbachttpv3.RBAC) { r.Rules.Action = 7 }), hf + `[1].typed_config.rules.action: unsupported action 7`},
		{"network matcher", netRBAC(1, func(r *rbacnetv3.RBAC) { r.Rules = nil; setField(r, 6) }), `filter_chains[1].filters[1].typed_config.matcher: the matcher API is not supported`},
		{"network continuous", netRBAC(1, func(r *rbacnetv3.RBAC) { r.EnforcementType = rbacnetv3.RBAC_CONTINUOUS }), `filter_chains[1].filters[1].typed_config.enforcement_type: only ONE_TIME_ON_FIRST_BYTE`},
		{"network delay deny", netRBAC(1, func(r *rbacnetv3.RBAC) { r.DelayDeny = durationpb.New(time.Second) }), `filter_chains[1].filters[1].typed_config.delay_deny: not supported`},
		{"network RBAC before HCM", func(l *listenerv3.Listener) {
			l.FilterChains[0].Filters = append([]*listenerv3.Filter{dt.NetworkRBAC("n", dt.Rules(rbacv3.RBAC_DENY, nil), nil)}, l.FilterChains[0].Filters...)
		}, `filter_chains[0].filters[0]: network RBAC before http_connection_manager is not supported`},
		{"other network filter before tcp_proxy", func(l *listenerv3.Listener) {
			l.FilterChains[1].Filters[0] = &listenerv3.Filter{Name: "x", ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: dt.Any(&structpb.Struct{})}}
		}, `filter_chains[1].filters[0].typed_config: only envoy.filters.network.rbac may precede the terminal filter`},
		{"override without ttl entry", func(l *listenerv3.Listener) { delete(l.Metadata.FilterMetadata, "weft.overrides") },
			`filter_chains[0]: Override policy "shop/block-scraper" has no entry in metadata.filter_metadata["weft.overrides"] (its TTL)`},
		{"ttl entry without policy", func(l *listenerv3.Listener) {
			l.Metadata.FilterMetadata["weft.overrides"].Fields["shop/gone"] = l.Metadata.FilterMetadata["weft.overrides"].Fields["shop/block-scraper"]
		}, `metadata.filter_metadata["weft.overrides"]["shop/gone"]: no weft.override policy of this listener has this name`},
		{"ttl missing", overrideMeta(func(v map[string]*structpb.Value) { delete(v, "ttl") }), `["shop/block-scraper"].ttl: 0s outside (0, 1h0m0s] (required)`},
		{"ttl at bound", overrideMeta(func(v map[string]*structpb.Value) { v["ttl"] = structpb.NewStringValue("1h") }), ""},
		{"ttl past bound", overrideMeta(func(v map[string]*structpb.Value) { v["ttl"] = structpb.NewStringValue("1h0m0.001s") }), `.ttl: 1h0m0.001s outside (0, 1h0m0s]`},
		{"ttl not a duration", overrideMeta(func(v map[string]*structpb.Value) { v["ttl"] = structpb.NewStringValue("soon") }), `.ttl: time: invalid duration "soon"`},
		{"ttl a number", overrideMeta(func(v map[string]*structpb.Value) { v["ttl"] = structpb.NewNumberValue(2) }), `.ttl: must be a duration string`},
		{"revision missing", overrideMeta(func(v map[string]*structpb.Value) { delete(v, "revision") }), `.revision: required`},
		{"revision fractional", overrideMeta(func(v map[string]*structpb.Value) { v["revision"] = structpb.NewNumberValue(1.5) }), `.revision: must be a whole number`},
		{"revision negative", overrideMeta(func(v map[string]*structpb.Value) { v["revision"] = structpb.NewNumberValue(-1) }), `.revision: must be a whole number`},
		{"expiresAt not a time", overrideMeta(func(v map[string]*structpb.Value) { v["expiresAt"] = structpb.NewStringValue("tomorrow") }), `.expiresAt: parsing time`},
		{"expiresAt absent", overrideMeta(func(v map[string]*structpb.Value) { delete(v, "expiresAt") }), ""},
		{"unknown override field", overrideMeta(func(v map[string]*structpb.Value) { v["reason"] = structpb.NewStringValue("x") }), `["shop/block-scraper"]: unknown field "reason"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := mutate(t, tt.change)
			switch {
			case tt.want == "" && got != "":
				t.Fatalf("refused: %s", got)
			case tt.want != "" && !strings.Contains(got, tt.want):
				t.Fatalf("error\n %q\nwant it to contain\n %q", got, tt.want)
			}
		})
	}
}

// TestDecodeOverridesBound: MaxOverrides entries decode, one more is refused.
func TestDecodeOverridesBound(t *testing.T) {
	build := func(n int) *listenerv3.Listener {
		l := dt.Listener("inbound", dt.MustAddr("0.0.0.0:15006"), dt.HTTPChain(9080, "r"))
		ps := policies{}
		var os []dt.OverrideTTL
		for i := range n {
			name := fmt.Sprintf("ns/o%d", i)
			ps[name] = dt.Policy([]*rbacv3.Permission{dt.AnyPermission()}, []*rbacv3.Principal{dt.Principal(bot)})
			os = append(os, dt.OverrideTTL{Name: name, TTL: time.Minute, Revision: int64(i)})
		}
		dt.WithHTTPFilters(l, dt.HTTPRBAC("weft.override", dt.Rules(rbacv3.RBAC_DENY, ps), nil))
		return dt.WithOverrides(l, os...)
	}
	if _, err := decodeListener(t, build(authz.MaxOverrides)); err != nil {
		t.Errorf("at the bound: %v", err)
	}
	if _, err := decodeListener(t, build(authz.MaxOverrides+1)); err == nil || !strings.Contains(err.Error(), `metadata.filter_metadata["weft.overrides"]: 257 overrides, limit 256`) {
		t.Errorf("one past: %v", err)
	}
}
