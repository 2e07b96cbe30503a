package gen

import (
	"slices"
	"strconv"
	"strings"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	rbacv3 "github.com/envoyproxy/go-control-plane/envoy/config/rbac/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	httprbacv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rbac/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	netrbacv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/rbac/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"github.com/weft-mesh/weft/pilot/ir"
	"google.golang.org/protobuf/types/known/structpb"
)

// Authorization on the wire (the issue #9 design's "Wire"): Envoy's RBAC
// filters, so Envoy and grpc-go's xDS server read them too. Where this differs
// from the design: the DENY/ALLOW/AUDIT filters are named weft.authz.deny,
// .allow and .audit, not all envoy.filters.http.rbac (grpc-go NACKs two HTTP
// filters of one name); a policy is one per rule; on TCP a DENY drops the
// HTTP-only fields instead of never matching (Istio's rule: a TCP workload's
// policy may only get stricter); only DENY Overrides are sent (ALLOW ones
// warn on apply).
//
// HTTP chains carry, before the router and in this order:
//   - OverrideFilterName: action DENY, one policy per DENY Override of the
//     sidecar's namespace, named "<ns>/<name>";
//   - AuthzDenyFilterName: the DENY AuthorizationPolicies selecting it;
//   - AuthzAllowFilterName: the ALLOW ones (if any ALLOW policy selects the
//     workload, a request must match one: an ALLOW filter whose policies
//     are all rule-less denies everything, as Envoy and Istio do);
//   - AuthzAuditFilterName: the AUDIT ones, as Envoy's LOG action.
//
// A filter is present only when it has a policy (or, for ALLOW, when a
// policy selects the workload). dryRun policies go in the shadow_rules of the
// filter of their action, which then may have no enforcing rules at all.
// Each rule of an AuthorizationPolicy is one RBAC policy named
// "<ns>/<name>[<i>]" (an RBAC policy is any permission AND any principal,
// which is exactly one rule: any from AND any to).
//
// TCP chains carry the same, as envoy.filters.network.rbac filters of the
// same names, before the tcp_proxy. A TCP connection has no method or path: an
// ALLOW or AUDIT entry naming them never matches there, and a DENY entry
// drops them and so denies more (Istio's rule: on TCP a policy can only
// become stricter).
//
// Principals are authenticated.principal_name: an exact SPIFFE ID, "x*" as
// prefix, "*x" as suffix, "*" any authenticated peer; a namespace is the
// prefix "spiffe://<td>/ns/<ns>/". Paths are url_path exact, "/a/*" prefix
// "/a/", "*.x" suffix ".x", "*" any; methods the ":method" header exact; ports
// destination_port.
const (
	OverrideFilterName   = "weft.override"
	AuthzDenyFilterName  = "weft.authz.deny"
	AuthzAllowFilterName = "weft.authz.allow"
	AuthzAuditFilterName = "weft.authz.audit"
)

// OverridesMetadataKey is the inbound Listener's filter_metadata key naming each
// Override policy's expiry: {"<ns>/<name>": {"ttl": "2s", "revision": N,
// "expiresAt": RFC 3339}} (expiresAt only when pilot saw the store write). The
// sidecar enforces an override until min(expiresAt, first seen locally + ttl)
// on its own clock, whether pilot is reachable or not. grpc-go reads no such
// metadata: a proxyless server stops enforcing an Override when pilot, at its
// expiry, compiles it out (compile.Input.Now) and pushes the listener again.
const OverridesMetadataKey = "weft.overrides"

// authzPick is what a workload's authorization depends on: the policies of
// its namespace that select it and the namespace's DENY overrides.
type authzPick struct {
	policies  []*ir.AuthorizationPolicy // sorted by name
	overrides []*ir.Override            // DENY, sorted by name
}

func (p authzPick) empty() bool { return len(p.policies) == 0 && len(p.overrides) == 0 }

// key names the picked policies (overrides follow from the namespace, which
// the class key holds already).
func (p authzPick) key() string {
	var b strings.Builder
	for _, ap := range p.policies {
		b.WriteString(ap.Name)
		b.WriteByte(0)
	}
	return b.String()
}

type authzIndexKey string // namespace

type authzIndex struct {
	policies  []*ir.AuthorizationPolicy
	overrides []*ir.Override
}

