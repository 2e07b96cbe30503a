//lint:file-ignore SA1019 deprecated Envoy fields are still sent by peers; decoding them is deliberate.

package xdsresource

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/weft-mesh/weft/sidecar/xdswire"
)

// FallbackMetadataKey is the route filter_metadata key under which pilot lists the
// fallback clusters: {"clusters": ["outbound|9080||backup.shop.svc.cluster.local", ...]}.
const FallbackMetadataKey = "weft.fallback"

func decodeRouteConfig(m *xdswire.RouteConfiguration) (*RouteConfig, error) {
	e := errs{kind: "route", name: m.GetName()}
	if err := checkName(e, "name", m.GetName()); err != nil {
		return nil, err
	}
	return decodeRoutes(e, "", m)
}

// decodeRoutes decodes a route configuration; prefix is the field path of the message
// (empty for an RDS resource, "...route_config." when inline in a listener).
// Repeated elements (domains, routes, header matchers) are decoded with field
// paths relative to the element, and under prefixes a failing element's path on
// the way out: a valid configuration of 10,000 routes then builds no path
// strings at all (they were most of its decode time).
func decodeRoutes(e errs, prefix string, m *xdswire.RouteConfiguration) (*RouteConfig, error) {
	vhs := m.GetVirtualHosts()
	if len(vhs) > MaxVirtualHosts {
		return nil, e.at(prefix+"virtual_hosts", "%d virtual hosts, limit %d", len(vhs), MaxVirtualHosts)
	}
	rc := &RouteConfig{Name: m.GetName(), VirtualHosts: make([]VirtualHost, 0, len(vhs))}
	n := 0
	for _, vh := range vhs {
		n += len(vh.GetDomains())
	}
	// Sized for what is there (no rehashing at 8,000 domains), capped so a
	// resource refused below for too many domains preallocates little.
	domains := make(map[string]int, min(n, 1<<16))
	single := make(singleClusters)
	for i, vh := range vhs {
		f := func() string { return prefix + "virtual_hosts[" + strconv.Itoa(i) + "]" }
		if len(vh.GetDomains()) == 0 || len(vh.GetDomains()) > MaxDomains {
			return nil, e.at(f()+".domains", "want 1..%d domains, got %d", MaxDomains, len(vh.GetDomains()))
		}
		v := VirtualHost{Name: vh.GetName(), Domains: make([]string, 0, len(vh.GetDomains()))}
		for j, d := range vh.GetDomains() {
			df := func() string { return f() + ".domains[" + strconv.Itoa(j) + "]" }
			d = lower(d)
			if err := checkDomain(d); err != nil {
				return nil, e.at(df(), "%q: %v", d, err)
			}
			if k, dup := domains[d]; dup {
				return nil, e.at(df(), "%q already used by virtual_hosts[%d]", d, k)
			}
			domains[d] = i
			v.Domains = append(v.Domains, d)
		}
		if len(vh.GetRoutes()) > MaxRoutes {
			return nil, e.at(f()+".routes", "%d routes, limit %d", len(vh.GetRoutes()), MaxRoutes)
		}
		v.Routes = make([]Route, 0, len(vh.GetRoutes()))
		for j, r := range vh.GetRoutes() {
			dr, err := decodeRoute(e, single, r)
			if err != nil {
				return nil, under(err, f()+".routes["+strconv.Itoa(j)+"]")
			}
			v.Routes = append(v.Routes, dr)
		}
		rc.VirtualHosts = append(rc.VirtualHosts, v)
	}
	return rc, nil
}

// checkDomain allows one leading or trailing '*' as Envoy does.
func checkDomain(d string) error {
	if d == "" {
		return fmt.Errorf("empty domain")
	}
	if d == "*" {
		return nil
	}
	if n := strings.Count(d, "*"); n > 1 || (n == 1 && d[0] != '*' && d[len(d)-1] != '*') {
		return fmt.Errorf("wildcard only allowed as a whole prefix or suffix")
	}
	if len(d) > 253+6 {
		return fmt.Errorf("too long")
	}
	return nil
}

// singleClusters shares, within one route configuration, the one-entry
// Clusters of the routes that name the same cluster (most routes: a Service's
// rules all go to its cluster). Decoded values are immutable, so sharing is
// safe, and it saves an allocation per route.
type singleClusters map[string][]WeightedCluster

func (s singleClusters) of(name string) []WeightedCluster {
	if w, ok := s[name]; ok {
		return w
	}
	w := []WeightedCluster{{Name: name, Weight: 1}}
	s[name] = w
	return w
}

