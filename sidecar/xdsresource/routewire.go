package xdsresource

import (
	"time"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/types/known/durationpb"
)

// The fast path of RDS decoding (issue 7, activation at size). A route
// configuration of 1,000 Services × 10 rules is one 1.2 MB resource, resent
// whole when any rule changes; decoding it through proto.Unmarshal into the
// trimmed messages and then into RouteConfig cost most of an activation (some
// 15 allocations per route: each message, each oneof wrapper, each string).
// fastRouteConfig reads the wire bytes straight into RouteConfig when they
// have the shape pilot generates: virtual hosts of domains and routes; a route
// of a name, a prefix or exact path, header matchers (exact, prefix, suffix,
// contains, present; invert) and an action of one cluster and a timeout. Every
// string that repeats (route names, paths, header names and values, cluster
// names) is allocated once per configuration, and routes, header matchers and
// domains come from a few shared backing arrays.
//
// It decides nothing on its own: on anything else (another field, a wire type
// or a repeated singular field it does not expect, invalid UTF-8, a value the
// checks refuse) it gives up and the reference path (unmarshal, then
// decodeRouteConfig) decodes the resource, with its errors, field paths and
// proto semantics (unknown fields ignored, last value wins, messages merged).
// When it succeeds its result is the reference path's: FuzzRouteWire checks
// that on every input, and the same checks (checkName, checkDomain, duration
// and the limits) run on the values.
func fastRouteConfig(b []byte) (*RouteConfig, bool) {
	d := routeWire{single: make(singleClusters), strs: make(map[string]string), lowered: make(map[string]string)}
	return d.config(b)
}

// routeWire is one configuration's decoding state.
type routeWire struct {
	single  singleClusters
	strs    map[string]string // interned strings by their bytes
	lowered map[string]string // header names by their bytes, lower-cased
	// Backing arrays the slices of the configuration are cut from.
	routes  []Route
	headers []HeaderMatch
	domains []string
}

// field reads one field of a message: its number and wire type, and its value
// (varint) or payload (length-delimited). Other wire types are not expected.
func field(b []byte) (num protowire.Number, typ protowire.Type, v uint64, p, rest []byte, ok bool) {
	num, typ, n := protowire.ConsumeTag(b)
	if n < 0 {
		return 0, 0, 0, nil, nil, false
	}
	b = b[n:]
	switch typ {
	case protowire.VarintType:
		v, n = protowire.ConsumeVarint(b)
	case protowire.BytesType:
		p, n = protowire.ConsumeBytes(b)
	default:
		return 0, 0, 0, nil, nil, false
	}
	if n < 0 {
		return 0, 0, 0, nil, nil, false
	}
	return num, typ, v, p, b[n:], true
}

// str is b as an interned string; false when it is not UTF-8 (proto3 refuses).
func (d *routeWire) str(b []byte) (string, bool) {
	if s, ok := d.strs[string(b)]; ok {
		return s, true
	}
	if !utf8.Valid(b) {
		return "", false
	}
	s := string(b)
	d.strs[s] = s
	return s, true
}

// headerName is b lower-cased, interned.
func (d *routeWire) headerName(b []byte) (string, bool) {
	if s, ok := d.lowered[string(b)]; ok {
		return s, true
	}
	if !utf8.Valid(b) {
		return "", false
	}
	s := lower(string(b))
	d.lowered[string(b)] = s
	return s, true
}

// cut returns a slice of length 0 and capacity n from *backing, which is
// replaced by a new array (twice the last, at least n) when it has no room.
func cut[T any](backing *[]T, n int) []T {
	s := *backing
	if cap(s)-len(s) < n {
		s = make([]T, 0, max(n, min(2*cap(s), 4096), 16))
	}
	*backing = s[:len(s)+n]
	return s[len(s) : len(s) : len(s)+n]
}

