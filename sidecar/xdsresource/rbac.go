//lint:file-ignore SA1019 deprecated Envoy fields are still sent by peers; decoding them is deliberate.
package xdsresource

// RBAC decoding: envoy.filters.http.rbac (and its weft.override instance) in an
// inbound connection manager's http_filters, envoy.filters.network.rbac before a
// tcp_proxy, and the listener metadata "weft.overrides" giving each Override's
// TTL. Exactly the subset pilot emits (issue9-design.md "Wire") is accepted:
// anything else is refused with the field named (a NACK), never ignored, so no
// policy is accepted and left unenforced.

import (
	"fmt"
	"sort"
	"strconv"
	"time"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/weft-mesh/weft/sidecar/authz"
	"github.com/weft-mesh/weft/sidecar/xdswire"
)

// Type URLs and names of the filters RBAC decoding knows.
const (
	HTTPRBACTypeURL    = "type.googleapis.com/envoy.extensions.filters.http.rbac.v3.RBAC"
	NetworkRBACTypeURL = "type.googleapis.com/envoy.extensions.filters.network.rbac.v3.RBAC"
	RouterTypeURL      = "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"
	// OverrideFilterName names the RBAC instance that holds Overrides.
	OverrideFilterName = "weft.override"
	// OverridesMetadataKey is the listener filter_metadata key of the Overrides'
	// expiry: {"<ns>/<name>": {"ttl": "2s", "revision": N, "expiresAt": RFC3339}}.
	OverridesMetadataKey = "weft.overrides"
)

// decodeHTTPFilters decodes an HCM's http_filters: RBAC filters, then the
// router last. No filters at all is a plain router (older pilots, tests).
func decodeHTTPFilters(e errs, field string, h *xdswire.HttpConnectionManager) ([]authz.Filter, error) {
	fs := h.GetHttpFilters()
	var out []authz.Filter
	for i, f := range fs {
		ff := field + ".http_filters[" + strconv.Itoa(i) + "]"
		if f.GetDisabled() {
			return nil, e.at(ff+".disabled", "filters disabled by default (enabled per route) are not supported")
		}
		tc := f.GetTypedConfig()
		if tc == nil {
			return nil, e.at(ff+".typed_config", "required")
		}
		switch tc.GetTypeUrl() {
		case RouterTypeURL:
			if i != len(fs)-1 {
				return nil, e.at(ff, "the router must be the last HTTP filter")
			}
		case HTTPRBACTypeURL:
			m := &xdswire.HttpRBAC{}
			if err := unpack(tc, HTTPRBACTypeURL, m); err != nil {
				return nil, e.at(ff+".typed_config", "malformed RBAC: %v", err)
			}
			if m.GetMatcher() != nil || m.GetShadowMatcher() != nil {
				return nil, e.at(ff+".typed_config.matcher", "the matcher API is not supported (pilot emits rules)")
			}
			af, err := decodeRBACFilter(e, ff+".typed_config", f.GetName(), m.GetRules(), m.GetShadowRules())
			if err != nil {
				return nil, err
			}
			out = append(out, af)
		default:
			return nil, e.at(ff+".typed_config", "unsupported HTTP filter type %q (supported: RBAC, router)", tc.GetTypeUrl())
		}
	}
	if len(fs) > 0 && fs[len(fs)-1].GetTypedConfig().GetTypeUrl() != RouterTypeURL {
		return nil, e.at(field+".http_filters", "the last HTTP filter must be the router")
	}
	if len(out) > authz.MaxFilters {
		return nil, e.at(field+".http_filters", "%d RBAC filters, limit %d", len(out), authz.MaxFilters)
	}
	return out, nil
}

// decodeNetworkRBAC decodes one envoy.filters.network.rbac before a tcp_proxy.
func decodeNetworkRBAC(e errs, field, name string, m *xdswire.NetworkRBAC) (authz.Filter, error) {
	switch {
	case m.GetMatcher() != nil || m.GetShadowMatcher() != nil:
		return authz.Filter{}, e.at(field+".matcher", "the matcher API is not supported (pilot emits rules)")
	case m.GetEnforcementType() != xdswire.NetworkRBAC_ONE_TIME_ON_FIRST_BYTE:
		return authz.Filter{}, e.at(field+".enforcement_type", "only ONE_TIME_ON_FIRST_BYTE is supported (decided once per connection)")
	case m.GetDelayDeny() != nil:
		return authz.Filter{}, e.at(field+".delay_deny", "not supported")
	}
	return decodeRBACFilter(e, field, name, m.GetRules(), m.GetShadowRules())
}