// decodeRoute decodes one route with field paths relative to it (the caller
// prefixes a failing one's, see decodeRoutes): constant paths, so a valid route
// builds none.
func decodeRoute(e errs, single singleClusters, r *xdswire.Route) (Route, error) {
	const f = ""
	out := Route{Name: r.GetName()}
	mt, err := decodeMatch(e, f+".match", r.GetMatch())
	if err != nil {
		return out, err
	}
	out.Match = mt
	switch a := r.GetAction().(type) {
	case *xdswire.Route_Route:
		if err := decodeAction(e, single, a.Route, &out); err != nil {
			return out, err
		}
	case *xdswire.Route_DirectResponse:
		s := a.DirectResponse.GetStatus()
		if s < 200 || s > 599 {
			return out, e.at(f+".direct_response.status", "must be 200..599, got %d", s)
		}
		body := a.DirectResponse.GetBody().GetInlineString()
		if len(body) > MaxDirectBodyBytes {
			return out, e.at(f+".direct_response.body", "is %d bytes, limit %d", len(body), MaxDirectBodyBytes)
		}
		out.Direct = &DirectResponse{Status: s, Body: body}
	default:
		return out, e.at(f, "unsupported action %s (want route or direct_response)", oneofName(r.GetAction()))
	}
	fb, err := decodeFallback(e, f+".metadata.filter_metadata[\""+FallbackMetadataKey+"\"]", r.GetMetadata().GetFilterMetadata()[FallbackMetadataKey])
	if err != nil {
		return out, err
	}
	out.Fallback = fb
	return out, nil
}

func decodeFallback(e errs, f string, s *structpb.Struct) ([]string, error) {
	if s == nil {
		return nil, nil
	}
	v, ok := s.GetFields()["clusters"]
	if !ok {
		return nil, e.at(f+".clusters", "required")
	}
	l := v.GetListValue()
	if l == nil {
		return nil, e.at(f+".clusters", "must be a list of cluster names")
	}
	if len(l.GetValues()) > MaxFallbacks {
		return nil, e.at(f+".clusters", "%d fallbacks, limit %d", len(l.GetValues()), MaxFallbacks)
	}
	out := make([]string, 0, len(l.GetValues()))
	for i, x := range l.GetValues() {
		n := x.GetStringValue()
		if err := checkName(e, fmt.Sprintf("%s.clusters[%d]", f, i), n); err != nil {
			return nil, err
		}
		out = append(out, n)
	}
	return out, nil
}

func decodeMatch(e errs, f string, m *xdswire.RouteMatch) (RouteMatch, error) {
	var rm RouteMatch
	if m == nil {
		return rm, e.at(f, "required")
	}
	rm.CaseSensitive = m.GetCaseSensitive() == nil || m.GetCaseSensitive().GetValue()
	switch p := m.GetPathSpecifier().(type) {
	case *xdswire.RouteMatch_Prefix:
		rm.PathKind, rm.Path = PathPrefix, p.Prefix
	case *xdswire.RouteMatch_Path:
		rm.PathKind, rm.Path = PathExact, p.Path
	case *xdswire.RouteMatch_SafeRegex:
		re, err := compileRE2(e, f+".safe_regex", p.SafeRegex.GetRegex())
		if err != nil {
			return rm, err
		}
		rm.PathKind, rm.Path, rm.PathRegex = PathRegex, p.SafeRegex.GetRegex(), re
	case nil:
		return rm, e.at(f, "one of prefix, path or safe_regex is required")
	default:
		return rm, e.at(f, "unsupported path specifier %s", oneofName(p))
	}
	if !rm.CaseSensitive && rm.PathKind != PathRegex {
		rm.Path = lower(rm.Path)
	}
	if len(m.GetQueryParameters()) > 0 || m.GetGrpc() != nil || len(m.GetCookies()) > 0 || m.GetRuntimeFraction() != nil ||
		len(m.GetDynamicMetadata()) > 0 || m.GetTlsContext() != nil {
		return rm, e.at(f, "only path, headers and case_sensitive are supported")
	}
	hs := m.GetHeaders()
	if len(hs) > MaxHeaderMatchers {
		return rm, e.at(f+".headers", "%d matchers, limit %d", len(hs), MaxHeaderMatchers)
	}
	if len(hs) > 0 {
		rm.Headers = make([]HeaderMatch, 0, len(hs))
	}
	for i, h := range hs {
		hm, err := decodeHeader(e, "", h)
		if err != nil {
			return rm, under(err, f+".headers["+strconv.Itoa(i)+"]")
		}
		rm.Headers = append(rm.Headers, hm)
	}
	return rm, nil
}

