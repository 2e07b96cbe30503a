package dataplanetest

import (
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	rbacv3 "github.com/envoyproxy/go-control-plane/envoy/config/rbac/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	rbachttpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rbac/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	rbacnetv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/rbac/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/types/known/structpb"
)

// RBAC builders in the shape pilot's gen emits (issue9-design.md "Wire"), for
// tests of the sidecar's decoding and enforcement.

// Principal is authenticated.principal_name exact.
func Principal(id string) *rbacv3.Principal {
	return &rbacv3.Principal{Identifier: &rbacv3.Principal_Authenticated_{Authenticated: &rbacv3.Principal_Authenticated{
		PrincipalName: &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Exact{Exact: id}}}}}
}

// Namespace is authenticated.principal_name prefix spiffe://<td>/ns/<ns>/.
func Namespace(td, ns string) *rbacv3.Principal {
	return &rbacv3.Principal{Identifier: &rbacv3.Principal_Authenticated_{Authenticated: &rbacv3.Principal_Authenticated{
		PrincipalName: &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Prefix{Prefix: "spiffe://" + td + "/ns/" + ns + "/"}}}}}
}

// AnyPrincipal is any: true.
func AnyPrincipal() *rbacv3.Principal {
	return &rbacv3.Principal{Identifier: &rbacv3.Principal_Any{Any: true}}
}

// OrIDs is or_ids.
func OrIDs(ids ...*rbacv3.Principal) *rbacv3.Principal {
	return &rbacv3.Principal{Identifier: &rbacv3.Principal_OrIds{OrIds: &rbacv3.Principal_Set{Ids: ids}}}
}

// AndIDs is and_ids.
func AndIDs(ids ...*rbacv3.Principal) *rbacv3.Principal {
	return &rbacv3.Principal{Identifier: &rbacv3.Principal_AndIds{AndIds: &rbacv3.Principal_Set{Ids: ids}}}
}

// PathPrefix is url_path prefix.
func PathPrefix(p string) *rbacv3.Permission {
	return urlPath(&matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Prefix{Prefix: p}})
}

// PathExact is url_path exact.
func PathExact(p string) *rbacv3.Permission {
	return urlPath(&matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Exact{Exact: p}})
}

// PathSuffix is url_path suffix.
func PathSuffix(p string) *rbacv3.Permission {
	return urlPath(&matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Suffix{Suffix: p}})
}

func urlPath(m *matcherv3.StringMatcher) *rbacv3.Permission {
	return &rbacv3.Permission{Rule: &rbacv3.Permission_UrlPath{UrlPath: &matcherv3.PathMatcher{Rule: &matcherv3.PathMatcher_Path{Path: m}}}}
}

// Method is header :method exact.
func Method(m string) *rbacv3.Permission {
	return &rbacv3.Permission{Rule: &rbacv3.Permission_Header{Header: &routev3.HeaderMatcher{Name: ":method",
		HeaderMatchSpecifier: &routev3.HeaderMatcher_StringMatch{StringMatch: &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Exact{Exact: m}}}}}}
}

// Port is destination_port.
func Port(p uint32) *rbacv3.Permission {
	return &rbacv3.Permission{Rule: &rbacv3.Permission_DestinationPort{DestinationPort: p}}
}

// AnyPermission is any: true.
func AnyPermission() *rbacv3.Permission {
	return &rbacv3.Permission{Rule: &rbacv3.Permission_Any{Any: true}}
}

// OrRules is or_rules.
func OrRules(ps ...*rbacv3.Permission) *rbacv3.Permission {
	return &rbacv3.Permission{Rule: &rbacv3.Permission_OrRules{OrRules: &rbacv3.Permission_Set{Rules: ps}}}
}

// AndRules is and_rules.
func AndRules(ps ...*rbacv3.Permission) *rbacv3.Permission {
	return &rbacv3.Permission{Rule: &rbacv3.Permission_AndRules{AndRules: &rbacv3.Permission_Set{Rules: ps}}}
}