func decodeRBACFilter(e errs, field, name string, rules, shadow *xdswire.RBAC) (authz.Filter, error) {
	f := authz.Filter{Name: name, Override: name == OverrideFilterName}
	if rules == nil && shadow == nil {
		return f, e.at(field, "RBAC filter %q has neither rules nor shadow_rules", name)
	}
	var err error
	if rules != nil {
		if f.Rules, err = decodeRBACRules(e, field+".rules", rules); err != nil {
			return f, err
		}
	}
	if shadow != nil {
		if f.Override {
			return f, e.at(field+".shadow_rules", "the %s filter has no dry run", OverrideFilterName)
		}
		if f.Shadow, err = decodeRBACRules(e, field+".shadow_rules", shadow); err != nil {
			return f, err
		}
	}
	if f.Override && (f.Rules == nil || f.Rules.Action != authz.Deny) {
		return f, e.at(field+".rules.action", "the %s filter must DENY", OverrideFilterName)
	}
	return f, nil
}

func decodeRBACRules(e errs, field string, m *xdswire.RBAC) (*authz.Rules, error) {
	r := &authz.Rules{}
	switch m.GetAction() {
	case xdswire.RBAC_ALLOW:
		r.Action = authz.Allow
	case xdswire.RBAC_DENY:
		r.Action = authz.Deny
	case xdswire.RBAC_LOG:
		r.Action = authz.Log
	default:
		return nil, e.at(field+".action", "unsupported action %s", m.GetAction())
	}
	if m.GetAuditLoggingOptions() != nil {
		return nil, e.at(field+".audit_logging_options", "not supported (AUDIT is counted in /metrics)")
	}
	ps := m.GetPolicies()
	if len(ps) > authz.MaxPolicies {
		return nil, e.at(field+".policies", "%d policies, limit %d", len(ps), authz.MaxPolicies)
	}
	names := make([]string, 0, len(ps))
	for n := range ps {
		names = append(names, n)
	}
	sort.Strings(names) // deterministic: the first failing policy is the same every time
	for _, n := range names {
		pf := field + ".policies[" + strconv.Quote(n) + "]"
		if n == "" || len(n) > authz.MaxNameBytes {
			return nil, e.at(pf, "policy name must be 1..%d bytes", authz.MaxNameBytes)
		}
		p := ps[n]
		switch {
		case p.GetCondition() != nil || p.GetCheckedCondition() != nil || p.GetCelConfig() != nil:
			return nil, e.at(pf+".condition", "CEL conditions are not supported")
		case len(p.GetPermissions()) == 0:
			return nil, e.at(pf+".permissions", "required (Envoy refuses an empty list)")
		case len(p.GetPrincipals()) == 0:
			return nil, e.at(pf+".principals", "required (Envoy refuses an empty list)")
		case len(p.GetPermissions()) > authz.MaxIDs || len(p.GetPrincipals()) > authz.MaxIDs:
			return nil, e.at(pf, "%d permissions and %d principals, limit %d each", len(p.GetPermissions()), len(p.GetPrincipals()), authz.MaxIDs)
		}
		ap := authz.Policy{Name: n}
		for i, pm := range p.GetPermissions() {
			x, err := decodePermission(e, pf+".permissions["+strconv.Itoa(i)+"]", pm, 1)
			if err != nil {
				return nil, err
			}
			ap.Permissions = append(ap.Permissions, x)
		}
		for i, pr := range p.GetPrincipals() {
			x, err := decodePrincipal(e, pf+".principals["+strconv.Itoa(i)+"]", pr, 1)
			if err != nil {
				return nil, err
			}
			ap.Principals = append(ap.Principals, x)
		}
		r.Policies = append(r.Policies, ap)
	}
	return r, nil
}