// pickAuthz returns the policies selecting a workload of ns with labels: an
// empty selector selects the whole namespace.
func pickAuthz(mesh *ir.Mesh, ns string, labels map[string]string) authzPick {
	if len(mesh.Authz) == 0 && len(mesh.Overrides) == 0 {
		return authzPick{}
	}
	ix, _ := derive(mesh, authzIndexKey(ns), func() (*authzIndex, error) {
		ix := &authzIndex{}
		for _, ap := range mesh.Authz {
			if ap.Namespace == ns {
				ix.policies = append(ix.policies, ap)
			}
		}
		for _, o := range mesh.Overrides {
			if o.Namespace == ns && o.Action == "DENY" {
				ix.overrides = append(ix.overrides, o)
			}
		}
		return ix, nil
	})
	pick := authzPick{overrides: ix.overrides}
	for _, ap := range ix.policies {
		if len(ap.Selector) == 0 || ir.Contains(labels, ap.Selector) {
			pick.policies = append(pick.policies, ap)
		}
	}
	return pick
}

// rbacSet is one action's enforcing and dry-run policies.
type rbacSet struct {
	selected         bool // an enforcing policy of the action selects the workload
	rules, shadowing map[string]*rbacv3.Policy
}

func (s *rbacSet) add(dryRun bool, name string, p *rbacv3.Policy) {
	m := &s.rules
	if dryRun {
		m = &s.shadowing
	}
	if *m == nil {
		*m = map[string]*rbacv3.Policy{}
	}
	if p != nil {
		(*m)[name] = p
	}
}

// config renders the set; ok is false when it would do nothing.
func (s *rbacSet) config(action rbacv3.RBAC_Action) (rules, shadow *rbacv3.RBAC, ok bool) {
	if s.rules != nil || s.selected {
		rules = &rbacv3.RBAC{Action: action, Policies: s.rules}
	}
	if len(s.shadowing) > 0 {
		shadow = &rbacv3.RBAC{Action: action, Policies: s.shadowing}
	}
	return rules, shadow, rules != nil || shadow != nil
}

// authzSets groups a pick's policies by filter, for HTTP (tcp false) or TCP.
func authzSets(td string, pick authzPick, tcp bool) (override, deny, allow, audit rbacSet) {
	for _, o := range pick.overrides {
		override.add(false, o.Namespace+"/"+o.Name, overridePolicy(td, o, tcp))
	}
	for _, ap := range pick.policies {
		set := &allow
		switch ap.Action {
		case "DENY":
			set = &deny
		case "AUDIT":
			set = &audit
		}
		if !ap.DryRun {
			set.selected = true
		}
		set.add(ap.DryRun, "", nil) // a rule-less policy still makes its set present
		for i, r := range ap.Rules {
			set.add(ap.DryRun, ap.Namespace+"/"+ap.Name+"["+strconv.Itoa(i)+"]", rulePolicy(td, r, ap.Action == "DENY", tcp))
		}
	}
	return
}

// rbacFilter is one RBAC filter of a pick: its name and what it enforces and shadows.
type rbacFilter struct {
	name          string
	rules, shadow *rbacv3.RBAC
}

// rbacFilters are a pick's RBAC filters in order (override, deny, allow,
// audit), for HTTP (tcp false) or TCP; a set with nothing to enforce or shadow
// has no filter.
func rbacFilters(td string, pick authzPick, tcp bool) []rbacFilter {
	if pick.empty() {
		return nil
	}
	override, deny, allow, audit := authzSets(td, pick, tcp)
	var out []rbacFilter
	for _, f := range []struct {
		name   string
		set    *rbacSet
		action rbacv3.RBAC_Action
	}{
		{OverrideFilterName, &override, rbacv3.RBAC_DENY},
		{AuthzDenyFilterName, &deny, rbacv3.RBAC_DENY},
		{AuthzAllowFilterName, &allow, rbacv3.RBAC_ALLOW},
		{AuthzAuditFilterName, &audit, rbacv3.RBAC_LOG},
	} {
		if rules, shadow, ok := f.set.config(f.action); ok {
			out = append(out, rbacFilter{f.name, rules, shadow})
		}
	}
	return out
}

