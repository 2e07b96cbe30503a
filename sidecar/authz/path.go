package authz

import "strings"

// NormalPath reports whether p (a request target's path; a query or fragment
// is ignored) is in the one form path rules are written for: it starts with
// "/", has no empty, "." or ".." segment, no backslash, and no percent-encoded
// unreserved character, slash or backslash (RFC 3986 §2.3, §6.2.2). Any other
// spelling ("//admin", "/a/../admin", "/%61dmin", "/admin%2Fx") could reach a
// path a rule names while not matching the rule: Envoy (normalize_path, as
// Istio sets it) rewrites such paths; the sidecar refuses them on chains whose
// policies name paths (Engine.UsesPaths) rather than forward a spelling the
// application may read differently. No allocation.
func NormalPath(p string) bool {
	if i := strings.IndexAny(p, "?#"); i >= 0 {
		p = p[:i]
	}
	if p == "" || p[0] != '/' {
		return false
	}
	segStart := 1
	for i := 1; i <= len(p); i++ {
		if i < len(p) {
			switch c := p[i]; c {
			case '\\':
				return false
			case '%':
				if i+2 >= len(p) {
					return false
				}
				h, ok := unhex(p[i+1], p[i+2])
				if !ok || unreserved(h) || h == '/' || h == '\\' {
					return false
				}
				continue
			case '/':
			default:
				continue
			}
		}
		// A segment ends at i.
		switch seg := p[segStart:i]; seg {
		case ".", "..":
			return false
		case "":
			if i < len(p) { // "//"; a trailing "/" is fine
				return false
			}
		}
		segStart = i + 1
	}
	return true
}

func unreserved(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '.' || c == '_' || c == '~'
}

func unhex(a, b byte) (byte, bool) {
	x, ok1 := hexVal(a)
	y, ok2 := hexVal(b)
	return x<<4 | y, ok1 && ok2
}

func hexVal(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// UsesPaths reports whether any policy of e (enforced or dry run) has a path
// permission: requests on its chain must have a NormalPath.
func (e *Engine) UsesPaths() bool { return e != nil && e.paths }

func permissionsUsePaths(ps []Permission) bool {
	for i := range ps {
		if ps[i].Kind == PermissionPath || permissionsUsePaths(ps[i].Rules) {
			return true
		}
	}
	return false
}