func decodePermission(e errs, f string, m *xdswire.Permission, depth int) (authz.Permission, error) {
	if depth > authz.MaxDepth {
		return authz.Permission{}, e.at(f, "nested deeper than %d", authz.MaxDepth)
	}
	set := func(kind authz.PermissionKind, sf string, rules []*xdswire.Permission) (authz.Permission, error) {
		if len(rules) == 0 || len(rules) > authz.MaxIDs {
			return authz.Permission{}, e.at(sf, "want 1..%d rules, got %d", authz.MaxIDs, len(rules))
		}
		p := authz.Permission{Kind: kind, Rules: make([]authz.Permission, 0, len(rules))}
		for i, r := range rules {
			x, err := decodePermission(e, sf+"["+strconv.Itoa(i)+"]", r, depth+1)
			if err != nil {
				return p, err
			}
			p.Rules = append(p.Rules, x)
		}
		return p, nil
	}
	switch r := m.GetRule().(type) {
	case *xdswire.Permission_Any:
		if !r.Any {
			return authz.Permission{}, e.at(f+".any", "must be true")
		}
		return authz.Permission{Kind: authz.PermissionAny}, nil
	case *xdswire.Permission_AndRules:
		return set(authz.PermissionAnd, f+".and_rules.rules", r.AndRules.GetRules())
	case *xdswire.Permission_OrRules:
		return set(authz.PermissionOr, f+".or_rules.rules", r.OrRules.GetRules())
	case *xdswire.Permission_NotRule:
		if r.NotRule == nil {
			return authz.Permission{}, e.at(f+".not_rule", "required")
		}
		x, err := decodePermission(e, f+".not_rule", r.NotRule, depth+1)
		if err != nil {
			return x, err
		}
		return authz.Permission{Kind: authz.PermissionNot, Rules: []authz.Permission{x}}, nil
	case *xdswire.Permission_UrlPath:
		sm := r.UrlPath.GetPath()
		if sm == nil {
			return authz.Permission{}, e.at(f+".url_path.path", "required")
		}
		x, err := stringMatch(e, f+".url_path.path", sm, true)
		return authz.Permission{Kind: authz.PermissionPath, Match: x}, err
	case *xdswire.Permission_Header:
		x, err := methodMatch(e, f+".header", r.Header)
		return authz.Permission{Kind: authz.PermissionMethod, Match: x}, err
	case *xdswire.Permission_DestinationPort:
		if r.DestinationPort == 0 || r.DestinationPort > 65535 {
			return authz.Permission{}, e.at(f+".destination_port", "must be 1..65535, got %d", r.DestinationPort)
		}
		return authz.Permission{Kind: authz.PermissionPort, Port: r.DestinationPort}, nil
	case nil:
		return authz.Permission{}, e.at(f, "no rule set")
	}
	return authz.Permission{}, e.at(f, "unsupported permission %s (supported: any, and_rules, or_rules, not_rule, url_path, header :method, destination_port)", oneofName(m.GetRule()))
}

func decodePrincipal(e errs, f string, m *xdswire.Principal, depth int) (authz.Principal, error) {
	if depth > authz.MaxDepth {
		return authz.Principal{}, e.at(f, "nested deeper than %d", authz.MaxDepth)
	}
	set := func(kind authz.PrincipalKind, sf string, ids []*xdswire.Principal) (authz.Principal, error) {
		if len(ids) == 0 || len(ids) > authz.MaxIDs {
			return authz.Principal{}, e.at(sf, "want 1..%d ids, got %d", authz.MaxIDs, len(ids))
		}
		p := authz.Principal{Kind: kind, IDs: make([]authz.Principal, 0, len(ids))}
		for i, id := range ids {
			x, err := decodePrincipal(e, sf+"["+strconv.Itoa(i)+"]", id, depth+1)
			if err != nil {
				return p, err
			}
			p.IDs = append(p.IDs, x)
		}
		return p, nil
	}
	switch id := m.GetIdentifier().(type) {
	case *xdswire.Principal_Any:
		if !id.Any {
			return authz.Principal{}, e.at(f+".any", "must be true")
		}
		return authz.Principal{Kind: authz.PrincipalAny}, nil
	case *xdswire.Principal_AndIds:
		return set(authz.PrincipalAnd, f+".and_ids.ids", id.AndIds.GetIds())
	case *xdswire.Principal_OrIds:
		return set(authz.PrincipalOr, f+".or_ids.ids", id.OrIds.GetIds())
	case *xdswire.Principal_NotId:
		if id.NotId == nil {
			return authz.Principal{}, e.at(f+".not_id", "required")
		}
		x, err := decodePrincipal(e, f+".not_id", id.NotId, depth+1)
		if err != nil {
			return x, err
		}
		return authz.Principal{Kind: authz.PrincipalNot, IDs: []authz.Principal{x}}, nil
	case *xdswire.Principal_Authenticated_:
		sm := id.Authenticated.GetPrincipalName()
		if sm == nil {
			// Envoy: any peer with a verified certificate.
			return authz.Principal{Kind: authz.PrincipalAuthenticated, AnyName: true}, nil
		}
		x, err := stringMatch(e, f+".authenticated.principal_name", sm, true)
		if err != nil {
			return authz.Principal{}, err
		}
		return authz.Principal{Kind: authz.PrincipalAuthenticated, Name: x}, nil
	case nil:
		return authz.Principal{}, e.at(f, "no identifier set")
	}
	return authz.Principal{}, e.at(f, "unsupported principal %s (supported: any, and_ids, or_ids, not_id, authenticated)", oneofName(m.GetIdentifier()))
}