func (d *routeWire) config(b []byte) (*RouteConfig, bool) {
	var name []byte
	hasName, nvh := false, 0
	for rest := b; len(rest) > 0; {
		num, typ, _, p, r, ok := field(rest)
		if !ok || typ != protowire.BytesType {
			return nil, false
		}
		switch num {
		case 1:
			if hasName {
				return nil, false
			}
			name, hasName = p, true
		case 2:
			nvh++
		default:
			return nil, false
		}
		rest = r
	}
	if nvh > MaxVirtualHosts {
		return nil, false
	}
	n, ok := d.str(name)
	if !ok || checkName(errs{}, "", n) != nil {
		return nil, false
	}
	rc := &RouteConfig{Name: n, VirtualHosts: make([]VirtualHost, 0, nvh)}
	domains := make(map[string]struct{}, min(8*nvh, 1<<16))
	for rest := b; len(rest) > 0; {
		num, _, _, p, r, _ := field(rest) // read above
		rest = r
		if num != 2 {
			continue
		}
		vh, ok := d.virtualHost(p, domains)
		if !ok {
			return nil, false
		}
		rc.VirtualHosts = append(rc.VirtualHosts, vh)
	}
	return rc, true
}

func (d *routeWire) virtualHost(b []byte, seen map[string]struct{}) (VirtualHost, bool) {
	var v VirtualHost
	hasName, ndom, nroutes := false, 0, 0
	for rest := b; len(rest) > 0; {
		num, typ, _, p, r, ok := field(rest)
		if !ok || typ != protowire.BytesType {
			return v, false
		}
		switch num {
		case 1:
			if hasName {
				return v, false
			}
			n, ok := d.str(p)
			if !ok {
				return v, false
			}
			v.Name, hasName = n, true
		case 2:
			ndom++
		case 3:
			nroutes++
		default:
			return v, false
		}
		rest = r
	}
	if ndom == 0 || ndom > MaxDomains || nroutes > MaxRoutes {
		return v, false
	}
	v.Domains = cut(&d.domains, ndom)
	if nroutes == 0 {
		v.Routes = []Route{}
	} else {
		v.Routes = cut(&d.routes, nroutes)
	}
	for rest := b; len(rest) > 0; {
		num, _, _, p, r, _ := field(rest) // read above
		rest = r
		switch num {
		case 2:
			if !utf8.Valid(p) {
				return v, false
			}
			dom := lower(string(p))
			if checkDomain(dom) != nil {
				return v, false
			}
			if _, dup := seen[dom]; dup {
				return v, false
			}
			seen[dom] = struct{}{}
			v.Domains = append(v.Domains, dom)
		case 3:
			rt, ok := d.route(p)
			if !ok {
				return v, false
			}
			v.Routes = append(v.Routes, rt)
		}
	}
	return v, true
}

func (d *routeWire) route(b []byte) (Route, bool) {
	var out Route
	var hasName, hasMatch, hasAction bool
	for len(b) > 0 {
		num, typ, _, p, rest, ok := field(b)
		if !ok || typ != protowire.BytesType {
			return out, false
		}
		switch {
		case num == 14 && !hasName:
			if out.Name, ok = d.str(p); !ok {
				return out, false
			}
			hasName = true
		case num == 1 && !hasMatch:
			if out.Match, ok = d.match(p); !ok {
				return out, false
			}
			hasMatch = true
		case num == 2 && !hasAction:
			if !d.action(p, &out) {
				return out, false
			}
			hasAction = true
		default:
			return out, false
		}
		b = rest
	}
	return out, hasMatch && hasAction
}

func (d *routeWire) match(b []byte) (RouteMatch, bool) {
	rm := RouteMatch{CaseSensitive: true}
	hasPath, nh := false, 0
	for rest := b; len(rest) > 0; {
		num, typ, _, p, r, ok := field(rest)
		if !ok || typ != protowire.BytesType {
			return rm, false
		}
		switch {
		case (num == 1 || num == 2) && !hasPath:
			if rm.Path, ok = d.str(p); !ok {
				return rm, false
			}
			rm.PathKind, hasPath = PathPrefix, true
			if num == 2 {
				rm.PathKind = PathExact
			}
		case num == 6:
			nh++
		default:
			return rm, false
		}
		rest = r
	}
	if !hasPath || nh > MaxHeaderMatchers {
		return rm, false
	}
	if nh == 0 {
		return rm, true
	}
	rm.Headers = cut(&d.headers, nh)
	for rest := b; len(rest) > 0; {
		num, _, _, p, r, _ := field(rest) // read above
		rest = r
		if num != 6 {
			continue
		}
		hm, ok := d.header(p)
		if !ok {
			return rm, false
		}
		rm.Headers = append(rm.Headers, hm)
	}
	return rm, true
}