// Policy is one RBAC policy.
func Policy(perms []*rbacv3.Permission, ids []*rbacv3.Principal) *rbacv3.Policy {
	return &rbacv3.Policy{Permissions: perms, Principals: ids}
}

// Rules is an RBAC rule set.
func Rules(action rbacv3.RBAC_Action, policies map[string]*rbacv3.Policy) *rbacv3.RBAC {
	return &rbacv3.RBAC{Action: action, Policies: policies}
}

// HTTPRBAC is an http_filters entry; shadow may be nil (or rules, for a
// dry-run-only filter).
func HTTPRBAC(name string, rules, shadow *rbacv3.RBAC) *hcmv3.HttpFilter {
	return &hcmv3.HttpFilter{Name: name, ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: Any(&rbachttpv3.RBAC{Rules: rules, ShadowRules: shadow})}}
}

// Router is the router HTTP filter.
func Router() *hcmv3.HttpFilter {
	return &hcmv3.HttpFilter{Name: "envoy.filters.http.router", ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: Any(&routerv3.Router{})}}
}

// NetworkRBAC is an envoy.filters.network.rbac filter.
func NetworkRBAC(name string, rules, shadow *rbacv3.RBAC) *listenerv3.Filter {
	return &listenerv3.Filter{Name: name, ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: Any(&rbacnetv3.RBAC{StatPrefix: "tcp", Rules: rules, ShadowRules: shadow})}}
}

// WithHTTPFilters sets the HTTP filters (then the router) of every HCM chain of l.
func WithHTTPFilters(l *listenerv3.Listener, fs ...*hcmv3.HttpFilter) *listenerv3.Listener {
	set := func(fc *listenerv3.FilterChain) {
		if fc == nil {
			return
		}
		for _, f := range fc.GetFilters() {
			h := &hcmv3.HttpConnectionManager{}
			if f.GetTypedConfig().UnmarshalTo(h) != nil {
				continue
			}
			h.HttpFilters = append(append([]*hcmv3.HttpFilter(nil), fs...), Router())
			f.ConfigType = &listenerv3.Filter_TypedConfig{TypedConfig: Any(h)}
		}
	}
	for _, fc := range l.GetFilterChains() {
		set(fc)
	}
	set(l.GetDefaultFilterChain())
	return l
}

// WithNetworkRBAC puts fs before the terminal filter of every TCP chain of l.
func WithNetworkRBAC(l *listenerv3.Listener, fs ...*listenerv3.Filter) *listenerv3.Listener {
	for _, fc := range l.GetFilterChains() {
		n := len(fc.Filters)
		if n == 0 || fc.Filters[n-1].GetTypedConfig().GetTypeUrl() != "type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy" {
			continue
		}
		fc.Filters = append(append([]*listenerv3.Filter(nil), fs...), fc.Filters[n-1])
	}
	return l
}

// OverrideTTL is one entry of the listener metadata weft.overrides.
type OverrideTTL struct {
	Name      string
	TTL       time.Duration
	Revision  int64
	ExpiresAt time.Time // zero: not sent
}

// WithOverrides sets l's metadata weft.overrides.
func WithOverrides(l *listenerv3.Listener, os ...OverrideTTL) *listenerv3.Listener {
	fields := map[string]*structpb.Value{}
	for _, o := range os {
		v := map[string]*structpb.Value{"ttl": structpb.NewStringValue(o.TTL.String()), "revision": structpb.NewNumberValue(float64(o.Revision))}
		if !o.ExpiresAt.IsZero() {
			v["expiresAt"] = structpb.NewStringValue(o.ExpiresAt.UTC().Format(time.RFC3339Nano))
		}
		fields[o.Name] = structpb.NewStructValue(&structpb.Struct{Fields: v})
	}
	if l.Metadata == nil {
		l.Metadata = &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{}}
	}
	if l.Metadata.FilterMetadata == nil {
		l.Metadata.FilterMetadata = map[string]*structpb.Struct{}
	}
	l.Metadata.FilterMetadata["weft.overrides"] = &structpb.Struct{Fields: fields}
	return l
}