// stringMatch takes exact, prefix and (for paths) suffix, case-sensitive.
func stringMatch(e errs, f string, m *xdswire.StringMatcher, suffixOK bool) (authz.StringMatch, error) {
	if m.GetIgnoreCase() {
		return authz.StringMatch{}, e.at(f+".ignore_case", "not supported (matches are case-sensitive)")
	}
	var out authz.StringMatch
	switch p := m.GetMatchPattern().(type) {
	case *xdswire.StringMatcher_Exact:
		out = authz.StringMatch{Kind: authz.Exact, Value: p.Exact}
	case *xdswire.StringMatcher_Prefix:
		out = authz.StringMatch{Kind: authz.Prefix, Value: p.Prefix}
	case *xdswire.StringMatcher_Suffix:
		if !suffixOK {
			return out, e.at(f+".suffix", "not supported here")
		}
		out = authz.StringMatch{Kind: authz.Suffix, Value: p.Suffix}
	case nil:
		return out, e.at(f, "no match pattern set")
	default:
		return out, e.at(f, "unsupported string match %s (supported: exact, prefix, suffix)", oneofName(m.GetMatchPattern()))
	}
	if len(out.Value) > authz.MaxMatchBytes {
		return out, e.at(f, "is %d bytes, limit %d", len(out.Value), authz.MaxMatchBytes)
	}
	return out, nil
}

// methodMatch takes a header permission on ":method" with an exact value.
func methodMatch(e errs, f string, h *xdswire.HeaderMatcher) (authz.StringMatch, error) {
	if h.GetName() != ":method" {
		return authz.StringMatch{}, e.at(f+".name", "only :method is supported, got %q", clipName(h.GetName()))
	}
	if h.GetInvertMatch() || h.GetTreatMissingHeaderAsEmpty() {
		return authz.StringMatch{}, e.at(f, "invert_match and treat_missing_header_as_empty are not supported")
	}
	var v string
	switch s := h.GetHeaderMatchSpecifier().(type) {
	case *xdswire.HeaderMatcher_ExactMatch:
		v = s.ExactMatch
	case *xdswire.HeaderMatcher_StringMatch:
		x, err := stringMatch(e, f+".string_match", s.StringMatch, false)
		if err != nil {
			return x, err
		}
		if x.Kind != authz.Exact {
			return x, e.at(f+".string_match", ":method takes exact only")
		}
		v = x.Value
	default:
		return authz.StringMatch{}, e.at(f, ":method takes exact_match or string_match.exact only, got %s", oneofName(h.GetHeaderMatchSpecifier()))
	}
	if v == "" || len(v) > authz.MaxMatchBytes {
		return authz.StringMatch{}, e.at(f, "method must be 1..%d bytes", authz.MaxMatchBytes)
	}
	return authz.StringMatch{Kind: authz.Exact, Value: v}, nil
}