// legacyKind is the kind of a HeaderMatcher's legacy string specifier, by its
// field number (exact_match, prefix_match, suffix_match, contains_match).
func legacyKind(num protowire.Number) (StringKind, bool) {
	switch num {
	case 4:
		return StringExact, true
	case 9:
		return StringPrefix, true
	case 10:
		return StringSuffix, true
	case 12:
		return StringContains, true
	}
	return 0, false
}

// patternKind is the kind of a StringMatcher's string pattern, by its field
// number (exact, prefix, suffix, contains).
func patternKind(num protowire.Number) (StringKind, bool) {
	switch num {
	case 1:
		return StringExact, true
	case 2:
		return StringPrefix, true
	case 3:
		return StringSuffix, true
	case 7:
		return StringContains, true
	}
	return 0, false
}

func (d *routeWire) header(b []byte) (HeaderMatch, bool) {
	var hm HeaderMatch
	var hasName, hasSpec, hasInvert bool
	hm.Kind = StringPresent // Envoy: no specifier means "present"
	present := true
	for len(b) > 0 {
		num, typ, v, p, rest, ok := field(b)
		if !ok {
			return hm, false
		}
		b = rest
		k, legacy := legacyKind(num)
		switch {
		case typ == protowire.BytesType && num == 1 && !hasName:
			if hm.Name, ok = d.headerName(p); !ok {
				return hm, false
			}
			hasName = true
		case typ == protowire.BytesType && legacy && !hasSpec:
			if hm.Value, ok = d.str(p); !ok {
				return hm, false
			}
			hm.Kind, hasSpec = k, true
		case typ == protowire.BytesType && num == 13 && !hasSpec:
			if hm.Kind, hm.Value, ok = d.stringMatcher(p); !ok {
				return hm, false
			}
			hasSpec = true
		case typ == protowire.VarintType && num == 7 && !hasSpec:
			present, hasSpec = protowire.DecodeBool(v), true
		case typ == protowire.VarintType && num == 8 && !hasInvert:
			hm.Invert, hasInvert = protowire.DecodeBool(v), true
		default:
			return hm, false
		}
	}
	if hm.Name == "" {
		return hm, false
	}
	if hm.Kind == StringPresent && !present {
		hm.Invert = !hm.Invert
	}
	return hm, true
}

func (d *routeWire) stringMatcher(b []byte) (StringKind, string, bool) {
	var kind StringKind
	var val string
	var hasPattern, hasIgnore bool
	for len(b) > 0 {
		num, typ, v, p, rest, ok := field(b)
		if !ok {
			return 0, "", false
		}
		b = rest
		k, pattern := patternKind(num)
		switch {
		case typ == protowire.BytesType && pattern && !hasPattern:
			if val, ok = d.str(p); !ok {
				return 0, "", false
			}
			kind, hasPattern = k, true
		case typ == protowire.VarintType && num == 6 && !hasIgnore:
			if protowire.DecodeBool(v) {
				return 0, "", false // refused by the reference path
			}
			hasIgnore = true
		default:
			return 0, "", false
		}
	}
	return kind, val, hasPattern
}

func (d *routeWire) action(b []byte, out *Route) bool {
	var hasCluster, hasTimeout bool
	for len(b) > 0 {
		num, typ, _, p, rest, ok := field(b)
		if !ok || typ != protowire.BytesType {
			return false
		}
		b = rest
		switch {
		case num == 1 && !hasCluster:
			c, ok := d.str(p)
			if !ok || checkName(errs{}, "", c) != nil {
				return false
			}
			out.Clusters, hasCluster = d.single.of(c), true
		case num == 8 && !hasTimeout:
			t, ok := wireDuration(p)
			if !ok {
				return false
			}
			out.Timeout, hasTimeout = t, true
		default:
			return false
		}
	}
	out.DefaultTimeout = !hasTimeout
	return hasCluster
}

// wireDuration reads a google.protobuf.Duration and checks it as duration does.
func wireDuration(b []byte) (time.Duration, bool) {
	var pd durationpb.Duration
	var hasSec, hasNanos bool
	for len(b) > 0 {
		num, typ, v, _, rest, ok := field(b)
		if !ok || typ != protowire.VarintType {
			return 0, false
		}
		b = rest
		switch {
		case num == 1 && !hasSec:
			pd.Seconds, hasSec = int64(v), true
		case num == 2 && !hasNanos:
			pd.Nanos, hasNanos = int32(v), true
		default:
			return 0, false
		}
	}
	t, err := duration(errs{}, "", &pd, 0)
	return t, err == nil
}