// httpRBACFilters are the HTTP filters of a pick, in order, to go before the router.
func httpRBACFilters(td string, pick authzPick) []*hcmv3.HttpFilter {
	var out []*hcmv3.HttpFilter
	for _, f := range rbacFilters(td, pick, false) {
		cfg := &httprbacv3.RBAC{Rules: f.rules, ShadowRules: f.shadow}
		if f.shadow != nil {
			cfg.ShadowRulesStatPrefix = f.name + "."
		}
		out = append(out, &hcmv3.HttpFilter{Name: f.name, ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: mustAny(cfg)}})
	}
	return out
}

// tcpRBACFilters are the network filters of a pick, in order, to go before the
// tcp_proxy. Envoy requires a stat_prefix: it is the HTTP filter's name.
func tcpRBACFilters(td string, pick authzPick) []*listenerv3.Filter {
	var out []*listenerv3.Filter
	for _, f := range rbacFilters(td, pick, true) {
		out = append(out, networkFilter(f.name, &netrbacv3.RBAC{Rules: f.rules, ShadowRules: f.shadow, StatPrefix: f.name + "."}))
	}
	return out
}

// overridesMetadata is the Listener metadata naming each DENY override's expiry.
func overridesMetadata(pick authzPick) *corev3.Metadata {
	if len(pick.overrides) == 0 {
		return nil
	}
	fields := map[string]*structpb.Value{}
	for _, o := range pick.overrides {
		f := map[string]*structpb.Value{
			"ttl":      structpb.NewStringValue(o.TTL.String()),
			"revision": structpb.NewNumberValue(float64(o.Revision)),
		}
		if !o.WrittenAt.IsZero() {
			f["expiresAt"] = structpb.NewStringValue(o.WrittenAt.Add(o.TTL).UTC().Format(time.RFC3339Nano))
		}
		fields[o.Namespace+"/"+o.Name] = structpb.NewStructValue(&structpb.Struct{Fields: f})
	}
	return &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{OverridesMetadataKey: {Fields: fields}}}
}

// overridePolicy: an Override matches when every non-empty list matches one of
// its entries.
func overridePolicy(td string, o *ir.Override, tcp bool) *rbacv3.Policy {
	src := principalFor(td, ir.AuthzSource{Principals: o.Principals})
	op, ok := permissionFor(ir.AuthzOperation{Methods: o.Methods, Paths: o.Paths}, true, tcp)
	if !ok {
		return nil
	}
	return &rbacv3.Policy{Permissions: []*rbacv3.Permission{op}, Principals: []*rbacv3.Principal{src}}
}

// rulePolicy renders one rule (any from AND any to); nil when it can never
// match (every to entry names what a TCP connection lacks).
func rulePolicy(td string, r ir.AuthzRule, deny, tcp bool) *rbacv3.Policy {
	p := &rbacv3.Policy{}
	for _, f := range r.From {
		p.Principals = append(p.Principals, principalFor(td, f))
	}
	if len(r.From) == 0 {
		p.Principals = []*rbacv3.Principal{anyPrincipal}
	}
	for _, t := range r.To {
		if perm, ok := permissionFor(t, deny, tcp); ok {
			p.Permissions = append(p.Permissions, perm)
		}
	}
	if len(r.To) == 0 {
		p.Permissions = []*rbacv3.Permission{anyPermission}
	}
	if len(p.Permissions) == 0 {
		return nil
	}
	return p
}

var (
	anyPrincipal  = &rbacv3.Principal{Identifier: &rbacv3.Principal_Any{Any: true}}
	anyPermission = &rbacv3.Permission{Rule: &rbacv3.Permission_Any{Any: true}}
	// anyAuthenticated is any peer with a verified certificate.
	anyAuthenticated = &rbacv3.Principal{Identifier: &rbacv3.Principal_Authenticated_{Authenticated: &rbacv3.Principal_Authenticated{}}}
)

// principalFor is an AND of the source's non-empty lists, each an OR.
func principalFor(td string, s ir.AuthzSource) *rbacv3.Principal {
	var and []*rbacv3.Principal
	if len(s.Principals) > 0 {
		ids := make([]*rbacv3.Principal, 0, len(s.Principals))
		for _, p := range s.Principals {
			ids = append(ids, authenticated(patternMatcher(p)))
		}
		and = append(and, orPrincipals(ids))
	}
	if len(s.Namespaces) > 0 {
		ids := make([]*rbacv3.Principal, 0, len(s.Namespaces))
		for _, ns := range s.Namespaces {
			if ns == "*" {
				ids = append(ids, anyAuthenticated)
				continue
			}
			ids = append(ids, authenticated(&matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Prefix{Prefix: "spiffe://" + td + "/ns/" + ns + "/"}}))
		}
		and = append(and, orPrincipals(ids))
	}
	switch len(and) {
	case 0:
		return anyPrincipal
	case 1:
		return and[0]
	}
	return &rbacv3.Principal{Identifier: &rbacv3.Principal_AndIds{AndIds: &rbacv3.Principal_Set{Ids: and}}}
}