// decodeOverrides reads the listener metadata "weft.overrides".
func decodeOverrides(e errs, md *structpb.Struct) ([]authz.Override, error) {
	const f = "metadata.filter_metadata[\"" + OverridesMetadataKey + "\"]"
	fs := md.GetFields()
	if len(fs) > authz.MaxOverrides {
		return nil, e.at(f, "%d overrides, limit %d", len(fs), authz.MaxOverrides)
	}
	names := make([]string, 0, len(fs))
	for n := range fs {
		names = append(names, n)
	}
	sort.Strings(names)
	out := make([]authz.Override, 0, len(names))
	for _, n := range names {
		of := f + "[" + strconv.Quote(n) + "]"
		if n == "" || len(n) > authz.MaxNameBytes {
			return nil, e.at(of, "name must be 1..%d bytes", authz.MaxNameBytes)
		}
		st := fs[n].GetStructValue()
		if st == nil {
			return nil, e.at(of, "must be an object {ttl, revision, expiresAt}")
		}
		o := authz.Override{Name: n}
		for k, v := range st.GetFields() {
			switch k {
			case "ttl":
				s, ok := v.GetKind().(*structpb.Value_StringValue)
				if !ok {
					return nil, e.at(of+".ttl", "must be a duration string like \"2s\"")
				}
				d, err := time.ParseDuration(s.StringValue)
				if err != nil {
					return nil, e.at(of+".ttl", "%v", err)
				}
				o.TTL = d
			case "revision":
				nv, ok := v.GetKind().(*structpb.Value_NumberValue)
				if !ok || nv.NumberValue < 0 || nv.NumberValue != float64(int64(nv.NumberValue)) || nv.NumberValue > 1<<53 {
					return nil, e.at(of+".revision", "must be a whole number ≥ 0")
				}
				o.Revision = int64(nv.NumberValue)
			case "expiresAt":
				s, ok := v.GetKind().(*structpb.Value_StringValue)
				if !ok {
					return nil, e.at(of+".expiresAt", "must be an RFC 3339 time")
				}
				t, err := time.Parse(time.RFC3339Nano, s.StringValue)
				if err != nil {
					return nil, e.at(of+".expiresAt", "%v", err)
				}
				o.ExpiresAt = t
			default:
				return nil, e.at(of, "unknown field %q", clipName(k))
			}
		}
		if o.TTL <= 0 || o.TTL > authz.MaxOverrideTTL {
			return nil, e.at(of+".ttl", "%v outside (0, %v] (required)", o.TTL, authz.MaxOverrideTTL)
		}
		if _, ok := st.GetFields()["revision"]; !ok {
			return nil, e.at(of+".revision", "required")
		}
		out = append(out, o)
	}
	return out, nil
}

// checkOverrideNames ties the listener's Override policies to its metadata:
// every policy of a weft.override filter has a TTL, and every TTL is some
// chain's policy (else pilot and sidecar disagree on what is enforced).
func checkOverrideNames(e errs, l *Listener) error {
	ttl := map[string]bool{}
	for _, o := range l.Overrides {
		ttl[o.Name] = false
	}
	check := func(field string, fc *FilterChain) error {
		for _, f := range fc.RBAC {
			if !f.Override || f.Rules == nil {
				continue
			}
			for _, p := range f.Rules.Policies {
				if _, ok := ttl[p.Name]; !ok {
					return e.at(field, "Override policy %q has no entry in metadata.filter_metadata[%q] (its TTL)", p.Name, OverridesMetadataKey)
				}
				ttl[p.Name] = true
			}
		}
		return nil
	}
	for i := range l.FilterChains {
		if err := check(fmt.Sprintf("filter_chains[%d]", i), &l.FilterChains[i]); err != nil {
			return err
		}
	}
	if l.Default != nil {
		if err := check("default_filter_chain", l.Default); err != nil {
			return err
		}
	}
	for _, o := range l.Overrides {
		if !ttl[o.Name] {
			return e.at(fmt.Sprintf("metadata.filter_metadata[%q][%q]", OverridesMetadataKey, o.Name), "no %s policy of this listener has this name", OverrideFilterName)
		}
	}
	return nil
}

func clipName(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}

// oneofName names a oneof's set case by its Go wrapper type (Permission_Metadata
// → "metadata"), for errors.
func oneofName(v any) string {
	s := fmt.Sprintf("%T", v)
	for i := len(s) - 1; i >= 0; i-- {
		if s[i] == '_' || s[i] == '.' {
			return snake(s[i+1:])
		}
	}
	return s
}

func snake(s string) string {
	var b []byte
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'A' <= c && c <= 'Z' {
			if i > 0 {
				b = append(b, '_')
			}
			c += 'a' - 'A'
		}
		b = append(b, c)
	}
	return string(b)
}