func decodeHeader(e errs, f string, h *xdswire.HeaderMatcher) (HeaderMatch, error) {
	hm := HeaderMatch{Name: lower(h.GetName()), Invert: h.GetInvertMatch()}
	if hm.Name == "" {
		return hm, e.at(f+".name", "must not be empty")
	}
	if h.GetTreatMissingHeaderAsEmpty() {
		// The request path has no "missing is empty": refused, not ignored.
		return hm, e.at(f+".treat_missing_header_as_empty", "not supported")
	}
	// Legacy specifiers are rewritten as the StringMatcher they mean.
	var sm *xdswire.StringMatcher
	field := f + ".string_match"
	switch s := h.GetHeaderMatchSpecifier().(type) {
	case *xdswire.HeaderMatcher_ExactMatch:
		sm = &xdswire.StringMatcher{MatchPattern: &xdswire.StringMatcher_Exact{Exact: s.ExactMatch}}
	case *xdswire.HeaderMatcher_PrefixMatch:
		sm = &xdswire.StringMatcher{MatchPattern: &xdswire.StringMatcher_Prefix{Prefix: s.PrefixMatch}}
	case *xdswire.HeaderMatcher_SuffixMatch:
		sm = &xdswire.StringMatcher{MatchPattern: &xdswire.StringMatcher_Suffix{Suffix: s.SuffixMatch}}
	case *xdswire.HeaderMatcher_ContainsMatch:
		sm = &xdswire.StringMatcher{MatchPattern: &xdswire.StringMatcher_Contains{Contains: s.ContainsMatch}}
	case *xdswire.HeaderMatcher_SafeRegexMatch:
		sm = &xdswire.StringMatcher{MatchPattern: &xdswire.StringMatcher_SafeRegex{SafeRegex: s.SafeRegexMatch}}
		field = f + ".safe_regex_match"
	case *xdswire.HeaderMatcher_StringMatch:
		sm = s.StringMatch
	case *xdswire.HeaderMatcher_PresentMatch:
		hm.Kind = StringPresent
		if !s.PresentMatch {
			hm.Invert = !hm.Invert
		}
		return hm, nil
	case nil:
		hm.Kind = StringPresent // Envoy: no specifier means "present"
		return hm, nil
	default:
		return hm, e.at(f, "unsupported header matcher %s", oneofName(s))
	}
	return decodeStringMatch(e, field, hm, sm)
}

// decodeStringMatch fills hm from sm; f is the matcher's field path.
func decodeStringMatch(e errs, f string, hm HeaderMatch, sm *xdswire.StringMatcher) (HeaderMatch, error) {
	if sm.GetIgnoreCase() {
		return hm, e.at(f+".ignore_case", "not supported")
	}
	switch p := sm.GetMatchPattern().(type) {
	case *xdswire.StringMatcher_Exact:
		hm.Kind, hm.Value = StringExact, p.Exact
	case *xdswire.StringMatcher_Prefix:
		hm.Kind, hm.Value = StringPrefix, p.Prefix
	case *xdswire.StringMatcher_Suffix:
		hm.Kind, hm.Value = StringSuffix, p.Suffix
	case *xdswire.StringMatcher_Contains:
		hm.Kind, hm.Value = StringContains, p.Contains
	case *xdswire.StringMatcher_SafeRegex:
		rf := f + ".safe_regex"
		if strings.HasSuffix(f, ".safe_regex_match") {
			rf = f
		}
		re, err := compileRE2(e, rf, p.SafeRegex.GetRegex())
		if err != nil {
			return hm, err
		}
		hm.Kind, hm.Value, hm.Regex = StringRegex, p.SafeRegex.GetRegex(), re
	default:
		return hm, e.at(f, "unsupported string matcher %s", oneofName(p))
	}
	return hm, nil
}