func orPrincipals(ids []*rbacv3.Principal) *rbacv3.Principal {
	if len(ids) == 1 {
		return ids[0]
	}
	return &rbacv3.Principal{Identifier: &rbacv3.Principal_OrIds{OrIds: &rbacv3.Principal_Set{Ids: ids}}}
}

// authenticated matches the peer certificate's SPIFFE ID; a nil matcher is any
// authenticated peer.
func authenticated(m *matcherv3.StringMatcher) *rbacv3.Principal {
	if m == nil {
		return anyAuthenticated
	}
	return &rbacv3.Principal{Identifier: &rbacv3.Principal_Authenticated_{Authenticated: &rbacv3.Principal_Authenticated{PrincipalName: m}}}
}

// patternMatcher: "*" is nil (anything), "x*" a prefix, "*x" a suffix, else exact.
func patternMatcher(s string) *matcherv3.StringMatcher {
	switch {
	case s == "*":
		return nil
	case strings.HasSuffix(s, "*"):
		return &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Prefix{Prefix: strings.TrimSuffix(s, "*")}}
	case strings.HasPrefix(s, "*"):
		return &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Suffix{Suffix: strings.TrimPrefix(s, "*")}}
	}
	return &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Exact{Exact: s}}
}

// permissionFor is an AND of the operation's non-empty lists, each an OR. On
// TCP (no method, no path) an entry naming methods or paths never matches
// (ok false), except in a DENY, where they are dropped (it denies more).
func permissionFor(op ir.AuthzOperation, deny, tcp bool) (*rbacv3.Permission, bool) {
	var and []*rbacv3.Permission
	httpOnly := len(op.Methods) > 0 || len(op.Paths) > 0
	if tcp && httpOnly && !deny {
		return nil, false
	}
	if !tcp && len(op.Methods) > 0 && !slices.Contains(op.Methods, "*") {
		rules := make([]*rbacv3.Permission, 0, len(op.Methods))
		for _, m := range op.Methods {
			rules = append(rules, &rbacv3.Permission{Rule: &rbacv3.Permission_Header{Header: &routev3.HeaderMatcher{
				Name:                 ":method",
				HeaderMatchSpecifier: &routev3.HeaderMatcher_StringMatch{StringMatch: &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Exact{Exact: m}}},
			}}})
		}
		and = append(and, orPermissions(rules))
	}
	if !tcp && len(op.Paths) > 0 && !slices.Contains(op.Paths, "*") {
		rules := make([]*rbacv3.Permission, 0, len(op.Paths))
		for _, p := range op.Paths {
			rules = append(rules, &rbacv3.Permission{Rule: &rbacv3.Permission_UrlPath{UrlPath: &matcherv3.PathMatcher{
				Rule: &matcherv3.PathMatcher_Path{Path: patternMatcher(p)},
			}}})
		}
		and = append(and, orPermissions(rules))
	}
	if len(op.Ports) > 0 {
		rules := make([]*rbacv3.Permission, 0, len(op.Ports))
		for _, p := range op.Ports {
			rules = append(rules, &rbacv3.Permission{Rule: &rbacv3.Permission_DestinationPort{DestinationPort: p}})
		}
		and = append(and, orPermissions(rules))
	}
	switch len(and) {
	case 0:
		return anyPermission, true
	case 1:
		return and[0], true
	}
	return &rbacv3.Permission{Rule: &rbacv3.Permission_AndRules{AndRules: &rbacv3.Permission_Set{Rules: and}}}, true
}

func orPermissions(rules []*rbacv3.Permission) *rbacv3.Permission {
	if len(rules) == 1 {
		return rules[0]
	}
	return &rbacv3.Permission{Rule: &rbacv3.Permission_OrRules{OrRules: &rbacv3.Permission_Set{Rules: rules}}}
}