// decodeAction decodes a route's action (field "route"; single: see
// singleClusters).
func decodeAction(e errs, single singleClusters, a *xdswire.RouteAction, out *Route) error {
	const f = ".route"
	switch c := a.GetClusterSpecifier().(type) {
	case *xdswire.RouteAction_Cluster:
		if err := checkName(e, f+".cluster", c.Cluster); err != nil {
			return err
		}
		out.Clusters = single.of(c.Cluster)
	case *xdswire.RouteAction_WeightedClusters:
		ws := c.WeightedClusters.GetClusters()
		if len(ws) == 0 || len(ws) > MaxWeightedTargets {
			return e.at(f+".weighted_clusters.clusters", "want 1..%d clusters, got %d", MaxWeightedTargets, len(ws))
		}
		var sum uint64
		out.Clusters = make([]WeightedCluster, 0, len(ws))
		for i, w := range ws {
			if err := checkName(e, ".name", w.GetName()); err != nil {
				return under(err, f+".weighted_clusters.clusters["+strconv.Itoa(i)+"]")
			}
			sum += uint64(w.GetWeight().GetValue())
			out.Clusters = append(out.Clusters, WeightedCluster{Name: w.GetName(), Weight: w.GetWeight().GetValue()})
		}
		if sum == 0 {
			return e.at(f+".weighted_clusters", "weights sum to 0")
		}
		if sum > 1<<32-1 {
			return e.at(f+".weighted_clusters", "weights sum exceeds uint32")
		}
	case nil:
		return e.at(f, "one of cluster or weighted_clusters is required")
	default:
		return e.at(f, "unsupported cluster specifier %s", oneofName(c))
	}
	// No timeout means the sidecar's default (Envoy's is 15s), applied when the
	// route is compiled; an explicit 0 disables it, as in Envoy.
	t, err := duration(e, f+".timeout", a.GetTimeout(), 0)
	if err != nil {
		return err
	}
	out.Timeout, out.DefaultTimeout = t, a.GetTimeout() == nil
	if rp := a.GetRetryPolicy(); rp != nil {
		p := &RetryPolicy{NumRetries: 1}
		if rp.GetNumRetries() != nil {
			p.NumRetries = rp.GetNumRetries().GetValue()
		}
		if p.NumRetries > MaxRetries {
			return e.at(f+".retry_policy.num_retries", "%d, limit %d", p.NumRetries, MaxRetries)
		}
		for _, c := range strings.Split(rp.GetRetryOn(), ",") {
			c = strings.TrimSpace(c)
			if c == "" {
				continue
			}
			if !knownRetryOn[c] {
				return e.at(f+".retry_policy.retry_on", "unknown condition %q", c)
			}
			p.RetryOn = append(p.RetryOn, c)
		}
		pt, err := duration(e, f+".retry_policy.per_try_timeout", rp.GetPerTryTimeout(), 0)
		if err != nil {
			return err
		}
		p.PerTryTimeout = pt
		if err := decodeBackoff(e, f+".retry_policy.retry_back_off", rp.GetRetryBackOff(), p); err != nil {
			return err
		}
		out.Retry = p
	}
	for i, h := range a.GetHashPolicy() {
		hf := fmt.Sprintf("%s.hash_policy[%d]", f, i)
		switch {
		case h.GetHeader() != nil:
			if h.GetHeader().GetHeaderName() == "" {
				return e.at(hf+".header.header_name", "must not be empty")
			}
			out.Hash = append(out.Hash, HashPolicy{Header: lower(h.GetHeader().GetHeaderName())})
		case h.GetConnectionProperties() != nil:
			out.Hash = append(out.Hash, HashPolicy{SourceIP: h.GetConnectionProperties().GetSourceIp()})
		default:
			return e.at(hf, "only header and connection_properties are supported")
		}
	}
	return nil
}

// decodeBackoff fills p's back-off from bo (nil: Envoy's defaults). As Envoy:
// base_interval is required and positive, max_interval (default 10× base) is
// positive and not below the base.
func decodeBackoff(e errs, f string, bo *xdswire.RetryPolicy_RetryBackOff, p *RetryPolicy) error {
	p.BackoffBase, p.BackoffMax = DefaultBackoffBase, DefaultBackoffBase*DefaultBackoffMaxMult
	if bo == nil {
		return nil
	}
	if bo.GetBaseInterval() == nil {
		return e.at(f+".base_interval", "required")
	}
	base, err := duration(e, f+".base_interval", bo.GetBaseInterval(), 0)
	if err != nil {
		return err
	}
	if base <= 0 {
		return e.at(f+".base_interval", "must be positive")
	}
	maxI, err := duration(e, f+".max_interval", bo.GetMaxInterval(), base*DefaultBackoffMaxMult)
	if err != nil {
		return err
	}
	if maxI < base {
		return e.at(f+".max_interval", "%s is below base_interval %s", maxI, base)
	}
	p.BackoffBase, p.BackoffMax = base, maxI
	return nil
}

// knownRetryOn are the Envoy retry_on conditions the proxy understands.
var knownRetryOn = map[string]bool{
	"5xx": true, "gateway-error": true, "reset": true, "connect-failure": true,
	"retriable-4xx": true, "refused-stream": true, "unavailable": true, "cancelled": true,
	"deadline-exceeded": true, "resource-exhausted": true, "internal": true,
}

// under puts prefix in front of the field path of err, a FieldError built with a
// path relative to the element prefix names (see decodeRoutes).
func under(err error, prefix string) error {
	if fe, ok := errors.AsType[*FieldError](err); ok {
		fe.Field = prefix + fe.Field
	}
	return err
}
